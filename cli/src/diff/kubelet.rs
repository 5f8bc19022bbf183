//! The kubelet configuration fields nodetopo owns: read from a KubeletConfiguration file and
//! its drop-in directory (KEP-3983, `--config-dir`), taken from a NodeResourcePolicy, and
//! written as nodetopo's drop-in `90-nodetopo.conf`.
//!
//! Drop-ins are applied the way the kubelet applies them: files ending in `.conf` in name
//! order, each one decoded over the result of the previous ones, so a scalar field a later
//! file sets replaces the earlier value and a map field merges key by key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use nodetopo_engine::change::OwnedConfig;
use nodetopo_engine::quantity;
use nodetopo_engine::CpuSet;
use serde_yaml::Value;

/// The name of nodetopo's drop-in file.
pub const DROPIN_NAME: &str = "90-nodetopo.conf";
/// The kubelet's default drop-in directory in nodetopo's chart.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/kubernetes/kubelet.conf.d";
/// The largest kubelet configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn read(path: &Path) -> anyhow::Result<String> {
    nodetopo_engine::files::read_text_bounded(path, MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("{}: the file {e}", path.display()))
}

fn string_map(v: &Value, field: &str, file: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let Value::Mapping(m) = v else {
        bail!("{}: {field} is not a map", file.display());
    };
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
            bail!(
                "{}: {field} must map strings to strings (quote values such as \"true\")",
                file.display()
            );
        };
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// The fields of one file, applied over `into`; `reserved_millis` collects kubeReserved and
/// systemReserved cpu.
fn apply(
    text: &str,
    file: &Path,
    into: &mut OwnedConfig,
    reserved_millis: &mut BTreeMap<&'static str, u64>,
) -> anyhow::Result<()> {
    let doc: Value =
        serde_yaml::from_str(text).with_context(|| format!("{}: not YAML", file.display()))?;
    let Value::Mapping(m) = &doc else {
        bail!("{}: not a KubeletConfiguration object", file.display());
    };
    if let Some(kind) = m.get("kind").and_then(Value::as_str) {
        if kind != "KubeletConfiguration" {
            bail!(
                "{}: kind is {kind:?}, expected KubeletConfiguration",
                file.display()
            );
        }
    }
    let s = |key: &str| -> anyhow::Result<Option<String>> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => bail!("{}: {key} is not a string", file.display()),
        }
    };
    if let Some(v) = s("cpuManagerPolicy")? {
        into.cpu_manager_policy = v;
    }
    if let Some(v) = m.get("cpuManagerPolicyOptions") {
        into.cpu_manager_policy_options
            .extend(string_map(v, "cpuManagerPolicyOptions", file)?);
    }
    if let Some(v) = s("reservedSystemCPUs")? {
        into.reserved_system_cpus = CpuSet::parse(&v)
            .map_err(|e| anyhow::anyhow!("{}: reservedSystemCPUs {v:?}: {e}", file.display()))?;
    }
    if let Some(v) = s("topologyManagerPolicy")? {
        into.topology_manager_policy = v;
    }
    if let Some(v) = s("topologyManagerScope")? {
        into.topology_manager_scope = v;
    }
    if let Some(v) = m.get("topologyManagerPolicyOptions") {
        into.topology_manager_policy_options.extend(string_map(
            v,
            "topologyManagerPolicyOptions",
            file,
        )?);
    }
    for (key, slot) in [("kubeReserved", "kube"), ("systemReserved", "system")] {
        if let Some(v) = m.get(key) {
            let r = string_map(v, key, file)?;
            if let Some(cpu) = r.get("cpu") {
                let millis = quantity::parse_millis(cpu)
                    .map_err(|e| anyhow::anyhow!("{}: {key}.cpu {cpu:?}: {e}", file.display()))?;
                reserved_millis.insert(slot, millis);
            }
        }
    }
    Ok(())
}

/// The kubelet's effective owned fields from its config file and drop-in directory
/// (`None`: no drop-in directory).
pub fn read_effective(config: &Path, config_dir: Option<&Path>) -> anyhow::Result<OwnedConfig> {
    let mut out = OwnedConfig::default();
    let mut reserved = BTreeMap::new();
    apply(&read(config)?, config, &mut out, &mut reserved)?;
    if let Some(dir) = config_dir {
        for file in dropins(dir)? {
            apply(&read(&file)?, &file, &mut out, &mut reserved)?;
        }
    }
    if out.reserved_system_cpus.is_empty() {
        let millis: u64 = reserved.values().sum();
        if millis > 0 {
            // The kubelet's count: ceil of the reserved CPU quantity.
            out.reserved_cpu_count = Some(millis.div_ceil(1000) as usize);
        }
    }
    Ok(out)
}

/// The drop-in files of a directory, in the order the kubelet applies them.
pub fn dropins(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => bail!(
            "reading the kubelet drop-in directory {}: {e}",
            dir.display()
        ),
    };
    let mut files = Vec::new();
    for entry in rd {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".conf") {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The owned fields a NodeResourcePolicy (or a NodeTopology spec) asks for: its
/// `spec.cpuManager` and `spec.topologyManager` (absent means policy none).
pub fn desired_from_policy(text: &str, file: &Path) -> anyhow::Result<OwnedConfig> {
    let doc: Value =
        serde_yaml::from_str(text).with_context(|| format!("{}: not YAML", file.display()))?;
    let spec = doc.get("spec").with_context(|| {
        format!(
            "{}: no spec (expected a NodeResourcePolicy)",
            file.display()
        )
    })?;
    let mut out = OwnedConfig::default();
    if let Some(cm) = spec.get("cpuManager").filter(|v| !v.is_null()) {
        if let Some(p) = cm.get("policy") {
            out.cpu_manager_policy = p
                .as_str()
                .with_context(|| {
                    format!("{}: spec.cpuManager.policy is not a string", file.display())
                })?
                .to_string();
        }
        if let Some(o) = cm.get("options") {
            out.cpu_manager_policy_options = string_map(o, "spec.cpuManager.options", file)?;
        }
        if let Some(r) = cm.get("reservedSystemCPUs") {
            let s = r.as_str().with_context(|| {
                format!(
                    "{}: spec.cpuManager.reservedSystemCPUs is not a string",
                    file.display()
                )
            })?;
            out.reserved_system_cpus = CpuSet::parse(s).map_err(|e| {
                anyhow::anyhow!(
                    "{}: spec.cpuManager.reservedSystemCPUs {s:?}: {e}",
                    file.display()
                )
            })?;
        }
        if let Some(n) = cm.get("reservedCPUs") {
            let n = n.as_u64().with_context(|| {
                format!(
                    "{}: spec.cpuManager.reservedCPUs is not a whole number",
                    file.display()
                )
            })?;
            out.reserved_cpu_count = Some(n as usize);
        }
    }
    if let Some(tm) = spec.get("topologyManager").filter(|v| !v.is_null()) {
        let field = |k: &str| -> anyhow::Result<String> {
            match tm.get(k) {
                None => Ok(String::new()),
                Some(v) => Ok(v
                    .as_str()
                    .with_context(|| {
                        format!(
                            "{}: spec.topologyManager.{k} is not a string",
                            file.display()
                        )
                    })?
                    .to_string()),
            }
        };
        out.topology_manager_policy = field("policy")?;
        out.topology_manager_scope = field("scope")?;
        if let Some(o) = tm.get("options") {
            out.topology_manager_policy_options =
                string_map(o, "spec.topologyManager.options", file)?;
        }
    }
    Ok(out)
}

fn yaml_str(s: &str) -> String {
    // JSON strings are YAML strings; quoting keeps "true" and "0-1" strings.
    serde_json::Value::String(s.to_string()).to_string()
}

/// nodetopo's drop-in: a full KubeletConfiguration object holding only the owned fields
/// (an explicit reserved set; a count is resolved to CPUs by the caller).
pub fn render_dropin(c: &OwnedConfig) -> String {
    let mut out = String::from(
        "# Written by nodetopo (NodeResourcePolicy actuation); do not edit: the agent rewrites it.\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    );
    out.push_str(&format!("cpuManagerPolicy: {}\n", yaml_str(c.cpu_policy())));
    let map = |out: &mut String, key: &str, m: &BTreeMap<String, String>| {
        if m.is_empty() {
            out.push_str(&format!("{key}: {{}}\n"));
        } else {
            out.push_str(&format!("{key}:\n"));
            for (k, v) in m {
                out.push_str(&format!("  {}: {}\n", yaml_str(k), yaml_str(v)));
            }
        }
    };
    map(
        &mut out,
        "cpuManagerPolicyOptions",
        &c.cpu_manager_policy_options,
    );
    if !c.reserved_system_cpus.is_empty() {
        out.push_str(&format!(
            "reservedSystemCPUs: {}\n",
            yaml_str(&c.reserved_system_cpus.to_string())
        ));
    }
    out.push_str(&format!(
        "topologyManagerPolicy: {}\n",
        yaml_str(c.tm_policy())
    ));
    out.push_str(&format!(
        "topologyManagerScope: {}\n",
        yaml_str(c.tm_scope())
    ));
    map(
        &mut out,
        "topologyManagerPolicyOptions",
        &c.topology_manager_policy_options,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropins_override_in_name_order_and_maps_merge() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("config.yaml");
        std::fs::write(
            &main,
            "kind: KubeletConfiguration\ncpuManagerPolicy: static\nkubeReserved: {cpu: 500m}\nsystemReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n",
        )
        .unwrap();
        let d = dir.path().join("conf.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("50-a.conf"), "topologyManagerPolicy: restricted\n").unwrap();
        std::fs::write(
            d.join("60-b.conf"),
            "topologyManagerPolicy: single-numa-node\ncpuManagerPolicyOptions: {strict-cpu-reservation: \"true\"}\n",
        )
        .unwrap();
        std::fs::write(d.join("70-ignored.yaml"), "cpuManagerPolicy: none\n").unwrap();
        let c = read_effective(&main, Some(&d)).unwrap();
        assert_eq!(c.cpu_manager_policy, "static");
        assert_eq!(c.topology_manager_policy, "single-numa-node");
        assert_eq!(c.cpu_manager_policy_options.len(), 2);
        assert_eq!(c.reserved_cpu_count, Some(2), "ceil(1.5)");
    }

    #[test]
    fn the_dropin_reads_back_as_the_same_fields() {
        let mut c = OwnedConfig {
            cpu_manager_policy: "static".into(),
            reserved_system_cpus: CpuSet::parse("0-1").unwrap(),
            topology_manager_policy: "restricted".into(),
            topology_manager_scope: "pod".into(),
            ..Default::default()
        };
        c.cpu_manager_policy_options
            .insert("full-pcpus-only".into(), "true".into());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(DROPIN_NAME);
        std::fs::write(&f, render_dropin(&c)).unwrap();
        assert_eq!(read_effective(&f, None).unwrap(), c);
    }

    #[test]
    fn a_bad_field_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.yaml");
        std::fs::write(&f, "reservedSystemCPUs: \"0-\"\n").unwrap();
        let e = read_effective(&f, None).unwrap_err().to_string();
        assert!(e.contains("reservedSystemCPUs"), "{e}");
    }
}
