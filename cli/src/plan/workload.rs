//! The workloads `plan` admits when it is not given Pod YAML: `--containers 4,4,2` and the
//! built-in demo.

use anyhow::{bail, Context};
use nodetopo_engine::{Container, CpuTopology, Pod, ResourceList};

/// A Guaranteed pod `default/<name>` with one container `main` of `cpu_millis` and `memory`.
fn guaranteed(name: &str, cpu_millis: u64, memory: u64) -> Pod {
    let rl = ResourceList {
        cpu_millis: Some(cpu_millis),
        memory_bytes: Some(memory),
        ..Default::default()
    };
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("default/{name}"),
        init_containers: Vec::new(),
        containers: vec![Container {
            name: "main".into(),
            requests: rl.clone(),
            limits: rl,
            restartable: false,
        }],
    }
}

/// `--containers 4,4,2`: pods `default/c1`, `default/c2`, ... with one container `main`
/// each, Guaranteed, with that many CPUs and `memory` bytes.
pub fn containers_workload(list: &str, memory: u64) -> anyhow::Result<Vec<Pod>> {
    let mut pods = Vec::new();
    for (i, tok) in list.split(',').enumerate() {
        let tok = tok.trim();
        let n: u64 = tok
            .parse()
            .with_context(|| format!("--containers {list:?}: {tok:?} is not a CPU count"))?;
        if n == 0 {
            bail!("--containers {list:?}: container {} asks for 0 CPUs", i + 1);
        }
        pods.push(guaranteed(&format!("c{}", i + 1), n * 1000, memory));
    }
    if pods.is_empty() {
        bail!("--containers is empty");
    }
    Ok(pods)
}

/// The built-in demo, scaled to the machine: Guaranteed single-container pods `c1`, `c2`,
/// ... of 1, 2, 4, 8, ... CPUs while they fit in the CPUs left after `reserved`, then one
/// as large as an uncore cache (to show whether it lands inside one), and a Burstable pod
/// `default/shared` (500m) that stays in the shared pool. On a 2-CPU machine that is one
/// 1-CPU container, one that does not fit, and the shared one.
pub fn demo_workload(t: &CpuTopology, reserved: usize) -> Vec<Pod> {
    let free = t.cpus().len().saturating_sub(reserved) as u64;
    let mut sizes = Vec::new();
    let (mut size, mut used) = (1u64, 0u64);
    while used + size <= free && sizes.len() < 6 {
        sizes.push(size);
        used += size;
        size *= 2;
    }
    let per_uncore = t
        .uncore_caches()
        .iter()
        .map(|u| u.cpus.len() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    sizes.push(per_uncore);
    let mut pods: Vec<Pod> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| guaranteed(&format!("c{}", i + 1), n * 1000, 256 << 20))
        .collect();
    let mut shared = guaranteed("shared", 500, 128 << 20);
    shared.containers[0].limits.cpu_millis = Some(1000);
    pods.push(shared);
    pods
}
