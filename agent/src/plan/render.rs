//! `plan` output: the table (one section per variant, a side-by-side comparison, a
//! summary) and the JSON shape of DESIGN.md.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use nodetopo_engine::admission::{CpuManagerConfig, MemoryManagerConfig};
use nodetopo_engine::cpumanager::ReservedCpus;
use nodetopo_engine::report::{AllocationReport, HintReport, RejectionReport, TopologyReport};
use serde::Serialize;

use super::{Plan, VariantResult};

/// `cpuManager` as in a NodeResourcePolicy spec.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CpuManagerJson {
    policy: &'static str,
    options: BTreeMap<String, String>,
    #[serde(rename = "reservedSystemCPUs", skip_serializing_if = "Option::is_none")]
    reserved_system_cpus: Option<String>,
    #[serde(rename = "reservedCPUs", skip_serializing_if = "Option::is_none")]
    reserved_cpus: Option<usize>,
}

/// `topologyManager` as in a NodeResourcePolicy spec.
#[derive(Debug, Serialize)]
struct TopologyManagerJson {
    policy: String,
    scope: String,
    options: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct VariantJson<'a> {
    name: &'a str,
    cpu_manager: CpuManagerJson,
    topology_manager: TopologyManagerJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_manager: Option<BTreeMap<&'static str, &'static str>>,
    allocations: &'a [AllocationReport],
    rejections: &'a [RejectionReport],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct PlanJson<'a> {
    topology: TopologyReport,
    variants: Vec<VariantJson<'a>>,
}

fn variant_json(r: &VariantResult) -> VariantJson<'_> {
    let c = &r.variant.config;
    let (reserved_system_cpus, reserved_cpus) = match &c.cpu {
        CpuManagerConfig::Static {
            reserved: ReservedCpus::Explicit(s),
            ..
        } => (Some(s.to_string()), None),
        CpuManagerConfig::Static {
            reserved: ReservedCpus::Count(n),
            ..
        } => (None, Some(*n)),
        CpuManagerConfig::None => (None, None),
    };
    let mut tm_options = BTreeMap::new();
    if c.tm_options.prefer_closest_numa_nodes {
        tm_options.insert("prefer-closest-numa-nodes".to_string(), "true".to_string());
    }
    if c.tm_options.max_allowable_numa_nodes != 8 {
        tm_options.insert(
            "max-allowable-numa-nodes".to_string(),
            c.tm_options.max_allowable_numa_nodes.to_string(),
        );
    }
    VariantJson {
        name: &r.variant.name,
        cpu_manager: CpuManagerJson {
            policy: match c.cpu {
                CpuManagerConfig::None => "none",
                CpuManagerConfig::Static { .. } => "static",
            },
            options: r.variant.cpu_options.clone(),
            reserved_system_cpus,
            reserved_cpus,
        },
        topology_manager: TopologyManagerJson {
            policy: c.tm_policy.to_string(),
            scope: c.tm_scope.to_string(),
            options: tm_options,
        },
        memory_manager: match c.memory {
            MemoryManagerConfig::None => None,
            MemoryManagerConfig::Static { .. } => Some(BTreeMap::from([("policy", "Static")])),
        },
        allocations: &r.allocations,
        rejections: &r.rejections,
        error: r.error.as_deref(),
    }
}

/// The JSON document.
pub fn json(plan: &Plan) -> anyhow::Result<String> {
    let doc = PlanJson {
        topology: TopologyReport::from_topology(&plan.topology),
        variants: plan.results.iter().map(variant_json).collect(),
    };
    Ok(serde_json::to_string_pretty(&doc)?)
}

fn ids(v: &[u64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn hint(h: &Option<HintReport>) -> String {
    match h {
        None => "-".into(),
        Some(h) => {
            let nodes = h
                .numa_nodes
                .as_ref()
                .map_or("any".to_string(), |n| format!("{{{}}}", ids(n)));
            format!("{nodes} {}", if h.preferred { "pref" } else { "non-pref" })
        }
    }
}

fn aligned(a: &AllocationReport) -> String {
    let flags: Vec<&str> = [
        (a.aligned.physical_cpu, "cores"),
        (a.aligned.uncore_cache, "llc"),
        (a.aligned.numa_node, "numa"),
        (a.aligned.socket, "socket"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if flags.is_empty() {
        "-".into()
    } else {
        flags.join(",")
    }
}

/// Lays out rows as left-aligned columns separated by two spaces.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// What happened to one container under one variant.
enum Outcome<'a> {
    Exclusive(&'a AllocationReport),
    Shared,
    Rejected(&'a RejectionReport),
    NotReached,
}

/// A variant's outcomes by pod and container: looked up once per table row, so the table
/// of n containers costs O(n) lookups, not O(n^2) scans (40,000 containers took minutes).
struct Outcomes<'a> {
    allocations: HashMap<(&'a str, &'a str), &'a AllocationReport>,
    /// The first rejection of each pod.
    rejections: HashMap<&'a str, &'a RejectionReport>,
}

impl<'a> Outcomes<'a> {
    fn new(r: &'a VariantResult) -> Self {
        let mut allocations = HashMap::new();
        for a in &r.allocations {
            allocations
                .entry((a.pod_uid.as_str(), a.container.as_str()))
                .or_insert(a);
        }
        let mut rejections = HashMap::new();
        for x in &r.rejections {
            rejections.entry(x.pod_uid.as_str()).or_insert(x);
        }
        Self {
            allocations,
            rejections,
        }
    }

    fn get(&self, pod_uid: &str, container: &str) -> Outcome<'a> {
        if let Some(a) = self.allocations.get(&(pod_uid, container)) {
            return Outcome::Exclusive(a);
        }
        match self.rejections.get(pod_uid) {
            Some(x) if x.container == container => Outcome::Rejected(x),
            Some(_) => Outcome::NotReached,
            None => Outcome::Shared,
        }
    }
}

/// The table.
pub fn table(plan: &Plan) -> String {
    let t = &plan.topology;
    let rep = TopologyReport::from_topology(t);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "machine: {} ({} CPUs, {} cores, {} thread(s)/core, {} socket(s), {} NUMA node(s), {} uncore cache(s))",
        plan.source,
        t.cpus().len(),
        rep.cores,
        rep.threads_per_core,
        rep.sockets.len(),
        rep.numa_nodes.len(),
        rep.uncore_caches.len()
    );
    let reserved = match &plan.reserved {
        ReservedCpus::Explicit(s) => format!("reserved {s}"),
        ReservedCpus::Count(n) => format!("{n} reserved CPU(s), taken topologically"),
    };
    let containers: usize = plan.pods.iter().map(|p| p.all_containers().count()).sum();
    let _ = writeln!(
        out,
        "workload: {} ({} pod(s), {} container(s)); {reserved}",
        plan.workload,
        plan.pods.len(),
        containers
    );
    for n in &plan.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for r in &plan.results {
        out.push('\n');
        out.push_str(&variant_section(plan, r));
    }
    if plan.results.len() > 1 {
        out.push('\n');
        out.push_str(&side_by_side(plan));
    }
    out
}

fn variant_section(plan: &Plan, r: &VariantResult) -> String {
    let c = &r.variant.config;
    let opts: Vec<String> = r
        .variant
        .cpu_options
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== {}: cpu-manager static{}; topology-manager {} (scope {})",
        r.variant.name,
        if opts.is_empty() {
            String::new()
        } else {
            format!(" [{}]", opts.join(" "))
        },
        c.tm_policy,
        c.tm_scope
    );
    if let Some(e) = &r.error {
        let _ = writeln!(out, "configuration rejected: {e}");
        return out;
    }
    let mut rows = vec![[
        "POD",
        "CONTAINER",
        "CPUS",
        "NUMA",
        "UNCORE",
        "ALIGNED",
        "HINT",
        "RESULT",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    let outcomes = Outcomes::new(r);
    for p in &plan.pods {
        for c in p.all_containers() {
            let row = match outcomes.get(&p.uid, &c.name) {
                Outcome::Exclusive(a) => vec![
                    a.cpus.clone(),
                    ids(&a.numa_nodes),
                    ids(&a.uncore_caches),
                    aligned(a),
                    hint(&a.hint),
                    "admitted".into(),
                ],
                Outcome::Shared => vec![
                    "shared".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "admitted (shared pool)".into(),
                ],
                Outcome::Rejected(x) => vec![
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("rejected: {}", x.reason),
                ],
                Outcome::NotReached => vec![
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "not admitted (pod rejected)".into(),
                ],
            };
            let mut full = vec![p.key(), c.name.clone()];
            full.extend(row);
            rows.push(full);
        }
    }
    out.push_str(&columns(&rows));
    let n = r.allocations.len();
    let count = |f: fn(&AllocationReport) -> bool| r.allocations.iter().filter(|a| f(a)).count();
    let _ = writeln!(
        out,
        "summary: {n} exclusive container(s): {}/{n} in one uncore cache, {}/{n} in one NUMA node, {}/{n} on whole cores; {} rejected",
        count(|a| a.aligned.uncore_cache),
        count(|a| a.aligned.numa_node),
        count(|a| a.aligned.physical_cpu),
        r.rejections.len()
    );
    for x in &r.rejections {
        let _ = writeln!(
            out,
            "  rejected {} {}: {}: {}",
            x.pod, x.container, x.reason, x.message
        );
    }
    out
}

fn side_by_side(plan: &Plan) -> String {
    let mut header = vec!["POD/CONTAINER".to_string()];
    header.extend(plan.results.iter().map(|r| r.variant.name.clone()));
    let mut rows = vec![header];
    let outcomes: Vec<Outcomes> = plan.results.iter().map(Outcomes::new).collect();
    for p in &plan.pods {
        for c in p.all_containers() {
            let mut row = vec![format!("{}/{}", p.key(), c.name)];
            for (r, o) in plan.results.iter().zip(&outcomes) {
                let cell = if r.error.is_some() {
                    "invalid config".to_string()
                } else {
                    match o.get(&p.uid, &c.name) {
                        Outcome::Exclusive(a) => {
                            format!("{} ({} llc)", a.cpus, a.uncore_caches.len())
                        }
                        Outcome::Shared => "shared".into(),
                        Outcome::Rejected(x) => x.reason.clone(),
                        Outcome::NotReached => "-".into(),
                    }
                };
                row.push(cell);
            }
            rows.push(row);
        }
    }
    let mut out = String::from("== side by side (CPUs, and how many uncore caches they span)\n");
    out.push_str(&columns(&rows));
    out
}
