//! `run`: the node agent daemon.
//!
//! The decisions live in [`core`] (a pure state machine); [`inputs`] are what it reads
//! (pods included), [`publish`] what goes out besides the status, and [`shells`] (cluster and
//! local mode) feed it events and write what comes out: the checkpoint first, then the
//! status, so no published allocation can be lost by a crash.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nodetopo_engine::CpuTopology;
use nodetopo_runtime::log::LogFormat;

pub mod checkpoint;
pub mod core;
pub mod inputs;
pub mod publish;
pub mod shells;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run on files instead of the API server (needs --pods-dir, --spec, --status-file).
    #[arg(long)]
    pub local: bool,
    /// Local mode: directory of Pod YAML files (Pods or workloads), re-read on change.
    #[arg(long, requires = "local")]
    pub pods_dir: Option<PathBuf>,
    /// Local mode: a NodeTopology YAML file whose spec configures the node.
    #[arg(long, requires = "local")]
    pub spec: Option<PathBuf>,
    /// Local mode: where the NodeTopology object with its status is written (atomically).
    #[arg(long, requires = "local")]
    pub status_file: Option<PathBuf>,
    /// sysfs root to discover the topology from.
    #[arg(long, default_value = "/sys", conflicts_with = "preset")]
    pub sysfs_root: PathBuf,
    /// Use a built-in machine model instead of discovering (tests, benchmarks).
    #[arg(long)]
    pub preset: Option<String>,
    /// Directory of the agent's checkpoint.
    #[arg(long, default_value = "/var/lib/nodetopo")]
    pub state_dir: PathBuf,
    /// The kubelet's CPU manager checkpoint, compared with the agent's assignments.
    #[arg(long, default_value = "/var/lib/kubelet/cpu_manager_state")]
    pub kubelet_state: PathBuf,
    /// Local mode: how often the files are re-read, in milliseconds, where change
    /// notification is off or unavailable (event-to-status latency is then about this plus
    /// one processing cycle). With notification they are rescanned every second as a safety
    /// net.
    #[arg(long, default_value_t = 50)]
    pub poll_ms: u64,
    /// Local mode: no file-change notification; poll every --poll-ms instead.
    #[arg(long, requires = "local")]
    pub no_watch: bool,
    /// Local mode, with notification: how long a changed pod file must stay quiet, in
    /// milliseconds, before it is read; a file renamed into the pods directory is read at
    /// once (event-to-status latency is then one processing cycle).
    #[arg(long, default_value_t = 2)]
    pub settle_ms: u64,
    /// Local mode, with notification: how long a pod file written and not yet closed is left
    /// unread after its last write, in milliseconds (then read anyway: a writer that never
    /// closes it).
    #[arg(long, default_value_t = 10_000)]
    pub write_hold_ms: u64,
    /// Log format. The level comes from RUST_LOG (default "info").
    #[arg(long, env = "NODETOPO_LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// Address of the admin server (/metrics, /healthz, /readyz); empty to disable.
    #[arg(long, default_value = "")]
    pub admin_addr: String,
    /// Node name (cluster mode).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Cluster mode: also publish a NodeResourceTopology (topology.node.k8s.io/v1alpha2)
    /// named after the node, for the topology-aware scheduler plugins (needs its CRD and
    /// the chart's `nrt.enabled` RBAC).
    #[arg(long, env = "NODETOPO_NRT")]
    pub nrt: bool,
    /// With --nrt: the kubelet's PodResources socket, read for the exclusive CPUs it
    /// assigned (empty: not read; then the CPU manager checkpoint, else the agent's own).
    #[arg(long, default_value = inputs::podresources::DEFAULT_SOCKET)]
    pub pod_resources_socket: PathBuf,
    /// With --nrt: read the kubelet's configuration file (--kubelet-config) and drop-in
    /// directory (--kubelet-config-dir; empty: none) every 10 s, with the configuration
    /// flags of the running kubelet's command line over them (found under --host-proc as
    /// actuation's process check finds it; not with --no-kubelet-process-check), for the
    /// topology manager policy and scope the NodeResourceTopology publishes (else: the
    /// configuration actuation last verified, else the spec, marked unverified).
    #[arg(long, env = "NODETOPO_READ_KUBELET_CONFIG")]
    pub read_kubelet_config: bool,
    /// Cluster mode: the cgroup mount to audit every running container's cpuset from
    /// (e.g. `/host/sys/fs/cgroup`; absent: no audit). See docs/audit.md.
    #[arg(long, env = "NODETOPO_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,
    /// With --cgroup-root: the cgroup version of the cpusets (`auto` detects it).
    #[arg(long, value_enum, default_value_t = nodetopo_kubelet::cgroup::args::Version::Auto)]
    pub cgroup_version: nodetopo_kubelet::cgroup::args::Version,
    /// With --cgroup-root: the kubelet's `cgroupDriver`.
    #[arg(long, value_enum, default_value_t = nodetopo_kubelet::cgroup::args::Driver::Cgroupfs)]
    pub cgroup_driver: nodetopo_kubelet::cgroup::args::Driver,
    /// With --cgroup-root: the kubelet's `cgroupRoot`.
    #[arg(long, default_value = "/")]
    pub kubelet_cgroup_root: String,
    /// Cluster mode: actuation (off by default; see docs/actuation.md).
    #[command(flatten)]
    pub actuation: crate::actuation::cluster::ActuationArgs,
}

/// The machine's topology, from a preset or a sysfs tree.
pub fn topology(args: &Args) -> anyhow::Result<CpuTopology> {
    match &args.preset {
        Some(name) => Ok(nodetopo_engine::presets::build(name)?),
        None => nodetopo_engine::sysfs::discover(&args.sysfs_root).with_context(|| {
            format!(
                "discovering the topology under {}",
                args.sysfs_root.display()
            )
        }),
    }
}

/// Runs `run`: checks the mode's arguments, discovers the topology, and hands plain values
/// to the shell of that mode.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    nodetopo_runtime::log::init(args.log_format);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if args.local {
        let config = local_config(&args)?;
        let node = node(&args)?;
        rt.block_on(shells::local::run(node, config))
    } else {
        let config = kube_config(&args)?;
        let node = node(&args)?;
        rt.block_on(shells::kube::run(node, config))
    }
}

/// What both modes need.
fn node(args: &Args) -> anyhow::Result<shells::Node> {
    Ok(shells::Node {
        topology: topology(args)?,
        state_dir: args.state_dir.clone(),
        kubelet_state: args.kubelet_state.clone(),
        admin_addr: args.admin_addr.clone(),
    })
}

/// Local mode's files; all three are needed.
fn local_config(args: &Args) -> anyhow::Result<shells::local::Config> {
    let (Some(pods_dir), Some(spec), Some(status_file)) =
        (&args.pods_dir, &args.spec, &args.status_file)
    else {
        anyhow::bail!("--local needs --pods-dir, --spec and --status-file");
    };
    Ok(shells::local::Config {
        pods_dir: pods_dir.clone(),
        spec: spec.clone(),
        status_file: status_file.clone(),
        poll: std::time::Duration::from_millis(args.poll_ms.max(1)),
        watch: !args.no_watch,
        settle: std::time::Duration::from_millis(args.settle_ms.max(1)),
        write_hold: std::time::Duration::from_millis(args.write_hold_ms),
    })
}

/// Where `--read-kubelet-config` reads the kubelet's configuration: its files, and the
/// command line of the kubelet process found as actuation's process check finds it
/// (`--host-proc`, `--kubelet-host-config`, `--kubelet-host-config-dir`; none with
/// `--no-kubelet-process-check`).
fn kubelet_config_paths(args: &Args) -> shells::kube::KubeletConfigPaths {
    let a = &args.actuation;
    let dir = &a.kubelet_config_dir;
    let files = crate::actuation::KubeletFiles {
        config: a.kubelet_config.clone(),
        config_dir: dir.clone(),
        state: args.kubelet_state.clone(),
    };
    shells::kube::KubeletConfigPaths {
        config: a.kubelet_config.clone(),
        config_dir: (!dir.as_os_str().is_empty()).then(|| dir.clone()),
        process: a.process.check(&files),
    }
}

/// Cluster mode's settings; the node name is needed.
fn kube_config(args: &Args) -> anyhow::Result<shells::kube::Config> {
    let node = args
        .node_name
        .clone()
        .context("cluster mode needs the node name (NODE_NAME or --node-name)")?;
    Ok(shells::kube::Config {
        node,
        nrt: args.nrt,
        pod_resources_socket: args.pod_resources_socket.clone(),
        kubelet_config: args.read_kubelet_config.then(|| kubelet_config_paths(args)),
        actuation: args.actuation.clone(),
        cgroups: cgroup_layout(args)?,
    })
}

/// The cgroup layout to audit (`None` without `--cgroup-root`); a root whose version cannot
/// be told is an error at start-up, not a silent lack of audit.
fn cgroup_layout(args: &Args) -> anyhow::Result<Option<nodetopo_kubelet::cgroup::CgroupLayout>> {
    use nodetopo_kubelet::cgroup::args::{Driver, Version};
    use nodetopo_kubelet::cgroup::{self, CgroupDriver, CgroupLayout, CgroupVersion};
    let Some(root) = &args.cgroup_root else {
        return Ok(None);
    };
    let found = cgroup::detect_version(root);
    let version = match (args.cgroup_version, found) {
        (Version::Auto, Some(v)) => v,
        (Version::Auto, None) => anyhow::bail!(
            "--cgroup-root {}: neither cgroup.controllers (v2) nor a cpuset directory (v1) there; name it with --cgroup-version",
            root.display()
        ),
        (Version::V1, Some(CgroupVersion::V1)) => CgroupVersion::V1,
        (Version::V2, Some(CgroupVersion::V2)) => CgroupVersion::V2,
        (named, _) => anyhow::bail!(
            "--cgroup-root {} with --cgroup-version {}: {} there",
            root.display(),
            match named {
                Version::V1 => "v1",
                _ => "v2",
            },
            match found {
                Some(CgroupVersion::V1) => "a v1 cpuset hierarchy (cpuset/), not a v2 one",
                Some(CgroupVersion::V2) => "a v2 hierarchy (cgroup.controllers), not a v1 cpuset one",
                None => "neither cgroup.controllers (v2) nor a cpuset directory (v1)",
            }
        ),
    };
    Ok(Some(CgroupLayout {
        root: root.clone(),
        version,
        driver: match args.cgroup_driver {
            Driver::Cgroupfs => CgroupDriver::Cgroupfs,
            Driver::Systemd => CgroupDriver::Systemd,
        },
        kubelet_root: args.kubelet_cgroup_root.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["agent", "--local"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("arguments parse").args
    }

    /// Without `--cgroup-root` the agent starts and does not audit (the flag once had an
    /// empty default clap refused, so no agent started without it).
    #[test]
    fn no_cgroup_root_means_no_audit() {
        let a = args(&[]);
        assert_eq!(a.cgroup_root, None);
        assert_eq!(cgroup_layout(&a).expect("no error"), None);
    }

    /// A named version must be what the mount holds; `auto` detects it; an empty directory
    /// is an error naming the flag.
    #[test]
    fn cgroup_version_is_checked_against_the_mount() {
        let v1 = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(v1.path().join("cpuset")).expect("mkdir");
        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "cpuset cpu\n").expect("write");
        let empty = tempfile::tempdir().expect("tempdir");
        let layout = |root: &std::path::Path, version: &str| {
            let root = root.to_str().expect("utf-8");
            cgroup_layout(&args(&["--cgroup-root", root, "--cgroup-version", version]))
        };
        use nodetopo_kubelet::cgroup::CgroupVersion;
        let version = |r: anyhow::Result<Option<nodetopo_kubelet::cgroup::CgroupLayout>>| {
            r.expect("layout").expect("audit on").version
        };
        assert_eq!(version(layout(v1.path(), "auto")), CgroupVersion::V1);
        assert_eq!(version(layout(v1.path(), "v1")), CgroupVersion::V1);
        assert_eq!(version(layout(v2.path(), "auto")), CgroupVersion::V2);
        assert_eq!(version(layout(v2.path(), "v2")), CgroupVersion::V2);
        let e = layout(v1.path(), "v2")
            .expect_err("v2 named on a v1 mount")
            .to_string();
        assert!(
            e.contains("--cgroup-version v2") && e.contains("not a v2 one"),
            "{e}"
        );
        let e = layout(v2.path(), "v1")
            .expect_err("v1 named on a v2 mount")
            .to_string();
        assert!(
            e.contains("--cgroup-version v1") && e.contains("not a v1 cpuset one"),
            "{e}"
        );
        for v in ["auto", "v1"] {
            let e = layout(empty.path(), v)
                .expect_err("empty mount")
                .to_string();
            assert!(e.contains("--cgroup-root") && e.contains("neither"), "{e}");
        }
    }
}
