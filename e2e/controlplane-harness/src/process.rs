//! Child processes that cannot outlive the test process.
//!
//! Linux's `PR_SET_PDEATHSIG` kills a child when the *thread* that forked it exits, so every
//! child is forked by one spawner thread that lives as long as the process. Each child also
//! gets its own process group, so [`kill_group`] reaches anything it forks.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use crate::{Error, Result};

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("controlplane-spawner".into())
            .spawn(move || {
                // Ends only when the process does: the sender lives in a static.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the control-plane spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` in a new process group, to be killed with SIGKILL when this process exits.
pub fn spawn(mut cmd: Command, what: &str) -> Result<Child> {
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches only the calling (child) process.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .map_err(|_| Error::Other("control-plane spawner lock poisoned".into()))?
        .send((cmd, tx))
        .map_err(|_| Error::Other("control-plane spawner thread is gone".into()))?;
    rx.recv()
        .map_err(|_| Error::Other("control-plane spawner thread is gone".into()))?
        .map_err(|e| Error::io(format!("starting {what}"), e))
}

/// Sends `signal` to the child's process group.
pub fn signal_group(child: &Child, signal: i32) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: plain kill(2) on the group we created for this child.
        unsafe {
            libc::kill(-pid, signal);
        }
    }
}

/// Kills the child's process group and reaps the child.
pub fn kill_group(child: &mut Child) {
    signal_group(child, libc::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}
