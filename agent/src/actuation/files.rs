//! Files: where the kubelet's files are ([`KubeletFiles`]: its config file, drop-in
//! directory and CPU manager state, with nodetopo's drop-in, the backups and the journal
//! beside them) and how its running command line is checked ([`ProcessArgs`]).

use std::path::{Path, PathBuf};

use nodetopo_kubelet::{cmdline as kubelet_cmdline, config as kubelet};

/// The suffix of backups.
pub const BACKUP_SUFFIX: &str = ".nodetopo-backup";

/// The journal's file name (beside the state file).
pub const JOURNAL_NAME: &str = "nodetopo-apply.journal";

/// Where the kubelet's files are.
#[derive(Debug, Clone)]
pub struct KubeletFiles {
    /// `--config`.
    pub config: PathBuf,
    /// `--config-dir`.
    pub config_dir: PathBuf,
    /// `cpu_manager_state`.
    pub state: PathBuf,
}

impl KubeletFiles {
    /// nodetopo's drop-in.
    pub fn dropin(&self) -> PathBuf {
        self.config_dir.join(kubelet::DROPIN_NAME)
    }
    /// The apply journal (beside the state file).
    pub fn journal(&self) -> PathBuf {
        self.state
            .parent()
            .unwrap_or(Path::new("."))
            .join(JOURNAL_NAME)
    }
}

/// How the running kubelet's command line is checked before an apply
/// ([`kubelet_cmdline`]): it must read the config file and drop-in directory nodetopo
/// writes, and its `--feature-gates` count with those of its files. With
/// `--read-kubelet-config` the same process's configuration flags also override its files
/// in the topology manager configuration the NodeResourceTopology publishes.
#[derive(Debug, Clone, clap::Args)]
pub struct ProcessArgs {
    /// The host's /proc, where the kubelet process is looked for (in the chart, the host's
    /// /proc mounted read-only at /host/proc).
    #[arg(long, default_value = "/proc")]
    pub host_proc: PathBuf,
    /// The kubelet's `--config` as the host names it (default: --kubelet-config).
    #[arg(long)]
    pub kubelet_host_config: Option<PathBuf>,
    /// The kubelet's `--config-dir` as the host names it (default: --kubelet-config-dir).
    #[arg(long)]
    pub kubelet_host_config_dir: Option<PathBuf>,
    /// Do not look at the kubelet's command line.
    #[arg(long)]
    pub no_kubelet_process_check: bool,
}

impl ProcessArgs {
    /// The check for `files`, or `None` when turned off.
    pub fn check(&self, files: &KubeletFiles) -> Option<kubelet_cmdline::ProcessCheck> {
        (!self.no_kubelet_process_check).then(|| kubelet_cmdline::ProcessCheck {
            proc_root: self.host_proc.clone(),
            host_config: self
                .kubelet_host_config
                .clone()
                .unwrap_or_else(|| files.config.clone()),
            host_config_dir: self
                .kubelet_host_config_dir
                .clone()
                .unwrap_or_else(|| files.config_dir.clone()),
        })
    }
}

/// The backup path of a file.
pub fn backup_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}
