//! The static policy's allocation and release (kubelet `policy_static.go` `Allocate`,
//! `RemoveContainer` and the machine-state updates they make), and the snapshot that undoes
//! a rejected admission.

use std::collections::BTreeMap;

use super::{container_request, Block, MemoryError, MemoryManager, MemoryResource, NodeMemory};
use crate::pod::{Container, Pod, QosClass};
use crate::topologymanager::{NumaMask, TopologyHint};

/// The part of a [`MemoryManager`] one pod's admission can change.
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    nodes: BTreeMap<usize, NodeMemory>,
    pod_blocks: Option<BTreeMap<String, Vec<Block>>>,
    reusable: BTreeMap<String, BTreeMap<(u64, MemoryResource), u64>>,
}

impl MemoryManager {
    /// Gives memory to a container under the merged hint (kubelet static `Allocate`).
    /// `hint` is the topology manager's affinity (`None` = no affinity). Not Guaranteed: no-op.
    pub fn allocate(
        &mut self,
        pod: &Pod,
        container: &Container,
        hint: Option<&TopologyHint>,
    ) -> Result<(), MemoryError> {
        if pod.qos_class() != QosClass::Guaranteed {
            return Ok(());
        }
        if let Some(blocks) = self
            .blocks(&pod.uid, &container.name)
            .map(<[Block]>::to_vec)
        {
            self.update_reusable(pod, container, &blocks);
            return Ok(());
        }
        let request = container_request(container);
        if request.is_empty() {
            return Ok(());
        }
        let given = hint.copied().unwrap_or(TopologyHint {
            affinity: None,
            preferred: false,
        });
        let source = self.hint_source(&pod.uid, &request);
        let mut best = given;
        if given.affinity.is_none() {
            if source.is_empty() {
                return Err(MemoryError::NoDefaultAffinity);
            }
            let default = source
                .best_containing(NumaMask::EMPTY)
                .ok_or(MemoryError::NoDefaultAffinity)?;
            if !default.preferred && given.preferred {
                return Err(MemoryError::NoDefaultPreferred);
            }
            best = default;
        }
        let mask = best.affinity.unwrap_or_default();
        if !self.satisfies(mask, &request) {
            if source.is_empty() {
                return Err(MemoryError::NoExtension);
            }
            let ext = source
                .best_containing(mask)
                .ok_or(MemoryError::NoExtension)?;
            if !ext.preferred && best.preferred {
                return Err(MemoryError::NoExtendedPreferred);
            }
            best = ext;
        }
        let mask = best.affinity.unwrap_or_default();
        if self.violates_groups(mask) {
            return Err(MemoryError::ViolatesNumaAllocation);
        }
        let mut blocks = Vec::new();
        for (r, size) in &request {
            blocks.push(Block {
                affinity: mask,
                size: *size,
                resource: *r,
            });
            let reusable = self.pod_reusable(&pod.uid, mask, *r);
            let remaining = size.saturating_sub(reusable);
            self.take(mask, *r, remaining);
        }
        self.blocks
            .entry(pod.uid.clone())
            .or_default()
            .insert(container.name.clone(), blocks.clone());
        self.update_reusable(pod, container, &blocks);
        self.update_init_blocks(pod, container, &blocks);
        Ok(())
    }

    /// `updateInitContainersMemoryBlocks`: memory a container reuses from the regular init
    /// containers before it (same resource, same NUMA nodes) is taken off their blocks, so
    /// the pod's blocks add up to what it holds and removing the pod gives back exactly
    /// that. An init block can shrink to size 0.
    fn update_init_blocks(&mut self, pod: &Pod, container: &Container, blocks: &[Block]) {
        let Some(per_pod) = self.blocks.get_mut(&pod.uid) else {
            return;
        };
        for b in blocks {
            let mut left = b.size;
            for init in &pod.init_containers {
                if init.name == container.name || left == 0 {
                    break;
                }
                if init.restartable {
                    continue;
                }
                let Some(init_blocks) = per_pod.get_mut(&init.name) else {
                    continue;
                };
                for x in init_blocks.iter_mut() {
                    if x.size == 0 || x.resource != b.resource || x.affinity != b.affinity {
                        continue;
                    }
                    let used = x.size.min(left);
                    x.size -= used;
                    left -= used;
                }
            }
        }
    }

    /// `isAffinityViolatingNUMAAllocations`: a multi-node `mask` may not include a used node
    /// that serves single-node blocks or belongs to a different group.
    fn violates_groups(&self, mask: NumaMask) -> bool {
        if mask.count() == 1 {
            return false;
        }
        mask.ids()
            .filter_map(|id| self.nodes.get(&id))
            .any(|n| n.assignments > 0 && (n.cells.count() == 1 || n.cells != mask))
    }

    /// True when `mask`'s free memory holds every requested amount (`isAffinitySatisfyRequest`).
    fn satisfies(&self, mask: NumaMask, request: &BTreeMap<MemoryResource, u64>) -> bool {
        request.iter().all(|(r, want)| {
            let free: u64 = mask
                .ids()
                .filter_map(|id| self.nodes.get(&id))
                .map(|n| n.tables.get(r).map_or(0, |t| t.free))
                .fold(0, u64::saturating_add);
            free >= *want
        })
    }

    fn pod_reusable(&self, pod_uid: &str, mask: NumaMask, r: MemoryResource) -> u64 {
        self.reusable
            .get(pod_uid)
            .and_then(|m| m.get(&(mask.bits(), r)))
            .copied()
            .unwrap_or(0)
    }

    /// `updateMachineState`: every node of the mask joins the group and counts the block;
    /// the size is taken from the nodes in id order.
    fn take(&mut self, mask: NumaMask, r: MemoryResource, mut size: u64) {
        for id in mask.ids() {
            let Some(node) = self.nodes.get_mut(&id) else {
                continue;
            };
            node.assignments += 1;
            node.cells = mask;
            if size == 0 {
                continue;
            }
            let Some(t) = node.tables.get_mut(&r) else {
                continue;
            };
            let used = t.free.min(size);
            t.free -= used;
            t.reserved += used;
            size -= used;
        }
    }

    /// `updatePodReusableMemory`: regular init containers leave their blocks reusable (the
    /// largest per mask and resource); app containers and sidecars consume reusable memory.
    fn update_reusable(&mut self, pod: &Pod, container: &Container, blocks: &[Block]) {
        self.reusable.retain(|uid, _| uid == &pod.uid);
        let regular_init = pod
            .init_containers
            .iter()
            .any(|c| c.name == container.name && !c.restartable);
        let per = self.reusable.entry(pod.uid.clone()).or_default();
        for b in blocks {
            let e = per.entry((b.affinity.bits(), b.resource)).or_insert(0);
            if regular_init {
                *e = (*e).max(b.size);
            } else {
                *e = e.saturating_sub(b.size);
            }
        }
    }

    /// What admitting `pod_uid` can change: the per-node tables, that pod's blocks and the
    /// reusable-memory bookkeeping. Restoring it with [`MemoryManager::rollback`] undoes a
    /// rejected admission exactly, at O(nodes) instead of a copy of every pod's blocks.
    pub fn snapshot(&self, pod_uid: &str) -> MemorySnapshot {
        MemorySnapshot {
            nodes: self.nodes.clone(),
            pod_blocks: self.blocks.get(pod_uid).cloned(),
            reusable: self.reusable.clone(),
        }
    }

    /// Restores what [`MemoryManager::snapshot`] saved for `pod_uid`.
    pub fn rollback(&mut self, pod_uid: &str, snap: MemorySnapshot) {
        self.nodes = snap.nodes;
        match snap.pod_blocks {
            Some(b) => {
                self.blocks.insert(pod_uid.to_string(), b);
            }
            None => {
                self.blocks.remove(pod_uid);
            }
        }
        self.reusable = snap.reusable;
    }

    /// Undoes a rejected admission of `pod_uid` as the kubelet does: its stale-state cleanup
    /// releases the pod's new blocks through `RemoveContainer`, so the memory goes back to
    /// the nodes of each block's group in id order, which need not be the nodes it was
    /// taken from (a group's free/reserved split can move; kubelet v1.37.2, checked by the
    /// oracle), and the pod's reusable init-container memory stays recorded. A pod that
    /// held blocks before this admission is restored exactly from `snap`.
    pub fn release_rejected(&mut self, pod_uid: &str, snap: MemorySnapshot) {
        if snap.pod_blocks.is_some() {
            self.rollback(pod_uid, snap);
            return;
        }
        self.remove_containers(pod_uid);
    }

    /// Releases a container's blocks (kubelet `RemoveContainer`): memory goes back to the
    /// nodes in id order; a node with no assignments left leaves its group.
    pub fn remove_container(&mut self, pod_uid: &str, container: &str) {
        let Some(blocks) = self
            .blocks
            .get_mut(pod_uid)
            .and_then(|c| c.remove(container))
        else {
            return;
        };
        if self.blocks.get(pod_uid).is_some_and(BTreeMap::is_empty) {
            self.blocks.remove(pod_uid);
        }
        for b in blocks {
            let mut size = b.size;
            for id in b.affinity.ids() {
                let Some(node) = self.nodes.get_mut(&id) else {
                    continue;
                };
                node.assignments = node.assignments.saturating_sub(1);
                if node.assignments == 0 {
                    node.cells = NumaMask::from_bits(1 << id);
                }
                if size == 0 {
                    continue;
                }
                let Some(t) = node.tables.get_mut(&b.resource) else {
                    continue;
                };
                let back = t.reserved.min(size);
                t.reserved -= back;
                t.free += back;
                size -= back;
            }
        }
    }

    /// Releases every container of a pod and forgets its reusable memory.
    pub fn remove_pod(&mut self, pod_uid: &str) {
        self.remove_containers(pod_uid);
        self.reusable.remove(pod_uid);
    }

    /// Releases every container of `pod_uid` that holds blocks, as [`Self::remove_container`].
    fn remove_containers(&mut self, pod_uid: &str) {
        let names: Vec<String> = self
            .blocks
            .get(pod_uid)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for n in names {
            self.remove_container(pod_uid, &n);
        }
    }
}
