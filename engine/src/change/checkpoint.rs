//! The kubelet's CPU manager checkpoint file (`cpu_manager_state`), written and read as the
//! kubelet does (k8s.io/kubernetes v1.37 `cpumanager/state/checkpoint.go`).
//!
//! Writing produces the bytes the kubelet's own `MarshalCheckpoint` produces:
//! - v4 (kubelet 1.37): `data` is the JSON of `{policyName, defaultCpuSet, entries,
//!   podEntries, baselines}` (empty maps omitted), `dataChecksum` is FNV-32a over the Go
//!   print `(string)<data>`; the v2 fields are embedded for older kubelets, with the v2
//!   checksum: FNV-32a over the Go print (`dump.ForHash`, keys sorted) of
//!   `CPUManagerCheckpoint{PolicyName, DefaultCPUSet, Entries, Checksum: 0}`;
//! - v2 (kubelets 1.34-1.36): the v2 fields and that checksum.
//!
//! Go's `encoding/json` escapes `<`, `>`, `&`, U+2028 and U+2029 in strings; so does
//! [`go_json_string`], so the bytes match the kubelet's for any pod UID or container name.
//! Reading accepts v2, v3 (without pod entries) and v4 and verifies the checksums; a file
//! the kubelet would refuse for its checksum is an error here too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::KubeletCpuState;
use crate::cpumanager::CpuState;
use crate::cpuset::CpuSet;

/// The checkpoint format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CheckpointFormat {
    /// v2: kubelets 1.34-1.36.
    V2,
    /// v4: kubelet 1.37 (readable by older kubelets through the embedded v2 fields).
    V4,
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

type RawEntries = BTreeMap<String, BTreeMap<String, String>>;

/// Go's `dump.ForHash` print of a `map[string]map[string]string` (sorted keys).
fn go_print_entries(m: &RawEntries) -> String {
    let outer: Vec<String> = m
        .iter()
        .map(|(uid, cs)| {
            let inner: Vec<String> = cs.iter().map(|(c, s)| format!("{c}:{s}")).collect();
            format!("{uid}:map[{}]", inner.join(" "))
        })
        .collect();
    format!("map[{}]", outer.join(" "))
}

/// The v2 checksum the kubelet records and verifies.
pub fn v2_checksum(policy: &str, default: &str, entries: &RawEntries) -> u32 {
    let print = format!(
        "(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default} Entries:(map[string]map[string]string){} Checksum:(checksum.Checksum)0}}",
        go_print_entries(entries)
    );
    fnv32a(print.as_bytes())
}

/// The v4 `dataChecksum`: FNV-32a over the Go print of the `data` string.
pub fn data_checksum(data: &str) -> u32 {
    fnv32a(format!("(string){data}").as_bytes())
}

/// A JSON string literal as Go's `encoding/json` writes it.
pub fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", ch as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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

fn raw_entries(st: &CpuState) -> RawEntries {
    st.assignments
        .iter()
        .map(|(uid, cs)| {
            (
                uid.clone(),
                cs.iter().map(|(c, s)| (c.clone(), s.to_string())).collect(),
            )
        })
        .collect()
}

/// The checkpoint file's bytes (no trailing newline, as the kubelet writes it).
pub fn render(state: &KubeletCpuState, format: CheckpointFormat) -> String {
    let policy = &state.policy_name;
    let default = state.state.default_cpuset.to_string();
    let entries = raw_entries(&state.state);
    let checksum = v2_checksum(policy, &default, &entries);
    let mut v2 = format!(
        "{{\"policyName\":{},\"defaultCpuSet\":{}",
        go_json_string(policy),
        go_json_string(&default)
    );
    if !entries.is_empty() {
        let _ = write!(v2, ",\"entries\":{}", go_json_entries(&entries));
    }
    let _ = write!(v2, ",\"checksum\":{checksum}");
    match format {
        CheckpointFormat::V2 => {
            v2.push('}');
            v2
        }
        CheckpointFormat::V4 => {
            let mut data = format!(
                "{{\"policyName\":{},\"defaultCpuSet\":{}",
                go_json_string(policy),
                go_json_string(&default)
            );
            if !entries.is_empty() {
                let _ = write!(data, ",\"entries\":{}", go_json_entries(&entries));
            }
            data.push('}');
            let dc = data_checksum(&data);
            let _ = write!(
                v2,
                ",\"data\":{},\"dataChecksum\":{dc}}}",
                go_json_string(&data)
            );
            v2
        }
    }
}

/// A checkpoint read back, with the format it was in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCheckpoint {
    /// The content.
    pub state: KubeletCpuState,
    /// The format (v3 without pod entries is read as v2: the kubelet migrates it the same).
    pub format: CheckpointFormat,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: RawEntries,
    #[serde(default)]
    pod_entries: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    checksum: u64,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    data_checksum: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawData {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: RawEntries,
    #[serde(default)]
    pod_entries: Option<BTreeMap<String, serde_json::Value>>,
}

fn to_state(
    policy: String,
    default: &str,
    entries: &RawEntries,
) -> Result<KubeletCpuState, String> {
    let default_cpuset =
        CpuSet::parse(default).map_err(|e| format!("defaultCpuSet {default:?}: {e}"))?;
    let mut assignments = BTreeMap::new();
    for (uid, cs) in entries {
        let mut m = BTreeMap::new();
        for (c, s) in cs {
            let set =
                CpuSet::parse(s).map_err(|e| format!("entries[{uid:?}][{c:?}] {s:?}: {e}"))?;
            m.insert(c.clone(), set);
        }
        assignments.insert(uid.clone(), m);
    }
    Ok(KubeletCpuState {
        policy_name: policy,
        state: CpuState {
            default_cpuset,
            assignments,
        },
    })
}

/// Reads a checkpoint's text; the error names the field or checksum that is wrong.
pub fn parse(text: &str) -> Result<ReadCheckpoint, String> {
    let raw: RawFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if raw.pod_entries.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err("podEntries (pod-level resource managers) are not supported".into());
    }
    match (raw.data, raw.data_checksum) {
        (Some(data), Some(recorded)) => {
            let computed = u64::from(data_checksum(&data));
            if computed != recorded {
                return Err(format!(
                    "dataChecksum {recorded} does not match the content (computed {computed}); the kubelet would refuse this file"
                ));
            }
            let d: RawData = serde_json::from_str(&data).map_err(|e| format!("data: {e}"))?;
            if d.pod_entries.as_ref().is_some_and(|p| !p.is_empty()) {
                return Err(
                    "data.podEntries (pod-level resource managers) are not supported".into(),
                );
            }
            let state = to_state(d.policy_name, &d.default_cpu_set, &d.entries)
                .map_err(|e| format!("data.{e}"))?;
            Ok(ReadCheckpoint {
                state,
                format: CheckpointFormat::V4,
            })
        }
        (Some(_), None) => Err("data without dataChecksum".into()),
        (None, Some(_)) => Err("dataChecksum without data".into()),
        (None, None) => {
            if raw.checksum != 0 {
                let computed = u64::from(v2_checksum(
                    &raw.policy_name,
                    &raw.default_cpu_set,
                    &raw.entries,
                ));
                if computed != raw.checksum {
                    return Err(format!(
                        "checksum {} does not match the content (computed {computed}); the kubelet would refuse this file",
                        raw.checksum
                    ));
                }
            }
            let state = to_state(raw.policy_name, &raw.default_cpu_set, &raw.entries)?;
            Ok(ReadCheckpoint {
                state,
                format: CheckpointFormat::V2,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KubeletCpuState {
        let mut st = CpuState {
            default_cpuset: CpuSet::parse("0-1,6-7").unwrap(),
            ..Default::default()
        };
        st.set("uid-a", "app", CpuSet::parse("2-5").unwrap());
        KubeletCpuState {
            policy_name: "static".into(),
            state: st,
        }
    }

    #[test]
    fn render_then_parse_round_trips_in_both_formats() {
        for f in [CheckpointFormat::V2, CheckpointFormat::V4] {
            let text = render(&sample(), f);
            let back = parse(&text).unwrap();
            assert_eq!(back.state, sample(), "{f:?}: {text}");
            assert_eq!(back.format, f);
        }
    }

    #[test]
    fn a_changed_byte_is_a_checksum_error() {
        let text = render(&sample(), CheckpointFormat::V2).replace("0-1,6-7", "0-1,6");
        let err = parse(&text).unwrap_err();
        assert!(err.contains("checksum"), "{err}");
    }

    #[test]
    fn go_escapes_html_characters() {
        assert_eq!(go_json_string("a<b>&"), "\"a\\u003cb\\u003e\\u0026\"");
    }
}
