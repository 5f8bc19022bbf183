//! Crash safety of `run --local`: the agent is SIGKILLed at random points during a stream of
//! pod additions and deletions, restarted, and must give every surviving container exactly
//! the CPUs it had published, with no CPU in two containers, ever.
//!
//! `NODETOPO_CRASH_KILLS` sets the number of kill points (default 200, the CI figure);
//! `NODETOPO_CRASH_SEED` replays a run (the seed is printed).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodetopo_engine::CpuSet;
use serde_yaml::Value;

const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Env {
    _dir: tempfile::TempDir,
    pods: PathBuf,
    state: PathBuf,
    spec: PathBuf,
    status: PathBuf,
}

fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let pods = root.join("pods");
    fs::create_dir_all(&pods).expect("pods dir");
    let spec = root.join("spec.yaml");
    fs::write(
        &spec,
        "apiVersion: nodetopo.io/v1alpha1\nkind: NodeTopology\nmetadata: {name: node-a, generation: 1}\n\
         spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,32\"}\n  topologyManager: {policy: none}\n",
    )
    .expect("spec");
    Env {
        pods,
        state: root.join("state"),
        spec,
        status: root.join("status.yaml"),
        _dir: dir,
    }
}

fn start(e: &Env) -> Child {
    Command::new(BIN)
        .args([
            "run",
            "--local",
            "--preset",
            "epyc-7303-2p",
            "--poll-ms",
            "2",
        ])
        .arg("--pods-dir")
        .arg(&e.pods)
        .arg("--spec")
        .arg(&e.spec)
        .arg("--status-file")
        .arg(&e.status)
        .arg("--state-dir")
        .arg(&e.state)
        .arg("--kubelet-state")
        .arg(e.state.join("no-kubelet"))
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts")
}

/// Writes a pod file atomically (as kubectl-like tools and the tests should).
fn write_pod(dir: &Path, n: u64, cpus: u64, two: bool) {
    let mut containers =
        format!("  - name: app\n    resources: {{limits: {{cpu: \"{cpus}\", memory: 1Gi}}}}\n");
    if two {
        containers.push_str("  - name: side\n    resources: {limits: {cpu: \"1\", memory: 1Gi}}\n");
    }
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, uid: u{n}, creationTimestamp: \"2024-01-01T00:{:02}:{:02}Z\"}}\nspec:\n  containers:\n{containers}",
        (n / 60) % 60,
        n % 60
    );
    let tmp = dir.join(format!(".p{n}.tmp"));
    fs::write(&tmp, text).expect("write pod");
    fs::rename(&tmp, dir.join(format!("p{n}.yaml"))).expect("rename pod");
}

/// (pod uid, container) -> CPUs, from a status file; `None` if absent.
type Published = BTreeMap<(String, String), CpuSet>;

fn read_status(path: &Path) -> Option<(Published, BTreeSet<String>)> {
    let text = fs::read_to_string(path).ok()?;
    let v: Value = serde_yaml::from_str(&text).expect("status file is always whole YAML");
    let status = v.get("status")?;
    let mut out = BTreeMap::new();
    for a in status.get("allocations")?.as_sequence()? {
        let s = |k: &str| {
            a.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let cpus = CpuSet::parse(&s("cpus")).expect("cpus");
        out.insert((s("podUID"), s("container")), cpus);
    }
    let rejected = status
        .get("rejections")
        .and_then(Value::as_sequence)
        .map(|r| {
            r.iter()
                .filter_map(|x| x.get("podUID").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Some((out, rejected))
}

fn assert_disjoint(p: &Published, when: &str) {
    let mut seen: BTreeMap<usize, &(String, String)> = BTreeMap::new();
    for (k, cpus) in p {
        for c in cpus.iter() {
            if let Some(other) = seen.insert(c, k) {
                panic!("{when}: CPU {c} assigned to both {other:?} and {k:?}");
            }
        }
    }
}

/// Waits until the status covers exactly the live pods (each allocated or rejected).
fn converge(e: &Env, live: &BTreeSet<u64>) -> (Published, BTreeSet<String>) {
    let want: BTreeSet<String> = live.iter().map(|n| format!("u{n}")).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((p, rej)) = read_status(&e.status) {
            let have: BTreeSet<String> = p
                .keys()
                .map(|(u, _)| u.clone())
                .chain(rej.iter().cloned())
                .collect();
            if have == want {
                return (p, rej);
            }
        }
        assert!(
            Instant::now() < deadline,
            "agent did not converge on {want:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn sigkill_at_random_points_loses_no_allocation() {
    let kills: u64 = std::env::var("NODETOPO_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let seed: u64 = std::env::var("NODETOPO_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(0x9E37_79B9_7F4A_7C15)
        });
    eprintln!("crash test: {kills} kill points, NODETOPO_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let e = env();
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut next = 0u64;
    let mut before: Option<Published> = None;
    let mut checked = 0usize;
    for round in 0..kills {
        // A fresh status file proves that what we read next was written by the new process.
        let _ = fs::remove_file(&e.status);
        let mut child = start(&e);
        let (now, _) = converge(&e, &live);
        assert_disjoint(&now, &format!("round {round} after restart"));
        if let Some(prev) = before.take() {
            for (k, cpus) in &prev {
                let n: u64 = k.0[1..].parse().expect("uid");
                if live.contains(&n) {
                    checked += 1;
                    assert_eq!(
                        now.get(k),
                        Some(cpus),
                        "round {round}: {k:?} changed CPUs across the restart (seed {seed})"
                    );
                }
            }
        }
        // A burst of additions and deletions, then SIGKILL at a random moment inside it.
        let ops = 1 + rng.below(6);
        let kill_after = rng.below(ops + 1);
        for op in 0..ops {
            if op == kill_after {
                break;
            }
            if live.len() > 12 || (!live.is_empty() && rng.below(3) == 0) {
                let victim = *live
                    .iter()
                    .nth(rng.below(live.len() as u64) as usize)
                    .expect("pod");
                fs::remove_file(e.pods.join(format!("p{victim}.yaml"))).expect("delete pod");
                live.remove(&victim);
            } else {
                next += 1;
                write_pod(&e.pods, next, 1 + rng.below(4), rng.below(4) == 0);
                live.insert(next);
            }
            std::thread::sleep(Duration::from_micros(rng.below(4000)));
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        if let Some((p, _)) = read_status(&e.status) {
            assert_disjoint(&p, &format!("round {round} at the kill"));
            before = Some(p);
        }
    }
    // Final restart: converges and keeps everything published before the last kill.
    let _ = fs::remove_file(&e.status);
    let mut child = start(&e);
    let (now, _) = converge(&e, &live);
    assert_disjoint(&now, "final");
    if let Some(prev) = before {
        for (k, cpus) in &prev {
            let n: u64 = k.0[1..].parse().expect("uid");
            if live.contains(&n) {
                checked += 1;
                assert_eq!(
                    now.get(k),
                    Some(cpus),
                    "final: {k:?} changed CPUs (seed {seed})"
                );
            }
        }
    }
    child.kill().expect("stop");
    child.wait().expect("reaped");
    eprintln!("crash test: {checked} surviving containers checked across {kills} kills");
    assert!(
        checked > kills as usize / 2,
        "too few survivors checked: {checked}"
    );
}
