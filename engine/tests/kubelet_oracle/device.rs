//! The device-manager kind: extended resources served by devices with and without NUMA
//! affinity (sparse NUMA ids, devices spanning two nodes), answered by the kubelet's device
//! manager (`NewManagerImpl`, `Start`, an in-process plugin) beside its CPU manager and
//! topology manager, and compared with the engine's `DeviceManager` inside `NodeAdmitter`:
//! raw device hints per container (or per pod), admit/reject with reason and message, the
//! device ids every container holds (hence the NUMA nodes used), and what every pod holds
//! at the end.
//!
//! The kubelet takes devices within a group in Go set order unless the plugin offers a
//! preferred allocation; the oracle's plugin prefers the lowest ids (devices with a
//! topology first), which is the engine's tie-break, so new devices compare by id. Devices
//! a container reuses from a regular init container are picked in Go set order whatever
//! the plugin says: where that is a real choice (fewer asked than reusable) the case is
//! compared up to that pod and counted.

use std::collections::BTreeMap;

use nodetopo_engine::admission::NodeAdmitter;
use nodetopo_engine::devicemanager::{DeviceHints, DeviceManager, DeviceSpec};
use nodetopo_engine::topologymanager::{TmScope, TopologyHint};
use nodetopo_engine::Pod;

use crate::generator::{
    edge_cpu, gen_capped_machine, gen_container, gen_ops, gen_tm_policy_scope, Edge, Rng,
};
use crate::protocol::*;

/// The case's devices in the engine's form.
pub(crate) fn engine_devices(devices: &[DeviceJson]) -> Vec<DeviceSpec> {
    devices
        .iter()
        .map(|d| DeviceSpec {
            resource: d.resource.clone(),
            id: d.id.clone(),
            numa_nodes: d.numa.clone(),
            healthy: !d.unhealthy,
        })
        .collect()
}

fn hint_json(h: &TopologyHint) -> HintJson {
    HintJson {
        affinity: h.affinity.map(|m| m.ids().collect()),
        preferred: h.preferred,
    }
}

fn raw(h: Option<BTreeMap<String, DeviceHints>>) -> Option<RawDeviceHints> {
    let h = h?;
    Some(
        h.into_iter()
            .map(|(r, d)| {
                let list = match d {
                    DeviceHints::DontCare => None,
                    DeviceHints::Explicit(l) => Some(l.iter().map(hint_json).collect()),
                    DeviceHints::Implicit(s) => {
                        Some(s.materialize().iter().map(hint_json).collect())
                    }
                };
                (r, list)
            })
            .collect(),
    )
}

/// The raw device hints the engine's device manager gives the topology manager while `pod`
/// is admitted, replayed on `before`: in pod scope the pod's hints; in container scope each
/// container's, the earlier ones allocated under their merged hints. A rejected pod: its
/// first hint request only.
pub(crate) fn engine_raw_hints(
    before: &DeviceManager,
    node: &NodeAdmitter,
    pod: &Pod,
    scope: TmScope,
    admitted: bool,
) -> BTreeMap<String, RawDeviceHints> {
    crate::replay_raw_hints(
        before,
        pod,
        scope,
        admitted,
        |m| raw(m.pod_hints(pod)),
        |m, c| raw(m.container_hints(pod, c)),
        |m, c| m.allocate(pod, c, node.hint(&pod.uid, &c.name)).is_ok(),
    )
}

/// The devices each container of `pod` holds, resource -> sorted ids.
pub(crate) fn engine_pod_devices(m: &DeviceManager, pod: &Pod) -> DevicesOf {
    let mut out = DevicesOf::new();
    for c in pod.all_containers() {
        let Some(per) = m.allocated(&pod.uid, &c.name) else {
            continue;
        };
        let per: BTreeMap<String, Vec<String>> = per
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(r, ids)| (r.clone(), ids.iter().cloned().collect()))
            .collect();
        if !per.is_empty() {
            out.insert(c.name.clone(), per);
        }
    }
    out
}

/// The extended-resource limits of a container as counts.
fn requests(c: &ContainerJson) -> BTreeMap<String, usize> {
    c.limits
        .extended
        .iter()
        .filter_map(|(r, q)| Some((r.clone(), q.parse::<u64>().ok()?)))
        .map(|(r, n)| (r, usize::try_from(n).unwrap_or(usize::MAX)))
        .collect()
}

/// The first admission whose outcome the kubelet leaves to Go's set order, with why:
/// a container reusing fewer devices than its regular init containers left reusable (the
/// kubelet picks which in set order, whatever the plugin prefers), or a rejection naming a
/// different resource among several that are short (the kubelet walks the container's
/// limits in map order). Such cases are compared up to that operation.
pub(crate) fn ambiguous(c: &CaseJson, k: &Answer, e: &Answer) -> Option<(usize, String)> {
    if !c.has_devices() {
        return None;
    }
    for (i, op) in c.ops.iter().enumerate() {
        if let (Some(kr), Some(er)) = (k.results.get(i), e.results.get(i)) {
            // Two device errors: the kubelet walks the container's limits in map order.
            const DEVICE_ERRORS: [&str; 2] = [
                "Allocate failed due to requested number of devices unavailable for ",
                "Allocate failed due to no healthy devices present; ",
            ];
            let dev = |m: &str| DEVICE_ERRORS.iter().any(|p| m.starts_with(p));
            if !kr.admit
                && !er.admit
                && kr.message != er.message
                && dev(&kr.message)
                && dev(&er.message)
            {
                return Some((
                    i,
                    format!("{}: kubelet {:?}", crate::cpu::op_uid(op), kr.message),
                ));
            }
        }
        let Some(p) = &op.pod else { continue };
        // Reusable device counts per resource, as Allocate keeps them.
        let mut reusable: BTreeMap<String, usize> = BTreeMap::new();
        let init = p.init.iter().map(|ct| (ct, !ct.restartable));
        let apps = p.containers.iter().map(|ct| (ct, false));
        for (ct, regular_init) in init.chain(apps) {
            for (r, n) in requests(ct) {
                if c.device_resources.contains(&r) {
                    // No device: the container is refused, nothing is picked.
                    continue;
                }
                let have = reusable.get(&r).copied().unwrap_or(0);
                if n > 0 && n < have {
                    return Some((
                        i,
                        format!("{} {}: reuses {n} of {have} reusable {r}", p.uid, ct.name),
                    ));
                }
                let taken = n.min(have);
                let left = if regular_init {
                    have.max(n)
                } else {
                    have - taken
                };
                reusable.insert(r, left);
            }
        }
    }
    None
}

/// The first admission where the two sides took different devices of a resource whose
/// plugin offers no `GetPreferredAllocation`, every other device equal, and the same
/// number from each of the kubelet's groups (`filterByAffinity`: touching the container's
/// merged hint, on other nodes, without topology; one group without a hint or without
/// topology): the kubelet takes within a group in Go set order, so the case is compared up
/// to that operation (its devices are not compared by id).
pub(crate) fn set_order_pick(c: &CaseJson, k: &Answer, e: &Answer) -> Option<(usize, String)> {
    if c.no_preferred.is_empty() {
        return None;
    }
    let admitted = admitted_set_order_pick(c, k, e);
    let retry = retry_after_set_order_pick(c, k);
    match (admitted, retry) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The first `retry` whose hints and picks may depend on which devices the pod's failed
/// attempt took in Go set order: a regular init container of the pod asks for a resource
/// whose plugin offers no `GetPreferredAllocation` (and has more healthy devices than it
/// asks for), and no other pod was admitted since that attempt (an admission runs
/// `Allocate`, which drops the pod's `devicesToReuse`). The kubelet does not say which
/// devices a rejected attempt took, so such a retry is compared up to that operation.
fn retry_after_set_order_pick(c: &CaseJson, k: &Answer) -> Option<(usize, String)> {
    let mut healthy: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &c.devices {
        *healthy.entry(d.resource.as_str()).or_default() += usize::from(!d.unhealthy);
    }
    // pod uid -> index of its last attempt that the oracle ran.
    let mut last_attempt: BTreeMap<&str, usize> = BTreeMap::new();
    let mut admitted_since: BTreeMap<&str, bool> = BTreeMap::new();
    for (i, op) in c.ops.iter().enumerate() {
        let Some(kr) = k.results.get(i) else { break };
        if op.op == "remove" || kr.skipped {
            continue;
        }
        let uid = crate::cpu::op_uid(op);
        if op.op == "retry" && last_attempt.contains_key(uid) && !admitted_since[uid] {
            let pod = crate::cpu::op_pod(c, i)?;
            let choice = pod.init.iter().filter(|ct| !ct.restartable).find_map(|ct| {
                requests(ct).into_iter().find(|(r, n)| {
                    c.no_preferred.contains(r)
                        && *n > 0
                        && *n < healthy.get(r.as_str()).copied().unwrap_or(0)
                })
            });
            if let Some((r, n)) = choice {
                return Some((
                    i,
                    format!("{uid}: its failed attempt's init took {n} {r} in Go set order"),
                ));
            }
        }
        if kr.admit {
            for (_, since) in admitted_since.iter_mut() {
                *since = true;
            }
        }
        last_attempt.insert(uid, i);
        admitted_since.insert(uid, false);
    }
    None
}

fn admitted_set_order_pick(c: &CaseJson, k: &Answer, e: &Answer) -> Option<(usize, String)> {
    let masks: BTreeMap<(&str, &str), &[usize]> = c
        .devices
        .iter()
        .map(|d| ((d.resource.as_str(), d.id.as_str()), d.numa.as_slice()))
        .collect();
    let topology = |res: &str| {
        c.devices
            .iter()
            .any(|d| d.resource == res && !d.numa.is_empty())
    };
    for (i, (kr, er)) in k.results.iter().zip(&e.results).enumerate() {
        if !(kr.admit && er.admit) || kr.devices == er.devices {
            continue;
        }
        let pod = crate::cpu::op_pod(c, i)?;
        let none = BTreeMap::new();
        // The first container, in admission order, whose devices differ: everything after
        // it depends on that pick.
        for ct in pod.init.iter().chain(&pod.containers).map(|ct| &ct.name) {
            let hint = |a: &Answer| a.results[i].hints.as_ref().and_then(|h| h.get(ct)).cloned();
            if hint(k) != hint(e) {
                return None;
            }
            let kd = kr.devices.get(ct).unwrap_or(&none);
            let ed = er.devices.get(ct).unwrap_or(&none);
            if kd == ed {
                continue;
            }
            let hint = hint(k).and_then(|h| h.affinity);
            let resources: std::collections::BTreeSet<&String> =
                kd.keys().chain(ed.keys()).collect();
            for res in resources {
                let (a, b) = (kd.get(res), ed.get(res));
                if a == b {
                    continue;
                }
                if !c.no_preferred.contains(res) {
                    return None;
                }
                // filterByAffinity's groups: 0 touching the hint, 1 other nodes, 2 no
                // topology (everything when there is no hint or no topology at all).
                let profile = |ids: Option<&Vec<String>>| -> [usize; 3] {
                    let mut p = [0; 3];
                    for id in ids.into_iter().flatten() {
                        let m = masks
                            .get(&(res.as_str(), id.as_str()))
                            .copied()
                            .unwrap_or(&[]);
                        let g = match &hint {
                            Some(h) if topology(res) && !m.is_empty() => {
                                usize::from(!m.iter().any(|n| h.contains(n)))
                            }
                            _ => 2,
                        };
                        p[g] += 1;
                    }
                    p
                };
                if profile(a) != profile(b) {
                    return None;
                }
            }
            return Some((
                i,
                format!("{} {ct}: kubelet {kd:?}, engine {ed:?}", pod.uid),
            ));
        }
        return None;
    }
    None
}

/// Whether a resource of the case has devices and none of them a NUMA affinity.
pub(crate) fn has_resource_without_topology(c: &CaseJson) -> bool {
    let mut topo: BTreeMap<&str, bool> = BTreeMap::new();
    for d in &c.devices {
        *topo.entry(d.resource.as_str()).or_default() |= !d.numa.is_empty();
    }
    topo.values().any(|t| !t)
}

/// The first device difference at one operation, if any.
pub(crate) fn compare_op(what: &str, k: &OpResult, e: &OpResult) -> Option<String> {
    if k.dev_hints != e.dev_hints {
        return Some(format!(
            "{what}: raw device hints: kubelet {:?}, engine {:?}",
            k.dev_hints, e.dev_hints
        ));
    }
    if k.admit && k.devices != e.devices {
        return Some(format!(
            "{what}: devices: kubelet {:?}, engine {:?}",
            k.devices, e.devices
        ));
    }
    None
}

/// What every pod holds at the end.
pub(crate) fn compare_final(k: &Answer, e: &Answer) -> Option<String> {
    (k.final_devices != e.final_devices).then(|| {
        format!(
            "devices at the end: kubelet {:?}, engine {:?}",
            k.final_devices, e.final_devices
        )
    })
}

// ---------------------------------------------------------------- generation

/// The devices of one resource on the machine's NUMA nodes `ids`: 2-12 devices; a resource
/// in seven has no topology at all; otherwise one device in ten has none and one in ten
/// spans two nodes.
fn gen_devices(r: &mut Rng, resource: &str, ids: &[usize], out: &mut Vec<DeviceJson>) {
    let n = r.range(2, 12);
    let no_topology = r.chance(14);
    // Devices sit on a few of the nodes (often not all), so hints cover a subset.
    let on: Vec<usize> = ids.iter().copied().filter(|_| r.chance(70)).collect();
    let on = if on.is_empty() { ids.to_vec() } else { on };
    for i in 0..n {
        let numa = if no_topology || r.chance(10) {
            Vec::new()
        } else if on.len() > 1 && r.chance(10) {
            let a = r.range(0, on.len() - 1);
            let mut b = r.range(0, on.len() - 1);
            if b == a {
                b = (a + 1) % on.len();
            }
            let mut v = vec![on[a], on[b]];
            v.sort_unstable();
            v
        } else {
            vec![on[r.range(0, on.len() - 1)]]
        };
        out.push(DeviceJson {
            resource: resource.into(),
            id: format!("{}-{i:02}", resource.rsplit('/').next().unwrap_or("dev")),
            numa,
            unhealthy: false,
        });
    }
}

/// A container asking for 0-3 of the resources, 1-3 devices each (requests equal limits,
/// as the API requires for extended resources). `reusable` counts what the pod's regular
/// init containers leave reusable so far (as `Allocate` keeps it): a later container asks
/// for at least that many in nine cases of ten, so the kubelet reuses all of them (a
/// smaller request makes it pick in Go set order, which is compared only up to that pod).
///
/// One request in eight is an edge amount (`Edge`): 0 (the kubelet keeps it: hints over
/// every mask, single nodes preferred), 1, exactly the resource's healthy devices, a few
/// more than that, or a very large count (up to int64's maximum).
fn with_devices(
    r: &mut Rng,
    mut ct: ContainerJson,
    resources: &[String],
    healthy: &BTreeMap<String, usize>,
    reusable: &mut BTreeMap<String, usize>,
    regular_init: bool,
) -> ContainerJson {
    let k = r.range(0, resources.len().min(3));
    let mut names: Vec<&String> = resources.iter().collect();
    for _ in 0..k {
        let i = r.range(0, names.len() - 1);
        let name = names.remove(i);
        let have = reusable.get(name).copied().unwrap_or(0);
        let n = if r.chance(12) {
            let h = healthy.get(name).copied().unwrap_or(0) as u64;
            let huge = [1 << 20, 1 << 40, i64::MAX as u64][r.range(0, 2)];
            Edge::draw(r).amount(1, h, h + r.range(1, 3) as u64, huge)
        } else if have > 0 && !r.chance(10) {
            (have + r.range(0, 1)) as u64
        } else {
            r.range(1, 3) as u64
        };
        let n_use = usize::try_from(n).unwrap_or(usize::MAX);
        let taken = n_use.min(have);
        let left = if regular_init {
            have.max(n_use)
        } else {
            have - taken
        };
        reusable.insert(name.clone(), left);
        ct.requests.extended.insert(name.clone(), n.to_string());
        ct.limits.extended.insert(name.clone(), n.to_string());
    }
    ct
}

/// A random device case: one in four is a memory case (the memory manager's Static policy
/// runs too, `memory::gen_memory_case`), the others a uniform machine of 1-4 NUMA nodes (one
/// in ten up to 8, sparse ids in a quarter) without CPU options; then 1-3 device resources
/// on the machine's nodes, device requests on the containers, and, after one operation in
/// ten, a `readmit` of a pod admitted earlier (admitted again when it is still admitted,
/// as after a kubelet restart: the kubelet's path for containers that already hold
/// devices).
pub(crate) fn gen_device_case(r: &mut Rng, id: String) -> CaseJson {
    let mut c = if r.chance(25) {
        crate::memory::gen_memory_case(r, id)
    } else {
        gen_plain_case(r, id)
    };
    let ids: Vec<usize> = c.machine.numa.iter().map(|n| n.id).collect();
    let mut resources: Vec<String> = (0..r.range(1, 3))
        .map(|i| format!("example.com/dev{i}"))
        .collect();
    // One case in five has unhealthy devices (each device one in four).
    let sick = r.chance(20);
    for res in &resources {
        // A plugin without GetPreferredAllocation (one resource in six): its devices sit
        // on one node each or none, so which device of a group the kubelet takes (Go set
        // order) changes nothing but the id; the runner compares such resources by node.
        let no_preferred = r.chance(16);
        let start = c.devices.len();
        gen_devices(r, res, &ids, &mut c.devices);
        for d in &mut c.devices[start..] {
            if no_preferred && d.numa.len() > 1 {
                d.numa.truncate(1);
            }
            d.unhealthy = sick && r.chance(25);
        }
        if no_preferred {
            c.no_preferred.push(res.clone());
        }
        // Two plugins for the resource (one in ten): the first lists other devices.
        if r.chance(10) {
            c.shadowed.push(res.clone());
        }
    }
    // A resource whose plugin registered no device (one case in eight).
    if r.chance(12) {
        let name = "example.com/empty".to_string();
        c.device_resources.push(name.clone());
        resources.push(name);
    }
    let mut healthy: BTreeMap<String, usize> = BTreeMap::new();
    for d in &c.devices {
        *healthy.entry(d.resource.clone()).or_default() += usize::from(!d.unhealthy);
    }
    for op in &mut c.ops {
        let Some(p) = &mut op.pod else { continue };
        let mut reusable = BTreeMap::new();
        for ct in &mut p.init {
            let regular = !ct.restartable;
            *ct = with_devices(r, ct.clone(), &resources, &healthy, &mut reusable, regular);
        }
        for ct in &mut p.containers {
            *ct = with_devices(r, ct.clone(), &resources, &healthy, &mut reusable, false);
        }
    }
    let mut ops = Vec::new();
    let mut live: Vec<PodJson> = Vec::new();
    for op in std::mem::take(&mut c.ops) {
        match &op.pod {
            Some(p) => live.push(p.clone()),
            None => live.retain(|p| p.uid != op.uid),
        }
        let last = op.pod.as_ref().map(|p| p.uid.clone());
        ops.push(op);
        if !live.is_empty() && r.chance(10) {
            let uid = live[r.range(0, live.len() - 1)].uid.clone();
            ops.push(OpJson {
                op: "readmit".into(),
                pod: None,
                uid,
            });
        }
        // The pod just tried admitted again under the same UID (one in eight): the
        // kubelet's path for a rejected pod's second attempt (skipped when admitted).
        if let (Some(uid), true) = (last, r.chance(12)) {
            ops.push(OpJson {
                op: "retry".into(),
                pod: None,
                uid,
            });
        }
    }
    c.ops = ops;
    c
}

/// The CPU and topology-manager part of a device case: a uniform machine of 1-4 NUMA nodes
/// (one in ten up to 8), no CPU options, every policy and scope, 1-6 pods with regular and
/// sidecar init containers and 1-3 app containers, removals in between.
fn gen_plain_case(r: &mut Rng, id: String) -> CaseJson {
    let machine = gen_capped_machine(r);
    let (tm_policy, tm_scope) = gen_tm_policy_scope(r);
    let mut tm_options = BTreeMap::new();
    if r.chance(30) {
        tm_options.insert("prefer-closest-numa-nodes".into(), "true".into());
    }
    let pods = r.range(1, 6);
    let ncpus = machine.cpus.len();
    let num_reserved = r.range(1, 2.min(ncpus));
    let allocatable = (ncpus - num_reserved) as u64;
    let ops = gen_ops(r, pods, 25, 35, |r, name, restartable| {
        let mut ct = gen_container(r, name, restartable);
        edge_cpu(r, &mut ct, ncpus as u64, allocatable, 5);
        ct
    });
    CaseJson {
        id,
        machine,
        cpu_options: BTreeMap::new(),
        reserved_cpus: String::new(),
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
