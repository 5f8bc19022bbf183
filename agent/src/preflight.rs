//! `nodetopo-agent preflight`: what this node lacks for actuation, with the exact change.
//!
//! Run on the node (as root, or with the host's `/` and `/proc` given), it reads the kubelet
//! processes' command lines and a few host files, and says, check by check, whether the
//! kubelet reads nodetopo's drop-in directory and config file, whether that directory exists
//! (a kubelet started with `--config-dir` on a missing directory does not start), and which
//! systemd socket the chart can mount. Each failed check carries the change to make: the
//! lines to edit and the commands to run, or the chart values to set.
//!
//! Shape: [`HostFacts`] is gathered by [`HostFacts::read`] (the only I/O); [`advise`] is a
//! pure function of the facts and what the chart expects ([`Want`]), tested with plain values.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use nodetopo_kubelet::cmdline::{self as kubelet_cmdline, KubeletCommandLine};
use serde::Serialize;

/// Arguments of `nodetopo-agent preflight`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The host's root directory (`/` on the node; e.g. `/host` in a debug container).
    #[arg(long, default_value = "/")]
    pub host_root: PathBuf,
    /// The host's `/proc` (default: `<host-root>/proc`).
    #[arg(long)]
    pub host_proc: Option<PathBuf>,
    /// The kubelet `--config` the chart is given (`agent.actuation.kubeletConfig`).
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    pub kubelet_config: String,
    /// The kubelet `--config-dir` the chart is given (`agent.actuation.kubeletConfigDir`).
    #[arg(long, default_value = "/etc/kubernetes/kubelet.conf.d")]
    pub kubelet_config_dir: String,
    /// Output: text (one line per check, then the changes) or json.
    #[arg(long, short = 'o', default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

/// The host paths the chart's actuation values name.
#[derive(Debug, Clone)]
pub struct Want {
    /// `agent.actuation.kubeletConfig`.
    pub config: String,
    /// `agent.actuation.kubeletConfigDir`.
    pub config_dir: String,
}

/// The kubelet's service manager set-up, as far as files on the host show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// A kubeadm systemd drop-in (`kubelet.service.d/10-kubeadm.conf`) exists.
    pub kubeadm: bool,
    /// A kind node (`/kind/version` exists).
    pub kind: bool,
    /// The extra-arguments file the kubeadm drop-in reads, and its current
    /// `KUBELET_EXTRA_ARGS` value (`None`: file or line absent).
    pub extra_args_file: Option<(String, Option<String>)>,
    /// The drop-in directory of an embedded kubelet (k3s or RKE2), with the distribution.
    pub embedded: Option<(String, String)>,
}

/// What [`advise`] judges: read from the host by [`HostFacts::read`].
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// The kubelet processes found in the host's `/proc`.
    pub kubelets: Vec<KubeletCommandLine>,
    /// Whether the wanted drop-in directory exists on the host.
    pub config_dir_exists: bool,
    /// Whether the wanted config file exists on the host.
    pub config_exists: bool,
    /// `/run/dbus/system_bus_socket` exists.
    pub system_bus: bool,
    /// `/run/systemd/private` exists.
    pub systemd_private: bool,
    /// How the kubelet is started.
    pub layout: Layout,
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Short name of the check.
    pub check: &'static str,
    /// Whether the node passes it.
    pub ok: bool,
    /// What was found.
    pub message: String,
    /// The exact change to make when it fails (lines, commands or chart values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

fn pass(check: &'static str, message: String) -> Finding {
    Finding {
        check,
        ok: true,
        message,
        change: None,
    }
}

fn fail(check: &'static str, message: String, change: String) -> Finding {
    Finding {
        check,
        ok: false,
        message,
        change: Some(change),
    }
}

/// The change that makes a kubeadm-started kubelet read `dir`: the extra-arguments line with
/// `--config-dir` appended to what it holds.
fn kubeadm_change(layout: &Layout, dir: &str) -> String {
    let (file, current) = layout.extra_args_file.clone().unwrap_or_else(|| {
        (
            "/etc/default/kubelet (deb) or /etc/sysconfig/kubelet (rpm)".to_string(),
            None,
        )
    });
    let args = match current.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(cur) => format!("{cur} --config-dir={dir}"),
        None => format!("--config-dir={dir}"),
    };
    let mut out = format!(
        "mkdir -p {dir}\nin {file}, set the line:\n  KUBELET_EXTRA_ARGS={args}\nsystemctl restart kubelet"
    );
    if layout.kind {
        out.push_str(&format!(
            "\n(kind: the node is recreated from its image; make it permanent with kubeadmConfigPatches for InitConfiguration and JoinConfiguration: nodeRegistration.kubeletExtraArgs: [{{name: config-dir, value: {dir}}}], and create {dir} before the kubelet starts)"
        ));
    }
    out
}

/// Judges the facts against what the chart expects. Pure.
pub fn advise(facts: &HostFacts, want: &Want) -> Vec<Finding> {
    let mut out = Vec::new();
    let dir = &want.config_dir;
    match facts.kubelets.as_slice() {
        [] => match &facts.layout.embedded {
            Some((distro, embedded_dir)) if embedded_dir == dir => out.push(pass(
                "kubelet",
                format!("no kubelet process ({distro} runs the kubelet inside its own binary, with --config-dir={embedded_dir}, the chart's directory); nothing on the command line can be checked"),
            )),
            Some((distro, embedded_dir)) => out.push(fail(
                "kubelet",
                format!("no kubelet process; {distro} runs the kubelet inside its own binary with --config-dir={embedded_dir}"),
                format!("helm values: agent.actuation.kubeletConfigDir={embedded_dir}, agent.actuation.checkKubeletProcess=false, agent.actuation.unit={distro}.service or {distro}-agent.service"),
            )),
            None => out.push(fail(
                "kubelet",
                "no process named kubelet in the host's /proc: nothing to check (is this the node, and the host's /proc?)".to_string(),
                "run preflight on the node itself, as root, or give --host-root and --host-proc".to_string(),
            )),
        },
        kubelets => {
            for k in kubelets {
                match &k.config_dir {
                    Some(d) if d == dir => out.push(pass(
                        "config-dir",
                        format!("the kubelet (process {}) runs with --config-dir={d}", k.pid),
                    )),
                    Some(d) => out.push(fail(
                        "config-dir",
                        format!("the kubelet (process {}) reads drop-ins from {d}, not {dir}", k.pid),
                        format!("helm values: agent.actuation.kubeletConfigDir={d}"),
                    )),
                    None if facts.layout.kubeadm => out.push(fail(
                        "config-dir",
                        format!("the kubelet (process {}) runs without --config-dir, so it would ignore nodetopo's drop-in (kubeadm layout)", k.pid),
                        kubeadm_change(&facts.layout, dir),
                    )),
                    None => out.push(fail(
                        "config-dir",
                        format!("the kubelet (process {}) runs without --config-dir, so it would ignore nodetopo's drop-in", k.pid),
                        format!("mkdir -p {dir}, then start the kubelet with --config-dir={dir} (where its service manager keeps its flags) and restart it"),
                    )),
                }
                match &k.config {
                    Some(c) if c == &want.config => out.push(pass(
                        "config",
                        format!("the kubelet (process {}) runs with --config={c}", k.pid),
                    )),
                    Some(c) => out.push(fail(
                        "config",
                        format!("the kubelet (process {}) runs with --config={c}, not {}", k.pid, want.config),
                        format!("helm values: agent.actuation.kubeletConfig={c}"),
                    )),
                    None => out.push(fail(
                        "config",
                        format!("the kubelet (process {}) runs without --config: its settings are flags, which a drop-in cannot override", k.pid),
                        "move its flags into a KubeletConfiguration file and start it with --config=FILE (then set agent.actuation.kubeletConfig=FILE)".to_string(),
                    )),
                }
            }
        }
    }
    if facts.config_dir_exists {
        out.push(pass("config-dir-exists", format!("{dir} exists")));
    } else {
        out.push(fail(
            "config-dir-exists",
            format!("{dir} does not exist: a kubelet started with --config-dir={dir} fails at start (it walks the directory)"),
            format!("mkdir -p {dir}   (before the kubelet restarts with the flag)"),
        ));
    }
    if facts.layout.embedded.is_none() {
        if facts.config_exists {
            out.push(pass("config-exists", format!("{} exists", want.config)));
        } else {
            out.push(fail(
                "config-exists",
                format!("{} does not exist (the chart mounts it, type File: the agent pod would not start)", want.config),
                "helm values: agent.actuation.kubeletConfig=<the kubelet's --config>".to_string(),
            ));
        }
    }
    out.push(match (facts.system_bus, facts.systemd_private) {
        (true, _) => pass(
            "systemd-socket",
            "the system bus socket /run/dbus/system_bus_socket exists (agent.actuation.systemdBus: system, the default)".to_string(),
        ),
        (false, true) => fail(
            "systemd-socket",
            "no system bus (/run/dbus/system_bus_socket is absent, as on kind nodes); systemd's private socket /run/systemd/private exists".to_string(),
            "helm values: agent.actuation.systemdBus=private".to_string(),
        ),
        (false, false) => fail(
            "systemd-socket",
            "neither /run/dbus/system_bus_socket nor /run/systemd/private exists: restart=systemd cannot reach systemd".to_string(),
            "helm values: agent.actuation.restart=command (with hooks of your own) or restart=none (dry run)".to_string(),
        ),
    });
    out
}

/// `KEY=value` of `key` in an environment file (quotes removed), `None` when absent.
fn env_value(text: &str, key: &str) -> Option<String> {
    text.lines().rev().find_map(|line| {
        let rest = line.trim().strip_prefix(key)?.strip_prefix('=')?;
        let v = rest.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        Some(v.to_string())
    })
}

/// `path` below `root` (`path` is absolute on the host).
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

impl HostFacts {
    /// Reads the facts from the host mounted at `root`, its processes from `proc_root`.
    pub fn read(root: &Path, proc_root: &Path, want: &Want) -> anyhow::Result<Self> {
        let kubelets = kubelet_cmdline::kubelets(proc_root)?;
        let exists = |p: &str| under(root, p).exists();
        let kubeadm = [
            "etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
        ]
        .iter()
        .any(|p| exists(p));
        let extra_args_file = ["/etc/default/kubelet", "/etc/sysconfig/kubelet"]
            .iter()
            .find(|p| exists(p))
            .map(|p| -> anyhow::Result<(String, Option<String>)> {
                let path = under(root, p);
                let bytes = nodetopo_engine::files::read_bounded(&path, 64 * 1024)
                    .with_context(|| format!("reading {}", path.display()))?;
                let text = String::from_utf8_lossy(&bytes);
                Ok((p.to_string(), env_value(&text, "KUBELET_EXTRA_ARGS")))
            })
            .transpose()?
            .or_else(|| {
                kubeadm.then(|| {
                    let debian = exists("etc/debian_version");
                    let file = if debian {
                        "/etc/default/kubelet"
                    } else {
                        "/etc/sysconfig/kubelet"
                    };
                    (file.to_string(), None)
                })
            });
        let embedded = [
            ("k3s", "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d"),
            ("rke2", "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d"),
        ]
        .iter()
        .find(|(_, d)| exists(d))
        .map(|(n, d)| (n.to_string(), d.to_string()));
        Ok(HostFacts {
            kubelets,
            config_dir_exists: under(root, &want.config_dir).is_dir(),
            config_exists: under(root, &want.config).is_file(),
            system_bus: exists("run/dbus/system_bus_socket"),
            systemd_private: exists("run/systemd/private"),
            layout: Layout {
                kubeadm,
                kind: exists("kind/version"),
                extra_args_file,
                embedded,
            },
        })
    }
}

/// Prints the findings; exit code 0 when every check passes, 1 when a change is needed.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let want = Want {
        config: args.kubelet_config,
        config_dir: args.kubelet_config_dir,
    };
    let proc_root = args
        .host_proc
        .unwrap_or_else(|| args.host_root.join("proc"));
    let facts = HostFacts::read(&args.host_root, &proc_root, &want)?;
    let findings = advise(&facts, &want);
    let ready = findings.iter().all(|f| f.ok);
    if args.output == "json" {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "ready": ready,
                "findings": findings,
            }))?
        );
    } else {
        for f in &findings {
            println!(
                "{} {}: {}",
                if f.ok { "ok  " } else { "FAIL" },
                f.check,
                f.message
            );
        }
        for f in findings.iter().filter(|f| !f.ok) {
            if let Some(change) = &f.change {
                println!("\nto fix {}:\n{change}", f.check);
            }
        }
        println!(
            "\n{}",
            if ready {
                "this node is ready for actuation"
            } else {
                "this node needs the changes above before actuation can apply"
            }
        );
    }
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests;
