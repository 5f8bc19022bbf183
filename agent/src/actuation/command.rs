//! The `apply` and `revert` subcommands: their flags ([`Args`]), the kubelet service they
//! drive ([`service_of`]), and [`run`] / [`run_revert`], which print the report as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use nodetopo_kubelet::config as kubelet;

use super::report::print_report;
use super::restart::systemd::{self, SystemdBus, SYSTEM_BUS};
use super::{
    apply, guard, node_ready, recover_and_start, revert, ApplyInput, Commands, DryRun,
    KubeletFiles, KubeletService, ProcessArgs,
};

/// Arguments of `apply`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory that plays /sys.
    #[arg(long, default_value = "/sys", conflicts_with = "preset")]
    pub sysfs_root: PathBuf,
    /// A built-in machine instead of this one (tests).
    #[arg(long)]
    pub preset: Option<String>,
    /// The kubelet's configuration file.
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    pub kubelet_config: PathBuf,
    /// The kubelet's drop-in directory.
    #[arg(long, default_value = kubelet::DEFAULT_CONFIG_DIR)]
    pub kubelet_config_dir: PathBuf,
    /// The CPU manager checkpoint.
    #[arg(long, default_value = "/var/lib/kubelet/cpu_manager_state")]
    pub state: PathBuf,
    /// Pods on the node (YAML; repeatable).
    #[arg(long)]
    pub pods: Vec<PathBuf>,
    /// The NodeResourcePolicy (YAML).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// How to restart the kubelet.
    #[arg(long, value_enum, default_value_t = RestartMode::Systemd)]
    pub restart: RestartMode,
    /// systemd unit.
    #[arg(long, default_value = "kubelet.service")]
    pub unit: String,
    /// `--restart systemd`: the D-Bus address of systemd (the system bus; or systemd's
    /// private socket `unix:path=/run/systemd/private` with --systemd-direct).
    #[arg(long, default_value = SYSTEM_BUS)]
    pub systemd_address: String,
    /// `--restart systemd`: the address is a direct (peer-to-peer) connection to systemd,
    /// such as its private socket: no bus, no Hello.
    #[arg(long)]
    pub systemd_direct: bool,
    /// `--restart systemd`: how long one systemd job (stop, start, restart) may take.
    #[arg(long, default_value_t = systemd::DEFAULT_TIMEOUT.as_secs())]
    pub systemd_timeout_seconds: u64,
    /// `--restart command`: stop command (whitespace-separated argv).
    #[arg(long)]
    pub stop_command: Option<String>,
    /// `--restart command`: start command.
    #[arg(long)]
    pub start_command: Option<String>,
    /// `--restart command`: health command (optional).
    #[arg(long)]
    pub health_command: Option<String>,
    /// Only finish or undo an interrupted apply, then exit.
    #[arg(long)]
    pub recover_only: bool,
    /// Verify step: also wait until this Node is Ready again with a heartbeat newer than the
    /// restart (API server from KUBECONFIG or the in-cluster service account; needs `get` on
    /// Nodes); without it only the service's health, the files and the state are checked.
    #[arg(long)]
    pub node: Option<String>,
    /// `--node`: how long to wait for the Node after the restart (else roll back).
    #[arg(long, default_value_t = 120, requires = "node")]
    pub verify_seconds: u64,
    /// The check of the kubelet's command line.
    #[command(flatten)]
    pub process: ProcessArgs,
    /// The guard (`--restart systemd`).
    #[command(flatten)]
    pub guard: guard::GuardArgs,
}

/// How `apply` drives the kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartMode {
    /// systemd over D-Bus: StopUnit/StartUnit/RestartUnit on the unit, each job waited for
    /// (JobRemoved, result `done`); healthy when the unit's ActiveState is `active`.
    Systemd,
    /// The given commands.
    Command,
    /// Record what would be done; change nothing (`none` is the same).
    #[value(alias = "none")]
    DryRun,
}

pub(super) fn argv(s: &Option<String>, flag: &str) -> anyhow::Result<Vec<String>> {
    match s {
        Some(s) => Ok(s.split_whitespace().map(String::from).collect()),
        None => bail!("--restart command needs {flag}"),
    }
}

/// The kubelet service of `args`, with the Node Ready wait of `--node` (and the runtime it
/// needs, to be kept until the apply is done).
pub(super) fn service_of(
    args: &Args,
    files: &KubeletFiles,
) -> anyhow::Result<(
    Box<dyn KubeletService + Send>,
    Option<tokio::runtime::Runtime>,
)> {
    let svc: Box<dyn KubeletService + Send> = match args.restart {
        RestartMode::Systemd => {
            let timeout = std::time::Duration::from_secs(args.systemd_timeout_seconds);
            let verify = std::time::Duration::from_secs(if args.node.is_some() {
                args.verify_seconds.max(1)
            } else {
                0
            });
            let guard = args.guard.plan(files, &args.process, timeout, verify)?;
            Box::new(
                SystemdBus::new(
                    &args.unit,
                    &args.systemd_address,
                    args.systemd_direct,
                    timeout,
                )?
                .with_guard(guard),
            )
        }
        RestartMode::Command => Box::new(Commands {
            stop: argv(&args.stop_command, "--stop-command")?,
            start: argv(&args.start_command, "--start-command")?,
            health: args
                .health_command
                .as_deref()
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
        }),
        RestartMode::DryRun => Box::new(DryRun::default()),
    };
    with_node_ready(args, svc)
}

/// `--node`: the executor's verify step also waits for the Node (as in cluster mode); the
/// runtime lives until the apply is done.
fn with_node_ready(
    args: &Args,
    mut svc: Box<dyn KubeletService + Send>,
) -> anyhow::Result<(
    Box<dyn KubeletService + Send>,
    Option<tokio::runtime::Runtime>,
)> {
    let runtime = match &args.node {
        Some(node) if args.restart != RestartMode::DryRun => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the runtime for --node")?;
            let client = rt
                .block_on(kube::Client::try_default())
                .context("--node: connecting to the API server (KUBECONFIG or in-cluster)")?;
            svc = Box::new(
                node_ready::NodeReadyCheck::new(
                    svc,
                    rt.handle().clone(),
                    kube::Api::all(client),
                    node,
                    std::time::Duration::from_secs(args.verify_seconds.max(1)),
                )
                .with_flag("--verify-seconds"),
            );
            Some(rt)
        }
        _ => None,
    };
    Ok((svc, runtime))
}

pub(super) fn files_of(args: &Args) -> KubeletFiles {
    KubeletFiles {
        config: args.kubelet_config.clone(),
        config_dir: args.kubelet_config_dir.clone(),
        state: args.state.clone(),
    }
}

/// Runs `revert` (the same flags as `apply`, without `--policy`); prints the report as
/// JSON. Exit 0 when reverted (or nothing to revert), 1 otherwise.
pub fn run_revert(args: Args) -> anyhow::Result<ExitCode> {
    if args.policy.is_some() {
        bail!("revert takes no --policy: it goes back to the node's own configuration");
    }
    if args.recover_only {
        bail!("revert takes no --recover-only (use apply --recover-only)");
    }
    let files = files_of(&args);
    let (mut svc, runtime) = service_of(&args, &files)?;
    let topology = nodetopo_kubelet::machine(args.preset.as_deref(), Some(&args.sysfs_root))?;
    let pods = nodetopo_kubelet::pods::read_pod_files(&args.pods)?;
    let report = revert::revert(
        &revert::RevertInput {
            topology: &topology,
            files: &files,
            pods: &pods,
            dry_run: args.restart == RestartMode::DryRun,
            process: args.process.check(&files).as_ref(),
        },
        svc.as_mut(),
    )?;
    drop(runtime);
    print_report(&report)
}

/// Runs `apply`; prints the report as JSON. Exit 0 when applied (or nothing to do), 1 when
/// not applied (waiting, drain required, failed, dry run).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let files = files_of(&args);
    let (mut svc, runtime) = service_of(&args, &files)?;
    if args.recover_only {
        let (recovery, started) = recover_and_start(&files, svc.as_mut())?;
        println!(
            "{}",
            serde_json::json!({"recovery": recovery, "kubeletStarted": started})
        );
        return Ok(ExitCode::SUCCESS);
    }
    let policy = args
        .policy
        .as_ref()
        .context("--policy is required (unless --recover-only)")?;
    let topology = nodetopo_kubelet::machine(args.preset.as_deref(), Some(&args.sysfs_root))?;
    let pods = nodetopo_kubelet::pods::read_pod_files(&args.pods)?;
    let text = nodetopo_engine::files::read_text_bounded(policy, kubelet::MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("--policy {}: the file {e}", policy.display()))?;
    let desired = kubelet::desired_from_policy(&text, policy)?;
    let report = apply(
        &ApplyInput {
            topology: &topology,
            files: &files,
            pods: &pods,
            desired: &desired,
            dry_run: args.restart == RestartMode::DryRun,
            process: args.process.check(&files).as_ref(),
        },
        svc.as_mut(),
    )?;
    drop(runtime);
    print_report(&report)
}
