//! The kubelet's CPU manager checkpoint (`cpu_manager_state`), read and written as
//! k8s.io/kubernetes v1.37.2 does (`pkg/kubelet/cm/cpumanager/state/checkpoint.go` and
//! `state_checkpoint.go`). The one reader of this file: the agent (`KubeletAgreement`), the
//! change planner's `diff` and `apply` use it.
//!
//! Reading follows the kubelet's `restoreState`:
//! - v4 first: the text is decoded (Go's JSON rules, [`crate::gojson`]), then `data` is
//!   decoded and only `dataChecksum` is verified, over `data`; the state is `data`'s. The
//!   legacy top-level fields (kept for older kubelets) and their `checksum` are not used,
//!   though they must still decode. When `data` or `dataChecksum` is set, a failure is
//!   final (the kubelet does not fall back);
//! - else v3: `policyName`, `defaultCpuSet`, `entries`, `podEntries` and `checksum`,
//!   verified (no zero exemption) against the Go print under the versioned struct name, then
//!   under `CPUManagerCheckpoint`;
//! - else v2: the same without `podEntries`; a recorded checksum of 0 is accepted unverified.
//!
//! A file the kubelet would refuse only for a checksum is returned with
//! [`ChecksumCheck::Mismatch`] (the agent reports it; the planner refuses it); any other
//! refusal is an error naming what is wrong.
//!
//! Writing produces the bytes of the kubelet's own `MarshalCheckpoint` for v2, v3 and v4.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use nodetopo_engine::change::KubeletCpuState;
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::CpuSet;
use serde_json::value::RawValue;

use crate::gohash::{data_checksum, fnv32a, go_print_string_maps};
use crate::gojson::{self, go_json_string, GoObject};

/// A checkpoint version the kubelet writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CheckpointFormat {
    /// v2: kubelets 1.34-1.36.
    V2,
    /// v3: v2 with pod entries (pod-level resource managers).
    V3,
    /// v4: kubelet 1.37 (`data` + `dataChecksum`, the v2 fields embedded for older kubelets).
    V4,
}

/// The verdict on the checksum the kubelet verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChecksumCheck {
    /// It matches.
    Verified,
    /// v2 with a recorded checksum of 0, which the kubelet accepts unverified.
    NotRecorded,
    /// It does not match: the kubelet would refuse the file.
    Mismatch {
        /// `checksum` or `dataChecksum`.
        field: &'static str,
        /// The value in the file.
        recorded: u64,
        /// The value computed from the content.
        computed: u64,
    },
}

/// A CPU manager checkpoint as the kubelet would restore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCheckpoint {
    /// `none` or `static` (the kubelet refuses to start when it differs from its policy).
    pub policy_name: String,
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// pod UID -> container -> CPUs.
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// pod UID -> CPUs (pod-level resource managers; v3 and v4 only).
    pub pod_entries: BTreeMap<String, CpuSet>,
    /// The checksum the kubelet verifies (`dataChecksum` for v4).
    pub checksum: u64,
    /// The version the kubelet loads the file as.
    pub format: CheckpointFormat,
    /// The verdict on that checksum.
    pub checksum_check: ChecksumCheck,
}

impl CpuCheckpoint {
    /// The state as the engine's change planner takes it; pod-level entries, which the
    /// planner does not model, and a checksum the kubelet would refuse are errors.
    pub fn engine_state(&self) -> Result<KubeletCpuState, String> {
        if let ChecksumCheck::Mismatch {
            field,
            recorded,
            computed,
        } = &self.checksum_check
        {
            return Err(format!(
                "{field} {recorded} does not match the content (computed {computed}); the kubelet would refuse this file"
            ));
        }
        if !self.pod_entries.is_empty() {
            return Err("podEntries (pod-level resource managers) are not supported".into());
        }
        Ok(KubeletCpuState {
            policy_name: self.policy_name.clone(),
            state: CpuState {
                default_cpuset: self.default_cpu_set.clone(),
                assignments: self.entries.clone(),
            },
        })
    }
}

type RawEntries = BTreeMap<String, BTreeMap<String, String>>;

/// The fields of one decoding attempt, as Go leaves them (maps `None` = nil).
#[derive(Debug, Default)]
struct Decoded {
    policy_name: String,
    default_cpu_set: String,
    entries: Option<RawEntries>,
    pod_entries: Option<BTreeMap<String, String>>,
    checksum: u64,
    errors: Vec<String>,
}

const V2_FIELDS: &[&str] = &["policyName", "defaultCpuSet", "entries", "checksum"];
const V3_FIELDS: &[&str] = &[
    "policyName",
    "defaultCpuSet",
    "entries",
    "podEntries",
    "checksum",
];
const V4_FIELDS: &[&str] = &[
    "policyName",
    "defaultCpuSet",
    "entries",
    "checksum",
    "data",
    "dataChecksum",
];
const DATA_FIELDS: &[&str] = &[
    "policyName",
    "defaultCpuSet",
    "entries",
    "podEntries",
    "baselines",
];

/// `podEntries` values as the kubelet's `PodEntry.UnmarshalJSON` reads them: an object whose
/// `cpuSet` must parse as a CPU set.
fn pod_entries(
    obj: &GoObject,
    fields: &[&str],
    errors: &mut Vec<String>,
) -> Option<BTreeMap<String, String>> {
    let raw: Option<BTreeMap<String, Box<RawValue>>> =
        gojson::map(obj, "podEntries", fields, true, errors);
    raw.map(|m| {
        m.into_iter()
            .filter_map(|(uid, v)| {
                let entry = match GoObject::parse(v.get()) {
                    Ok(e) => e,
                    Err(e) => {
                        errors.push(format!("podEntries[{uid:?}]: {e}"));
                        return None;
                    }
                };
                let mut set = String::new();
                gojson::scalar(&entry, "cpuSet", &["cpuSet"], &mut set, errors);
                match CpuSet::parse(&set) {
                    Ok(_) => Some((uid, set)),
                    Err(e) => {
                        errors.push(format!("podEntries[{uid:?}].cpuSet {set:?}: {e}"));
                        None
                    }
                }
            })
            .collect()
    })
}

/// Decodes the fields `fields` names (a subset of the v2/v3/data fields) of `obj`.
fn decode(obj: &GoObject, fields: &[&str]) -> Decoded {
    let mut d = Decoded::default();
    let e = &mut d.errors;
    gojson::scalar(obj, "policyName", fields, &mut d.policy_name, e);
    gojson::scalar(obj, "defaultCpuSet", fields, &mut d.default_cpu_set, e);
    d.entries = gojson::map(obj, "entries", fields, true, e);
    if fields.contains(&"checksum") {
        gojson::scalar(obj, "checksum", fields, &mut d.checksum, e);
    }
    if fields.contains(&"podEntries") {
        d.pod_entries = pod_entries(obj, fields, e);
    }
    d
}

/// The v2/v3 Go print (`dump.ForHash` of the struct with a zero checksum) under `name`.
fn struct_print(name: &str, d: &Decoded, with_pods: bool) -> String {
    let mut s = format!(
        "(*state.{name}){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string){} ",
        d.policy_name,
        d.default_cpu_set,
        go_print_string_maps(d.entries.as_ref())
    );
    if with_pods {
        s.push_str("PodEntries:(state.PodCPUAssignments)");
        s.push_str(&go_print_pod_entries(d.pod_entries.as_ref()));
        s.push(' ');
    }
    s.push_str("Checksum:(checksum.Checksum)0}");
    s
}

/// Go's print of `PodCPUAssignments` (a cpuset is a struct over `map[int]struct{}`).
fn go_print_pod_entries(p: Option<&BTreeMap<String, String>>) -> String {
    let Some(p) = p else {
        return "<nil>".into();
    };
    let items: Vec<String> = p
        .iter()
        .map(|(uid, s)| {
            let cpus: Vec<String> = CpuSet::parse(s)
                .map(|c| c.iter().map(|i| format!("{i}:{{}}")).collect())
                .unwrap_or_default();
            format!(
                "{uid}:{{CPUSet:(cpuset.CPUSet){{elems:(map[int]struct {{}})map[{}]}}}}",
                cpus.join(" ")
            )
        })
        .collect();
    format!("map[{}]", items.join(" "))
}

/// The kubelet feature gates that change how it reads the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadGates {
    /// `PodLevelResourceManagers` (beta in 1.37, off by default): with it on, a v2 file is
    /// verified under the legacy struct name only, and the kubelet restores `podEntries`.
    pub pod_level_resource_managers: bool,
}

/// The checksums the kubelet accepts for a v2 (`with_pods` false) or v3 struct: under the
/// versioned name (for v2 only with the PodLevelResourceManagers gate off), then under
/// `CPUManagerCheckpoint`.
fn verify_struct(d: &Decoded, with_pods: bool, gates: ReadGates) -> Result<(), u64> {
    let versioned = if with_pods {
        Some("CPUManagerCheckpointV3")
    } else {
        (!gates.pod_level_resource_managers).then_some("CPUManagerCheckpointV2")
    };
    let legacy = u64::from(fnv32a(
        struct_print("CPUManagerCheckpoint", d, with_pods).as_bytes(),
    ));
    for name in versioned.into_iter().chain(["CPUManagerCheckpoint"]) {
        if u64::from(fnv32a(struct_print(name, d, with_pods).as_bytes())) == d.checksum {
            return Ok(());
        }
    }
    Err(legacy)
}

fn parse_entries(
    raw: Option<&RawEntries>,
    field: &str,
) -> Result<BTreeMap<String, BTreeMap<String, CpuSet>>, String> {
    let mut out = BTreeMap::new();
    let count: usize = raw.into_iter().flatten().map(|(_, c)| c.len()).sum();
    if count > MAX_ENTRIES {
        return Err(format!(
            "{field} has {count} container entries, more than the {MAX_ENTRIES} nodetopo reads (no more than Linux's 8192 CPUs can be held exclusively)"
        ));
    }
    for (uid, containers) in raw.into_iter().flatten() {
        let mut m = BTreeMap::new();
        for (name, s) in containers {
            let set = bounded_cpu_set(s).map_err(|e| {
                format!("could not parse cpuset {s:?} for container {name:?} in pod {uid:?} ({field}): {e}")
            })?;
            m.insert(name.clone(), set);
        }
        out.insert(uid.clone(), m);
    }
    Ok(out)
}

/// The state the kubelet restores from decoded fields (`restoreState`'s parsing).
fn restore(
    d: Decoded,
    format: CheckpointFormat,
    checksum_check: ChecksumCheck,
    prefix: &str,
) -> Result<CpuCheckpoint, String> {
    let default_cpu_set = bounded_cpu_set(&d.default_cpu_set).map_err(|e| {
        format!(
            "{prefix}defaultCpuSet {:?}: could not parse default CPU set: {e}",
            d.default_cpu_set
        )
    })?;
    let entries = parse_entries(d.entries.as_ref(), &format!("{prefix}entries"))?;
    let pods = d.pod_entries.unwrap_or_default();
    if pods.len() > MAX_ENTRIES {
        return Err(format!(
            "{prefix}podEntries has {} pod entries, more than the {MAX_ENTRIES} nodetopo reads",
            pods.len()
        ));
    }
    let pod_entries = pods
        .into_iter()
        .map(|(uid, s)| bounded_cpu_set(&s).map(|c| (uid, c)))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{prefix}podEntries: {e}"))?;
    Ok(CpuCheckpoint {
        policy_name: d.policy_name,
        default_cpu_set,
        entries,
        pod_entries,
        checksum: d.checksum,
        format,
        checksum_check,
    })
}

/// `data.baselines` (`map[string]map[string]ContainerCPUs`): decoded for its types only (the
/// kubelet parses the CPU sets only under the InPlacePodVerticalScalingExclusiveCPUs gate,
/// and nodetopo does not use them).
fn check_baselines(data: &GoObject, errors: &mut Vec<String>) {
    let raw: Option<BTreeMap<String, BTreeMap<String, Box<RawValue>>>> =
        gojson::map(data, "baselines", DATA_FIELDS, true, errors);
    for (uid, containers) in raw.iter().flatten() {
        for (name, v) in containers {
            match GoObject::parse(v.get()) {
                Ok(o) => {
                    let mut b = String::new();
                    gojson::scalar(&o, "baseline", &["baseline"], &mut b, errors);
                }
                Err(e) => errors.push(format!("baselines[{uid:?}][{name:?}]: {e}")),
            }
        }
    }
}

/// v4: `Ok(None)` when the kubelet falls back to v3 (neither `data` nor `dataChecksum` set).
fn load_v4(obj: Option<&GoObject>) -> Result<Option<CpuCheckpoint>, String> {
    let Some(obj) = obj else {
        return Ok(None);
    };
    let mut errors = decode(obj, V4_FIELDS).errors;
    let mut data = String::new();
    let mut recorded = 0u64;
    gojson::scalar(obj, "data", V4_FIELDS, &mut data, &mut errors);
    gojson::scalar(obj, "dataChecksum", V4_FIELDS, &mut recorded, &mut errors);
    if data.is_empty() && recorded == 0 {
        return Ok(None);
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(format!("could not load v4 checkpoint: {e}"));
    }
    check_members(&data, "the v4 checkpoint's data ")?;
    let inner =
        GoObject::parse(&data).map_err(|e| format!("could not load v4 checkpoint: data: {e}"))?;
    let mut d = decode(&inner, DATA_FIELDS);
    check_baselines(&inner, &mut d.errors);
    if let Some(e) = d.errors.first() {
        return Err(format!("could not load v4 checkpoint: data.{e}"));
    }
    let computed = u64::from(data_checksum(&data));
    let check = if computed == recorded {
        ChecksumCheck::Verified
    } else {
        ChecksumCheck::Mismatch {
            field: "dataChecksum",
            recorded,
            computed,
        }
    };
    d.checksum = recorded;
    restore(d, CheckpointFormat::V4, check, "data.").map(Some)
}

/// The most container entries (and pod entries) a checkpoint may hold: each holds at least
/// one CPU exclusively, so a state the kubelet accepts has no more entries than CPUs, and
/// Linux runs at most 8192 (the largest `NR_CPUS`).
pub const MAX_ENTRIES: usize = 8192;

/// The largest CPU id in a checkpoint (Linux's largest `NR_CPUS` less one): a CPU set is a
/// bitmap, so an id bounds the memory each set takes (1 KiB at this id).
pub const MAX_CPU_ID: usize = 8191;

/// The most JSON object members (`"key":`) one checkpoint text (or its v4 `data`) may hold:
/// every container and pod entry, a pod key for each, and the fixed fields. Counted before
/// anything is decoded, so that a file of a million tiny entries is refused in a few
/// milliseconds and a few megabytes instead of taking gigabytes.
pub const MAX_MEMBERS: usize = 4 * MAX_ENTRIES + 64;

fn check_members(text: &str, what: &str) -> Result<(), String> {
    let n = gojson::count_members(text);
    if n > MAX_MEMBERS {
        return Err(format!(
            "{what}has {n} JSON members, more than the {MAX_MEMBERS} nodetopo reads (at most {MAX_ENTRIES} container entries and {MAX_ENTRIES} pod entries: no more than Linux's 8192 CPUs can be held exclusively)"
        ));
    }
    Ok(())
}

/// `s` parsed as a CPU set, refusing an id above [`MAX_CPU_ID`].
fn bounded_cpu_set(s: &str) -> Result<CpuSet, String> {
    let set = CpuSet::parse(s).map_err(|e| e.to_string())?;
    match set.last() {
        Some(max) if max > MAX_CPU_ID => Err(format!(
            "CPU {max} is above the largest CPU id nodetopo reads ({MAX_CPU_ID}, as Linux's largest NR_CPUS)"
        )),
        _ => Ok(set),
    }
}

/// Reads a checkpoint's text as the kubelet v1.37.2 restores it with its default feature
/// gates.
pub fn parse(text: &str) -> Result<CpuCheckpoint, String> {
    parse_gated(text, ReadGates::default())
}

/// Reads a checkpoint's text as the kubelet v1.37.2 restores it with the feature gates
/// `gates`. [`CpuCheckpoint::pod_entries`] holds what the file says either way (the kubelet
/// restores them only with `PodLevelResourceManagers` on; with it off, CPUs held there are
/// in no set it restores, and its static policy refuses to start).
/// A text with more than [`MAX_MEMBERS`] members, more than [`MAX_ENTRIES`] entries or a
/// CPU id above [`MAX_CPU_ID`] is refused, naming the limit.
pub fn parse_gated(text: &str, gates: ReadGates) -> Result<CpuCheckpoint, String> {
    check_members(text, "the checkpoint ")?;
    // A text Go cannot parse sets no field: every version fails, with the parse error.
    let parsed = GoObject::parse(text);
    if let Some(v4) = load_v4(parsed.as_ref().ok())? {
        return Ok(v4);
    }
    let obj = parsed?;
    // v3
    let d3 = decode(&obj, V3_FIELDS);
    if d3.errors.is_empty() && verify_struct(&d3, true, gates).is_ok() {
        return restore(d3, CheckpointFormat::V3, ChecksumCheck::Verified, "");
    }
    // v2
    let d2 = decode(&obj, V2_FIELDS);
    if let Some(e) = d2.errors.first() {
        return Err(e.clone());
    }
    let check = if d2.checksum == 0 {
        ChecksumCheck::NotRecorded
    } else {
        match verify_struct(&d2, false, gates) {
            Ok(()) => ChecksumCheck::Verified,
            Err(computed) => ChecksumCheck::Mismatch {
                field: "checksum",
                recorded: d2.checksum,
                computed,
            },
        }
    };
    restore(d2, CheckpointFormat::V2, check, "")
}

fn go_json_entries(m: &RawEntries) -> String {
    let outer: Vec<String> = m
        .iter()
        .map(|(uid, cs)| {
            let inner: Vec<String> = cs
                .iter()
                .map(|(c, s)| format!("{}:{}", go_json_string(c), go_json_string(s)))
                .collect();
            format!("{}:{{{}}}", go_json_string(uid), inner.join(","))
        })
        .collect();
    format!("{{{}}}", outer.join(","))
}

/// `{"policyName":..,"defaultCpuSet":..[,"entries":..]` (no closing brace).
fn v2_fields_json(policy: &str, default: &str, entries: &RawEntries) -> String {
    let mut s = format!(
        "{{\"policyName\":{},\"defaultCpuSet\":{}",
        go_json_string(policy),
        go_json_string(default)
    );
    if !entries.is_empty() {
        let _ = write!(s, ",\"entries\":{}", go_json_entries(entries));
    }
    s
}

/// The checkpoint file's bytes as the kubelet's `MarshalCheckpoint` writes them (no
/// trailing newline), without pod entries.
pub fn render(state: &KubeletCpuState, format: CheckpointFormat) -> String {
    let entries: RawEntries = state
        .state
        .assignments
        .iter()
        .map(|(uid, cs)| {
            let m = cs.iter().map(|(c, s)| (c.clone(), s.to_string())).collect();
            (uid.clone(), m)
        })
        .collect();
    let d = Decoded {
        policy_name: state.policy_name.clone(),
        default_cpu_set: state.state.default_cpuset.to_string(),
        entries: Some(entries),
        pod_entries: Some(BTreeMap::new()),
        ..Decoded::default()
    };
    let raw = d.entries.as_ref().expect("set above");
    let fields = v2_fields_json(&d.policy_name, &d.default_cpu_set, raw);
    let checksum =
        |with_pods| fnv32a(struct_print("CPUManagerCheckpoint", &d, with_pods).as_bytes());
    match format {
        CheckpointFormat::V2 => format!("{fields},\"checksum\":{}}}", checksum(false)),
        CheckpointFormat::V3 => format!("{fields},\"checksum\":{}}}", checksum(true)),
        CheckpointFormat::V4 => {
            let data = format!("{fields}}}");
            format!(
                "{fields},\"checksum\":{},\"data\":{},\"dataChecksum\":{}}}",
                checksum(false),
                go_json_string(&data),
                data_checksum(&data)
            )
        }
    }
}

/// The largest checkpoint read (the kubelet's own for a node of a few hundred pods is a few
/// kilobytes).
pub const MAX_BYTES: u64 = 16 << 20;

/// Why the checkpoint file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file cannot be read.
    #[error("kubelet CPU manager state {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The kubelet would refuse the content (for another reason than a checksum).
    #[error("kubelet CPU manager state {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (names the field).
        why: String,
    },
}

/// [`parse`] with the file named in the error.
pub fn parse_file(path: &Path, text: &str) -> Result<CpuCheckpoint, ReadError> {
    parse(text).map_err(|why| ReadError::Invalid {
        path: path.to_path_buf(),
        why,
    })
}

/// Reads the checkpoint file, bounded ([`MAX_BYTES`], regular files only: a FIFO or
/// /dev/zero in its place is an error, not a hang). `Ok(None)` when it does not exist (no
/// kubelet CPU manager state, or not mounted), which a caller must not take for agreement.
pub fn read(path: &Path) -> Result<Option<CpuCheckpoint>, ReadError> {
    use nodetopo_engine::files::{read_text_bounded, ReadError as R};
    match read_text_bounded(path, MAX_BYTES) {
        Ok(text) => parse_file(path, &text).map(Some),
        Err(R::NotFound) => Ok(None),
        Err(R::Io(source)) => Err(ReadError::Io {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) => Err(ReadError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("the file {e}")),
        }),
    }
}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
