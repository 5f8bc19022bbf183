//! The one CPU manager checkpoint reader and writer against the kubelet's own checkpoint code
//! (`e2e/kubelet-checkpoint-oracle`, k8s.io/kubernetes v1.37.2): files the kubelet writes in
//! v2, v3 and v4 (with and without pod entries), and the same files altered the ways the
//! kubelet's reading rules tell apart (the two views of v4 differing, each checksum wrong, a
//! repeated or case-folded key, nesting at and over Go's limit, wrong types), are restored by
//! the kubelet's `NewCheckpointState` and read by [`cpu_checkpoint::parse`]: both must accept
//! the same files with the same state and refuse the same files. Skipped (loudly) without Go
//! unless NODETOPO_REQUIRE_ORACLE=1.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodetopo_engine::change::KubeletCpuState;
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::CpuSet;
use nodetopo_kubelet::cpu_checkpoint::{self, CheckpointFormat, ChecksumCheck};
use nodetopo_testkit::{go_tool_or_skip, SplitMix};
use serde_json::{json, Value};

fn oracle_or_skip() -> Option<PathBuf> {
    go_tool_or_skip(
        "e2e/kubelet-checkpoint-oracle/build.sh",
        "the kubelet checkpoint oracle",
    )
}

/// One answer per request, in order.
fn ask(bin: &Path, requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the kubelet checkpoint oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines: Vec<String> = requests.iter().map(|r| r.to_string()).collect();
    let writer = std::thread::spawn(move || {
        for l in lines {
            writeln!(stdin, "{l}").expect("writing to the oracle");
        }
    });
    let answers: Vec<Value> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .take(requests.len())
        .map(|l| serde_json::from_str(&l.expect("reading the oracle")).expect("answer"))
        .collect();
    writer.join().expect("writer");
    assert!(child.wait().expect("oracle exit").success());
    assert_eq!(answers.len(), requests.len());
    answers
}

/// A random checkpoint content: policy, shared pool, container entries, pod entries.
fn random_state(r: &mut SplitMix) -> Value {
    let cpus = |r: &mut SplitMix| {
        let lo = r.below(32);
        let hi = lo + r.below(4);
        let range = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        };
        if r.chance(30) {
            format!("{range},{}", hi + 2 + r.below(3))
        } else if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        }
    };
    let mut entries = serde_json::Map::new();
    for p in 0..r.below(4) {
        let mut cs = serde_json::Map::new();
        for c in 0..1 + r.below(3) {
            let name = *r.pick(&["app", "side<car>", "db&x", "c"]);
            cs.insert(format!("{name}{c}"), json!(cpus(r)));
        }
        entries.insert(format!("uid-{p}-{}", r.below(1000)), Value::Object(cs));
    }
    let mut pods = serde_json::Map::new();
    if r.chance(40) {
        pods.insert(format!("pod-{}", r.below(100)), json!(cpus(r)));
    }
    json!({
        "policyName": *r.pick(&["static", "static", "none"]),
        "defaultCpuSet": if r.chance(10) { String::new() } else { cpus(r) },
        "entries": entries,
        "podEntries": pods,
    })
}

/// The same file altered in the ways the kubelet's reading rules tell apart.
fn variants(file: &str) -> Vec<(&'static str, String)> {
    let v: Value = serde_json::from_str(file).expect("the kubelet writes JSON");
    let mut out = vec![("as written", file.to_string())];
    let legacy = v["checksum"].as_u64().unwrap_or(0);
    out.push((
        "checksum + 1",
        file.replacen(
            &format!("\"checksum\":{legacy}"),
            &format!("\"checksum\":{}", legacy + 1),
            1,
        ),
    ));
    out.push((
        "checksum 0",
        file.replacen(&format!("\"checksum\":{legacy}"), "\"checksum\":0", 1),
    ));
    if let Some(dc) = v["dataChecksum"].as_u64() {
        out.push((
            "dataChecksum + 1",
            file.replacen(
                &format!("\"dataChecksum\":{dc}"),
                &format!("\"dataChecksum\":{}", dc + 1),
                1,
            ),
        ));
        // The legacy view differs from data (as an older kubelet could leave it).
        let mut w = v.clone();
        w["defaultCpuSet"] = json!("0-63");
        w["policyName"] = json!("none");
        out.push(("legacy view differs", w.to_string()));
        // data differs from the legacy view, dataChecksum recomputed.
        let mut w = v.clone();
        let mut d: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
        d["defaultCpuSet"] = json!("40-47");
        let data = d.to_string();
        w["data"] = json!(data);
        w["dataChecksum"] = json!(nodetopo_kubelet::gohash::data_checksum(&data));
        out.push(("data differs, dataChecksum recomputed", w.to_string()));
    }
    let body = &file[1..];
    out.push((
        "repeated policyName first",
        format!("{{\"policyName\":\"other\",{body}"),
    ));
    out.push((
        "repeated policyName last",
        format!("{},\"policyName\":\"other\"}}", &file[..file.len() - 1]),
    ));
    out.push((
        "case-folded key",
        file.replacen("\"policyName\"", "\"POLICYNAME\"", 1),
    ));
    out.push((
        "case-folded data key",
        file.replacen("\"data\"", "\"Data\"", 1),
    ));
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    out.push((
        "unknown member at depth 9999",
        format!("{{\"x\":{},{body}", nest(9_999)),
    ));
    out.push((
        "unknown member at depth 10000",
        format!("{{\"x\":{},{body}", nest(10_000)),
    ));
    out.push((
        "checksum a string",
        file.replacen(&format!("\"checksum\":{legacy}"), "\"checksum\":\"1\"", 1),
    ));
    out.push((
        "entries null",
        file.replacen("\"entries\":{", "\"entries\":null,\"e\":{", 1),
    ));
    out.push(("trailing garbage", format!("{file} x")));
    out.push(("null", "null".into()));
    out
}

/// What the kubelet runs with, as comparable JSON; `None` when it refuses the file.
fn ours(text: &str) -> Option<Value> {
    let c = cpu_checkpoint::parse(text).ok()?;
    if matches!(c.checksum_check, ChecksumCheck::Mismatch { .. }) {
        return None;
    }
    let entries: BTreeMap<String, BTreeMap<String, String>> = c
        .entries
        .iter()
        .map(|(u, cs)| {
            (
                u.clone(),
                cs.iter().map(|(n, s)| (n.clone(), s.to_string())).collect(),
            )
        })
        .collect();
    Some(
        json!({"policyName": c.policy_name, "defaultCpuSet": c.default_cpu_set.to_string(), "entries": entries}),
    )
}

fn theirs(answer: &Value) -> Option<Value> {
    (answer["ok"] == json!(true)).then(|| {
        // The answer omits empty strings.
        let text = |k: &str| answer[k].as_str().unwrap_or_default().to_string();
        json!({"policyName": text("policyName"), "defaultCpuSet": text("defaultCpuSet"), "entries": answer["entries"]})
    })
}

#[test]
fn reads_as_the_kubelet_restores_and_writes_its_bytes() {
    let Some(bin) = oracle_or_skip() else { return };
    let mut r = SplitMix(0x5eed_c0de);
    let states: Vec<Value> = (0..60).map(|_| random_state(&mut r)).collect();
    let writes: Vec<Value> = states
        .iter()
        .flat_map(|s| {
            [2, 3, 4].map(|version| {
                let mut w = s.clone();
                w["op"] = json!("write-cpu");
                w["version"] = json!(version);
                w
            })
        })
        .collect();
    let files = ask(&bin, &writes);

    // Our writer: the kubelet's bytes wherever there are no pod entries.
    let mut rendered = 0;
    for (w, f) in writes.iter().zip(&files) {
        assert_eq!(f["ok"], json!(true), "{w}: {f}");
        if w["podEntries"].as_object().is_some_and(|p| !p.is_empty()) {
            continue;
        }
        let mut st = CpuState {
            default_cpuset: CpuSet::parse(w["defaultCpuSet"].as_str().unwrap()).unwrap(),
            ..Default::default()
        };
        for (uid, cs) in w["entries"].as_object().unwrap() {
            for (name, set) in cs.as_object().unwrap() {
                st.set(uid, name, CpuSet::parse(set.as_str().unwrap()).unwrap());
            }
        }
        let state = KubeletCpuState {
            policy_name: w["policyName"].as_str().unwrap().into(),
            state: st,
        };
        let format = match w["version"].as_u64() {
            Some(2) => CheckpointFormat::V2,
            Some(3) => CheckpointFormat::V3,
            _ => CheckpointFormat::V4,
        };
        // The generator spells every CPU set canonically, as the kubelet writes them.
        let text = cpu_checkpoint::render(&state, format);
        assert_eq!(text, f["file"].as_str().unwrap(), "{w}");
        rendered += 1;
    }

    // Our reader: the kubelet's verdict and state on every file and variant.
    let mut cases = Vec::new();
    for f in &files {
        for (what, text) in variants(f["file"].as_str().unwrap()) {
            cases.push((what, text));
        }
    }
    let reads: Vec<Value> = cases
        .iter()
        .map(|(_, t)| json!({"op": "read-cpu", "file": t}))
        .collect();
    let answers = ask(&bin, &reads);
    let (mut accepted, mut refused) = (0, 0);
    let mut per_variant: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((what, text), a) in cases.iter().zip(&answers) {
        let (k, o) = (theirs(a), ours(text));
        let shown: String = text.chars().take(400).collect();
        assert_eq!(o, k, "{what}: {shown}\nkubelet: {a}");
        let e = per_variant.entry(what).or_default();
        if k.is_some() {
            accepted += 1;
            e.0 += 1;
        } else {
            refused += 1;
            e.1 += 1;
        }
    }
    eprintln!(
        "checkpoint oracle: {} files written by the kubelet ({rendered} byte-identical renders), {} reads compared: {accepted} accepted, {refused} refused; per variant (accepted, refused): {per_variant:?}",
        files.len(),
        cases.len()
    );
    assert!(rendered > 30 && accepted > 100 && refused > 100);
}
