//! The oracle process: building it, feeding it cases, restarting it after a timeout.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::protocol::*;

/// Whether the oracle can answer device cases here: it must set up its private mount
/// namespace with a tmpfs on /var/lib/kubelet (root, or unprivileged user namespaces).
/// `Err` carries the oracle's own message.
pub(crate) fn devices_available(bin: &std::path::Path) -> Result<(), String> {
    let out = Command::new(bin)
        .arg("-devices")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} ({})",
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        ))
    }
}

pub(crate) struct Oracle {
    pub(crate) bin: PathBuf,
    pub(crate) child: Option<(Child, ChildStdin, BufReader<ChildStdout>)>,
    pub(crate) restarts: usize,
    /// Start the oracle with `-devices` (device cases: its private /var/lib/kubelet).
    pub(crate) devices: bool,
}

impl Oracle {
    pub(crate) fn start(&mut self) {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-timeout=2s");
        // The kubelet's checkpoint code syncs the file on every state change (the memory
        // manager always keeps one): on a tmpfs a memory case takes ~25 ms, on disk ~100 ms.
        if std::path::Path::new("/dev/shm").is_dir() {
            cmd.arg("-state-dir=/dev/shm");
        }
        if self.devices {
            cmd.arg("-devices");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the kubelet oracle");
        let stdin = child.stdin.take().expect("oracle stdin");
        let stdout = BufReader::new(child.stdout.take().expect("oracle stdout"));
        self.child = Some((child, stdin, stdout));
    }

    /// Answers for `cases`, in order. A case the oracle times out on gets a timeout answer
    /// and the oracle is restarted for the rest.
    pub(crate) fn ask(&mut self, cases: &[CaseJson]) -> Vec<Answer> {
        let mut answers = Vec::with_capacity(cases.len());
        while answers.len() < cases.len() {
            if self.child.is_none() {
                self.start();
            }
            let Some((mut child, stdin, mut stdout)) = self.child.take() else {
                unreachable!()
            };
            let rest: Vec<String> = cases[answers.len()..]
                .iter()
                .map(|c| serde_json::to_string(c).expect("case serialises"))
                .collect();
            let writer = std::thread::spawn(move || {
                let mut stdin = stdin;
                for line in rest {
                    if writeln!(stdin, "{line}").is_err() {
                        return None;
                    }
                }
                stdin.flush().ok().map(|_| stdin)
            });
            let want = cases.len() - answers.len();
            let mut got = 0;
            let mut line = String::new();
            let mut died = false;
            while got < want {
                line.clear();
                if stdout.read_line(&mut line).expect("reading oracle") == 0 {
                    died = true;
                    break;
                }
                let a: Answer = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("oracle answer is not JSON ({e}): {line}"));
                let timed_out = a.timeout;
                answers.push(a);
                got += 1;
                if timed_out {
                    died = true;
                    break;
                }
            }
            let stdin = writer.join().expect("writer thread");
            if died {
                let _ = child.kill();
                let _ = child.wait();
                self.restarts += 1;
                if answers.len() < cases.len() && got == 0 {
                    panic!("the kubelet oracle exited without answering");
                }
            } else if let Some(stdin) = stdin {
                self.child = Some((child, stdin, stdout));
            }
        }
        answers
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        if let Some((mut child, stdin, _)) = self.child.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}
