//! The case and answer format shared with the Go oracle (`e2e/kubelet-oracle/main.go`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct NumaJson {
    pub(crate) id: usize,
    /// Indexed by NUMA node id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) distances: Vec<u64>,
    /// Memory of the node in bytes (memory cases only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) memory: u64,
    /// Huge pages as `[page size in KiB, pages]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) hugepages: Vec<[u64; 2]>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct MachineJson {
    /// `[id, core, socket, numa, uncore]`.
    pub(crate) cpus: Vec<[usize; 5]>,
    pub(crate) numa: Vec<NumaJson>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct ResJson {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) cpu: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) memory: String,
    #[serde(
        default,
        rename = "hugepages-2Mi",
        skip_serializing_if = "String::is_empty"
    )]
    pub(crate) hugepages_2mi: String,
    #[serde(
        default,
        rename = "hugepages-1Gi",
        skip_serializing_if = "String::is_empty"
    )]
    pub(crate) hugepages_1gi: String,
    /// Extended (device-plugin) resources -> quantity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) extended: BTreeMap<String, String>,
}

/// One device the oracle's in-process device plugin advertises.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct DeviceJson {
    pub(crate) resource: String,
    pub(crate) id: String,
    /// NUMA node ids; empty: no topology.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) numa: Vec<usize>,
    /// The plugin lists the device as unhealthy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unhealthy: bool,
}

/// Devices per container, resource -> sorted ids.
pub(crate) type DevicesOf = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Raw device hints of one provider call, resource -> hints (`None`: no preference).
pub(crate) type RawDeviceHints = BTreeMap<String, Option<Vec<HintJson>>>;

/// The memory manager's configuration: `--reserved-memory`, NUMA node id -> resource name
/// -> bytes. Present: the memory manager runs with the Static policy.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct MemoryJson {
    pub(crate) reserved: BTreeMap<String, BTreeMap<String, u64>>,
}

/// A memory block of a container (kubelet `state.Block`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BlockJson {
    pub(crate) numa_affinity: Vec<usize>,
    #[serde(rename = "type")]
    pub(crate) resource: String,
    pub(crate) size: u64,
}

/// One resource of a NUMA node (kubelet `state.MemoryTable`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemTableJson {
    pub(crate) total: u64,
    pub(crate) system_reserved: u64,
    pub(crate) allocatable: u64,
    pub(crate) reserved: u64,
    pub(crate) free: u64,
}

/// One NUMA node of the memory manager's machine state (kubelet `state.NUMANodeState`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemNodeJson {
    pub(crate) number_of_assignments: usize,
    pub(crate) memory_map: BTreeMap<String, MemTableJson>,
    pub(crate) cells: Vec<usize>,
}

/// Raw hints of one provider call, resource name -> hints.
pub(crate) type RawHints = BTreeMap<String, Vec<HintJson>>;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ContainerJson {
    pub(crate) name: String,
    pub(crate) requests: ResJson,
    pub(crate) limits: ResJson,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) restartable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct PodJson {
    pub(crate) uid: String,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) init: Vec<ContainerJson>,
    pub(crate) containers: Vec<ContainerJson>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct OpJson {
    pub(crate) op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pod: Option<PodJson>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) uid: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseJson {
    pub(crate) id: String,
    pub(crate) machine: MachineJson,
    #[serde(default)]
    pub(crate) cpu_options: BTreeMap<String, String>,
    #[serde(
        default,
        rename = "reservedCPUs",
        skip_serializing_if = "String::is_empty"
    )]
    pub(crate) reserved_cpus: String,
    pub(crate) num_reserved: usize,
    pub(crate) tm_policy: String,
    pub(crate) tm_scope: String,
    #[serde(default)]
    pub(crate) tm_options: BTreeMap<String, String>,
    pub(crate) ops: Vec<OpJson>,
    /// The memory manager (Static policy) runs when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) memory: Option<MemoryJson>,
    /// The device manager runs with these devices when not empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) devices: Vec<DeviceJson>,
    /// Resources whose plugin registers and lists no device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) device_resources: Vec<String>,
    /// Resources whose plugin offers no `GetPreferredAllocation` (the kubelet picks within
    /// a group in Go set order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) no_preferred: Vec<String>,
    /// Resources served by two plugins, the first listing other devices (ghosts); the
    /// engine sees only the case's devices, as the kubelet keeps the last list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shadowed: Vec<String>,
    /// Ask for the checkpoint files the kubelet's checkpoint code writes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) checkpoint: bool,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HintJson {
    pub(crate) affinity: Option<Vec<usize>>,
    pub(crate) preferred: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OpResult {
    pub(crate) admit: bool,
    /// A `readmit` of a pod that is not admitted.
    #[serde(default)]
    pub(crate) skipped: bool,
    #[serde(default)]
    pub(crate) reason: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) cpus: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) hints: Option<BTreeMap<String, HintJson>>,
    #[serde(default)]
    pub(crate) state_default: String,
    #[serde(default)]
    pub(crate) state_assignments: BTreeMap<String, BTreeMap<String, String>>,
    /// Raw CPU hints per container (container scope) or under "" (pod scope).
    #[serde(default)]
    pub(crate) cpu_hints: BTreeMap<String, Vec<HintJson>>,
    /// Raw memory hints per container (container scope) or under "" (pod scope).
    #[serde(default)]
    pub(crate) mem_hints: BTreeMap<String, RawHints>,
    /// Memory blocks per container after an admission (memory cases).
    #[serde(default)]
    pub(crate) memory: Option<BTreeMap<String, Vec<BlockJson>>>,
    /// Raw device hints per container (container scope) or under "" (pod scope).
    #[serde(default)]
    pub(crate) dev_hints: BTreeMap<String, RawDeviceHints>,
    /// Devices per container after an admission (device cases).
    #[serde(default)]
    pub(crate) devices: DevicesOf,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Answer {
    #[serde(default)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) config_error: String,
    #[serde(default)]
    pub(crate) results: Vec<OpResult>,
    #[serde(default, rename = "defaultCPUSet")]
    pub(crate) default_cpuset: String,
    #[serde(default)]
    pub(crate) assignments: BTreeMap<String, BTreeMap<String, String>>,
    /// The memory manager's machine state at the end, by NUMA node id.
    #[serde(default)]
    pub(crate) memory_state: Option<BTreeMap<String, MemNodeJson>>,
    #[serde(default)]
    pub(crate) memory_checkpoint: String,
    /// The engine's blocks of every live pod (engine side only; checked against the
    /// checkpoint file's entries).
    #[serde(skip)]
    pub(crate) memory_entries: BTreeMap<String, BTreeMap<String, Vec<BlockJson>>>,
    /// Devices every pod holds at the end: pod uid -> container -> resource -> ids.
    #[serde(default)]
    pub(crate) final_devices: BTreeMap<String, DevicesOf>,
    #[serde(default)]
    pub(crate) timeout: bool,
    /// The kubelet's code panicked on the case (the value it panicked with).
    #[serde(default)]
    pub(crate) panic: String,
    #[serde(default)]
    pub(crate) error: String,
}

impl CaseJson {
    /// Whether the device manager runs (devices, or resources registered without one).
    pub(crate) fn has_devices(&self) -> bool {
        !self.devices.is_empty() || !self.device_resources.is_empty()
    }
}
