//! A container's cgroup as the kubelet and its runtime name it, and the cpuset the kernel
//! really gives it: the ground truth the audit ([`crate::audit`]) compares the kubelet's
//! bookkeeping against.
//!
//! Naming (kubelet `pkg/kubelet/cm/cgroup_manager_linux.go`, `qos_container_manager_linux.go`,
//! `pod_container_manager_linux.go`; containerd's CRI plugin; CRI-O's cgroup managers):
//!
//! - the pod cgroup is the name `[<cgroupRoot components>..., kubepods, <qos>, pod<uid>]`,
//!   where `<qos>` is `burstable` or `besteffort` and absent for Guaranteed pods;
//! - the `cgroupfs` driver writes that name as a path:
//!   `<cgroupRoot>/kubepods/burstable/pod<uid>`;
//! - the `systemd` driver turns it into nested slices, each the dash-joined prefix of the
//!   components with every `-` inside a component escaped to `_`:
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice`;
//! - the container's cgroup, inside the pod's: containerd `<id>` (cgroupfs) or
//!   `cri-containerd-<id>.scope` (systemd); CRI-O `crio-<id>` (cgroupfs) or
//!   `crio-<id>.scope` (systemd).
//!
//! cgroup v1: the cpuset hierarchy is `<root>/cpuset`, the files `cpuset.cpus` (what was
//! written) and `cpuset.effective_cpus` (what the kernel applies). cgroup v2: the unified
//! tree is `<root>`, the files `cpuset.cpus` (empty when never written) and
//! `cpuset.cpus.effective`. The effective set is what runs.
//!
//! Every read is bounded ([`MAX_FILE_BYTES`]); no process is started; every error names the
//! file. The root is an argument, so tests point it at trees they make.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use nodetopo_engine::{CpuSet, QosClass};

/// The most bytes read from one cgroup file. A cpuset list of the largest machines Linux
/// supports (8192 CPUs, every other one) is about 40 KiB.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Which cgroup hierarchy holds the cpusets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 (or a hybrid host): the cpuset hierarchy at `<root>/cpuset`.
    V1,
    /// cgroup v2: the unified hierarchy at `<root>`.
    V2,
}

/// The kubelet's (and the runtime's) cgroup driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Plain directories (`kubepods/burstable/pod<uid>`).
    Cgroupfs,
    /// systemd slices and scopes (`kubepods.slice/...`).
    Systemd,
}

/// The container runtime, from the scheme of the container ID (`containerd://`, `cri-o://`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runtime {
    /// containerd's CRI plugin.
    Containerd,
    /// CRI-O.
    CriO,
}

/// Why a cgroup could not be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CgroupError {
    /// The container's cgroup directory does not exist.
    #[error("no cgroup at {0}")]
    NotFound(PathBuf),
    /// A file could not be read.
    #[error("reading {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error, as text.
        error: String,
    },
    /// A file is larger than [`MAX_FILE_BYTES`].
    #[error("{path} is larger than {MAX_FILE_BYTES} bytes: not a cpuset file")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A file does not hold a CPU list.
    #[error("{path}: {text:?} is not a CPU list: {error}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What it holds (cut to 80 characters).
        text: String,
        /// The parse error.
        error: String,
    },
    /// A cgroup v2 container without an effective cpuset (the cpuset controller is not
    /// enabled for it).
    #[error("{0}: no cpuset.cpus.effective (the cpuset controller is not enabled there)")]
    NoCpusetController(PathBuf),
}

/// Why a container ID or pod UID cannot name a cgroup.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    /// The container ID has no `<runtime>://` prefix, or an unknown runtime.
    #[error("container ID {0:?}: expected containerd://<id> or cri-o://<id>")]
    Scheme(String),
    /// The ID or UID has characters a cgroup name cannot take (only ASCII letters, digits,
    /// `-` and `_` are accepted, so no ID can walk out of the tree).
    #[error("{what} {value:?}: only ASCII letters, digits, '-' and '_' are allowed")]
    Characters {
        /// `container ID` or `pod UID`.
        what: &'static str,
        /// The text.
        value: String,
    },
}

/// A container ID as the Pod status shows it (`containerd://<hex>`, `cri-o://<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerId {
    /// The runtime, from the scheme.
    pub runtime: Runtime,
    /// The ID without the scheme.
    pub id: String,
}

fn check_chars(what: &'static str, value: &str) -> Result<(), IdError> {
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(IdError::Characters {
            what,
            value: value.to_string(),
        })
    }
}

impl ContainerId {
    /// Parses `containerd://<id>` or `cri-o://<id>`.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let (scheme, id) = s
            .split_once("://")
            .ok_or_else(|| IdError::Scheme(s.to_string()))?;
        let runtime = match scheme {
            "containerd" => Runtime::Containerd,
            "cri-o" => Runtime::CriO,
            _ => return Err(IdError::Scheme(s.to_string())),
        };
        check_chars("container ID", id)?;
        Ok(Self {
            runtime,
            id: id.to_string(),
        })
    }
}

impl std::fmt::Display for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match self.runtime {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        };
        write!(f, "{scheme}://{}", self.id)
    }
}

/// Where a node's container cgroups are: the cgroup mount, its version, the driver and the
/// kubelet's `cgroupRoot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The cgroup mount (`/sys/fs/cgroup` on a host).
    pub root: PathBuf,
    /// v1 (cpuset hierarchy) or v2 (unified).
    pub version: CgroupVersion,
    /// The kubelet's `cgroupDriver`.
    pub driver: CgroupDriver,
    /// The kubelet's `cgroupRoot` (`/` by default; the node's pods live below it).
    pub kubelet_root: String,
}

/// A container's cpuset as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCpuset {
    /// The container's cgroup directory.
    pub dir: PathBuf,
    /// `cpuset.cpus`: what was written (`None` on v2 when never written).
    pub configured: Option<CpuSet>,
    /// What the kernel applies: the effective set where the kernel reports one, else the
    /// written one.
    pub effective: CpuSet,
}

/// Which cgroup version a mount holds: v2 when `<root>/cgroup.controllers` exists, v1 when
/// `<root>/cpuset` is a directory (a v1 or hybrid host), `None` otherwise.
pub fn detect_version(root: &Path) -> Option<CgroupVersion> {
    if root.join("cgroup.controllers").is_file() {
        Some(CgroupVersion::V2)
    } else if root.join("cpuset").is_dir() {
        Some(CgroupVersion::V1)
    } else {
        None
    }
}

impl CgroupLayout {
    /// The directory that holds the pods' cgroups (the cpuset hierarchy on v1).
    fn hierarchy(&self) -> PathBuf {
        match self.version {
            CgroupVersion::V1 => self.root.join("cpuset"),
            CgroupVersion::V2 => self.root.clone(),
        }
    }

    /// The kubelet's cgroup name of a pod: its components, before the driver writes them.
    fn pod_name(&self, pod_uid: &str, qos: QosClass) -> Vec<String> {
        let mut parts: Vec<String> = self
            .kubelet_root
            .split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        parts.push("kubepods".into());
        match qos {
            QosClass::Guaranteed => {}
            QosClass::Burstable => parts.push("burstable".into()),
            QosClass::BestEffort => parts.push("besteffort".into()),
        }
        parts.push(format!("pod{pod_uid}"));
        parts
    }

    /// The pod's cgroup path relative to the hierarchy, as the driver writes the name.
    pub fn pod_path(&self, pod_uid: &str, qos: QosClass) -> Result<PathBuf, IdError> {
        check_chars("pod UID", pod_uid)?;
        let name = self.pod_name(pod_uid, qos);
        Ok(match self.driver {
            CgroupDriver::Cgroupfs => name.iter().collect(),
            CgroupDriver::Systemd => {
                // Each component's dashes become underscores (systemd reads a dash as a
                // nesting level); slice i is the dash-joined prefix up to i.
                let escaped: Vec<String> = name.iter().map(|p| p.replace('-', "_")).collect();
                (1..=escaped.len())
                    .map(|n| format!("{}.slice", escaped[..n].join("-")))
                    .collect()
            }
        })
    }

    /// The container's cgroup directory.
    pub fn container_dir(
        &self,
        pod_uid: &str,
        qos: QosClass,
        id: &ContainerId,
    ) -> Result<PathBuf, IdError> {
        check_chars("container ID", &id.id)?;
        let leaf = match (self.driver, id.runtime) {
            (CgroupDriver::Cgroupfs, Runtime::Containerd) => id.id.clone(),
            (CgroupDriver::Cgroupfs, Runtime::CriO) => format!("crio-{}", id.id),
            (CgroupDriver::Systemd, Runtime::Containerd) => {
                format!("cri-containerd-{}.scope", id.id)
            }
            (CgroupDriver::Systemd, Runtime::CriO) => format!("crio-{}.scope", id.id),
        };
        Ok(self
            .hierarchy()
            .join(self.pod_path(pod_uid, qos)?)
            .join(leaf))
    }

    /// Reads the container's cpuset. `Err(NotFound)` when its cgroup does not exist.
    pub fn read_cpuset(
        &self,
        pod_uid: &str,
        qos: QosClass,
        id: &ContainerId,
    ) -> Result<ContainerCpuset, CgroupError> {
        let dir = self
            .container_dir(pod_uid, qos, id)
            .map_err(|e| CgroupError::Malformed {
                path: self.hierarchy(),
                text: String::new(),
                error: e.to_string(),
            })?;
        read_dir_cpuset(&dir, self.version)
    }
}

/// Reads the cpuset of the cgroup at `dir`.
pub fn read_dir_cpuset(dir: &Path, version: CgroupVersion) -> Result<ContainerCpuset, CgroupError> {
    if !dir.is_dir() {
        return Err(CgroupError::NotFound(dir.to_path_buf()));
    }
    let (configured_file, effective_file) = match version {
        CgroupVersion::V1 => ("cpuset.cpus", "cpuset.effective_cpus"),
        CgroupVersion::V2 => ("cpuset.cpus", "cpuset.cpus.effective"),
    };
    let configured = read_list(&dir.join(configured_file))?;
    let effective = read_list(&dir.join(effective_file))?;
    let effective = match (version, effective, &configured) {
        (_, Some(e), _) => e,
        // v1 kernels before 4.x have no effective_cpus: what was written applies.
        (CgroupVersion::V1, None, Some(c)) => c.clone(),
        (CgroupVersion::V1, None, None) => {
            return Err(CgroupError::Io {
                path: dir.join(configured_file),
                error: "missing".into(),
            })
        }
        (CgroupVersion::V2, None, _) => {
            return Err(CgroupError::NoCpusetController(dir.to_path_buf()))
        }
    };
    // v2: an empty cpuset.cpus means "never written" (the parent's set applies).
    let configured = configured.filter(|c| !(version == CgroupVersion::V2 && c.is_empty()));
    Ok(ContainerCpuset {
        dir: dir.to_path_buf(),
        configured,
        effective,
    })
}

/// Reads a CPU list file: `Ok(None)` when it does not exist.
fn read_list(path: &Path) -> Result<Option<CpuSet>, CgroupError> {
    let Some(text) = read_bounded(path)? else {
        return Ok(None);
    };
    let trimmed = text.trim();
    CpuSet::parse(trimmed)
        .map(Some)
        .map_err(|e| CgroupError::Malformed {
            path: path.to_path_buf(),
            text: trimmed.chars().take(80).collect(),
            error: e.to_string(),
        })
}

/// Reads at most [`MAX_FILE_BYTES`] of a text file: `Ok(None)` when it does not exist.
fn read_bounded(path: &Path) -> Result<Option<String>, CgroupError> {
    let io = |e: std::io::Error| CgroupError::Io {
        path: path.to_path_buf(),
        error: e.to_string(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mut buf = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(CgroupError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| CgroupError::Malformed {
            path: path.to_path_buf(),
            text: String::new(),
            error: "not UTF-8 text".into(),
        })
}

/// The cgroup arguments the offline `audit` and the agent's `run` share
/// (`--cgroup-version`, `--cgroup-driver`); with the `clap` feature they are clap value enums.
pub mod args {
    /// `--cgroup-version`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
    pub enum Version {
        /// Detect from the mount.
        Auto,
        /// cgroup v1 (the `cpuset` hierarchy).
        V1,
        /// cgroup v2 (unified).
        V2,
    }

    /// `--cgroup-driver`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
    pub enum Driver {
        /// Plain directories.
        Cgroupfs,
        /// systemd slices and scopes.
        Systemd,
    }
}

#[cfg(test)]
mod tests;
