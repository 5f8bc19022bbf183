//! Parser robustness: arbitrary bytes and strings into the CPU list and mask parsers and into
//! every file the sysfs reader opens. Nothing may panic; whatever parses must resolve into a
//! consistent topology. Case counts follow proptest's defaults (`PROPTEST_CASES` raises them).

use std::fs;
use std::path::Path;

use nodetopo_engine::{sysfs, CpuSet};
use proptest::prelude::*;

/// Content for one sysfs file: usually plausible, sometimes arbitrary bytes.
fn content(plausible: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::sample::select(plausible).prop_map(|s| s.as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => "[0-9a-fx,\\- \n\0]{0,24}".prop_map(String::into_bytes),
    ]
}

/// File path (relative to the sysfs root) and the strategy for its content.
fn files() -> Vec<(&'static str, BoxedStrategy<Vec<u8>>)> {
    let list = &["0-1", "0", "1", "0,1", "", "0-3", "1-0", "\0\n", "0-1\n\0"][..];
    let mask = &["3", "00000000,00000003", "1", "zz", "", "ffffffff,ffffffff"][..];
    let int = &["0", "1", "-1", "8442", "x", ""][..];
    vec![
        ("devices/system/cpu/online", content(list).boxed()),
        (
            "devices/system/cpu/cpu0/online",
            content(&["1", "0", ""]).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/online",
            content(&["1", "0"]).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/topology/physical_package_id",
            content(int).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/topology/physical_package_id",
            content(int).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/topology/thread_siblings_list",
            content(list).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/topology/thread_siblings",
            content(mask).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/topology/core_id",
            content(int).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/level",
            content(&["3", "2", "", "300"]).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/type",
            content(&["Unified", "Data", "Instruction", "Weird"]).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/id",
            content(int).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/size",
            content(&["32K", "30720K", "1M", "K", "99999999999999999999G"]).boxed(),
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/shared_cpu_list",
            content(list).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/cache/index3/level",
            content(&["3"]).boxed(),
        ),
        (
            "devices/system/cpu/cpu1/cache/index3/shared_cpu_map",
            content(mask).boxed(),
        ),
        ("devices/system/node/online", content(list).boxed()),
        ("devices/system/node/node0/cpulist", content(list).boxed()),
        ("devices/system/node/node1/cpumap", content(mask).boxed()),
        (
            "devices/system/node/node0/distance",
            content(&["10 20", "10", "10 20 30", "ten"]).boxed(),
        ),
        (
            "devices/system/node/node1/distance",
            content(&["20 10", "20", "", "4294967296 1"]).boxed(),
        ),
        (
            "devices/system/node/node0/meminfo",
            content(&[
                "Node 0 MemTotal:  2096684 kB\nNode 0 MemFree: 1 kB\n",
                "Node 0 MemTotal: x kB",
                "MemTotal:",
                "",
            ])
            .boxed(),
        ),
        (
            "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
            content(int).boxed(),
        ),
    ]
}

fn write_tree(root: &Path, contents: &[(bool, Vec<u8>)]) {
    for ((path, _), (present, bytes)) in files().iter().zip(contents) {
        if !present {
            continue;
        }
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }
    // Link-shaped entries (names only matter), as regular files like some copies store them.
    let link = root.join("devices/system/cpu/cpu1/node1");
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    fs::write(link, "../../node/node1").unwrap();
}

fn tree_strategy() -> impl Strategy<Value = Vec<(bool, Vec<u8>)>> {
    files()
        .into_iter()
        .map(|(_, s)| (proptest::bool::weighted(0.8), s))
        .collect::<Vec<_>>()
}

proptest! {
    #[test]
    fn cpuset_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let s = String::from_utf8_lossy(&bytes);
        let _ = CpuSet::parse(&s);
        let _ = CpuSet::parse_hex_mask(&s);
    }

    #[test]
    fn list_syntax_never_panics(s in "[0-9,\\- \t\n\0]{0,48}") {
        if let Ok(set) = CpuSet::parse(&s) {
            // Whatever parses prints canonically and parses back to itself.
            prop_assert_eq!(CpuSet::parse(&set.to_string()).unwrap(), set);
        }
    }

    #[test]
    fn hex_masks_never_panic(s in "[0-9a-fA-F,x \n\0]{0,80}") {
        if let Ok(set) = CpuSet::parse_hex_mask(&s) {
            prop_assert!(set.last().is_none_or(|l| l < 32 * (s.matches(',').count() + 1)));
        }
    }

    #[test]
    fn sysfs_readers_never_panic(contents in tree_strategy()) {
        let tmp = tempfile::tempdir().unwrap();
        write_tree(tmp.path(), &contents);
        match sysfs::discover(tmp.path()) {
            Ok(t) => {
                // Whatever is accepted is consistent: every CPU in exactly one node.
                let mut seen = CpuSet::new();
                for n in t.numa_nodes() {
                    prop_assert!(seen.is_disjoint(&n.cpus));
                    seen = seen.union(&n.cpus);
                }
                prop_assert_eq!(seen, t.all_cpus());
            }
            Err(e) => {
                // Errors say something (a file, or that no CPU is online).
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// Kubernetes quantities (CPU millicores, byte sizes, whole counts): arbitrary and
/// quantity-shaped text never panics, and what parses is consistent across the three
/// readings. Prints how many inputs ran and how many parsed.
#[test]
fn quantity_parsers_never_panic() {
    use nodetopo_engine::quantity;
    use proptest::test_runner::{Config, TestRunner};
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = prop_oneof![
        "[0-9]{0,25}(\\.[0-9]{0,12})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]{1,3}|E-?[0-9]{1,3})?",
        "[-+]?[0-9.eEkKmMiGTP]{0,30}",
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ];
    let (runs, parsed) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    runner
        .run(&strategy, |s| {
            runs.set(runs.get() + 1);
            let millis = quantity::parse_millis(&s);
            let units = quantity::parse_units(&s);
            let count = quantity::parse_count(&s);
            if millis.is_ok() || units.is_ok() || count.is_ok() {
                parsed.set(parsed.get() + 1);
            }
            // A whole count is also a valid size of the same value.
            if let Ok(n) = count {
                prop_assert_eq!(units.ok(), Some(n));
            }
            Ok(())
        })
        .expect("quantity parsers");
    println!(
        "parser fuzz: quantity: {} inputs, {} parsed, 0 panics",
        runs.get(),
        parsed.get()
    );
}
