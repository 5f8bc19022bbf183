//! The CPU-manager and topology-manager kind: the engine's `NodeAdmitter` answering a case,
//! the kubelet answers that break CPU exclusivity, and the comparison of both answers.

use std::collections::BTreeMap;

use nodetopo_engine::admission::cpu_hints as cpu_provider;
use nodetopo_engine::admission::{CpuPolicyConfig, MemoryManagerConfig, NodeAdmitter, NodeConfig};
use nodetopo_engine::cpumanager::{CpuState, ReservedCpus, StaticPolicy, StaticPolicyOptions};
use nodetopo_engine::topologymanager::options::OptionGates;
use nodetopo_engine::topologymanager::{NumaMask, ProviderHints, ResourceHints};
use nodetopo_engine::topologymanager::{TmOptions, TmPolicy, TmScope};
use nodetopo_engine::{Container, CpuInfo, CpuSet, CpuTopology, NumaNode, Pod, ResourceList};

use crate::device;
use crate::memory;
use crate::protocol::*;

pub(crate) fn engine_topology(m: &MachineJson) -> Result<CpuTopology, String> {
    let cpus = m
        .cpus
        .iter()
        .map(|c| CpuInfo {
            id: c[0],
            core: c[1],
            socket: c[2],
            numa: c[3],
            uncore: c[4],
        })
        .collect::<Vec<_>>();
    let mut ids: Vec<usize> = m.numa.iter().map(|n| n.id).collect();
    ids.sort_unstable();
    let numa = m
        .numa
        .iter()
        .map(|n| NumaNode {
            id: n.id,
            cpus: m
                .cpus
                .iter()
                .filter(|c| c[3] == n.id)
                .map(|c| c[0])
                .collect(),
            distances: if n.distances.is_empty() {
                None
            } else {
                Some(
                    ids.iter()
                        .map(|&j| n.distances.get(j).copied().unwrap_or(0) as u32)
                        .collect(),
                )
            },
            memory_bytes: (n.memory > 0).then_some(n.memory),
            hugepages: n.hugepages.iter().map(|h| (h[0], h[1])).collect(),
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, numa, Vec::new()).map_err(|e| e.to_string())
}

pub(crate) fn millis(q: &str) -> Option<u64> {
    if q.is_empty() {
        return None;
    }
    match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<u64>().ok().map(|c| c * 1000),
    }
}

pub(crate) fn bytes(q: &str) -> Option<u64> {
    if q.is_empty() {
        return None;
    }
    if let Some(g) = q.strip_suffix("Gi") {
        return g.parse::<u64>().ok().and_then(|g| g.checked_mul(1 << 30));
    }
    if let Some(m) = q.strip_suffix("Mi") {
        return m.parse::<u64>().ok().and_then(|m| m.checked_mul(1 << 20));
    }
    q.parse().ok()
}

pub(crate) fn engine_container(c: &ContainerJson) -> Container {
    let list = |r: &ResJson| {
        let mut hugepages = BTreeMap::new();
        for (page, q) in [(2u64 << 20, &r.hugepages_2mi), (1 << 30, &r.hugepages_1gi)] {
            if let Some(b) = bytes(q) {
                hugepages.insert(page, b);
            }
        }
        ResourceList {
            cpu_millis: millis(&r.cpu),
            memory_bytes: bytes(&r.memory),
            hugepages,
            extended: r
                .extended
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.parse().ok()?)))
                .collect(),
        }
    };
    Container {
        name: c.name.clone(),
        requests: list(&c.requests),
        limits: list(&c.limits),
        restartable: c.restartable,
    }
}

pub(crate) fn engine_pod(p: &PodJson) -> Pod {
    Pod {
        namespace: "default".into(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        init_containers: p.init.iter().map(engine_container).collect(),
        containers: p.containers.iter().map(engine_container).collect(),
    }
}

/// What the engine decides, in the oracle's answer shape.
pub(crate) fn run_engine(c: &CaseJson) -> Result<Answer, String> {
    let topology = engine_topology(&c.machine)?;
    let config_error = |e: String| {
        Ok(Answer {
            id: c.id.clone(),
            config_error: e,
            ..Answer::default()
        })
    };
    let options = match StaticPolicyOptions::from_map(&c.cpu_options) {
        Ok(o) => o,
        Err(e) => return config_error(e.to_string()),
    };
    let gates = OptionGates {
        alpha: true,
        beta: true,
    };
    let tm_options = match TmOptions::from_map_with(&c.tm_options, gates, &[]) {
        Ok(o) => o,
        Err(e) => return config_error(e.to_string()),
    };
    let reserved = if c.reserved_cpus.is_empty() {
        ReservedCpus::Count(c.num_reserved)
    } else {
        ReservedCpus::Explicit(c.reserved_cpus.parse().map_err(|e| format!("{e}"))?)
    };
    let tm_policy: TmPolicy = c.tm_policy.parse().map_err(|e| format!("{e}"))?;
    let tm_scope: TmScope = c.tm_scope.parse().map_err(|e| format!("{e}"))?;
    let memory = match &c.memory {
        Some(m) => MemoryManagerConfig::Static {
            reserved: memory::engine_reserved(m)?,
        },
        None => MemoryManagerConfig::None,
    };
    let config = NodeConfig {
        cpu: CpuPolicyConfig::Static { reserved, options },
        tm_policy,
        tm_scope,
        tm_options,
        memory,
        devices: device::engine_devices(&c.devices),
        device_resources: c.device_resources.clone(),
    };
    let mut node = match NodeAdmitter::new(topology, &config) {
        Ok(n) => n,
        Err(e) => return config_error(e.to_string()),
    };
    let mut results = Vec::new();
    let mut live: BTreeMap<String, Pod> = BTreeMap::new();
    // Every pod admitted or rejected and not removed (the oracle's list at the end).
    let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
    // Pods admitted and not removed or rejected since.
    let mut live_pods: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for op in &c.ops {
        match op.op.as_str() {
            "admit" | "readmit" | "retry" => {
                let pod = if op.op == "retry" {
                    // A rejected pod admitted again under its UID; skipped when it is
                    // admitted or was removed.
                    match seen.get(&op.uid).filter(|_| !live_pods.contains(&op.uid)) {
                        Some(p) => p.clone(),
                        None => {
                            results.push(OpResult {
                                admit: true,
                                skipped: true,
                                ..OpResult::default()
                            });
                            continue;
                        }
                    }
                } else if op.op == "readmit" {
                    // An admitted pod admitted again; skipped when it is not admitted.
                    match seen.get(&op.uid).filter(|_| live_pods.contains(&op.uid)) {
                        Some(p) => p.clone(),
                        None => {
                            results.push(OpResult {
                                admit: true,
                                skipped: true,
                                ..OpResult::default()
                            });
                            continue;
                        }
                    }
                } else {
                    let Some(pj) = &op.pod else {
                        return Err("admit without pod".into());
                    };
                    engine_pod(pj)
                };
                let before = node.memory().cloned();
                let dev_before = c.has_devices().then(|| node.devices().clone());
                let cpu_before = node.cpu_state().clone();
                // The node's policy as it was (its reuse bookkeeping included) replays the
                // raw CPU hints the engine's CPU manager gives the topology manager.
                let raw_policy = node.cpu_policy().cloned();
                let adm = node.admit(&pod);
                let mut r = OpResult {
                    admit: adm.admitted(),
                    ..OpResult::default()
                };
                if let (Some(p), true) = (&raw_policy, tm_policy != TmPolicy::None) {
                    r.cpu_hints =
                        engine_cpu_raw_hints(p, &cpu_before, &node, &pod, tm_scope, adm.admitted());
                }
                if let (Some(before), true) = (&before, memory::compares_raw_hints(tm_policy)) {
                    r.mem_hints =
                        memory::engine_raw_hints(before, &node, &pod, tm_scope, adm.admitted());
                }
                if let (Some(before), true) = (&dev_before, tm_policy != TmPolicy::None) {
                    r.dev_hints =
                        device::engine_raw_hints(before, &node, &pod, tm_scope, adm.admitted());
                }
                if dev_before.is_some() && adm.admitted() {
                    r.devices = device::engine_pod_devices(node.devices(), &pod);
                }
                seen.insert(pod.uid.clone(), pod.clone());
                if let (Some(m), true) = (node.memory(), adm.admitted()) {
                    r.memory = Some(memory::engine_blocks(m, &pod));
                    live.insert(pod.uid.clone(), pod.clone());
                }
                if !adm.admitted() && live_pods.contains(&pod.uid) {
                    // A pod admitted before and rejected now (admitted again, as after a
                    // kubelet restart) fails: the kubelet releases what it held.
                    node.remove_pod(&pod.uid);
                    live.remove(&pod.uid);
                }
                if adm.admitted() {
                    live_pods.insert(pod.uid.clone());
                } else {
                    live_pods.remove(&pod.uid);
                }
                if let Some(rej) = adm.rejections.first() {
                    r.reason = rej.reason.clone();
                    r.message = rej.message.clone();
                } else {
                    if let Some(a) = node.cpu_state().assignments.get(&pod.uid) {
                        r.cpus = a.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
                    }
                    if tm_policy != TmPolicy::None {
                        let mut hints = BTreeMap::new();
                        for ct in pod.all_containers() {
                            let h = node.hint(&pod.uid, &ct.name).map(|h| HintJson {
                                affinity: h.affinity.map(|m| m.ids().collect()),
                                preferred: h.preferred,
                            });
                            hints.insert(ct.name.clone(), h.unwrap_or_default());
                        }
                        r.hints = Some(hints);
                    }
                }
                results.push(r);
            }
            "remove" => {
                node.remove_pod(&op.uid);
                live.remove(&op.uid);
                seen.remove(&op.uid);
                live_pods.remove(&op.uid);
                results.push(OpResult {
                    admit: true,
                    ..OpResult::default()
                });
            }
            other => return Err(format!("unknown op {other}")),
        }
    }
    let st = node.cpu_state();
    Ok(Answer {
        id: c.id.clone(),
        results,
        default_cpuset: st.default_cpuset.to_string(),
        assignments: st
            .assignments
            .iter()
            .map(|(u, m)| {
                (
                    u.clone(),
                    m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
                )
            })
            .collect(),
        memory_state: node.memory().map(memory::engine_state),
        memory_entries: node
            .memory()
            .map(|m| {
                live.values()
                    .map(|p| (p.uid.clone(), memory::engine_blocks(m, p)))
                    .filter(|(_, b)| !b.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        final_devices: if !c.has_devices() {
            BTreeMap::new()
        } else {
            seen.values()
                .map(|p| (p.uid.clone(), device::engine_pod_devices(node.devices(), p)))
                .filter(|(_, d)| !d.is_empty())
                .collect()
        },
        ..Answer::default()
    })
}

/// A provider's `cpu` hint list as the oracle records it (nil and empty lists alike).
fn cpu_list(h: ProviderHints, machine: NumaMask) -> Option<Vec<HintJson>> {
    let list = match h?.remove("cpu")? {
        ResourceHints::DontCare => Vec::new(),
        ResourceHints::Explicit(l) => l,
        ResourceHints::Implicit(src) => src.materialize(machine),
    };
    Some(
        list.iter()
            .map(|h| HintJson {
                affinity: h.affinity.map(|m| m.ids().collect()),
                preferred: h.preferred,
            })
            .collect(),
    )
}

/// The raw CPU hints the engine's CPU manager gives the topology manager while `pod` is
/// admitted, replayed on `before` with a fresh policy (the kubelet's reuse bookkeeping only
/// holds the pod being admitted): in pod scope the pod's hints, in container scope each
/// container's, the earlier containers allocated under their merged hints. A rejected
/// pod: its first hint request only.
fn engine_cpu_raw_hints(
    policy: &StaticPolicy,
    before: &CpuState,
    node: &NodeAdmitter,
    pod: &Pod,
    scope: TmScope,
    admitted: bool,
) -> BTreeMap<String, Vec<HintJson>> {
    let machine =
        NumaMask::new(node.topology().numa_nodes().iter().map(|n| n.id)).unwrap_or_default();
    let mut out = BTreeMap::new();
    if scope == TmScope::Pod {
        if let Some(l) = cpu_list(cpu_provider::pod_hints(policy, before, pod), machine) {
            out.insert(String::new(), l);
        }
        return out;
    }
    let mut state = before.clone();
    for c in pod.all_containers() {
        if let Some(l) = cpu_list(
            cpu_provider::container_hints(policy, &state, pod, c),
            machine,
        ) {
            out.insert(c.name.clone(), l);
        }
        if !admitted
            || policy
                .allocate(&mut state, pod, c, node.hint(&pod.uid, &c.name))
                .is_err()
        {
            break;
        }
    }
    out
}

/// The first operation at which the kubelet's own answer breaks the static policy's
/// exclusivity: a CPU held by two pods, or inside a pod by two containers that run at the
/// same time (only a regular init container may hand its CPUs on). The kubelet v1.37 does
/// this on machines whose cores have different thread counts (its accumulator treats a
/// core as free when its free thread count equals `NumCPUs / NumCores`, and then takes all
/// of the core's threads, including one already assigned). The engine does not copy that;
/// such cases are compared up to that operation and listed.
pub(crate) fn kubelet_defect(c: &CaseJson, kubelet: &Answer) -> Option<(usize, String)> {
    // Containers whose CPUs may be handed on (regular init containers), by pod.
    let mut handed_on: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for op in &c.ops {
        if let Some(p) = &op.pod {
            let v = handed_on.entry(p.uid.as_str()).or_default();
            v.extend(
                p.init
                    .iter()
                    .filter(|ct| !ct.restartable)
                    .map(|ct| ct.name.as_str()),
            );
        }
    }
    for (i, r) in kubelet.results.iter().enumerate() {
        let shared_pool: CpuSet = r.state_default.parse().unwrap_or_default();
        let mut pods: Vec<(&str, CpuSet)> = Vec::new();
        for (uid, containers) in &r.state_assignments {
            let free = handed_on.get(uid.as_str()).cloned().unwrap_or_default();
            let mut running = CpuSet::default();
            let mut all = CpuSet::default();
            for (name, cpus) in containers {
                let s: CpuSet = cpus.parse().unwrap_or_default();
                if !free.contains(&name.as_str()) {
                    let twice = running.intersection(&s);
                    if !twice.is_empty() {
                        return Some((
                            i,
                            format!("{uid}: CPUs {twice} held by {name} and a sibling"),
                        ));
                    }
                    running = running.union(&s);
                }
                all = all.union(&s);
            }
            let in_pool = all.intersection(&shared_pool);
            if !in_pool.is_empty() {
                return Some((
                    i,
                    format!("{uid}: CPUs {in_pool} assigned and in the shared pool"),
                ));
            }
            for (other, held) in &pods {
                let twice = all.intersection(held);
                if !twice.is_empty() {
                    return Some((i, format!("CPUs {twice} held by both {uid} and {other}")));
                }
            }
            pods.push((uid.as_str(), all));
        }
    }
    None
}

/// The first difference between the kubelet's answer and the engine's, if any.
pub(crate) fn compare(c: &CaseJson, kubelet: &Answer, engine: &Answer) -> Option<String> {
    let (mut kubelet, mut engine) = (kubelet.clone(), engine.clone());
    memory::normalise(&mut kubelet);
    memory::normalise(&mut engine);
    let (kubelet, engine) = (&kubelet, &engine);
    if !kubelet.error.is_empty() {
        return Some(format!("oracle error: {}", kubelet.error));
    }
    match (
        kubelet.config_error.is_empty(),
        engine.config_error.is_empty(),
    ) {
        (false, false) => return None,
        (true, true) => {}
        _ => {
            return Some(format!(
                "config: kubelet {:?}, engine {:?}",
                kubelet.config_error, engine.config_error
            ))
        }
    }
    let defect = kubelet_defect(c, kubelet).map(|(i, _)| i);
    let ambiguous = device::ambiguous(c, kubelet, engine).map(|(i, _)| i);
    let pick = device::set_order_pick(c, kubelet, engine).map(|(i, _)| i);
    for (i, (k, e)) in kubelet.results.iter().zip(&engine.results).enumerate() {
        if Some(i) == defect || Some(i) == ambiguous || Some(i) == pick {
            return None;
        }
        if let Some(why) = compare_op_only(c, i, k, e) {
            return Some(why);
        }
    }
    if kubelet.results.len() != engine.results.len() {
        return Some(format!(
            "results: kubelet {}, engine {}",
            kubelet.results.len(),
            engine.results.len()
        ));
    }
    if kubelet.default_cpuset != engine.default_cpuset {
        return Some(format!(
            "default cpuset: kubelet {}, engine {}",
            kubelet.default_cpuset, engine.default_cpuset
        ));
    }
    let nonempty = |a: &BTreeMap<String, BTreeMap<String, String>>| {
        a.iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    if nonempty(&kubelet.assignments) != nonempty(&engine.assignments) {
        return Some(format!(
            "assignments: kubelet {:?}, engine {:?}",
            kubelet.assignments, engine.assignments
        ));
    }
    if c.has_devices() {
        if let Some(why) = device::compare_final(kubelet, engine) {
            return Some(why);
        }
    }
    if c.memory.is_some() {
        return memory::compare_final(c, kubelet, engine);
    }
    None
}

/// Everything compared at operation `i`: admission, reason and message, CPUs, merged hints,
/// raw CPU, memory and device hints, memory blocks and devices.
fn compare_op_only(c: &CaseJson, i: usize, k: &OpResult, e: &OpResult) -> Option<String> {
    let what = format!("ops[{i}] ({} {})", c.ops[i].op, op_uid(&c.ops[i]));
    if k.admit != e.admit || k.reason != e.reason || k.skipped != e.skipped {
        return Some(format!(
            "{what}: kubelet admit={} {} {:?}; engine admit={} {} {:?}",
            k.admit, k.reason, k.message, e.admit, e.reason, e.message
        ));
    }
    if k.message != e.message {
        return Some(format!(
            "{what}: message: kubelet {:?}, engine {:?}",
            k.message, e.message
        ));
    }
    if k.cpus != e.cpus {
        return Some(format!(
            "{what}: cpus: kubelet {:?}, engine {:?}",
            k.cpus, e.cpus
        ));
    }
    if k.hints != e.hints {
        return Some(format!(
            "{what}: merged hints: kubelet {:?}, engine {:?}",
            k.hints, e.hints
        ));
    }
    let first = op_pod(c, i)
        .and_then(|p| p.init.first().or(p.containers.first()))
        .map(|ct| ct.name.clone())
        .unwrap_or_default();
    let mut k_cpu = k.cpu_hints.clone();
    if !k.admit {
        // A rejected pod: the engine replays its first hint request only.
        k_cpu.retain(|name, _| name.is_empty() || *name == first);
    }
    if k_cpu != e.cpu_hints {
        return Some(format!(
            "{what}: raw CPU hints: kubelet {k_cpu:?}, engine {:?}",
            e.cpu_hints
        ));
    }
    if c.memory.is_some() {
        let mut k = k.clone();
        if !k.admit {
            k.mem_hints
                .retain(|name, _| name.is_empty() || *name == first);
        }
        if let Some(why) = memory::compare_op(&what, &k, e) {
            return Some(why);
        }
    }
    if c.has_devices() {
        let mut k = k.clone();
        if !k.admit {
            k.dev_hints
                .retain(|name, _| name.is_empty() || *name == first);
        }
        if let Some(why) = device::compare_op(&what, &k, e) {
            return Some(why);
        }
    }
    None
}

/// The pod an admission (or a readmit) at `ops[i]` admits.
pub(crate) fn op_pod(c: &CaseJson, i: usize) -> Option<&PodJson> {
    let op = c.ops.get(i)?;
    if op.op != "readmit" && op.op != "retry" {
        return op.pod.as_ref();
    }
    c.ops[..i]
        .iter()
        .rev()
        .filter_map(|o| o.pod.as_ref())
        .find(|p| p.uid == op.uid)
}

pub(crate) fn op_uid(o: &OpJson) -> &str {
    o.pod.as_ref().map(|p| p.uid.as_str()).unwrap_or(&o.uid)
}
