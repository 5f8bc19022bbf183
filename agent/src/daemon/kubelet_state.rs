//! The kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`), read-only.
//!
//! Shape (kubelet checkpoint v2):
//! `{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"<pod uid>":{"<container>":"2-5"}},"checksum":1234}`.
//! The `checksum` is the kubelet's FNV-32a over a Go debug print of its struct; it is
//! parsed and reported but not recomputed (doing so would mean reproducing Go's printer,
//! the thing STYLE.md says not to copy). Every CPU set is parsed, so a damaged file is an
//! error naming the file and the field, never half-used. The v1 format (entries keyed by
//! container ID, kubelet < 1.18) is refused with a message saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_engine::CpuSet;
use serde::Deserialize;

/// The kubelet's view of CPU assignments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletCpuState {
    /// `none` or `static`.
    pub policy_name: String,
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// pod UID -> container -> CPUs.
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// The checksum recorded by the kubelet.
    pub checksum: u64,
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: Option<BTreeMap<String, serde_json::Value>>,
    checksum: u64,
}

/// Parses the checkpoint text; `path` names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<KubeletCpuState, KubeletStateError> {
    let invalid = |why: String| KubeletStateError::Invalid {
        path: path.to_path_buf(),
        why,
    };
    let raw: Raw = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let default_cpu_set = CpuSet::parse(&raw.default_cpu_set)
        .map_err(|e| invalid(format!("defaultCpuSet {:?}: {e}", raw.default_cpu_set)))?;
    let mut entries = BTreeMap::new();
    for (uid, v) in raw.entries.unwrap_or_default() {
        let serde_json::Value::Object(containers) = v else {
            return Err(invalid(format!(
                "entries[{uid:?}] is not a map of containers (kubelet checkpoint v1 is not supported)"
            )));
        };
        let mut m = BTreeMap::new();
        for (name, cpus) in containers {
            let s = cpus
                .as_str()
                .ok_or_else(|| invalid(format!("entries[{uid:?}][{name:?}] is not a string")))?;
            let set = CpuSet::parse(s)
                .map_err(|e| invalid(format!("entries[{uid:?}][{name:?}] {s:?}: {e}")))?;
            m.insert(name, set);
        }
        entries.insert(uid, m);
    }
    Ok(KubeletCpuState {
        policy_name: raw.policy_name,
        default_cpu_set,
        entries,
        checksum: raw.checksum,
    })
}

/// Reads the checkpoint. `Ok(None)` when the file does not exist (no kubelet CPU manager
/// on this node, or not mounted): that is not an error, just nothing to compare with.
pub fn read(path: &Path) -> Result<Option<KubeletCpuState>, KubeletStateError> {
    // Bounded, regular files only: a FIFO or /dev/zero in its place is an error, not a hang.
    use nodetopo_engine::files::{read_text_bounded, ReadError};
    match read_text_bounded(path, super::validate::KUBELET_STATE_MAX_BYTES) {
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
mod tests {
    use super::*;

    #[test]
    fn parses_static_and_none() {
        let p = Path::new("/k/cpu_manager_state");
        let s = parse(
            p,
            r#"{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"u1":{"app":"2-5"}},"checksum":3321}"#,
        )
        .expect("valid");
        assert_eq!(s.policy_name, "static");
        assert_eq!(s.default_cpu_set.to_string(), "0-1,6-7");
        assert_eq!(s.entries["u1"]["app"].to_string(), "2-5");
        assert_eq!(s.checksum, 3321);
        let n = parse(
            p,
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        )
        .expect("none policy");
        assert!(n.entries.is_empty() && n.default_cpu_set.is_empty());
    }

    #[test]
    fn errors_name_file_and_field() {
        let p = Path::new("/k/cpu_manager_state");
        let e = parse(
            p,
            r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u1":{"app":"5-2"}},"checksum":1}"#,
        )
        .expect_err("bad set");
        let msg = e.to_string();
        assert!(
            msg.starts_with(
                "kubelet CPU manager state /k/cpu_manager_state: entries[\"u1\"][\"app\"] \"5-2\""
            ),
            "{msg}"
        );
        let e = parse(
            p,
            r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"cid":"2-3"},"checksum":1}"#,
        )
        .expect_err("v1");
        assert!(e.to_string().contains("v1 is not supported"), "{e}");
        let e = parse(p, "{\"policyName\":\"sta").expect_err("truncated");
        assert!(e.to_string().contains("/k/cpu_manager_state"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(read(&dir.path().join("absent"))
            .expect("absent ok")
            .is_none());
        // A directory where the file should be: unreadable, an error naming the path.
        let e = read(dir.path()).expect_err("unreadable");
        assert!(matches!(e, KubeletStateError::Io { .. }), "{e}");
    }
}
