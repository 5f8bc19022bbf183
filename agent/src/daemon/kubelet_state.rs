//! The kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`), read-only.
//!
//! Formats (pkg/kubelet/cm/cpumanager/state/checkpoint.go), every one a supported kubelet
//! (1.34-1.37) writes or still reads:
//! - v2 (1.34-1.36): `{"policyName","defaultCpuSet","entries":{uid:{container:cpus}},"checksum"}`;
//! - v3: v2 plus `podEntries` (`{uid:{"cpuSet":cpus}}`, pod-level resources);
//! - v4 (1.37, kubernetes PR #139102): the v2 fields (kept for older kubelets) plus `data`,
//!   the JSON of `{"policyName","defaultCpuSet","entries","podEntries","baselines"}`, and
//!   `dataChecksum`. `data` is authoritative, as for the kubelet.
//!
//! Checksums are recomputed exactly as the kubelet verifies them: FNV-32a over Go's
//! `dump.ForHash` print (spew `%#v`, keys sorted) of the checkpoint struct with a zero
//! checksum, under the struct name `CPUManagerCheckpoint` (or the versioned name, which the
//! kubelet tries first); for v4 over the print of the `data` string. A recorded checksum of
//! 0 is accepted unverified, as the kubelet does. A mismatch is reported, not hidden: the
//! state is still returned with [`ChecksumCheck::Mismatch`], and the agent's
//! `KubeletAgreement` condition says so. Only the print of the shapes above is reproduced;
//! a v3 file with non-empty `podEntries` (whose Go print includes cpuset internals) is read
//! and marked [`ChecksumCheck::Unverifiable`].
//!
//! Every CPU set is parsed, so a damaged file is an error naming the file and the field,
//! never half-used. The v1 format (entries keyed by container ID, kubelet < 1.18) is
//! refused with a message saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_engine::CpuSet;
use serde::Deserialize;

/// Which checkpoint version the file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointFormat {
    /// v2: kubelet 1.34-1.36.
    V2,
    /// v3: v2 with pod entries.
    V3,
    /// v4: kubelet 1.37 (`data` + `dataChecksum`, v2 fields embedded).
    V4,
}

/// The outcome of recomputing the kubelet's checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChecksumCheck {
    /// The recorded checksum matches.
    Verified,
    /// The recorded checksum is 0, which the kubelet accepts unverified.
    NotRecorded,
    /// The recorded checksum does not match the content (the kubelet would refuse the file).
    Mismatch {
        /// Which checksum field.
        field: &'static str,
        /// The value in the file.
        recorded: u64,
        /// The value computed from the content.
        computed: u64,
    },
    /// The content's Go print cannot be reproduced here (why).
    Unverifiable(String),
}

/// The kubelet's view of CPU assignments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletCpuState {
    /// `none` or `static`.
    pub policy_name: String,
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// pod UID -> container -> CPUs.
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// The checksum recorded by the kubelet (`dataChecksum` for v4).
    pub checksum: u64,
    /// The file's format.
    pub format: CheckpointFormat,
    /// The recomputed checksum's verdict.
    pub checksum_check: ChecksumCheck,
}

/// Why the kubelet's checkpoint could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeletStateError {
    /// The file cannot be read.
    #[error("kubelet CPU manager state {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The content is not a kubelet CPU manager checkpoint we understand.
    #[error("kubelet CPU manager state {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (names the field).
        why: String,
    },
}

/// Raw string maps, as written: checksums are over these exact strings.
type RawEntries = BTreeMap<String, BTreeMap<String, String>>;

/// The outer object of every version.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFile {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pod_entries: Option<BTreeMap<String, RawPodEntry>>,
    checksum: u64,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    data_checksum: Option<u64>,
}

/// v4's `data` payload (`CPUManagerCheckpointData`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawData {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pod_entries: Option<BTreeMap<String, RawPodEntry>>,
    #[serde(default)]
    baselines: Option<BTreeMap<String, BTreeMap<String, RawBaseline>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPodEntry {
    #[serde(default)]
    cpu_set: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBaseline {
    #[serde(default)]
    baseline: String,
}

/// FNV-1a, 32 bits (Go's `hash/fnv` `New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Go's `dump.ForHash` print of a `map[string]map[string]string` value (nil prints `<nil>`).
fn go_print_entries(entries: Option<&RawEntries>) -> String {
    let Some(m) = entries else {
        return "<nil>".to_string();
    };
    let outer: Vec<String> = m
        .iter()
        .map(|(uid, cs)| {
            let inner: Vec<String> = cs.iter().map(|(c, s)| format!("{c}:{s}")).collect();
            format!("{uid}:map[{}]", inner.join(" "))
        })
        .collect();
    format!("map[{}]", outer.join(" "))
}

/// The kubelet's v2/v3 checksum of the outer fields under struct name `name`;
/// `pod_entries` is `None` for v2, else the printed `PodEntries` value.
fn outer_checksum(
    name: &str,
    policy: &str,
    default: &str,
    entries: Option<&RawEntries>,
    pod_entries: Option<&str>,
) -> u32 {
    let mut print = format!(
        "(*state.{name}){{PolicyName:(string){policy} DefaultCPUSet:(string){default} Entries:(map[string]map[string]string){} ",
        go_print_entries(entries)
    );
    if let Some(p) = pod_entries {
        print.push_str(&format!("PodEntries:(state.PodCPUAssignments){p} "));
    }
    print.push_str("Checksum:(checksum.Checksum)0}");
    fnv32a(print.as_bytes())
}

/// The kubelet's v4 `dataChecksum`: FNV-32a over the print of the `data` string.
pub fn data_checksum(data: &str) -> u32 {
    fnv32a(format!("(string){data}").as_bytes())
}

/// Verifies a v2/v3 outer checksum as the kubelet does (versioned struct name first, then
/// `CPUManagerCheckpoint`), trying the v2 print and, when the file has no pod entries, the
/// v3 print with an empty `PodEntries` (the kubelet's loaders start from empty maps, so
/// absent maps hash as empty ones). Returns the format that matched.
fn verify_outer(
    recorded: u64,
    policy: &str,
    default: &str,
    entries: &RawEntries,
) -> (CheckpointFormat, ChecksumCheck) {
    if recorded == 0 {
        return (CheckpointFormat::V2, ChecksumCheck::NotRecorded);
    }
    let candidates = [
        (CheckpointFormat::V2, "CPUManagerCheckpointV2", None),
        (
            CheckpointFormat::V3,
            "CPUManagerCheckpointV3",
            Some("map[]"),
        ),
    ];
    for (format, versioned, pods) in candidates {
        for name in ["CPUManagerCheckpoint", versioned] {
            if u64::from(outer_checksum(name, policy, default, Some(entries), pods)) == recorded {
                return (format, ChecksumCheck::Verified);
            }
        }
    }
    let computed = outer_checksum("CPUManagerCheckpoint", policy, default, Some(entries), None);
    (
        CheckpointFormat::V2,
        ChecksumCheck::Mismatch {
            field: "checksum",
            recorded,
            computed: u64::from(computed),
        },
    )
}

/// The entries as raw strings; v1 (container-ID keyed) and non-string values are errors.
fn raw_entries(
    entries: Option<BTreeMap<String, serde_json::Value>>,
    field: &str,
) -> Result<Option<RawEntries>, String> {
    let Some(entries) = entries else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for (uid, v) in entries {
        let serde_json::Value::Object(containers) = v else {
            return Err(format!(
                "{field}[{uid:?}] is not a map of containers (kubelet checkpoint v1 is not supported)"
            ));
        };
        let mut m = BTreeMap::new();
        for (name, cpus) in containers {
            let s = cpus
                .as_str()
                .ok_or_else(|| format!("{field}[{uid:?}][{name:?}] is not a string"))?;
            m.insert(name, s.to_string());
        }
        out.insert(uid, m);
    }
    Ok(Some(out))
}

/// Parses every CPU set of the raw entries.
fn parse_entries(
    raw: Option<&RawEntries>,
    field: &str,
) -> Result<BTreeMap<String, BTreeMap<String, CpuSet>>, String> {
    let mut out = BTreeMap::new();
    for (uid, containers) in raw.into_iter().flatten() {
        let mut m = BTreeMap::new();
        for (name, s) in containers {
            let set =
                CpuSet::parse(s).map_err(|e| format!("{field}[{uid:?}][{name:?}] {s:?}: {e}"))?;
            m.insert(name.clone(), set);
        }
        out.insert(uid.clone(), m);
    }
    Ok(out)
}

fn parse_default(s: &str, field: &str) -> Result<CpuSet, String> {
    CpuSet::parse(s).map_err(|e| format!("{field} {s:?}: {e}"))
}

fn check_pod_entries(p: Option<&BTreeMap<String, RawPodEntry>>, field: &str) -> Result<(), String> {
    for (uid, e) in p.into_iter().flatten() {
        CpuSet::parse(&e.cpu_set)
            .map_err(|err| format!("{field}[{uid:?}].cpuSet {:?}: {err}", e.cpu_set))?;
    }
    Ok(())
}

/// Parses the checkpoint text (any supported version) and verifies its checksum; `path`
/// names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<KubeletCpuState, KubeletStateError> {
    let invalid = |why: String| KubeletStateError::Invalid {
        path: path.to_path_buf(),
        why,
    };
    let raw: RawFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let outer_entries = raw_entries(raw.entries, "entries").map_err(invalid)?;
    check_pod_entries(raw.pod_entries.as_ref(), "podEntries").map_err(invalid)?;
    match (raw.data, raw.data_checksum) {
        (Some(data), Some(recorded)) => {
            let outer = OuterV2 {
                policy_name: raw.policy_name,
                default_cpu_set: raw.default_cpu_set,
                entries: outer_entries.unwrap_or_default(),
                checksum: raw.checksum,
            };
            parse_v4(&data, recorded, &outer).map_err(invalid)
        }
        (Some(_), None) => Err(invalid("data without dataChecksum".into())),
        (None, Some(_)) => Err(invalid("dataChecksum without data".into())),
        (None, None) => {
            let default_cpu_set =
                parse_default(&raw.default_cpu_set, "defaultCpuSet").map_err(invalid)?;
            let entries = parse_entries(outer_entries.as_ref(), "entries").map_err(invalid)?;
            let empty = RawEntries::new();
            let (format, checksum_check) = match &raw.pod_entries {
                Some(p) if !p.is_empty() => (
                    CheckpointFormat::V3,
                    ChecksumCheck::Unverifiable(
                        "v3 podEntries (pod-level resources) are hashed through cpuset internals"
                            .into(),
                    ),
                ),
                _ => verify_outer(
                    raw.checksum,
                    &raw.policy_name,
                    &raw.default_cpu_set,
                    outer_entries.as_ref().unwrap_or(&empty),
                ),
            };
            Ok(KubeletCpuState {
                policy_name: raw.policy_name,
                default_cpu_set,
                entries,
                checksum: raw.checksum,
                format,
                checksum_check,
            })
        }
    }
}

/// v4: `data` is authoritative; its policy must match the embedded v2 copy's.
/// The embedded v2 fields of a v4 file.
struct OuterV2 {
    policy_name: String,
    default_cpu_set: String,
    entries: RawEntries,
    checksum: u64,
}

fn parse_v4(data: &str, recorded: u64, outer: &OuterV2) -> Result<KubeletCpuState, String> {
    let d: RawData = serde_json::from_str(data).map_err(|e| format!("data: {e}"))?;
    if d.policy_name != outer.policy_name {
        return Err(format!(
            "data.policyName {:?} differs from policyName {:?}",
            d.policy_name, outer.policy_name
        ));
    }
    let entries_raw = raw_entries(d.entries, "data.entries")?;
    check_pod_entries(d.pod_entries.as_ref(), "data.podEntries")?;
    for (uid, cs) in d.baselines.iter().flatten() {
        for (name, b) in cs {
            CpuSet::parse(&b.baseline).map_err(|e| {
                format!(
                    "data.baselines[{uid:?}][{name:?}].baseline {:?}: {e}",
                    b.baseline
                )
            })?;
        }
    }
    let default_cpu_set = parse_default(&d.default_cpu_set, "data.defaultCpuSet")?;
    let entries = parse_entries(entries_raw.as_ref(), "data.entries")?;
    let computed = u64::from(data_checksum(data));
    // The kubelet v1.37 verifies dataChecksum; the embedded v2 copy and its checksum are
    // what older kubelets (rollback) read, so they are checked too.
    let checksum_check = if computed != recorded {
        ChecksumCheck::Mismatch {
            field: "dataChecksum",
            recorded,
            computed,
        }
    } else {
        match verify_outer(
            outer.checksum,
            &outer.policy_name,
            &outer.default_cpu_set,
            &outer.entries,
        ) {
            (
                _,
                ChecksumCheck::Mismatch {
                    recorded, computed, ..
                },
            ) => ChecksumCheck::Mismatch {
                field: "checksum",
                recorded,
                computed,
            },
            _ => ChecksumCheck::Verified,
        }
    };
    Ok(KubeletCpuState {
        policy_name: d.policy_name,
        default_cpu_set,
        entries,
        checksum: recorded,
        format: CheckpointFormat::V4,
        checksum_check,
    })
}

/// The largest kubelet CPU manager state read (the kubelet's own for a node of a few hundred
/// pods is a few kilobytes).
pub const KUBELET_STATE_MAX_BYTES: u64 = 4 << 20;

/// Reads the checkpoint. `Ok(None)` when the file does not exist (no kubelet CPU manager
/// on this node, or not mounted): nothing to compare with, which the caller must not take
/// for agreement.
pub fn read(path: &Path) -> Result<Option<KubeletCpuState>, KubeletStateError> {
    // Bounded, regular files only: a FIFO or /dev/zero in its place is an error, not a hang.
    use nodetopo_engine::files::{read_text_bounded, ReadError};
    match read_text_bounded(path, KUBELET_STATE_MAX_BYTES) {
        Ok(text) => parse(path, &text).map(Some),
        Err(ReadError::NotFound) => Ok(None),
        Err(ReadError::Io(source)) => Err(KubeletStateError::Io {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) => Err(KubeletStateError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("the file {e}")),
        }),
    }
}

#[cfg(test)]
mod tests;
