//! The running kubelet's command line, read from `/proc` (the host's, mounted read-only in
//! the agent's pod): which `--config` and `--config-dir` it was started with, and the
//! feature gates given by `--feature-gates`, which override those of its files
//! (cmd/kubelet/app `kubeletConfigFlagPrecedence`).
//!
//! Without this, a kubelet started without `--config-dir`, or with another directory, would
//! ignore nodetopo's drop-in while every file nodetopo reads says the change was made, and
//! a gate turned off on the command line would only show when the kubelet refused to start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most bytes of one `/proc/PID/cmdline` read.
const MAX_CMDLINE_BYTES: u64 = 1 << 20;

/// What nodetopo needs from a kubelet's command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletCommandLine {
    /// The process.
    pub pid: u32,
    /// `--config`.
    pub config: Option<String>,
    /// `--config-dir`.
    pub config_dir: Option<String>,
    /// `--feature-gates`, every occurrence merged in order.
    pub feature_gates: BTreeMap<String, bool>,
    /// Why its command line could not be read as a kubelet's (a flag without a value, a
    /// gate that is not `GATE=BOOL`); it matters only for the kubelet nodetopo checks
    /// ([`decide`]), so a broken command line elsewhere blocks nothing.
    pub error: Option<String>,
}

/// Go's `strconv.ParseBool`.
fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The words of a command line: NUL-separated as in `/proc/PID/cmdline`, or, without a
/// NUL, whitespace-separated text (`ps -o args=`). Empty words are dropped.
pub fn words(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains('\0') {
        text.split('\0')
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect()
    } else {
        text.split_whitespace().map(String::from).collect()
    }
}

/// Parses a kubelet's arguments (without the program name) as its flag library (pflag)
/// does for the three flags read: `--name=value` or `--name value`, up to a lone `--`.
/// Other flags are skipped; a value of theirs that is not itself a flag is never taken
/// for one.
pub fn parse(pid: u32, args: &[String]) -> Result<KubeletCommandLine, String> {
    let k = parse_lenient(pid, args);
    match k.error {
        Some(e) => Err(e),
        None => Ok(k),
    }
}

/// [`parse`] that keeps what it read when a flag is broken, the first problem in `error`.
pub fn parse_lenient(pid: u32, args: &[String]) -> KubeletCommandLine {
    let mut out = KubeletCommandLine {
        pid,
        ..Default::default()
    };
    if let Err(e) = parse_into(&mut out, args) {
        out.error = Some(e);
    }
    out
}

fn parse_into(out: &mut KubeletCommandLine, args: &[String]) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let Some(flag) = arg.strip_prefix("--") else {
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        if !matches!(name, "config" | "config-dir" | "feature-gates") {
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let Some(v) = args.get(i) else {
                    return Err(format!("--{name} has no value"));
                };
                i += 1;
                v.clone()
            }
        };
        match name {
            "config" => out.config = Some(value),
            "config-dir" => out.config_dir = Some(value),
            _ => {
                for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
                    let Some((gate, v)) = pair.split_once('=') else {
                        return Err(format!("--feature-gates: {pair:?} is not GATE=BOOL"));
                    };
                    let Some(b) = go_bool(v.trim()) else {
                        return Err(format!("--feature-gates: {pair:?}: {v:?} is not a boolean"));
                    };
                    out.feature_gates.insert(gate.trim().to_string(), b);
                }
            }
        }
    }
    Ok(())
}

/// The effective uid of process `pid` (its `status` file's `Uid:` line), `None` when
/// unreadable.
fn effective_uid(dir: &Path) -> Option<u32> {
    let bytes =
        nodetopo_engine::files::read_bounded(&dir.join("status"), MAX_CMDLINE_BYTES).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The file name of the program process `dir` runs (`exe`, without the ` (deleted)` a
/// replaced binary shows), `None` when the link cannot be read (a process of another
/// user, or a caller without CAP_SYS_PTRACE: the agent's pod).
fn executable_name(dir: &Path) -> Option<String> {
    let target = std::fs::read_link(dir.join("exe")).ok()?;
    let name = target.file_name()?.to_string_lossy().into_owned();
    Some(name.strip_suffix(" (deleted)").unwrap_or(&name).to_string())
}

/// Whether the process in `dir` with command line `argv` is a kubelet: it runs as root
/// (effective uid 0: no other user can start one, whatever it names itself) and its
/// executable is a file named `kubelet`; only when the executable cannot be read does
/// the program name in its command line count instead.
fn is_kubelet(dir: &Path, argv: &[String]) -> bool {
    if effective_uid(dir) != Some(0) {
        return false;
    }
    match executable_name(dir) {
        Some(exe) => exe == "kubelet",
        None => argv
            .first()
            .is_some_and(|p| Path::new(p).file_name().and_then(|n| n.to_str()) == Some("kubelet")),
    }
}

/// The command lines of the kubelet processes under `proc_root` (see [`is_kubelet`]: root
/// processes whose executable is named `kubelet`), by PID. Processes that end while being
/// read are skipped; a command line that cannot be read as a kubelet's is kept with its
/// `error` (only the kubelet nodetopo checks must have a valid one).
pub fn kubelets(proc_root: &Path) -> anyhow::Result<Vec<KubeletCommandLine>> {
    let entries = std::fs::read_dir(proc_root)
        .map_err(|e| anyhow::anyhow!("{}: cannot list processes: {e}", proc_root.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| anyhow::anyhow!("{}: cannot list processes: {e}", proc_root.display()))?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let path = dir.join("cmdline");
        // Gone, a kernel thread (empty), or not ours to read: not a kubelet to check.
        let Ok(bytes) = nodetopo_engine::files::read_bounded(&path, MAX_CMDLINE_BYTES) else {
            continue;
        };
        let argv = words(&bytes);
        if argv.is_empty() || !is_kubelet(&dir, &argv) {
            continue;
        }
        let mut k = parse_lenient(pid, &argv[1..]);
        k.error = k
            .error
            .map(|e| format!("the kubelet process {pid} ({}): {e}", path.display()));
        out.push(k);
    }
    out.sort_by_key(|k| k.pid);
    Ok(out)
}

/// Where to look for the kubelet, and its files as the host names them (the agent may see
/// them under other paths).
#[derive(Debug, Clone)]
pub struct ProcessCheck {
    /// The host's `/proc`.
    pub proc_root: PathBuf,
    /// The kubelet's `--config` on the host.
    pub host_config: PathBuf,
    /// The kubelet's `--config-dir` on the host.
    pub host_config_dir: PathBuf,
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The kubelet that reads the config file runs with the drop-in directory.
    Found(KubeletCommandLine),
    /// No kubelet process is visible: nothing checked (the message says so).
    NoKubelet,
}

impl Checked {
    /// The command line's feature gates (none when nothing was found).
    pub fn feature_gates(&self) -> BTreeMap<String, bool> {
        match self {
            Checked::Found(k) => k.feature_gates.clone(),
            Checked::NoKubelet => BTreeMap::new(),
        }
    }

    /// One line for the report.
    pub fn describe(&self, check: &ProcessCheck) -> String {
        match self {
            Checked::Found(k) => format!(
                "kubelet process {} runs with --config {} and --config-dir {}{}",
                k.pid,
                check.host_config.display(),
                check.host_config_dir.display(),
                if k.feature_gates.is_empty() {
                    String::new()
                } else {
                    format!(
                        " and --feature-gates {}",
                        k.feature_gates
                            .iter()
                            .map(|(g, v)| format!("{g}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                }
            ),
            Checked::NoKubelet => format!(
                "no kubelet process under {}: its command line (--config-dir, --feature-gates) was not checked",
                check.proc_root.display()
            ),
        }
    }
}

fn same(a: &str, b: &Path) -> bool {
    Path::new(a).components().eq(b.components())
}

/// Decides from the kubelets found: the one started with the host's config file must read
/// the drop-in directory nodetopo writes into. Several kubelets with other config files
/// (and none with this one) are an error, as is a kubelet without `--config-dir` or with
/// another one: a drop-in would be ignored.
pub fn decide(found: Vec<KubeletCommandLine>, check: &ProcessCheck) -> anyhow::Result<Checked> {
    if found.is_empty() {
        return Ok(Checked::NoKubelet);
    }
    let (mut ours, others): (Vec<_>, Vec<_>) = found.into_iter().partition(|k| {
        k.config
            .as_deref()
            .is_some_and(|c| same(c, &check.host_config))
    });
    let Some(k) = ours.pop() else {
        let seen: Vec<String> = others
            .iter()
            .map(|k| {
                format!(
                    "process {} with --config {}",
                    k.pid,
                    k.config.as_deref().unwrap_or("(none)")
                )
            })
            .collect();
        anyhow::bail!(
            "no kubelet runs with --config {} ({}): nodetopo would change files this node's kubelet does not read",
            check.host_config.display(),
            seen.join(", ")
        );
    };
    if let Some(e) = &k.error {
        anyhow::bail!("{e}");
    }
    if !ours.is_empty() {
        anyhow::bail!(
            "kubelet processes {} and {} both run with --config {}: cannot tell which one to check",
            ours[0].pid,
            k.pid,
            check.host_config.display()
        );
    }
    match &k.config_dir {
        None => anyhow::bail!(
            "the kubelet (process {}) runs without --config-dir, so it would ignore nodetopo's drop-in in {}: start it with --config-dir={}",
            k.pid,
            check.host_config_dir.display(),
            check.host_config_dir.display()
        ),
        Some(d) if !same(d, &check.host_config_dir) => anyhow::bail!(
            "the kubelet (process {}) reads its drop-ins from --config-dir {d}, not {}: nodetopo's drop-in would be ignored; set the agent's kubelet config dir to {d}",
            k.pid,
            check.host_config_dir.display()
        ),
        Some(_) => Ok(Checked::Found(k)),
    }
}

/// [`kubelets`] then [`decide`].
pub fn check(check: &ProcessCheck) -> anyhow::Result<Checked> {
    decide(kubelets(&check.proc_root)?, check)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_are_read_as_pflag_reads_them() {
        let k = parse(
            7,
            &args("--v=2 --config /var/lib/kubelet/config.yaml --register-node --config-dir=/etc/k/conf.d --feature-gates=A=true,B=f --feature-gates B=T,C=0 -- --config=/x"),
        )
        .unwrap();
        assert_eq!(k.config.as_deref(), Some("/var/lib/kubelet/config.yaml"));
        assert_eq!(k.config_dir.as_deref(), Some("/etc/k/conf.d"));
        assert_eq!(
            k.feature_gates.into_iter().collect::<Vec<_>>(),
            [("A".into(), true), ("B".into(), true), ("C".into(), false)]
        );
        assert!(parse(1, &args("--config"))
            .unwrap_err()
            .contains("--config has no value"));
        assert!(parse(1, &args("--feature-gates=A=yes"))
            .unwrap_err()
            .contains("\"yes\" is not a boolean"));
    }

    fn check() -> ProcessCheck {
        ProcessCheck {
            proc_root: PathBuf::from("/proc"),
            host_config: PathBuf::from("/var/lib/kubelet/config.yaml"),
            host_config_dir: PathBuf::from("/etc/kubernetes/kubelet.conf.d"),
        }
    }

    fn kubelet(pid: u32, a: &str) -> KubeletCommandLine {
        parse(pid, &args(a)).unwrap()
    }

    #[test]
    fn the_kubelet_must_read_the_dropin_directory() {
        let c = check();
        assert_eq!(decide(vec![], &c).unwrap(), Checked::NoKubelet);
        let good = kubelet(
            10,
            "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d/",
        );
        assert_eq!(
            decide(vec![kubelet(3, "--config=/other.yaml"), good.clone()], &c).unwrap(),
            Checked::Found(good)
        );
        for (found, want) in [
            (
                vec![kubelet(10, "--config=/var/lib/kubelet/config.yaml")],
                "runs without --config-dir",
            ),
            (
                vec![kubelet(10, "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/k")],
                "reads its drop-ins from --config-dir /etc/k",
            ),
            (
                vec![kubelet(4, "--config=/a.yaml"), kubelet(5, "--v=2")],
                "no kubelet runs with --config /var/lib/kubelet/config.yaml (process 4 with --config /a.yaml, process 5 with --config (none))",
            ),
            (
                vec![
                    kubelet(4, "--config=/var/lib/kubelet/config.yaml"),
                    kubelet(5, "--config=/var/lib/kubelet/config.yaml"),
                ],
                "processes 4 and 5 both run",
            ),
        ] {
            let e = decide(found, &c).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} in {e}");
        }
    }

    #[test]
    fn kubelets_are_found_under_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let put_as = |pid: &str, uid: u32, exe: Option<&str>, argv: &[&str]| {
            let d = dir.path().join(pid);
            std::fs::create_dir_all(&d).unwrap();
            let mut bytes = Vec::new();
            for a in argv {
                bytes.extend_from_slice(a.as_bytes());
                bytes.push(0);
            }
            std::fs::write(d.join("cmdline"), bytes).unwrap();
            std::fs::write(
                d.join("status"),
                format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
            )
            .unwrap();
            if let Some(exe) = exe {
                std::os::unix::fs::symlink(exe, d.join("exe")).unwrap();
            }
        };
        let put = |pid: &str, argv: &[&str]| put_as(pid, 0, None, argv);
        put("1", &["/sbin/init"]);
        put("2", &[]);
        put(
            "40",
            &["/usr/bin/kubelet", "--config", "/c.yaml", "--config-dir=/d"],
        );
        put("41", &["/usr/bin/kubelet-helper", "--config=/c.yaml"]);
        put("self", &["kubelet"]);
        std::fs::create_dir_all(dir.path().join("99")).unwrap(); // ended: no cmdline
                                                                 // Named `kubelet` but not one: another user's process, a root process whose
                                                                 // executable is a shell.
        let bogus = ["kubelet", "--config=/c.yaml", "--feature-gates=A=maybe"];
        put_as("42", 1000, None, &bogus);
        put_as("43", 0, Some("/usr/bin/dash"), &bogus);
        // The kubelet by its executable, whatever its command line calls it (a replaced
        // binary shows ` (deleted)`).
        put_as(
            "44",
            0,
            Some("/opt/bin/kubelet (deleted)"),
            &["kubelet-v1.37", "--config=/other.yaml", "--feature-gates=B"],
        );
        let found = kubelets(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|k| k.pid).collect::<Vec<_>>(),
            [40, 44],
            "{found:?}"
        );
        assert_eq!(found[0].config_dir.as_deref(), Some("/d"));
        assert!(found[0].error.is_none());
        // A broken command line of a kubelet nodetopo does not check blocks nothing ...
        let e = found[1].error.as_deref().unwrap();
        assert!(
            e.contains("the kubelet process 44") && e.contains("\"B\" is not GATE=BOOL"),
            "{e}"
        );
        let c = ProcessCheck {
            proc_root: dir.path().to_path_buf(),
            host_config: PathBuf::from("/c.yaml"),
            host_config_dir: PathBuf::from("/d"),
        };
        assert_eq!(
            decide(found.clone(), &c).unwrap(),
            Checked::Found(found[0].clone())
        );
        // ... while that of the checked one does.
        let c = ProcessCheck {
            host_config: PathBuf::from("/other.yaml"),
            ..c
        };
        let e = decide(found, &c).unwrap_err().to_string();
        assert!(e.contains("is not GATE=BOOL"), "{e}");
        let e = kubelets(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot list processes"), "{e}");
    }
}
