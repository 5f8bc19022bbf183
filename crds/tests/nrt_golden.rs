//! Golden NodeResourceTopology objects for three real machines (vendored sysfs trees),
//! before and after a fixed set of admissions, checked in under tests/data/nrt/.
//!
//! - intel-skylakesp-20c-2s-snc2: 2 sockets, SNC2 (4 NUMA nodes, L3 shared by two nodes),
//!   SMT; static policy with full-pcpus-only, 2 reserved CPUs, single-numa-node / container;
//! - amd-bulldozer-6272-4s-8n: 4 sockets, 8 NUMA nodes with three distance classes; static
//!   policy, reserved "0-1", restricted / pod scope;
//!   with SR-IOV VFs on every NUMA node and a GPU (device resources per zone, some
//!   assigned after the admissions);
//! - amd-ryzen5-1600: one NUMA node, two L3 caches (L3 child zones); static policy with
//!   prefer-align-cpus-by-uncorecache, 1 reserved CPU, topology manager none.
//!
//! `NODETOPO_UPDATE_GOLDEN=1` rewrites the files (review the diff before committing).

mod nrt_support;

use std::path::{Path, PathBuf};

use nodetopo_crds::nrt::fingerprint::{self, PodFingerprint};
use nodetopo_crds::nrt::NodeResourceTopology;
use nodetopo_engine::cpumanager::ReservedCpus;
use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
use nrt_support::{add_devices, machine, pod, static_config, NodeState};

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nrt")
        .join(format!("{name}.json"))
}

fn check_golden(name: &str, got: &NodeResourceTopology) {
    let text = serde_json::to_string_pretty(got).expect("serialises") + "\n";
    let path = golden_path(name);
    if std::env::var("NODETOPO_UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("rewrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with NODETOPO_UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    // Compared as JSON values (the file must also parse back into the type).
    let want_obj: NodeResourceTopology =
        serde_json::from_str(&want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &want_obj,
        got,
        "{name}: object differs from {}\n--- got:\n{text}",
        path.display()
    );
}

struct Case {
    machine: &'static str,
    state: NodeState,
    pods: Vec<nodetopo_engine::Pod>,
    /// Device-plugin devices the kubelet reports (resource, id prefix, count, NUMA nodes).
    devices: Vec<(&'static str, &'static str, usize, Vec<usize>)>,
    /// Devices assigned to containers with the admissions (resource, id).
    assign: Vec<(&'static str, &'static str)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            machine: "intel-skylakesp-20c-2s-snc2",
            state: NodeState::new(
                machine("intel-skylakesp-20c-2s-snc2"),
                static_config(
                    ReservedCpus::Count(2),
                    &["full-pcpus-only"],
                    TmPolicy::SingleNumaNode,
                    TmScope::Container,
                ),
            ),
            pods: vec![
                pod("default", "db-0", &[8000]),
                pod("default", "web-0", &[2000, 500]),
                pod("batch", "job-1", &[4000, 2000]),
                // 3 CPUs: refused under full-pcpus-only (SMTAlignmentError), holds nothing.
                pod("batch", "odd-0", &[3000]),
                pod("ml", "trainer-0", &[16000]),
            ],
            // SR-IOV VFs on every NUMA node, a GPU on node 1, one device without topology.
            devices: vec![
                ("intel.com/sriov_netdevice", "vf-a", 2, vec![0]),
                ("intel.com/sriov_netdevice", "vf-b", 2, vec![1]),
                ("intel.com/sriov_netdevice", "vf-c", 2, vec![2]),
                ("intel.com/sriov_netdevice", "vf-d", 2, vec![3]),
                ("nvidia.com/gpu", "gpu", 1, vec![1]),
                ("example.com/dongle", "d", 1, vec![]),
            ],
            assign: vec![
                ("intel.com/sriov_netdevice", "vf-a0"),
                ("intel.com/sriov_netdevice", "vf-c1"),
                ("nvidia.com/gpu", "gpu0"),
            ],
        },
        Case {
            machine: "amd-bulldozer-6272-4s-8n",
            state: NodeState::new(
                machine("amd-bulldozer-6272-4s-8n"),
                static_config(
                    ReservedCpus::Explicit(nrt_support::cpus("0-1")),
                    &[],
                    TmPolicy::Restricted,
                    TmScope::Pod,
                ),
            ),
            pods: vec![
                pod("default", "a", &[4000, 2000]),
                pod("default", "b", &[8000]),
                pod("tenant-x", "c", &[12000]),
                pod("tenant-x", "d", &[1000, 1000, 1000]),
            ],
            devices: vec![],
            assign: vec![],
        },
        Case {
            machine: "amd-ryzen5-1600",
            state: NodeState::new(
                machine("amd-ryzen5-1600"),
                static_config(
                    ReservedCpus::Count(1),
                    &["prefer-align-cpus-by-uncorecache"],
                    TmPolicy::None,
                    TmScope::Container,
                ),
            ),
            pods: vec![
                pod("default", "game-0", &[4000]),
                pod("default", "enc-0", &[2000, 1000]),
                pod("default", "shared-0", &[1500]),
            ],
            devices: vec![],
            assign: vec![],
        },
    ]
}

#[test]
fn golden_objects_for_three_machines() {
    let mut objects = 0;
    let mut admitted = 0;
    let mut rejected = 0;
    let mut devices = 0;
    for mut c in cases() {
        for (resource, prefix, count, nodes) in &c.devices {
            add_devices(&mut c.state.devices, resource, prefix, *count, nodes);
            devices += count;
        }
        let before = c.state.nrt(c.machine);
        check_golden(&format!("{}.before", c.machine), &before);
        for p in &c.pods {
            if c.state.admit(p) {
                admitted += 1;
            }
        }
        rejected += c.state.rejected;
        for (resource, id) in &c.assign {
            assert!(
                c.state.devices.allocatable[*resource].contains_key(*id),
                "{id} is a device of {resource}"
            );
            c.state
                .devices
                .assigned
                .entry(resource.to_string())
                .or_default()
                .insert(id.to_string());
        }
        let after = c.state.nrt(c.machine);
        check_golden(&format!("{}.after", c.machine), &after);
        if c.machine == "amd-ryzen5-1600" {
            // Issue 27's example: the scheduler plugin hashes every Guaranteed pod, so the
            // shared-pool pod shared-0 (1500m, 1 GiB) counts beside enc-0 and game-0.
            let plugin: PodFingerprint = [
                ("default", "enc-0"),
                ("default", "game-0"),
                ("default", "shared-0"),
            ]
            .into_iter()
            .collect();
            assert_eq!(plugin.sign(), "pfp0v001b10092ea59d7b114");
            assert_eq!(
                after.attribute(fingerprint::ATTRIBUTE),
                Some("pfp0v001b10092ea59d7b114")
            );
        }
        assert_ne!(before, after, "{}: admissions changed nothing", c.machine);
        objects += 2;
    }
    assert!(
        rejected >= 1,
        "the skylake case includes an SMT-refused pod"
    );
    println!(
        "nrt golden: {objects} objects on 3 machines, {admitted} pods admitted, {rejected} refused, {devices} devices"
    );
}
