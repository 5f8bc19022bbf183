//! `plan`: where would these containers land on this machine, under each policy?
//!
//! Pipeline: read the machine (sysfs root or preset) -> build the workload (Pod YAML,
//! `--containers`, or the built-in demo) -> build the variants (the four default CPU
//! manager option sets side by side, or the one the user chose) -> admit the workload in
//! order through `engine::admission::NodeAdmitter`, one admitter per variant -> render
//! (table or the JSON shape of DESIGN.md). Everything after reading the inputs is pure;
//! see `docs/plan.md` for the decisions.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use nodetopo_engine::admission::{
    CpuPolicyConfig, MemoryManagerConfig, NodeAdmitter, NodeConfig, Pools,
};
use nodetopo_engine::cpumanager::options::CPU_OPTION_TABLE;
use nodetopo_engine::cpumanager::{ReservedCpus, StaticPolicyOptions};
use nodetopo_engine::devicemanager::{DeviceSpec, MAX_DEVICES};
use nodetopo_engine::memorymanager::{MemoryResource, ReservedMemory};
use nodetopo_engine::options::{OptionKind, OptionTable};
use nodetopo_engine::report::{AllocationReport, RejectionReport};
use nodetopo_engine::topologymanager::options::TM_OPTION_TABLE;
use nodetopo_engine::topologymanager::{TmOptions, TmPolicy, TmScope};
use nodetopo_engine::{CpuSet, CpuTopology, Pod};

pub mod explain;
pub mod render;
mod workload;

pub use workload::{containers_workload, demo_workload};

/// Arguments of `plan`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Args {
    /// The directory that plays /sys [default: /sys].
    #[arg(long, value_name = "DIR", conflicts_with = "preset")]
    pub sysfs_root: Option<PathBuf>,
    /// A built-in machine instead of this one; `list` names them.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Workload and CPU manager settings.
    #[command(flatten)]
    pub cpu: Box<CpuArgs>,
    /// Topology-, memory- and device-manager settings.
    #[command(flatten)]
    pub managers: Box<ManagerArgs>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Show, for one container (`NAMESPACE/POD/CONTAINER` or `POD/CONTAINER` in namespace
    /// default), every hint provider's hints and the topology manager's merge, per variant.
    /// Text only: it cannot be combined with `-o`.
    #[arg(long, value_name = "POD/CONTAINER", conflicts_with = "output")]
    pub explain: Option<String>,
}

/// Output formats of `plan`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Tables for people.
    #[default]
    Table,
    /// The JSON document of DESIGN.md (`topology`, `variants`).
    Json,
}

/// The default variants, by name (`--policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantName {
    /// No CPU manager option.
    Packed,
    /// prefer-align-cpus-by-uncorecache.
    UncoreAligned,
    /// distribute-cpus-across-numa.
    NumaDistributed,
    /// distribute-cpus-across-cores.
    CoresDistributed,
}

/// Topology manager policies (`--topology-manager-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TmPolicyArg {
    /// No NUMA alignment (the kubelet's default).
    None,
    /// Prefer aligned placements, admit anyway.
    BestEffort,
    /// Admit only preferred (aligned) placements.
    Restricted,
    /// Admit only placements within one NUMA node.
    SingleNumaNode,
}

/// Topology manager scopes (`--topology-manager-scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TmScopeArg {
    /// Align each container on its own.
    Container,
    /// Align all containers of a pod together.
    Pod,
}

/// Memory Manager policies (`--memory-manager-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryPolicyArg {
    /// Memory is not a hint provider.
    None,
    /// Memory (and huge pages) give NUMA hints, as the kubelet's Static policy.
    Static,
}

fn value_name(v: &impl clap::ValueEnum) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// The workload and CPU manager arguments of `plan` (boxed in [`Args`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CpuArgs {
    /// Kubernetes YAML (Pod, Deployment, StatefulSet, DaemonSet, Job, ReplicaSet, List).
    #[arg(long, value_name = "FILE", conflicts_with = "containers")]
    pub pods: Option<PathBuf>,
    /// Guaranteed single-container pods with these CPU counts, e.g. `4,4,2`.
    #[arg(long, value_name = "N,N,...")]
    pub containers: Option<String>,
    /// Memory of each `--containers` pod (a Kubernetes quantity).
    #[arg(long, value_name = "QUANTITY", default_value = "256Mi")]
    pub container_memory: String,
    /// Reserved CPUs (`reservedSystemCPUs`), e.g. `0-1`.
    #[arg(long, value_name = "CPUS", conflicts_with = "reserved_count")]
    pub reserved: Option<String>,
    /// Number of reserved CPUs, taken topologically as the kubelet does [default: 1].
    #[arg(long, value_name = "N")]
    pub reserved_count: Option<usize>,
    /// One of the default variants only (default: all four side by side).
    #[arg(long, value_enum, value_name = "VARIANT")]
    pub policy: Option<VariantName>,
    /// CPU manager policy option, e.g. `full-pcpus-only=true` (repeatable); the names are the
    /// engine's option table, listed by `--help` ([`cpu_option_help`]).
    #[arg(long = "option", value_name = "NAME=VALUE", long_help = cpu_option_help())]
    pub options: Vec<String>,
}

/// The topology-manager, Memory Manager and device arguments of `plan` (boxed in [`Args`]
/// to keep the subcommand enum small).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ManagerArgs {
    /// Topology manager policy [default: best-effort, to show alignment; the kubelet's
    /// default is none].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub topology_manager_policy: Option<TmPolicyArg>,
    /// Topology manager scope [default: container, as the kubelet].
    #[arg(long, value_enum, value_name = "SCOPE")]
    pub topology_manager_scope: Option<TmScopeArg>,
    /// Topology manager option (repeatable): `prefer-closest-numa-nodes=true` or
    /// `max-allowable-numa-nodes=N`.
    #[arg(long = "topology-manager-option", value_name = "NAME=VALUE")]
    pub topology_manager_options: Vec<String>,
    /// Memory Manager policy [default: static when every NUMA node's memory size is known,
    /// else none].
    #[arg(long, value_enum, ignore_case = true, value_name = "POLICY")]
    pub memory_manager_policy: Option<MemoryPolicyArg>,
    /// Devices of an extended resource with their NUMA nodes:
    /// `example.com/gpu=0:2,1:2` (two on node 0, two on node 1; `-1:N` = no affinity).
    #[arg(long = "device", value_name = "RESOURCE=NODE:COUNT,...")]
    pub devices: Vec<String>,
}

/// The default variants: name and the CPU manager options they turn on.
pub const DEFAULT_VARIANTS: [(&str, &[&str]); 4] = [
    ("packed", &[]),
    ("uncore-aligned", &["prefer-align-cpus-by-uncorecache"]),
    ("numa-distributed", &["distribute-cpus-across-numa"]),
    ("cores-distributed", &["distribute-cpus-across-cores"]),
];

/// The topology-manager policy `plan` uses when none is given (see docs/plan.md).
pub const DEFAULT_TM_POLICY: TmPolicy = TmPolicy::BestEffort;

/// Memory the Memory Manager reserves on the first NUMA node by default: the kubelet's
/// default hard eviction threshold, which `--reserved-memory` must cover.
pub const DEFAULT_RESERVED_MEMORY: u64 = 100 << 20;

/// One configuration to try.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Name shown in the output.
    pub name: String,
    /// The CPU manager options as the kubelet's string map (only options set).
    pub cpu_options: BTreeMap<String, String>,
    /// The node configuration.
    pub config: NodeConfig,
}

/// The result of one variant.
#[derive(Debug, Clone)]
pub struct VariantResult {
    /// The variant.
    pub variant: Variant,
    /// Allocations, in admission order.
    pub allocations: Vec<AllocationReport>,
    /// Rejections, in admission order.
    pub rejections: Vec<RejectionReport>,
    /// What each rejection had to work with, in the order of `rejections`.
    pub rejection_context: Vec<RejectionContext>,
    /// The CPU pools before and after admitting the workload (`None` with `error`).
    pub pools: Option<(Pools, Pools)>,
    /// Set when the configuration itself is invalid on this machine.
    pub error: Option<String>,
}

/// The free CPUs a rejected pod met: the numbers a rejection message is explained with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectionContext {
    /// Free (assignable) CPUs per NUMA node just before the pod was tried: (node id, count).
    pub free_by_numa: Vec<(usize, usize)>,
}

/// Everything `plan` computed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The machine.
    pub topology: CpuTopology,
    /// Where it came from (`/sys`, a directory, `preset NAME`).
    pub source: String,
    /// The workload, in admission order.
    pub pods: Vec<Pod>,
    /// What the workload is (`--containers 4,4,2`, a file, the demo).
    pub workload: String,
    /// The reserved CPUs as given.
    pub reserved: ReservedCpus,
    /// Notes printed before the results (adjusted defaults and the like).
    pub notes: Vec<String>,
    /// One result per variant.
    pub results: Vec<VariantResult>,
}

/// Runs `plan`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.preset.as_deref() == Some("list") {
        for p in nodetopo_engine::presets::list() {
            println!("{:<24} {}", p.name, p.summary);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let plan = build(&args)?;
    let text = match (args.output, &args.explain) {
        (_, Some(target)) => explain::explain(&plan, target)?,
        (OutputFormat::Json, None) => render::json(&plan)? + "\n",
        (OutputFormat::Table, None) => render::table(&plan),
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed pipe (`plan | head`) is not an error worth a message.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing the plan to stdout")
        }
        _ => {}
    }
    // A configuration no variant can run is an error, not a table of refusals.
    if let Some(first) = plan.results.iter().find_map(|r| r.error.as_ref()) {
        if plan.results.iter().all(|r| r.error.is_some()) {
            bail!(
                "no variant can run on this machine (CPUs {}): {first}",
                plan.topology.all_cpus()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the inputs and computes every variant.
pub fn build(args: &Args) -> anyhow::Result<Plan> {
    let (topology, source) = match (&args.preset, &args.sysfs_root) {
        (Some(name), _) => (
            nodetopo_engine::presets::build(name)?,
            format!("preset {name}"),
        ),
        (None, root) => {
            let root = root.clone().unwrap_or_else(|| PathBuf::from("/sys"));
            let t = nodetopo_engine::sysfs::discover(&root)
                .with_context(|| format!("discovering the topology under {}", root.display()))?;
            (t, root.display().to_string())
        }
    };
    let (pods, workload) = match (&args.cpu.pods, &args.cpu.containers) {
        (Some(path), _) => {
            let text = crate::pods::read_pod_file(path)
                .with_context(|| format!("reading --pods {}", path.display()))?;
            let mut pods = Vec::new();
            for k in crate::pods::pods_from_yaml(&text)
                .with_context(|| format!("reading --pods {}", path.display()))?
            {
                pods.push(
                    crate::pods::engine_pod(&k.fields())
                        .with_context(|| format!("converting a pod of {}", path.display()))?,
                );
            }
            (pods, format!("--pods {}", path.display()))
        }
        (None, Some(list)) => {
            let memory = nodetopo_engine::quantity::parse_units(&args.cpu.container_memory)
                .with_context(|| format!("--container-memory {:?}", args.cpu.container_memory))?;
            (
                containers_workload(list, memory)?,
                format!("--containers {list}"),
            )
        }
        (None, None) => {
            let reserved_guess = args.cpu.reserved_count.unwrap_or(1);
            (
                demo_workload(&topology, reserved_guess),
                "built-in demo".to_string(),
            )
        }
    };
    let reserved = match (&args.cpu.reserved, args.cpu.reserved_count) {
        (Some(s), _) => {
            ReservedCpus::Explicit(CpuSet::parse(s).with_context(|| format!("--reserved {s:?}"))?)
        }
        (None, n) => ReservedCpus::Count(n.unwrap_or(1)),
    };
    let mut notes = Vec::new();
    let variants = variants(args, &topology, &reserved, &mut notes)?;
    let results = variants
        .into_iter()
        .map(|v| admit_all(&topology, &pods, v))
        .collect();
    Ok(Plan {
        topology,
        source,
        pods,
        workload,
        reserved,
        notes,
        results,
    })
}

/// Admits every pod, in order, under one variant.
pub fn admit_all(topology: &CpuTopology, pods: &[Pod], variant: Variant) -> VariantResult {
    let mut admitter = match NodeAdmitter::new(topology.clone(), &variant.config) {
        Ok(a) => a,
        Err(e) => {
            return VariantResult {
                variant,
                allocations: Vec::new(),
                rejections: Vec::new(),
                rejection_context: Vec::new(),
                pools: None,
                error: Some(e.to_string()),
            }
        }
    };
    let start = admitter.pools();
    let mut allocations = Vec::new();
    let mut rejections = Vec::new();
    let mut rejection_context = Vec::new();
    for p in pods {
        let free = admitter.pools().free;
        let r = admitter.admit(p);
        for _ in &r.rejections {
            rejection_context.push(RejectionContext {
                free_by_numa: topology
                    .numa_nodes()
                    .iter()
                    .map(|n| (n.id, n.cpus.intersection(&free).len()))
                    .collect(),
            });
        }
        allocations.extend(r.allocations);
        rejections.extend(r.rejections);
    }
    VariantResult {
        variant,
        allocations,
        rejections,
        rejection_context,
        pools: Some((start, admitter.pools())),
        error: None,
    }
}

fn key_values(flag: &str, items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for item in items {
        let Some((k, v)) = item.split_once('=') else {
            bail!("{flag} {item:?}: expected NAME=VALUE");
        };
        if k.is_empty() {
            bail!("{flag} {item:?}: empty option name");
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// The booleans the kubelet accepts (Go's `strconv.ParseBool`).
pub const KUBELET_BOOLS: [&str; 12] = [
    "true", "false", "1", "0", "t", "f", "T", "F", "TRUE", "FALSE", "True", "False",
];

/// Checks an option's name and value before the engine sees it, so the message can list
/// what is valid (the engine's own messages are the kubelet's, word for word).
fn check_option(flag: &str, name: &str, value: &str, known: &OptionTable) -> anyhow::Result<()> {
    let Some(option) = known.get(name) else {
        let names: Vec<&str> = known.options.iter().map(|o| o.name).collect();
        bail!(
            "{flag} {name}={value}: unknown option {name:?}; known options: {}",
            names.join(", ")
        );
    };
    match option.kind {
        OptionKind::Bool if !KUBELET_BOOLS.contains(&value) => bail!(
            "{flag} {name}={value}: {value:?} is not a boolean; the kubelet accepts {}",
            KUBELET_BOOLS.join(", ")
        ),
        OptionKind::Count { .. } if value.parse::<usize>().is_err() => {
            bail!("{flag} {name}={value}: {value:?} is not a whole number (e.g. {name}=16)")
        }
        _ => Ok(()),
    }
}

/// Builds the variants: the four defaults, or one when a variant (`--policy`), a CPU
/// option or a topology-manager setting is given explicitly.
fn variants(
    args: &Args,
    topology: &CpuTopology,
    reserved: &ReservedCpus,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Variant>> {
    let user_options = key_values("--option", &args.cpu.options)?;
    for (k, v) in &user_options {
        check_option("--option", k, v, &CPU_OPTION_TABLE)?;
    }
    let mut tm_map = key_values(
        "--topology-manager-option",
        &args.managers.topology_manager_options,
    )?;
    for (k, v) in &tm_map {
        check_option("--topology-manager-option", k, v, &TM_OPTION_TABLE)?;
    }
    let tm_policy: TmPolicy = match &args.managers.topology_manager_policy {
        Some(p) => value_name(p).parse().context("--topology-manager-policy")?,
        None => DEFAULT_TM_POLICY,
    };
    let tm_scope: TmScope = match &args.managers.topology_manager_scope {
        Some(s) => value_name(s).parse().context("--topology-manager-scope")?,
        None => TmScope::Container,
    };
    let numa_count = topology.numa_nodes().len();
    if numa_count > 8
        && !tm_map.contains_key("max-allowable-numa-nodes")
        && tm_policy != TmPolicy::None
    {
        // The kubelet refuses more than 8 NUMA nodes unless told otherwise; nodetopo's merge
        // does not need the limit, so plan raises it and says so.
        tm_map.insert("max-allowable-numa-nodes".into(), numa_count.to_string());
        notes.push(format!(
            "this machine has {numa_count} NUMA nodes: plan sets topology-manager option max-allowable-numa-nodes={numa_count} (the kubelet's default limit is 8)"
        ));
    }
    let tm_options = TmOptions::from_map(&tm_map).context("--topology-manager-option")?;
    let devices = parse_devices(&args.managers.devices, topology)?;
    let memory = memory_config(args, topology, notes)?;
    let base = NodeConfig {
        cpu: CpuPolicyConfig::None,
        tm_policy,
        tm_scope,
        tm_options,
        devices,
        device_resources: Vec::new(),
        memory,
    };
    let explicit = args.cpu.policy.is_some()
        || !args.cpu.options.is_empty()
        || args.managers.topology_manager_policy.is_some()
        || args.managers.topology_manager_scope.is_some()
        || !args.managers.topology_manager_options.is_empty();
    let chosen: Vec<(String, Vec<&str>)> = match (&args.cpu.policy, explicit) {
        (Some(name), _) => {
            let name = value_name(name);
            let Some((n, opts)) = DEFAULT_VARIANTS.iter().find(|(n, _)| *n == name) else {
                bail!("--policy {name:?} has no default variant");
            };
            vec![(n.to_string(), opts.to_vec())]
        }
        (None, true) => vec![("custom".to_string(), Vec::new())],
        (None, false) => DEFAULT_VARIANTS
            .iter()
            .map(|(n, o)| (n.to_string(), o.to_vec()))
            .collect(),
    };
    chosen
        .into_iter()
        .map(|(name, on)| {
            let mut map: BTreeMap<String, String> = on
                .iter()
                .map(|o| (o.to_string(), "true".to_string()))
                .collect();
            map.extend(user_options.clone());
            let options = StaticPolicyOptions::from_map(&map).context("--option")?;
            let mut config = base.clone();
            config.cpu = CpuPolicyConfig::Static {
                reserved: reserved.clone(),
                options,
            };
            Ok(Variant {
                name,
                cpu_options: map,
                config,
            })
        })
        .collect()
}

fn memory_config(
    args: &Args,
    topology: &CpuTopology,
    notes: &mut Vec<String>,
) -> anyhow::Result<MemoryManagerConfig> {
    let known = topology
        .numa_nodes()
        .iter()
        .all(|n| n.memory_bytes.is_some());
    let policy = args.managers.memory_manager_policy.unwrap_or(if known {
        MemoryPolicyArg::Static
    } else {
        MemoryPolicyArg::None
    });
    match policy {
        MemoryPolicyArg::None => Ok(MemoryManagerConfig::None),
        MemoryPolicyArg::Static => {
            if !known {
                bail!("--memory-manager-policy static needs every NUMA node's memory size, which this topology lacks");
            }
            let mut reserved = ReservedMemory::new();
            if let Some(first) = topology.numa_nodes().first() {
                reserved
                    .entry(first.id)
                    .or_default()
                    .insert(MemoryResource::Memory, DEFAULT_RESERVED_MEMORY);
            }
            if args.managers.memory_manager_policy.is_none() {
                notes.push(format!(
                    "memory manager: static, reserving 100Mi on NUMA node {} (pass --memory-manager-policy none to ignore memory)",
                    topology.numa_nodes().first().map_or(0, |n| n.id)
                ));
            }
            Ok(MemoryManagerConfig::Static { reserved })
        }
    }
}

/// `--device example.com/gpu=0:2,1:2`: devices named `<last path segment>-<n>`.
fn parse_devices(items: &[String], topology: &CpuTopology) -> anyhow::Result<Vec<DeviceSpec>> {
    let mut out = Vec::new();
    for item in items {
        let Some((resource, spec)) = item.split_once('=') else {
            bail!("--device {item:?}: expected RESOURCE=NODE:COUNT[,NODE:COUNT...]");
        };
        if resource.is_empty() {
            bail!("--device {item:?}: empty resource name");
        }
        let base = resource.rsplit('/').next().unwrap_or(resource).to_string();
        let mut n = 0;
        for part in spec.split(',') {
            let Some((node, count)) = part.split_once(':') else {
                bail!("--device {item:?}: {part:?} is not NODE:COUNT");
            };
            let node: i64 = node
                .trim()
                .parse()
                .with_context(|| format!("--device {item:?}: NUMA node {node:?}"))?;
            let count: usize = count
                .trim()
                .parse()
                .with_context(|| format!("--device {item:?}: count {count:?}"))?;
            if count > MAX_DEVICES || out.len() + count > MAX_DEVICES {
                bail!("--device {item:?}: count {count} makes more than {MAX_DEVICES} devices, the most a node may list");
            }
            let numa_nodes = if node < 0 {
                Vec::new()
            } else {
                let id = node as usize;
                if !topology.numa_nodes().iter().any(|x| x.id == id) {
                    bail!("--device {item:?}: NUMA node {id} does not exist on this machine");
                }
                vec![id]
            };
            for _ in 0..count {
                out.push(DeviceSpec {
                    resource: resource.to_string(),
                    id: format!("{base}-{n}"),
                    numa_nodes: numa_nodes.clone(),
                    healthy: true,
                });
                n += 1;
            }
        }
    }
    Ok(out)
}

/// The long help of `--option`: the CPU manager option names of the engine's table, in the
/// kubelet's order, so a new option appears without an edit here.
pub fn cpu_option_help() -> String {
    let names: Vec<&str> = CPU_OPTION_TABLE.options.iter().map(|o| o.name).collect();
    format!(
        "CPU manager policy option, e.g. `full-pcpus-only=true` (repeatable). Names: {}; values as the kubelet reads them (true/false, 1/0, t/f, TRUE/FALSE, True/False).",
        names.join(", ")
    )
}
