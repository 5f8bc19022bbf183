//! The host as the node leaves it: the cgroup hierarchies, the state a test must restore
//! (sysctls, iptables) and the removal of a killed run's cgroups, processes and interfaces.

use super::*;

/// Host sysctls compared before and after (the kubelet's plus forwarding, which a bridge
/// acting as a gateway would turn on).
pub(super) const WATCHED_SYSCTLS: [&str; 7] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
];

/// Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 controllers, named hierarchies,
/// and a hybrid host's cgroup2 `unified`).
pub(super) fn cgroup_hierarchies() -> Result<Vec<PathBuf>> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::io("reading /proc/self/mountinfo", e))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount_point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        if (*fstype == "cgroup" || *fstype == "cgroup2")
            && mount_point.starts_with("/sys/fs/cgroup/")
        {
            out.push(PathBuf::from(mount_point));
        }
    }
    if out.is_empty() {
        return Err(Error::Other(
            "no cgroup v1 hierarchies under /sys/fs/cgroup (a cgroup v2-only host; this harness needs v1 or hybrid)".into(),
        ));
    }
    Ok(out)
}

/// What a test must leave as it found it, read before and after.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct HostState {
    sysctls: BTreeMap<String, String>,
    /// `iptables-save` without its comment lines (`None` where iptables is not installed).
    iptables: Option<String>,
}

impl HostState {
    pub(super) fn read() -> Self {
        let sysctls = WATCHED_SYSCTLS
            .iter()
            .map(|k| {
                let v = fs::read_to_string(Path::new("/proc/sys").join(k))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_else(|e| format!("unreadable: {e}"));
                (k.to_string(), v)
            })
            .collect();
        let iptables = Command::new("iptables-save")
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    // Packet counters change whatever we do.
                    .map(|l| l.split(" [").next().unwrap_or(l).to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        Self { sysctls, iptables }
    }
}

pub(super) fn collect_pids(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

/// Removes a cgroup directory and its children, deepest first (a cgroup is removed with
/// rmdir, never by deleting its files). Retries while tasks are still exiting.
pub(super) fn remove_cgroup_tree(dir: &Path) -> std::result::Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path())?;
            }
        }
    }
    let t = Instant::now();
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if t.elapsed() > Duration::from_secs(10) => {
                return Err(format!("cgroup {} not removed: {e}", dir.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Kills what a killed test process left: cgroups `nodetopo-node-<pid>-<n>` whose pid is
/// gone, with their processes, and their bridges.
pub(super) fn remove_stale_nodes() {
    let Ok(hierarchies) = cgroup_hierarchies() else {
        return;
    };
    for h in &hierarchies {
        let Ok(entries) = fs::read_dir(h) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("nodetopo-node-") else {
                continue;
            };
            let Some((pid, n)) = rest.split_once('-') else {
                continue;
            };
            if Path::new("/proc").join(pid).exists() {
                continue;
            }
            let mut pids = Vec::new();
            collect_pids(&e.path(), &mut pids);
            for p in pids {
                // SAFETY: kill(2) on a pid in a stale test cgroup.
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(200));
            if let Err(why) = remove_cgroup_tree(&e.path()) {
                eprintln!("local node: stale {why}");
            }
            for prefix in ["ntn", "ntd"] {
                let link: String = format!("{prefix}{pid}{n}").chars().take(15).collect();
                if Path::new("/sys/class/net").join(&link).exists() {
                    let _ = Command::new("ip").args(["link", "delete", &link]).status();
                }
            }
        }
    }
}
