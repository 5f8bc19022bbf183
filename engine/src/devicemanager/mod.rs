//! The device manager as a hint provider, with its allocation bookkeeping (kubelet
//! `pkg/kubelet/cm/devicemanager/topology_hints.go` and `manager.go`'s
//! `devicesToAllocate`/`filterByAffinity`).
//!
//! A device belongs to an extended resource (`example.com/gpu`) and may name the NUMA nodes
//! it is attached to. A resource whose devices name no NUMA node has no topology preference
//! (nil hints). Otherwise, per mask over the NUMA nodes the resource's devices are attached
//! to (not every node of the machine, as `deviceNUMANodes` does): every reusable device
//! (from the pod's init containers) that has a topology must touch the mask, and reusable
//! plus available devices touching the mask must reach the request; preferred iff the
//! mask's width equals the narrowest width under which *all* the resource's devices could
//! reach the request.
//!
//! Allocation takes reusable devices first, then devices touching the merged hint's nodes,
//! then devices elsewhere, then devices without NUMA affinity. The kubelet picks within
//! those groups in Go set order unless the device plugin offers a preferred allocation;
//! here ties break by device id (what the kubelet does with a plugin preferring the lowest
//! ids, devices with a topology first), so results are deterministic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::pod::{Container, Pod};
use crate::topologymanager::{NumaMask, ProviderHintSet, ProviderNodes, TopologyHint};

use crate::topologymanager::subsets::{for_each_mask, min_width_single, within};

/// The most devices a node may list, all resources together. Real nodes list a few dozen
/// (GPUs, NICs' virtual functions: at most a few hundred); the bound keeps a device count such
/// as `99999999999` from allocating gigabytes of device records.
pub const MAX_DEVICES: usize = 4096;

/// One device of an extended resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSpec {
    /// The extended resource it provides (`example.com/gpu`).
    pub resource: String,
    /// The device id, unique within the resource.
    pub id: String,
    /// NUMA nodes the device is attached to; empty = no NUMA affinity.
    #[serde(default)]
    pub numa_nodes: Vec<usize>,
    /// Whether the plugin reports the device `Healthy`. The kubelet never allocates an
    /// unhealthy device, but still counts it where it decides whether a resource has a
    /// topology, which NUMA nodes hints range over and how narrow a preferred hint is.
    #[serde(default = "healthy_by_default")]
    pub healthy: bool,
}

fn healthy_by_default() -> bool {
    true
}

/// Why devices could not be set up or allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Two devices of a resource share an id.
    #[error("device {id:?} of resource {resource:?} is listed twice")]
    Duplicate {
        /// Resource.
        resource: String,
        /// Device id.
        id: String,
    },
    /// A device names a NUMA node the machine does not have.
    #[error("device {id:?} of resource {resource:?} names NUMA node {node}, which this machine does not have")]
    UnknownNode {
        /// Resource.
        resource: String,
        /// Device id.
        id: String,
        /// The node.
        node: usize,
    },
    /// More devices than [`MAX_DEVICES`].
    #[error("{count} devices listed; a node may list at most {MAX_DEVICES}")]
    TooMany {
        /// How many were listed.
        count: usize,
    },
    /// The resource is registered but none of its devices is healthy (also: a plugin that
    /// lists no device). The kubelet's `devicesToAllocate` checks this before the request
    /// size, so a container asking for 0 of such a resource is refused too.
    #[error("no healthy devices present; cannot allocate unhealthy devices {resource}")]
    NoHealthy {
        /// Resource.
        resource: String,
    },
    /// A container that already holds devices of a resource asks for a different number
    /// (kubelet `devicesToAllocate`, on a re-admission).
    #[error("pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}")]
    ChangedRequest {
        /// Pod UID.
        pod: String,
        /// Container name.
        container: String,
        /// Resource.
        resource: String,
        /// Devices held.
        from: usize,
        /// Devices requested now.
        to: u64,
    },
    /// Not enough free devices (kubelet `devicesToAllocate`).
    #[error("requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}")]
    Unavailable {
        /// Resource.
        resource: String,
        /// Requested count.
        requested: u64,
        /// Free count.
        available: usize,
    },
}

impl DeviceError {
    /// The admission reason: the kubelet files device allocation failures as
    /// `UnexpectedAdmissionError`.
    pub fn reason(&self) -> &'static str {
        "UnexpectedAdmissionError"
    }

    /// The rejection message the kubelet reports: its admission handler wraps a plain
    /// error as `Allocate failed due to <error>, which is unexpected`
    /// (`admission.GetPodAdmitResult`).
    pub fn admission_message(&self) -> String {
        format!("Allocate failed due to {self}, which is unexpected")
    }
}

/// Devices, their allocations to containers, and the devices the admitting pod's init
/// containers left reusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceManager {
    /// resource -> device id -> NUMA mask (empty = no affinity); every registered resource,
    /// also those without devices, and unhealthy devices too (the kubelet's `allDevices`).
    devices: BTreeMap<String, BTreeMap<String, NumaMask>>,
    /// Devices the plugin reports unhealthy, per resource: never allocated.
    unhealthy: BTreeMap<String, BTreeSet<String>>,
    /// The machine's NUMA node ids.
    ids: Vec<usize>,
    /// pod uid -> container -> resource -> device ids.
    allocated: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>,
    /// pod uid -> resource -> reusable device ids (only the pod being admitted).
    reusable: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

/// The part of a [`DeviceManager`] one pod's admission can change.
#[derive(Debug, Clone)]
pub struct DeviceSnapshot {
    pod: Option<BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>,
}

/// The answer of the device manager for one resource.
#[derive(Debug, Clone)]
pub enum DeviceHints {
    /// No topology preference (nil list).
    DontCare,
    /// An explicit list (regenerated, or empty when the request cannot be met).
    Explicit(Vec<TopologyHint>),
    /// The implicit `generateDeviceTopologyHints` list.
    Implicit(Arc<DeviceHintSource>),
}

/// `generateDeviceTopologyHints`, answered per mask.
#[derive(Debug, Clone)]
pub struct DeviceHintSource {
    ids: Vec<usize>,
    universe: NumaMask,
    /// Masks of the available devices that have a topology.
    available: Vec<NumaMask>,
    /// Masks of the reusable devices that have a topology.
    reusable: Vec<NumaMask>,
    request: u64,
    min_affinity: usize,
}

impl DeviceHintSource {
    /// `Some(preferred)` when `mask` is in the kubelet's list, else `None`.
    pub fn lookup(&self, mask: NumaMask) -> Option<bool> {
        if !within(mask, self.universe) {
            return None;
        }
        if self.reusable.iter().any(|d| d.and(mask).is_empty()) {
            return None;
        }
        let matching = self.reusable.len()
            + self
                .available
                .iter()
                .filter(|d| !d.and(mask).is_empty())
                .count();
        if (matching as u64) < self.request {
            return None;
        }
        Some(mask.count() as usize == self.min_affinity)
    }

    /// The kubelet's explicit list.
    pub fn materialize(&self) -> Vec<TopologyHint> {
        crate::topologymanager::subsets::materialize_with(&self.ids, |m| self.lookup(m))
    }
}

impl DeviceManager {
    /// Registers `devices` on a machine with NUMA nodes `numa_ids`.
    pub fn new(devices: &[DeviceSpec], numa_ids: &[usize]) -> Result<Self, DeviceError> {
        Self::with_resources(devices, &[], numa_ids)
    }

    /// Registers `devices` and also the resources `registered` (device plugins that
    /// registered, whether or not they list a device) on a machine with NUMA nodes
    /// `numa_ids`. A registered resource without a healthy device is still a device-plugin
    /// resource for the kubelet: a container asking for it (even 0 of it) is refused.
    pub fn with_resources(
        devices: &[DeviceSpec],
        registered: &[String],
        numa_ids: &[usize],
    ) -> Result<Self, DeviceError> {
        if devices.len() > MAX_DEVICES {
            return Err(DeviceError::TooMany {
                count: devices.len(),
            });
        }
        let mut map: BTreeMap<String, BTreeMap<String, NumaMask>> = registered
            .iter()
            .map(|r| (r.clone(), BTreeMap::new()))
            .collect();
        let mut unhealthy: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for d in devices {
            if !d.healthy {
                unhealthy
                    .entry(d.resource.clone())
                    .or_default()
                    .insert(d.id.clone());
            }
            let mut bits = 0u64;
            for n in &d.numa_nodes {
                if !numa_ids.contains(n) || *n > 63 {
                    return Err(DeviceError::UnknownNode {
                        resource: d.resource.clone(),
                        id: d.id.clone(),
                        node: *n,
                    });
                }
                bits |= 1 << n;
            }
            let per = map.entry(d.resource.clone()).or_default();
            if per
                .insert(d.id.clone(), NumaMask::from_bits(bits))
                .is_some()
            {
                return Err(DeviceError::Duplicate {
                    resource: d.resource.clone(),
                    id: d.id.clone(),
                });
            }
        }
        let mut ids: Vec<usize> = numa_ids.iter().copied().filter(|i| *i < 64).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(Self {
            devices: map,
            unhealthy,
            ids,
            allocated: BTreeMap::new(),
            reusable: BTreeMap::new(),
        })
    }

    /// True when `resource` is provided by registered devices.
    pub fn knows(&self, resource: &str) -> bool {
        self.devices.contains_key(resource)
    }

    /// The devices of one container, per resource.
    pub fn allocated(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Option<&BTreeMap<String, BTreeSet<String>>> {
        self.allocated.get(pod_uid).and_then(|c| c.get(container))
    }

    /// Free devices per resource: healthy and not allocated to any container (the
    /// kubelet's `getAvailableDevices`).
    pub fn free(&self, resource: &str) -> BTreeSet<String> {
        let Some(all) = self.devices.get(resource) else {
            return BTreeSet::new();
        };
        let sick = self.unhealthy.get(resource);
        let used: BTreeSet<&String> = self
            .allocated
            .values()
            .flat_map(|c| c.values())
            .filter_map(|r| r.get(resource))
            .flatten()
            .collect();
        all.keys()
            .filter(|d| !used.contains(d) && !sick.is_some_and(|s| s.contains(*d)))
            .cloned()
            .collect()
    }

    /// Free devices per resource and NUMA node: `Some(node)` for each node a device has an
    /// affinity to (a device on several nodes counts on each), `None` for devices without
    /// any affinity.
    pub fn free_by_numa(&self) -> BTreeMap<String, BTreeMap<Option<usize>, u64>> {
        let mut out: BTreeMap<String, BTreeMap<Option<usize>, u64>> = BTreeMap::new();
        for (resource, devices) in &self.devices {
            let free = self.free(resource);
            let per = out.entry(resource.clone()).or_default();
            for (id, mask) in devices {
                if !free.contains(id) {
                    continue;
                }
                if mask.is_empty() {
                    *per.entry(None).or_default() += 1;
                }
                for n in mask.ids() {
                    *per.entry(Some(n)).or_default() += 1;
                }
            }
        }
        out
    }

    /// How many devices of `resource` are healthy (allocated or not).
    fn healthy_count(&self, resource: &str) -> usize {
        let all = self.devices.get(resource).map_or(0, BTreeMap::len);
        all - self.unhealthy.get(resource).map_or(0, BTreeSet::len)
    }

    /// The device requests of a container: its extended resources that devices provide
    /// (limits win over requests; the API requires them equal). A request of 0 is kept, as
    /// the kubelet's `getContainerDeviceRequest` keeps it: it still yields hints (every
    /// mask, single nodes preferred) and still needs a healthy device to exist.
    pub fn container_request(&self, c: &Container) -> BTreeMap<String, u64> {
        c.requests
            .extended
            .iter()
            .chain(c.limits.extended.iter())
            .filter(|(r, _)| self.knows(r))
            .map(|(r, n)| (r.clone(), *n))
            .collect()
    }

    /// The pod's device requests (kubelet `getPodDeviceRequest`): per resource the larger
    /// of the long-running containers' sum and the peak of a regular init container.
    ///
    /// The kubelet sums exact quantities (`PodLimits`) and then reads them with
    /// `int(Quantity.Value())`, which keeps the low 64 bits of a sum past int64: a pod whose
    /// containers ask for more than 2^63 - 1 devices together gets a negative request, which
    /// hints treat like 0 (every mask, single nodes preferred). Sums here are exact too and
    /// wrap the same way; a negative result is 0.
    pub fn pod_request(&self, pod: &Pod) -> BTreeMap<String, u64> {
        let mut init_peak: BTreeMap<String, u128> = BTreeMap::new();
        let mut sidecars: BTreeMap<String, u128> = BTreeMap::new();
        for c in &pod.init_containers {
            for (r, n) in self.container_request(c) {
                let side = sidecars.entry(r.clone()).or_insert(0);
                if c.restartable {
                    *side += u128::from(n);
                } else {
                    let peak = init_peak.entry(r).or_insert(0);
                    *peak = (*peak).max(*side + u128::from(n));
                }
            }
        }
        let mut out = sidecars;
        for c in &pod.containers {
            for (r, n) in self.container_request(c) {
                *out.entry(r).or_insert(0) += u128::from(n);
            }
        }
        for (r, n) in init_peak {
            let e = out.entry(r).or_insert(0);
            *e = (*e).max(n);
        }
        out.into_iter().map(|(r, n)| (r, go_int64(n))).collect()
    }

    /// Hints for one container: `None` = nil map (no device requested).
    pub fn container_hints(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Option<BTreeMap<String, DeviceHints>> {
        let request = self.container_request(c);
        let allocated = self.allocated(&pod.uid, &c.name);
        self.hints(Some(&pod.uid), &request, |r| {
            allocated
                .and_then(|a| a.get(r))
                .cloned()
                .unwrap_or_default()
        })
    }

    /// Hints for the whole pod (kubelet `GetPodTopologyHints`).
    pub fn pod_hints(&self, pod: &Pod) -> Option<BTreeMap<String, DeviceHints>> {
        let request = self.pod_request(pod);
        let per_pod = self.allocated.get(&pod.uid);
        // `GetPodTopologyHints` passes no reusable devices (and counts only available ones).
        self.hints(None, &request, |r| {
            per_pod
                .map(|cs| {
                    cs.values()
                        .filter_map(|m| m.get(r))
                        .flatten()
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// `reuse_of`: the pod whose init containers' reusable devices count (container scope);
    /// `None` in pod scope.
    fn hints(
        &self,
        reuse_of: Option<&str>,
        request: &BTreeMap<String, u64>,
        allocated: impl Fn(&str) -> BTreeSet<String>,
    ) -> Option<BTreeMap<String, DeviceHints>> {
        let mut out = BTreeMap::new();
        for (r, n) in request {
            let all = &self.devices[r];
            if all.values().all(|m| m.is_empty()) {
                out.insert(r.clone(), DeviceHints::DontCare);
                continue;
            }
            let have = allocated(r);
            if !have.is_empty() {
                if have.len() as u64 != *n {
                    out.insert(r.clone(), DeviceHints::Explicit(Vec::new()));
                } else {
                    let src = self.source(r, &have, &BTreeSet::new(), *n);
                    out.insert(r.clone(), DeviceHints::Explicit(src.materialize()));
                }
                continue;
            }
            let available = self.free(r);
            let reusable = reuse_of
                .and_then(|uid| self.reusable.get(uid))
                .and_then(|m| m.get(r))
                .cloned()
                .unwrap_or_default();
            // The kubelet checks the union: a device both free and reusable (a second
            // attempt of a rejected pod, whose devices went back) counts once here, but
            // twice in the per-mask count below, as in `generateDeviceTopologyHints`.
            if (available.union(&reusable).count() as u64) < *n {
                out.insert(r.clone(), DeviceHints::Explicit(Vec::new()));
                continue;
            }
            let src = self.source(r, &available, &reusable, *n);
            out.insert(r.clone(), DeviceHints::Implicit(Arc::new(src)));
        }
        if out.is_empty() {
            None
        } else {
            Some(out)
        }
    }

    fn source(
        &self,
        resource: &str,
        available: &BTreeSet<String>,
        reusable: &BTreeSet<String>,
        request: u64,
    ) -> DeviceHintSource {
        let all = &self.devices[resource];
        let masks = |set: &BTreeSet<String>| -> Vec<NumaMask> {
            set.iter()
                .filter_map(|d| all.get(d).copied())
                .filter(|m| !m.is_empty())
                .collect()
        };
        let every: Vec<NumaMask> = all.values().copied().filter(|m| !m.is_empty()).collect();
        // The kubelet's `generateDeviceTopologyHints` enumerates masks over the NUMA nodes
        // the resource's devices are attached to (`deviceNUMANodes`), not over every node
        // of the machine: a node without such a device is in no hint.
        let ids = device_nodes(&self.ids, &every);
        DeviceHintSource {
            universe: NumaMask::new(ids.iter().copied()).unwrap_or_default(),
            available: masks(available),
            reusable: masks(reusable),
            request,
            min_affinity: min_device_width(&ids, &every, request).unwrap_or(ids.len()),
            ids,
        }
    }

    /// The kubelet's `Allocate` for one container of `pod` (called for every container of
    /// every pod admitted, device requests or not): picks devices for the container's
    /// requests under the merged hint (`hint` None = no affinity), keeps what it already
    /// holds (a re-admission), and updates the pod's reusable devices.
    pub fn allocate(
        &mut self,
        pod: &Pod,
        c: &Container,
        hint: Option<&TopologyHint>,
    ) -> Result<(), DeviceError> {
        // `Allocate` runs for every container of every admitted pod, with or without device
        // requests, and first drops the reuse bookkeeping of every other pod.
        self.reusable.retain(|uid, _| uid == &pod.uid);
        let request = self.container_request(c);
        let held = self
            .allocated(&pod.uid, &c.name)
            .cloned()
            .unwrap_or_default();
        let mut given: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (r, n) in &request {
            // `devicesToAllocate`: devices the container already holds (a re-admission)
            // must match the request, before any other check.
            let have = held.get(r);
            if let Some(have) = have {
                if have.len() as u64 != *n {
                    return Err(DeviceError::ChangedRequest {
                        pod: pod.uid.clone(),
                        container: c.name.clone(),
                        resource: r.clone(),
                        from: have.len(),
                        to: *n,
                    });
                }
            }
            // Then it checks for a healthy device before the request size.
            if self.healthy_count(r) == 0 {
                return Err(DeviceError::NoHealthy {
                    resource: r.clone(),
                });
            }
            let needed = usize::try_from(*n).unwrap_or(usize::MAX);
            if needed == 0 || have.is_some() {
                continue;
            }
            let mut picked: BTreeSet<String> = BTreeSet::new();
            let reuse = self
                .reusable
                .get(&pod.uid)
                .and_then(|m| m.get(r))
                .cloned()
                .unwrap_or_default();
            picked.extend(reuse.into_iter().take(needed));
            let free: Vec<String> = self
                .free(r)
                .into_iter()
                .filter(|d| !picked.contains(d))
                .collect();
            if picked.len() < needed && picked.len() + free.len() < needed {
                // `devicesToAllocate` reports what is still needed after the reusable
                // devices and the free devices apart from them.
                return Err(DeviceError::Unavailable {
                    resource: r.clone(),
                    requested: *n - picked.len() as u64,
                    available: free.len(),
                });
            }
            for d in self.order_by_affinity(r, &free, hint.and_then(|h| h.affinity)) {
                if picked.len() >= needed {
                    break;
                }
                picked.insert(d);
            }
            given.insert(r.clone(), picked);
        }
        if !given.is_empty() {
            self.allocated
                .entry(pod.uid.clone())
                .or_default()
                .entry(c.name.clone())
                .or_default()
                .extend(given);
        }
        // Every device the container holds (also from an earlier admission) becomes
        // reusable after a regular init container (`addContainerAllocatedResources`) and
        // stops being reusable after any other container (`removeContainerAllocatedResources`);
        // zero requests record nothing, so they change nothing here.
        let regular_init = pod
            .init_containers
            .iter()
            .any(|x| x.name == c.name && !x.restartable);
        let holds = self
            .allocated(&pod.uid, &c.name)
            .cloned()
            .unwrap_or_default();
        let reuse = self.reusable.entry(pod.uid.clone()).or_default();
        for (r, ds) in &holds {
            let e = reuse.entry(r.clone()).or_default();
            if regular_init {
                e.extend(ds.iter().cloned());
            } else {
                e.retain(|d| !ds.contains(d));
            }
        }
        Ok(())
    }

    /// `filterByAffinity` then the plugin's choice: devices touching the hint's nodes
    /// (aligned), then devices on other nodes, then devices without NUMA affinity; with no
    /// hint (or a resource without topology) devices with a topology before those without.
    /// Within each group the kubelet takes devices in Go set order (its per-node sort is
    /// lost when the groups become sets) unless the plugin offers a preferred allocation;
    /// here, as with a plugin preferring the lowest ids, ties break by device id.
    fn order_by_affinity(
        &self,
        resource: &str,
        free: &[String],
        hint: Option<NumaMask>,
    ) -> Vec<String> {
        let all = &self.devices[resource];
        let topology = all.values().any(|m| !m.is_empty());
        let rank = |d: &String| -> u8 {
            let m = all[d];
            if m.is_empty() {
                return 2;
            }
            match hint {
                Some(h) if topology && m.and(h).is_empty() => 1,
                _ => 0,
            }
        };
        let mut out = free.to_vec();
        out.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
        out
    }

    /// What admitting `pod_uid` can change: that pod's devices. Restoring it with
    /// [`DeviceManager::rollback`] gives back a rejected admission's devices.
    pub fn snapshot(&self, pod_uid: &str) -> DeviceSnapshot {
        DeviceSnapshot {
            pod: self.allocated.get(pod_uid).cloned(),
        }
    }

    /// Restores the devices [`DeviceManager::snapshot`] saved for `pod_uid`. The reuse
    /// bookkeeping of the attempt stays, as the kubelet's `devicesToReuse` does (kept per
    /// pod UID until another pod allocates): a second attempt of the same pod sees the
    /// devices its regular init containers got as reusable (in its hints, and taken first).
    pub fn rollback(&mut self, pod_uid: &str, snap: DeviceSnapshot) {
        match snap.pod {
            Some(p) => {
                self.allocated.insert(pod_uid.to_string(), p);
            }
            None => {
                self.allocated.remove(pod_uid);
            }
        }
    }

    /// Releases a container's devices.
    pub fn remove_container(&mut self, pod_uid: &str, container: &str) {
        if let Some(cs) = self.allocated.get_mut(pod_uid) {
            cs.remove(container);
            if cs.is_empty() {
                self.allocated.remove(pod_uid);
            }
        }
    }

    /// Releases every container of a pod (the kubelet's `UpdateAllocatedDevices` once the
    /// pod is no longer active). Its reuse bookkeeping stays, as `devicesToReuse` does,
    /// until another pod's container is allocated.
    pub fn remove_pod(&mut self, pod_uid: &str) {
        self.allocated.remove(pod_uid);
    }
}

/// A device count as the kubelet's `int(Quantity.Value())` reads an exact amount: the low
/// 64 bits as a signed integer; a negative count (a sum past 2^63 - 1) behaves as 0 in
/// every comparison the device manager makes with it, so it is 0 here.
fn go_int64(n: u128) -> u64 {
    let v = n as u64 as i64;
    v.max(0) as u64
}

/// The NUMA nodes a resource's devices are attached to (kubelet `deviceNUMANodes`), in id
/// order; every node of the machine when no device names one.
fn device_nodes(machine: &[usize], devices: &[NumaMask]) -> Vec<usize> {
    let on = devices.iter().fold(NumaMask::EMPTY, |a, m| a.or(*m));
    let ids: Vec<usize> = machine.iter().copied().filter(|n| on.is_set(*n)).collect();
    if ids.is_empty() {
        machine.to_vec()
    } else {
        ids
    }
}

/// The narrowest width of a mask touched by at least `request` of `devices`. Devices on one
/// node each (the usual case): the nodes with the most devices first. Devices spanning
/// nodes: the kubelet's enumeration, by increasing width, stopping at the first hit.
fn min_device_width(ids: &[usize], devices: &[NumaMask], request: u64) -> Option<usize> {
    if (devices.len() as u64) < request {
        return None;
    }
    if devices.iter().all(|m| m.count() == 1) {
        let counts: Vec<u64> = ids
            .iter()
            .map(|id| devices.iter().filter(|m| m.is_set(*id)).count() as u64)
            .collect();
        return min_width_single(&counts, request).map(|w| w.max(1));
    }
    let mut best = None;
    for_each_mask(ids, |m| {
        if best.is_none()
            && devices.iter().filter(|d| !d.and(m).is_empty()).count() as u64 >= request
        {
            best = Some(m.count() as usize);
        }
    });
    best
}

impl ProviderHintSet for DeviceHintSource {
    /// The narrowest hint's width. Single-node devices: the reusable devices' nodes are
    /// forced, then nodes with the most available devices. Devices spanning nodes: the
    /// kubelet's enumeration by width, stopping at the first hint.
    fn narrowest(&self) -> Option<u32> {
        let single = self
            .available
            .iter()
            .chain(&self.reusable)
            .all(|m| m.count() == 1);
        if !single {
            let mut best = None;
            for_each_mask(&self.ids, |m| {
                if best.is_none() && self.lookup(m).is_some() {
                    best = Some(m.count());
                }
            });
            return best;
        }
        let forced = self.reusable.iter().fold(NumaMask::EMPTY, |a, m| a.or(*m));
        let count_on = |n: usize| self.available.iter().filter(|m| m.is_set(n)).count();
        let have = self.reusable.len() + forced.ids().map(count_on).sum::<usize>();
        let base = forced.count() as usize;
        let need = (self.request as usize).saturating_sub(have);
        let mut others: Vec<u64> = self
            .ids
            .iter()
            .filter(|n| !forced.is_set(**n))
            .map(|n| count_on(*n) as u64)
            .collect();
        let extra = if need == 0 {
            0
        } else {
            others.sort_unstable_by(|a, b| b.cmp(a));
            min_width_single(&others, need as u64)?
        };
        Some((base + extra).max(1) as u32)
    }

    fn hint(&self, mask: NumaMask) -> Option<bool> {
        self.lookup(mask)
    }

    fn nodes(&self) -> ProviderNodes<'_> {
        ProviderNodes::new(&self.ids, self.universe, self.min_affinity)
    }
}

#[cfg(test)]
mod tests;
