//! Node admission: the kubelet's admission path for one node, as a pure state machine.
//!
//! [`NodeAdmitter`] holds a node's CPU manager (static policy and state), Memory Manager
//! (static policy), device manager and topology-manager configuration, and admits pods one
//! at a time, as the kubelet's topology-manager admit handler does:
//!
//! - policy `none`: every container (init containers first, then app containers) is
//!   allocated without a hint;
//! - scope `container`: per container, the providers' hints (CPU, memory, devices) are
//!   merged; a rejected merge stops the pod with `TopologyAffinityError`, otherwise every
//!   provider allocates under the merged hint;
//! - scope `pod`: one merge over the providers' pod-level hints, then every container is
//!   allocated under that hint.
//!
//! Guarantees: a rejected pod keeps nothing (the CPU and device state are exactly what they
//! were before the pod; the memory it took goes back as the kubelet's stale-state cleanup
//! gives it back, see [`MemoryManager::release_rejected`]); results depend only on the
//! inputs and the order of calls. Both the offline `plan` and the agent's daemon drive admission through this type
//! only.
//!
//! Caveats: the kubelet's resource-fit predicates (node allocatable) are not modelled; a
//! failed exclusive allocation reports what the kubelet's admission reports: `SMTAlignmentError`
//! for the full-pcpus-only errors, `UnexpectedAdmissionError` ("Allocate failed due to ...,
//! which is unexpected") for any other CPU failure; Memory Manager and device failures
//! `UnexpectedAdmissionError` with the same "Allocate failed due to ..." wrapping.

use std::collections::BTreeMap;

pub mod cpu_hints;
pub mod explain;
pub mod replay;

use crate::cpumanager::{CpuState, PolicyError, ReservedCpus, StaticPolicy, StaticPolicyOptions};
use crate::cpuset::CpuSet;
use crate::devicemanager::{DeviceError, DeviceHints, DeviceManager, DeviceSpec};
use crate::memorymanager::{MemoryError, MemoryHints, MemoryManager, ReservedMemory};
use crate::pod::{Container, Pod};
use crate::report::{AllocationReport, HintReport, RejectionReport};
use crate::topology::CpuTopology;
use crate::topologymanager::{
    merge, ManagerConfig, ProviderHints, ResourceHints, TmError, TmOptions, TmPolicy, TmScope,
    TopologyHint, TOPOLOGY_AFFINITY_ERROR,
};

/// The kubelet's message for a topology-manager rejection.
pub const TOPOLOGY_AFFINITY_MESSAGE: &str = "Resources cannot be allocated with Topology locality";

/// The CPU manager's policy as admission runs it: `none`, or `static` with its reserved CPUs
/// and parsed options. Not the API's [`crate::spec::CpuManagerConfig`] (the spec's field
/// shape, strings as the kubelet names them); built from the kubelet's fields by
/// [`crate::change::OwnedConfig::cpu_policy_config`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CpuPolicyConfig {
    /// Policy `none`: every container runs on the shared pool.
    #[default]
    None,
    /// Policy `static`.
    Static {
        /// The reserved CPUs (explicit or a count).
        reserved: ReservedCpus,
        /// The static policy options.
        options: StaticPolicyOptions,
    },
}

/// The Memory Manager's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemoryManagerConfig {
    /// Policy `None`: no memory hints, no memory bookkeeping (the kubelet's default).
    #[default]
    None,
    /// Policy `Static`, with `--reserved-memory` per NUMA node.
    Static {
        /// Reserved memory per node and resource.
        reserved: ReservedMemory,
    },
}

/// Everything that decides admissions on a node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeConfig {
    /// CPU manager policy and options.
    pub cpu: CpuPolicyConfig,
    /// Topology-manager policy.
    pub tm_policy: TmPolicy,
    /// Topology-manager scope.
    pub tm_scope: TmScope,
    /// Topology-manager options.
    pub tm_options: TmOptions,
    /// Devices with NUMA affinity (device-plugin resources).
    pub devices: Vec<DeviceSpec>,
    /// Resources a device plugin registered, beside those `devices` names (a plugin that
    /// lists no device): the kubelet refuses any container asking for them, even for 0.
    pub device_resources: Vec<String>,
    /// Memory Manager policy (not part of the NodeTopology spec; `None` by default).
    pub memory: MemoryManagerConfig,
}

/// Why a node configuration cannot run on a topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The CPU manager refused the configuration (options, reserved CPUs).
    #[error("cpu manager: {0}")]
    Cpu(#[from] PolicyError),
    /// CPU options the topology manager's policy forbids.
    #[error("cpu manager: {0}")]
    CpuOptions(#[from] crate::cpumanager::OptionsError),
    /// The topology manager refused the configuration.
    #[error("topology manager: {0}")]
    Topology(#[from] TmError),
    /// The Memory Manager refused the configuration.
    #[error("{0}")]
    Memory(#[from] MemoryError),
    /// Bad device list.
    #[error("device manager: {0}")]
    Device(#[from] DeviceError),
}

/// The outcome of admitting one pod: allocations of its exclusive-CPU containers (in
/// admission order), or the rejection that stopped it (then `allocations` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodAdmission {
    /// One record per container that holds exclusive CPUs.
    pub allocations: Vec<AllocationReport>,
    /// At most one record: the container (or, in pod scope, the pod's first container)
    /// that was not admitted.
    pub rejections: Vec<RejectionReport>,
}

impl PodAdmission {
    /// True when the pod was admitted.
    pub fn admitted(&self) -> bool {
        self.rejections.is_empty()
    }
}

/// The CPU pools of the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pools {
    /// Reserved CPUs (system and kube reserved; never exclusive).
    pub reserved: CpuSet,
    /// The shared pool: the default cpuset where non-exclusive containers run (as in the
    /// kubelet it includes the reserved CPUs unless strict-cpu-reservation is on).
    pub shared: CpuSet,
    /// CPUs held exclusively by containers.
    pub exclusive: CpuSet,
    /// CPUs that can still be handed out exclusively (shared pool minus reserved).
    pub free: CpuSet,
}

/// One node's admission state. See the module documentation.
#[derive(Debug, Clone)]
pub struct NodeAdmitter {
    topology: CpuTopology,
    cpu: Option<StaticPolicy>,
    state: CpuState,
    tm: ManagerConfig,
    memory: Option<MemoryManager>,
    devices: DeviceManager,
    /// Admitted pods by UID, with the merged hint of each container.
    pods: BTreeMap<String, (Pod, BTreeMap<String, TopologyHint>)>,
    /// Set only while [`NodeAdmitter::admit_explained`] runs.
    trace: Option<explain::Trace>,
}

/// Why one container (or the pod) was not admitted.
struct Refusal {
    container: String,
    reason: String,
    message: String,
}

impl NodeAdmitter {
    /// Sets up the node's managers for `config` on `topology` (the kubelet's start-up
    /// checks: CPU options and reserved CPUs, topology-manager options and NUMA limit,
    /// memory sizes, devices).
    pub fn new(topology: CpuTopology, config: &NodeConfig) -> Result<Self, ConfigError> {
        let NodeConfig {
            cpu,
            tm_policy,
            tm_scope,
            tm_options,
            devices,
            device_resources,
            memory,
        } = config;
        let tm = ManagerConfig::for_topology(*tm_policy, *tm_scope, *tm_options, &topology)?;
        let (cpu, state) = match cpu {
            CpuPolicyConfig::None => (
                None,
                CpuState {
                    default_cpuset: topology.all_cpus(),
                    assignments: BTreeMap::new(),
                },
            ),
            CpuPolicyConfig::Static { reserved, options } => {
                options.validate_for(&topology, *tm_policy == TmPolicy::SingleNumaNode)?;
                let policy = StaticPolicy::new(topology.clone(), reserved.clone(), *options)?;
                let mut state = CpuState::default();
                policy.start(&mut state)?;
                (Some(policy), state)
            }
        };
        let memory = match memory {
            MemoryManagerConfig::None => None,
            MemoryManagerConfig::Static { reserved } => {
                let manager = MemoryManager::new(&topology, reserved)?;
                crate::memorymanager::check_system_reserved(reserved)?;
                Some(manager)
            }
        };
        let numa_ids: Vec<usize> = topology.numa_nodes().iter().map(|n| n.id).collect();
        let devices = DeviceManager::with_resources(devices, device_resources, &numa_ids)?;
        Ok(Self {
            topology,
            cpu,
            state,
            tm,
            memory,
            devices,
            pods: BTreeMap::new(),
            trace: None,
        })
    }

    /// The machine.
    pub fn topology(&self) -> &CpuTopology {
        &self.topology
    }

    /// The CPU manager's state (for checkpoints).
    pub fn cpu_state(&self) -> &CpuState {
        &self.state
    }

    /// The CPU manager's static policy (with its reuse bookkeeping), when it runs.
    pub fn cpu_policy(&self) -> Option<&StaticPolicy> {
        self.cpu.as_ref()
    }

    /// The Memory Manager's state, when its policy is Static.
    pub fn memory(&self) -> Option<&MemoryManager> {
        self.memory.as_ref()
    }

    /// The device manager's state.
    pub fn devices(&self) -> &DeviceManager {
        &self.devices
    }

    /// Replaces the CPU state (from a checkpoint). Pods admitted before are forgotten; the
    /// caller re-admits live pods, whose containers then keep their CPUs (the kubelet's
    /// "already assigned" path).
    pub fn restore(&mut self, state: CpuState) -> Result<(), ConfigError> {
        let mut state = state;
        if let Some(policy) = &self.cpu {
            policy.start(&mut state)?;
        }
        self.state = state;
        self.pods.clear();
        Ok(())
    }

    /// Carries a running node's CPU state over to this admitter's (new) configuration, as
    /// an applied change leaves the kubelet: the state as it is when the kubelet would accept
    /// it at start, else rewritten with a recomputed shared pool that keeps every assignment
    /// (`change::repair_state`, the RewriteState step: e.g. `strict-cpu-reservation` turned
    /// on moves the reserved CPUs out of the shared pool). The error is the kubelet's refusal
    /// of the state as it was when no rewrite keeps the assignments (a drain is needed).
    pub fn carry_over(&mut self, state: CpuState) -> Result<(), ConfigError> {
        match self.restore(state.clone()) {
            Ok(()) => Ok(()),
            Err(refusal) => {
                let repaired = self
                    .cpu
                    .as_ref()
                    .and_then(|policy| crate::change::repair_state(policy, state));
                match repaired {
                    Some(repaired) => self.restore(repaired),
                    None => Err(refusal),
                }
            }
        }
    }

    /// The CPU pools.
    pub fn pools(&self) -> Pools {
        let reserved = self
            .cpu
            .as_ref()
            .map(|p| p.reserved().clone())
            .unwrap_or_default();
        let shared = self.state.default_cpuset.clone();
        Pools {
            free: shared.difference(&reserved),
            exclusive: self.state.assigned(),
            reserved,
            shared,
        }
    }

    /// The merged hint of an admitted container, when a topology manager ran.
    pub fn hint(&self, pod_uid: &str, container: &str) -> Option<&TopologyHint> {
        self.pods.get(pod_uid).and_then(|(_, h)| h.get(container))
    }

    /// Admits `pod`. Admitting a pod that is already admitted re-runs admission on its
    /// current allocations (its containers keep what they have).
    pub fn admit(&mut self, pod: &Pod) -> PodAdmission {
        // Admission only touches the default set, this pod's entries and small per-node
        // tables, so saving those (not every pod's records) is enough for an exact undo.
        let saved_cpus = (
            self.state.default_cpuset.clone(),
            self.state.assignments.get(&pod.uid).cloned(),
        );
        let saved_memory = self.memory.as_ref().map(|m| m.snapshot(&pod.uid));
        let saved_devices = self.devices.snapshot(&pod.uid);
        let mut hints = BTreeMap::new();
        let result = match (self.tm.policy, self.tm.scope) {
            (TmPolicy::None, _) => self.admit_without_hints(pod),
            (_, TmScope::Container) => self.admit_container_scope(pod, &mut hints),
            (_, TmScope::Pod) => self.admit_pod_scope(pod, &mut hints),
        };
        match result {
            Ok(()) => {
                let allocations = self.reports(pod, &hints);
                self.pods.insert(pod.uid.clone(), (pod.clone(), hints));
                PodAdmission {
                    allocations,
                    rejections: Vec::new(),
                }
            }
            Err(r) => {
                let (default_cpuset, assigned) = saved_cpus;
                self.state.default_cpuset = default_cpuset;
                match assigned {
                    Some(a) => {
                        self.state.assignments.insert(pod.uid.clone(), a);
                    }
                    None => {
                        self.state.assignments.remove(&pod.uid);
                    }
                }
                if let (Some(m), Some(snap)) = (&mut self.memory, saved_memory) {
                    m.release_rejected(&pod.uid, snap);
                }
                // The CPU and device managers' reuse bookkeeping (CPUs and devices the
                // pod's regular init containers got in this attempt) stays, as in the
                // kubelet (`cpusToReuse`, `devicesToReuse` are keyed by pod UID and dropped
                // only when another pod allocates): a second attempt under the same UID
                // sees them in its hints and takes them first.
                self.devices.rollback(&pod.uid, saved_devices);
                PodAdmission {
                    allocations: Vec::new(),
                    rejections: vec![RejectionReport {
                        pod: pod.key(),
                        pod_uid: pod.uid.clone(),
                        container: r.container,
                        reason: r.reason,
                        message: r.message,
                        ..RejectionReport::default()
                    }],
                }
            }
        }
    }

    /// Releases everything a pod holds (kubelet `RemoveContainer` for each container).
    pub fn remove_pod(&mut self, pod_uid: &str) {
        let names: Vec<String> = match self.pods.remove(pod_uid) {
            Some((pod, _)) => pod.all_containers().map(|c| c.name.clone()).collect(),
            None => self
                .state
                .assignments
                .get(pod_uid)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        };
        if let Some(policy) = &self.cpu {
            for n in &names {
                policy.remove_container(&mut self.state, pod_uid, n);
            }
        }
        if let Some(m) = &mut self.memory {
            m.remove_pod(pod_uid);
        }
        self.devices.remove_pod(pod_uid);
    }

    fn admit_without_hints(&mut self, pod: &Pod) -> Result<(), Refusal> {
        for c in pod.all_containers() {
            self.allocate(pod, c, None)?;
        }
        Ok(())
    }

    fn admit_container_scope(
        &mut self,
        pod: &Pod,
        hints: &mut BTreeMap<String, TopologyHint>,
    ) -> Result<(), Refusal> {
        for c in pod.all_containers() {
            let providers = [
                self.cpu
                    .as_ref()
                    .and_then(|p| cpu_hints::container_hints(p, &self.state, pod, c)),
                self.memory
                    .as_ref()
                    .and_then(|m| memory_provider(m.container_hints(pod, c))),
                device_provider(self.devices.container_hints(pod, c)),
            ];
            if self.trace.is_some() {
                self.record(&providers, &c.name);
            }
            let hint = self.merge(&providers, &c.name)?;
            hints.insert(c.name.clone(), hint);
            self.allocate(pod, c, Some(&hint))?;
        }
        Ok(())
    }

    fn admit_pod_scope(
        &mut self,
        pod: &Pod,
        hints: &mut BTreeMap<String, TopologyHint>,
    ) -> Result<(), Refusal> {
        let providers = [
            self.cpu
                .as_ref()
                .and_then(|p| cpu_hints::pod_hints(p, &self.state, pod)),
            self.memory
                .as_ref()
                .and_then(|m| memory_provider(m.pod_hints(pod))),
            device_provider(self.devices.pod_hints(pod)),
        ];
        let first = pod
            .all_containers()
            .next()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        if self.trace.is_some() {
            // One merge for the whole pod: it explains every container of the pod.
            let names: Vec<String> = pod.all_containers().map(|c| c.name.clone()).collect();
            for n in &names {
                self.record(&providers, n);
            }
        }
        let hint = self.merge(&providers, &first)?;
        for c in pod.all_containers() {
            hints.insert(c.name.clone(), hint);
            self.allocate(pod, c, Some(&hint))?;
        }
        Ok(())
    }

    fn merge(&self, providers: &[ProviderHints], container: &str) -> Result<TopologyHint, Refusal> {
        let Some(numa) = &self.tm.numa else {
            return Ok(TopologyHint {
                affinity: None,
                preferred: false,
            });
        };
        let result =
            merge(self.tm.policy, numa, &self.tm.options, providers).map_err(|e| Refusal {
                container: container.to_string(),
                reason: "UnexpectedAdmissionError".to_string(),
                message: e.to_string(),
            })?;
        if !result.admit {
            return Err(Refusal {
                container: container.to_string(),
                reason: TOPOLOGY_AFFINITY_ERROR.to_string(),
                message: TOPOLOGY_AFFINITY_MESSAGE.to_string(),
            });
        }
        Ok(result.hint)
    }

    /// Every provider's `Allocate` for one container in the kubelet's registration order
    /// (`container_manager_linux.go` adds the device manager, then the CPU manager, then the
    /// memory manager), so when several fail the rejection names the same one.
    fn allocate(
        &mut self,
        pod: &Pod,
        c: &Container,
        hint: Option<&TopologyHint>,
    ) -> Result<(), Refusal> {
        let refusal = |reason: &str, message: String| Refusal {
            container: c.name.clone(),
            reason: reason.to_string(),
            message,
        };
        self.devices
            .allocate(pod, c, hint)
            .map_err(|e| refusal(e.reason(), e.admission_message()))?;
        if let Some(policy) = &self.cpu {
            policy
                .allocate(&mut self.state, pod, c, hint)
                .map_err(|e| refusal(e.reason(), e.admission_message()))?;
        }
        if let Some(m) = &mut self.memory {
            m.allocate(pod, c, hint)
                .map_err(|e| refusal(e.reason(), e.admission_message()))?;
        }
        Ok(())
    }

    fn reports(&self, pod: &Pod, hints: &BTreeMap<String, TopologyHint>) -> Vec<AllocationReport> {
        let t = &self.topology;
        pod.all_containers()
            .filter_map(|c| {
                let cpus = self.state.get(&pod.uid, &c.name)?;
                let mut report = AllocationReport {
                    pod: pod.key(),
                    pod_uid: pod.uid.clone(),
                    container: c.name.clone(),
                    hint: hints.get(&c.name).map(hint_report),
                    ..AllocationReport::default()
                };
                report.place(t, cpus);
                Some(report)
            })
            .collect()
    }
}

/// The published form of a hint.
pub fn hint_report(h: &TopologyHint) -> HintReport {
    HintReport {
        numa_nodes: h.affinity.map(|m| m.ids().map(|i| i as u64).collect()),
        preferred: h.preferred,
    }
}

fn memory_provider(h: MemoryHints) -> ProviderHints {
    match h {
        MemoryHints::None => None,
        MemoryHints::Explicit(m) => Some(
            m.into_iter()
                .map(|(r, l)| (r, ResourceHints::Explicit(l)))
                .collect(),
        ),
        MemoryHints::Implicit { resources, source } => Some(
            resources
                .into_iter()
                .map(|r| (r, ResourceHints::Implicit(source.clone())))
                .collect(),
        ),
    }
}

fn device_provider(h: Option<BTreeMap<String, DeviceHints>>) -> ProviderHints {
    h.map(|m| {
        m.into_iter()
            .map(|(r, d)| {
                let hints = match d {
                    DeviceHints::DontCare => ResourceHints::DontCare,
                    DeviceHints::Explicit(l) => ResourceHints::Explicit(l),
                    DeviceHints::Implicit(s) => ResourceHints::Implicit(s),
                };
                (r, hints)
            })
            .collect()
    })
}
