//! nodetopo's reading of the kubelet's configuration (`--config` file plus the KEP-3983
//! drop-in directory) against the kubelet's own code: `e2e/kubelet-config-oracle` (Go,
//! k8s.io/kubernetes v1.37.2 pinned) runs the kubelet's `loadConfigFile` and
//! `mergeKubeletConfigurations` and its configuration validation on the same files.
//!
//! Random cases (`NODETOPO_CONFIG_ORACLE_CASES`, default 1,500; `NODETOPO_CONFIG_ORACLE_SEED`):
//! a config file and up to five drop-ins (top level and in subdirectories, some not ending
//! in `.conf`) setting, resetting (a null) and merging the owned fields, in the spellings
//! YAML 1.1 allows (plain, quoted or `!!str` strings; `yes`, `on`, `n` and other booleans;
//! `~` and empty nulls; `<<` merge keys, also through an anchor; a second document; a key
//! set twice in the config file), sometimes with a file the kubelet refuses (no
//! apiVersion/kind, another apiVersion, empty, a boolean option value, plain or YAML 1.1
//! `yes`, a key set twice in a drop-in, a number for reservedSystemCPUs, a quoted feature
//! gate). Files also set `reservedMemory` (lists a later file replaces whole, null resets,
//! null limits, numbers for quantities and a float NUMA node `2.0`).
//! In about half of them nodetopo's own drop-in, rendered for a random wanted
//! configuration over what the earlier files set, is `90-nodetopo.conf`. Checked:
//! - the kubelet refuses exactly the cases nodetopo's reader refuses;
//! - where both read the files, the owned fields are equal (defaults applied);
//! - where nodetopo's drop-in was written and no later file sets an owned field, the
//!   kubelet's fields are exactly the wanted ones (options an earlier file set are gone).
//!
//!
//! Each case runs on a kubelet command line (`--config`, `--config-dir` and, in about half
//! of the random cases, the configuration flags the kubelet re-applies over its files:
//! `--cpu-manager-policy`, `--cpu-manager-policy-options`, `--reserved-cpus`,
//! `--kube-reserved`, `--system-reserved`, `--topology-manager-*`,
//! `--memory-manager-policy`, `--reserved-memory`, `--feature-gates`, in `--f=v`, `--f v`
//! and `--f_v` spellings, repeated, empty, among unrelated flags (some taking the next
//! word, a configuration flag, as their value; booleans; `-v` shorthands), sometimes with a
//! value or a word the kubelet refuses: an unknown flag, a stray word, words after `--`): nodetopo's effective configuration (files, drop-ins, then flags)
//! is compared with the kubelet's (`kubeletConfigFlagPrecedence`), as are the table cases
//! of [`flags_over_files_agree_with_the_kubelet`].
//!
//! Skips, saying why, when Go is missing, unless `NODETOPO_REQUIRE_ORACLE=1`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodetopo_engine::change::OwnedConfig;
use nodetopo_engine::spec::CpuManagerPolicy;
use nodetopo_engine::{quantity, CpuSet};
use nodetopo_kubelet::cmdline as kubelet_cmdline;
use nodetopo_kubelet::config::{
    read_below_dropin, read_config, read_config_with_flags, render_dropin, KubeletFileConfig,
    DROPIN_NAME,
};
use nodetopo_testkit::{go_tool_or_skip, SplitMix as Rng};
use serde::Deserialize;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

const CPU_OPTIONS: [&str; 4] = [
    "full-pcpus-only",
    "distribute-cpus-across-numa",
    "align-by-socket",
    "strict-cpu-reservation",
];
const TM_OPTIONS: [&str; 2] = ["prefer-closest-numa-nodes", "max-allowable-numa-nodes"];

/// A YAML spelling of the string `v`, chosen at random: plain where YAML 1.1 keeps it a
/// string, single- or double-quoted, or tagged `!!str`.
fn spell(r: &mut Rng, v: &str) -> String {
    let plain_is_string = !v.is_empty()
        && !v.bytes().all(|b| b.is_ascii_digit())
        && !["true", "false", "yes", "no", "on", "off", "y", "n", "null"]
            .contains(&v.to_ascii_lowercase().as_str());
    match r.below(4) {
        0 if plain_is_string => v.to_string(),
        1 => format!("'{v}'"),
        2 if !v.is_empty() => format!("!!str {v}"),
        _ => format!("\"{v}\""),
    }
}

/// A YAML spelling of null (all of them reset a field in a drop-in).
fn null(r: &mut Rng) -> &'static str {
    r.pick::<&str>(&["null", "~", "Null", ""])
}

/// A YAML 1.1 spelling of a boolean, as go-yaml v2 reads it.
fn boolean(r: &mut Rng) -> &'static str {
    if r.chance(50) {
        r.pick::<&str>(&["true", "True", "yes", "on", "Y"])
    } else {
        r.pick::<&str>(&["false", "FALSE", "no", "off", "n"])
    }
}

/// One owned field as a YAML line (or lines), chosen at random: set, reset (a null), or
/// for maps, merged with some keys set and some deleted; in the spellings YAML 1.1 allows
/// (quoted or not, `yes`/`on`/`~`, `<<` merge keys, anchors, a second document, a key set
/// twice in the `--config` file, where the later wins).
fn random_fields(r: &mut Rng, config_file: bool) -> String {
    let mut out = String::new();
    let scalar = |r: &mut Rng, out: &mut String, key: &str, values: &[&str]| {
        let v = *r.pick(values);
        let v = if v == "null" {
            null(r).to_string()
        } else {
            spell(r, v)
        };
        out.push_str(&format!("{key}: {v}\n"));
    };
    if r.chance(50) {
        scalar(r, &mut out, "cpuManagerPolicy", &["static", "none", "null"]);
        if config_file && r.chance(15) {
            // Set twice: the kubelet's lenient decoding keeps the later value.
            scalar(r, &mut out, "cpuManagerPolicy", &["static", "none"]);
        }
    }
    if r.chance(40) {
        scalar(
            r,
            &mut out,
            "reservedSystemCPUs",
            &["0,32", "0-1,32-33", "0-3", "null", ""],
        );
    }
    if r.chance(40) {
        scalar(
            r,
            &mut out,
            "topologyManagerPolicy",
            &[
                "none",
                "best-effort",
                "restricted",
                "single-numa-node",
                "null",
            ],
        );
    }
    if r.chance(30) {
        let v = *r.pick(&["container", "pod"]);
        match r.below(4) {
            // A YAML 1.1 merge key, directly or through an anchor.
            0 => out.push_str(&format!("<<: {{topologyManagerScope: {v}}}\n")),
            1 => out.push_str(&format!(
                "x-nodetopo-test: &scope {{topologyManagerScope: {v}}}\n<<: *scope\n"
            )),
            _ => scalar(r, &mut out, "topologyManagerScope", &[v, "null"]),
        }
    }
    let map = |r: &mut Rng, out: &mut String, key: &str, names: &[&str], values: &[&str]| {
        if r.chance(15) {
            out.push_str(&format!("{key}: {}\n", null(r)));
            return;
        }
        out.push_str(&format!("{key}:\n"));
        let n = 1 + r.below(names.len());
        for name in names.iter().take(n) {
            let v = if r.chance(25) {
                null(r).to_string()
            } else {
                let v = *r.pick(values);
                spell(r, v)
            };
            out.push_str(&format!("  {name}: {v}\n"));
        }
    };
    if r.chance(40) {
        map(
            r,
            &mut out,
            "cpuManagerPolicyOptions",
            &CPU_OPTIONS,
            &["true", "false"],
        );
    }
    if r.chance(25) {
        let opts = ["prefer-closest-numa-nodes"];
        map(
            r,
            &mut out,
            "topologyManagerPolicyOptions",
            &opts,
            &["true", "false"],
        );
    }
    if r.chance(25) {
        // Real gate names (the kubelet refuses unknown ones); null deletes in a drop-in and
        // is false in the --config file.
        let gates = [
            "CPUManagerPolicyAlphaOptions",
            "CPUManagerPolicyBetaOptions",
            "TopologyManagerPolicyAlphaOptions",
        ];
        out.push_str("featureGates:\n");
        for g in gates.iter().take(1 + r.below(gates.len())) {
            let v = if r.chance(20) { null(r) } else { boolean(r) };
            out.push_str(&format!("  {g}: {v}\n"));
        }
    }
    // In the --config file a null map value decodes as "", which is no CPU quantity: the
    // kubelet fails on it later than the configuration loading asked here, so the config
    // file gets plain values.
    if r.chance(25) {
        let key = *r.pick(&["kubeReserved", "systemReserved"]);
        let values = ["500m", "1", "1500m"];
        if config_file {
            let v = *r.pick(&values);
            let v = spell(r, v);
            out.push_str(&format!("{key}:\n  cpu: {v}\n"));
        } else {
            map(r, &mut out, key, &["cpu", "memory"], &values);
        }
    }
    if r.chance(20) {
        // A whole list: a later file replaces it (a JSON merge patch replaces lists); in a
        // drop-in a null resets it and a null limit is pruned (in the config file it would
        // be a zero reservation, which the kubelet refuses).
        if !config_file && r.chance(20) {
            out.push_str(&format!("reservedMemory: {}\n", null(r)));
        } else {
            let mut entries = Vec::new();
            for node in ["0", "1", "2.0", "3"] {
                if !r.chance(50) {
                    continue;
                }
                let mut limits = Vec::new();
                for (name, values) in [
                    (
                        "memory",
                        &["1Gi", "512Mi", "1073741824", "1.5G", "100M"][..],
                    ),
                    ("hugepages-2Mi", &["4Mi", "2097152"][..]),
                    ("hugepages-1Gi", &["1Gi"][..]),
                ] {
                    if r.chance(50) {
                        let v = if !config_file && r.chance(15) {
                            "null".to_string()
                        } else {
                            let v = *r.pick(values);
                            if v.bytes().all(|b| b.is_ascii_digit()) && r.chance(50) {
                                v.to_string() // a YAML integer
                            } else {
                                spell(r, v)
                            }
                        };
                        limits.push(format!("{name}: {v}"));
                    }
                }
                entries.push(format!(
                    "{{numaNode: {node}, limits: {{{}}}}}",
                    limits.join(", ")
                ));
            }
            out.push_str(&format!("reservedMemory: [{}]\n", entries.join(", ")));
        }
    }
    if r.chance(10) {
        // Only the first document is read.
        out.push_str("---\ncpuManagerPolicy: 5\n");
    }
    out
}

/// What makes the kubelet refuse a drop-in, and what nodetopo must say about it.
const FAULTS: [(&str, &str); 8] = [
    ("no apiVersion/kind", "maxPods: 110\n"),
    (
        "another apiVersion",
        "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
    ),
    ("empty file", ""),
    (
        "a boolean option value",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicyOptions:\n  full-pcpus-only: true\n",
    ),
    (
        "a YAML 1.1 boolean option value",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicyOptions:\n  full-pcpus-only: yes\n",
    ),
    (
        "a key set twice in a drop-in",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ntopologyManagerScope: pod\ntopologyManagerScope: container\n",
    ),
    (
        "a number for reservedSystemCPUs",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nreservedSystemCPUs: 3\n",
    ),
    (
        "a quoted feature gate",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  CPUManagerPolicyBetaOptions: \"true\"\n",
    ),
];

/// A random wanted configuration (what a policy asks for; the reserved set explicit).
fn random_wanted(r: &mut Rng) -> OwnedConfig {
    let mut c = OwnedConfig {
        cpu_manager_policy: r.pick(&["static", "none"]).parse().expect("policy"),
        topology_manager_policy: r
            .pick(&["none", "best-effort", "restricted", "single-numa-node"])
            .parse()
            .expect("policy"),
        topology_manager_scope: r.pick(&["container", "pod"]).parse().expect("scope"),
        ..Default::default()
    };
    if c.cpu_manager_policy == CpuManagerPolicy::Static {
        c.reserved_system_cpus =
            CpuSet::parse(r.pick::<&str>(&["0,32", "0-1,32-33", "0-3"])).expect("cpus");
        for o in CPU_OPTIONS {
            if r.chance(30) {
                c.cpu_manager_policy_options.insert(o.into(), "true".into());
            }
        }
    }
    if r.chance(30) {
        c.topology_manager_policy_options
            .insert(TM_OPTIONS[0].into(), "true".into());
    }
    c
}

struct Case {
    dir: tempfile::TempDir,
    /// The kubelet's arguments after `--config` and `--config-dir`.
    flags: Vec<String>,
    /// Replaces the `--config-dir` argument (`Some("")`: `--config-dir=`).
    config_dir_arg: Option<String>,
    fault: Option<&'static str>,
    /// The wanted configuration when nodetopo's drop-in was written, and whether a file
    /// after it sets an owned field.
    ours: Option<(OwnedConfig, bool)>,
}

impl Case {
    fn config(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }
    fn config_dir(&self) -> PathBuf {
        self.dir.path().join("conf.d")
    }
    /// The kubelet's arguments.
    fn args(&self) -> Vec<String> {
        let mut out = vec![
            format!("--config={}", self.config().display()),
            match &self.config_dir_arg {
                Some(d) => format!("--config-dir={d}"),
                None => format!("--config-dir={}", self.config_dir().display()),
            },
        ];
        out.extend(self.flags.iter().cloned());
        out
    }
    /// nodetopo's reading: the command line, then the files and the flags over them.
    fn read(&self) -> anyhow::Result<KubeletFileConfig> {
        let k = kubelet_cmdline::parse(0, &self.args()).map_err(|e| anyhow::anyhow!(e))?;
        let config = k.config.clone().unwrap_or_default();
        read_config_with_flags(
            Path::new(&config),
            k.config_dir.as_deref().map(Path::new),
            &k.flags,
        )
    }
}

/// One flag in a random spelling: `--name=value`, `--name value` or with `_` for `-`.
fn flag(r: &mut Rng, out: &mut Vec<String>, name: &str, value: &str) {
    match r.below(4) {
        0 => {
            out.push(format!("--{name}"));
            out.push(value.to_string());
        }
        1 => out.push(format!("--{}={value}", name.replace('-', "_"))),
        _ => out.push(format!("--{name}={value}")),
    }
}

/// Flags the kubelet refuses, with what nodetopo must refuse too.
const FLAG_FAULTS: [(&str, &[&str]); 16] = [
    (
        "an unknown flag before a configuration flag",
        &["--some-unknown-flag", "--reserved-cpus=0-1"],
    ),
    (
        "an unknown flag with its value",
        &["--some-unknown-flag", "value"],
    ),
    ("a word that is not a flag", &["stray"]),
    ("words after --", &["--", "--reserved-cpus=1"]),
    ("a bad boolean", &["--register-node=maybe"]),
    ("a shorthand the kubelet does not have", &["-x"]),
    ("a map flag without =", &["--kube-reserved=cpu"]),
    ("empty policy options", &["--cpu-manager-policy-options="]),
    (
        "a gate that is not a boolean",
        &["--feature-gates=CPUManagerPolicyBetaOptions=maybe"],
    ),
    ("a cpu reservation", &["--reserved-memory=0:cpu=1"]),
    (
        "a NUMA node that is no number",
        &["--reserved-memory=x:memory=1Gi"],
    ),
    (
        "a zero memory reservation",
        &["--reserved-memory=0:memory=0"],
    ),
    (
        "a duplicate memory reservation",
        &[
            "--reserved-memory=0:memory=1Gi",
            "--reserved-memory=0:memory=2Gi",
        ],
    ),
    (
        "--reserved-memory after an empty one",
        &["--reserved-memory=", "--reserved-memory=0:memory=1Gi"],
    ),
    ("a bad --reserved-cpus", &["--reserved-cpus=0-"]),
    ("a flag without its value", &["--reserved-cpus"]),
];

/// Random configuration flags (and unrelated ones), and the fault planted if any.
fn random_flags(r: &mut Rng) -> (Vec<String>, Option<&'static str>) {
    let mut out = Vec::new();
    if r.chance(50) {
        return (out, None);
    }
    // Flags nodetopo does not read, split as the kubelet's flag set splits them: a flag
    // that takes a value takes the next word even where it looks like a configuration
    // flag, a boolean or `--version` takes none, `-v` in each shorthand spelling.
    let unrelated = |r: &mut Rng, out: &mut Vec<String>| {
        let words: &[&str] = match r.below(10) {
            0 => &["--v=2"],
            1 => &["--register-node"],
            2 => &["--node-labels", "a=b,c=d"],
            3 => &["--max-pods=110"],
            4 => &["--hostname-override", "--reserved-cpus=0-3"],
            5 => &["--node_ip", "--cpu-manager-policy=static"],
            6 => &["--register-node=false", "--fail-swap-on=F"],
            7 => &["-v", "4"],
            8 => &["-v3", "--version", "--version=false"],
            _ => &["-v=5", "--provider-id", "--topology-manager-scope=pod"],
        };
        out.extend(words.iter().map(|w| w.to_string()));
    };
    unrelated(r, &mut out);
    if r.chance(25) {
        let v = *r.pick(&["static", "none"]);
        flag(r, &mut out, "cpu-manager-policy", v);
    }
    if r.chance(20) {
        for _ in 0..1 + r.below(2) {
            let o = *r.pick(&CPU_OPTIONS);
            let v = *r.pick(&["true", "false"]);
            flag(
                r,
                &mut out,
                "cpu-manager-policy-options",
                &format!("{o}={v}"),
            );
        }
    }
    if r.chance(25) {
        let v = *r.pick(&["0,32", "0-3", "1", ""]);
        flag(r, &mut out, "reserved-cpus", v);
    }
    for name in ["kube-reserved", "system-reserved"] {
        if r.chance(20) {
            for _ in 0..1 + r.below(2) {
                let v = *r.pick(&[
                    "cpu=500m,memory=1Gi",
                    "cpu=1",
                    " memory = 2Gi ",
                    "",
                    "cpu=1500m,,pid=100",
                ]);
                flag(r, &mut out, name, v);
            }
        }
    }
    if r.chance(25) {
        let v = *r.pick(&["none", "best-effort", "restricted", "single-numa-node"]);
        flag(r, &mut out, "topology-manager-policy", v);
    }
    if r.chance(20) {
        let v = *r.pick(&["container", "pod"]);
        flag(r, &mut out, "topology-manager-scope", v);
    }
    if r.chance(15) {
        let v = *r.pick(&[
            "prefer-closest-numa-nodes=true",
            "prefer-closest-numa-nodes=false",
            "",
        ]);
        flag(r, &mut out, "topology-manager-policy-options", v);
    }
    if r.chance(20) {
        let v = *r.pick(&["None", "Static"]);
        flag(r, &mut out, "memory-manager-policy", v);
    }
    if r.chance(20) {
        let v = *r.pick(&[
            "0:memory=1Gi",
            "0:memory=1Gi;1:memory=512Mi,hugepages-2Mi=4Mi",
            "+1:memory=1G",
            "",
        ]);
        flag(r, &mut out, "reserved-memory", v);
    }
    if r.chance(25) {
        for _ in 0..1 + r.below(2) {
            let v = *r.pick(&[
                "CPUManagerPolicyAlphaOptions=true",
                "CPUManagerPolicyBetaOptions=f,TopologyManagerPolicyAlphaOptions=T",
                "AllBeta=false",
                "AllAlpha=true,CPUManagerPolicyAlphaOptions=false",
                " CPUManagerPolicyBetaOptions = 1 ",
                "",
            ]);
            flag(r, &mut out, "feature-gates", v);
        }
    }
    if r.chance(30) {
        unrelated(r, &mut out);
    }
    let fault = if r.chance(10) {
        let (what, words) = FLAG_FAULTS[r.below(FLAG_FAULTS.len())];
        out.extend(words.iter().map(|w| w.to_string()));
        Some(what)
    } else if out
        .iter()
        .any(|w| w.contains("AllAlpha=true") || w.contains("AllBeta=false"))
    {
        // The kubelet v1.37.2 may refuse both (GenericWorkload off under AllAlpha; its
        // defaulted configuration needs two beta gates AllBeta=false turns off).
        Some("a gate set the kubelet refuses")
    } else {
        None
    };
    (out, fault)
}

/// Whether the flags set a field nodetopo's drop-in sets (or the reserved count).
fn flags_set_owned(flags: &[String]) -> bool {
    flags.iter().any(|f| {
        let f = f.replace('_', "-");
        [
            "--cpu-manager",
            "--reserved-cpus",
            "--topology-manager",
            "--kube-reserved",
            "--system-reserved",
        ]
        .iter()
        .any(|p| f.starts_with(p))
    })
}

const NAMES: [&str; 10] = [
    "10-site.conf",
    "50-b.conf",
    "80-c.conf",
    "0-sub/30-f.conf",
    "99-late.conf",
    "a-sub/20-c.conf",
    "z-sub/05-d.conf",
    "z-sub/deeper/01-e.conf",
    "60-skip.conf.bak",
    "70-skip.yaml",
];

fn write(path: &Path, text: &str) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(path, text).expect("write");
}

/// Whether a file with `text` sets one of the owned fields.
fn sets_owned(text: &str) -> bool {
    [
        "cpuManagerPolicy",
        "reservedSystemCPUs",
        "topologyManager",
        "kubeReserved",
        "systemReserved",
    ]
    .iter()
    .any(|k| text.contains(k))
}

fn random_case(r: &mut Rng) -> Case {
    let dir = tempfile::tempdir().expect("tempdir");
    let case_dir = dir.path().join("conf.d");
    std::fs::create_dir_all(&case_dir).expect("conf.d");
    write(
        &dir.path().join("config.yaml"),
        &format!("{HEAD}{}", random_fields(r, true)),
    );
    let mut files: BTreeMap<&str, String> = BTreeMap::new();
    for _ in 0..r.below(6) {
        files.insert(
            *r.pick(&NAMES),
            format!("{HEAD}{}", random_fields(r, false)),
        );
    }
    let fault = if r.chance(10) {
        let (what, text) = FAULTS[r.below(FAULTS.len())];
        files.insert(*r.pick(&NAMES[..8]), text.to_string());
        Some(what)
    } else {
        None
    };
    for (name, text) in &files {
        write(&case_dir.join(name), text);
    }
    let (flags, flag_fault) = random_flags(r);
    let mut case = Case {
        dir,
        fault: fault.or(flag_fault),
        flags,
        config_dir_arg: None,
        ours: None,
    };
    if case.fault.is_none() && r.chance(50) {
        let wanted = random_wanted(r);
        if let Ok(below) = read_below_dropin(&case.config(), &case.config_dir()) {
            write(
                &case_dir.join(DROPIN_NAME),
                &render_dropin(&wanted, &below).expect("drop-in"),
            );
            // In walk order, after 90-nodetopo.conf: what sorts after it at the top level
            // (99-late.conf and both subdirectories).
            let later = files.iter().any(|(name, text)| {
                let top = name.split('/').next().unwrap_or(name);
                top.as_bytes() > DROPIN_NAME.as_bytes()
                    && name.ends_with(".conf")
                    && sets_owned(text)
            }) || flags_set_owned(&case.flags);
            case.ours = Some((wanted, later));
        }
    }
    case
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Owned {
    cpu_manager_policy: String,
    cpu_manager_policy_options: Option<BTreeMap<String, String>>,
    #[serde(rename = "reservedSystemCPUs")]
    reserved_system_cpus: String,
    topology_manager_policy: String,
    topology_manager_scope: String,
    topology_manager_policy_options: Option<BTreeMap<String, String>>,
    kube_reserved_cpu: String,
    system_reserved_cpu: String,
    feature_gates: Option<BTreeMap<String, bool>>,
    kube_reserved: Option<BTreeMap<String, String>>,
    system_reserved: Option<BTreeMap<String, String>>,
    memory_manager_policy: String,
    reserved_memory: Option<Vec<MemoryReservation>>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct MemoryReservation {
    numa_node: i32,
    limits: BTreeMap<String, i64>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    ok: bool,
    owned: Option<Owned>,
    #[serde(default)]
    error: String,
}

/// The kubelet's answer in nodetopo's shape (defaults as the kubelet applied them).
fn kubelet_owned(o: &Owned) -> OwnedConfig {
    let mut c = OwnedConfig {
        cpu_manager_policy: kubelet_name(&o.cpu_manager_policy),
        cpu_manager_policy_options: o.cpu_manager_policy_options.clone().unwrap_or_default(),
        reserved_system_cpus: CpuSet::parse(&o.reserved_system_cpus).expect("kubelet's cpus"),
        topology_manager_policy: kubelet_name(&o.topology_manager_policy),
        topology_manager_scope: kubelet_name(&o.topology_manager_scope),
        topology_manager_policy_options: o
            .topology_manager_policy_options
            .clone()
            .unwrap_or_default(),
        ..Default::default()
    };
    if c.reserved_system_cpus.is_empty() {
        let millis: u64 = [&o.kube_reserved_cpu, &o.system_reserved_cpu]
            .iter()
            .filter(|q| !q.is_empty())
            .map(|q| quantity::parse_millis(q).expect("kubelet's quantity"))
            .sum();
        if millis > 0 {
            c.reserved_cpu_count = Some(millis.div_ceil(1000) as usize);
        }
    }
    c
}

/// A policy or scope name as the kubelet answered it (empty: its default).
fn kubelet_name<T: std::str::FromStr + Default>(name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    if name.is_empty() {
        T::default()
    } else {
        name.parse().expect("a name the kubelet accepted")
    }
}

/// nodetopo's effective configuration against the kubelet's answer: the owned fields,
/// featureGates, kubeReserved, systemReserved, memoryManagerPolicy and reservedMemory.
fn agree(read: &KubeletFileConfig, owned: &Owned) -> Result<(), String> {
    let kubelet = kubelet_owned(owned);
    if read.owned != kubelet {
        return Err(format!(
            "owned fields differ: nodetopo {:?}, kubelet {kubelet:?}",
            read.owned
        ));
    }
    let gates = owned.feature_gates.clone().unwrap_or_default();
    if read.feature_gates != gates {
        return Err(format!(
            "featureGates differ: nodetopo {:?}, kubelet {gates:?}",
            read.feature_gates
        ));
    }
    for (what, ours, theirs) in [
        ("kubeReserved", &read.kube_reserved, &owned.kube_reserved),
        (
            "systemReserved",
            &read.system_reserved,
            &owned.system_reserved,
        ),
    ] {
        let theirs = theirs.clone().unwrap_or_default();
        if *ours != theirs {
            return Err(format!(
                "{what} differs: nodetopo {ours:?}, kubelet {theirs:?}"
            ));
        }
    }
    let policy = if read.memory_manager_policy.is_empty() {
        "None"
    } else {
        &read.memory_manager_policy
    };
    if policy != owned.memory_manager_policy {
        return Err(format!(
            "memoryManagerPolicy differs: nodetopo {policy:?}, kubelet {:?}",
            owned.memory_manager_policy
        ));
    }
    let ours: Option<Vec<MemoryReservation>> = read.reserved_memory.as_ref().map(|list| {
        list.iter()
            .map(|m| MemoryReservation {
                numa_node: m.numa_node,
                limits: m
                    .limits
                    .iter()
                    .map(|(k, q)| {
                        (
                            k.clone(),
                            quantity::parse_units(q).expect("quantity") as i64,
                        )
                    })
                    .collect(),
            })
            .collect()
    });
    if ours != owned.reserved_memory {
        return Err(format!(
            "reservedMemory differs: nodetopo {ours:?}, kubelet {:?}",
            owned.reserved_memory
        ));
    }
    Ok(())
}

fn oracle_or_skip() -> Option<PathBuf> {
    go_tool_or_skip(
        "e2e/kubelet-config-oracle/build.sh",
        "the kubelet configuration oracle",
    )
}

fn ask(bin: &Path, cases: &[Case]) -> Vec<Answer> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the kubelet configuration oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines: Vec<String> = cases
        .iter()
        .map(|c| serde_json::json!({ "args": c.args() }).to_string())
        .collect();
    let writer = std::thread::spawn(move || {
        for l in lines {
            writeln!(stdin, "{l}").expect("writing to the oracle");
        }
    });
    let answers: Vec<Answer> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .take(cases.len())
        .map(|l| serde_json::from_str(&l.expect("reading the oracle")).expect("answer"))
        .collect();
    writer.join().expect("writer");
    let _ = child.wait();
    answers
}

#[test]
fn config_reading_agrees_with_the_kubelet() {
    let Some(bin) = oracle_or_skip() else {
        return;
    };
    let n: usize = std::env::var("NODETOPO_CONFIG_ORACLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let seed: u64 = std::env::var("NODETOPO_CONFIG_ORACLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    println!("kubelet configuration oracle: {n} cases, seed {seed} (NODETOPO_CONFIG_ORACLE_SEED)");
    let mut r = Rng(seed);
    let cases: Vec<Case> = (0..n).map(|_| random_case(&mut r)).collect();
    let answers = ask(&bin, &cases);
    assert_eq!(answers.len(), n, "the oracle answered every case");
    let (mut both_read, mut both_refused, mut ours_exact, mut ours_overridden) = (0, 0, 0, 0);
    let (mut with_gates, mut with_flags, mut with_reserved_memory) = (0, 0, 0);
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (case, answer)) in cases.iter().zip(&answers).enumerate() {
        let files = || {
            let mut s = format!(
                "case {i} (seed {seed}): kubelet {}\n--- config.yaml\n{}",
                case.args().join(" "),
                std::fs::read_to_string(case.config()).unwrap_or_default()
            );
            if let Ok(list) = nodetopo_kubelet::config::dropins(&case.config_dir()) {
                for f in list {
                    s.push_str(&format!(
                        "--- {}\n{}",
                        f.strip_prefix(case.config_dir()).unwrap_or(&f).display(),
                        std::fs::read_to_string(&f).unwrap_or_default()
                    ));
                }
            }
            s
        };
        let ours = case.read();
        match (&ours, answer.ok) {
            (Ok(read), true) => {
                let owned = answer.owned.as_ref().expect("owned");
                let kubelet = kubelet_owned(owned);
                if let Err(e) = agree(read, owned) {
                    panic!("{e}\n{}", files());
                }
                if !case.flags.is_empty() {
                    with_flags += 1;
                }
                if read.reserved_memory.is_some() {
                    with_reserved_memory += 1;
                }
                let gates = &read.feature_gates;
                if !gates.is_empty() {
                    with_gates += 1;
                }
                both_read += 1;
                if let Some((wanted, later)) = &case.ours {
                    if *later {
                        ours_overridden += 1;
                    } else {
                        // The reserved count from kubeReserved/systemReserved (fields
                        // nodetopo does not own) is unused: a static drop-in states its
                        // reserved set explicitly, and policy none reserves nothing.
                        let (mut k, mut w) = (kubelet.clone(), wanted.clone());
                        k.reserved_cpu_count = None;
                        w.reserved_cpu_count = None;
                        assert_eq!(
                            k,
                            w,
                            "nodetopo's drop-in did not give the wanted fields\n{}",
                            files()
                        );
                        ours_exact += 1;
                    }
                }
            }
            (Err(_), false) => {
                both_refused += 1;
                if let Some(f) = case.fault {
                    *faults.entry(f).or_default() += 1;
                }
            }
            (Ok(_), false) => panic!(
                "the kubelet refuses what nodetopo reads: {}\n{}",
                answer.error,
                files()
            ),
            (Err(e), true) => panic!(
                "nodetopo refuses what the kubelet reads: {e:#}\n{}",
                files()
            ),
        }
        // A planted fault is refused unless a later drop-in replaces the bad value before
        // the kubelet decodes the merged result (a planted boolean option overridden by a
        // string one); nothing unplanted is refused.
        if !answer.ok {
            assert!(
                case.fault.is_some(),
                "refused without a planted fault: {}\n{}",
                answer.error,
                files()
            );
        }
    }
    println!(
        "kubelet configuration oracle: {n} cases: {both_read} read alike (owned fields and featureGates equal, {with_gates} with gates, {with_flags} with configuration flags on the command line, {with_reserved_memory} with reservedMemory), {both_refused} refused by both ({faults:?}); nodetopo's drop-in written in {} cases: {ours_exact} give exactly the wanted fields, {ours_overridden} overridden by a later file (the verify step reports those)",
        ours_exact + ours_overridden
    );
    // About 10 % of the cases keep nodetopo's drop-in unoverridden (9.6 % to 11.3 % over four seeds):
    // the bound leaves room for the spread.
    assert!(both_read > n / 2 && both_refused > 0 && ours_exact > n / 20 && with_flags > n / 10);
}

/// nodetopo's table of the kubelet's flags (which take a value, which are bare) is the
/// flag set the kubelet's own code builds (`NewKubeletCommand`: its options' `AddFlags`,
/// `AddKubeletConfigFlags`, `AddGlobalFlags`, `--help`).
#[test]
fn the_flag_set_is_the_kubelets() {
    let Some(bin) = oracle_or_skip() else {
        return;
    };
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the kubelet configuration oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{{\"flagSet\": true}}").expect("writing to the oracle");
    drop(stdin);
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reading the oracle");
    let _ = child.wait();
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Flag {
        name: String,
        #[serde(default)]
        shorthand: String,
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        no_opt_def_val: String,
        #[serde(default)]
        global: bool,
    }
    #[derive(Deserialize)]
    struct Flags {
        flags: Vec<Flag>,
    }
    let theirs: Flags = serde_json::from_str(&line).expect("the oracle's flag set");
    let mut theirs: Vec<(String, String, String, String, bool)> = theirs
        .flags
        .into_iter()
        .map(|f| (f.name, f.shorthand, f.kind, f.no_opt_def_val, f.global))
        .collect();
    theirs.sort();
    let ours: Vec<(String, String, String, String, bool)> =
        kubelet_cmdline::flag_set::KUBELET_FLAGS
            .iter()
            .map(|f| {
                (
                    f.name.to_string(),
                    f.shorthand.map(String::from).unwrap_or_default(),
                    f.kind.to_string(),
                    f.bare.unwrap_or_default().to_string(),
                    f.global,
                )
            })
            .collect();
    assert_eq!(
        ours, theirs,
        "nodetopo's kubelet flag set against the kubelet's"
    );
    // The kubelet re-reads its command line over its files with its global flags taking a
    // value; the parser relies on the one bare global flag being --version (which ends the
    // kubelet before): anything else would split words differently there.
    let bare_globals: Vec<&str> = kubelet_cmdline::flag_set::KUBELET_FLAGS
        .iter()
        .filter(|f| f.global && f.bare.is_some())
        .map(|f| f.name)
        .collect();
    assert_eq!(bare_globals, ["version"]);
    println!("the kubelet's flag set: {} flags, equal", ours.len());
}

/// A case of one `--config` file (`body` after the apiVersion/kind head) and an empty
/// drop-in directory.
fn config_only(body: &str) -> Case {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("conf.d")).expect("conf.d");
    write(&dir.path().join("config.yaml"), &format!("{HEAD}{body}"));
    Case {
        dir,
        flags: Vec::new(),
        config_dir_arg: None,
        fault: None,
        ours: None,
    }
}

/// go-yaml v2's aliasing limit, as the kubelet meets it: documents around the threshold of
/// "document contains excessive aliasing" (aliases of sequences of several sizes, merge
/// keys through aliases, a billion laughs of 1.4 KB) are read or refused by nodetopo exactly
/// where the kubelet reads or refuses them.
#[test]
fn aliasing_limits_agree_with_the_kubelet() {
    let Some(bin) = oracle_or_skip() else {
        return;
    };
    let mut bodies = Vec::new();
    for size in [9, 50, 99, 200] {
        for count in [5, 50, 99, 100, 101, 150, 300, 1000] {
            let items = vec!["x"; size].join(", ");
            let aliases = vec!["*a"; count].join(", ");
            bodies.push(format!(
                "a: &a [{items}]\nb: [{aliases}]\ncpuManagerPolicy: static\n"
            ));
        }
    }
    for count in [50, 120, 400, 2000] {
        let mut body = String::from("base: &m {k0: v, k1: v, k2: v, k3: v}\n");
        body.push_str("maps:\n");
        for i in 0..count {
            if i % 2 == 0 {
                body.push_str(&format!("- {{<<: *m, own{i}: x}}\n"));
            } else {
                body.push_str(&format!("- {{<<: [*m, *m], own{i}: x}}\n"));
            }
        }
        bodies.push(body);
    }
    // A billion laughs: nine levels of ten aliases, 1.4 KB.
    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    assert!(bomb.len() < 1500, "{}", bomb.len());
    bodies.push(bomb);
    let cases: Vec<Case> = bodies.iter().map(|b| config_only(b)).collect();
    let answers = ask(&bin, &cases);
    let (mut read, mut refused) = (0, 0);
    for ((case, answer), body) in cases.iter().zip(&answers).zip(&bodies) {
        let ours = read_config(&case.config(), Some(&case.config_dir()));
        match (&ours, answer.ok) {
            (Ok(_), true) => read += 1,
            (Err(e), false) => {
                refused += 1;
                assert!(
                    answer.error.contains("excessive aliasing")
                        && format!("{e:#}").contains("excessive aliasing"),
                    "refused for another reason: kubelet {:?}, nodetopo {e:#}\n{body}",
                    answer.error
                );
            }
            (Ok(_), false) => panic!(
                "the kubelet refuses what nodetopo reads: {}\n{body}",
                answer.error
            ),
            (Err(e), true) => panic!("nodetopo refuses what the kubelet reads: {e:#}\n{body}"),
        }
    }
    println!(
        "aliasing limits: {} documents, {read} read by both, {refused} refused by both",
        bodies.len()
    );
    assert!(read > 0 && refused > 1);
}

/// Table cases of flags over files, each read or refused by both as stated, and where read,
/// read alike ([`agree`]): flags over drop-ins, over file values the kubelet would refuse,
/// map flags replacing the files' maps, `--feature-gates` gate by gate (also `AllAlpha`,
/// `AllBeta` and a `null` gate of the config file), `--config-dir=` empty, the value
/// syntax of every flag type.
#[test]
fn flags_over_files_agree_with_the_kubelet() {
    let Some(bin) = oracle_or_skip() else {
        return;
    };
    // (what, config file body, drop-ins, --config-dir argument, flags, read by both)
    type Table = (
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
        Option<&'static str>,
        &'static [&'static str],
        bool,
    );
    let table: &[Table] = &[
        (
            "--reserved-cpus over a drop-in",
            "cpuManagerPolicy: static\n",
            &[("50-a.conf", "reservedSystemCPUs: \"0-3\"\n")],
            None,
            &["--reserved-cpus=0,32"],
            true,
        ),
        (
            "a flag over a file value the kubelet would refuse",
            "reservedSystemCPUs: \"0-\"\n",
            &[],
            None,
            &["--reserved-cpus", "1"],
            true,
        ),
        (
            "a field of the wrong type in a file, under a flag",
            "cpuManagerPolicy: 5\n",
            &[],
            None,
            &["--cpu-manager-policy=static"],
            false,
        ),
        (
            "--kube-reserved replaces the files' whole map",
            "kubeReserved: {cpu: 500m, memory: 1Gi}\n",
            &[("50-a.conf", "kubeReserved: {pid: \"100\"}\n")],
            None,
            &["--kube-reserved=cpu=2"],
            true,
        ),
        (
            "--system-reserved= empties the map",
            "systemReserved: {cpu: \"1\"}\nkubeReserved: {cpu: 500m}\n",
            &[],
            None,
            &["--system-reserved="],
            true,
        ),
        (
            "--reserved-cpus= empties the reserved set",
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0-1\"\nkubeReserved: {cpu: 1500m}\n",
            &[],
            None,
            &["--reserved-cpus="],
            true,
        ),
        (
            "--feature-gates= keeps the files' gates",
            "featureGates: {CPUManagerPolicyAlphaOptions: true}\n",
            &[],
            None,
            &["--feature-gates="],
            true,
        ),
        (
            "a flag gate over a file gate, the others kept",
            "featureGates: {CPUManagerPolicyAlphaOptions: true, CPUManagerPolicyBetaOptions: false}\n",
            &[("50-a.conf", "featureGates: {TopologyManagerPolicyAlphaOptions: true}\n")],
            None,
            &["--feature-gates=CPUManagerPolicyBetaOptions=true", "--feature-gates", "CPUManagerPolicyAlphaOptions=F"],
            true,
        ),
        (
            "AllAlpha in the config file (the kubelet panics: GenericWorkload is off)",
            "featureGates: {AllAlpha: true}\ncpuManagerPolicy: static\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "AllAlpha in the config file, GenericWorkload on by flag",
            "featureGates: {AllAlpha: true}\ncpuManagerPolicy: static\n",
            &[],
            None,
            &["--feature-gates=GenericWorkload=true"],
            true,
        ),
        (
            "AllAlpha and AllBeta in a drop-in",
            "cpuManagerPolicy: static\n",
            &[("50-a.conf", "featureGates: {AllAlpha: true, AllBeta: true}\n")],
            None,
            &[],
            true,
        ),
        (
            "AllBeta false in a drop-in, a beta gate on by flag",
            "cpuManagerPolicy: static\n",
            &[("50-a.conf", "featureGates: {AllBeta: false}\n")],
            None,
            &["--feature-gates=CPUManagerPolicyBetaOptions=true"],
            false,
        ),
        (
            "AllBeta false in a drop-in, the gates its defaults need on by flag",
            "cpuManagerPolicy: static\n",
            &[("50-a.conf", "featureGates: {AllBeta: false}\n")],
            None,
            &["--feature-gates=KubeletCrashLoopBackOffMax=true,KubeletEnsureSecretPulledImages=true"],
            true,
        ),
        (
            "AllBeta=false on the command line over AllBeta true in a file",
            "featureGates: {AllBeta: true}\n",
            &[],
            None,
            &["--feature-gates=AllBeta=false"],
            true,
        ),
        (
            "AllAlpha=false on the command line",
            "featureGates: {CPUManagerPolicyAlphaOptions: true}\n",
            &[],
            None,
            &["--feature-gates=AllAlpha=false"],
            true,
        ),
        (
            "a null gate in the config file",
            "featureGates: {CPUManagerPolicyBetaOptions: null, CPUManagerPolicyAlphaOptions: ~}\n",
            &[],
            None,
            &[],
            true,
        ),
        (
            "a null gate in the config file, turned on by flag",
            "featureGates: {CPUManagerPolicyBetaOptions: null}\n",
            &[],
            None,
            &["--feature-gates=CPUManagerPolicyBetaOptions=true"],
            true,
        ),
        (
            "--config-dir= empty: the drop-ins are not read",
            "topologyManagerPolicy: best-effort\n",
            &[("50-a.conf", "topologyManagerPolicy: restricted\n")],
            Some(""),
            &["--topology-manager-scope=pod"],
            true,
        ),
        (
            "--config-dir= after a directory: the last one wins",
            "topologyManagerPolicy: best-effort\n",
            &[("50-a.conf", "topologyManagerPolicy: restricted\n")],
            None,
            &["--config-dir="],
            true,
        ),
        (
            "--cpu-manager-policy-options is not split at commas",
            "cpuManagerPolicy: static\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n",
            &[],
            None,
            &["--cpu-manager-policy-options=full-pcpus-only=true", "--cpu-manager-policy-options", " strict-cpu-reservation = true "],
            true,
        ),
        (
            "--topology-manager-policy-options is split at commas",
            "",
            &[],
            None,
            &["--topology-manager-policy-options=prefer-closest-numa-nodes=true,,max-allowable-numa-nodes=8"],
            true,
        ),
        (
            "underscores, --flag value",
            "",
            &[("50-a.conf", "topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n")],
            None,
            &["--topology_manager_policy", "single-numa-node", "--topology_manager_scope=container", "--cpu_manager_policy", "static"],
            true,
        ),
        (
            "memory manager flags",
            "memoryManagerPolicy: None\n",
            &[],
            None,
            &["--memory-manager-policy=Static", "--reserved-memory", "0:memory=1Gi", "--reserved-memory=1:memory=1Gi,hugepages-1Gi=2Gi;2:memory=100M"],
            true,
        ),
        (
            "an empty --reserved-memory alone",
            "",
            &[],
            None,
            &["--reserved-memory="],
            true,
        ),
        (
            "a NUMA node converted to 32 bits",
            "",
            &[],
            None,
            &["--reserved-memory=4294967297:memory=1Gi"],
            true,
        ),
        (
            "a duplicate reservation after the wrap",
            "",
            &[],
            None,
            &["--reserved-memory=1:memory=1Gi", "--reserved-memory=4294967297:memory=1Gi"],
            false,
        ),
        (
            "the next word is the value, whatever it looks like",
            "",
            &[],
            None,
            &["--reserved-cpus", "--v=2"],
            false,
        ),
        (
            "reservedMemory in the config file",
            "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}, {numaNode: 1, limits: {memory: \"512Mi\", hugepages-2Mi: 4Mi}}]\n",
            &[],
            None,
            &[],
            true,
        ),
        (
            "reservedMemory of a drop-in replaces the file's whole list",
            "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}, {numaNode: 1, limits: {memory: 1Gi}}]\n",
            &[("50-a.conf", "reservedMemory:\n- numaNode: 1\n  limits:\n    memory: 2Gi\n")],
            None,
            &[],
            true,
        ),
        (
            "a null reservedMemory in a drop-in drops the file's",
            "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
            &[("50-a.conf", "reservedMemory: ~\n")],
            None,
            &[],
            true,
        ),
        (
            "--reserved-memory replaces the files' reservedMemory",
            "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
            &[("50-a.conf", "reservedMemory: [{numaNode: 1, limits: {memory: 1Gi}}]\n")],
            None,
            &["--reserved-memory=0:memory=3Gi"],
            true,
        ),
        (
            "an empty --reserved-memory keeps the files' reservedMemory",
            "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
            &[],
            None,
            &["--reserved-memory="],
            true,
        ),
        (
            "a null limit in a drop-in's reservedMemory is pruned",
            "",
            &[("50-a.conf", "reservedMemory: [{numaNode: 1, limits: {memory: null, hugepages-1Gi: 1Gi}}, {numaNode: 2, limits: ~}]\n")],
            None,
            &[],
            true,
        ),
        (
            "a null limit in the config file's reservedMemory is a zero reservation",
            "reservedMemory: [{numaNode: 1, limits: {memory: null}}]\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "numbers in reservedMemory: an integral float NUMA node, byte counts, a fraction",
            "reservedMemory: [{numaNode: 1.0, limits: {memory: 1073741824}}, {numaNode: 2, limits: {memory: 1.5, hugepages-2Mi: 4e6}}]\n",
            &[],
            None,
            &[],
            true,
        ),
        (
            "a quantity with spaces around it",
            "",
            &[("50-a.conf", "reservedMemory: [{numaNode: 0, limits: {memory: \" 1Gi \"}}]\n")],
            None,
            &[],
            true,
        ),
        (
            "a bad reservation of a drop-in a later drop-in replaces",
            "",
            &[
                ("50-a.conf", "reservedMemory: [{numaNode: x, limits: {memory: lots}}]\n"),
                ("60-b.conf", "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n"),
            ],
            None,
            &[],
            true,
        ),
        (
            "a bad reservation of the config file a drop-in replaces",
            "reservedMemory: [{numaNode: 0, limits: {memory: lots}}]\n",
            &[("50-a.conf", "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n")],
            None,
            &[],
            false,
        ),
        (
            "a NUMA node that is a string in reservedMemory",
            "reservedMemory: [{numaNode: \"0\", limits: {memory: 1Gi}}]\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "a NUMA node beyond 32 bits in reservedMemory",
            "",
            &[("50-a.conf", "reservedMemory: [{numaNode: 4294967297, limits: {memory: 1Gi}}]\n")],
            None,
            &[],
            false,
        ),
        (
            "a fractional NUMA node in reservedMemory",
            "reservedMemory: [{numaNode: 0.5, limits: {memory: 1Gi}}]\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "a cpu reservation in reservedMemory",
            "reservedMemory: [{numaNode: 0, limits: {cpu: \"1\"}}]\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "a NUMA node reserving memory twice in reservedMemory",
            "",
            &[("50-a.conf", "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}, {numaNode: 0, limits: {memory: 2Gi}}]\n")],
            None,
            &[],
            false,
        ),
        (
            "a zero reservation in reservedMemory",
            "reservedMemory: [{numaNode: 0, limits: {memory: \"0\"}}]\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "reservedMemory that is not a list",
            "reservedMemory: {numaNode: 0}\n",
            &[],
            None,
            &[],
            false,
        ),
        (
            "a null entry and an entry without limits in reservedMemory",
            "reservedMemory: [null, {numaNode: 3}]\n",
            &[],
            None,
            &[],
            true,
        ),
        (
            "an empty reservedMemory",
            "reservedMemory: []\n",
            &[],
            None,
            &[],
            true,
        ),
        (
            "an unknown flag before a configuration flag",
            "",
            &[],
            None,
            &["--some-unknown-flag", "--reserved-cpus=0-1"],
            false,
        ),
        (
            "a flag of the kubelet that takes the next word, a configuration flag",
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0-3\"\n",
            &[],
            None,
            &["--hostname-override", "--reserved-cpus=0-1", "--node-ip", "--cpu-manager-policy=none"],
            true,
        ),
        (
            "booleans and --version take no word",
            "",
            &[],
            None,
            &["--register-node", "--topology-manager-policy=restricted", "--version=false", "--topology-manager-scope=pod", "--fail-swap-on=F"],
            true,
        ),
        (
            "--version: the kubelet prints its version and exits",
            "",
            &[],
            None,
            &["--version", "--topology-manager-scope=pod"],
            false,
        ),
        (
            "--version, then --version=false: the kubelet runs",
            "",
            &[],
            None,
            &["--version", "--version=false", "--topology-manager-scope=pod"],
            true,
        ),
        (
            "-v in each shorthand spelling",
            "",
            &[],
            None,
            &["-v", "2", "--topology-manager-policy=restricted", "-v3", "-v=4"],
            true,
        ),
        (
            "-v takes the next word as its level",
            "",
            &[],
            None,
            &["-v", "--topology-manager-policy=restricted"],
            false,
        ),
        (
            "-h: the kubelet prints its help and exits",
            "",
            &[],
            None,
            &["-hv", "5"],
            false,
        ),
        (
            "--help=false: the kubelet exits re-reading its flags",
            "",
            &[],
            None,
            &["--help=false"],
            false,
        ),
        (
            "a boolean followed by a word",
            "",
            &[],
            None,
            &["--register-node", "false"],
            false,
        ),
        (
            "a configuration flag after --",
            "",
            &[],
            None,
            &["--", "--reserved-cpus=1"],
            false,
        ),
        (
            "a lone -- at the end",
            "",
            &[],
            None,
            &["--topology-manager-scope=pod", "--"],
            true,
        ),
        (
            "an empty word as a value",
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0-3\"\n",
            &[],
            None,
            &["--reserved-cpus", "", "--topology-manager-scope", "pod"],
            true,
        ),
        (
            "a gate that is not a boolean",
            "",
            &[],
            None,
            &["--feature-gates=CPUManagerPolicyBetaOptions=yes"],
            false,
        ),
        (
            "a map flag without =",
            "",
            &[],
            None,
            &["--system-reserved=cpu=1,memory"],
            false,
        ),
    ];
    let cases: Vec<Case> = table
        .iter()
        .map(|(_, body, dropins, dir_arg, flags, _)| {
            let mut c = config_only(body);
            for (name, text) in dropins.iter() {
                write(&c.config_dir().join(name), &format!("{HEAD}{text}"));
            }
            c.config_dir_arg = dir_arg.map(String::from);
            c.flags = flags.iter().map(|f| f.to_string()).collect();
            c
        })
        .collect();
    let answers = ask(&bin, &cases);
    assert_eq!(answers.len(), cases.len());
    let (mut read, mut refused) = (0, 0);
    for ((case, answer), (what, _, _, _, _, want_read)) in cases.iter().zip(&answers).zip(table) {
        let ours = case.read();
        match (&ours, answer.ok) {
            (Ok(ours), true) => {
                if let Err(e) = agree(ours, answer.owned.as_ref().expect("owned")) {
                    panic!("{what}: {e}");
                }
                read += 1;
            }
            (Err(_), false) => refused += 1,
            (Ok(_), false) => panic!(
                "{what}: the kubelet refuses what nodetopo reads: {}",
                answer.error
            ),
            (Err(e), true) => panic!("{what}: nodetopo refuses what the kubelet reads: {e:#}"),
        }
        assert_eq!(answer.ok, *want_read, "{what}: {}", answer.error);
    }
    println!(
        "flags over files: {} table cases, {read} read alike, {refused} refused by both",
        table.len()
    );
}
