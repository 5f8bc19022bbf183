//! Semantic checks on the two state files the agent reads: its own checkpoint and the
//! kubelet's CPU manager state. Bytes that pass their checksum can still contradict
//! themselves (a CPU in two pods' containers, a record that disagrees with its CPU entry, a
//! CPU this machine does not have); nothing from either file is used or published before
//! these checks pass.
//!
//! Invariants (each violation names the file, the invariant and the offending entry):
//! - well-formed: every CPU set parses (list syntax, ids within the CPU-id cap);
//! - on this machine: every CPU is a CPU of the discovered topology;
//! - exclusive: no CPU is in the shared pool and a container, nor in containers of two
//!   different pods (containers of one pod may share: init-container CPUs are reused by the
//!   pod's later containers, as on the kubelet);
//! - records match entries (checkpoint only): every published allocation record has exactly
//!   the CPUs of its CPU-state entry, and every entry has a record; a pod is not both
//!   admitted and rejected.
//!
//! A fifth invariant, the reserved CPUs lie in the shared pool, needs the configuration and
//! is checked when the first configuration restores the state (the static policy's `start`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use nodetopo_crds::conditions::reason;
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::{CpuSet, CpuTopology};

use crate::daemon::checkpoint::CheckpointData;
use nodetopo_kubelet::cpu_checkpoint::{self, CpuCheckpoint};

/// Which invariant a state file breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// A CPU set does not parse.
    WellFormed,
    /// A CPU is not a CPU of this machine.
    OnMachine,
    /// A CPU is held twice (shared and exclusive, or by two pods).
    Exclusive,
    /// Allocation records and CPU entries disagree.
    RecordsMatchEntries,
    /// Reserved CPUs missing from the shared pool (or another check of the policy's start).
    ReservedInShared,
}

impl Invariant {
    /// The PascalCase condition reason for a checkpoint that breaks this invariant.
    pub fn checkpoint_reason(self) -> &'static str {
        match self {
            Self::WellFormed => reason::CHECKPOINT_MALFORMED_SET,
            Self::OnMachine => reason::CHECKPOINT_CPU_NOT_ON_MACHINE,
            Self::Exclusive => reason::CHECKPOINT_CPU_OVERLAP,
            Self::RecordsMatchEntries => reason::CHECKPOINT_RECORDS_MISMATCH,
            Self::ReservedInShared => reason::CHECKPOINT_INCONSISTENT,
        }
    }

    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::WellFormed => "well-formed CPU sets",
            Self::OnMachine => "CPUs on this machine",
            Self::Exclusive => "no CPU in two places",
            Self::RecordsMatchEntries => "records match entries",
            Self::ReservedInShared => "reserved CPUs in the shared pool",
        }
    }
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: invariant \"{}\" violated: {why}", invariant.name())]
pub struct Violation {
    /// The file.
    pub file: String,
    /// Which invariant.
    pub invariant: Invariant,
    /// What exactly (names the entry).
    pub why: String,
}

/// Checks the exclusive-CPU invariants of a shared pool and per-pod assignments.
fn check_sets<'a>(
    topology: &CpuTopology,
    default: &CpuSet,
    entries: impl Iterator<Item = (&'a String, &'a String, &'a CpuSet)>,
) -> Result<(), (Invariant, String)> {
    let off = |set: &CpuSet| set.iter().find(|c| topology.cpu(*c).is_none());
    if let Some(cpu) = off(default) {
        return Err((
            Invariant::OnMachine,
            format!("cpu {cpu} of the shared pool is not a CPU of this machine"),
        ));
    }
    // cpu -> (pod, container) holding it.
    let mut owner: BTreeMap<usize, (&String, &String)> = BTreeMap::new();
    for (uid, c, set) in entries {
        if let Some(cpu) = off(set) {
            return Err((
                Invariant::OnMachine,
                format!("cpu {cpu} of {uid}/{c} is not a CPU of this machine"),
            ));
        }
        if let Some(cpu) = set.intersection(default).first() {
            return Err((
                Invariant::Exclusive,
                format!("cpu {cpu} is in both the shared pool and {uid}/{c}"),
            ));
        }
        for cpu in set.iter() {
            if let Some((u0, c0)) = owner.insert(cpu, (uid, c)) {
                if u0 != uid {
                    return Err((
                        Invariant::Exclusive,
                        format!("cpu {cpu} is held by both {u0}/{c0} and {uid}/{c}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Validates a restored checkpoint against this machine and returns its CPU state.
pub fn checkpoint(
    file: &Path,
    data: &CheckpointData,
    topology: &CpuTopology,
) -> Result<CpuState, Violation> {
    let fail = |invariant, why| Violation {
        file: file.display().to_string(),
        invariant,
        why,
    };
    let parse = |what: &str, s: &str| {
        CpuSet::parse(s).map_err(|e| fail(Invariant::WellFormed, format!("{what} {s:?}: {e}")))
    };
    let default_cpuset = parse("defaultCpuSet", &data.default_cpu_set)?;
    let mut assignments: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    for (uid, cs) in &data.entries {
        let mut m = BTreeMap::new();
        for (c, s) in cs {
            m.insert(c.clone(), parse(&format!("entries[{uid}][{c}]"), s)?);
        }
        assignments.insert(uid.clone(), m);
    }
    let flat = assignments
        .iter()
        .flat_map(|(u, cs)| cs.iter().map(move |(c, s)| (u, c, s)));
    check_sets(topology, &default_cpuset, flat).map_err(|(i, why)| fail(i, why))?;
    // Records <=> entries.
    let mut recorded: BTreeSet<(&String, &String)> = BTreeSet::new();
    for (uid, records) in &data.allocations {
        if data.rejections.contains_key(uid) {
            return Err(fail(
                Invariant::RecordsMatchEntries,
                format!("pod {uid} is both admitted and rejected"),
            ));
        }
        for r in records {
            if &r.pod_uid != uid {
                return Err(fail(
                    Invariant::RecordsMatchEntries,
                    format!("allocations[{uid}] holds a record of pod {}", r.pod_uid),
                ));
            }
            let cpus = parse(
                &format!("allocations[{uid}][{}].cpus", r.container),
                &r.cpus,
            )?;
            let Some(entry) = assignments.get(uid).and_then(|m| m.get(&r.container)) else {
                return Err(fail(
                    Invariant::RecordsMatchEntries,
                    format!(
                        "the record of {uid}/{} has no CPU entry (it shows {:?})",
                        r.container, r.cpus
                    ),
                ));
            };
            if &cpus != entry {
                return Err(fail(
                    Invariant::RecordsMatchEntries,
                    format!(
                        "the record of {uid}/{} shows {:?} but its entry holds \"{entry}\"",
                        r.container, r.cpus
                    ),
                ));
            }
            if !recorded.insert((uid, &r.container)) {
                return Err(fail(
                    Invariant::RecordsMatchEntries,
                    format!("two records of {uid}/{}", r.container),
                ));
            }
        }
    }
    for (uid, cs) in &assignments {
        for c in cs.keys() {
            if !recorded.contains(&(uid, c)) {
                return Err(fail(
                    Invariant::RecordsMatchEntries,
                    format!("the CPU entry of {uid}/{c} has no allocation record"),
                ));
            }
        }
    }
    Ok(CpuState {
        default_cpuset,
        assignments,
    })
}

/// Validates the kubelet's CPU manager state against this machine before anything from it
/// is published, pod-level entries (`podEntries`) included: on the machine, outside the
/// shared pool and other pods' CPUs. (Parsing already made every set well-formed.)
pub fn kubelet_state(
    file: &Path,
    state: &CpuCheckpoint,
    topology: &CpuTopology,
) -> Result<(), Violation> {
    let pod_level = String::from("(pod-level)");
    let flat = state
        .entries
        .iter()
        .flat_map(|(u, cs)| cs.iter().map(move |(c, s)| (u, c, s)))
        .chain(state.pod_entries.iter().map(|(u, s)| (u, &pod_level, s)));
    check_sets(topology, &state.default_cpu_set, flat).map_err(|(invariant, why)| Violation {
        file: file.display().to_string(),
        invariant,
        why,
    })
}

/// The same invariants for any kubelet view (a checkpoint, a PodResources answer): a shared
/// pool and pod -> container -> CPUs on this machine, no CPU in two pods or in both places.
pub fn kubelet_sets(
    file: &Path,
    default: &CpuSet,
    entries: &BTreeMap<String, BTreeMap<String, CpuSet>>,
    topology: &CpuTopology,
) -> Result<(), Violation> {
    let flat = entries
        .iter()
        .flat_map(|(u, cs)| cs.iter().map(move |(c, s)| (u, c, s)));
    check_sets(topology, default, flat).map_err(|(invariant, why)| Violation {
        file: file.display().to_string(),
        invariant,
        why,
    })
}

/// Why the kubelet's CPU manager checkpoint cannot be compared (the `KubeletAgreement`
/// condition).
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeletError {
    /// The file cannot be read or parsed.
    #[error("{0}")]
    Read(Arc<cpu_checkpoint::ReadError>),
    /// The state read by a shell breaks an invariant on this machine.
    #[error("kubelet CPU manager state {0}")]
    Invalid(Violation),
    /// The state a shell handed over breaks an invariant (the core checks again).
    #[error("{0}")]
    Rechecked(Violation),
}

/// Reads, parses and validates the kubelet state: the value the shells feed the core as
/// `Event::Kubelet`. A state that breaks an invariant is reported, never published.
///
/// The read is bounded ([`cpu_checkpoint::MAX_BYTES`], regular files only): a FIFO or
/// `/dev/zero` mounted in its place is reported, never read forever. A missing file (no
/// kubelet CPU manager, or the mount absent) is `Ok(None)`.
pub fn read_kubelet_state(
    file: &Path,
    topology: &CpuTopology,
) -> Result<Option<CpuCheckpoint>, KubeletError> {
    let state = cpu_checkpoint::read(file).map_err(|e| KubeletError::Read(Arc::new(e)))?;
    if let Some(s) = &state {
        kubelet_state(file, s, topology).map_err(KubeletError::Invalid)?;
    }
    Ok(state)
}

/// The kubelet's Memory Manager checkpoint, `memory_manager_state` beside its CPU manager
/// checkpoint (`cpu_state`, `--kubelet-state`), read with the one reader of
/// `nodetopo-kubelet`: the value both shells feed the core as `Event::KubeletMemory`. A
/// missing file is `Ok(None)`.
pub fn read_memory_state(
    cpu_state: &Path,
) -> Result<Option<nodetopo_kubelet::memory_checkpoint::MemoryCheckpoint>, String> {
    nodetopo_kubelet::memory_checkpoint::read(&cpu_state.with_file_name("memory_manager_state"))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
