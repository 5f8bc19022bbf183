//! Running the harness's build and install scripts once per process.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::repo_root;

/// Runs `bash <script> <args>` (the script path relative to the repository root) at most
/// once per process for the same script and arguments, and returns the path the script
/// printed on its last stdout line (relative paths are taken from the repository root).
/// `what` names the result in errors ("the kubelet oracle"); a failure keeps the script's
/// status and the last 40 lines of its stderr, and is remembered like a success.
pub fn build_once(script: &str, args: &[&str], what: &str) -> Result<PathBuf, String> {
    static DONE: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let key = format!("{script} {}", args.join(" "));
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = done.iter().find(|(k, _)| *k == key) {
        return r.clone();
    }
    let r = run(script, args, what);
    done.push((key, r.clone()));
    r
}

fn run(script: &str, args: &[&str], what: &str) -> Result<PathBuf, String> {
    let path = repo_root().join(script);
    let shown = format!("{} {}", path.display(), args.join(" "));
    let shown = shown.trim_end();
    let out = Command::new("bash")
        .arg(&path)
        .args(args)
        .output()
        .map_err(|e| format!("{what}: running {shown}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        return Err(format!(
            "{what}: {shown} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::trim)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{what}: {shown} printed no path"))?;
    Ok(if last.is_absolute() {
        last
    } else {
        repo_root().join(last)
    })
}
