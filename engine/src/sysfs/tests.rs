//! Small hand-written trees for the rules the vendored machines do not exercise.

use std::fs;
use std::path::Path;

use super::*;

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join("devices/system").join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Two cores of two threads (0,2 / 1,3), one package, files as given by `extra`.
fn base(root: &Path) {
    write(root, "cpu/online", "0-3\n");
    for cpu in 0..4 {
        let t = format!("cpu/cpu{cpu}/topology");
        write(root, &format!("{t}/physical_package_id"), "0\n");
        let sib = if cpu % 2 == 0 { "0,2" } else { "1,3" };
        write(root, &format!("{t}/thread_siblings_list"), sib);
    }
}

#[test]
fn no_node_directory_means_one_node_0_without_distances() {
    let tmp = tempfile::tempdir().unwrap();
    base(tmp.path());
    let t = discover(tmp.path()).unwrap();
    assert_eq!(t.numa_nodes().len(), 1);
    assert_eq!(t.numa_nodes()[0].cpus.to_string(), "0-3");
    assert_eq!(t.numa_nodes()[0].distances, None);
    // No caches at all: the socket is the uncore cache.
    assert_eq!(t.uncore_caches().len(), 1);
    assert_eq!(t.uncore_caches()[0].level, 0);
    assert_eq!(t.cpu(2).unwrap().core, 0);
}

#[test]
fn without_sibling_files_cores_group_by_package_die_and_core_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(root, "cpu/online", "0-3");
    for (cpu, die, core) in [(0, 0, 0), (1, 1, 0), (2, 0, 0), (3, 1, 0)] {
        let t = format!("cpu/cpu{cpu}/topology");
        write(root, &format!("{t}/physical_package_id"), "0");
        write(root, &format!("{t}/die_id"), &die.to_string());
        write(root, &format!("{t}/core_id"), &core.to_string());
    }
    let t = discover(root).unwrap();
    let cores: Vec<usize> = t.cpus().iter().map(|c| c.core).collect();
    assert_eq!(cores, vec![0, 1, 0, 1]);
}

#[test]
fn memory_hugepages_and_l4() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    base(root);
    write(root, "node/node0/cpulist", "0-3\n");
    write(root, "node/node0/distance", "10\n");
    write(
        root,
        "node/node0/meminfo",
        "Node 0 MemTotal:       1024 kB\nNode 0 MemFree:        512 kB\n",
    );
    write(
        root,
        "node/node0/hugepages/hugepages-2048kB/nr_hugepages",
        "16\n",
    );
    write(
        root,
        "node/node0/hugepages/hugepages-1048576kB/nr_hugepages",
        "2\n",
    );
    for cpu in 0..4 {
        let c = format!("cpu/cpu{cpu}/cache");
        for (idx, level, ty) in [(0, 1, "Data"), (1, 1, "Instruction"), (2, 3, "Unified")] {
            write(root, &format!("{c}/index{idx}/level"), &level.to_string());
            write(root, &format!("{c}/index{idx}/type"), ty);
        }
        write(root, &format!("{c}/index2/shared_cpu_list"), "0-3");
        write(root, &format!("{c}/index2/size"), "8192K");
        write(root, &format!("{c}/index3/level"), "4");
        write(root, &format!("{c}/index3/type"), "Unified");
        write(root, &format!("{c}/index3/shared_cpu_list"), "0-3");
    }
    let m = scan(root).unwrap();
    assert_eq!(m.cpus[0].llc.as_ref().unwrap().level, 4);
    assert_eq!(m.cpus[0].l3.as_ref().unwrap().size_bytes, Some(8 << 20));
    let t = m.to_topology().unwrap();
    let n = &t.numa_nodes()[0];
    assert_eq!(n.memory_bytes, Some(1024 * 1024));
    assert_eq!(n.hugepages, vec![(2048, 16), (1048576, 2)]);
    assert_eq!(n.distances, Some(vec![10]));
    // The L3, not the L4, is the uncore cache; without an id file it is named after CPU 0.
    assert_eq!(t.uncore_caches().len(), 1);
    assert_eq!(
        (t.uncore_caches()[0].id, t.uncore_caches()[0].level),
        (0, 3)
    );
}

#[test]
fn ambiguous_cache_ids_fall_back_to_derived_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    base(root);
    for cpu in 0..4 {
        let c = format!("cpu/cpu{cpu}/cache/index3");
        write(root, &format!("{c}/level"), "3");
        let shared = if cpu < 2 { "0-1" } else { "2-3" };
        write(root, &format!("{c}/shared_cpu_list"), shared);
        // Both instances claim id 7: the ids cannot be trusted.
        write(root, &format!("{c}/id"), "7");
    }
    let t = discover(root).unwrap();
    let ids: Vec<usize> = t.uncore_caches().iter().map(|u| u.id).collect();
    assert_eq!(ids, vec![0, 2]);
}

#[test]
fn errors_name_file_and_content() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    base(root);
    write(root, "node/node0/cpulist", "0-3");
    write(root, "node/node0/meminfo", "Node 0 MemTotal: lots kB\n");
    let e = discover(root).unwrap_err().to_string();
    assert!(e.contains("node0/meminfo") && e.contains("lots"), "{e}");

    write(root, "node/node0/meminfo", "Node 0 MemTotal: 1 kB\n");
    write(root, "node/node0/distance", "10");
    write(root, "node/node1/cpulist", "");
    write(root, "node/node1/distance", "20 10");
    let e = discover(root).unwrap_err().to_string();
    assert!(e.contains("node1/distance") && e.contains("columns"), "{e}");

    write(root, "cpu/online", "0-3,zz");
    let e = discover(root).unwrap_err().to_string();
    assert!(e.contains("cpu/online") && e.contains("zz"), "{e}");
}

/// `discover`'s error as text, with the temp root replaced by `ROOT`.
fn error_of(root: &Path) -> String {
    let e = discover(root).expect_err("inconsistent tree");
    e.to_string().replace(&root.display().to_string(), "ROOT")
}

#[test]
fn online_list_naming_cpus_without_directories_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    base(tmp.path());
    write(tmp.path(), "cpu/online", "0-5\n");
    assert_eq!(
        error_of(tmp.path()),
        "inconsistent ROOT/devices/system/cpu/online: names CPUs 4-5 that have no cpuN directory (4 directories found)"
    );
    // A million CPUs on a four-CPU tree: refused the same way, without building them.
    write(tmp.path(), "cpu/online", "0-1048575\n");
    assert!(error_of(tmp.path()).contains("names CPUs 4-1048575"));
}

#[test]
fn asymmetric_thread_siblings_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    base(root);
    // cpu0 says {0,2}; cpu1 says {1,2}: cpu 2 would join a three-thread core.
    write(root, "cpu/cpu1/topology/thread_siblings_list", "1-2");
    assert_eq!(
        error_of(root),
        "inconsistent ROOT/devices/system/cpu/cpu1/topology/thread_siblings_list: cpu1's thread siblings 1-2 include cpu 2, which ROOT/devices/system/cpu/cpu0/topology/thread_siblings_list places in another core (0,2)"
    );
}

#[test]
fn invalid_distances_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    base(root);
    write(root, "node/node0/cpulist", "0-1\n");
    write(root, "node/node1/cpulist", "2-3\n");
    write(root, "node/node0/distance", "0 20\n");
    write(root, "node/node1/distance", "20 10\n");
    assert_eq!(
        error_of(root),
        "inconsistent ROOT/devices/system/node/node0/distance: distance to itself is 0, expected 10"
    );
    write(root, "node/node0/distance", "10 20\n");
    write(root, "node/node1/distance", "5 10\n");
    assert_eq!(
        error_of(root),
        "inconsistent ROOT/devices/system/node/node1/distance: distance to node 0 is 5, closer than the node to itself (10)"
    );
    write(root, "node/node1/distance", "20 10\n");
    assert_eq!(discover(root).unwrap().numa_distance(0, 1), Some(20));
}

#[test]
fn a_damaged_l3_list_is_refused_instead_of_renumbering_caches() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Two L3 instances, ids 7 (cpus 0,2) and 9 (cpus 1,3).
    base(root);
    for cpu in 0..4 {
        let c = format!("cpu/cpu{cpu}/cache/index3");
        write(root, &format!("{c}/level"), "3");
        write(root, &format!("{c}/type"), "Unified");
        let (id, list) = if cpu % 2 == 0 {
            ("7", "0,2")
        } else {
            ("9", "1,3")
        };
        write(root, &format!("{c}/id"), id);
        write(root, &format!("{c}/shared_cpu_list"), list);
    }
    let ids: Vec<usize> = discover(root)
        .unwrap()
        .uncore_caches()
        .iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(ids, [7, 9]);
    // cpu0's list is damaged ("0" alone): cpu2 then reads its own "0,2". Before, the id 7
    // became ambiguous and cache 9 was renumbered to 1; now the contradiction is an error.
    write(root, "cpu/cpu0/cache/index3/shared_cpu_list", "0");
    assert_eq!(
        error_of(root),
        "inconsistent ROOT/devices/system/cpu/cpu2/cache/index3/shared_cpu_list: lists online CPUs 0,2, which overlap but differ from 0 listed by ROOT/devices/system/cpu/cpu0/cache/index3/shared_cpu_list (a damaged cache sharing list)"
    );
}
