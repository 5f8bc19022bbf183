//! Counts and shapes of every preset.

use super::*;
use crate::cpuset::CpuSet;
use crate::report::TopologyReport;

/// (name, cpus, cores, sockets, NUMA nodes, uncore caches, threads per core)
const COUNTS: &[(&str, usize, usize, usize, usize, usize, usize)] = &[
    ("kep-4800-example", 16, 16, 1, 1, 2, 1),
    ("epyc-7702p", 128, 64, 1, 1, 16, 2),
    ("epyc-7303-2p", 64, 32, 2, 2, 4, 2),
    ("epyc-7513-2p", 128, 64, 2, 2, 8, 2),
    ("epyc-9754", 256, 128, 1, 1, 16, 2),
    ("epyc-9754-2p", 512, 256, 2, 2, 32, 2),
    ("epyc-9654-2p-nps2", 192, 192, 2, 4, 24, 1),
    ("epyc-9654-2p-nps4", 384, 192, 2, 8, 24, 2),
    ("epyc-9654-2p-l3-as-numa", 384, 192, 2, 24, 24, 2),
    ("xeon-8490h-2p-snc4", 240, 120, 2, 8, 2, 2),
    ("xeon-8490h-2p-snc2", 240, 120, 2, 4, 2, 2),
    ("xeon-6980p-2p-snc3", 512, 256, 2, 6, 2, 2),
    ("xeon-6-4p-snc3", 576, 288, 4, 12, 4, 2),
    ("core-i7-12850hx", 24, 16, 1, 1, 1, 2),
    ("ampere-altra-128c", 128, 128, 1, 1, 1, 1),
    ("ampere-altra-128c-kep-shape", 128, 128, 1, 1, 16, 1),
    ("graviton3", 64, 64, 1, 1, 1, 1),
    ("synthetic-64-numa", 512, 256, 4, 64, 64, 2),
];

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn every_preset_has_its_counts() {
    assert_eq!(COUNTS.len(), list().len(), "a preset without counts");
    for &(name, cpus, cores, sockets, numa, uncore, tpc) in COUNTS {
        let t = build(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let d = t.declared();
        let got = (
            d.num_cpus,
            d.num_cores,
            d.num_sockets,
            t.numa_nodes().len(),
            t.uncore_caches().len(),
            t.threads_per_core(),
        );
        assert_eq!(got, (cpus, cores, sockets, numa, uncore, tpc), "{name}");
        // Nodes with CPUs partition the CPUs; distance matrices are square and symmetric.
        let n = t.numa_nodes().len();
        for a in t.numa_nodes() {
            let row = a.distances.as_ref().expect("presets publish distances");
            assert_eq!(row.len(), n, "{name}");
            for b in t.numa_nodes() {
                assert_eq!(t.numa_distance(a.id, b.id), t.numa_distance(b.id, a.id));
            }
            assert_eq!(t.numa_distance(a.id, a.id), Some(10), "{name}");
        }
        assert_eq!(d.num_numa_nodes, n, "{name}");
    }
}

#[test]
fn names_are_unique_lowercase_kebab_and_documented() {
    let mut seen = std::collections::BTreeSet::new();
    for p in list() {
        assert!(seen.insert(p.name), "duplicate {}", p.name);
        assert!(
            p.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{}",
            p.name
        );
        assert!(!p.summary.is_empty() && !p.summary.contains('\n'));
        assert!(!p.notes.is_empty());
    }
}

#[test]
fn unknown_names_list_the_valid_ones() {
    let e = build("epyc-9999").unwrap_err().to_string();
    assert!(
        e.contains("epyc-9999") && e.contains("kep-4800-example"),
        "{e}"
    );
    assert!(e.contains("graviton3"), "{e}");
}

#[test]
fn kep_4800_example_has_two_uncore_caches_of_eight() {
    let t = build("kep-4800-example").unwrap();
    let u: Vec<(usize, String)> = t
        .uncore_caches()
        .iter()
        .map(|u| (u.id, u.cpus.to_string()))
        .collect();
    assert_eq!(u, vec![(0, "0-7".into()), (1, "8-15".into())]);
    assert!(t.cpus().iter().all(|c| c.core == c.id));
}

#[test]
fn genoa_l3_ids_follow_the_apic_pattern() {
    let t = build("epyc-9654-2p-nps2").unwrap();
    let uncore_of = |cpu: usize| t.cpu(cpu).unwrap().uncore;
    assert_eq!(uncore_of(0), 0);
    assert_eq!(uncore_of(8), 4);
    assert_eq!(uncore_of(24), 2);
    assert_eq!(uncore_of(95), 9);
    assert_eq!(uncore_of(96), 16);
    assert_eq!(uncore_of(191), 25);
    let nodes: Vec<String> = t.numa_nodes().iter().map(|n| n.cpus.to_string()).collect();
    assert_eq!(nodes, ["0-47", "48-95", "96-143", "144-191"]);
    assert_eq!(t.numa_distance(0, 1), Some(12));
    assert_eq!(t.numa_distance(1, 2), Some(32));

    let t = build("epyc-9654-2p-nps4").unwrap();
    assert_eq!(t.numa_nodes()[0].cpus, set("0-23,192-215"));
    assert_eq!(t.numa_nodes()[7].cpus, set("168-191,360-383"));
    assert_eq!(
        t.ids_of(&t.numa_nodes()[1].cpus, |c| c.uncore),
        vec![2, 6, 10]
    );
    assert_eq!(
        t.ids_of(&t.numa_nodes()[7].cpus, |c| c.uncore),
        vec![17, 21, 25]
    );
    assert_eq!(t.cpu(192).unwrap().core, 0);
}

#[test]
fn l3_as_numa_distances_follow_quadrants() {
    let t = build("epyc-9654-2p-l3-as-numa").unwrap();
    assert_eq!(t.numa_nodes()[0].cpus, set("0-7,192-199"));
    assert_eq!(t.numa_distance(0, 2), Some(11));
    assert_eq!(t.numa_distance(0, 3), Some(12));
    assert_eq!(t.numa_distance(11, 12), Some(32));
    // One L3 per node.
    for n in t.numa_nodes() {
        assert_eq!(t.ids_of(&n.cpus, |c| c.uncore).len(), 1);
    }
}

#[test]
fn snc_nodes_are_smaller_than_the_l3() {
    let t = build("xeon-8490h-2p-snc4").unwrap();
    assert_eq!(t.numa_nodes()[1].cpus, set("15-29,135-149"));
    assert_eq!(t.numa_nodes()[7].cpus, set("105-119,225-239"));
    assert_eq!(t.uncore_caches()[0].cpus, set("0-59,120-179"));
    assert_eq!(t.uncore_caches()[0].level, 3);
    assert_eq!(t.numa_distance(0, 4), Some(21));
    let t = build("xeon-6980p-2p-snc3").unwrap();
    let nodes: Vec<String> = t.numa_nodes().iter().map(|n| n.cpus.to_string()).collect();
    assert_eq!(nodes[0], "0-42,256-298");
    assert_eq!(nodes[2], "86-127,342-383");
    assert_eq!(nodes[5], "214-255,470-511");
}

#[test]
fn hybrid_and_arm_shapes() {
    let t = build("core-i7-12850hx").unwrap();
    assert_eq!(t.cpu(1).unwrap().core, 0);
    assert_eq!(t.cpu(15).unwrap().core, 14);
    assert_eq!(t.cpu(20).unwrap().core, 20);
    let r = TopologyReport::from_topology(&t);
    assert_eq!((r.cores, r.threads_per_core), (16, 2));

    // No L3 in sysfs: the socket is the uncore cache (level 0).
    let t = build("ampere-altra-128c").unwrap();
    assert_eq!(t.uncore_caches()[0].level, 0);
    assert_eq!(t.uncore_caches()[0].cpus, set("0-127"));
    // No id file: the id is derived from the sharing list.
    let t = build("graviton3").unwrap();
    assert_eq!(t.uncore_caches()[0].id, 0);
    assert_eq!(t.uncore_caches()[0].size_bytes, Some(32 << 20));
}

#[test]
fn large_machines_for_benchmarks_and_scaling() {
    let t = build("epyc-9754-2p").unwrap();
    assert_eq!(t.cpus_where(|c| c.socket == 1), set("128-255,384-511"));
    let t = build("synthetic-64-numa").unwrap();
    assert_eq!(t.numa_nodes()[63].cpus, set("252-255,508-511"));
    assert_eq!(t.numa_nodes()[0].memory_bytes, Some(16 << 30));
    assert_eq!(t.numa_distance(0, 3), Some(11));
    assert_eq!(t.numa_distance(0, 4), Some(12));
    assert_eq!(t.numa_distance(0, 16), Some(32));
    let t = build("xeon-6-4p-snc3").unwrap();
    assert_eq!(t.numa_nodes()[3].cpus, set("72-95,360-383"));
}
