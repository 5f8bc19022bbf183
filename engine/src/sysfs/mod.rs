//! Topology discovery from a sysfs root.
//!
//! `root` plays the part of `/sys`: tests and the `discover --sysfs-root` command point it at a
//! copied tree, the agent at `/sys`. Discovery is two steps:
//!
//! 1. [`scan`] reads the files into a [`MachineModel`], taking no decision beyond parsing
//!    (raw node cpulists, raw cache sharing lists, package ids as found);
//! 2. [`MachineModel::to_topology`] resolves it into a [`CpuTopology`] by the rules written
//!    down in [`model`] (core = lowest thread sibling, uncore = L3 instance or socket, ...).
//!
//! Files read, relative to `root/devices/system`:
//! `cpu/online` (or, when missing, every `cpuN` whose `online` is absent or 1),
//! `cpu/cpuN/topology/{physical_package_id, thread_siblings_list | thread_siblings |
//! core_cpus_list | core_cpus}` (and `die_id`, `core_id` only when no sibling file exists),
//! `cpu/cpuN/cache/indexM/{level, type, id, shared_cpu_list | shared_cpu_map, size}`, the
//! names of `cpu/cpuN/nodeK` entries, `node/online`, `node/possible`,
//! `node/nodeK/{cpulist | cpumap, distance, meminfo, hugepages/hugepages-<size>kB/nr_hugepages}`.
//!
//! No directory is walked recursively and no symlink is followed: sysfs links form cycles
//! (`cpuN/nodeK -> ../../node/nodeK`, `nodeK/cpuN -> ../../cpu/cpuN`) and only their names
//! carry information. Missing optional files degrade gracefully; a file that exists but cannot
//! be parsed is a [`SysfsError`] naming the file and its content.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::cpuset::CpuSet;
use crate::topology::{CpuTopology, TopologyError};

pub mod model;
mod read;

pub use model::{CacheModel, CpuModel, MachineModel, NodeModel, LOCAL_DISTANCE};

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// A file or directory exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file's content could not be parsed.
    #[error("malformed {}: {content:?}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Its (trimmed) content, or the offending part.
        content: String,
        /// What is wrong.
        reason: String,
    },
    /// Files that parse but contradict each other in a way no rule resolves.
    #[error("inconsistent {}: {reason}", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The tree lists no online CPU (wrong root?).
    #[error("no online CPU found (is the sysfs root right?)")]
    NoOnlineCpus,
    /// The resolved topology is inconsistent.
    #[error("inconsistent topology: {0}")]
    Topology(#[from] TopologyError),
}

impl SysfsError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn malformed(path: &Path, content: &str, reason: String) -> Self {
        // Keep messages readable when a hostile file is long.
        let mut shown: String = content.chars().take(200).collect();
        if shown.len() < content.len() {
            shown.push('…');
        }
        Self::Malformed {
            path: path.to_path_buf(),
            content: shown,
            reason,
        }
    }
}

/// Discovers the CPU topology of the sysfs tree at `root` (which plays `/sys`).
pub fn discover(root: &Path) -> Result<CpuTopology, SysfsError> {
    scan(root)?.to_topology()
}

/// Reads the sysfs tree at `root` into a [`MachineModel`] without resolving it.
pub fn scan(root: &Path) -> Result<MachineModel, SysfsError> {
    let sys = root.join("devices/system");
    let cpu_dir = sys.join("cpu");
    let node_dir = sys.join("node");

    let online = online_cpus(&cpu_dir)?;
    // Sharing lists are trusted: the thread siblings of a CPU already read share its core
    // and package, and the CPUs an L3 (or last-level cache) lists share that instance. Their
    // files are not read again, which cuts discovery to one read per core and per cache.
    let mut cores: HashMap<usize, Rc<CoreFacts>> = HashMap::new();
    let mut caches: HashMap<usize, Rc<CacheFacts>> = HashMap::new();
    let mut cpus = Vec::with_capacity(online.len());
    // Every L3 description read (its shared_cpu_list file and content), for the
    // consistency check below.
    let mut l3_reads: Vec<(PathBuf, CacheModel)> = Vec::new();
    for id in online.iter() {
        let dir = cpu_dir.join(format!("cpu{id}"));
        let core = match cores.get(&id) {
            Some(c) => Rc::clone(c),
            None => {
                let c = Rc::new(scan_core(&dir.join("topology"))?);
                if let Some(s) = &c.siblings {
                    // Sibling lists partition the CPUs: a CPU that an earlier list already
                    // placed in another core makes the lists contradict each other (an
                    // asymmetric pair would otherwise merge into one oversized core).
                    for x in s.iter().chain([id]) {
                        if let Some(other) = cores.get(&x) {
                            return Err(SysfsError::Inconsistent {
                                path: c.siblings_file.clone(),
                                reason: format!(
                                    "cpu{id}'s thread siblings {s} include cpu {x}, which {} places in another core ({})",
                                    other.siblings_file.display(),
                                    other.siblings.clone().unwrap_or_default()
                                ),
                            });
                        }
                    }
                    for x in s.iter().chain([id]) {
                        cores.insert(x, Rc::clone(&c));
                    }
                }
                c
            }
        };
        let cache = match caches.get(&id) {
            Some(c) => Rc::clone(c),
            None => {
                let (l3, llc) = scan_caches(&dir.join("cache"), id)?;
                if let Some(l3) = &l3 {
                    l3_reads.push((l3_file(&dir.join("cache"), l3.level), l3.clone()));
                }
                let c = Rc::new(CacheFacts { l3, llc });
                let cover = match (&c.l3, &c.llc) {
                    (Some(a), Some(b)) => a.cpus.intersection(&b.cpus),
                    (Some(a), None) | (None, Some(a)) => a.cpus.clone(),
                    (None, None) => CpuSet::new(),
                };
                for x in cover.iter() {
                    caches.insert(x, Rc::clone(&c));
                }
                c
            }
        };
        cpus.push(CpuModel {
            id,
            package_id: core.package_id,
            siblings: core.siblings.clone(),
            die_core: core.die_core,
            node_link: None,
            l3: cache.l3.clone(),
            llc: cache.llc.clone(),
        });
    }

    check_l3_lists(&l3_reads, &online)?;

    let mut nodes = Vec::new();
    for id in read::numbered_dirs(&node_dir, "node")? {
        nodes.push(scan_node(&node_dir.join(format!("node{id}")), id)?);
    }
    // `cpuN/nodeK` links only matter where the node cpulists do not place a CPU in exactly
    // one node (see `model`), so only those CPUs' directories are listed.
    if !nodes.is_empty() {
        for c in &mut cpus {
            let claims = nodes.iter().filter(|n| n.cpus.contains(c.id)).count();
            if claims != 1 {
                let dir = cpu_dir.join(format!("cpu{}", c.id));
                c.node_link = read::numbered_entries(&dir, "node")?.into_iter().next();
            }
        }
    }
    let distance_columns = distance_columns(&node_dir, &nodes)?;
    check_distances(&node_dir, &nodes, &distance_columns)?;
    Ok(MachineModel {
        online,
        cpus,
        nodes,
        distance_columns,
    })
}

/// What a CPU's `topology` directory says, shared by its thread siblings.
struct CoreFacts {
    package_id: Option<u64>,
    siblings: Option<CpuSet>,
    /// The file the siblings came from (for messages).
    siblings_file: PathBuf,
    die_core: Option<(i64, i64)>,
}

/// The `shared_cpu_list` of a CPU's cache of `level` (for messages; the index directory
/// is found again by level).
fn l3_file(cache_dir: &Path, level: u8) -> PathBuf {
    for idx in read::numbered_entries(cache_dir, "index").unwrap_or_default() {
        let dir = cache_dir.join(format!("index{idx}"));
        if read::uint(&dir.join("level")).ok().flatten() == Some(u64::from(level)) {
            return dir.join("shared_cpu_list");
        }
    }
    cache_dir.join("shared_cpu_list")
}

/// L3 sharing lists describe instances: two lists (restricted to online CPUs) are equal or
/// disjoint. A partial overlap means one of them is damaged; using it would renumber other
/// caches' ids (the id files stop being trusted), so it is an error naming both files.
fn check_l3_lists(reads: &[(PathBuf, CacheModel)], online: &CpuSet) -> Result<(), SysfsError> {
    let sets: Vec<CpuSet> = reads
        .iter()
        .map(|(_, c)| c.cpus.intersection(online))
        .collect();
    for (i, a) in sets.iter().enumerate() {
        for (j, b) in sets.iter().enumerate().skip(i + 1) {
            if a != b && !a.is_disjoint(b) {
                return Err(SysfsError::Inconsistent {
                    path: reads[j].0.clone(),
                    reason: format!(
                        "lists online CPUs {b}, which overlap but differ from {a} listed by {} (a damaged cache sharing list)",
                        reads[i].0.display()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Distance rows must be valid: 10 to the node itself, at least 10 to every other node (a
/// self-distance of 0, or a remote node closer than the local one, would make every
/// distance-based choice meaningless). A remote distance of exactly 10 is accepted: real
/// firmware reports it (a vendored Harpertown tree) although the ACPI SLIT rules forbid it.
fn check_distances(
    node_dir: &Path,
    nodes: &[NodeModel],
    columns: &[usize],
) -> Result<(), SysfsError> {
    for n in nodes {
        let Some(row) = &n.distances else { continue };
        for (col, &d) in columns.iter().zip(row) {
            let bad = if *col == n.id {
                (d != LOCAL_DISTANCE)
                    .then(|| format!("distance to itself is {d}, expected {LOCAL_DISTANCE}"))
            } else {
                (d < LOCAL_DISTANCE).then(|| {
                    format!(
                        "distance to node {col} is {d}, closer than the node to itself ({LOCAL_DISTANCE})"
                    )
                })
            };
            if let Some(reason) = bad {
                return Err(SysfsError::Inconsistent {
                    path: node_dir.join(format!("node{}/distance", n.id)),
                    reason,
                });
            }
        }
    }
    Ok(())
}

/// A CPU's L3 and last-level cache, shared by the CPUs they list.
struct CacheFacts {
    l3: Option<CacheModel>,
    llc: Option<CacheModel>,
}

/// `cpu/online`, or every `cpuN` whose `online` file is absent or 1. `cpu/online` may only
/// name CPUs that have a `cpuN` directory (a list larger than the directories would invent
/// CPUs and hand them out).
fn online_cpus(cpu_dir: &Path) -> Result<CpuSet, SysfsError> {
    let online_file = cpu_dir.join("online");
    if let Some(s) = read::list(&online_file)? {
        let dirs: CpuSet = read::numbered_dirs(cpu_dir, "cpu")?.into_iter().collect();
        let missing = s.difference(&dirs);
        if !missing.is_empty() {
            return Err(SysfsError::Inconsistent {
                path: online_file,
                reason: format!(
                    "names CPUs {missing} that have no cpuN directory ({} directories found)",
                    dirs.len()
                ),
            });
        }
        return Ok(s);
    }
    let mut online = CpuSet::new();
    for id in read::numbered_dirs(cpu_dir, "cpu")? {
        let path = cpu_dir.join(format!("cpu{id}/online"));
        match read::attr(&path)?.as_deref() {
            // An empty file (seen on ia64) says nothing either way: like a missing one.
            None | Some("") | Some("1") => online.insert(id),
            Some("0") => {}
            Some(other) => {
                return Err(SysfsError::malformed(
                    &path,
                    other,
                    "expected 0 or 1".into(),
                ))
            }
        }
    }
    Ok(online)
}

fn scan_core(topo: &Path) -> Result<CoreFacts, SysfsError> {
    let package_id = match read::int(&topo.join("physical_package_id"))? {
        Some(p) if p >= 0 => Some(p as u64),
        _ => None,
    };
    let mut siblings_file = topo.join("thread_siblings_list");
    let mut siblings = read::list_or_mask(topo, "thread_siblings_list", "thread_siblings")?;
    if siblings.is_none() {
        siblings_file = topo.join("core_cpus_list");
        siblings = read::list_or_mask(topo, "core_cpus_list", "core_cpus")?;
    }
    let die_core = if siblings.is_none() {
        let core = read::int(&topo.join("core_id"))?;
        let die = read::int(&topo.join("die_id"))?.unwrap_or(0);
        core.map(|c| (die, c))
    } else {
        None
    };
    Ok(CoreFacts {
        package_id,
        siblings,
        siblings_file,
        die_core,
    })
}

/// The CPU's L3 and its last-level cache (both Unified or Data).
fn scan_caches(
    cache_dir: &Path,
    cpu: usize,
) -> Result<(Option<CacheModel>, Option<CacheModel>), SysfsError> {
    let mut levels: Vec<(u8, PathBuf)> = Vec::new();
    // The kernel lists cache leaves by ascending level, so walking the indices downwards
    // finds the highest levels first; once an L3 is seen, the lower indices (L1, L2) cannot
    // change the answer and are not read.
    for idx in read::numbered_entries(cache_dir, "index")?
        .into_iter()
        .rev()
    {
        if levels.iter().any(|(l, _)| *l == 3) {
            break;
        }
        let dir = cache_dir.join(format!("index{idx}"));
        let level_path = dir.join("level");
        let Some(level) = read::uint(&level_path)? else {
            continue;
        };
        let level = u8::try_from(level).map_err(|_| {
            SysfsError::malformed(&level_path, &level.to_string(), "cache level > 255".into())
        })?;
        levels.push((level, dir));
    }
    // Only the L3 and the highest level can matter, so only their `type` is read. Only
    // Unified and Data caches can be shared last-level caches; a missing `type` file is
    // taken as Unified (old kernels).
    let mut usable: Vec<(u8, &PathBuf)> = Vec::new();
    let mut candidates: Vec<u8> = levels.iter().map(|(l, _)| *l).collect();
    candidates.sort_unstable();
    candidates.dedup();
    while let Some(top) = candidates.pop() {
        for (level, dir) in levels.iter().filter(|(l, _)| *l == top) {
            let type_path = dir.join("type");
            match read::attr(&type_path)?.as_deref() {
                None | Some("Unified") | Some("Data") => usable.push((*level, dir)),
                Some("Instruction") => {}
                Some(other) => {
                    return Err(SysfsError::malformed(
                        &type_path,
                        other,
                        "expected Unified, Data or Instruction".into(),
                    ))
                }
            }
        }
        // Stop at the first level with a usable cache, once the L3 has been looked at.
        if usable.iter().any(|(l, _)| *l == top) && top <= 3 {
            break;
        }
    }
    let l3 = match usable.iter().find(|(l, _)| *l == 3) {
        Some((_, dir)) => Some(scan_cache(dir, 3, cpu)?),
        None => None,
    };
    let top = usable.iter().map(|(l, _)| *l).max();
    let llc = match usable.iter().find(|(l, _)| Some(*l) == top) {
        Some((3, _)) => l3.clone(),
        Some((level, dir)) => Some(scan_cache(dir, *level, cpu)?),
        None => None,
    };
    Ok((l3, llc))
}

fn scan_cache(dir: &Path, level: u8, cpu: usize) -> Result<CacheModel, SysfsError> {
    let mut cpus =
        read::list_or_mask(dir, "shared_cpu_list", "shared_cpu_map")?.unwrap_or_default();
    // A cache always serves the CPU whose directory lists it.
    cpus.insert(cpu);
    Ok(CacheModel {
        level,
        id: read::uint(&dir.join("id"))?,
        cpus,
        size_bytes: read::size(&dir.join("size"))?,
    })
}

fn scan_node(dir: &Path, id: usize) -> Result<NodeModel, SysfsError> {
    let cpus = match read::list_or_mask(dir, "cpulist", "cpumap")? {
        Some(s) => s,
        // No list at all: the node's `cpuN` entries say which CPUs it holds.
        None => read::numbered_entries(dir, "cpu")?.into_iter().collect(),
    };
    let mut hugepages = Vec::new();
    let hp_dir = dir.join("hugepages");
    let entries = match std::fs::read_dir(&hp_dir) {
        Ok(rd) => Some(rd),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(SysfsError::io(&hp_dir, e)),
    };
    if let Some(rd) = entries {
        for entry in rd {
            let entry = entry.map_err(|e| SysfsError::io(&hp_dir, e))?;
            let name = entry.file_name();
            let Some(size) = name
                .to_str()
                .and_then(|n| n.strip_prefix("hugepages-"))
                .and_then(|n| n.strip_suffix("kB"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(n) = read::uint(&entry.path().join("nr_hugepages"))? {
                hugepages.push((size, n));
            }
        }
    }
    hugepages.sort_unstable();
    Ok(NodeModel {
        id,
        cpus,
        distances: read::distances(&dir.join("distance"))?,
        memory_bytes: read::mem_total(&dir.join("meminfo"))?,
        hugepages,
    })
}

/// Which node each `distance` column stands for. The kernel prints one column per online
/// node (`node/online`); hand-edited or partial dumps may instead match `node/possible`,
/// the node directories, or be indexed by node id.
fn distance_columns(node_dir: &Path, nodes: &[NodeModel]) -> Result<Vec<usize>, SysfsError> {
    let Some((first, width)) = nodes
        .iter()
        .find_map(|n| n.distances.as_ref().map(|d| (n.id, d.len())))
    else {
        return Ok(nodes.iter().map(|n| n.id).collect());
    };
    let path_of = |id: usize| node_dir.join(format!("node{id}/distance"));
    for n in nodes {
        if let Some(d) = &n.distances {
            if d.len() != width {
                return Err(SysfsError::Inconsistent {
                    path: path_of(n.id),
                    reason: format!("{} columns, but node{first}/distance has {width}", d.len()),
                });
            }
        }
    }
    let dirs: Vec<usize> = nodes.iter().map(|n| n.id).collect();
    let candidates = [
        read::list(&node_dir.join("online"))?.map(|s| s.to_vec()),
        read::list(&node_dir.join("possible"))?.map(|s| s.to_vec()),
    ];
    for cols in candidates.into_iter().flatten() {
        if cols.len() == width && dirs.iter().all(|d| cols.contains(d)) {
            return Ok(cols);
        }
    }
    if dirs.len() == width {
        return Ok(dirs);
    }
    if dirs.last().is_some_and(|&max| max < width) {
        return Ok((0..width).collect());
    }
    Err(SysfsError::Inconsistent {
        path: path_of(first),
        reason: format!(
            "{width} distance columns cannot be matched to the node directories {dirs:?}"
        ),
    })
}

#[cfg(test)]
mod tests;
