//! `discover` subcommand: print a machine's CPU topology from a sysfs root.
//!
//! `-o json` and `-o yaml` print exactly the published `status.topology` shape
//! ([`TopologyReport::from_topology`]); `-o table` (the default) is for people and adds what
//! the report leaves out (cache sizes, NUMA memory, hugepages).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use nodetopo_engine::report::TopologyReport;
use nodetopo_engine::{sysfs, CpuTopology};

/// Output formats of `discover`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Human-readable summary.
    Table,
    /// The `status.topology` object as JSON.
    Json,
    /// The `status.topology` object as YAML.
    Yaml,
}

/// Arguments of `discover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory that plays /sys (for a tree in shared/sysfs: `<machine>/sys`).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Runs `discover`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let topology = sysfs::discover(&args.sysfs_root).with_context(|| {
        format!(
            "discovering the CPU topology under {}",
            args.sysfs_root.display()
        )
    })?;
    print!("{}", render(&topology, args.output)?);
    Ok(ExitCode::SUCCESS)
}

/// Renders a topology in the chosen format (ends with a newline).
pub fn render(t: &CpuTopology, output: Output) -> anyhow::Result<String> {
    let report = TopologyReport::from_topology(t);
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(&report)? + "\n",
        Output::Yaml => serde_yaml::to_string(&report)?,
        Output::Table => table(t, &report),
    })
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn table(t: &CpuTopology, r: &TopologyReport) -> String {
    let mut s = String::new();
    let n_cpus = t.cpus().len();
    // `write!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(s, "CPUs:            {} ({n_cpus} online)", r.cpus);
    let _ = writeln!(
        s,
        "Cores:           {} ({} thread(s) per core at most)",
        r.cores, r.threads_per_core
    );
    let _ = writeln!(s, "Sockets:         {}", r.sockets.len());
    for sock in &r.sockets {
        let _ = writeln!(s, "  socket {:<6}  {}", sock.id, sock.cpus);
    }
    // The CPU column is as wide as its longest list (irregular SNC lists get long).
    let w = t
        .numa_nodes()
        .iter()
        .map(|n| n.cpus.to_string().len())
        .chain(t.uncore_caches().iter().map(|u| u.cpus.to_string().len()))
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = writeln!(s, "NUMA nodes:      {}", r.numa_nodes.len());
    let _ = writeln!(
        s,
        "  {:<6} {:<w$} {:>11}  distances",
        "node", "cpus", "memory"
    );
    for n in t.numa_nodes() {
        let cpus = if n.cpus.is_empty() {
            "(none)".to_string()
        } else {
            n.cpus.to_string()
        };
        let mem = n.memory_bytes.map(bytes).unwrap_or_else(|| "-".into());
        let dist = n
            .distances
            .as_ref()
            .map(|d| {
                d.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "  {:<6} {:<w$} {:>11}  {dist}", n.id, cpus, mem);
        for (size_kib, pages) in &n.hugepages {
            let _ = writeln!(
                s,
                "         hugepages-{size_kib}kB: {pages} pages ({})",
                bytes(size_kib.saturating_mul(1024).saturating_mul(*pages))
            );
        }
    }
    let _ = writeln!(s, "Uncore caches:   {}", r.uncore_caches.len());
    let _ = writeln!(
        s,
        "  {:<6} {:<6} {:<w$} {:>11}",
        "id", "level", "cpus", "size"
    );
    for u in t.uncore_caches() {
        let level = if u.level == 0 {
            "socket".to_string()
        } else {
            format!("L{}", u.level)
        };
        let size = u.size_bytes.map(bytes).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "  {:<6} {:<6} {:<w$} {:>11}",
            u.id,
            level,
            u.cpus.to_string(),
            size
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodetopo_engine::presets;

    #[test]
    fn json_is_exactly_the_report() {
        let t = presets::build("kep-4800-example").unwrap();
        let json = render(&t, Output::Json).unwrap();
        let back: TopologyReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, TopologyReport::from_topology(&t));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["cpus"], "0-15");
        assert_eq!(v["threadsPerCore"], 1);
        assert_eq!(v["uncoreCaches"][1]["cpus"], "8-15");
        let yaml = render(&t, Output::Yaml).unwrap();
        let back: TopologyReport = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(back, TopologyReport::from_topology(&t));
    }

    #[test]
    fn table_names_every_node_and_cache() {
        let t = presets::build("epyc-9654-2p-nps2").unwrap();
        let out = render(&t, Output::Table).unwrap();
        assert!(out.contains("CPUs:            0-191 (192 online)"), "{out}");
        assert!(out.contains("NUMA nodes:      4"), "{out}");
        assert!(out.contains("10 12 32 32"), "{out}");
        assert!(out.contains("Uncore caches:   24"), "{out}");
        assert!(out.contains("32 MiB"), "{out}");
    }

    #[test]
    fn missing_root_is_a_clear_error() {
        let args = Args {
            sysfs_root: PathBuf::from("/nonexistent/sysfs/root"),
            output: Output::Json,
        };
        let e = format!("{:#}", run(args).unwrap_err());
        assert!(e.contains("/nonexistent/sysfs/root"), "{e}");
    }
}
