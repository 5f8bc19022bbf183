//! `NumaInfo`: the machine's NUMA nodes and, for `prefer-closest-numa-nodes`, their
//! distances (the kubelet's `NUMAInfo`).
//!
//! Distance rows are indexed by NUMA node **id**, as the kubelet indexes cadvisor's rows
//! (`d[i][j]` is the distance from node id `i` to node id `j`). Rows are used as given: the
//! kubelet's own 8-node test matrix is asymmetric (`d[7][6]=13`, `d[6][7]=11`), and
//! asymmetric SLIT tables exist on real firmware, so asymmetry is **not** an error and is
//! never symmetrised. What is rejected is only what cannot be evaluated: with
//! prefer-closest on, a node without a row (the kubelet's error) and a row too short to be
//! indexed by every node id of the machine (where the kubelet would index out of range and
//! panic). Longer rows are accepted, as the kubelet's tests do. Without prefer-closest the
//! rows are not recorded at all, so they cannot be wrong.

use super::{NumaMask, TmError, TmOptions};
use crate::topology::CpuTopology;

/// The machine's NUMA nodes and (only with prefer-closest) their distance rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaInfo {
    /// Node ids in the order given (cadvisor's order).
    nodes: Vec<usize>,
    /// The default affinity: all nodes.
    default_affinity: NumaMask,
    /// Distance row per entry of `nodes` (same positions); all `Some` with prefer-closest,
    /// all `None` without.
    rows: Vec<Option<Vec<u64>>>,
    /// Position in `nodes` of each id present (`u8::MAX` for ids not on the machine).
    position: [u8; 64],
}

impl NumaInfo {
    /// The kubelet's `NewNUMAInfo`: `nodes` are (id, distance row) in cadvisor order; rows
    /// are kept (and must be usable) only when `prefer_closest` is on. Errors: no nodes, an
    /// id above 63, a duplicate id, and with prefer-closest a missing or too-short row.
    pub fn new(
        nodes: Vec<(usize, Option<Vec<u64>>)>,
        prefer_closest: bool,
    ) -> Result<Self, TmError> {
        if nodes.is_empty() {
            return Err(TmError::NoNumaNodes);
        }
        let mut position = [u8::MAX; 64];
        let mut default_affinity = NumaMask::EMPTY;
        for (pos, (id, _)) in nodes.iter().enumerate() {
            let id = *id;
            if id > 63 {
                return Err(TmError::NumaIdOutOfRange(id));
            }
            if default_affinity.is_set(id) {
                return Err(TmError::DuplicateNumaNode(id));
            }
            default_affinity = default_affinity.or(NumaMask::from_bits(1 << id));
            position[id] = pos as u8;
        }
        let max_id = nodes.iter().map(|(id, _)| *id).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(nodes.len());
        let mut rows = Vec::with_capacity(nodes.len());
        for (id, row) in nodes {
            ids.push(id);
            if !prefer_closest {
                rows.push(None);
                continue;
            }
            let row = row.ok_or(TmError::MissingDistances { node: id })?;
            if row.len() <= max_id {
                return Err(TmError::DistanceShape {
                    node: id,
                    got: row.len(),
                    max_id,
                    need: max_id + 1,
                });
            }
            rows.push(Some(row));
        }
        Ok(NumaInfo {
            nodes: ids,
            default_affinity,
            rows,
            position,
        })
    }

    /// NUMA info of a discovered or preset machine. `CpuTopology` keeps one distance column
    /// per node in ascending id order; they are re-indexed by id here, so machines with
    /// non-contiguous node ids get correct distances (the kubelet would index cadvisor's
    /// positional row by id and read past its end there).
    pub fn from_topology(t: &CpuTopology, opts: &TmOptions) -> Result<Self, TmError> {
        let ids: Vec<usize> = t.numa_nodes().iter().map(|n| n.id).collect();
        let max_id = ids.iter().copied().max().unwrap_or(0);
        let nodes = t
            .numa_nodes()
            .iter()
            .map(|n| {
                let row = n.distances.as_ref().map(|cols| {
                    let mut by_id = vec![0u64; max_id + 1];
                    for (col, d) in ids.iter().zip(cols) {
                        by_id[*col] = u64::from(*d);
                    }
                    by_id
                });
                (n.id, row)
            })
            .collect();
        Self::new(nodes, opts.prefer_closest_numa_nodes)
    }

    /// Node ids in the order given.
    pub fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// The mask of all nodes (the kubelet's default affinity).
    pub fn default_affinity(&self) -> NumaMask {
        self.default_affinity
    }

    /// Whether distance rows are recorded (prefer-closest was on at construction).
    pub fn has_distances(&self) -> bool {
        self.rows.first().is_some_and(|r| r.is_some())
    }

    /// The distance row of node `id`, when recorded.
    pub fn distance_row(&self, id: usize) -> Option<&[u64]> {
        let pos = *self.position.get(id)?;
        self.rows.get(usize::from(pos))?.as_deref()
    }

    /// The kubelet's `CalculateAverageFor`: the mean of `d[i][j]` over all ordered pairs of
    /// nodes of `mask` (including `i == j`), summed in the kubelet's order in `f64`; 0 for an
    /// empty mask or without distances. Nodes of `mask` outside the machine are skipped
    /// (merged masks never contain them).
    pub fn average_distance(&self, mask: NumaMask) -> f64 {
        let mask = mask.and(self.default_affinity);
        if mask.is_empty() || !self.has_distances() {
            return 0.0;
        }
        let mut sum = 0.0f64;
        let mut count = 0.0f64;
        for i in mask.ids() {
            let row = self.distance_row(i).unwrap_or(&[]);
            for j in mask.ids() {
                sum += row.get(j).copied().unwrap_or(0) as f64;
                count += 1.0;
            }
        }
        sum / count
    }

    /// The kubelet's `Narrowest(m1, m2)`.
    pub fn narrowest(&self, m1: NumaMask, m2: NumaMask) -> NumaMask {
        if m1.is_narrower_than(m2) {
            m1
        } else {
            m2
        }
    }

    /// The kubelet's `Closest(m1, m2)`: the narrower when counts differ, else the lower
    /// average distance, else the smaller integer value (`m2` when equal).
    pub fn closest(&self, m1: NumaMask, m2: NumaMask) -> NumaMask {
        if m1.count() != m2.count() {
            return self.narrowest(m1, m2);
        }
        let d1 = self.average_distance(m1);
        let d2 = self.average_distance(m2);
        if d1 == d2 {
            if m1.is_less_than(m2) {
                m1
            } else {
                m2
            }
        } else if d1 < d2 {
            m1
        } else {
            m2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{CpuInfo, NumaNode};
    use crate::topologymanager::{ManagerConfig, TmPolicy, TmScope};
    use crate::CpuSet;

    /// Nodes 0 and 2 (non-contiguous), CPU-less node 2, positional distance columns.
    fn machine() -> CpuTopology {
        let cpu = |id| CpuInfo {
            id,
            core: id,
            socket: 0,
            numa: 0,
            uncore: 0,
        };
        let node = |id, row: Vec<u32>| NumaNode {
            id,
            cpus: CpuSet::default(),
            distances: Some(row),
            memory_bytes: None,
            hugepages: vec![],
        };
        CpuTopology::with_derived_counts(
            vec![cpu(0), cpu(1)],
            vec![node(0, vec![10, 21]), node(2, vec![31, 10])],
            vec![],
        )
        .unwrap()
    }

    #[test]
    fn from_topology_reindexes_positional_rows_by_id() {
        let opts = TmOptions {
            prefer_closest_numa_nodes: true,
            ..TmOptions::default()
        };
        let info = NumaInfo::from_topology(&machine(), &opts).unwrap();
        assert_eq!(info.nodes(), &[0, 2]);
        assert_eq!(info.distance_row(0), Some(&[10, 0, 21][..]));
        assert_eq!(info.distance_row(2), Some(&[31, 0, 10][..]));
        // Ordered pairs including (i, i): (10 + 21 + 31 + 10) / 4, asymmetry kept.
        let both = NumaMask::new([0, 2]).unwrap();
        assert_eq!(info.average_distance(both), 18.0);
        // Without prefer-closest no rows are kept at all.
        let plain = NumaInfo::from_topology(&machine(), &TmOptions::default()).unwrap();
        assert!(!plain.has_distances() && plain.distance_row(0).is_none());
    }

    #[test]
    fn manager_checks_the_numa_count_limit() {
        let nodes: Vec<_> = (0..12).map(|i| (i, None)).collect();
        let e = ManagerConfig::new(
            "single-numa-node",
            "pod",
            &Default::default(),
            Default::default(),
            nodes.clone(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported on machines with more than 8 NUMA Nodes (this machine has 12; raise the max-allowable-numa-nodes policy option to allow it)"
        );
        let raised = [("max-allowable-numa-nodes".to_string(), "16".to_string())].into();
        let cfg = ManagerConfig::new(
            "single-numa-node",
            "pod",
            &raised,
            Default::default(),
            nodes,
        )
        .unwrap();
        assert_eq!(
            (cfg.policy, cfg.scope),
            (TmPolicy::SingleNumaNode, TmScope::Pod)
        );
        let cfg = ManagerConfig::for_topology(
            TmPolicy::Restricted,
            TmScope::Container,
            TmOptions::default(),
            &machine(),
        )
        .unwrap();
        assert_eq!(
            cfg.numa.unwrap().default_affinity(),
            NumaMask::new([0, 2]).unwrap()
        );
    }
}
