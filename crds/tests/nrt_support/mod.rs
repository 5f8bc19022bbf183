//! Shared by the NodeResourceTopology tests: real machines from the vendored sysfs archives
//! (engine/tests/data/sysfs), node configurations, pods, and the object built from an
//! admission state exactly as the agent builds it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_crds::nrt::{
    self, from_engine, AllocationSource, DeviceInventory, MemoryManagerView, NodePod,
    NodeResourceTopology, NrtInput, ReservedSource, TopologyManagerSource,
};
use nodetopo_engine::admission::{CpuPolicyConfig, NodeAdmitter, NodeConfig};
use nodetopo_engine::cpumanager::{ReservedCpus, StaticPolicyOptions};
use nodetopo_engine::report::AllocationReport;
use nodetopo_engine::topologymanager::{TmOptions, TmPolicy, TmScope};
use nodetopo_engine::{Container, CpuSet, CpuTopology, Pod, ResourceList};

/// The vendored sysfs archives.
pub fn sysfs_archive(machine: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/sysfs")
        .join(format!("{machine}.tar.gz"))
}

/// Discovers a vendored machine.
pub fn machine(name: &str) -> CpuTopology {
    let tmp = tempfile::tempdir().expect("tempdir");
    let f = std::fs::File::open(sysfs_archive(name))
        .unwrap_or_else(|e| panic!("{}: {e}", sysfs_archive(name).display()));
    tar::Archive::new(flate2::read::GzDecoder::new(f))
        .unpack(tmp.path())
        .unwrap_or_else(|e| panic!("unpacking {name}: {e}"));
    nodetopo_engine::sysfs::discover(&tmp.path().join(name).join("sys"))
        .unwrap_or_else(|e| panic!("discovering {name}: {e}"))
}

/// A static-policy configuration.
pub fn static_config(
    reserved: ReservedCpus,
    options: &[&str],
    policy: TmPolicy,
    scope: TmScope,
) -> NodeConfig {
    let map: BTreeMap<String, String> = options
        .iter()
        .map(|o| (o.to_string(), "true".to_string()))
        .collect();
    NodeConfig {
        cpu: CpuPolicyConfig::Static {
            reserved,
            options: StaticPolicyOptions::from_map(&map).expect("valid options"),
        },
        tm_policy: policy,
        tm_scope: scope,
        tm_options: TmOptions::default(),
        ..Default::default()
    }
}

/// A Guaranteed pod with one container per CPU count (millicores; 1000 = one CPU).
pub fn pod(ns: &str, name: &str, cpu_millis: &[u64]) -> Pod {
    let containers = cpu_millis
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let r = ResourceList {
                cpu_millis: Some(*m),
                memory_bytes: Some(1 << 30),
                ..Default::default()
            };
            Container {
                name: format!("c{i}"),
                requests: r.clone(),
                limits: r,
                restartable: false,
            }
        })
        .collect();
    Pod {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        init_containers: vec![],
        containers,
    }
}

/// One node's admission state and its published records.
pub struct NodeState {
    pub config: NodeConfig,
    pub admitter: NodeAdmitter,
    pub allocations: Vec<AllocationReport>,
    pub rejected: usize,
    /// Every pod offered, with the phase the kubelet gives it: `Running` when admitted,
    /// `Failed` when refused (the kubelet fails a pod it cannot admit).
    pub pods: Vec<(Pod, &'static str)>,
    /// Device-plugin devices, as PodResources would report them.
    pub devices: DeviceInventory,
}

impl NodeState {
    pub fn new(topology: CpuTopology, config: NodeConfig) -> Self {
        let admitter = NodeAdmitter::new(topology, &config).expect("configuration applies");
        Self {
            config,
            admitter,
            allocations: Vec::new(),
            rejected: 0,
            pods: Vec::new(),
            devices: DeviceInventory::default(),
        }
    }

    pub fn admit(&mut self, p: &Pod) -> bool {
        let out = self.admitter.admit(p);
        if out.admitted() {
            self.allocations.extend(out.allocations);
            self.pods.push((p.clone(), "Running"));
            true
        } else {
            self.rejected += 1;
            self.pods.push((p.clone(), "Failed"));
            false
        }
    }

    pub fn remove(&mut self, uid: &str) {
        self.admitter.remove_pod(uid);
        self.allocations.retain(|a| a.pod_uid != uid);
        self.pods.retain(|(p, _)| p.uid != uid);
    }

    /// The object, built the way the agent builds it.
    pub fn nrt(&self, node: &str) -> NodeResourceTopology {
        let pods: Vec<NodePod<'_>> = self
            .pods
            .iter()
            .map(|(pod, phase)| NodePod { pod, phase })
            .collect();
        let input = NrtInput {
            node_name: node,
            node_uid: Some("00000000-0000-0000-0000-000000000001"),
            topology: self.admitter.topology(),
            cpu: from_engine::cpu_accounting(&self.config.cpu, &self.admitter.pools()),
            reserved_source: ReservedSource::Spec,
            topology_manager: from_engine::topology_manager_view(&self.config),
            topology_manager_source: TopologyManagerSource::SpecUnverified,
            memory: MemoryManagerView::Unknown,
            pods: &pods,
            source: AllocationSource::Agent,
            devices: &self.devices,
        };
        nrt::build(&input).expect("object builds")
    }
}

/// Adds `count` devices `<prefix><i>` of `resource` attached to `nodes`.
pub fn add_devices(
    inv: &mut DeviceInventory,
    resource: &str,
    prefix: &str,
    count: usize,
    nodes: &[usize],
) {
    let devs = inv.allocatable.entry(resource.to_string()).or_default();
    for i in 0..count {
        devs.insert(format!("{prefix}{i}"), nodes.iter().copied().collect());
    }
}

/// Parses a list-syntax CPU set from a report.
pub fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}
