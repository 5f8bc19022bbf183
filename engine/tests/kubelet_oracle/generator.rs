//! Random cases: machines, configurations and pod sequences from a seeded generator.

use std::collections::BTreeMap;

use nodetopo_engine::CpuSet;

use crate::protocol::*;

/// The seeded generator the cases come from (a printed seed replays them).
pub(crate) use nodetopo_testkit::SplitMix as Rng;

/// Which machines the generator makes: `Uniform` (every core the same thread count, one
/// uncore cache per NUMA node) or `Any` (also mixed SMT and uneven uncore caches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Machines {
    Uniform,
    Any,
}

pub(crate) fn gen_machine(r: &mut Rng, kinds: Machines) -> MachineJson {
    let uniform = r.chance(50) || kinds == Machines::Uniform;
    let sockets = r.range(1, 4);
    // Machines above 8 NUMA nodes are where the kubelet's merge gets slow (and hangs):
    // one case in ten may have up to 16.
    let node_cap = if r.chance(10) { 16 } else { 8 };
    let max_numa_per_socket = (node_cap / sockets).clamp(1, 4);
    let numa_per_socket = r.range(1, max_numa_per_socket);
    let nodes = sockets * numa_per_socket;
    let budget = 512 / nodes;
    let smt_max = if r.chance(70) { 2 } else { 1 };
    let cores_per_node = r.range(1, (budget / smt_max).clamp(1, 24));
    let sparse = r.chance(25);
    let numa_id = |i: usize| {
        if sparse {
            i * 2 + usize::from(i % 3 == 1)
        } else {
            i
        }
    };
    // (socket, numa, core index within node, threads)
    let mut cores = Vec::new();
    let mut uncore_next = 0;
    for s in 0..sockets {
        for n in 0..numa_per_socket {
            let node = s * numa_per_socket + n;
            let caches = if uniform { 1 } else { r.range(1, 3) };
            let first_uncore = uncore_next;
            uncore_next += caches;
            for c in 0..cores_per_node {
                let threads = if smt_max == 2 && (uniform || r.chance(70)) {
                    2
                } else {
                    1
                };
                // Uneven caches: cores land in a random cache of their node.
                let uncore = if uniform {
                    first_uncore
                } else {
                    first_uncore + (c * caches / cores_per_node.max(1)).min(caches - 1)
                };
                cores.push((s, numa_id(node), uncore, threads));
            }
        }
    }
    // Kernel-like numbering: first threads of every core, then the second threads.
    let mut cpus = Vec::new();
    let mut id = 0;
    let mut first_ids = Vec::new();
    for &(s, n, u, _) in &cores {
        first_ids.push(id);
        cpus.push([id, id, s, n, u]);
        id += 1;
    }
    for (i, &(s, n, u, t)) in cores.iter().enumerate() {
        if t == 2 {
            cpus.push([id, first_ids[i], s, n, u]);
            id += 1;
        }
    }
    let ids: Vec<usize> = (0..nodes).map(numa_id).collect();
    let max_id = ids.iter().copied().max().unwrap_or(0);
    let mut dist = vec![vec![0u64; max_id + 1]; max_id + 1];
    for (a, &ia) in ids.iter().enumerate() {
        for (b, &ib) in ids.iter().enumerate() {
            if a == b {
                dist[ia][ib] = 10;
            } else if b > a {
                let same_socket = a / numa_per_socket == b / numa_per_socket;
                let d = if same_socket {
                    [11, 12, 16][r.range(0, 2)]
                } else {
                    [20, 21, 32][r.range(0, 2)]
                };
                dist[ia][ib] = d;
                dist[ib][ia] = d;
            }
        }
    }
    let numa = ids
        .iter()
        .map(|&i| NumaJson {
            id: i,
            distances: dist[i].clone(),
            memory: 0,
            hugepages: Vec::new(),
        })
        .collect();
    MachineJson { cpus, numa }
}

pub(crate) const CPU_OPTIONS: [&str; 6] = [
    "full-pcpus-only",
    "distribute-cpus-across-numa",
    "align-by-socket",
    "distribute-cpus-across-cores",
    "strict-cpu-reservation",
    "prefer-align-cpus-by-uncorecache",
];

pub(crate) fn gen_container(r: &mut Rng, name: String, restartable: bool) -> ContainerJson {
    let millis = match r.range(0, 9) {
        0 => r.range(1, 19) * 100,
        1..=6 => 1000 * r.range(1, 4),
        7 | 8 => 1000 * r.range(5, 16),
        _ => 1000 * r.range(17, 64),
    };
    let cpu = format!("{millis}m");
    let memory = "1Gi".to_string();
    let guaranteed = !r.chance(8);
    ContainerJson {
        name,
        requests: ResJson {
            cpu: cpu.clone(),
            memory: memory.clone(),
            ..ResJson::default()
        },
        limits: if guaranteed {
            ResJson {
                cpu,
                memory,
                ..ResJson::default()
            }
        } else {
            ResJson::default()
        },
        restartable,
    }
}

/// The topology-manager policy (any of the four) and scope (even odds), in that order.
pub(crate) fn gen_tm_policy_scope(r: &mut Rng) -> (&'static str, &'static str) {
    let tm_policy = ["none", "best-effort", "restricted", "single-numa-node"][r.range(0, 3)];
    let tm_scope = if r.chance(50) { "container" } else { "pod" };
    (tm_policy, tm_scope)
}

/// A uniform machine of up to 4 NUMA nodes, one case in ten up to 8 (drawn again until it
/// fits).
pub(crate) fn gen_capped_machine(r: &mut Rng) -> MachineJson {
    let cap = if r.chance(10) { 8 } else { 4 };
    let mut machine = gen_machine(r, Machines::Uniform);
    while machine.numa.len() > cap {
        machine = gen_machine(r, Machines::Uniform);
    }
    machine
}

/// The ops of a case: `pods` admissions of `pod-<p>` (0-2 init containers, each restartable
/// with `restartable_pct` %, and 1-3 app containers, all made by `container`), each preceded,
/// once some pod is live, by the removal of a random live pod with `remove_pct` %.
pub(crate) fn gen_ops(
    r: &mut Rng,
    pods: usize,
    remove_pct: u64,
    restartable_pct: u64,
    mut container: impl FnMut(&mut Rng, String, bool) -> ContainerJson,
) -> Vec<OpJson> {
    let mut ops = Vec::new();
    let mut live: Vec<String> = Vec::new();
    for p in 0..pods {
        if !live.is_empty() && r.chance(remove_pct) {
            let i = r.range(0, live.len() - 1);
            ops.push(OpJson {
                op: "remove".into(),
                pod: None,
                uid: live.remove(i),
            });
        }
        let uid = format!("pod-{p}");
        let mut init = Vec::new();
        for i in 0..r.range(0, 2) {
            let restartable = r.chance(restartable_pct);
            init.push(container(r, format!("init{i}"), restartable));
        }
        let mut containers = Vec::new();
        for i in 0..r.range(1, 3) {
            containers.push(container(r, format!("app{i}"), false));
        }
        ops.push(OpJson {
            op: "admit".into(),
            pod: Some(PodJson {
                uid: uid.clone(),
                name: format!("p{p}"),
                init,
                containers,
            }),
            uid: String::new(),
        });
        live.push(uid);
    }
    ops
}

pub(crate) fn gen_case(r: &mut Rng, id: String, kinds: Machines) -> CaseJson {
    let machine = gen_machine(r, kinds);
    let ncpus = machine.cpus.len();
    let mut cpu_options = BTreeMap::new();
    for o in CPU_OPTIONS {
        if r.chance(22) {
            cpu_options.insert(o.to_string(), "true".to_string());
        }
    }
    let (reserved_cpus, num_reserved) = if r.chance(30) {
        let n = r.range(1, 4.min(ncpus));
        let mut set = std::collections::BTreeSet::new();
        while set.len() < n {
            set.insert(r.range(0, ncpus - 1));
        }
        let s: CpuSet = set.into_iter().collect();
        (s.to_string(), n)
    } else {
        (String::new(), r.range(1, 4.min(ncpus)))
    };
    let (tm_policy, tm_scope) = gen_tm_policy_scope(r);
    let mut tm_options = BTreeMap::new();
    if r.chance(40) {
        tm_options.insert("prefer-closest-numa-nodes".into(), "true".into());
    }
    if machine.numa.len() > 8 || r.chance(10) {
        let v = if r.chance(85) { 16 } else { 8 };
        tm_options.insert("max-allowable-numa-nodes".into(), v.to_string());
    }
    let pods = r.range(1, 8);
    let allocatable = ncpus.saturating_sub(num_reserved) as u64;
    let ops = gen_ops(r, pods, 20, 40, |r, name, restartable| {
        let mut ct = gen_container(r, name, restartable);
        edge_cpu(r, &mut ct, ncpus as u64, allocatable, 6);
        ct
    });
    CaseJson {
        id,
        machine,
        cpu_options,
        reserved_cpus,
        num_reserved,
        tm_policy: tm_policy.into(),
        tm_scope: tm_scope.into(),
        tm_options,
        ops,
        memory: None,
        devices: Vec::new(),
        device_resources: Vec::new(),
        no_preferred: Vec::new(),
        shadowed: Vec::new(),
        checkpoint: false,
    }
}

/// The edge classes of a requested quantity the generator draws for every resource kind
/// (cpu, memory, huge pages, devices): zero, one unit, exactly what is available, more
/// than available, and very large (near the int64 range the kubelet's `Value()` uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Edge {
    Zero,
    One,
    Exact,
    More,
    Huge,
}

impl Edge {
    /// One of the five, evenly.
    pub(crate) fn draw(r: &mut Rng) -> Edge {
        [Edge::Zero, Edge::One, Edge::Exact, Edge::More, Edge::Huge][r.range(0, 4)]
    }

    /// The amount for this class: `unit` is one unit, `exact` what is available, `more`
    /// more than available, `huge` a very large amount.
    pub(crate) fn amount(self, unit: u64, exact: u64, more: u64, huge: u64) -> u64 {
        match self {
            Edge::Zero => 0,
            Edge::One => unit,
            Edge::Exact => exact,
            Edge::More => more,
            Edge::Huge => huge,
        }
    }

    /// The class of `v` against the same references (`None`: an ordinary amount).
    pub(crate) fn classify(
        v: u64,
        unit: u64,
        exact: &[u64],
        more_than: u64,
        huge: u64,
    ) -> Option<Edge> {
        if v == 0 {
            Some(Edge::Zero)
        } else if v == unit {
            Some(Edge::One)
        } else if exact.contains(&v) {
            Some(Edge::Exact)
        } else if v >= huge {
            Some(Edge::Huge)
        } else if v > more_than {
            Some(Edge::More)
        } else {
            None
        }
    }
}

/// A very large CPU request: four million cores.
pub(crate) const HUGE_CPUS: u64 = 4_000_000;

/// The CPUs the static policy can hand out on an empty machine: all but the reserved ones.
pub(crate) fn allocatable_cpus(c: &CaseJson) -> u64 {
    let reserved = if c.reserved_cpus.is_empty() {
        c.num_reserved
    } else {
        c.reserved_cpus
            .parse::<CpuSet>()
            .map(|s| s.len())
            .unwrap_or(c.num_reserved)
    };
    c.machine.cpus.len().saturating_sub(reserved) as u64
}

/// With `pct` %, replaces `ct`'s CPU request and limit by an edge amount (`Edge`): 0, one
/// core, every allocatable CPU of an empty machine, more CPUs than the machine has, or
/// four million cores.
pub(crate) fn edge_cpu(
    r: &mut Rng,
    ct: &mut ContainerJson,
    ncpus: u64,
    allocatable: u64,
    pct: u64,
) {
    if !r.chance(pct) {
        return;
    }
    let more = ncpus + r.range(1, 8) as u64;
    let cores = Edge::draw(r).amount(1, allocatable, more, HUGE_CPUS);
    let q = cores.to_string();
    ct.requests.cpu = q.clone();
    if !ct.limits.cpu.is_empty() {
        ct.limits.cpu = q;
    }
}

/// Per edge class and resource kind, how many container requests of `c` fall in it
/// (`cpu/zero`, `memory/huge`, `hugepages-2Mi/exact`, `devices/more`, ...).
pub(crate) fn edge_tally(c: &CaseJson, out: &mut BTreeMap<String, usize>) {
    let ncpus = c.machine.cpus.len() as u64;
    let node_mem: Vec<u64> = c.machine.numa.iter().map(|n| n.memory).collect();
    let total_mem: u64 = node_mem.iter().sum();
    let pages = |kib: u64| -> Vec<u64> {
        c.machine
            .numa
            .iter()
            .map(|n| {
                n.hugepages
                    .iter()
                    .filter(|h| h[0] == kib)
                    .map(|h| h[1] * kib * 1024)
                    .sum()
            })
            .collect()
    };
    let mut healthy: BTreeMap<&str, u64> = BTreeMap::new();
    for d in &c.devices {
        *healthy.entry(d.resource.as_str()).or_default() += u64::from(!d.unhealthy);
    }
    for r in &c.device_resources {
        healthy.entry(r.as_str()).or_default();
    }
    let mut add = |kind: &str, e: Option<Edge>| {
        if let Some(e) = e {
            *out.entry(format!("{kind}/{}", format!("{e:?}").to_lowercase()))
                .or_default() += 1;
        }
    };
    for p in c.ops.iter().filter_map(|o| o.pod.as_ref()) {
        for ct in p.init.iter().chain(&p.containers) {
            let q = &ct.requests;
            if let Some(m) = crate::cpu::millis(&q.cpu) {
                let exact = [allocatable_cpus(c) * 1000];
                add(
                    "cpu",
                    Edge::classify(m, 1000, &exact, ncpus * 1000, HUGE_CPUS * 1000),
                );
            }
            if c.memory.is_some() {
                if let Some(b) = crate::cpu::bytes(&q.memory) {
                    add(
                        "memory",
                        Edge::classify(b, 1, &node_mem, total_mem, 1 << 50),
                    );
                }
                for (kind, kib, s) in [
                    ("hugepages-2Mi", 2048, &q.hugepages_2mi),
                    ("hugepages-1Gi", 1 << 20, &q.hugepages_1gi),
                ] {
                    if let Some(b) = crate::cpu::bytes(s) {
                        let have = pages(kib);
                        let all: u64 = have.iter().sum();
                        add(
                            kind,
                            Edge::classify(b, kib * 1024, &have, all, (1 << 50) - (1 << 30)),
                        );
                    }
                }
            }
            for (res, n) in &ct.limits.extended {
                let (Ok(n), Some(h)) = (n.parse::<u64>(), healthy.get(res.as_str())) else {
                    continue;
                };
                add("devices", Edge::classify(n, 1, &[*h], *h, 1 << 20));
            }
        }
    }
}
