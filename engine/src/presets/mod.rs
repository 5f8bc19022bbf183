//! Built-in machine presets for `plan --preset NAME` (facts and sources:
//! `shared/topologies/PRESETS.md`).
//!
//! Each preset is a recipe ([`recipe`]) that synthesises the sysfs model Linux would show on
//! that machine (CPU numbering, thread siblings, L3 instances with their `id` values, NUMA
//! node blocks, SLIT distances) and resolves it with the same rules as discovery
//! ([`crate::sysfs::MachineModel::to_topology`]). Where PRESETS.md marks a fact as inferred
//! or uncertain, the preset's `notes` say so.

use crate::sysfs::MachineModel;
use crate::topology::CpuTopology;

mod recipe;

use recipe::{build_model, CoreSpec, L3Ids, L3Spec, NodeSpec, Numbering, Recipe, Slit, L3};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A preset's name and description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresetInfo {
    /// Lowercase-kebab name, as given to `--preset`.
    pub name: &'static str,
    /// One line: the machine and its shape.
    pub summary: &'static str,
    /// How it was encoded, what is inferred or uncertain.
    pub notes: &'static str,
}

/// An unknown preset name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresetError {
    /// No preset has this name.
    #[error("unknown preset {name:?}; valid presets: {valid}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The valid names, comma-separated.
        valid: String,
    },
    /// The preset's model did not resolve (a bug in the recipe).
    #[error("preset {name:?} is inconsistent: {reason}")]
    Inconsistent {
        /// The preset.
        name: String,
        /// Why.
        reason: String,
    },
}

const PRESETS: &[PresetInfo] = &[
    PresetInfo {
        name: "kep-4800-example",
        summary: "KEP-4800 worked example: 1 socket, 16 cores (no SMT), 2 uncore caches of 8 CPUs, 1 NUMA node",
        notes: "The KEP's 16-core split-uncore-cache processor (partial_uncore example: reserved 0-1, three 4-CPU containers). The KEP shows no SMT; L3 ids 0 and 1 in CPU order.",
    },
    PresetInfo {
        name: "epyc-7702p",
        summary: "1P AMD EPYC 7702P (Rome) NPS1: 64 cores x 2 threads = 128 CPUs, 16 L3 of 4 cores (16 MiB), 1 NUMA node",
        notes: "x86 SMT-split numbering (cpu c and c+64 are siblings). L3 ids 0..15 in CPU order are inferred (no Rome sysfs dump found).",
    },
    PresetInfo {
        name: "epyc-7303-2p",
        summary: "2P AMD EPYC 7303 (Milan) NPS1: 2 x 16 cores x 2 threads = 64 CPUs, 2 L3 of 8 cores (32 MiB) per socket, 2 NUMA nodes",
        notes: "Real 7303 shape: 2 CCDs of 8 cores per socket, inferred from its 64 MB L3. KEP-4800 instead lists '7303 32C, 4 uncore caches/socket' (the shape of an EPYC 7513: see epyc-7513-2p). L3 ids are sequential; real ids may be non-contiguous (CCD slots used unknown). SLIT 10/32.",
    },
    PresetInfo {
        name: "epyc-7513-2p",
        summary: "2P AMD EPYC 7513 (Milan) NPS1: 2 x 32 cores x 2 threads = 128 CPUs, 4 L3 of 8 cores (32 MiB) per socket, 2 NUMA nodes",
        notes: "The shape KEP-4800's test plan and the kubelet's topoSmallDualSocketSingleNumaPerSocketSMTUncore call '7303 32C'. Sequential L3 ids; SLIT 10/32.",
    },
    PresetInfo {
        name: "epyc-9754",
        summary: "1P AMD EPYC 9754 (Bergamo) NPS1: 128 cores x 2 threads = 256 CPUs, 16 L3 of 8 cores (16 MiB), 1 NUMA node",
        notes: "SMT-split numbering (siblings c and c+128). L3 ids sequential in CPU order; the real order may interleave by quadrant as on Genoa (no Bergamo dump found).",
    },
    PresetInfo {
        name: "epyc-9754-2p",
        summary: "2P AMD EPYC 9754-like NPS1: 2 x 128 cores x 2 threads = 512 CPUs, 32 L3 of 8 cores, 2 NUMA nodes (benchmark machine)",
        notes: "Two epyc-9754 sockets: socket 0 = 0-127,256-383, socket 1 = 128-255,384-511. The 2-socket, 512-CPU, 32-uncore-cache topology of the allocation benchmarks. Sequential L3 ids (inferred); SLIT 10/32 as on other 2P EPYC NPS1 machines.",
    },
    PresetInfo {
        name: "epyc-9654-2p-nps2",
        summary: "2P AMD EPYC 9654 (Genoa) NPS2, SMT off: 2 x 96 cores = 192 CPUs, 4 NUMA nodes of 48 cores, 24 L3 of 8 cores (32 MiB)",
        notes: "L3 ids follow the APIC-derived pattern of a real 2x9654 cpuid dump, not CPU order: socket 0 = 0,4,8,2,6,10,3,7,11,1,5,9, socket 1 = the same +16. With SMT off the order is assumed unchanged (inferred; the dump had SMT on). SLIT 10/12/32.",
    },
    PresetInfo {
        name: "epyc-9654-2p-nps4",
        summary: "2P AMD EPYC 9654 (Genoa) NPS4: 2 x 96 cores x 2 threads = 384 CPUs, 8 NUMA nodes of 24 cores, 24 L3 of 8 cores",
        notes: "Node k = cores 24k..24k+23 plus siblings +192, SLIT 10/12/32, both from a real 2x96C SMT host description. L3 ids as in the Genoa cpuid dump (node 0 holds L3 0,4,8; node 1 2,6,10; ...).",
    },
    PresetInfo {
        name: "epyc-9654-2p-l3-as-numa",
        summary: "2P AMD EPYC 9654 (Genoa), L3 as NUMA: 2 x 96 cores x 2 threads = 384 CPUs, 24 NUMA nodes, one L3 of 8 cores each",
        notes: "Node n = cores 8n..8n+7 plus siblings +192 (inferred: node order following CPU order; firmware could number nodes by L3 id instead). SLIT inferred from a 1P Rome L3-as-NUMA matrix: 10 self, 11 same quadrant (3 nodes), 12 same socket, 32 other socket. Exceeds the kubelet's default 8-node limit.",
    },
    PresetInfo {
        name: "xeon-8490h-2p-snc4",
        summary: "2P Intel Xeon Platinum 8490H (Sapphire Rapids) SNC4: 2 x 60 cores x 2 threads = 240 CPUs, 8 NUMA nodes of 15 cores, 1 L3 per socket",
        notes: "SMT-split numbering (s0 0-59, s1 60-119, siblings +120). SNC4 node blocks inferred from contiguous SNC4 blocks seen on 8480+. One 112.5 MiB L3 per socket spanning its 4 nodes (sysfs keeps the LLC package-wide under SNC), ids 0 and 1. SLIT 10/12/21.",
    },
    PresetInfo {
        name: "xeon-8490h-2p-snc2",
        summary: "2P Intel Xeon Platinum 8490H (Sapphire Rapids) SNC2: 2 x 60 cores x 2 threads = 240 CPUs, 4 NUMA nodes of 30 cores, 1 L3 per socket",
        notes: "The kubelet test's topoDualSocketSubNumaPerSocketHTMonolithicUncore shape. Same-socket distance 12 is unverified for SPR SNC2 (Skylake SNC2 reports 11); SNC2 availability on the 8490H is taken from the kubelet test model only.",
    },
    PresetInfo {
        name: "xeon-6980p-2p-snc3",
        summary: "2P Intel Xeon 6980P (Granite Rapids-AP) SNC3: 2 x 128 cores x 2 threads = 512 CPUs, 6 NUMA nodes (43/43/42 cores), 1 L3 per socket",
        notes: "Node CPU blocks from a real 2x6980P (0-42 | 43-85 | 86-127 | ...), siblings +256. One 504 MiB L3 per socket assumed (inferred from a sibling 6972P). SLIT 10/12/21 uncertain.",
    },
    PresetInfo {
        name: "xeon-6-4p-snc3",
        summary: "4P Intel Xeon 6 SNC3 (synthetic): 4 x 72 cores x 2 threads = 576 CPUs, 12 NUMA nodes of 24 cores, 1 L3 per socket",
        notes: "Synthetic: no Xeon 6 part with three compute tiles (SNC3) supports four sockets (the 6900P series is 2-socket only). Built from the 6960P tile layout (72 cores = 3 x 24) on four sockets for multi-NUMA testing. SMT-split numbering, one 432 MiB L3 per socket (assumed), SLIT 10/12/21 (assumed, Intel SNC practice).",
    },
    PresetInfo {
        name: "core-i7-12850hx",
        summary: "Intel Core i7-12850HX (Alder Lake-HX hybrid): 8 P-cores x 2 threads + 8 E-cores = 24 CPUs, 1 L3 (25 MiB), 1 NUMA node",
        notes: "Hybrid numbering: P-core siblings adjacent (0-1, ..., 14-15), then E-cores 16-23 (L2 clusters of 4), inferred from a Raptor Lake i7-1370P dump and HX APIC listings. The kubelet test instead puts E-cores at cpu0-7. threadsPerCore is 2 (largest sibling set).",
    },
    PresetInfo {
        name: "ampere-altra-128c",
        summary: "1P Ampere Altra Max M128-30: 128 cores, no SMT, no L3 in sysfs (1 uncore cache = the socket), 1 NUMA node",
        notes: "Faithful to sysfs: L1/L2 only, the system-level cache is not a CPU cache there, so the kubelet sees one uncore cache (socket fallback). KEP-4800 lists '16 uncore caches' for Altra: see ampere-altra-128c-kep-shape. Monolithic NUMA mode (default).",
    },
    PresetInfo {
        name: "ampere-altra-128c-kep-shape",
        summary: "1P Ampere Altra 128c as KEP-4800 models it: 128 cores, no SMT, 16 synthetic uncore caches of 8 cores, 1 NUMA node",
        notes: "The kubelet's topoLargeSingleSocketSingleNumaPerSocketUncore shape. The 16 L3 groups are synthetic: real Altra sysfs shows no L3 (see ampere-altra-128c).",
    },
    PresetInfo {
        name: "graviton3",
        summary: "1P AWS Graviton3: 64 cores, no SMT, 1 L3 of 32 MiB, 1 NUMA node",
        notes: "Linear numbering. One L3 covering all CPUs without an id file is inferred (seen on Graviton2 lstopo; Graviton3 sysfs not seen).",
    },
    PresetInfo {
        name: "synthetic-64-numa",
        summary: "Synthetic 4-socket machine with 64 NUMA nodes: 4 x 64 cores x 2 threads = 512 CPUs, one L3 of 4 cores per node, 16 GiB per node",
        notes: "Synthetic (no real machine): L3-as-NUMA style, 16 nodes per socket in 4 groups of 4. SLIT 10 self, 11 same group, 12 same socket, 32 other socket. SMT-split numbering. For topology-manager scaling tests up to the 64-node limit.",
    },
];

/// Every preset, in a stable order.
pub fn list() -> &'static [PresetInfo] {
    PRESETS
}

/// Builds the topology of the preset `name`.
pub fn build(name: &str) -> Result<CpuTopology, PresetError> {
    let model = model(name)?;
    model.to_topology().map_err(|e| PresetError::Inconsistent {
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// The sysfs model of the preset `name` (what its `/sys` would say).
pub fn model(name: &str) -> Result<MachineModel, PresetError> {
    if name == "core-i7-12850hx" {
        return Ok(alder_lake_hx());
    }
    let recipe = amd_recipe(name)
        .or_else(|| intel_recipe(name))
        .or_else(|| other_recipe(name))
        .ok_or_else(|| PresetError::Unknown {
            name: name.to_string(),
            valid: PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    Ok(recipe.model())
}

/// The SLIT of the AMD presets: 10 self, 12 same socket, 32 other socket.
fn amd_slit() -> Slit {
    Slit {
        same_group: None,
        same_socket: 12,
        remote: 32,
    }
}

/// Genoa's L3 ids: the APIC-derived order of a real 2x9654 cpuid dump, +16 per socket.
fn genoa_ids() -> L3Ids {
    L3Ids::PerSocketTable {
        ids: vec![0, 4, 8, 2, 6, 10, 3, 7, 11, 1, 5, 9],
        stride: 16,
    }
}

/// A one-socket, one-node machine (AMD SLIT), SMT-split numbered when it has SMT.
fn one_socket(cores: usize, threads: usize, l3: L3, ids: L3Ids, size: Option<u64>) -> Recipe {
    Recipe {
        sockets: 1,
        cores_per_socket: cores,
        threads,
        numbering: if threads == 1 {
            Numbering::Linear
        } else {
            Numbering::SmtSplit
        },
        node_cores: vec![cores],
        l3,
        l3_ids: ids,
        l3_size: size,
        slit: amd_slit(),
        node_memory: None,
    }
}

/// A two-socket EPYC: SMT-split numbering, an L3 per 8 cores, `node_cores` per node.
fn epyc_2p(cores: usize, threads: usize, node_cores: Vec<usize>, ids: L3Ids, size: u64) -> Recipe {
    Recipe {
        sockets: 2,
        cores_per_socket: cores,
        threads,
        numbering: Numbering::SmtSplit,
        node_cores,
        l3: L3::Blocks(8),
        l3_ids: ids,
        l3_size: Some(size),
        slit: amd_slit(),
        node_memory: None,
    }
}

/// The AMD EPYC presets (`None`: not one of them).
fn amd_recipe(name: &str) -> Option<Recipe> {
    Some(match name {
        "kep-4800-example" => one_socket(16, 1, L3::Blocks(8), L3Ids::Seq, None),
        "epyc-7702p" => one_socket(64, 2, L3::Blocks(4), L3Ids::Seq, Some(16 * MIB)),
        "epyc-7303-2p" => epyc_2p(16, 2, vec![16], L3Ids::Seq, 32 * MIB),
        "epyc-7513-2p" => epyc_2p(32, 2, vec![32], L3Ids::Seq, 32 * MIB),
        "epyc-9754" => one_socket(128, 2, L3::Blocks(8), L3Ids::Seq, Some(16 * MIB)),
        "epyc-9754-2p" => epyc_2p(128, 2, vec![128], L3Ids::Seq, 16 * MIB),
        "epyc-9654-2p-nps2" => epyc_2p(96, 1, vec![48, 48], genoa_ids(), 32 * MIB),
        "epyc-9654-2p-nps4" => epyc_2p(96, 2, vec![24; 4], genoa_ids(), 32 * MIB),
        "epyc-9654-2p-l3-as-numa" => Recipe {
            slit: Slit {
                same_group: Some((3, 11)),
                ..amd_slit()
            },
            ..epyc_2p(96, 2, vec![8; 12], genoa_ids(), 32 * MIB)
        },
        _ => return None,
    })
}

/// The Intel Xeon presets with sub-NUMA clustering (`None`: not one of them): SMT-split
/// numbering, one L3 per socket, SLIT 10/12/21.
fn intel_recipe(name: &str) -> Option<Recipe> {
    let (sockets, cores_per_socket, node_cores, l3_size) = match name {
        "xeon-8490h-2p-snc4" => (2, 60, vec![15; 4], 115_200 * KIB),
        "xeon-8490h-2p-snc2" => (2, 60, vec![30; 2], 115_200 * KIB),
        "xeon-6980p-2p-snc3" => (2, 128, vec![43, 43, 42], 504 * MIB),
        "xeon-6-4p-snc3" => (4, 72, vec![24; 3], 432 * MIB),
        _ => return None,
    };
    Some(Recipe {
        sockets,
        cores_per_socket,
        threads: 2,
        numbering: Numbering::SmtSplit,
        node_cores,
        l3: L3::PerSocket,
        l3_ids: L3Ids::Seq,
        l3_size: Some(l3_size),
        slit: Slit {
            same_group: None,
            same_socket: 12,
            remote: 21,
        },
        node_memory: None,
    })
}

/// The Arm and synthetic presets (`None`: not one of them).
fn other_recipe(name: &str) -> Option<Recipe> {
    Some(match name {
        "ampere-altra-128c" => one_socket(128, 1, L3::None, L3Ids::Absent, None),
        "ampere-altra-128c-kep-shape" => one_socket(128, 1, L3::Blocks(8), L3Ids::Seq, None),
        "graviton3" => one_socket(64, 1, L3::PerSocket, L3Ids::Absent, Some(32 * MIB)),
        "synthetic-64-numa" => Recipe {
            sockets: 4,
            cores_per_socket: 64,
            threads: 2,
            numbering: Numbering::SmtSplit,
            node_cores: vec![4; 16],
            l3: L3::Blocks(4),
            l3_ids: L3Ids::Seq,
            l3_size: Some(16 * MIB),
            slit: Slit {
                same_group: Some((4, 11)),
                ..amd_slit()
            },
            node_memory: Some(16 * GIB),
        },
        _ => return None,
    })
}

/// i7-12850HX: P-cores with adjacent siblings (cpu 2k, 2k+1), then eight single-thread
/// E-cores (16-23); one L3 (id 0, 25 MiB) over all of them; one NUMA node.
fn alder_lake_hx() -> MachineModel {
    let mut cores: Vec<CoreSpec> = (0..8)
        .map(|k| CoreSpec {
            socket: 0,
            node: 0,
            l3: Some(0),
            cpus: vec![2 * k, 2 * k + 1],
        })
        .collect();
    cores.extend((16..24).map(|cpu| CoreSpec {
        socket: 0,
        node: 0,
        l3: Some(0),
        cpus: vec![cpu],
    }));
    let l3 = [L3Spec {
        id: Some(0),
        size: Some(25 * MIB),
    }];
    let node = [NodeSpec {
        id: 0,
        memory_bytes: None,
    }];
    build_model(&cores, &l3, &node, |_, _| crate::sysfs::LOCAL_DISTANCE)
}

#[cfg(test)]
mod tests;
