//! `plan` output: the table (one section per variant, a side-by-side comparison, a
//! summary) and the JSON shape of DESIGN.md.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use nodetopo_engine::admission::{CpuPolicyConfig, MemoryManagerConfig};
use nodetopo_engine::cpumanager::ReservedCpus;
use nodetopo_engine::report::{AllocationReport, HintReport, RejectionReport, TopologyReport};
use nodetopo_engine::spec;
use serde::Serialize;

use nodetopo_engine::admission::Pools;
use nodetopo_engine::{Container, CpuSet, Pod, QosClass};

use super::{Plan, RejectionContext, VariantResult};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct VariantJson<'a> {
    name: &'a str,
    cpu_manager: spec::CpuManagerConfig,
    topology_manager: spec::TopologyManagerConfig,
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

/// The variant's configuration as the NodeResourcePolicy spec states it (the engine's spec
/// type, so `plan -o json` prints exactly the API's shape).
fn variant_json(r: &VariantResult) -> anyhow::Result<VariantJson<'_>> {
    let c = &r.variant.config;
    let (policy, reserved_system_cpus, reserved_cpus) = match &c.cpu {
        CpuPolicyConfig::Static {
            reserved: ReservedCpus::Explicit(s),
            ..
        } => (spec::CpuManagerPolicy::Static, Some(s.to_string()), None),
        CpuPolicyConfig::Static {
            reserved: ReservedCpus::Count(n),
            ..
        } => {
            let n = i32::try_from(*n).map_err(|_| {
                anyhow::anyhow!(
                    "variant {}: reserved CPU count {n} does not fit the spec's reservedCPUs (int32)",
                    r.variant.name
                )
            })?;
            (spec::CpuManagerPolicy::Static, None, Some(n))
        }
        CpuPolicyConfig::None => (spec::CpuManagerPolicy::None, None, None),
    };
    Ok(VariantJson {
        name: &r.variant.name,
        cpu_manager: spec::CpuManagerConfig {
            policy,
            options: r.variant.cpu_options.clone(),
            reserved_system_cpus,
            reserved_cpus,
        },
        topology_manager: spec::TopologyManagerConfig {
            policy: c.tm_policy,
            scope: c.tm_scope,
            options: c.tm_options.to_map(),
        },
        memory_manager: match c.memory {
            MemoryManagerConfig::None => None,
            MemoryManagerConfig::Static { .. } => Some(BTreeMap::from([("policy", "Static")])),
        },
        allocations: &r.allocations,
        rejections: &r.rejections,
        error: r.error.as_deref(),
    })
}

/// The JSON document.
pub fn json(plan: &Plan) -> anyhow::Result<String> {
    let doc = PlanJson {
        topology: TopologyReport::from_topology(&plan.topology),
        variants: plan
            .results
            .iter()
            .map(variant_json)
            .collect::<anyhow::Result<_>>()?,
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

/// A variant's outcomes by pod and container: looked up once per table row, so a table
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

/// A CPU amount in Kubernetes notation (`2`, `500m`).
fn cpu_amount(millis: u64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Why a container that was admitted got no exclusive CPUs: the static policy gives
/// exclusive CPUs only to containers of Guaranteed pods that ask for whole CPUs.
pub fn shared_reason(pod: &Pod, c: &Container) -> String {
    match pod.qos_class() {
        QosClass::Guaranteed => match c.requests.cpu_millis {
            Some(m) if m % 1000 != 0 => format!(
                "CPU request {} is not a whole number of CPUs",
                cpu_amount(m)
            ),
            Some(_) => "no exclusive CPUs (see --explain)".into(),
            None => "no CPU request".into(),
        },
        QosClass::BestEffort => "pod is BestEffort (no CPU or memory requests or limits)".into(),
        QosClass::Burstable => format!("pod is Burstable, not Guaranteed: {}", not_guaranteed(pod)),
    }
}

/// The first thing that keeps a pod out of the Guaranteed QoS class (every container has
/// CPU and memory limits, and the pod's requests equal its limits).
fn not_guaranteed(pod: &Pod) -> String {
    for c in pod.all_containers() {
        if c.limits.cpu_millis.is_none_or(|v| v == 0) {
            return format!("container {} has no CPU limit", c.name);
        }
        if c.limits.memory_bytes.is_none_or(|v| v == 0) {
            return format!("container {} has no memory limit", c.name);
        }
        if c.requests.cpu_millis != c.limits.cpu_millis {
            return format!(
                "container {} requests {} CPU but its limit is {}",
                c.name,
                c.requests.cpu_millis.map_or("no".to_string(), cpu_amount),
                c.limits.cpu_millis.map_or("none".to_string(), cpu_amount)
            );
        }
        if c.requests.memory_bytes != c.limits.memory_bytes {
            return format!(
                "container {}'s memory request differs from its limit",
                c.name
            );
        }
    }
    "requests differ from limits".into()
}

/// The numbers behind a rejection: what the container asked and what the NUMA nodes had.
fn rejection_numbers(
    plan: &Plan,
    r: &VariantResult,
    x: &RejectionReport,
    ctx: Option<&RejectionContext>,
) -> String {
    let mut parts = Vec::new();
    let pod = plan.pods.iter().find(|p| p.uid == x.pod_uid);
    let container = pod.and_then(|p| p.all_containers().find(|c| c.name == x.container));
    if let Some(c) = container {
        let cpu = c.requests.cpu_millis.map_or("no".to_string(), cpu_amount);
        let plural = if c.requests.cpu_millis == Some(1000) {
            ""
        } else {
            "s"
        };
        let mut asked = format!("asked for {cpu} CPU{plural}");
        if let Some(m) = c.requests.memory_bytes {
            let _ = write!(asked, " and {} of memory", bytes(m));
        }
        if r.variant.config.tm_scope == nodetopo_engine::topologymanager::TmScope::Pod {
            if let Some(p) = pod {
                let total: u64 = p
                    .containers
                    .iter()
                    .filter_map(|c| c.requests.cpu_millis)
                    .sum();
                let _ = write!(
                    asked,
                    " (pod scope: its app containers ask {} CPU together)",
                    cpu_amount(total)
                );
            }
        }
        parts.push(asked);
    }
    if let Some(ctx) = ctx {
        let per: Vec<String> = ctx
            .free_by_numa
            .iter()
            .map(|(id, n)| format!("node {id}: {n}"))
            .collect();
        let total: usize = ctx.free_by_numa.iter().map(|(_, n)| n).sum();
        let best = ctx
            .free_by_numa
            .iter()
            .max_by_key(|(id, n)| (*n, std::cmp::Reverse(*id)));
        let mut had = format!("free CPUs before this pod: {total} ({})", per.join(", "));
        if let (Some((id, n)), true) = (best, ctx.free_by_numa.len() > 1) {
            let _ = write!(had, "; the best NUMA node, {id}, had {n}");
        }
        parts.push(had);
    }
    parts.join("; ")
}

fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (u, size) in UNITS {
        if n >= size && n % size == 0 {
            return format!("{}{u}", n / size);
        }
    }
    n.to_string()
}

/// How the reserved CPUs were chosen.
fn reserved_how(plan: &Plan) -> String {
    match &plan.reserved {
        ReservedCpus::Explicit(_) => "given by --reserved".into(),
        ReservedCpus::Count(n) => format!("{n} taken topologically, as the kubelet does"),
    }
}

/// Two lines on the CPU pools of a variant (or of every variant, when they agree).
fn pools_line(plan: &Plan, start: &Pools) -> String {
    let includes = if !start.reserved.is_empty() && start.reserved.is_subset(&start.shared) {
        "; it includes the reserved CPUs, as in the kubelet"
    } else {
        ""
    };
    format!(
        "reserved CPUs: {} ({})\nshared pool:   {} (where non-exclusive containers run{includes}); {} CPU(s) assignable to exclusive containers",
        or_none(&start.reserved),
        reserved_how(plan),
        or_none(&start.shared),
        start.free.len()
    )
}

fn or_none(s: &CpuSet) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.to_string()
    }
}

/// The legend printed after the tables.
pub const LEGEND: &str = "legend:
  CPUS     the container's exclusive CPUs (kernel list syntax); `shared` = it runs in the shared pool
  NUMA     NUMA node ids its CPUs are on;  UNCORE  uncore (last-level, L3) cache ids
  ALIGNED  the boundaries its CPUs stay within: cores = whole physical cores only (no half-used
           SMT core), llc = one uncore cache, numa = one NUMA node, socket = one socket
  HINT     the topology manager's merged hint: {0,1} = NUMA nodes 0 and 1, pref = every provider
           prefers it, non-pref = accepted but not preferred, any = no NUMA preference
  `plan --explain POD/CONTAINER` shows each provider's hints and the merge for one container.
";

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
    let containers: usize = plan.pods.iter().map(|p| p.all_containers().count()).sum();
    let _ = writeln!(
        out,
        "workload: {} ({} pod(s), {} container(s))",
        plan.workload,
        plan.pods.len(),
        containers
    );
    // The pools before admission, when every variant agrees on them.
    let starts: Vec<&Pools> = plan
        .results
        .iter()
        .filter_map(|r| r.pools.as_ref().map(|(s, _)| s))
        .collect();
    let common = starts
        .first()
        .filter(|first| starts.iter().all(|s| s == *first));
    if let Some(start) = common {
        let _ = writeln!(out, "{}", pools_line(plan, start));
    }
    for n in &plan.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let groups = group_identical(plan);
    for g in &groups {
        out.push('\n');
        out.push_str(&group_section(plan, g, common.is_none()));
    }
    if groups.len() > 1 {
        out.push('\n');
        out.push_str(&side_by_side(plan, &groups));
    }
    out.push('\n');
    out.push_str(LEGEND);
    out
}

/// Variants whose placements, rejections and pools are the same, in first-seen order.
fn group_identical(plan: &Plan) -> Vec<Vec<&VariantResult>> {
    let mut groups: Vec<(String, Vec<&VariantResult>)> = Vec::new();
    for r in &plan.results {
        let key = variant_body(plan, r);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// The configuration of a variant in one line.
pub fn variant_config(r: &VariantResult) -> String {
    let c = &r.variant.config;
    let opts: Vec<String> = r
        .variant
        .cpu_options
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "cpu-manager static{}; topology-manager {} (scope {})",
        if opts.is_empty() {
            String::new()
        } else {
            format!(" [{}]", opts.join(" "))
        },
        c.tm_policy,
        c.tm_scope
    )
}

fn group_section(plan: &Plan, g: &[&VariantResult], pools_differ: bool) -> String {
    let mut out = String::new();
    if let [only] = g {
        let _ = writeln!(out, "== {}: {}", only.variant.name, variant_config(only));
    } else {
        let names: Vec<&str> = g.iter().map(|r| r.variant.name.as_str()).collect();
        let _ = writeln!(
            out,
            "== {} ({} variants, identical results)",
            names.join(", "),
            g.len()
        );
        let w = names.iter().map(|n| n.len()).max().unwrap_or(0) + 1;
        for r in g {
            let _ = writeln!(
                out,
                "   {:<w$} {}",
                format!("{}:", r.variant.name),
                variant_config(r)
            );
        }
    }
    if pools_differ {
        if let Some((start, _)) = &g[0].pools {
            let _ = writeln!(out, "{}", pools_line(plan, start));
        }
    }
    out.push_str(&variant_body(plan, g[0]));
    out
}

/// A variant's table, summary and rejection details (what identical variants share).
fn variant_body(plan: &Plan, r: &VariantResult) -> String {
    let mut out = String::new();
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
    let dash = || "-".to_string();
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
                    "exclusive".into(),
                ],
                Outcome::Shared => vec![
                    "shared".into(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    format!("shared pool: {}", shared_reason(p, c)),
                ],
                Outcome::Rejected(x) => vec![
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    format!("rejected: {}", x.reason),
                ],
                Outcome::NotReached => vec![
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    "not admitted (another container of the pod was rejected)".into(),
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
    if let Some((_, end)) = &r.pools {
        let _ = writeln!(
            out,
            "after admission: exclusive {}; shared pool {}",
            or_none(&end.exclusive),
            or_none(&end.shared)
        );
    }
    for (i, x) in r.rejections.iter().enumerate() {
        let _ = writeln!(
            out,
            "  rejected {} {}: {}: {}",
            x.pod, x.container, x.reason, x.message
        );
        let _ = writeln!(
            out,
            "    {}",
            rejection_numbers(plan, r, x, r.rejection_context.get(i))
        );
    }
    out
}

fn side_by_side(plan: &Plan, groups: &[Vec<&VariantResult>]) -> String {
    let mut header = vec!["POD/CONTAINER".to_string()];
    header.extend(groups.iter().map(|g| {
        g.iter()
            .map(|r| r.variant.name.as_str())
            .collect::<Vec<_>>()
            .join("=")
    }));
    let mut rows = vec![header];
    let outcomes: Vec<Outcomes> = groups.iter().map(|g| Outcomes::new(g[0])).collect();
    for p in &plan.pods {
        for c in p.all_containers() {
            let mut row = vec![format!("{}/{}", p.key(), c.name)];
            for (g, o) in groups.iter().zip(&outcomes) {
                let r = g[0];
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
    let mut out = String::from(
        "== side by side (CPUs, and how many uncore caches they span; `a=b` = identical variants)\n",
    );
    out.push_str(&columns(&rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodetopo_engine::ResourceList;

    fn c(
        name: &str,
        req: (Option<u64>, Option<u64>),
        lim: (Option<u64>, Option<u64>),
    ) -> Container {
        Container {
            name: name.into(),
            requests: ResourceList {
                cpu_millis: req.0,
                memory_bytes: req.1,
                ..Default::default()
            },
            limits: ResourceList {
                cpu_millis: lim.0,
                memory_bytes: lim.1,
                ..Default::default()
            },
            restartable: false,
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            namespace: "default".into(),
            name: "p".into(),
            uid: "default/p".into(),
            init_containers: Vec::new(),
            containers,
        }
    }

    const MI: u64 = 1 << 20;

    #[test]
    fn every_shared_pool_placement_says_why() {
        let reason = |p: &Pod| shared_reason(p, &p.containers[0]);
        let frac = pod(vec![c("a", (Some(1500), Some(MI)), (Some(1500), Some(MI)))]);
        assert_eq!(
            reason(&frac),
            "CPU request 1500m is not a whole number of CPUs"
        );
        let no_mem = pod(vec![c("a", (Some(2000), None), (Some(2000), None))]);
        assert_eq!(
            reason(&no_mem),
            "pod is Burstable, not Guaranteed: container a has no memory limit"
        );
        let no_cpu_limit = pod(vec![c("a", (Some(2000), Some(MI)), (None, Some(MI)))]);
        assert_eq!(
            reason(&no_cpu_limit),
            "pod is Burstable, not Guaranteed: container a has no CPU limit"
        );
        let below = pod(vec![c("a", (Some(500), Some(MI)), (Some(1000), Some(MI)))]);
        assert_eq!(
            reason(&below),
            "pod is Burstable, not Guaranteed: container a requests 500m CPU but its limit is 1"
        );
        // The first container that breaks the rule is named, even when it is another one.
        let sidecar = pod(vec![
            c("a", (Some(2000), Some(MI)), (Some(2000), Some(MI))),
            c("b", (Some(100), Some(MI)), (Some(100), Some(2 * MI))),
        ]);
        assert_eq!(
            reason(&sidecar),
            "pod is Burstable, not Guaranteed: container b's memory request differs from its limit"
        );
        let none = pod(vec![c("a", (None, None), (None, None))]);
        assert_eq!(
            reason(&none),
            "pod is BestEffort (no CPU or memory requests or limits)"
        );
    }

    #[test]
    fn amounts_print_as_kubernetes_writes_them() {
        assert_eq!(cpu_amount(2000), "2");
        assert_eq!(cpu_amount(250), "250m");
        assert_eq!(bytes(256 * MI), "256Mi");
        assert_eq!(bytes(3 << 30), "3Gi");
        assert_eq!(bytes(1000), "1000");
    }
}
