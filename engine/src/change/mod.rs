//! The change planner: what it takes to move a kubelet from the CPU/topology-manager
//! configuration it runs to the one a policy wants, without draining when a drain is not
//! needed.
//!
//! Pure: inputs are the machine, the kubelet's effective configuration, its CPU manager
//! checkpoint (as plain values), the pods on the node and the desired configuration; the
//! output is an ordered [`ChangePlan`]. Nothing is read or written here; the agent's
//! executor and the offline `diff` command call [`plan_change`] with what they read.
//!
//! The kubelet's start-up rules reproduced (k8s.io/kubernetes v1.37
//! `cpumanager/state/state_checkpoint.go` `restoreState` and `policy_static.go`
//! `validateState`, which [`crate::cpumanager::StaticPolicy::start`] mirrors):
//! - the checkpoint's policy name must equal the configured policy, otherwise the kubelet
//!   refuses to start ("configured policy ... differs from state checkpoint policy");
//! - static: an empty default set is re-initialised only when there are no assignments;
//!   without `strict-cpu-reservation` every reserved CPU must be in the default set, with it
//!   none may be; no assignment may overlap the default set; the default set and the
//!   assignments together must be exactly the machine's CPUs (minus the reserved ones under
//!   strict reservation).
//!
//! So a reserved set that grows into CPUs held by a container (kubernetes PR #129079's
//! review case) cannot be kept: the kubelet would refuse the state, so that container's pod
//! is evicted first. A state left inconsistent by a kubelet killed between its two writes
//! (kubernetes issue #136604: CPUs both shared and assigned, or in neither) is refused by the
//! next start, so it is rewritten (the assignments are what containers run on; the shared
//! pool is recomputed from them). After a restart the kubelet re-admits running pods: an
//! existing assignment is kept as it is (`Allocate` returns early, so a newly required
//! `full-pcpus-only` does not apply to it: reported as non-conforming), but the topology
//! manager re-checks the NUMA affinity of the assigned CPUs, so a pod that the new
//! `restricted` or `single-numa-node` policy would reject is evicted first (through the
//! Eviction API, so that its PodDisruptionBudget holds) rather than failed by the kubelet.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cpumanager::{guaranteed_cpus, CpuState, ReservedCpus, StaticPolicy};
use crate::cpuset::CpuSet;
use crate::pod::Pod;
use crate::spec::CpuManagerPolicy;
use crate::topology::CpuTopology;
use crate::topologymanager::{TmPolicy, TmScope};

mod owned;

pub use owned::{OptionFieldError, OwnedConfig};

/// The kubelet's CPU manager checkpoint content as plain values.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletCpuState {
    /// `policyName`.
    pub policy_name: String,
    /// The shared pool and the exclusive assignments.
    #[serde(flatten)]
    pub state: CpuState,
}

/// A configuration that the kubelet would build, checked the way it checks at start-up.
#[derive(Debug, Clone)]
pub struct CheckedConfig {
    /// The configuration.
    pub config: OwnedConfig,
    /// The static policy, when the policy is `static`.
    pub policy: Option<StaticPolicy>,
    /// Topology manager policy.
    pub tm_policy: TmPolicy,
    /// Topology manager scope.
    pub tm_scope: TmScope,
}

/// Why a configuration cannot be planned for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// A configuration the kubelet itself would refuse.
    #[error("{which} kubelet configuration: {why}")]
    Config {
        /// `current` or `desired`.
        which: &'static str,
        /// The kubelet's complaint.
        why: String,
    },
    /// The state written by the plan fails the planner's own start-up check (a bug; never
    /// written).
    #[error("internal: the planned state would be refused by the kubelet: {0}")]
    Internal(String),
}

/// Builds the kubelet's managers from a configuration, with its validation.
pub fn check_config(
    topology: &CpuTopology,
    config: &OwnedConfig,
    which: &'static str,
) -> Result<CheckedConfig, ChangeError> {
    let err = |why: String| ChangeError::Config { which, why };
    config.tm_options().map_err(|e| err(e.to_string()))?;
    let tm_policy = config.topology_manager_policy;
    let policy = match config.cpu_manager_policy {
        CpuManagerPolicy::None => {
            if !config.cpu_manager_policy_options.is_empty() {
                // The kubelet ignores options under none; nodetopo refuses to write a
                // configuration whose options would silently do nothing.
                return Err(err(
                    "cpuManagerPolicyOptions are set but cpuManagerPolicy is none".into(),
                ));
            }
            None
        }
        CpuManagerPolicy::Static => {
            let options = config.static_options().map_err(|e| err(e.to_string()))?;
            options
                .validate_for(topology, tm_policy == TmPolicy::SingleNumaNode)
                .map_err(|e| err(format!("cpuManagerPolicyOptions: {e}")))?;
            let reserved = config.reserved();
            let count = match &reserved {
                ReservedCpus::Explicit(s) => s.len(),
                ReservedCpus::Count(n) => *n,
            };
            if count == 0 {
                return Err(err(
                    "the static policy requires reservedSystemCPUs or kubeReserved/systemReserved cpu to be greater than zero".into(),
                ));
            }
            Some(
                StaticPolicy::new(topology.clone(), reserved, options)
                    .map_err(|e| err(format!("cpu manager: {e}")))?,
            )
        }
    };
    Ok(CheckedConfig {
        config: config.clone(),
        policy,
        tm_policy,
        tm_scope: config.topology_manager_scope,
    })
}

/// What the kubelet does at start-up with this checkpoint under this configuration:
/// `Ok(state it runs with)` or `Err(its refusal)`. `None` (no file) is a fresh start.
pub fn kubelet_start(
    cfg: &CheckedConfig,
    state: Option<&KubeletCpuState>,
) -> Result<CpuState, String> {
    let Some(s) = state else {
        let mut fresh = CpuState::default();
        if let Some(p) = &cfg.policy {
            p.start(&mut fresh).map_err(|e| e.to_string())?;
        }
        return Ok(fresh);
    };
    let configured = cfg.config.cpu_manager_policy.as_str();
    if s.policy_name != configured {
        return Err(format!(
            "could not restore state from checkpoint: configured policy {configured:?} differs from state checkpoint policy {:?}",
            s.policy_name
        ));
    }
    let mut st = s.state.clone();
    if let Some(p) = &cfg.policy {
        p.start(&mut st).map_err(|e| e.to_string())?;
    }
    Ok(st)
}

/// The class of a step, in increasing order of disruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChangeClass {
    /// Nothing to do.
    NoChange,
    /// Write the configuration and restart the kubelet; its state stays valid.
    RestartOnly,
    /// The state file must be rewritten (with the kubelet's checksum) before the restart.
    RewriteState,
    /// Named pods must be evicted before the restart.
    EvictFirst,
    /// Nothing less than draining the node is correct.
    Drain,
}

impl ChangeClass {
    /// The name used in status and output.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeClass::NoChange => "NoChange",
            ChangeClass::RestartOnly => "RestartOnly",
            ChangeClass::RewriteState => "RewriteState",
            ChangeClass::EvictFirst => "EvictFirst",
            ChangeClass::Drain => "Drain",
        }
    }
}

impl std::fmt::Display for ChangeClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    /// The step's class.
    pub class: ChangeClass,
    /// Why, for a person.
    pub reason: String,
    /// The pods concerned (`namespace/name`, or the UID for a pod not in the pod list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
}

/// An existing container that the new configuration would have placed differently; it
/// keeps its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonConforming {
    /// `namespace/name` (or the UID).
    pub pod: String,
    /// The container.
    pub container: String,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// What the new configuration would have done differently.
    pub why: String,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangePlan {
    /// The most disruptive class of the steps.
    pub class: ChangeClass,
    /// The owned fields that change (`field: old -> new`).
    pub config_changes: Vec<String>,
    /// The steps, in order.
    pub steps: Vec<PlanStep>,
    /// Existing containers kept although the new configuration would place them otherwise.
    pub non_conforming: Vec<NonConforming>,
    /// The checkpoint to write before the restart (RewriteState, Drain), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_state: Option<KubeletCpuState>,
    /// The state the kubelet runs with after the plan, as its start-up would make it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_state: Option<CpuState>,
}

impl ChangePlan {
    /// The reason of the first step: what the plan leads with (empty without steps).
    pub fn first_reason(&self) -> &str {
        self.steps.first().map_or("", |s| s.reason.as_str())
    }
}

/// Everything the planner looks at.
#[derive(Debug, Clone, Copy)]
pub struct ChangeInput<'a> {
    /// The machine.
    pub topology: &'a CpuTopology,
    /// What the kubelet runs now.
    pub current: &'a OwnedConfig,
    /// Its checkpoint (`None`: no file).
    pub state: Option<&'a KubeletCpuState>,
    /// The pods on the node (UIDs as in the checkpoint).
    pub pods: &'a [Pod],
    /// What the policy wants.
    pub desired: &'a OwnedConfig,
}

/// Why a kubelet with feature gates `gates` (its `featureGates`; absent ones at their
/// defaults) would refuse the options of `desired`: alpha options need the manager's
/// `...PolicyAlphaOptions` gate, beta ones its `...PolicyBetaOptions` gate (on by default).
/// Empty when it accepts them. Gates given on the kubelet's command line are not seen here.
pub fn gate_problems(desired: &OwnedConfig, gates: &BTreeMap<String, bool>) -> Vec<String> {
    let mut out = crate::cpumanager::options::CPU_OPTION_TABLE
        .gate_problems(desired.cpu_manager_policy_options.keys(), gates);
    out.extend(
        crate::topologymanager::options::TM_OPTION_TABLE
            .gate_problems(desired.topology_manager_policy_options.keys(), gates),
    );
    out
}

/// The owned fields that differ, as `field: old -> new`.
pub fn config_diff(current: &OwnedConfig, desired: &OwnedConfig) -> Vec<String> {
    let map = |m: &BTreeMap<String, String>| {
        if m.is_empty() {
            "{}".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    let reserved = |c: &OwnedConfig| match c.reserved() {
        ReservedCpus::Explicit(s) => format!("\"{s}\""),
        ReservedCpus::Count(n) => format!("{n} CPUs (by count)"),
    };
    let mut out = Vec::new();
    let mut diff = |field: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{field}: {a} -> {b}"));
        }
    };
    diff(
        "cpuManagerPolicy",
        current.cpu_manager_policy.to_string(),
        desired.cpu_manager_policy.to_string(),
    );
    diff(
        "cpuManagerPolicyOptions",
        map(&current.cpu_manager_policy_options),
        map(&desired.cpu_manager_policy_options),
    );
    diff("reservedSystemCPUs", reserved(current), reserved(desired));
    diff(
        "topologyManagerPolicy",
        current.topology_manager_policy.name().into(),
        desired.topology_manager_policy.name().into(),
    );
    diff(
        "topologyManagerScope",
        current.topology_manager_scope.name().into(),
        desired.topology_manager_scope.name().into(),
    );
    diff(
        "topologyManagerPolicyOptions",
        map(&current.topology_manager_policy_options),
        map(&desired.topology_manager_policy_options),
    );
    out
}

/// Names pods by `namespace/name` when known, else by UID.
struct PodNames<'a> {
    by_uid: BTreeMap<&'a str, &'a Pod>,
}

impl<'a> PodNames<'a> {
    fn new(pods: &'a [Pod]) -> Self {
        Self {
            by_uid: pods.iter().map(|p| (p.uid.as_str(), p)).collect(),
        }
    }
    fn name(&self, uid: &str) -> String {
        match self.by_uid.get(uid) {
            Some(p) => p.key(),
            None => uid.to_string(),
        }
    }
}

/// Plans the change. Errors only for configurations the kubelet itself would refuse.
pub fn plan_change(input: ChangeInput<'_>) -> Result<ChangePlan, ChangeError> {
    check_config(input.topology, input.current, "current")?;
    let desired = check_config(input.topology, input.desired, "desired")?;
    let names = PodNames::new(input.pods);
    let config_changes = config_diff(input.current, input.desired);
    let mut steps = Vec::new();
    let mut non_conforming = Vec::new();

    let (old_policy, new_policy) = (
        input.current.cpu_manager_policy.as_str(),
        input.desired.cpu_manager_policy.as_str(),
    );
    // The policy the state file was written by (a missing file is the configured policy's).
    let state_policy = input.state.map_or(old_policy, |s| s.policy_name.as_str());

    if old_policy != new_policy || state_policy != new_policy {
        return Ok(plan_policy_switch(
            &input,
            &desired,
            &names,
            config_changes,
            state_policy,
        ));
    }

    // Same CPU manager policy. What the state looks like once the pods that cannot stay
    // are gone, and which pods those are.
    let mut state = input.state.map(|s| s.state.clone());
    let mut evict: BTreeMap<String, Vec<String>> = BTreeMap::new(); // uid -> reasons
    if let (Some(policy), Some(st)) = (&desired.policy, state.as_ref()) {
        held_reserved_or_offline(input.topology, policy, st, &mut evict);
        if !config_changes.is_empty() {
            tm_readmission(&input, &desired, st, &names, &mut evict);
        }
        non_conforming_smt(&input, &desired, st, &names, &mut non_conforming);
    }
    if !evict.is_empty() {
        steps.push(evict_first_step(&evict, &names));
        if let Some(st) = state.as_mut() {
            release_evicted(st, &evict);
        }
    }

    let after_evictions = state.as_ref().map(|st| KubeletCpuState {
        policy_name: state_policy.to_string(),
        state: st.clone(),
    });
    let (new_state, expected) = match kubelet_start(&desired, after_evictions.as_ref()) {
        Ok(st) => {
            steps.push(restart_step(
                &input,
                &desired,
                config_changes.is_empty() && evict.is_empty(),
            ));
            (None, st)
        }
        Err(refusal) => {
            let (step, written, expected) = rewrite_or_drain(
                &desired,
                &names,
                after_evictions.as_ref().map(|s| &s.state),
                &config_changes,
                new_policy,
                refusal,
            )?;
            steps.push(step);
            (Some(written), expected)
        }
    };
    Ok(finish(
        config_changes,
        steps,
        non_conforming,
        new_state,
        expected,
    ))
}

/// Records, for every container whose exclusive CPUs the kubelet could no longer keep under
/// `policy` (CPUs the new reserved set takes, or CPUs this machine does not have online),
/// why its pod has to be evicted first.
fn held_reserved_or_offline(
    topology: &CpuTopology,
    policy: &StaticPolicy,
    st: &CpuState,
    evict: &mut BTreeMap<String, Vec<String>>,
) {
    let machine = topology.all_cpus();
    let reserved = policy.reserved().clone();
    for (uid, containers) in &st.assignments {
        for (container, cpus) in containers {
            let taken = cpus.intersection(&reserved);
            if !taken.is_empty() {
                evict.entry(uid.clone()).or_default().push(format!(
                    "container {container} holds CPUs {taken} that the new reserved set \"{reserved}\" takes"
                ));
            }
            let gone = cpus.difference(&machine);
            if !gone.is_empty() {
                evict.entry(uid.clone()).or_default().push(format!(
                    "container {container} holds CPUs {gone} that this machine does not have online"
                ));
            }
        }
    }
}

/// The evict-first step: which pods go (by name) and, for each, why it cannot stay.
fn evict_first_step(evict: &BTreeMap<String, Vec<String>>, names: &PodNames<'_>) -> PlanStep {
    let pods: Vec<String> = evict.keys().map(|u| names.name(u)).collect();
    let reasons: Vec<String> = evict
        .iter()
        .map(|(u, r)| format!("{}: {}", names.name(u), r.join("; ")))
        .collect();
    PlanStep {
        class: ChangeClass::EvictFirst,
        reason: format!(
            "the new configuration cannot keep these exclusive assignments ({}); evict through the Eviction API and wait until the kubelet has released their CPUs",
            reasons.join(" | ")
        ),
        pods,
    }
}

/// The state once the evicted pods are gone: what the kubelet's `RemoveContainer` does for
/// each evicted container (its CPUs go back to the shared pool).
fn release_evicted(st: &mut CpuState, evict: &BTreeMap<String, Vec<String>>) {
    for uid in evict.keys() {
        if let Some(cs) = st.assignments.remove(uid) {
            for cpus in cs.values() {
                st.default_cpuset = st.default_cpuset.union(cpus);
            }
        }
    }
}

/// The step when the kubelet accepts the state as it is: nothing to do when neither the
/// configuration nor the pods change (`unchanged`), else a plain restart.
fn restart_step(input: &ChangeInput<'_>, desired: &CheckedConfig, unchanged: bool) -> PlanStep {
    if unchanged {
        PlanStep {
            class: ChangeClass::NoChange,
            reason: "the kubelet already runs the desired configuration and its state is valid"
                .into(),
            pods: vec![],
        }
    } else {
        PlanStep {
            class: ChangeClass::RestartOnly,
            reason: restart_only_reason(input.current, input.desired, desired),
            pods: vec![],
        }
    }
}

/// The step when the kubelet would refuse the state (after evictions) with `refusal`:
/// rewrite it with a recomputed shared pool when that keeps every assignment, else drain
/// and start from an empty state. Returns the step, the state to write and the state the
/// kubelet then starts with.
fn rewrite_or_drain(
    desired: &CheckedConfig,
    names: &PodNames<'_>,
    st: Option<&CpuState>,
    config_changes: &[String],
    new_policy: &str,
    refusal: String,
) -> Result<(PlanStep, KubeletCpuState, CpuState), ChangeError> {
    let Some(policy) = &desired.policy else {
        return Err(ChangeError::Internal(refusal));
    };
    let Some(repaired) = repair_state(policy, st.cloned().unwrap_or_default()) else {
        let holders: Vec<String> = st
            .map(|s| s.assignments.keys().map(|u| names.name(u)).collect())
            .unwrap_or_default();
        let step = PlanStep {
            class: ChangeClass::Drain,
            reason: format!(
                "with strict-cpu-reservation and reserved CPUs \"{}\" the exclusive assignments leave no shared CPU, which the kubelet refuses (\"default cpuset cannot be empty\"); drain, delete the state and restart",
                policy.reserved()
            ),
            pods: holders,
        };
        let fresh = KubeletCpuState {
            policy_name: new_policy.to_string(),
            state: CpuState::default(),
        };
        let expected = kubelet_start(desired, Some(&fresh)).map_err(ChangeError::Internal)?;
        return Ok((step, fresh, expected));
    };
    let why = if config_changes.is_empty() {
        format!(
            "the state is inconsistent (kubernetes#136604) and the kubelet would refuse it at its next start: {refusal}"
        )
    } else {
        format!("the kubelet would refuse today's state under the new configuration ({refusal})")
    };
    let step = PlanStep {
        class: ChangeClass::RewriteState,
        reason: format!(
            "{why}; rewrite it with shared pool \"{}\" (assignments kept), then restart",
            repaired.default_cpuset
        ),
        pods: vec![],
    };
    let written = KubeletCpuState {
        policy_name: new_policy.to_string(),
        state: repaired,
    };
    let expected = kubelet_start(desired, Some(&written)).map_err(ChangeError::Internal)?;
    Ok((step, written, expected))
}

fn finish(
    config_changes: Vec<String>,
    steps: Vec<PlanStep>,
    non_conforming: Vec<NonConforming>,
    new_state: Option<KubeletCpuState>,
    expected: CpuState,
) -> ChangePlan {
    let class = steps
        .iter()
        .map(|s| s.class)
        .max()
        .unwrap_or(ChangeClass::NoChange);
    ChangePlan {
        class,
        config_changes,
        steps,
        non_conforming,
        new_state,
        expected_state: Some(expected),
    }
}

/// The state the kubelet accepts under `policy` that keeps every assignment: the shared pool
/// is every CPU (minus the reserved ones under strict reservation) that no container holds.
/// `None` when that pool would be empty while assignments exist.
pub fn repair_state(policy: &StaticPolicy, mut st: CpuState) -> Option<CpuState> {
    let mut all = policy.topology().all_cpus();
    if policy.options().strict_cpu_reservation {
        all = all.difference(policy.reserved());
    }
    st.default_cpuset = all.difference(&st.assigned());
    if st.default_cpuset.is_empty() && !st.assignments.is_empty() {
        return None;
    }
    let mut check = st.clone();
    policy.start(&mut check).ok()?;
    Some(st)
}

fn restart_only_reason(
    current: &OwnedConfig,
    desired: &OwnedConfig,
    cfg: &CheckedConfig,
) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &cfg.policy {
        let old = &current.reserved_system_cpus;
        let new = p.reserved();
        if !desired.reserved_system_cpus.is_empty() && old != new {
            if p.options().strict_cpu_reservation {
                parts.push(format!(
                    "the reserved set \"{new}\" is already outside today's shared pool"
                ));
            } else {
                parts.push(format!(
                    "the new reserved set \"{new}\" lies wholly in today's shared pool"
                ));
            }
        }
    }
    if current.cpu_manager_policy_options != desired.cpu_manager_policy_options {
        parts.push("the CPU manager options affect only future admissions".into());
    }
    if current.topology_manager_policy != desired.topology_manager_policy
        || current.topology_manager_scope != desired.topology_manager_scope
        || current.topology_manager_policy_options != desired.topology_manager_policy_options
    {
        parts.push("the topology manager settings affect only admissions (every running pod passes re-admission)".into());
    }
    if parts.is_empty() {
        parts.push("the kubelet's state stays valid".into());
    }
    format!(
        "{}; write the configuration and restart the kubelet",
        parts.join("; ")
    )
}

/// none <-> static: the kubelet refuses the old checkpoint, and pods keep the CPUs they
/// were started with until they are recreated, so only a drain gives a correct node.
fn plan_policy_switch(
    input: &ChangeInput<'_>,
    desired: &CheckedConfig,
    names: &PodNames<'_>,
    config_changes: Vec<String>,
    state_policy: &str,
) -> ChangePlan {
    let new_policy = desired.config.cpu_manager_policy.as_str();
    let mut affected: BTreeSet<String> = BTreeSet::new();
    let reason = if desired.config.cpu_manager_policy == CpuManagerPolicy::Static {
        for p in input.pods {
            if p.all_containers().any(|c| guaranteed_cpus(p, c) > 0) {
                affected.insert(p.key());
            }
        }
        format!(
            "cpuManagerPolicy {state_policy} -> static: the kubelet refuses a checkpoint written by another policy, and running Guaranteed pods with whole CPUs stay unpinned on the shared pool until they are recreated; drain, delete the state file and restart"
        )
    } else {
        if let Some(s) = input.state {
            for uid in s.state.assignments.keys() {
                affected.insert(names.name(uid));
            }
        }
        format!(
            "cpuManagerPolicy {state_policy} -> {new_policy}: the kubelet refuses a checkpoint written by another policy, and pinned containers keep their exclusive CPUs until they are recreated; drain, delete the state file and restart"
        )
    };
    let fresh = KubeletCpuState {
        policy_name: new_policy.to_string(),
        state: CpuState::default(),
    };
    let expected = kubelet_start(desired, Some(&fresh)).ok();
    let steps = vec![PlanStep {
        class: ChangeClass::Drain,
        reason,
        pods: affected.into_iter().collect(),
    }];
    ChangePlan {
        class: ChangeClass::Drain,
        config_changes,
        steps,
        non_conforming: vec![],
        new_state: Some(fresh),
        expected_state: expected,
    }
}

/// The NUMA nodes of a CPU set.
fn numa_of(topology: &CpuTopology, cpus: &CpuSet) -> BTreeSet<usize> {
    cpus.iter()
        .filter_map(|c| topology.cpu(c).map(|i| i.numa))
        .collect()
}

/// The fewest NUMA nodes whose CPUs together number at least `n` (the kubelet's
/// `minAffinitySize` for a CPU request of `n`).
fn min_numa_nodes(topology: &CpuTopology, n: usize) -> usize {
    let mut sizes: Vec<usize> = topology
        .numa_nodes()
        .iter()
        .map(|node| node.cpus.len())
        .filter(|&k| k > 0)
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut total = 0;
    for (i, s) in sizes.iter().enumerate() {
        total += s;
        if total >= n {
            return i + 1;
        }
    }
    sizes.len().max(1)
}

/// Pods the topology manager would reject when it re-admits them after the restart: their
/// assigned CPUs span more NUMA nodes than the new policy allows.
fn tm_readmission(
    input: &ChangeInput<'_>,
    desired: &CheckedConfig,
    st: &CpuState,
    names: &PodNames<'_>,
    evict: &mut BTreeMap<String, Vec<String>>,
) {
    if !matches!(
        desired.tm_policy,
        TmPolicy::Restricted | TmPolicy::SingleNumaNode
    ) {
        return;
    }
    let _ = names;
    for (uid, containers) in &st.assignments {
        // Pod scope: one hint for the pod's CPUs together; container scope: one each.
        let groups: Vec<(String, CpuSet)> = if desired.tm_scope == TmScope::Pod {
            let all = containers
                .values()
                .fold(CpuSet::new(), |acc, s| acc.union(s));
            vec![("the pod".to_string(), all)]
        } else {
            containers
                .iter()
                .map(|(c, s)| (format!("container {c}"), s.clone()))
                .collect()
        };
        for (what, cpus) in groups {
            let span = numa_of(input.topology, &cpus).len();
            let min = min_numa_nodes(input.topology, cpus.len());
            let rejected = match desired.tm_policy {
                TmPolicy::SingleNumaNode => span > 1,
                _ => span > min,
            };
            if rejected {
                evict.entry(uid.clone()).or_default().push(format!(
                    "{what} holds CPUs {cpus} on {span} NUMA nodes where {min} would do; the {} topology manager policy would reject it when the kubelet re-admits it after the restart",
                    desired.tm_policy.name()
                ));
            }
        }
    }
}

/// Containers kept although the new `full-pcpus-only` would have given them whole cores.
fn non_conforming_smt(
    input: &ChangeInput<'_>,
    desired: &CheckedConfig,
    st: &CpuState,
    names: &PodNames<'_>,
    out: &mut Vec<NonConforming>,
) {
    let Some(policy) = &desired.policy else {
        return;
    };
    if !policy.options().full_pcpus_only {
        return;
    }
    let t = input.topology;
    for (uid, containers) in &st.assignments {
        for (container, cpus) in containers {
            let cores: BTreeSet<usize> = cpus
                .iter()
                .filter_map(|c| t.cpu(c).map(|i| i.core))
                .collect();
            let whole = t.cpus_where(|i| cores.contains(&i.core));
            if &whole != cpus {
                out.push(NonConforming {
                    pod: names.name(uid),
                    container: container.clone(),
                    cpus: cpus.clone(),
                    why: format!(
                        "full-pcpus-only would give whole physical cores; it holds part of cores (whole cores would be {whole}); the kubelet keeps existing assignments, so it stays until recreated"
                    ),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_order_is_disruption_order() {
        assert!(ChangeClass::NoChange < ChangeClass::RestartOnly);
        assert!(ChangeClass::RestartOnly < ChangeClass::RewriteState);
        assert!(ChangeClass::RewriteState < ChangeClass::EvictFirst);
        assert!(ChangeClass::EvictFirst < ChangeClass::Drain);
    }
}
