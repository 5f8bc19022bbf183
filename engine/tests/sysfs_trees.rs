//! Discovery against every vendored real machine (`tests/data/sysfs/<machine>.tar.gz`, see
//! ORIGIN.md there), each checked against its `EXPECTED.json`; plus the decisions the
//! expectations leave open (overlapping and offline NUMA nodes), and a check that the vendored
//! archives still match `../shared/sysfs` when that directory is present.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use nodetopo_engine::sysfs::{self, MachineModel};
use nodetopo_engine::{CpuSet, CpuTopology};
use serde_json::Value;

/// How many machines `shared/sysfs/README.md` lists. The test fails if fewer were run.
const MACHINES: usize = 21;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sysfs")
}

fn archives() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(data_dir())
        .expect("tests/data/sysfs exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    v.sort();
    v
}

fn machine_name(archive: &Path) -> String {
    archive
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string()
}

fn unpack(archive: &Path, into: &Path) {
    let f = fs::File::open(archive).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(f))
        .unpack(into)
        .unwrap_or_else(|e| panic!("unpacking {}: {e}", archive.display()));
}

/// Unpacks one machine and returns (tempdir guard, machine dir).
fn unpack_one(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    unpack(&data_dir().join(format!("{name}.tar.gz")), tmp.path());
    let dir = tmp.path().join(name);
    (tmp, dir)
}

fn set(v: &Value) -> CpuSet {
    CpuSet::parse(v.as_str().expect("cpu list string")).unwrap()
}

fn size_bytes(s: &str) -> u64 {
    let (num, mult) = match s.strip_suffix('K') {
        Some(n) => (n, 1024),
        None => (s, 1),
    };
    num.parse::<u64>().unwrap() * mult
}

/// Checks one machine; returns a description of every mismatch.
fn check_machine(name: &str, dir: &Path) -> Vec<String> {
    let exp: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("EXPECTED.json")).unwrap()).unwrap();
    let sys = dir.join("sys");
    let mut errs = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            errs.push(format!("{name}: {what}"));
        }
    };
    let model: MachineModel = match sysfs::scan(&sys) {
        Ok(m) => m,
        Err(e) => return vec![format!("{name}: scan failed: {e}")],
    };
    let t: CpuTopology = match model.to_topology() {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: discovery failed: {e}")],
    };
    let online = set(&exp["online_cpus"]);
    let all = t.all_cpus();
    check(all == online, format!("online cpus {all} != {online}"));

    // Sockets: the distinct package ids, or (all -1) our rule: socket = NUMA node.
    let sockets = t.ids_of(&all, |c| c.socket);
    if exp["sockets"].is_null() {
        check(
            t.cpus().iter().all(|c| c.socket == c.numa),
            "package ids are -1: sockets should follow NUMA nodes".into(),
        );
    } else {
        let ids: Vec<usize> = exp["package_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        check(sockets == ids, format!("sockets {sockets:?} != {ids:?}"));
        check(
            sockets.len() as u64 == exp["sockets"].as_u64().unwrap(),
            "socket count".into(),
        );
    }

    let cores = t.ids_of(&all, |c| c.core).len() as u64;
    check(
        cores == exp["cores"].as_u64().unwrap(),
        format!("cores {cores} != {}", exp["cores"]),
    );
    check(
        t.declared().num_cores as u64 == cores,
        "declared core count".into(),
    );
    let tpc = t.threads_per_core() as u64;
    check(
        tpc == exp["threads_per_core"].as_u64().unwrap(),
        format!("threads per core {tpc} != {}", exp["threads_per_core"]),
    );

    // NUMA nodes, raw (what the files say) ...
    let exp_nodes = exp["numa_nodes"].as_array().unwrap();
    let raw_ids: Vec<u64> = model.nodes.iter().map(|n| n.id as u64).collect();
    let exp_ids: Vec<u64> = exp_nodes
        .iter()
        .map(|n| n["id"].as_u64().unwrap())
        .collect();
    check(
        raw_ids == exp_ids,
        format!("node dirs {raw_ids:?} != {exp_ids:?}"),
    );
    let mut disjoint_cover = CpuSet::new();
    let mut disjoint = true;
    for en in exp_nodes {
        let id = en["id"].as_u64().unwrap() as usize;
        let cpus = set(&en["cpus"]);
        disjoint &= disjoint_cover.is_disjoint(&cpus);
        disjoint_cover = disjoint_cover.union(&cpus);
        let Some(raw) = model.nodes.iter().find(|n| n.id == id) else {
            continue;
        };
        let got = raw.cpus.intersection(&online);
        check(got == cpus, format!("node{id} cpus {got} != {cpus}"));
        let mem = en.get("mem_kb").and_then(Value::as_u64).map(|k| k * 1024);
        let tn = t.numa_nodes().iter().find(|n| n.id == id);
        check(
            tn.and_then(|n| n.memory_bytes) == mem,
            format!(
                "node{id} memory {:?} != {mem:?}",
                tn.map(|n| n.memory_bytes)
            ),
        );
    }
    // ... and resolved. Where the files give a partition of the online CPUs, the topology's
    // nodes are exactly the files' nodes; otherwise the resolution rules apply (tested
    // machine by machine below) and every CPU still sits in exactly one node.
    let topo_nodes: Vec<(u64, CpuSet)> = t
        .numa_nodes()
        .iter()
        .map(|n| (n.id as u64, n.cpus.clone()))
        .collect();
    if disjoint && disjoint_cover == online {
        let want: Vec<(u64, CpuSet)> = exp_nodes
            .iter()
            .map(|n| (n["id"].as_u64().unwrap(), set(&n["cpus"])))
            .collect();
        check(
            topo_nodes == want,
            format!("numa nodes {topo_nodes:?} != {want:?}"),
        );
    }
    let mut seen = CpuSet::new();
    for (id, cpus) in &topo_nodes {
        check(
            seen.is_disjoint(cpus),
            format!("node{id} overlaps another node"),
        );
        seen = seen.union(cpus);
    }
    check(seen == online, "nodes do not cover the online cpus".into());

    // Distances: expected rows are indexed like the topology's columns here.
    if exp["numa_distances"].is_null() {
        check(
            t.numa_nodes().iter().all(|n| n.distances.is_none()),
            "distances should be unknown".into(),
        );
    } else {
        for (en, row) in exp_nodes
            .iter()
            .zip(exp["numa_distances"].as_array().unwrap())
        {
            let id = en["id"].as_u64().unwrap() as usize;
            let want: Vec<u32> = row
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let got = t
                .numa_nodes()
                .iter()
                .find(|n| n.id == id)
                .and_then(|n| n.distances.clone());
            check(
                got.as_ref() == Some(&want),
                format!("node{id} distances {got:?} != {want:?}"),
            );
        }
    }

    // Last-level caches as scanned: (level, cpus, id, size) per distinct instance.
    type Llc = (u64, String, Option<u64>, Option<u64>);
    let want_llc: BTreeSet<Llc> = exp["llc_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["level"].as_u64().unwrap(),
                set(&g["cpus"]).to_string(),
                g.get("id").and_then(Value::as_u64),
                g.get("size").and_then(Value::as_str).map(size_bytes),
            )
        })
        .collect();
    let got_llc: BTreeSet<Llc> = model
        .cpus
        .iter()
        .filter_map(|c| c.llc.as_ref())
        .map(|l| {
            (
                u64::from(l.level),
                l.cpus.intersection(&online).to_string(),
                l.id,
                l.size_bytes,
            )
        })
        .collect();
    check(
        got_llc == want_llc,
        format!("llc groups {got_llc:?} != {want_llc:?}"),
    );

    // Uncore caches: the L3 instances, or one per socket (level 0) without an L3.
    let uncore: BTreeSet<(u64, String, Option<u64>)> = t
        .uncore_caches()
        .iter()
        .map(|u| (u64::from(u.level), u.cpus.to_string(), Some(u.id as u64)))
        .collect();
    if exp["llc_level"].as_u64() == Some(3) {
        let want: BTreeSet<(u64, String, Option<u64>)> = want_llc
            .iter()
            .map(|(l, c, id, _)| {
                // Without an `id` file the id is the lowest CPU of the group.
                let derived = CpuSet::parse(c).unwrap().first().map(|f| f as u64);
                (*l, c.clone(), id.or(derived))
            })
            .collect();
        check(uncore == want, format!("uncore {uncore:?} != {want:?}"));
    } else {
        let want: BTreeSet<(u64, String, Option<u64>)> = sockets
            .iter()
            .map(|&s| {
                (
                    0,
                    t.cpus_where(|c| c.socket == s).to_string(),
                    Some(s as u64),
                )
            })
            .collect();
        check(uncore == want, format!("uncore {uncore:?} != {want:?}"));
    }
    errs
}

#[test]
fn every_vendored_machine_matches_its_expectations() {
    let tmp = tempfile::tempdir().unwrap();
    let archives = archives();
    let mut errors = Vec::new();
    let mut ran = 0;
    for a in &archives {
        unpack(a, tmp.path());
        let name = machine_name(a);
        let dir = tmp.path().join(&name);
        assert!(
            dir.join("EXPECTED.json").is_file(),
            "{name}: no EXPECTED.json"
        );
        errors.extend(check_machine(&name, &dir));
        ran += 1;
    }
    println!("sysfs trees: ran {ran} machines");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(
        ran >= MACHINES,
        "only {ran} machines found, expected {MACHINES}"
    );
}

#[test]
fn overlapping_nodes_are_resolved_by_the_cpu_links() {
    // Every node's cpulist says 0-7, but cpuK links to nodeK: the links decide.
    let (_tmp, dir) = unpack_one("intel-harpertown-e5472-buggynuma");
    let t = sysfs::discover(&dir.join("sys")).unwrap();
    assert_eq!(t.numa_nodes().len(), 8);
    for n in t.numa_nodes() {
        assert_eq!(n.cpus, CpuSet::from_ids([n.id]), "node{}", n.id);
        assert_eq!(n.distances.as_deref(), Some(&[10u32; 8][..]));
    }
}

#[test]
fn cpus_of_an_offline_node_get_a_synthesised_node_0() {
    let (_tmp, dir) = unpack_one("intel-haswell-e5-2680v3-offline-cpu0-node0");
    let t = sysfs::discover(&dir.join("sys")).unwrap();
    type Node = (usize, String, Option<Vec<u32>>, Option<u64>);
    let nodes: Vec<Node> = t
        .numa_nodes()
        .iter()
        .map(|n| {
            (
                n.id,
                n.cpus.to_string(),
                n.distances.clone(),
                n.memory_bytes,
            )
        })
        .collect();
    assert_eq!(
        nodes,
        vec![
            (
                0,
                "4,6,8,10,12,14,16,18,20".to_string(),
                Some(vec![10, 21]),
                None
            ),
            (
                1,
                "5,7,9,11,13,15,17,19".to_string(),
                Some(vec![21, 10]),
                Some(67108864 * 1024)
            ),
        ]
    );
}

#[test]
fn sparse_ids_and_masks_only() {
    let (_tmp, dir) = unpack_one("amd-magnycours-4s-8n-sparse");
    let t = sysfs::discover(&dir.join("sys")).unwrap();
    let ids: Vec<usize> = t.numa_nodes().iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 33, 34, 45, 72, 73]);
    // core_id repeats within a package, yet each of the 48 CPUs is its own core.
    assert_eq!(t.declared().num_cores, 48);
    assert_eq!(t.uncore_caches().len(), 8);
}

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let (_tmp, dir) = unpack_one("intel-skylake-silver4108-2s");
    let sys = dir.join("sys");
    let f = sys.join("devices/system/cpu/cpu3/topology/thread_siblings_list");
    fs::write(&f, "3,x19\n").unwrap();
    let e = sysfs::discover(&sys).unwrap_err().to_string();
    assert!(e.contains("cpu3/topology/thread_siblings_list"), "{e}");
    assert!(e.contains("x19"), "{e}");

    let (_tmp2, dir) = unpack_one("intel-skylake-silver4108-2s");
    let sys = dir.join("sys");
    let f = sys.join("devices/system/node/node1/distance");
    fs::write(&f, "21 ten\n").unwrap();
    let e = sysfs::discover(&sys).unwrap_err().to_string();
    assert!(e.contains("node1/distance") && e.contains("ten"), "{e}");

    let e = sysfs::discover(&dir.join("no-such-dir")).unwrap_err();
    assert!(matches!(e, sysfs::SysfsError::NoOnlineCpus), "{e}");
}

/// One entry of a machine tree, as discovery sees it. Discovery never follows a link and
/// only uses the names of `cpu/cpuN/nodeK` and `node/nodeK/cpuN` entries, so a link and a
/// regular file holding the link's target (the "flattened" form some copies of the data
/// use) are the same entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Whether a path (relative to the data root) is one of sysfs's `cpu/cpuN/nodeK` or
/// `node/nodeK/cpuN` links.
fn is_link_shaped(rel: &Path) -> bool {
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let numbered = |s: &str, prefix: &str| {
        s.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    match parts.as_slice() {
        [.., kind, dir, name] => {
            (kind == "cpu" && numbered(dir, "cpu") && numbered(name, "node"))
                || (kind == "node" && numbered(dir, "node") && numbered(name, "cpu"))
        }
        _ => false,
    }
}

/// The entry a regular file stands for: a link where the path is link-shaped.
fn file_entry(rel: &Path, bytes: Vec<u8>) -> Entry {
    if is_link_shaped(rel) {
        let text = String::from_utf8_lossy(&bytes);
        Entry::Link(PathBuf::from(text.strip_suffix('\n').unwrap_or(&text)))
    } else {
        Entry::File(bytes)
    }
}

/// Every entry of one archive, by path (the machine directory included).
fn archive_entries(archive: &Path) -> Result<BTreeMap<PathBuf, Entry>, String> {
    let what = |e: std::io::Error| format!("{}: {e}", archive.display());
    let f = fs::File::open(archive).map_err(what)?;
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut out = BTreeMap::new();
    for entry in ar.entries().map_err(what)? {
        let mut entry = entry.map_err(what)?;
        let rel = entry.path().map_err(what)?.into_owned();
        let rel = rel.components().collect::<PathBuf>();
        let e = match entry.header().entry_type() {
            tar::EntryType::Directory => Entry::Dir,
            tar::EntryType::Regular => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(what)?;
                file_entry(&rel, bytes)
            }
            tar::EntryType::Symlink => Entry::Link(
                entry
                    .link_name()
                    .map_err(what)?
                    .ok_or_else(|| format!("{}: symlink without a target", rel.display()))?
                    .into_owned(),
            ),
            other => {
                return Err(format!(
                    "{}: unexpected entry type {other:?}",
                    rel.display()
                ))
            }
        };
        out.insert(rel, e);
    }
    Ok(out)
}

/// Every entry of `root/machine` on disk, by path relative to `root`. Links are read, never
/// followed (real sysfs links form cycles).
fn tree_entries(root: &Path, machine: &str) -> Result<BTreeMap<PathBuf, Entry>, String> {
    let what = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::from(machine)];
    while let Some(rel) = stack.pop() {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path).map_err(|e| what(&path, e))?;
        let ft = meta.file_type();
        let e = if ft.is_symlink() {
            Entry::Link(fs::read_link(&path).map_err(|e| what(&path, e))?)
        } else if ft.is_dir() {
            for child in fs::read_dir(&path).map_err(|e| what(&path, e))? {
                let child = child.map_err(|e| what(&path, e))?;
                stack.push(rel.join(child.file_name()));
            }
            Entry::Dir
        } else if ft.is_file() {
            file_entry(&rel, fs::read(&path).map_err(|e| what(&path, e))?)
        } else {
            return Err(format!(
                "{}: neither file, directory nor link",
                path.display()
            ));
        };
        out.insert(rel, e);
    }
    Ok(out)
}

/// The differences between two entry maps (at most `limit` lines, then a count).
fn differences(
    archive: &BTreeMap<PathBuf, Entry>,
    disk: &BTreeMap<PathBuf, Entry>,
    limit: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (p, a) in archive {
        match disk.get(p) {
            None => out.push(format!("{}: in the archive, not on disk", p.display())),
            Some(d) if d != a => out.push(format!(
                "{}: archive has {}, disk has {}",
                p.display(),
                describe(a),
                describe(d)
            )),
            Some(_) => {}
        }
    }
    for p in disk.keys().filter(|p| !archive.contains_key(*p)) {
        out.push(format!("{}: on disk, not in the archive", p.display()));
    }
    if out.len() > limit {
        let more = out.len() - limit;
        out.truncate(limit);
        out.push(format!("... and {more} more"));
    }
    out
}

fn describe(e: &Entry) -> String {
    match e {
        Entry::Dir => "a directory".into(),
        Entry::File(b) => format!("a {}-byte file", b.len()),
        Entry::Link(t) => format!("a link to {}", t.display()),
    }
}

/// Compares every archive with its machine under `root`; returns (entries compared, problems).
fn compare_with(root: &Path, archives: &[PathBuf]) -> (usize, Vec<String>) {
    let mut compared = 0;
    let mut problems = Vec::new();
    for a in archives {
        let name = machine_name(a);
        let got = archive_entries(a).and_then(|ar| Ok((ar, tree_entries(root, &name)?)));
        match got {
            Ok((ar, disk)) => {
                compared += ar.len();
                problems.extend(
                    differences(&ar, &disk, 10)
                        .into_iter()
                        .map(|d| format!("{name}: {d}")),
                );
            }
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    (compared, problems)
}

/// A skipped check says so where `cargo test` shows it: the harness captures `println!`
/// of passing tests, not writes to the stderr handle.
fn skipped(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// Where `../shared/sysfs` (or `$NODETOPO_SHARED_SYSFS`) exists, every archive must hold
/// exactly its entries, compared as discovery reads them: file contents byte for byte, and
/// the `cpuN/nodeK`, `nodeK/cpuN` links by target, whether either side stores them as
/// symlinks (real sysfs, the upstream dumps) or as regular files holding the target.
#[test]
fn vendored_archives_match_shared_sysfs() {
    let shared = std::env::var_os("NODETOPO_SHARED_SYSFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/sysfs"));
    if !shared.is_dir() {
        skipped(&format!(
            "vendored_archives_match_shared_sysfs: {} not found (set NODETOPO_SHARED_SYSFS)",
            shared.display()
        ));
        return;
    }
    let mut machines: Vec<String> = fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("EXPECTED.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    machines.sort();
    let archives = archives();
    let vendored: Vec<String> = archives.iter().map(|a| machine_name(a)).collect();
    assert_eq!(
        vendored,
        machines,
        "vendored machines differ from {}",
        shared.display()
    );
    let (compared, problems) = compare_with(&shared, &archives);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    println!(
        "vendored archives match {}: {} machines, {compared} entries",
        shared.display(),
        archives.len()
    );
}

/// Rewrites every link-shaped entry under `dir` into the other form: symlinks become regular
/// files holding the target ("flattened"), or regular files holding a target become symlinks.
fn convert_links(root: &Path, to_symlinks: bool) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ft = e.file_type().unwrap();
            let rel = p.strip_prefix(root).unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if is_link_shaped(rel) {
                if to_symlinks && ft.is_file() {
                    let target = fs::read_to_string(&p).unwrap();
                    fs::remove_file(&p).unwrap();
                    std::os::unix::fs::symlink(target.trim_end_matches('\n'), &p).unwrap();
                    n += 1;
                } else if !to_symlinks && ft.is_symlink() {
                    let target = fs::read_link(&p).unwrap();
                    fs::remove_file(&p).unwrap();
                    fs::write(&p, target.to_string_lossy().as_bytes()).unwrap();
                    n += 1;
                }
            }
        }
    }
    n
}

/// The comparison accepts both forms of the data and still sees a changed byte, a changed
/// link target and a missing entry.
#[test]
fn archive_comparison_accepts_both_link_forms_and_finds_differences() {
    // Machines whose archives hold links in both shapes: `../../node/nodeK` symlinks, and
    // regular files holding `.` (amd-opteron865) that upstream dumps have as symlinks.
    let names = ["amd-opteron865-8s-8n-nol3", "intel-skylake-silver4108-2s"];
    let archives: Vec<PathBuf> = names
        .iter()
        .map(|n| data_dir().join(format!("{n}.tar.gz")))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    for a in &archives {
        unpack(a, tmp.path());
    }
    let (unpacked, problems) = compare_with(tmp.path(), &archives);
    assert!(problems.is_empty(), "as unpacked: {problems:?}");
    assert!(unpacked > 1000, "compared only {unpacked} entries");

    let made_links = convert_links(tmp.path(), true);
    assert!(
        made_links >= 16,
        "only {made_links} files turned into links"
    );
    let (_, problems) = compare_with(tmp.path(), &archives);
    assert!(problems.is_empty(), "with real symlinks: {problems:?}");

    let flattened = convert_links(tmp.path(), false);
    assert!(flattened > made_links, "flattened only {flattened}");
    let (_, problems) = compare_with(tmp.path(), &archives);
    assert!(problems.is_empty(), "flattened: {problems:?}");
    println!(
        "archive comparison: {unpacked} entries, {flattened} links, passes as symlinks and flattened"
    );

    let m = tmp
        .path()
        .join("intel-skylake-silver4108-2s/sys/devices/system");
    fs::write(m.join("cpu/cpu3/topology/core_id"), "99\n").unwrap();
    fs::write(m.join("cpu/cpu0/node0"), "../../node/node1").unwrap();
    fs::remove_file(m.join("node/node1/cpulist")).unwrap();
    let (_, problems) = compare_with(tmp.path(), &archives);
    let text = problems.join("\n");
    assert_eq!(problems.len(), 3, "{text}");
    assert!(
        text.contains("cpu3/topology/core_id: archive has a 2-byte file, disk has a 3-byte file"),
        "{text}"
    );
    assert!(text.contains("cpu0/node0: archive has a link to ../../node/node0, disk has a link to ../../node/node1"), "{text}");
    assert!(
        text.contains("node1/cpulist: in the archive, not on disk"),
        "{text}"
    );
}
