//! The kubelet's feature gates as its configuration sets them: read from the files, checked
//! against the policy's options ([`check_gates`]) and, for the gates with consequences at
//! start-up, resolved as component-base resolves them ([`check_gate_set`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;
use nodetopo_engine::change::OwnedConfig;

use super::read_config;

/// The kubelet's `featureGates` from its config file and drop-in directory (merged as the
/// owned fields are; see [`read_config`]). Gates given on the kubelet's command line
/// (`--feature-gates`) are not in these files and not seen.
pub fn read_feature_gates(
    config: &Path,
    config_dir: Option<&Path>,
) -> anyhow::Result<BTreeMap<String, bool>> {
    Ok(read_config(config, config_dir)?.feature_gates)
}

/// The `featureGates` of the merged configuration; a value other than true or false makes
/// the kubelet refuse the whole configuration.
pub(super) fn gates_of(
    merged: &serde_json::Value,
    last_set: &impl Fn(&str) -> String,
) -> anyhow::Result<BTreeMap<String, bool>> {
    match merged.get("featureGates") {
        None | Some(serde_json::Value::Null) => Ok(BTreeMap::new()),
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::Bool(b) => Ok((k.clone(), *b)),
                _ => bail!(
                    "featureGates.{k} is not true or false (last set in {}); the kubelet refuses the merged configuration",
                    last_set("featureGates")
                ),
            })
            .collect(),
        Some(_) => bail!(
            "featureGates is not a map (last set in {})",
            last_set("featureGates")
        ),
    }
}

/// Stops, naming each, on the options of `desired` that the kubelet would refuse under the
/// feature gates of its files (`files`, [`KubeletFileConfig::feature_gates`]) overridden by
/// those of its command line (`command_line`, from [`crate::cmdline`]; see
/// [`nodetopo_engine::change::gate_problems`]). nodetopo does not change feature gates.
pub fn check_gates(
    files: &BTreeMap<String, bool>,
    command_line: &BTreeMap<String, bool>,
    desired: &OwnedConfig,
) -> anyhow::Result<()> {
    let mut gates = files.clone();
    gates.extend(command_line.iter().map(|(g, v)| (g.clone(), *v)));
    let problems = nodetopo_engine::change::gate_problems(desired, &gates);
    if !problems.is_empty() {
        let flags = if command_line.is_empty() {
            String::new()
        } else {
            format!(
                " (its command line sets --feature-gates {}, which override its files)",
                command_line
                    .iter()
                    .map(|(g, v)| format!("{g}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        bail!(
            "the kubelet would refuse the policy's options, so nothing is planned or changed: {}{flags}; nodetopo does not change feature gates: enable the gate in the kubelet's configuration or drop the option",
            problems.join("; ")
        );
    }
    Ok(())
}

/// The part of the kubelet's (v1.37.2) feature-gate table that `AllAlpha`/`AllBeta` reach
/// with consequences at start-up: (gate, beta?, default).
pub(super) const GATE_SPECS: [(&str, bool, bool); 12] = [
    ("GenericWorkload", true, false),
    ("TopologyAwareWorkloadScheduling", false, false),
    ("WorkloadWithJob", false, false),
    ("PodGroupPreemptionPolicy", false, false),
    ("CompositePodGroup", false, false),
    ("DRADeviceCompatibilityGroups", false, false),
    ("DRAPartitionableDevices", true, true),
    ("DRAPartitionableDevicesType", false, false),
    ("StorageVersionAPI", false, false),
    ("APIServerIdentity", true, true),
    ("KubeletCrashLoopBackOffMax", true, true),
    ("KubeletEnsureSecretPulledImages", true, true),
];

/// Gate dependencies among [`GATE_SPECS`] (component-base refuses an enabled gate whose
/// dependency is disabled).
pub(super) const GATE_DEPENDENCIES: [(&str, &[&str]); 7] = [
    ("TopologyAwareWorkloadScheduling", &["GenericWorkload"]),
    ("WorkloadWithJob", &["GenericWorkload"]),
    ("PodGroupPreemptionPolicy", &["GenericWorkload"]),
    (
        "CompositePodGroup",
        &["GenericWorkload", "TopologyAwareWorkloadScheduling"],
    ),
    ("DRADeviceCompatibilityGroups", &["DRAPartitionableDevices"]),
    ("DRAPartitionableDevicesType", &["DRAPartitionableDevices"]),
    ("StorageVersionAPI", &["APIServerIdentity"]),
];

/// Feature gates as component-base's gate holds them: every `SetFromMap` sets the gates it
/// names, and `AllAlpha`/`AllBeta` set the gates of their maturity that are not set yet
/// (by name or by an earlier `AllAlpha`/`AllBeta`): a later `AllBeta` changes nothing the
/// first one set. Only the gates of [`GATE_SPECS`] are resolved.
#[derive(Debug, Clone, Default)]
pub(super) struct GateState(BTreeMap<String, bool>);

impl GateState {
    fn set_from_map(&mut self, m: &BTreeMap<String, bool>) {
        let before = self.0.clone();
        for (k, v) in m {
            if k == "AllAlpha" || k == "AllBeta" {
                for (gate, beta, _) in GATE_SPECS {
                    if beta == (k == "AllBeta")
                        && !before.contains_key(gate)
                        && !m.contains_key(gate)
                    {
                        self.0.insert(gate.to_string(), *v);
                    }
                }
            }
            self.0.insert(k.clone(), *v);
        }
    }

    fn enabled(&self, g: &str) -> bool {
        self.0.get(g).copied().unwrap_or_else(|| {
            GATE_SPECS
                .iter()
                .find(|(n, _, _)| *n == g)
                .is_some_and(|(_, _, default)| *default)
        })
    }

    /// The enabled gates with a disabled dependency.
    fn dependency_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (gate, deps) in GATE_DEPENDENCIES {
            let off: Vec<&str> = deps.iter().copied().filter(|d| !self.enabled(d)).collect();
            if self.enabled(gate) && !off.is_empty() {
                problems.push(format!(
                    "{gate} is enabled, but depends on {} disabled",
                    off.join(", ")
                ));
            }
        }
        problems
    }
}

/// Whether the kubelet starts with its gates, for the gates [`GATE_SPECS`] lists, set as
/// the kubelet sets them ([`GateState`]): its command line's (`flags`); then, on a copy,
/// the config file's (`config_file`) while the file is defaulted; then the merged ones
/// (`gates`, files then flags) over the command line's. Each time component-base refuses
/// an enabled gate with a disabled dependency (at defaulting the kubelet panics).
/// Defaulting sets `crashLoopBackOff` and `imagePullCredentialsVerificationPolicy` only
/// where `KubeletCrashLoopBackOffMax` and `KubeletEnsureSecretPulledImages` are on then,
/// and validation refuses them set where the final gates turn the gate off (so `AllBeta:
/// false` in a drop-in stops the kubelet; in the config file or on the command line it
/// does not). Values of those two fields written in the files are not read. Other gates
/// are not judged here.
pub(super) fn check_gate_set(
    flags: &BTreeMap<String, bool>,
    config_file: &BTreeMap<String, bool>,
    gates: &BTreeMap<String, bool>,
) -> anyhow::Result<()> {
    let mut global = GateState::default();
    global.set_from_map(flags);
    let mut problems = global.dependency_problems();
    let mut at_defaulting = global.clone();
    at_defaulting.set_from_map(config_file);
    if problems.is_empty() {
        problems = at_defaulting.dependency_problems();
    }
    global.set_from_map(gates);
    if problems.is_empty() {
        problems = global.dependency_problems();
    }
    let started = problems.is_empty();
    for gate in [
        "KubeletCrashLoopBackOffMax",
        "KubeletEnsureSecretPulledImages",
    ] {
        if started && at_defaulting.enabled(gate) && !global.enabled(gate) {
            problems.push(format!(
                "{gate} is disabled, but the kubelet's defaulting set a field only it allows"
            ));
        }
    }
    if !problems.is_empty() {
        bail!(
            "featureGates: the kubelet refuses to start with these gates ({}): {}",
            gates
                .iter()
                .map(|(g, v)| format!("{g}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            problems.join("; ")
        );
    }
    Ok(())
}
