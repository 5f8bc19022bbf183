//! Test support shared by nodetopo's test crates; never shipped.
//!
//! - [`SplitMix`]: a small seeded generator, so a printed seed replays a random case exactly.
//! - [`build_once`]: runs one of the repository's build scripts (the Go test tools under
//!   `e2e/`, each building its binary once into `target/`) at most once per process.
//! - [`go_tool_or_skip`]: the rule every oracle test follows: build the tool, or, where Go
//!   is missing, skip saying why, unless `NODETOPO_REQUIRE_ORACLE=1` (CI) makes that a
//!   failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// SplitMix64 (Steele, Lea and Flood): small, seeded, good enough to pick test inputs.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

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

/// Why Go cannot be used here, if it cannot.
pub fn go_missing() -> Option<String> {
    match Command::new("go").arg("version").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`go version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("Go is not installed (`go version`: {e})")),
    }
}

/// The environment variable that turns an oracle test's skip into a failure.
pub const REQUIRE_ORACLE_ENV: &str = "NODETOPO_REQUIRE_ORACLE";

/// The binary `script` builds (see [`build_once`]), or `None` after printing
/// `SKIP <what>: <why>` where Go is missing, unless `NODETOPO_REQUIRE_ORACLE=1`, which
/// panics instead. A failed build with Go present always panics, with the script's output.
pub fn go_tool_or_skip(script: &str, what: &str) -> Option<PathBuf> {
    if let Some(why) = go_missing() {
        if std::env::var(REQUIRE_ORACLE_ENV).as_deref() == Ok("1") {
            panic!("{REQUIRE_ORACLE_ENV}=1 but {what} cannot be built: {why}");
        }
        eprintln!("SKIP {what}: {why}");
        return None;
    }
    match build_once(script, &[], what) {
        Ok(bin) if bin.is_file() => Some(bin),
        Ok(bin) => panic!("{what}: {} is missing after {script}", bin.display()),
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_the_reference_sequence() {
        // The first outputs of SplitMix64 seeded with 0 (the reference implementation's).
        let mut r = SplitMix(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = SplitMix(7);
        for _ in 0..1000 {
            assert!(r.range(3, 5) >= 3 && r.range(3, 5) <= 5);
            assert!(*r.pick(&[1, 2]) <= 2);
        }
    }
}
