//! The kubelet's files and flags as the kubelet reads them: its configuration file and
//! drop-in directory ([`config`], YAML as in [`yaml`]) and its command line ([`cmdline`]); pod manifests as the kubelet reads their fields
//! ([`pods`]); its CPU manager and Memory Manager checkpoints ([`cpu_checkpoint`],
//! [`memory_checkpoint`]); containers' cgroups and their real cpusets ([`cgroup`]) and the cpuset audit
//! against the kubelet's assignments ([`audit`]).
//! No cluster, no kube client, no async runtime.

pub mod atomic;
pub mod audit;
pub mod cgroup;
pub mod cmdline;
pub mod config;
pub mod cpu_checkpoint;
pub mod gohash;
pub mod gojson;
pub mod memory_checkpoint;
pub mod pods;
pub mod yaml;

/// The machine, from a preset or a sysfs root (`/sys` when `None`): the topology the kubelet's
/// managers see.
pub fn machine(
    preset: Option<&str>,
    sysfs_root: Option<&std::path::Path>,
) -> anyhow::Result<nodetopo_engine::CpuTopology> {
    use anyhow::Context as _;
    match preset {
        Some(name) => Ok(nodetopo_engine::presets::build(name)?),
        None => {
            let root = sysfs_root.unwrap_or(std::path::Path::new("/sys"));
            nodetopo_engine::sysfs::discover(root)
                .with_context(|| format!("discovering the topology under {}", root.display()))
        }
    }
}
