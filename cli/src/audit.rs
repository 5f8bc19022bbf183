//! `audit`: every container's real cpuset on a recorded node (or this one) against the
//! kubelet's CPU manager checkpoint, each mismatch with its reason. The same judgement as
//! the agent's `CgroupAgreement` ([`nodetopo_kubelet::audit`]), for bug reports: record the
//! cgroup tree, `/sys`, the kubelet's files and `kubectl get pods -o yaml`, and run this
//! anywhere. See docs/audit.md.
//!
//! Exit status: 0 without drift, 1 with drift or unreadable cgroups, 2 on a bad input.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use nodetopo_engine::CpuSet;
use nodetopo_kubelet::audit::{self, inputs, AuditReport, Expected};
use nodetopo_kubelet::cgroup::{self, CgroupDriver, CgroupLayout, CgroupVersion};
use nodetopo_kubelet::cpu_checkpoint;

/// `--cgroup-version` and `--cgroup-driver`, shared with the agent's `run`.
pub use nodetopo_kubelet::cgroup::args::{Driver, Version};

/// Arguments of `audit`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The cgroup mount (a recorded copy, or this host's).
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// The cgroup version holding the cpusets; `auto` looks for `cgroup.controllers` (v2)
    /// or a `cpuset` directory (v1 or hybrid).
    #[arg(long, value_enum, default_value_t = Version::Auto)]
    pub cgroup_version: Version,
    /// The kubelet's `cgroupDriver`.
    #[arg(long, value_enum, default_value_t = Driver::Cgroupfs)]
    pub cgroup_driver: Driver,
    /// The kubelet's `cgroupRoot` (its pods live below `<cgroupRoot>/kubepods`).
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub kubelet_cgroup_root: String,
    /// The pods on the node with their status (`kubectl get pods -o yaml
    /// --field-selector spec.nodeName=<node>`): running containers' IDs and QoS classes.
    #[arg(long, value_name = "FILE")]
    pub pods: PathBuf,
    /// The kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`).
    /// Without it nothing of the kubelet is known and only the real cpusets are compared
    /// with each other.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// The kubelet's configuration file, for `reservedSystemCPUs` (with its drop-ins
    /// under `--kubelet-config-dir`).
    #[arg(long, value_name = "FILE", conflicts_with = "reserved")]
    pub kubelet_config: Option<PathBuf>,
    /// The kubelet's drop-in directory.
    #[arg(long, value_name = "DIR", requires = "kubelet_config")]
    pub kubelet_config_dir: Option<PathBuf>,
    /// The reserved CPUs (list syntax), instead of `--kubelet-config`.
    #[arg(long, value_name = "CPUS")]
    pub reserved: Option<String>,
    /// The directory that plays /sys: every CPU named by the checkpoint, the reserved set
    /// and the cgroups must be online there [default: /sys].
    #[arg(long, value_name = "DIR", conflicts_with = "preset")]
    pub sysfs_root: Option<PathBuf>,
    /// A built-in machine instead of a sysfs tree (`nodetopo plan --preset list`).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Output formats of `audit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// The report as JSON (`checkedContainers`, `skippedContainers`, `drift`, `unreadable`).
    Json,
}

/// Builds the layout and expectations from the arguments, reads the node, and audits it.
pub fn build(args: &Args) -> anyhow::Result<AuditReport> {
    use anyhow::Context as _;
    let version = match args.cgroup_version {
        Version::V1 => CgroupVersion::V1,
        Version::V2 => CgroupVersion::V2,
        Version::Auto => cgroup::detect_version(&args.cgroup_root).with_context(|| {
            format!(
                "--cgroup-root {}: neither cgroup.controllers (v2) nor a cpuset directory (v1) there; name the version with --cgroup-version",
                args.cgroup_root.display()
            )
        })?,
    };
    let layout = CgroupLayout {
        root: args.cgroup_root.clone(),
        version,
        driver: match args.cgroup_driver {
            Driver::Cgroupfs => CgroupDriver::Cgroupfs,
            Driver::Systemd => CgroupDriver::Systemd,
        },
        kubelet_root: args.kubelet_cgroup_root.clone(),
    };
    let machine = nodetopo_kubelet::machine(args.preset.as_deref(), args.sysfs_root.as_deref())?;
    let online = machine.all_cpus();
    let off_machine = |what: &str, set: &CpuSet| -> anyhow::Result<()> {
        let extra = set.difference(&online);
        if extra.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("{what}: CPUs {extra} are not online on this machine (online: {online})")
        }
    };
    let text = nodetopo_kubelet::pods::read_pod_file(&args.pods)
        .with_context(|| format!("--pods {}", args.pods.display()))?;
    let pods = inputs::pods_from_yaml(&text)
        .map_err(|e| anyhow::anyhow!("--pods {}: {e}", args.pods.display()))?;
    let kubelet = match &args.state {
        None => None,
        Some(path) => {
            let cp = cpu_checkpoint::read(path)
                .map_err(|e| anyhow::anyhow!("--state: {e}"))?
                .with_context(|| format!("--state {}: no such file", path.display()))?;
            let k = inputs::kubelet_cpus(&cp);
            off_machine(
                &format!("--state {}: defaultCpuSet", path.display()),
                &k.default_cpu_set,
            )?;
            for (uid, cs) in &k.assignments {
                for (name, set) in cs {
                    off_machine(
                        &format!("--state {}: entry {uid}/{name}", path.display()),
                        set,
                    )?;
                }
            }
            Some(k)
        }
    };
    let reserved = match (&args.reserved, &args.kubelet_config) {
        (Some(r), _) => CpuSet::parse(r).map_err(|e| anyhow::anyhow!("--reserved {r:?}: {e}"))?,
        (None, Some(cfg)) => {
            nodetopo_kubelet::config::read_effective(cfg, args.kubelet_config_dir.as_deref())?
                .reserved_system_cpus
        }
        (None, None) => CpuSet::new(),
    };
    off_machine("the reserved CPUs", &reserved)?;
    let expected = Expected {
        kubelet,
        published: Default::default(),
        published_shared: None,
        reserved,
    };
    let observed = audit::observe(&layout, &pods);
    for ((uid, name), read) in &observed {
        if let Ok(set) = read {
            off_machine(&format!("the cgroup of {uid}/{name}"), set)?;
        }
    }
    Ok(audit::audit(&pods, &observed, &expected))
}

/// The report for people.
pub fn render_text(r: &AuditReport) -> String {
    let mut out = format!(
        "checked {} running containers ({} not running, skipped); {} with drift, {} unreadable\n",
        r.checked_containers,
        r.skipped_containers,
        r.drift_containers(),
        r.unreadable.len()
    );
    for d in &r.drift {
        out.push_str(&format!(
            "{} {}/{}: expected {}, actual {}: {}\n",
            d.reason,
            d.pod,
            d.container,
            d.expected.as_deref().unwrap_or("-"),
            d.actual.as_deref().unwrap_or("-"),
            d.message
        ));
    }
    for u in &r.unreadable {
        out.push_str(&format!(
            "CgroupUnreadable {}/{}: {}\n",
            u.pod, u.container, u.message
        ));
    }
    out
}

/// Runs `audit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = build(&args)?;
    let text = match args.output {
        Output::Text => render_text(&report),
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(if report.drift.is_empty() && report.unreadable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
