//! Machine recipes: a small description of a machine (sockets, cores, threads, NUMA blocks,
//! L3 blocks and their ids, distances) turned into the [`MachineModel`] its Linux sysfs would
//! show, so that presets go through exactly the resolution rules of discovery.
//!
//! Numbering rules (PRESETS.md "Conventions"):
//! - [`Numbering::SmtSplit`] (x86 servers): thread 0 of every core first, socket by socket,
//!   then thread 1 in the same order: `cpu = t*S*C + s*C + c`.
//! - [`Numbering::Linear`] (Arm servers, no SMT): `cpu = s*C + c`.
//!
//! Within a socket, NUMA nodes and L3 instances own consecutive blocks of cores in numbering
//! order; node ids and L3 indices count up across sockets.

use crate::cpuset::CpuSet;
use crate::sysfs::{CacheModel, CpuModel, MachineModel, NodeModel};

/// How logical CPU ids are assigned to (socket, core, thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Numbering {
    /// `cpu = t*S*C + s*C + c`.
    SmtSplit,
    /// `cpu = s*C + c` (one thread per core).
    Linear,
}

/// How the L3 instances are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum L3 {
    /// No L3 in sysfs (the kubelet falls back to one uncore cache per socket).
    None,
    /// One L3 per socket.
    PerSocket,
    /// Consecutive blocks of this many cores within each socket.
    Blocks(usize),
}

/// Where L3 `id` values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum L3Ids {
    /// 0, 1, 2, ... in CPU order.
    Seq,
    /// The ids of one socket's L3s in CPU order; socket `s` adds `s * stride`.
    PerSocketTable { ids: Vec<u64>, stride: u64 },
    /// No `id` file (derived from the sharing list, as on Arm).
    Absent,
}

/// NUMA distance rule between two nodes with CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slit {
    /// Between different nodes of the same group (e.g. AMD quadrant), when groups are used.
    pub same_group: Option<(usize, u32)>,
    /// Between different nodes of the same socket.
    pub same_socket: u32,
    /// Between sockets.
    pub remote: u32,
}

/// A recipe for a homogeneous machine.
#[derive(Debug, Clone)]
pub(crate) struct Recipe {
    pub sockets: usize,
    pub cores_per_socket: usize,
    pub threads: usize,
    pub numbering: Numbering,
    /// Cores of each NUMA node within a socket, in numbering order (sums to
    /// `cores_per_socket`).
    pub node_cores: Vec<usize>,
    pub l3: L3,
    pub l3_ids: L3Ids,
    pub l3_size: Option<u64>,
    pub slit: Slit,
    /// Memory of each node, when known.
    pub node_memory: Option<u64>,
}

/// One physical core in a synthesised machine.
#[derive(Debug, Clone)]
pub(crate) struct CoreSpec {
    pub socket: usize,
    pub node: usize,
    /// Index of its L3 instance (into the instance list), if it has one.
    pub l3: Option<usize>,
    pub cpus: Vec<usize>,
}

/// One L3 instance in a synthesised machine.
#[derive(Debug, Clone)]
pub(crate) struct L3Spec {
    pub id: Option<u64>,
    pub size: Option<u64>,
}

/// A NUMA node of a synthesised machine (its CPUs come from the cores).
#[derive(Debug, Clone)]
pub(crate) struct NodeSpec {
    pub id: usize,
    pub memory_bytes: Option<u64>,
}

impl Recipe {
    /// The cores, L3 instances and nodes of the machine.
    pub(crate) fn layout(&self) -> (Vec<CoreSpec>, Vec<L3Spec>, Vec<NodeSpec>) {
        let (s_n, c_n) = (self.sockets, self.cores_per_socket);
        debug_assert_eq!(self.node_cores.iter().sum::<usize>(), c_n);
        debug_assert!(self.numbering == Numbering::SmtSplit || self.threads == 1);
        let per_socket_l3 = match self.l3 {
            L3::None => 0,
            L3::PerSocket => 1,
            L3::Blocks(n) => c_n.div_ceil(n),
        };
        let mut l3s = Vec::new();
        for s in 0..s_n {
            for i in 0..per_socket_l3 {
                let idx = s * per_socket_l3 + i;
                let id = match &self.l3_ids {
                    L3Ids::Seq => Some(idx as u64),
                    L3Ids::PerSocketTable { ids, stride } => {
                        let local = ids.get(i).copied().unwrap_or(i as u64);
                        Some(local + s as u64 * stride)
                    }
                    L3Ids::Absent => None,
                };
                l3s.push(L3Spec {
                    id,
                    size: self.l3_size,
                });
            }
        }
        let mut cores = Vec::with_capacity(s_n * c_n);
        for s in 0..s_n {
            for c in 0..c_n {
                let mut local_node = 0;
                let mut acc = 0;
                for (k, n) in self.node_cores.iter().enumerate() {
                    if c < acc + n {
                        local_node = k;
                        break;
                    }
                    acc += n;
                }
                let l3 = match self.l3 {
                    L3::None => None,
                    L3::PerSocket => Some(s),
                    L3::Blocks(n) => Some(s * per_socket_l3 + c / n),
                };
                let g = s * c_n + c;
                let cpus = match self.numbering {
                    Numbering::SmtSplit => (0..self.threads).map(|t| t * s_n * c_n + g).collect(),
                    Numbering::Linear => vec![g],
                };
                cores.push(CoreSpec {
                    socket: s,
                    node: s * self.node_cores.len() + local_node,
                    l3,
                    cpus,
                });
            }
        }
        let nodes = (0..s_n * self.node_cores.len())
            .map(|id| NodeSpec {
                id,
                memory_bytes: self.node_memory,
            })
            .collect();
        (cores, l3s, nodes)
    }

    /// The sysfs model of the machine.
    pub(crate) fn model(&self) -> MachineModel {
        let (cores, l3s, nodes) = self.layout();
        let per_socket = self.node_cores.len();
        let slit = self.slit.clone();
        build_model(&cores, &l3s, &nodes, |a, b| {
            if a == b {
                crate::sysfs::LOCAL_DISTANCE
            } else if a / per_socket != b / per_socket {
                slit.remote
            } else if let Some((size, d)) = slit.same_group {
                if (a % per_socket) / size == (b % per_socket) / size {
                    d
                } else {
                    slit.same_socket
                }
            } else {
                slit.same_socket
            }
        })
    }
}

/// Builds the sysfs model of synthesised cores: each CPU gets its package id, its core's
/// CPUs as thread siblings, a `nodeK` link and its L3 (if any) as last-level cache.
pub(crate) fn build_model(
    cores: &[CoreSpec],
    l3s: &[L3Spec],
    nodes: &[NodeSpec],
    distance: impl Fn(usize, usize) -> u32,
) -> MachineModel {
    let l3_cpus: Vec<CpuSet> = (0..l3s.len())
        .map(|i| {
            cores
                .iter()
                .filter(|c| c.l3 == Some(i))
                .flat_map(|c| c.cpus.iter().copied())
                .collect()
        })
        .collect();
    let mut cpus: Vec<CpuModel> = cores
        .iter()
        .flat_map(|core| {
            let siblings: CpuSet = core.cpus.iter().copied().collect();
            let l3 = core.l3.map(|i| CacheModel {
                level: 3,
                id: l3s[i].id,
                cpus: l3_cpus[i].clone(),
                size_bytes: l3s[i].size,
            });
            core.cpus.iter().map(move |&id| CpuModel {
                id,
                package_id: Some(core.socket as u64),
                siblings: Some(siblings.clone()),
                die_core: None,
                node_link: Some(core.node),
                l3: l3.clone(),
                llc: l3.clone(),
            })
        })
        .collect();
    cpus.sort_by_key(|c| c.id);
    let ids: Vec<usize> = nodes.iter().map(|n| n.id).collect();
    let node_models = nodes
        .iter()
        .map(|n| NodeModel {
            id: n.id,
            cpus: cores
                .iter()
                .filter(|c| c.node == n.id)
                .flat_map(|c| c.cpus.iter().copied())
                .collect(),
            distances: Some(ids.iter().map(|&j| distance(n.id, j)).collect()),
            memory_bytes: n.memory_bytes,
            hugepages: Vec::new(),
        })
        .collect();
    MachineModel {
        online: cpus.iter().map(|c| c.id).collect(),
        cpus,
        nodes: node_models,
        distance_columns: ids,
    }
}
