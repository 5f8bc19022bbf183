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

use crate::generator::{gen_capped_machine, gen_container, gen_ops, gen_tm_policy_scope, Rng};
use crate::protocol::*;

/// The case's devices in the engine's form.
pub(crate) fn engine_devices(devices: &[DeviceJson]) -> Vec<DeviceSpec> {
    devices
        .iter()
        .map(|d| DeviceSpec {
            resource: d.resource.clone(),
            id: d.id.clone(),
            numa_nodes: d.numa.clone(),
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
        .filter_map(|(r, q)| Some((r.clone(), q.parse().ok()?)))
        .collect()
}

/// The first admission whose outcome the kubelet leaves to Go's set order, with why:
/// a container reusing fewer devices than its regular init containers left reusable (the
/// kubelet picks which in set order, whatever the plugin prefers), or a rejection naming a
/// different resource among several that are short (the kubelet walks the container's
/// limits in map order). Such cases are compared up to that operation.
pub(crate) fn ambiguous(c: &CaseJson, k: &Answer, e: &Answer) -> Option<(usize, String)> {
    if c.devices.is_empty() {
        return None;
    }
    for (i, op) in c.ops.iter().enumerate() {
        let Some(p) = &op.pod else { continue };
        // Reusable device counts per resource, as Allocate keeps them.
        let mut reusable: BTreeMap<String, usize> = BTreeMap::new();
        let init = p.init.iter().map(|ct| (ct, !ct.restartable));
        let apps = p.containers.iter().map(|ct| (ct, false));
        for (ct, regular_init) in init.chain(apps) {
            for (r, n) in requests(ct) {
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
        let (Some(kr), Some(er)) = (k.results.get(i), e.results.get(i)) else {
            continue;
        };
        const SHORT: &str = "Allocate failed due to requested number of devices unavailable for ";
        if !kr.admit
            && !er.admit
            && kr.message != er.message
            && kr.message.starts_with(SHORT)
            && er.message.starts_with(SHORT)
        {
            return Some((i, format!("{}: kubelet {:?}", p.uid, kr.message)));
        }
    }
    None
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
        });
    }
}

/// A container asking for 0-3 of the resources, 1-3 devices each (requests equal limits,
/// as the API requires for extended resources). `reusable` counts what the pod's regular
/// init containers leave reusable so far (as `Allocate` keeps it): a later container asks
/// for at least that many in nine cases of ten, so the kubelet reuses all of them (a
/// smaller request makes it pick in Go set order, which is compared only up to that pod).
fn with_devices(
    r: &mut Rng,
    mut ct: ContainerJson,
    resources: &[String],
    reusable: &mut BTreeMap<String, usize>,
    regular_init: bool,
) -> ContainerJson {
    let k = r.range(0, resources.len().min(3));
    let mut names: Vec<&String> = resources.iter().collect();
    for _ in 0..k {
        let i = r.range(0, names.len() - 1);
        let name = names.remove(i);
        let have = reusable.get(name).copied().unwrap_or(0);
        let n = if have > 0 && !r.chance(10) {
            have + r.range(0, 1)
        } else {
            r.range(1, 3)
        };
        let taken = n.min(have);
        let left = if regular_init {
            have.max(n)
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
    let resources: Vec<String> = (0..r.range(1, 3))
        .map(|i| format!("example.com/dev{i}"))
        .collect();
    for res in &resources {
        gen_devices(r, res, &ids, &mut c.devices);
    }
    for op in &mut c.ops {
        let Some(p) = &mut op.pod else { continue };
        let mut reusable = BTreeMap::new();
        for ct in &mut p.init {
            let regular = !ct.restartable;
            *ct = with_devices(r, ct.clone(), &resources, &mut reusable, regular);
        }
        for ct in &mut p.containers {
            *ct = with_devices(r, ct.clone(), &resources, &mut reusable, false);
        }
    }
    let mut ops = Vec::new();
    let mut live: Vec<PodJson> = Vec::new();
    for op in std::mem::take(&mut c.ops) {
        match &op.pod {
            Some(p) => live.push(p.clone()),
            None => live.retain(|p| p.uid != op.uid),
        }
        ops.push(op);
        if !live.is_empty() && r.chance(10) {
            let uid = live[r.range(0, live.len() - 1)].uid.clone();
            ops.push(OpJson {
                op: "readmit".into(),
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
    let ops = gen_ops(r, pods, 25, 35, gen_container);
    let ncpus = machine.cpus.len();
    CaseJson {
        id,
        machine,
        cpu_options: BTreeMap::new(),
        reserved_cpus: String::new(),
        num_reserved: r.range(1, 2.min(ncpus)),
        tm_policy: tm_policy.into(),
        tm_scope: tm_scope.into(),
        tm_options,
        ops,
        memory: None,
        devices: Vec::new(),
        checkpoint: false,
    }
}
