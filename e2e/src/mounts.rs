//! The agent container's mounts as the node sees them (issue 26): read from the host's
//! `/proc` (`/proc/<pid>/mountinfo` and `/proc/<pid>/root`), so a distroless container
//! without a shell can be checked from outside.
//!
//! What [`check_agent`] asserts, for the chart with actuation on:
//! - the kubelet directory (`/host/kubelet`) is a slave mount (`master:N` in mountinfo's
//!   optional fields): mount propagation HostToContainer, so pod volumes the kubelet unmounts
//!   are unmounted in the agent's namespace too, never pinned;
//! - each hidden entry (`/host/kubelet/<name>`) has a mount of its own on top, and reads empty
//!   through the agent's root, while the kubelet's own view of that entry is not empty where
//!   the kubelet keeps something there (`pods`);
//! - sysfs is mounted only at `/host/sys/devices/system`, read-only, never at `/host/sys`.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// One line of `/proc/<pid>/mountinfo` (proc(5)), the fields the checks read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Where it is mounted, in the process's view.
    pub mount_point: String,
    /// Per-mount options (`ro`, `rw`, ...).
    pub options: Vec<String>,
    /// Optional fields (`shared:N`, `master:N`, ...).
    pub optional: Vec<String>,
    /// Filesystem type.
    pub fstype: String,
}

/// Parses `/proc/<pid>/mountinfo`; a malformed line is an error naming it.
pub fn parse_mountinfo(text: &str) -> Result<Vec<MountInfo>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields
            .iter()
            .position(|f| *f == "-")
            .with_context(|| format!("mountinfo line {}: no '-' separator: {line}", i + 1))?;
        if sep < 6 || fields.len() < sep + 2 {
            bail!("mountinfo line {}: too few fields: {line}", i + 1);
        }
        out.push(MountInfo {
            mount_point: unescape(fields[4]),
            options: fields[5].split(',').map(str::to_string).collect(),
            optional: fields[6..sep].iter().map(|s| s.to_string()).collect(),
            fstype: fields[sep + 1].to_string(),
        });
    }
    Ok(out)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The argv of process `pid` under `proc_root`, `None` when it is gone or unreadable.
pub fn argv(proc_root: &Path, pid: &str) -> Option<Vec<String>> {
    let bytes = std::fs::read(proc_root.join(pid).join("cmdline")).ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// PIDs under `proc_root` whose argv matches `pred`.
pub fn pids(proc_root: &Path, pred: impl Fn(&[String]) -> bool) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for e in
        std::fs::read_dir(proc_root).with_context(|| format!("listing {}", proc_root.display()))?
    {
        let e = e.with_context(|| format!("listing {}", proc_root.display()))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if argv(proc_root, name).is_some_and(|a| pred(&a)) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Whether `argv[0]`'s file name is `name`.
pub fn program_is(argv: &[String], name: &str) -> bool {
    argv.first()
        .and_then(|p| Path::new(p).file_name())
        .is_some_and(|n| n == name)
}

/// Checks the mounts of the agent process `pid` (see the module header); `kubelet_pods` is
/// the kubelet's own pods directory as the host reaches it (e.g. through the kubelet
/// process's root), which must hold something for the hiding to mean anything. Returns one
/// line per fact checked.
pub fn check_agent(
    proc_root: &Path,
    pid: u32,
    hidden: &[&str],
    kubelet_pods: &Path,
) -> Result<Vec<String>> {
    let dir = proc_root.join(pid.to_string());
    let info_path = dir.join("mountinfo");
    let text = std::fs::read_to_string(&info_path)
        .with_context(|| format!("reading {}", info_path.display()))?;
    let mounts = parse_mountinfo(&text)?;
    let at = |p: &str| mounts.iter().rfind(|m| m.mount_point == p);
    let mut facts = Vec::new();

    let kubelet = at("/host/kubelet").context("the agent has no mount at /host/kubelet")?;
    let master = kubelet.optional.iter().find(|f| f.starts_with("master:"));
    match master {
        Some(m) => facts.push(format!(
            "/host/kubelet is a slave mount ({m}): HostToContainer propagation"
        )),
        None => bail!(
            "/host/kubelet is not a slave mount (optional fields {:?}): pod volumes would stay mounted in the agent",
            kubelet.optional
        ),
    }
    let host_pods = std::fs::read_dir(kubelet_pods)
        .with_context(|| format!("listing {}", kubelet_pods.display()))?
        .count();
    if host_pods == 0 {
        bail!(
            "{} is empty: nothing for the mask to hide, the check would prove nothing",
            kubelet_pods.display()
        );
    }
    for name in hidden {
        let p = format!("/host/kubelet/{name}");
        let m = at(&p).with_context(|| format!("{p} is not hidden: no mount on top of it"))?;
        if !m.options.iter().any(|o| o == "ro") {
            bail!("{p} is hidden by a writable mount ({:?})", m.options);
        }
        let seen = dir.join("root").join(p.trim_start_matches('/'));
        let n = std::fs::read_dir(&seen)
            .with_context(|| format!("listing {}", seen.display()))?
            .count();
        if n != 0 {
            bail!("{p} shows {n} entries inside the agent");
        }
    }
    facts.push(format!(
        "{} hidden (read-only, empty inside the agent; the kubelet's pods directory holds {host_pods} entries)",
        hidden.join(", ")
    ));
    if at("/host/sys").is_some() {
        bail!("the agent has a mount at /host/sys: the whole of /sys is mounted");
    }
    let sys = at("/host/sys/devices/system")
        .context("the agent has no mount at /host/sys/devices/system")?;
    if !sys.options.iter().any(|o| o == "ro") || sys.fstype != "sysfs" {
        bail!(
            "/host/sys/devices/system is {} {:?}, not read-only sysfs",
            sys.fstype,
            sys.options
        );
    }
    facts.push("sysfs mounted only at /host/sys/devices/system, read-only".to_string());
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
1 0 0:50 / / ro,relatime master:1 - overlay overlay rw,lowerdir=/a
2 1 0:21 /devices/system /host/sys/devices/system ro,nosuid - sysfs sysfs rw
3 1 8:1 /var/lib/kubelet /host/kubelet rw,relatime master:7 - ext4 /dev/sda1 rw
4 3 8:1 /var/lib/kubelet/pods/x/volumes/e /host/kubelet/pods ro,relatime - ext4 /dev/sda1 rw
5 1 0:22 / /host/with\\040space rw shared:3 master:2 - tmpfs tmpfs rw
";

    #[test]
    fn parses_mountinfo_fields() {
        let m = parse_mountinfo(SAMPLE).expect("parses");
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].mount_point, "/host/sys/devices/system");
        assert_eq!(m[1].fstype, "sysfs");
        assert_eq!(m[1].options, ["ro", "nosuid"]);
        assert_eq!(m[2].optional, ["master:7"]);
        assert!(m[3].optional.is_empty());
        assert_eq!(m[4].mount_point, "/host/with space");
        assert_eq!(m[4].optional, ["shared:3", "master:2"]);
    }

    #[test]
    fn a_malformed_line_is_named() {
        let err = parse_mountinfo("1 0 0:50 / / ro\n").expect_err("no separator");
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    }

    #[test]
    fn program_names_match_by_file_name() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(program_is(
            &a(&["/nodetopo-agent", "run"]),
            "nodetopo-agent"
        ));
        assert!(!program_is(&a(&["/usr/bin/kubelet-ctl"]), "kubelet"));
        assert!(!program_is(&[], "kubelet"));
    }
}
