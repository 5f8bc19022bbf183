//! The owned fields a policy asks for ([`desired_from_policy`]) and nodetopo's drop-in that
//! writes them ([`render_dropin`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use nodetopo_engine::change::OwnedConfig;
use nodetopo_engine::spec::{
    CpuManagerConfig, CpuManagerPolicy, TopologyManagerConfig, TopologyManagerPolicy,
    TopologyManagerScope,
};

use super::API_VERSION;

/// The owned fields a NodeResourcePolicy (or a NodeTopology spec) asks for: its
/// `spec.cpuManager` and `spec.topologyManager` (absent means policy none), read as the API
/// types ([`nodetopo_engine::spec`]) and converted as the agent converts a NodeTopology
/// spec ([`OwnedConfig::from_spec`]). Errors name the file and the field.
pub fn desired_from_policy(text: &str, file: &Path) -> anyhow::Result<OwnedConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        spec: Option<Spec>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        #[serde(default)]
        cpu_manager: Option<CpuManagerConfig>,
        #[serde(default)]
        topology_manager: Option<TopologyManagerConfig>,
    }
    // Option values must be YAML strings, as the API's schema wants them (the reader below
    // would take an unquoted `true` as the string "true").
    let raw: serde_yaml::Value =
        serde_yaml::from_str(text).with_context(|| format!("{}: not YAML", file.display()))?;
    for manager in ["cpuManager", "topologyManager"] {
        let options = raw.get("spec").and_then(|s| s.get(manager)?.get("options"));
        if let Some(serde_yaml::Value::Mapping(m)) = options {
            if m.values().any(|v| !v.is_string()) {
                bail!(
                    "{}: spec.{manager}.options must map strings to strings (quote values such as \"true\")",
                    file.display()
                );
            }
        }
    }
    let doc: Doc =
        serde_yaml::from_str(text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let spec = doc.spec.with_context(|| {
        format!(
            "{}: no spec (expected a NodeResourcePolicy)",
            file.display()
        )
    })?;
    OwnedConfig::from_spec(
        &spec.cpu_manager.unwrap_or_default(),
        &spec.topology_manager.unwrap_or_default(),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))
}

/// nodetopo's drop-in, as serialised: the type meta and the owned fields. An option map
/// entry `None` and a `reservedSystemCPUs` of `Some(None)` are written as `null`, which
/// deletes what an earlier file set (the kubelet merges each drop-in as a JSON merge
/// patch); `reservedSystemCPUs` `None` is not written.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DropIn<'a> {
    api_version: &'static str,
    kind: &'static str,
    cpu_manager_policy: CpuManagerPolicy,
    #[serde(serialize_with = "in_order")]
    cpu_manager_policy_options: Vec<(&'a str, Option<&'a str>)>,
    #[serde(rename = "reservedSystemCPUs", skip_serializing_if = "Option::is_none")]
    reserved_system_cpus: Option<Option<String>>,
    topology_manager_policy: TopologyManagerPolicy,
    topology_manager_scope: TopologyManagerScope,
    #[serde(serialize_with = "in_order")]
    topology_manager_policy_options: Vec<(&'a str, Option<&'a str>)>,
}

/// An option map patch as a map, in its order: the wanted options, then those deleted.
pub(super) fn in_order<S: serde::Serializer>(
    entries: &[(&str, Option<&str>)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(entries.iter().map(|(k, v)| (k, v)))
}

impl<'a> DropIn<'a> {
    /// The drop-in for `c` over `below`: every owned field stated (defaults written out);
    /// options and a reserved set that `below` has and `c` does not want are deleted.
    fn of(c: &'a OwnedConfig, below: &'a OwnedConfig) -> Self {
        let patch = |want: &'a BTreeMap<String, String>, under: &'a BTreeMap<String, String>| {
            let mut out: Vec<(&str, Option<&str>)> = want
                .iter()
                .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                .collect();
            out.extend(
                under
                    .keys()
                    .filter(|k| !want.contains_key(*k))
                    .map(|k| (k.as_str(), None)),
            );
            out
        };
        let reserved_system_cpus = if !c.reserved_system_cpus.is_empty() {
            Some(Some(c.reserved_system_cpus.to_string()))
        } else if !below.reserved_system_cpus.is_empty() {
            Some(None)
        } else {
            None
        };
        DropIn {
            api_version: API_VERSION,
            kind: "KubeletConfiguration",
            cpu_manager_policy: c.cpu_manager_policy,
            cpu_manager_policy_options: patch(
                &c.cpu_manager_policy_options,
                &below.cpu_manager_policy_options,
            ),
            reserved_system_cpus,
            topology_manager_policy: c.topology_manager_policy,
            topology_manager_scope: c.topology_manager_scope,
            topology_manager_policy_options: patch(
                &c.topology_manager_policy_options,
                &below.topology_manager_policy_options,
            ),
        }
    }
}

/// A scalar of the drop-in: a JSON string (JSON strings are YAML strings, and quoting
/// keeps "true", "16" and "0-1" strings under the YAML 1.1 rules the kubelet's loader
/// follows), or `null` with a note for a person reading the file.
pub(super) fn dropin_scalar(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::Null => "null  # set by an earlier file; not wanted".into(),
        serde_yaml::Value::String(s) => serde_json::Value::String(s.clone()).to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// nodetopo's drop-in: a full KubeletConfiguration object holding only the owned fields
/// (an explicit reserved set; a count is resolved to CPUs by the caller), to be merged over
/// `below` (see [`read_below_dropin`]): an option set there that `c` does not ask for is
/// written as `null`, which deletes it from the kubelet's merged configuration, so the
/// option maps come out exactly as `c` says. Serialised from [`DropIn`] in its field
/// order, one key a line; the type meta plain, every other scalar quoted
/// ([`dropin_scalar`]).
pub fn render_dropin(c: &OwnedConfig, below: &OwnedConfig) -> anyhow::Result<String> {
    let mut out = String::from(
        "# Written by nodetopo (NodeResourcePolicy actuation); do not edit: the agent rewrites it.\n",
    );
    let fields = match serde_yaml::to_value(DropIn::of(c, below)) {
        Ok(serde_yaml::Value::Mapping(fields)) => fields,
        Ok(other) => bail!("internal: the drop-in serialised to {other:?}, not a mapping"),
        Err(e) => bail!("internal: serialising the drop-in: {e}"),
    };
    for (key, v) in &fields {
        let key = key.as_str().unwrap_or_default();
        match v {
            serde_yaml::Value::String(s) if matches!(key, "apiVersion" | "kind") => {
                out.push_str(&format!("{key}: {s}\n"));
            }
            serde_yaml::Value::Mapping(m) if m.is_empty() => {
                out.push_str(&format!("{key}: {{}}\n"));
            }
            serde_yaml::Value::Mapping(m) => {
                out.push_str(&format!("{key}:\n"));
                for (k, v) in m {
                    let k = k.as_str().unwrap_or_default();
                    out.push_str(&format!(
                        "  {}: {}\n",
                        dropin_scalar(&k.into()),
                        dropin_scalar(v)
                    ));
                }
            }
            v => out.push_str(&format!("{key}: {}\n", dropin_scalar(v))),
        }
    }
    Ok(out)
}
