//! CPU topology hints (the CPU manager as a topology-manager hint provider) and the
//! kubelet's guaranteed-CPU counting (`guaranteedCPUs`, `podGuaranteedCPUs`).

use crate::cpuset::CpuSet;
use crate::pod::{Container, Pod, QosClass};
use crate::topology::CpuTopology;
use crate::topologymanager::{NumaMask, TopologyHint};

/// `guaranteedCPUs`: the exclusive CPUs a container gets, 0 for the shared pool (pod not
/// Guaranteed, no CPU request, or a request that is not a whole number of CPUs).
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if pod.qos_class() != QosClass::Guaranteed {
        return 0;
    }
    container_integer_cpus(container)
}

/// The container's whole-CPU request (0 when missing or fractional), without the QoS test.
fn container_integer_cpus(container: &Container) -> usize {
    match container.requests.cpu_millis {
        Some(m) if m % 1000 == 0 => (m / 1000) as usize,
        _ => 0,
    }
}

/// `podGuaranteedCPUs`: the CPUs a pod needs at its peak: the larger of the app containers
/// plus restartable (sidecar) init containers, and the largest regular init container plus
/// the sidecars started before it. Containers without a CPU request are skipped.
pub fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    let guaranteed = pod.qos_class() == QosClass::Guaranteed;
    let count = |c: &Container| {
        if guaranteed {
            container_integer_cpus(c)
        } else {
            0
        }
    };
    let mut by_init = 0;
    let mut by_sidecars = 0;
    for c in &pod.init_containers {
        if c.requests.cpu_millis.is_none() {
            continue;
        }
        let r = count(c);
        if c.restartable {
            by_sidecars += r;
        } else if by_sidecars + r > by_init {
            by_init = by_sidecars + r;
        }
    }
    let by_app: usize = pod
        .containers
        .iter()
        .filter(|c| c.requests.cpu_millis.is_some())
        .map(count)
        .sum();
    let long_running = by_app + by_sidecars;
    by_init.max(long_running)
}

/// `IterateBitMasks` order: masks of 1 node, then 2, … each in lexicographic order of the
/// (ascending) node list.
pub(crate) fn iterate_masks(nodes: &[usize], mut f: impl FnMut(NumaMask)) {
    fn rec(nodes: &[usize], accum: u64, left: usize, f: &mut dyn FnMut(NumaMask)) {
        if left == 0 {
            f(NumaMask::from_bits(accum));
            return;
        }
        for i in 0..nodes.len() {
            rec(&nodes[i + 1..], accum | (1u64 << nodes[i]), left - 1, f);
        }
    }
    for size in 1..=nodes.len() {
        rec(nodes, 0, size, &mut f);
    }
}

/// `generateCPUTopologyHints`: every NUMA-node mask (over the nodes that have CPUs, ids
/// below 64) that holds all `reusable` CPUs and at least `request` CPUs of
/// `available ∪ reusable`, in the kubelet's order. Preferred: the mask has the fewest nodes
/// any mask needs to hold `request` CPUs of the whole machine, or, with align-by-socket,
/// spans the fewest sockets (declared NUMA nodes per socket).
pub fn generate_cpu_topology_hints(
    t: &CpuTopology,
    available: &CpuSet,
    reusable: &CpuSet,
    request: usize,
    align_by_socket: bool,
) -> Vec<TopologyHint> {
    let nodes: Vec<usize> = t
        .ids_of(&t.all_cpus(), |c| c.numa)
        .into_iter()
        .filter(|n| *n < 64)
        .collect();
    // CPUs per node (whole machine), and the node of each CPU of interest.
    let per_node = |m: NumaMask| -> usize {
        t.cpus()
            .iter()
            .filter(|c| c.numa < 64 && m.is_set(c.numa))
            .count()
    };
    let node_of = |id: usize| t.cpu(id).map(|c| c.numa);
    let reusable_nodes: Option<Vec<usize>> = reusable.iter().map(node_of).collect();
    let avail_nodes: Vec<usize> = available.iter().filter_map(node_of).collect();
    let mut min_affinity = nodes.len();
    let mut hints = Vec::new();
    iterate_masks(&nodes, |mask| {
        if per_node(mask) >= request && (mask.count() as usize) < min_affinity {
            min_affinity = mask.count() as usize;
        }
        let mut matching = 0;
        match &reusable_nodes {
            Some(rn) => {
                for n in rn {
                    if !mask.is_set(*n) {
                        return;
                    }
                    matching += 1;
                }
            }
            // A reusable CPU the topology does not know: the kubelet reads a zero-value
            // CPUInfo (NUMA node 0) for it.
            None => {
                for id in reusable.iter() {
                    if !mask.is_set(node_of(id).unwrap_or(0)) {
                        return;
                    }
                    matching += 1;
                }
            }
        }
        matching += avail_nodes.iter().filter(|n| mask.is_set(**n)).count();
        if matching < request {
            return;
        }
        hints.push(TopologyHint {
            affinity: Some(mask),
            preferred: false,
        });
    });
    let d = t.declared();
    let numa_per_socket = d.num_numa_nodes.checked_div(d.num_sockets).unwrap_or(0);
    for h in &mut hints {
        let Some(mask) = h.affinity else { continue };
        if align_by_socket && numa_per_socket > 0 {
            let min_sockets = min_affinity.div_ceil(numa_per_socket);
            let sockets = t
                .ids_of(&t.cpus_where(|c| c.numa < 64 && mask.is_set(c.numa)), |c| {
                    c.socket
                })
                .len();
            if sockets == min_sockets {
                h.preferred = true;
                continue;
            }
        }
        if mask.count() as usize == min_affinity {
            h.preferred = true;
        }
    }
    hints
}
