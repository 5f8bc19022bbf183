//! Local mode, event to status: from writing a pod file to the status file showing the
//! pod's allocation, with file-change notification (the default) and with the poll alone
//! (`--no-watch`, the 50 ms default interval). The file is written to a temp name and renamed
//! into the pods directory (read at once with notification), or written in place (read once
//! closed and quiet for `--settle-ms`, 2 ms); the clock starts before the rename or the
//! create.
//!
//! The agent runs as a process (`run --local`) on the 512-CPU preset `epyc-9754-2p` under
//! single-numa-node, as `agent/bench/footprint.py` runs it. Each measured event adds one
//! Guaranteed pod; its removal afterwards is not timed. Besides criterion's estimates, each
//! mode prints the median, p90 and max of every event it timed and the agent's resident
//! memory (VmRSS, VmHWM) at the end.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

/// One running agent in local mode on its own temp directory.
struct Agent {
    dir: tempfile::TempDir,
    child: Child,
    next: u32,
}

impl Agent {
    fn start(extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |s: &str| dir.path().join(s);
        fs::create_dir_all(p("pods")).expect("pods dir");
        fs::write(
            p("spec.yaml"),
            "apiVersion: nodetopo.io/v1alpha1\nkind: NodeTopology\nmetadata: {name: bench, generation: 1}\n\
             spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,256\"}\n  topologyManager: {policy: single-numa-node}\n",
        )
        .expect("spec");
        let child = Command::new(BIN)
            .args(["run", "--local", "--preset", "epyc-9754-2p"])
            .args(extra)
            .arg("--pods-dir")
            .arg(p("pods"))
            .arg("--spec")
            .arg(p("spec.yaml"))
            .arg("--status-file")
            .arg(p("status.yaml"))
            .arg("--state-dir")
            .arg(p("state"))
            .arg("--kubelet-state")
            .arg(p("none"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts");
        let agent = Agent {
            dir,
            child,
            next: 0,
        };
        agent.wait_for(|s| s.contains("observedGeneration: 1"));
        agent
    }

    fn path(&self, s: &str) -> PathBuf {
        self.dir.path().join(s)
    }

    /// Waits until the status file satisfies `pred`. The file is replaced by a rename on
    /// every write, so it is read again only when `stat` shows a new version (checked every
    /// 0.1 ms: a cheap call that leaves the two cores to the agent).
    fn wait_for(&self, pred: impl Fn(&str) -> bool) {
        use std::os::unix::fs::MetadataExt;
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = self.path("status.yaml");
        let mut last = None;
        loop {
            let now = fs::metadata(&status)
                .ok()
                .map(|m| (m.ino(), m.mtime_nsec(), m.len()));
            if now.is_some() && now != last {
                last = now;
                if let Ok(text) = fs::read_to_string(&status) {
                    if pred(&text) {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "the status never showed the change"
            );
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Adds a pod (temp file + rename, or in place) and returns the time until the status
    /// shows it; then removes it again and waits for that, untimed.
    fn one_event(&mut self, how: Write) -> Duration {
        self.next += 1;
        let n = self.next;
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, uid: u{n}, creationTimestamp: \"2024-01-01T00:00:00Z\"}}\n\
             spec:\n  containers:\n  - name: app\n    resources: {{limits: {{cpu: \"2\", memory: 1Gi}}}}\n"
        );
        let pods = self.path("pods");
        let tmp = pods.join(format!(".p{n}.tmp"));
        let file = pods.join(format!("p{n}.yaml"));
        let uid = format!("podUID: u{n}\n");
        let start = match how {
            Write::Rename => {
                fs::write(&tmp, text).expect("pod");
                let start = Instant::now();
                fs::rename(&tmp, &file).expect("rename");
                start
            }
            Write::InPlace => {
                let start = Instant::now();
                fs::write(&file, text).expect("pod");
                start
            }
        };
        self.wait_for(|s| s.contains(&uid));
        let took = start.elapsed();
        fs::remove_file(&file).expect("remove");
        self.wait_for(|s| !s.contains(&uid));
        took
    }

    /// VmRSS and VmHWM of the agent, in MiB.
    fn memory(&self) -> (f64, f64) {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status of the agent");
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(f64::NAN, |kib| kib / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a pod file is written.
#[derive(Clone, Copy)]
enum Write {
    /// To a temp name, then renamed into the pods directory.
    Rename,
    /// Created and written in place.
    InPlace,
}

fn report(name: &str, agent: &Agent, mut all: Vec<Duration>) {
    if all.is_empty() {
        // Filtered out on the command line.
        return;
    }
    all.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    let (rss, hwm) = agent.memory();
    eprintln!(
        "{name}: {} events, median {:.1} ms, p90 {:.1} ms, max {:.1} ms; agent RSS {rss:.1} MiB (peak {hwm:.1} MiB)",
        all.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(all[all.len() - 1]),
    );
}

fn bench_mode(c: &mut Criterion, name: &str, how: Write, extra: &[&str]) {
    let mut agent = Agent::start(extra);
    let mut all = Vec::new();
    let mut group = c.benchmark_group("local_event_to_status");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let took = agent.one_event(how);
                all.push(took);
                total += took;
            }
            total
        })
    });
    group.finish();
    report(name, &agent, all);
}

fn local_events(c: &mut Criterion) {
    bench_mode(c, "watched_rename", Write::Rename, &[]);
    bench_mode(c, "watched_in_place", Write::InPlace, &[]);
    bench_mode(
        c,
        "polled_50ms_rename",
        Write::Rename,
        &["--no-watch", "--poll-ms", "50"],
    );
}

criterion_group!(benches, local_events);
criterion_main!(benches);
