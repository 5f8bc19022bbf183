//! The NodeResourceTopology numbers always equal what NodeTopology status says: on real
//! machines, under random configurations, after every step of a random sequence of
//! admissions and removals, each NUMA zone's `cpu` is checked against the status fields the
//! agent publishes from the same state (`topology.numaNodes`, `pools`, `allocations`), and
//! the fingerprint against the scheduler plugin's pod set (every Guaranteed pod on the node,
//! the refused ones included, as the plugin's informer keeps a failed pod until deleted).
//!
//! `NODETOPO_NRT_STEPS` sets the steps per run (default 300); the seed is fixed and printed.

mod nrt_support;

use std::collections::{BTreeMap, BTreeSet};

use nodetopo_crds::nrt::fingerprint::{self, PodFingerprint};
use nodetopo_crds::nrt::NodeResourceTopology;
use nodetopo_crds::PoolsReport;
use nodetopo_engine::admission::{CpuPolicyConfig, NodeConfig};
use nodetopo_engine::cpumanager::ReservedCpus;
use nodetopo_engine::report::TopologyReport;
use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
use nodetopo_engine::{CpuSet, CpuTopology};
use nrt_support::{add_devices, cpus, machine, pod, static_config, NodeState};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn num(s: &str) -> usize {
    s.parse()
        .unwrap_or_else(|e| panic!("quantity {s:?} is not a count: {e}"))
}

/// Every check of one state; returns how many zones were checked.
fn check(
    what: &str,
    topo: &CpuTopology,
    config: &NodeConfig,
    state: &NodeState,
    obj: &NodeResourceTopology,
) -> (usize, usize) {
    // The status fields, built the way the agent builds them.
    let report = TopologyReport::from_topology(topo);
    let p = state.admitter.pools();
    let pools = PoolsReport {
        reserved: p.reserved.to_string(),
        shared: p.shared.to_string(),
        exclusive: p.exclusive.to_string(),
        free: p.free.to_string(),
    };
    let reserved = cpus(&pools.reserved);
    let free = cpus(&pools.free);
    let exclusive = cpus(&pools.exclusive);
    let full_cores =
        matches!(&config.cpu, CpuPolicyConfig::Static { options, .. } if options.full_pcpus_only);
    let policy_none = matches!(config.cpu, CpuPolicyConfig::None);

    let numa_zones: Vec<_> = obj.zones.iter().filter(|z| z.type_ == "Node").collect();
    assert_eq!(
        numa_zones.len(),
        report.numa_nodes.len(),
        "{what}: one zone per NUMA node"
    );
    let mut held_total = 0;
    let mut devices_checked = 0;
    for (z, n) in numa_zones.iter().zip(&report.numa_nodes) {
        assert_eq!(z.name, format!("node-{}", n.id), "{what}: zone order");
        let node_cpus = cpus(&n.cpus);
        let costs: Vec<u32> = z.costs.iter().map(|c| c.value as u32).collect();
        assert_eq!(costs, n.distances, "{what}: {} costs", z.name);
        let cpu = z.resource("cpu").expect("cpu resource");
        let (cap, alloc, avail) = (
            num(&cpu.capacity),
            num(&cpu.allocatable),
            num(&cpu.available),
        );
        assert_eq!(cap, node_cpus.len(), "{what}: {} capacity", z.name);
        assert_eq!(
            alloc,
            node_cpus.difference(&reserved).len(),
            "{what}: {} allocatable = capacity - reserved",
            z.name
        );
        // CPUs of this node that status.allocations hold.
        let held: usize = state
            .allocations
            .iter()
            .map(|a| cpus(&a.cpus).intersection(&node_cpus).len())
            .sum();
        held_total += held;
        let expected_avail = if policy_none {
            alloc
        } else if full_cores {
            // Independently: a free CPU counts when every thread of its core is free.
            node_cpus
                .intersection(&free)
                .iter()
                .filter(|id| {
                    let core = topo.cpu(*id).expect("cpu").core;
                    topo.cpus()
                        .iter()
                        .filter(|c| c.core == core)
                        .all(|c| free.contains(c.id))
                })
                .count()
        } else {
            alloc - held
        };
        assert_eq!(avail, expected_avail, "{what}: {} available", z.name);
        // Devices: what the kubelet reports attached to this node, minus the assigned ones.
        for (resource, devs) in &state.devices.allocatable {
            let here: Vec<&String> = devs
                .iter()
                .filter(|(_, nodes)| nodes.contains(&(n.id as usize)))
                .map(|(id, _)| id)
                .collect();
            let got = z.resource(resource);
            if here.is_empty() {
                assert!(got.is_none(), "{what}: {} lists {resource}", z.name);
                continue;
            }
            let r = got.unwrap_or_else(|| panic!("{what}: {} lacks {resource}", z.name));
            let used = state.devices.assigned.get(resource);
            let busy = here
                .iter()
                .filter(|id| used.is_some_and(|u| u.contains(**id)))
                .count();
            assert_eq!(num(&r.capacity), here.len(), "{what}: {resource} capacity");
            assert_eq!(
                num(&r.allocatable),
                here.len(),
                "{what}: {resource} allocatable"
            );
            assert_eq!(
                num(&r.available),
                here.len() - busy,
                "{what}: {resource} available"
            );
            devices_checked += 1;
        }
        if !policy_none {
            assert_eq!(
                node_cpus.intersection(&free).len(),
                alloc - held,
                "{what}: {} free CPUs in status = allocatable - held by allocations",
                z.name
            );
        }
        // L3 children partition their parent: their sums equal the parent's numbers.
        let children: Vec<_> = obj.zones.iter().filter(|c| c.parent == z.name).collect();
        if !children.is_empty() {
            let sum = |f: fn(&nodetopo_crds::nrt::ResourceInfo) -> &String| -> usize {
                children
                    .iter()
                    .map(|c| num(f(c.resource("cpu").expect("cpu"))))
                    .sum()
            };
            assert_eq!(sum(|r| &r.capacity), cap, "{what}: L3 capacity sum");
            assert_eq!(sum(|r| &r.allocatable), alloc, "{what}: L3 allocatable sum");
            assert_eq!(sum(|r| &r.available), avail, "{what}: L3 available sum");
        }
    }
    assert_eq!(
        held_total,
        exclusive.len(),
        "{what}: exclusive CPUs = allocations' CPUs"
    );
    let summed: usize = state.allocations.iter().map(|a| cpus(&a.cpus).len()).sum();
    assert_eq!(
        summed,
        exclusive.len(),
        "{what}: allocations do not overlap"
    );

    // Attributes.
    assert_eq!(
        obj.attribute("topologyManagerPolicy"),
        Some(config.tm_policy.name())
    );
    assert_eq!(
        obj.attribute("topologyManagerScope"),
        Some(config.tm_scope.name())
    );
    // The scheduler plugin's set: every pod offered and not deleted is Guaranteed (these
    // pods ask 1 GiB of memory), Running when admitted, Failed when refused: all count,
    // those holding exclusive CPUs and the others alike.
    let held: BTreeSet<(&str, &str)> = state
        .allocations
        .iter()
        .map(|a| a.pod.split_once('/').expect("namespace/name"))
        .collect();
    let offered: BTreeSet<(&str, &str)> = state
        .pods
        .iter()
        .map(|(p, _)| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    assert!(
        held.is_subset(&offered),
        "{what}: pods holding CPUs were offered"
    );
    let fp: PodFingerprint = offered.into_iter().collect();
    let sign = obj
        .attribute(fingerprint::ATTRIBUTE)
        .expect("fingerprint attribute");
    assert_eq!(
        fp.check(sign),
        Ok(()),
        "{what}: fingerprint covers every Guaranteed pod, refused ones included"
    );
    assert_eq!(
        obj.attribute(fingerprint::ATTRIBUTE_METHOD),
        Some(fingerprint::METHOD_WITH_EXCLUSIVE_RESOURCES)
    );
    // The JSON round-trips.
    let back: NodeResourceTopology =
        serde_json::from_str(&serde_json::to_string(obj).expect("json")).expect("parses");
    assert_eq!(&back, obj);
    (numa_zones.len(), devices_checked)
}

#[test]
fn nrt_numbers_equal_node_topology_status() {
    let steps: usize = std::env::var("NODETOPO_NRT_STEPS")
        .ok()
        .map(|s| s.parse().expect("NODETOPO_NRT_STEPS is a number"))
        .unwrap_or(300);
    let seed = 0x16_0001u64;
    let mut rng = Rng(seed);
    let machines = [
        "intel-skylakesp-20c-2s-snc2",
        "amd-bulldozer-6272-4s-8n",
        "amd-ryzen5-1600",
        "arm-kunpeng920-2s-4n",
    ];
    let mut states_checked = 0;
    let mut zones_checked = 0;
    let mut admitted = 0;
    let mut refused = 0;
    let mut removed = 0;
    let mut configs = BTreeMap::<String, usize>::new();
    let mut device_resources_checked = 0;
    let mut devices_assigned = 0;
    for name in machines {
        let topo = machine(name);
        for variant in 0..4 {
            let config = match variant {
                0 => static_config(
                    ReservedCpus::Count(2),
                    &["full-pcpus-only"],
                    TmPolicy::SingleNumaNode,
                    TmScope::Container,
                ),
                1 => static_config(
                    ReservedCpus::Count(1),
                    &[],
                    TmPolicy::BestEffort,
                    TmScope::Pod,
                ),
                2 => static_config(
                    ReservedCpus::Explicit(CpuSet::from_ids([topo
                        .all_cpus()
                        .last()
                        .expect("cpus")])),
                    &["distribute-cpus-across-numa"],
                    TmPolicy::Restricted,
                    TmScope::Container,
                ),
                _ => NodeConfig::default(),
            };
            let label = format!("{:?}/{}", config.tm_policy, variant);
            *configs.entry(label).or_default() += 1;
            let mut state = NodeState::new(topo.clone(), config.clone());
            // Devices as a kubelet reports them: two NICs per NUMA node, one spanning the
            // first two nodes, one without topology, a GPU on the last node.
            let node_ids: Vec<usize> = topo.numa_nodes().iter().map(|n| n.id).collect();
            for id in &node_ids {
                add_devices(
                    &mut state.devices,
                    "example.com/nic",
                    &format!("n{id}-"),
                    2,
                    &[*id],
                );
            }
            let span: Vec<usize> = node_ids.iter().take(2).copied().collect();
            add_devices(&mut state.devices, "example.com/nic", "span-", 1, &span);
            add_devices(&mut state.devices, "example.com/nic", "loose-", 1, &[]);
            let last = *node_ids.last().expect("a NUMA node");
            add_devices(&mut state.devices, "example.com/gpu", "gpu-", 1, &[last]);
            let all_devices: Vec<(String, String)> = state
                .devices
                .allocatable
                .iter()
                .flat_map(|(r, ds)| ds.keys().map(move |d| (r.clone(), d.clone())))
                .collect();
            let mut held_devices: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
            let mut live: Vec<String> = Vec::new();
            for step in 0..steps / 4 {
                if !live.is_empty() && rng.below(3) == 0 {
                    let i = rng.below(live.len() as u64) as usize;
                    let uid = live.swap_remove(i);
                    for (r, d) in held_devices.remove(&uid).unwrap_or_default() {
                        if let Some(set) = state.devices.assigned.get_mut(&r) {
                            set.remove(&d);
                        }
                    }
                    state.remove(&uid);
                    removed += 1;
                } else {
                    let n = 1 + rng.below(3) as usize;
                    let millis: Vec<u64> = (0..n)
                        .map(|_| match rng.below(6) {
                            0 => 500,
                            1 => 1500,
                            k => 1000 * (1 + rng.below(2 + k * 2)),
                        })
                        .collect();
                    let p = pod(
                        ["default", "batch", "ml"][rng.below(3) as usize],
                        &format!("p{variant}-{step}"),
                        &millis,
                    );
                    if state.admit(&p) {
                        live.push(p.uid.clone());
                        admitted += 1;
                        // Sometimes a free device goes with the pod.
                        let (r, d) = &all_devices[rng.below(all_devices.len() as u64) as usize];
                        let taken = state.devices.assigned.entry(r.clone()).or_default();
                        if rng.below(2) == 0 && !taken.contains(d) {
                            taken.insert(d.clone());
                            held_devices
                                .entry(p.uid.clone())
                                .or_default()
                                .push((r.clone(), d.clone()));
                            devices_assigned += 1;
                        }
                    } else {
                        refused += 1;
                    }
                }
                let obj = state.nrt(name);
                let (zones, devs) = check(
                    &format!("{name} variant {variant} step {step}"),
                    &topo,
                    &config,
                    &state,
                    &obj,
                );
                zones_checked += zones;
                device_resources_checked += devs;
                states_checked += 1;
            }
        }
    }
    assert!(admitted > 100 && refused > 0 && removed > 50 && devices_assigned > 50);
    println!(
        "nrt consistency: {states_checked} states on 4 machines x 4 configurations ({zones_checked} NUMA zones, {device_resources_checked} zone device resources), {admitted} pods admitted, {refused} refused, {removed} removed, {devices_assigned} devices assigned, seed {seed:#x}"
    );
}
