//! `diff`: what would it take for this kubelet to run what a NodeResourcePolicy asks for?
//!
//! Reads the kubelet's configuration (file plus drop-in directory), its CPU manager
//! checkpoint, the pods on the node (YAML files, UIDs as in the checkpoint) and the policy,
//! and prints the change plan of `nodetopo_engine::change::plan_change`: the same function
//! the agent runs before it actuates. Nothing is changed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nodetopo_engine::change::{plan_change, ChangeInput, ChangePlan, KubeletCpuState};
use nodetopo_kubelet::config as kubelet;
use nodetopo_kubelet::{cmdline, cpu_checkpoint};

/// Arguments of `diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The directory that plays /sys [default: /sys].
    #[arg(long, value_name = "DIR", conflicts_with = "preset")]
    pub sysfs_root: Option<PathBuf>,
    /// A built-in machine instead of this one.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// The kubelet's configuration file (`--config`).
    #[arg(long, value_name = "FILE")]
    pub kubelet_config: PathBuf,
    /// The kubelet's drop-in directory (`--config-dir`); `.conf` files in name order.
    #[arg(long, value_name = "DIR")]
    pub kubelet_config_dir: Option<PathBuf>,
    /// The kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`); a
    /// missing file is a fresh start.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Pods on the node (YAML; repeatable); their `metadata.uid` must match the
    /// checkpoint's keys for them to be named.
    #[arg(long, value_name = "FILE")]
    pub pods: Vec<PathBuf>,
    /// The NodeResourcePolicy (YAML) whose `spec.cpuManager` and `spec.topologyManager`
    /// are wanted.
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// The kubelet's command line: a copy of `/proc/<kubelet pid>/cmdline` (NUL-separated)
    /// or the same as text (`ps -o args= -p <pid>`). Its configuration flags
    /// (`--reserved-cpus`, `--feature-gates`, ...) override the files as the kubelet's do:
    /// the plan starts from the configuration they give, and a flag that would override
    /// what nodetopo's drop-in sets is refused, naming it. Without `--config-dir` the plan is
    /// refused (the kubelet would ignore nodetopo's drop-in), as `apply` does on a node.
    #[arg(long, value_name = "FILE")]
    pub kubelet_command_line: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// The kubelet's command line from a file (see [`Args::kubelet_command_line`], read by
/// [`cmdline::read_file`]); one without `--config-dir` is refused.
pub fn read_command_line(path: &Path) -> anyhow::Result<cmdline::KubeletCommandLine> {
    let k = cmdline::read_file(path).map_err(|e| anyhow::anyhow!("--kubelet-command-line {e}"))?;
    if k.config_dir.is_none() {
        anyhow::bail!(
            "--kubelet-command-line {}: the kubelet runs without --config-dir, so it would ignore nodetopo's drop-in; start it with --config-dir",
            path.display()
        );
    }
    Ok(k)
}

/// Output formats of `diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// The plan as JSON (the shape of NodeTopology `status.change`).
    Json,
}

/// Reads a checkpoint file (`Ok(None)` when it does not exist).
pub fn read_state(path: &Path) -> anyhow::Result<Option<cpu_checkpoint::CpuCheckpoint>> {
    Ok(cpu_checkpoint::read(path)?)
}

pub use nodetopo_kubelet::machine;
pub use nodetopo_kubelet::pods::read_pod_files as read_pods;

/// Reads every input and plans.
pub fn build(args: &Args) -> anyhow::Result<ChangePlan> {
    let topology = machine(args.preset.as_deref(), args.sysfs_root.as_deref())?;
    let flags = match &args.kubelet_command_line {
        Some(path) => {
            let k = read_command_line(path)?;
            if let (None, Some(dir)) = (&args.kubelet_config_dir, &k.config_dir) {
                anyhow::bail!(
                    "--kubelet-command-line {}: the kubelet reads drop-ins from {dir}; give their copy with --kubelet-config-dir",
                    path.display()
                );
            }
            k.flags
        }
        None => Default::default(),
    };
    // The kubelet's effective configuration: files, drop-ins, then its command line.
    let read = kubelet::read_config_with_flags(
        &args.kubelet_config,
        args.kubelet_config_dir.as_deref(),
        &flags,
    )?;
    let state: Option<KubeletCpuState> = match &args.state {
        Some(p) => read_state(p)?
            .map(|r| r.engine_state())
            .transpose()
            .map_err(|e| anyhow::anyhow!("kubelet CPU manager state {}: {e}", p.display()))?,
        None => None,
    };
    let pods = read_pods(&args.pods)?;
    let text = nodetopo_engine::files::read_text_bounded(&args.policy, kubelet::MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("--policy {}: the file {e}", args.policy.display()))?;
    let desired = kubelet::desired_from_policy(&text, &args.policy)?;
    kubelet::check_gates(&read.feature_gates, &flags.feature_gates, &desired)?;
    kubelet::check_flags(&flags, &kubelet::dropin_fields(&topology, &desired)?)?;
    Ok(plan_change(ChangeInput {
        topology: &topology,
        current: &read.owned,
        state: state.as_ref(),
        pods: &pods,
        desired: &desired,
    })?)
}

/// The plan for people.
pub fn render_text(plan: &ChangePlan) -> String {
    let mut out = String::new();
    out.push_str(&format!("Plan: {}\n", plan.class));
    if plan.config_changes.is_empty() {
        out.push_str("Configuration: unchanged\n");
    } else {
        out.push_str("Configuration changes:\n");
        for c in &plan.config_changes {
            out.push_str(&format!("  {c}\n"));
        }
    }
    out.push_str("Steps:\n");
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {}", i + 1, s.class));
        if !s.pods.is_empty() {
            out.push_str(&format!("  pods: {}", s.pods.join(", ")));
        }
        out.push_str(&format!("\n     {}\n", s.reason));
    }
    if !plan.non_conforming.is_empty() {
        out.push_str("Non-conforming containers (kept as they are):\n");
        for n in &plan.non_conforming {
            out.push_str(&format!(
                "  {}/{} cpus {}: {}\n",
                n.pod, n.container, n.cpus, n.why
            ));
        }
    }
    match &plan.new_state {
        Some(s) => out.push_str(&format!(
            "State file: rewritten (policy {}, shared pool \"{}\", {} pods with exclusive CPUs)\n",
            s.policy_name,
            s.state.default_cpuset,
            s.state.assignments.len()
        )),
        None => out.push_str("State file: kept as it is\n"),
    }
    if let Some(e) = &plan.expected_state {
        out.push_str(&format!(
            "Shared pool of the kubelet afterwards: \"{}\"\n",
            e.default_cpuset
        ));
    }
    out
}

/// Runs `diff`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let plan = build(&args)?;
    let text = match args.output {
        Output::Text => render_text(&plan),
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&plan)?),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
