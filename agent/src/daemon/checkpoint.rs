//! The agent's checkpoint: what it has allocated, so allocations survive restarts.
//!
//! File format (two parts, so that the checksum covers exactly the bytes it protects):
//!
//! ```text
//! {"version":1,"checksum":"sha256:<hex of the payload bytes>"}\n
//! <payload: CheckpointData as JSON>
//! ```
//!
//! Guarantees: a write is atomic (temp file in the same directory, write, fsync, rename over
//! the old file, fsync the directory), so a crash leaves either the old or the new file.
//! A file that fails any check (unreadable, no header, foreign version, checksum mismatch,
//! bad payload) is never trusted: [`load`] reports why, [`quarantine`] moves it aside for
//! inspection and the caller rebuilds its state from the pods that exist.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use nodetopo_crds::conditions::reason;
use nodetopo_engine::files::{read_bounded, ReadError};
use nodetopo_engine::report::{AllocationReport, RejectionReport};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The version this agent writes and accepts.
pub const VERSION: u32 = 1;

/// File name of the checkpoint inside the state directory.
pub const FILE_NAME: &str = "nodetopo_state";

/// What the checkpoint stores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointData {
    /// Spec generation the current configuration came from (`None`: no spec yet).
    #[serde(default)]
    pub spec_generation: Option<i64>,
    /// The CPU manager state: shared pool and exclusive assignments, list syntax strings.
    pub default_cpu_set: String,
    /// pod UID -> container -> CPUs (list syntax).
    #[serde(default)]
    pub entries: BTreeMap<String, BTreeMap<String, String>>,
    /// The published allocation records of the admitted pods, by pod UID.
    #[serde(default)]
    pub allocations: BTreeMap<String, Vec<AllocationReport>>,
    /// Pods whose admission was refused (they stay refused, as on the kubelet), by UID.
    #[serde(default)]
    pub rejections: BTreeMap<String, Vec<RejectionReport>>,
    /// Pods the kubelet refused, with nodetopo's explanation made when the refusal was seen
    /// (the state then is not the state after a restart), by UID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub explained: BTreeMap<String, RejectionReport>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    version: u32,
    checksum: String,
}

/// Why a checkpoint was not used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing failed.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a checkpoint (no header line, bad header, bad payload).
    #[error("checkpoint {path} is corrupt: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Written by another version of the agent.
    #[error("checkpoint {path} has version {found}, this agent reads version {VERSION}")]
    ForeignVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
    },
    /// The payload does not match its checksum (truncated or altered).
    #[error("checkpoint {path} fails its checksum (expected {expected}, computed {actual})")]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Checksum in the header.
        expected: String,
        /// Checksum of the payload as read.
        actual: String,
    },
}

impl CheckpointError {
    /// A PascalCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Io { .. } => reason::CHECKPOINT_UNREADABLE,
            Self::Corrupt { .. } => reason::CHECKPOINT_CORRUPT,
            Self::ForeignVersion { .. } => reason::CHECKPOINT_VERSION_MISMATCH,
            Self::Checksum { .. } => reason::CHECKPOINT_CHECKSUM_MISMATCH,
        }
    }
}

fn checksum(payload: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(payload)))
}

/// Serialises data into the file's bytes.
pub fn encode(data: &CheckpointData) -> Vec<u8> {
    // Serialising plain structs of strings and maps cannot fail.
    let payload = serde_json::to_vec(data).unwrap_or_default();
    let header = Header {
        version: VERSION,
        checksum: checksum(&payload),
    };
    let mut out = serde_json::to_vec(&header).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(&payload);
    out
}

/// Parses the file's bytes; `path` only names the file in errors.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<CheckpointData, CheckpointError> {
    let corrupt = |why: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no header line".into()))?;
    let (head, payload) = (&bytes[..nl], &bytes[nl + 1..]);
    // Read the version alone first, so a future header layout still gives a version error.
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    let v: VersionOnly =
        serde_json::from_slice(head).map_err(|e| corrupt(format!("header: {e}")))?;
    if v.version != VERSION {
        return Err(CheckpointError::ForeignVersion {
            path: path.to_path_buf(),
            found: v.version,
        });
    }
    let header: Header =
        serde_json::from_slice(head).map_err(|e| corrupt(format!("header: {e}")))?;
    let actual = checksum(payload);
    if actual != header.checksum {
        return Err(CheckpointError::Checksum {
            path: path.to_path_buf(),
            expected: header.checksum,
            actual,
        });
    }
    serde_json::from_slice(payload).map_err(|e| corrupt(format!("payload: {e}")))
}

/// The largest checkpoint read: records of ten thousand containers take about 10 MB, far
/// past what a node runs; anything larger is not our checkpoint and is refused unread.
pub const MAX_BYTES: u64 = 16 << 20;

/// Loads the checkpoint; `Ok(None)` when there is none yet. A FIFO, device or file over
/// [`MAX_BYTES`] in its place is an error (never a hang or an unbounded read).
pub fn load(path: &Path) -> Result<Option<CheckpointData>, CheckpointError> {
    match read_bounded(path, MAX_BYTES) {
        Ok(bytes) => decode(path, &bytes).map(Some),
        Err(ReadError::NotFound) => Ok(None),
        Err(ReadError::Io(source)) => Err(CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) => Err(CheckpointError::Corrupt {
            path: path.to_path_buf(),
            why: format!("the file {e}"),
        }),
    }
}

/// Saves the checkpoint atomically and durably through the one atomic writer
/// ([`nodetopo_kubelet::atomic::write`]: temp file in the same directory, fsync, rename,
/// fsync of the directory).
pub fn save(path: &Path, data: &CheckpointData) -> Result<(), CheckpointError> {
    nodetopo_kubelet::atomic::write(path, &encode(data), None, true).map_err(|source| {
        CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Moves a rejected checkpoint aside (`<name>.bad-<unix seconds>`, with `.N` appended when
/// that name is taken) and returns the new path, so the file can be inspected while a fresh
/// one is written. Never overwrites an earlier copy.
pub fn quarantine(path: &Path, now_unix: u64) -> std::io::Result<PathBuf> {
    let base = format!("{}.bad-{now_unix}", path.display());
    let mut aside = PathBuf::from(&base);
    let mut n = 0;
    while aside.symlink_metadata().is_ok() {
        n += 1;
        aside = PathBuf::from(format!("{base}.{n}"));
    }
    fs::rename(path, &aside)?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointData {
        let mut d = CheckpointData {
            spec_generation: Some(3),
            default_cpu_set: "0-1,6-7".into(),
            ..Default::default()
        };
        d.entries
            .entry("uid-1".into())
            .or_default()
            .insert("app".into(), "2-5".into());
        d
    }

    #[test]
    fn round_trip_and_atomic_save() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        assert!(load(&path).expect("missing is fine").is_none());
        save(&path, &sample()).expect("save");
        assert_eq!(load(&path).expect("load"), Some(sample()));
        // No temp files left behind.
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 1);
    }

    #[test]
    fn rejects_tampering_truncation_versions_and_garbage() {
        let p = Path::new("/state/nodetopo_state");
        let good = encode(&sample());
        let text = String::from_utf8(good.clone()).expect("utf8");
        let altered = text.replace("2-5", "2-6");
        let e = decode(p, altered.as_bytes()).expect_err("altered");
        assert_eq!(e.reason(), "CheckpointChecksumMismatch");
        let e = decode(p, &good[..good.len() - 5]).expect_err("truncated");
        assert_eq!(e.reason(), "CheckpointChecksumMismatch");
        let e = decode(p, &good[..10]).expect_err("truncated header");
        assert_eq!(e.reason(), "CheckpointCorrupt");
        let old = text.replace("\"version\":1", "\"version\":0");
        let e = decode(p, old.as_bytes()).expect_err("old");
        assert_eq!(
            e.to_string(),
            "checkpoint /state/nodetopo_state has version 0, this agent reads version 1"
        );
        let e = decode(p, b"\x00\x01garbage").expect_err("garbage");
        assert_eq!(e.reason(), "CheckpointCorrupt");
        assert!(e.to_string().contains("/state/nodetopo_state"), "{e}");
    }

    #[test]
    fn stale_temp_files_are_removed_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        let own = format!(".{FILE_NAME}.nodetopo-tmp.{}", std::process::id());
        for name in [
            ".nodetopo_state.nodetopo-tmp.12345",
            ".nodetopo_state.nodetopo-tmp.999",
            own.as_str(),
            ".nodetopo_state.nodetopo-tmp.x1",
            ".other.nodetopo-tmp.12345",
            FILE_NAME,
        ] {
            fs::write(dir.path().join(name), b"x").expect("write");
        }
        let removed = nodetopo_kubelet::atomic::remove_stale_temps(&path);
        let names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                ".nodetopo_state.nodetopo-tmp.12345",
                ".nodetopo_state.nodetopo-tmp.999"
            ]
        );
        let left = fs::read_dir(dir.path()).expect("ls").count();
        assert_eq!(
            left, 4,
            "own temp file, foreign names and the checkpoint stay"
        );
    }

    #[test]
    fn quarantine_never_overwrites_an_earlier_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, b"one").expect("write");
        let a = quarantine(&path, 7).expect("first");
        fs::write(&path, b"two").expect("write");
        let b = quarantine(&path, 7).expect("second");
        assert_ne!(a, b);
        assert_eq!(fs::read(&a).expect("a"), b"one");
        assert_eq!(fs::read(&b).expect("b"), b"two");
        assert!(b.to_string_lossy().ends_with("nodetopo_state.bad-7.1"));
    }

    #[test]
    fn quarantine_keeps_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, b"junk").expect("write");
        let aside = quarantine(&path, 42).expect("rename");
        assert!(!path.exists());
        assert_eq!(fs::read(&aside).expect("kept"), b"junk");
        assert!(aside.to_string_lossy().ends_with("nodetopo_state.bad-42"));
    }
}
