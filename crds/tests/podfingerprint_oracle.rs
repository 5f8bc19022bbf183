//! nodetopo's pod-set fingerprint against the reference Go module
//! (github.com/k8stopologyawareschedwg/podfingerprint, pinned in e2e/podfingerprint/go.mod):
//! random pod sets (sizes 0..300, namespace and name alphabets including DNS-label
//! characters and multi-byte UTF-8, repeated pods, order shuffled) signed by both.
//!
//! Skips with one line when Go is not installed, unless `NODETOPO_REQUIRE_ORACLE=1`.
//! `NODETOPO_PODFINGERPRINT_SEED` replays one seed; the default seed is fixed.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nodetopo_crds::nrt::fingerprint::PodFingerprint;
use nodetopo_testkit::{go_tool_or_skip, SplitMix};
use serde_json::json;

/// Builds (or reuses) the oracle; `None` (with one printed line) where Go is missing.
fn oracle_or_skip() -> Option<PathBuf> {
    go_tool_or_skip("e2e/podfingerprint/build.sh", "the podfingerprint oracle")
}

/// A random string of at most `max_len` characters from a mixed alphabet.
fn random_string(r: &mut SplitMix, max_len: usize) -> String {
    const ALPHABET: &[&str] = &[
        "a", "b", "c", "k", "z", "0", "9", "-", ".", "x", "ü", "日", "🙂", "_", "/",
    ];
    let len = r.below(max_len + 1);
    (0..len).map(|_| *r.pick(ALPHABET)).collect()
}

#[test]
fn fingerprint_matches_reference_module() {
    let Some(bin) = oracle_or_skip() else { return };
    let seed: u64 = std::env::var("NODETOPO_PODFINGERPRINT_SEED")
        .ok()
        .map(|s| s.parse().expect("NODETOPO_PODFINGERPRINT_SEED is a u64"))
        .unwrap_or(0x005e_ed16);
    let mut rng = SplitMix(seed);
    let mut sets: Vec<Vec<(String, String)>> = vec![
        vec![],
        vec![("".into(), "".into())],
        vec![("default".into(), "web-0".into())],
        vec![
            ("default".into(), "web-0".into()),
            ("default".into(), "web-0".into()),
        ],
    ];
    for _ in 0..400 {
        let size = match rng.below(4) {
            0 => rng.below(4),
            1 => rng.below(30),
            _ => rng.below(300),
        };
        let namespaces: Vec<String> = (0..1 + rng.below(8))
            .map(|_| random_string(&mut rng, 20))
            .collect();
        let mut set: Vec<(String, String)> = (0..size)
            .map(|_| {
                let ns = rng.pick(&namespaces).clone();
                (ns, random_string(&mut rng, 63))
            })
            .collect();
        if !set.is_empty() && rng.below(5) == 0 {
            let dup = rng.pick(&set).clone();
            set.push(dup);
        }
        sets.push(set);
    }
    let request = json!({
        "sets": sets
            .iter()
            .map(|s| s
                .iter()
                .map(|(ns, name)| json!({"namespace": ns, "name": name}))
                .collect::<Vec<_>>())
            .collect::<Vec<_>>()
    });
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(request.to_string().as_bytes())
        .expect("writing the request");
    let out = child.wait_with_output().expect("oracle output");
    assert!(out.status.success(), "oracle failed: {}", out.status);
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    let signs = answer["signs"].as_array().expect("signs array");
    assert_eq!(signs.len(), sets.len(), "one sign per set");
    let mut pods = 0usize;
    for (i, (set, want)) in sets.iter().zip(signs).enumerate() {
        // Sign in a shuffled order too: the result must not depend on it.
        let mut shuffled = set.clone();
        for k in (1..shuffled.len()).rev() {
            shuffled.swap(k, rng.below(k + 1));
        }
        for order in [set, &shuffled] {
            let fp: PodFingerprint = order
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let want = want.as_str().expect("sign string");
            assert_eq!(
                fp.sign(),
                want,
                "set {i} (seed {seed}, {} pods) signs differently",
                set.len()
            );
            assert_eq!(fp.check(want), Ok(()));
        }
        pods += set.len();
    }
    println!(
        "podfingerprint oracle: {} pod sets ({pods} pods) agree with the reference module, seed {seed}",
        sets.len()
    );
}
