//! The local node's host side: the agent's mounts, the kubelet supervisor, logs, image
//! packing and the test device plugin.

use super::*;

/// The chart's default `agent.actuation.hideKubeletPaths`.
pub(super) const HIDDEN_KUBELET_PATHS: [&str; 6] = [
    "pods",
    "pki",
    "plugins",
    "plugins_registry",
    "device-plugins",
    "pod-resources",
];

/// The running agent's mounts, checked from the host's `/proc` against the kubelet's own
/// view of its directory ([`mounts::check_agent`]).
pub(super) fn agent_mounts() -> Result<Vec<String>> {
    let proc_root = Path::new("/proc");
    // The chart's agent (other tests on the machine may run `nodetopo-agent run --local`).
    let agents = mounts::pids(proc_root, |a| {
        mounts::program_is(a, "nodetopo-agent")
            && a.get(1).is_some_and(|s| s == "run")
            && a.iter().any(|s| s == "--sysfs-root=/host/sys")
            && a.iter().any(|s| s == "--actuation")
    })?;
    let [agent] = agents.as_slice() else {
        bail!("expected one `nodetopo-agent run` process, found {agents:?}");
    };
    let kubelets = mounts::pids(proc_root, |a| mounts::program_is(a, "kubelet"))?;
    let [kubelet] = kubelets.as_slice() else {
        bail!("expected one kubelet process, found {kubelets:?}");
    };
    let argv = mounts::argv(proc_root, &kubelet.to_string()).context("the kubelet's argv")?;
    let root_dir = argv
        .iter()
        .find_map(|a| a.strip_prefix("--root-dir="))
        .unwrap_or("/var/lib/kubelet");
    let kubelet_pods = proc_root
        .join(kubelet.to_string())
        .join("root")
        .join(root_dir.trim_start_matches('/'))
        .join("pods");
    mounts::check_agent(proc_root, *agent, &HIDDEN_KUBELET_PATHS, &kubelet_pods)
}

/// Serves the agent's kubelet hooks (`nodetopo-testnode kubelet-ctl URL`): `GET /stop`,
/// `/start` (returns once the kubelet's healthz answers) and `/health`, one at a time. The
/// kubelet runs under the test, outside the agent's container: this is what a node's service
/// manager does for the chart's `command` restarter.
pub(super) async fn supervise(
    listener: &tokio::net::TcpListener,
    node: &LocalNode,
    starts: &std::sync::atomic::AtomicUsize,
    fail_start: &std::sync::atomic::AtomicBool,
) -> std::convert::Infallible {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
            if conn.readable().await.is_err() {
                break;
            }
            match conn.try_read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
        let request = String::from_utf8_lossy(&buf);
        let path = request
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let answer: Result<String, String> = tokio::task::block_in_place(|| {
            match path.as_str() {
            "/stop" => node
                .stop_kubelet()
                .map(|()| "stopped".into())
                .map_err(|e| e.to_string()),
            "/start" if fail_start.swap(false, std::sync::atomic::Ordering::SeqCst) => {
                Err("refused by the test: this start fails, as a kubelet that refuses its configuration exits".into())
            }
            "/start" => {
                starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                node.start_kubelet()
                    .map(|()| "started, healthz ok".into())
                    .map_err(|e| e.to_string())
            }
            "/health" if node.kubelet_healthy() => Ok("ok".into()),
            "/health" => Err("the kubelet's healthz does not answer ok".into()),
            other => Err(format!("unknown hook {other:?}")),
        }
        });
        println!("[local-node] kubelet hook {path}: {answer:?}");
        let (status, body) = match answer {
            Ok(b) => ("200 OK", b),
            Err(e) => ("500 Internal Server Error", e),
        };
        let reply = format!("HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}\n");
        let mut sent = 0;
        while sent < reply.len() && conn.writable().await.is_ok() {
            match conn.try_write(&reply.as_bytes()[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
    }
}

/// The end of every container log of the pods in `namespace` (the agent's and operator's).
pub(super) fn pod_logs(node: &LocalNode, namespace: &str, lines: usize) -> String {
    let mut out = String::new();
    let Ok(pods) = fs::read_dir(node.dir().join("var-log/pods")) else {
        return "no pod logs".into();
    };
    for pod in pods.flatten() {
        if !pod
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{namespace}_"))
        {
            continue;
        }
        for container in fs::read_dir(pod.path()).into_iter().flatten().flatten() {
            for log in fs::read_dir(container.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push_str(&format!(
                    "--- {} ---\n{}\n",
                    log.path().display(),
                    tail(&log.path(), lines)
                ));
            }
        }
    }
    out
}

/// Packs an image tarball with `e2e/node-tools/pack-image.sh`.
pub(super) fn pack(
    out_dir: &Path,
    name: &str,
    entrypoint: &str,
    cmd: &[&str],
    user: Option<&str>,
    files: &[(PathBuf, &str)],
) -> Result<PathBuf> {
    let out = out_dir.join(format!(
        "{}.tar",
        name.rsplit('/').next().unwrap_or(name).replace(':', "_")
    ));
    let mut c = Command::new("bash");
    c.arg(nodetopo_controlplane::repo_root().join("e2e/node-tools/pack-image.sh"))
        .args(["--name", name, "--out"])
        .arg(&out)
        .args(["--entrypoint", entrypoint]);
    for a in cmd {
        c.args(["--cmd", a]);
    }
    if let Some(u) = user {
        c.args(["--user", u]);
    }
    for (src, dest) in files {
        c.arg(format!("{}:{dest}", src.display()));
    }
    text_of(
        c.stdin(Stdio::null())
            .output()
            .context("running pack-image.sh")?,
        &format!("packing {name}"),
    )?;
    Ok(out)
}

/// The first NUMA node of this machine (the test devices sit on it).
pub(super) fn first_numa_node() -> u64 {
    fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|s| CpuSet::parse(s.trim()).ok())
        .and_then(|s| s.iter().next())
        .map_or(0, |n| n as u64)
}

/// Kills the device plugin when the test ends, however it ends.
pub(super) struct Plugin(pub(super) Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
