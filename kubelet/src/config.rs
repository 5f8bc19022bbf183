//! The kubelet configuration fields nodetopo owns: read from a KubeletConfiguration file and
//! its drop-in directory (KEP-3983, `--config-dir`), taken from a NodeResourcePolicy, and
//! written as nodetopo's drop-in `90-nodetopo.conf`.
//!
//! Files are read the way the kubelet reads them (cmd/kubelet/app: `loadConfigFile`, then
//! `mergeKubeletConfigurations`; checked against that code by the kubelet configuration
//! oracle, `e2e/kubelet-config-oracle`):
//! - every file needs `apiVersion: kubelet.config.k8s.io/v1beta1` and `kind:
//!   KubeletConfiguration`, and may not be empty: the kubelet refuses to start otherwise;
//! - drop-ins are the files ending in `.conf` anywhere under the directory, in the order of
//!   Go's `filepath.WalkDir` (names sorted byte-wise in each directory, a subdirectory's
//!   files where its name sorts), and a missing directory is an error, as for the kubelet;
//! - each drop-in is a JSON merge patch (RFC 7386) over the result so far: a scalar it sets
//!   replaces the earlier value, `null` resets the field to the kubelet's default, a map
//!   merges key by key and a `null` value deletes its key. In the `--config` file a `null`
//!   scalar is the default too, and a `null` map value decodes as the empty string.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use nodetopo_engine::change::OwnedConfig;
use nodetopo_engine::quantity;
use nodetopo_engine::CpuSet;

use crate::cmdline::{ConfigFlags, MemoryReservation};
use crate::yaml::{self as kubelet_yaml, Keys};

mod dropin;
mod gates;

pub use dropin::{desired_from_policy, render_dropin};
use gates::{check_gate_set, gates_of};
pub use gates::{check_gates, read_feature_gates};

/// The name of nodetopo's drop-in file.
pub const DROPIN_NAME: &str = "90-nodetopo.conf";
/// The kubelet's default drop-in directory in nodetopo's chart.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/kubernetes/kubelet.conf.d";
/// The largest kubelet configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The one `apiVersion` the kubelet reads configuration files in.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

fn read(path: &Path) -> anyhow::Result<String> {
    nodetopo_engine::files::read_text_bounded(path, MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("{}: the file {e}", path.display()))
}

/// The owned keys of a KubeletConfiguration: string scalars, then string maps.
const SCALARS: [&str; 5] = [
    "cpuManagerPolicy",
    "reservedSystemCPUs",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "memoryManagerPolicy",
];
const MAPS: [&str; 4] = [
    "cpuManagerPolicyOptions",
    "topologyManagerPolicyOptions",
    "kubeReserved",
    "systemReserved",
];

/// One configuration file as JSON ([`kubelet_yaml`]: YAML 1.1 as the kubelet reads it; a
/// key given twice wins last in the `--config` file and is an error in a drop-in), after the
/// checks the kubelet makes on every file (not empty, a mapping, apiVersion and kind).
fn parse_file(
    text: &str,
    file: &Path,
    keys: Keys,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    if text.trim().is_empty() {
        bail!(
            "{}: the file is empty, and the kubelet refuses an empty configuration file",
            file.display()
        );
    }
    let json = kubelet_yaml::to_json(text, keys)
        .map_err(|e| anyhow::anyhow!("{}: not YAML the kubelet reads: {e}", file.display()))?;
    let serde_json::Value::Object(m) = json else {
        bail!("{}: not a KubeletConfiguration object", file.display());
    };
    let api = m.get("apiVersion").and_then(serde_json::Value::as_str);
    let kind = m.get("kind").and_then(serde_json::Value::as_str);
    if (api, kind) != (Some(API_VERSION), Some("KubeletConfiguration")) {
        bail!(
            "{}: apiVersion {api:?}, kind {kind:?}: the kubelet reads only apiVersion {API_VERSION}, kind KubeletConfiguration, and refuses to start on this file",
            file.display()
        );
    }
    Ok(m)
}

/// The owned fields of the `--config` file, decoded as the kubelet decodes it into its
/// typed configuration: a scalar must be a string (`null`: the default), a map must map
/// strings to strings (a `null` value decodes as the empty string). Returned as the JSON
/// the drop-ins are merged over.
fn config_layer(text: &str, file: &Path) -> anyhow::Result<serde_json::Value> {
    use serde_json::Value as J;
    let m = parse_file(text, file, Keys::LastWins)?;
    let mut out = serde_json::Map::new();
    for key in SCALARS {
        match m.get(key) {
            None | Some(J::Null) => {}
            Some(J::String(s)) => {
                out.insert(key.into(), J::String(s.clone()));
            }
            Some(_) => bail!("{}: {key} is not a string", file.display()),
        }
    }
    match m.get("featureGates") {
        None | Some(J::Null) => {}
        Some(J::Object(gates)) => {
            let mut decoded = serde_json::Map::new();
            for (k, v) in gates {
                let v = match v {
                    J::Bool(b) => *b,
                    // Go's JSON decoding stores a map element's zero value for null: the
                    // gate is off (in a drop-in, null deletes the key instead).
                    J::Null => false,
                    _ => bail!(
                        "{}: featureGates.{k} is not true or false; the kubelet refuses the file",
                        file.display()
                    ),
                };
                decoded.insert(k.clone(), J::Bool(v));
            }
            out.insert("featureGates".into(), J::Object(decoded));
        }
        Some(_) => bail!("{}: featureGates is not a map", file.display()),
    }
    // Decoded into the typed list when the file is loaded (so a bad value here stops the
    // kubelet even where a drop-in replaces the list), then marshaled again as the base the
    // drop-ins patch (`omitempty`: an empty list is left out).
    if let Some(v) = m.get("reservedMemory") {
        let list = reserved_memory_of(v, || file.display().to_string())?;
        if !list.is_empty() {
            out.insert("reservedMemory".into(), reserved_memory_json(&list));
        }
    }
    for key in MAPS {
        match m.get(key) {
            None | Some(J::Null) => {}
            Some(J::Object(entries)) => {
                let mut map = serde_json::Map::new();
                for (k, v) in entries {
                    let v = match v {
                        J::String(s) => s.clone(),
                        J::Null => String::new(),
                        _ => bail!(
                            "{}: {key}.{k} is not a string (quote values such as \"true\"); the kubelet refuses the file",
                            file.display()
                        ),
                    };
                    map.insert(k.clone(), J::String(v));
                }
                out.insert(key.into(), J::Object(map));
            }
            Some(_) => bail!("{}: {key} is not a map", file.display()),
        }
    }
    Ok(J::Object(out))
}

/// RFC 7386 JSON merge patch, as the kubelet applies each drop-in (evanphx/json-patch's
/// `MergePatch`): an object patches key by key (`null` deletes), anything else replaces. A
/// value that replaces anything but an object loses the `null` members of the objects
/// inside it, also inside arrays (`pruneNulls`): `reservedMemory: [{limits: {memory:
/// null}}]` is an entry without limits, not a zero reservation.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value as J;
    let J::Object(p) = patch else {
        *target = if target.is_object() {
            patch.clone()
        } else {
            pruned(patch)
        };
        return;
    };
    if !target.is_object() {
        *target = J::Object(serde_json::Map::new());
    }
    if let J::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(J::Null), v);
            }
        }
    }
}

/// evanphx/json-patch's `pruneNulls`: the `null` members of every object inside `v`
/// removed (the `null` elements of arrays stay).
fn pruned(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::Object(m) => J::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), pruned(v)))
                .collect(),
        ),
        J::Array(a) => J::Array(a.iter().map(pruned).collect()),
        _ => v.clone(),
    }
}

/// The text Go's JSON decoder hands to `Quantity.UnmarshalJSON` for a JSON number: the
/// number as sigs.k8s.io/yaml wrote it (an integer as is, a float in decimal; the value is
/// the same for every spelling, and a quantity is exact).
fn number_text(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        (_, _, Some(f)) => format!("{f}"),
        _ => n.to_string(),
    }
}

/// `reservedMemory` (a JSON value of a file, or of the merged files) decoded as the kubelet
/// decodes it into `[]MemoryReservation`: `null` is no list; a `null` entry is NUMA node 0
/// without limits; `numaNode` must be a JSON integer in 32 bits (`1.0` is one: YAML's float
/// is written back as `1`); a limit is a quantity string (trimmed) or a JSON number, and a
/// `null` limit the zero quantity. Values are checked later ([`check_reserved_memory`]).
/// `source` names where the value came from.
fn reserved_memory_of(
    v: &serde_json::Value,
    source: impl Fn() -> String,
) -> anyhow::Result<Vec<MemoryReservation>> {
    use serde_json::Value as J;
    let items = match v {
        J::Null => return Ok(Vec::new()),
        J::Array(items) => items,
        _ => bail!(
            "reservedMemory is not a list ({}); the kubelet refuses the configuration",
            source()
        ),
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let mut r = MemoryReservation {
            numa_node: 0,
            limits: BTreeMap::new(),
        };
        let entry = match item {
            J::Null => {
                out.push(r);
                continue;
            }
            J::Object(entry) => entry,
            _ => bail!(
                "reservedMemory[{i}] is not an object ({}); the kubelet refuses the configuration",
                source()
            ),
        };
        match entry.get("numaNode") {
            None | Some(J::Null) => {}
            Some(J::Number(n)) => {
                let node = match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i32::try_from(i).ok(),
                    (None, Some(f)) if f.fract() == 0.0 && f.abs() <= f64::from(i32::MAX) => {
                        Some(f as i32)
                    }
                    _ => None,
                };
                let Some(node) = node else {
                    bail!(
                        "reservedMemory[{i}].numaNode {n} is not a 32-bit integer ({}); the kubelet refuses the configuration",
                        source()
                    );
                };
                r.numa_node = node;
            }
            Some(other) => bail!(
                "reservedMemory[{i}].numaNode {other} is not a number ({}); the kubelet refuses the configuration",
                source()
            ),
        }
        match entry.get("limits") {
            None | Some(J::Null) => {}
            Some(J::Object(limits)) => {
                for (name, q) in limits {
                    let text = match q {
                        J::Null => "0".to_string(),
                        J::String(s) => s.trim_matches(char::is_whitespace).to_string(),
                        J::Number(n) => number_text(n),
                        _ => bail!(
                            "reservedMemory[{i}].limits.{name} is not a quantity ({}); the kubelet refuses the configuration",
                            source()
                        ),
                    };
                    quantity::Quantity::parse(&text).map_err(|e| {
                        anyhow::anyhow!(
                            "reservedMemory[{i}].limits.{name} ({}): {e}; the kubelet refuses the configuration",
                            source()
                        )
                    })?;
                    r.limits.insert(name.clone(), text);
                }
            }
            Some(_) => bail!(
                "reservedMemory[{i}].limits is not a map ({}); the kubelet refuses the configuration",
                source()
            ),
        }
        out.push(r);
    }
    Ok(out)
}

/// A reservation list as the kubelet marshals it into the base the drop-ins patch.
fn reserved_memory_json(list: &[MemoryReservation]) -> serde_json::Value {
    serde_json::Value::Array(
        list.iter()
            .map(|r| {
                serde_json::json!({
                    "numaNode": r.numa_node,
                    "limits": r.limits,
                })
            })
            .collect(),
    )
}

/// The merged JSON of the owned keys and `featureGates` over the `--config` file and the
/// drop-ins, the `--config` file's own `featureGates`, and a function naming the last file
/// that set a key.
#[allow(clippy::type_complexity)]
fn merge_files<'a>(
    config: &'a Path,
    dropins: &'a [PathBuf],
) -> anyhow::Result<(
    serde_json::Value,
    BTreeMap<String, bool>,
    impl Fn(&str) -> String + 'a,
)> {
    let mut merged = config_layer(&read(config)?, config)?;
    let config_gates: BTreeMap<String, bool> = merged
        .get("featureGates")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_bool().map(|b| (k.clone(), b)))
                .collect()
        })
        .unwrap_or_default();
    let mut layers = Vec::new();
    for file in dropins {
        let m = parse_file(&read(file)?, file, Keys::Unique)?;
        merge_patch(&mut merged, &serde_json::Value::Object(m.clone()));
        layers.push((file, m.keys().cloned().collect::<Vec<_>>()));
    }
    let last_set = move |key: &str| {
        layers
            .iter()
            .rev()
            .find(|(_, keys)| keys.iter().any(|k| k == key))
            .map_or(config, |(f, _)| f.as_path())
            .display()
            .to_string()
    };
    Ok((merged, config_gates, last_set))
}

/// What nodetopo reads of the kubelet's effective configuration: its files, and, where
/// given ([`read_config_with_flags`]), the configuration flags of its command line over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletFileConfig {
    /// The owned fields.
    pub owned: OwnedConfig,
    /// `featureGates`.
    pub feature_gates: BTreeMap<String, bool>,
    /// `kubeReserved`.
    pub kube_reserved: BTreeMap<String, String>,
    /// `systemReserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// `memoryManagerPolicy` as set (empty: not set, the kubelet's default `None`).
    pub memory_manager_policy: String,
    /// `reservedMemory`: the files' list (the last file that sets it wins whole, as a JSON
    /// merge patch replaces a list), or `--reserved-memory`'s, which replaces it (`None`:
    /// no reservation).
    pub reserved_memory: Option<Vec<MemoryReservation>>,
}

/// A policy or scope field as its type: empty (not set, or set to "") is the kubelet's
/// default; a name the kubelet does not know is an error naming the field, the value and
/// where it was set (`source`: the file or the flag).
fn typed<T>(key: &str, value: &str, source: &str) -> anyhow::Result<T>
where
    T: std::str::FromStr + Default,
    T::Err: std::fmt::Display,
{
    if value.is_empty() {
        return Ok(T::default());
    }
    value
        .parse()
        .map_err(|e| anyhow::anyhow!("{key} {value:?} ({source}): {e}"))
}

/// The KubeletConfiguration key each configuration flag sets.
const FLAG_KEYS: [(&str, &str); 10] = [
    ("cpuManagerPolicy", "--cpu-manager-policy"),
    ("cpuManagerPolicyOptions", "--cpu-manager-policy-options"),
    ("reservedSystemCPUs", "--reserved-cpus"),
    ("kubeReserved", "--kube-reserved"),
    ("systemReserved", "--system-reserved"),
    ("topologyManagerPolicy", "--topology-manager-policy"),
    ("topologyManagerScope", "--topology-manager-scope"),
    (
        "topologyManagerPolicyOptions",
        "--topology-manager-policy-options",
    ),
    ("memoryManagerPolicy", "--memory-manager-policy"),
    ("reservedMemory", "--reserved-memory"),
];

/// The flag that sets a KubeletConfiguration key.
pub fn flag_of(key: &str) -> &'static str {
    FLAG_KEYS
        .iter()
        .find(|(k, _)| *k == key)
        .map_or("", |(_, f)| *f)
}

/// The owned fields and the rest of [`KubeletFileConfig`] after `files` (the `--config`
/// file first, then drop-ins in order), then `flags`, as the kubelet builds its
/// configuration: the drop-ins are merged as JSON and the result decoded once (so a value a
/// later drop-in replaces is never type-checked); the command line's flags are then parsed
/// into the decoded configuration (`kubeletConfigFlagPrecedence`: a string flag replaces
/// the field, a map flag the whole map, `--feature-gates` overrides gate by gate); values
/// are checked last (a bad `reservedSystemCPUs` in a file that `--reserved-cpus` replaces
/// does not matter). A field of the wrong type names the last file that set it; a bad
/// value names the flag or the file it came from.
fn effective_of(
    config: &Path,
    dropins: &[PathBuf],
    flags: &ConfigFlags,
) -> anyhow::Result<KubeletFileConfig> {
    use serde_json::Value as J;
    let (merged, config_gates, last_set) = merge_files(config, dropins)?;
    let mut feature_gates = gates_of(&merged, &last_set)?;
    let scalar = |key: &str| -> anyhow::Result<String> {
        match merged.get(key) {
            None | Some(J::Null) => Ok(String::new()),
            Some(J::String(s)) => Ok(s.clone()),
            Some(_) => bail!(
                "{key} is not a string (last set in {}); the kubelet refuses the merged configuration",
                last_set(key)
            ),
        }
    };
    let map = |key: &str| -> anyhow::Result<BTreeMap<String, String>> {
        match merged.get(key) {
            None | Some(J::Null) => Ok(BTreeMap::new()),
            Some(J::Object(entries)) => entries
                .iter()
                .map(|(k, v)| match v {
                    J::String(s) => Ok((k.clone(), s.clone())),
                    _ => bail!(
                        "{key}.{k} is not a string (quote values such as \"true\"; last set in {}); the kubelet refuses the merged configuration",
                        last_set(key)
                    ),
                })
                .collect(),
            Some(_) => bail!(
                "{key} is not a map (last set in {}); the kubelet refuses the merged configuration",
                last_set(key)
            ),
        }
    };
    let mut cpu_manager_policy = scalar("cpuManagerPolicy")?;
    let mut reserved = scalar("reservedSystemCPUs")?;
    let mut topology_manager_policy = scalar("topologyManagerPolicy")?;
    let mut topology_manager_scope = scalar("topologyManagerScope")?;
    let mut memory_manager_policy = scalar("memoryManagerPolicy")?;
    let mut cpu_options = map("cpuManagerPolicyOptions")?;
    let mut tm_options = map("topologyManagerPolicyOptions")?;
    let mut kube_reserved = map("kubeReserved")?;
    let mut system_reserved = map("systemReserved")?;
    // The command line over the files.
    let over = |field: &mut String, flag: &Option<String>| {
        if let Some(v) = flag {
            *field = v.clone();
        }
    };
    over(&mut cpu_manager_policy, &flags.cpu_manager_policy);
    over(&mut reserved, &flags.reserved_cpus);
    over(&mut topology_manager_policy, &flags.topology_manager_policy);
    over(&mut topology_manager_scope, &flags.topology_manager_scope);
    over(&mut memory_manager_policy, &flags.memory_manager_policy);
    let over_map = |field: &mut BTreeMap<String, String>,
                    flag: &Option<BTreeMap<String, String>>| {
        if let Some(v) = flag {
            *field = v.clone();
        }
    };
    over_map(&mut cpu_options, &flags.cpu_manager_policy_options);
    over_map(&mut tm_options, &flags.topology_manager_policy_options);
    over_map(&mut kube_reserved, &flags.kube_reserved);
    over_map(&mut system_reserved, &flags.system_reserved);
    feature_gates.extend(flags.feature_gates.iter().map(|(g, v)| (g.clone(), *v)));
    let source = |key: &str, given: bool| {
        if given {
            format!("set by {} on the kubelet's command line", flag_of(key))
        } else {
            format!("last set in {}", last_set(key))
        }
    };
    let mut out = OwnedConfig {
        cpu_manager_policy: typed(
            "cpuManagerPolicy",
            &cpu_manager_policy,
            &source("cpuManagerPolicy", flags.cpu_manager_policy.is_some()),
        )?,
        cpu_manager_policy_options: cpu_options,
        reserved_system_cpus: CpuSet::parse(&reserved).map_err(|e| {
            anyhow::anyhow!(
                "reservedSystemCPUs {reserved:?} ({}): {e}",
                source("reservedSystemCPUs", flags.reserved_cpus.is_some())
            )
        })?,
        reserved_cpu_count: None,
        topology_manager_policy: typed(
            "topologyManagerPolicy",
            &topology_manager_policy,
            &source(
                "topologyManagerPolicy",
                flags.topology_manager_policy.is_some(),
            ),
        )?,
        topology_manager_scope: typed(
            "topologyManagerScope",
            &topology_manager_scope,
            &source(
                "topologyManagerScope",
                flags.topology_manager_scope.is_some(),
            ),
        )?,
        topology_manager_policy_options: tm_options,
    };
    if out.reserved_system_cpus.is_empty() {
        let mut millis = 0;
        for (key, m, flag) in [
            ("kubeReserved", &kube_reserved, &flags.kube_reserved),
            ("systemReserved", &system_reserved, &flags.system_reserved),
        ] {
            if let Some(cpu) = m.get("cpu") {
                millis += quantity::parse_millis(cpu).map_err(|e| {
                    anyhow::anyhow!("{key}.cpu {cpu:?} ({}): {e}", source(key, flag.is_some()))
                })?;
            }
        }
        if millis > 0 {
            // The kubelet's count: ceil of the reserved CPU quantity.
            out.reserved_cpu_count = Some(millis.div_ceil(1000) as usize);
        }
    }
    let mut reserved_memory = match merged.get("reservedMemory") {
        None => Vec::new(),
        Some(v) => reserved_memory_of(v, || format!("last set in {}", last_set("reservedMemory")))?,
    };
    if let Some(list) = &flags.reserved_memory {
        reserved_memory = list.clone();
    }
    check_reserved_memory(
        &reserved_memory,
        &source("reservedMemory", flags.reserved_memory.is_some()),
    )?;
    // As the kubelet sets its gates: the command line's alone, then (while the config file
    // is defaulted) the config file's over them, then the merged ones.
    check_gate_set(&flags.feature_gates, &config_gates, &feature_gates)?;
    Ok(KubeletFileConfig {
        owned: out,
        feature_gates,
        kube_reserved,
        system_reserved,
        memory_manager_policy,
        reserved_memory: (!reserved_memory.is_empty()).then_some(reserved_memory),
    })
}

/// The kubelet's validation of `reservedMemory` (`validateReservedMemoryConfiguration`):
/// only `memory` and `hugepages-<size>`, no zero quantity, no NUMA node and type given
/// twice. `source` says where the list came from.
fn check_reserved_memory(list: &[MemoryReservation], source: &str) -> anyhow::Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for m in list {
        for (name, q) in &m.limits {
            if name != "memory" && !name.starts_with("hugepages-") {
                bail!(
                    "reservedMemory ({source}): {name:?} on NUMA node {} is not a memory type (memory or hugepages-<size>), which the kubelet refuses",
                    m.numa_node
                );
            }
            let zero = quantity::Quantity::parse(q)
                .map(|q| q.is_zero())
                .unwrap_or(false);
            if zero {
                bail!(
                    "reservedMemory ({source}): the reservation of {name} on NUMA node {} is zero, which the kubelet refuses",
                    m.numa_node
                );
            }
            if !seen.insert((m.numa_node, name.as_str())) {
                bail!(
                    "reservedMemory ({source}): NUMA node {} reserves {name} twice, which the kubelet refuses",
                    m.numa_node
                );
            }
        }
    }
    Ok(())
}

/// The kubelet's effective owned fields and feature gates from its config file and drop-in
/// directory (`None`: the kubelet runs without `--config-dir`), every file read once; no
/// command line ([`read_config_with_flags`]).
pub fn read_config(config: &Path, config_dir: Option<&Path>) -> anyhow::Result<KubeletFileConfig> {
    read_config_with_flags(config, config_dir, &ConfigFlags::default())
}

/// The kubelet's effective configuration: its config file, its drop-in directory, then the
/// configuration flags of its command line ([`crate::cmdline::parse`]).
pub fn read_config_with_flags(
    config: &Path,
    config_dir: Option<&Path>,
    flags: &ConfigFlags,
) -> anyhow::Result<KubeletFileConfig> {
    let files = match config_dir {
        Some(dir) => dropins(dir)?,
        None => Vec::new(),
    };
    effective_of(config, &files, flags)
}

/// The kubelet's effective owned fields ([`read_config`]).
pub fn read_effective(config: &Path, config_dir: Option<&Path>) -> anyhow::Result<OwnedConfig> {
    Ok(read_config(config, config_dir)?.owned)
}

/// The owned fields as nodetopo's drop-in writes them for `desired`: defaults written out
/// and, under the static policy, the reserved set explicit (a count resolved to the CPUs
/// the kubelet's static policy would reserve on `topology`).
pub fn dropin_fields(
    topology: &nodetopo_engine::CpuTopology,
    desired: &OwnedConfig,
) -> anyhow::Result<OwnedConfig> {
    let checked = nodetopo_engine::change::check_config(topology, desired, "desired")?;
    let mut out = desired.clone();
    if let Some(p) = &checked.policy {
        out.reserved_system_cpus = p.reserved().clone();
        out.reserved_cpu_count = None;
    }
    Ok(out)
}

/// Stops, naming each flag, where the kubelet's command line sets a field nodetopo's drop-in
/// would set to another value: the flag wins over every file, so the drop-in could not take
/// effect (the kubelet would keep running the flag's value while the files say otherwise).
/// `desired` is what the drop-in writes (the reserved set explicit). A flag that agrees
/// with `desired` is fine. `--kube-reserved`/`--system-reserved` never conflict: the
/// drop-in states the reserved set, which the kubelet prefers over their `cpu`.
pub fn check_flags(flags: &ConfigFlags, desired: &OwnedConfig) -> anyhow::Result<()> {
    let mut conflicts = Vec::new();
    let mut scalar = |flag: &str, given: &Option<String>, default: &str, want: &str| {
        if let Some(v) = given {
            let v = if v.is_empty() { default } else { v.as_str() };
            if v != want {
                conflicts.push(format!("{flag}={v} (the drop-in would set {want})"));
            }
        }
    };
    scalar(
        "--cpu-manager-policy",
        &flags.cpu_manager_policy,
        "none",
        desired.cpu_manager_policy.as_str(),
    );
    scalar(
        "--topology-manager-policy",
        &flags.topology_manager_policy,
        "none",
        desired.topology_manager_policy.name(),
    );
    scalar(
        "--topology-manager-scope",
        &flags.topology_manager_scope,
        "container",
        desired.topology_manager_scope.name(),
    );
    let show = |m: &BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (flag, given, want) in [
        (
            "--cpu-manager-policy-options",
            &flags.cpu_manager_policy_options,
            &desired.cpu_manager_policy_options,
        ),
        (
            "--topology-manager-policy-options",
            &flags.topology_manager_policy_options,
            &desired.topology_manager_policy_options,
        ),
    ] {
        if let Some(v) = given {
            if v != want {
                conflicts.push(format!(
                    "{flag}={} (the drop-in would set {{{}}})",
                    show(v),
                    show(want)
                ));
            }
        }
    }
    if let Some(v) = &flags.reserved_cpus {
        let set = CpuSet::parse(v)
            .map_err(|e| anyhow::anyhow!("the kubelet's command line: --reserved-cpus={v}: {e}"))?;
        if set != desired.reserved_system_cpus {
            conflicts.push(format!(
                "--reserved-cpus={v} (the drop-in would set reservedSystemCPUs \"{}\")",
                desired.reserved_system_cpus
            ));
        }
    }
    if !conflicts.is_empty() {
        bail!(
            "the kubelet's command line overrides what nodetopo's drop-in would set, so nothing is planned or changed: {}; flags win over every configuration file, so remove them from the kubelet's command line (or make them agree with the policy)",
            conflicts.join("; ")
        );
    }
    Ok(())
}

/// The owned fields from the config file and the drop-ins the kubelet applies before
/// nodetopo's own [`DROPIN_NAME`] (whether it exists or not): what nodetopo's drop-in is
/// merged over.
pub fn read_below_dropin(config: &Path, config_dir: &Path) -> anyhow::Result<OwnedConfig> {
    let before: Vec<PathBuf> = dropins(config_dir)?
        .into_iter()
        .filter(|f| {
            f.strip_prefix(config_dir)
                .ok()
                .and_then(|rel| rel.components().next())
                .is_some_and(|first| first.as_os_str().as_encoded_bytes() < DROPIN_NAME.as_bytes())
        })
        .collect();
    Ok(effective_of(config, &before, &ConfigFlags::default())?.owned)
}

/// The owned fields from the config file and every drop-in but nodetopo's own
/// [`DROPIN_NAME`]: the node's own configuration, what a revert goes back to.
pub fn read_without_dropin(
    config: &Path,
    config_dir: &Path,
    flags: &ConfigFlags,
) -> anyhow::Result<OwnedConfig> {
    let own = config_dir.join(DROPIN_NAME);
    let others: Vec<PathBuf> = dropins(config_dir)?
        .into_iter()
        .filter(|f| f != &own)
        .collect();
    Ok(effective_of(config, &others, flags)?.owned)
}

/// The drop-in files under a directory, in the order the kubelet applies them: the files
/// ending in `.conf` in Go's `filepath.WalkDir` order (entries sorted by name, byte-wise,
/// a subdirectory walked where its name sorts; a symbolic link is a file, not followed as a
/// directory). A missing or unreadable directory is an error, as it is for the kubelet.
pub fn dropins(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    walk(dir, &mut out).with_context(|| {
        format!(
            "reading the kubelet drop-in directory {} (a kubelet started with it as --config-dir fails the same way)",
            dir.display()
        )
    })?;
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry.with_context(|| format!("{}", dir.display()))?;
        let is_dir = entry
            .file_type()
            .with_context(|| format!("{}", entry.path().display()))?
            .is_dir();
        entries.push((entry.file_name(), is_dir));
    }
    entries.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    for (name, is_dir) in entries {
        let path = dir.join(&name);
        if is_dir {
            walk(&path, out)?;
        } else if name.as_encoded_bytes().ends_with(b".conf") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod flag_tests;
