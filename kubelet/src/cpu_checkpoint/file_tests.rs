use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_kubelet::gohash::{data_checksum, fnv32a};

use super::*;

/// Checkpoint files kept in the tests, one per supported kubelet. The 1.37 file was
/// written by kubelet v1.37.2's own checkpoint state (`state.NewCheckpointState`, through
/// `e2e/kubelet-oracle` admitting two pods); the 1.34-1.36 files by v1.37.2's
/// `CPUManagerCheckpointV2.MarshalCheckpoint`, which keeps the legacy struct name so its
/// output is byte-identical to what 1.34-1.36 write (those kubelets were not run here);
/// the v3 file by `CPUManagerCheckpointV3.MarshalCheckpoint`.
fn fixture(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kubelet-state")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    (path, text)
}

#[test]
fn reads_every_supported_kubelets_file_and_verifies_its_checksum() {
    let cases = [
        ("cpu_manager_state.v1.34", CheckpointFormat::V2, "static", 1),
        (
            "cpu_manager_state.v1.35-none",
            CheckpointFormat::V2,
            "none",
            0,
        ),
        ("cpu_manager_state.v1.36", CheckpointFormat::V2, "static", 2),
        ("cpu_manager_state.v3", CheckpointFormat::V3, "static", 1),
        ("cpu_manager_state.v1.37", CheckpointFormat::V4, "static", 2),
    ];
    for (name, format, policy, pods) in cases {
        let (path, text) = fixture(name);
        let s = parse(&path, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.format, format, "{name}");
        assert_eq!(s.checksum_check, ChecksumCheck::Verified, "{name}");
        assert_eq!(s.policy_name, policy, "{name}");
        assert_eq!(s.entries.len(), pods, "{name}");
    }
    let (path, text) = fixture("cpu_manager_state.v1.37");
    let s = parse(&path, &text).expect("1.37");
    let web = &s.entries["7f1c0a2e-4444-4a4a-9c9c-000000000004"];
    assert_eq!(web["app"].to_string(), "2-3,6-7");
    assert_eq!(web["proxy"].to_string(), "1,5");
    assert_eq!(s.default_cpu_set.to_string(), "0,4,9-11,13-15");
}

#[test]
fn a_changed_byte_is_a_checksum_mismatch_not_a_silent_read() {
    // v2: one CPU changed, checksum kept.
    let (path, text) = fixture("cpu_manager_state.v1.34");
    let tampered = text.replace("\"app\":\"2-5\"", "\"app\":\"2-6\"");
    assert_ne!(tampered, text);
    let s = parse(&path, &tampered).expect("still parses");
    assert!(
        matches!(
            s.checksum_check,
            ChecksumCheck::Mismatch {
                field: "checksum",
                ..
            }
        ),
        "{:?}",
        s.checksum_check
    );
    // v4: the authoritative data changed.
    let (path, text) = fixture("cpu_manager_state.v1.37");
    let tampered = text.replacen("\\\"db\\\":\\\"8,12\\\"", "\\\"db\\\":\\\"8,13\\\"", 1);
    assert_ne!(tampered, text);
    let s = parse(&path, &tampered).expect("still parses");
    assert!(
        matches!(
            s.checksum_check,
            ChecksumCheck::Mismatch {
                field: "dataChecksum",
                ..
            }
        ),
        "{:?}",
        s.checksum_check
    );
    assert_eq!(
        s.entries["7f1c0a2e-5555-4a4a-9c9c-000000000005"]["db"].to_string(),
        "8,13"
    );
    // v4: the embedded v2 copy changed: kubelet 1.37 verifies only dataChecksum and runs
    // with data, so the file is accepted with data's view.
    let tampered = text.replacen("\"db\":\"8,12\"", "\"db\":\"8,14\"", 1);
    assert_ne!(tampered, text);
    let s = parse(&path, &tampered).expect("still parses");
    assert_eq!(s.checksum_check, ChecksumCheck::Verified);
    assert_eq!(
        s.entries["7f1c0a2e-5555-4a4a-9c9c-000000000005"]["db"].to_string(),
        "8,12"
    );
}

#[test]
fn zero_checksum_is_accepted_unverified_as_the_kubelet_does() {
    let s = parse(
        Path::new("/k/cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"u1":{"app":"2-5"}},"checksum":0}"#,
    )
    .expect("valid");
    assert_eq!(s.checksum_check, ChecksumCheck::NotRecorded);
    assert_eq!(s.entries["u1"]["app"].to_string(), "2-5");
}

#[test]
fn go_print_and_fnv_match_the_kubelet() {
    // Known values from kubelet v1.37.2 (dump.ForHash + hash/fnv).
    assert_eq!(fnv32a(b""), 0x811c_9dc5);
    let (_, text) = fixture("cpu_manager_state.v1.37");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let data = v["data"].as_str().expect("data");
    assert_eq!(
        u64::from(data_checksum(data)),
        v["dataChecksum"].as_u64().expect("n")
    );
    let mut e = BTreeMap::<String, BTreeMap<String, String>>::new();
    e.insert(
        "u2".into(),
        [("b".into(), "3".into()), ("a".into(), "2-5".into())].into(),
    );
    e.insert("u1".into(), [("x".into(), "7".into())].into());
    assert_eq!(
        nodetopo_kubelet::gohash::go_print_string_maps(Some(&e)),
        "map[u1:map[x:7] u2:map[a:2-5 b:3]]"
    );
    assert_eq!(
        nodetopo_kubelet::gohash::go_print_string_maps(None),
        "<nil>"
    );
}

#[test]
fn errors_name_file_and_field() {
    let p = Path::new("/k/cpu_manager_state");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u1":{"app":"5-2"}},"checksum":0}"#,
    )
    .expect_err("bad set");
    let msg = e.to_string();
    assert!(
        msg.starts_with("kubelet CPU manager state /k/cpu_manager_state: could not parse cpuset \"5-2\" for container \"app\" in pod \"u1\""),
        "{msg}"
    );
    // v1 (entries keyed by container ID): not a map of containers, refused.
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"cid":"2-3"},"checksum":1}"#,
    )
    .expect_err("v1");
    assert!(e.to_string().contains("entries"), "{e}");
    let e = parse(p, "{\"policyName\":\"sta").expect_err("truncated");
    assert!(e.to_string().contains("/k/cpu_manager_state"), "{e}");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"x\"}","dataChecksum":1}"#,
    )
    .expect_err("bad data set");
    assert!(e.to_string().contains("data.defaultCpuSet"), "{e}");
    // Unknown members are skipped, as Go's encoding/json does.
    let s = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":0,"surprise":1}"#,
    )
    .expect("unknown member");
    assert_eq!(s.checksum_check, ChecksumCheck::NotRecorded);
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(read(&dir.path().join("absent"))
        .expect("absent ok")
        .is_none());
    // A directory where the file should be: unreadable, an error naming the path.
    let e = read(dir.path()).expect_err("unreadable");
    assert!(matches!(e, KubeletStateError::Io { .. }), "{e}");
}

/// Files written by kubelet v1.37.2's checkpoint code for random pod sets (through
/// `e2e/kubelet-oracle`): each must parse, verify, and hold exactly the assignments the
/// kubelet reported. Skips, saying why, without Go (fails with NODETOPO_REQUIRE_ORACLE=1).
#[test]
fn files_written_by_the_kubelet_verify_and_match_its_state() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let Some(bin) = nodetopo_testkit::go_tool_or_skip(
        "e2e/kubelet-oracle/build.sh",
        "the kubelet oracle (checkpoint files)",
    ) else {
        return;
    };
    // A 2-socket, 16-CPU machine with SMT; random pods (sidecars, init containers,
    // removals) under a few option sets.
    let mut cpus = Vec::new();
    for id in 0..16usize {
        let core = id % 8;
        let node = core / 4;
        cpus.push(format!("[{id},{core},{node},{node},{node}]"));
    }
    let machine = format!(
        r#"{{"cpus":[{}],"numa":[{{"id":0,"distances":[10,21]}},{{"id":1,"distances":[21,10]}}]}}"#,
        cpus.join(",")
    );
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut cases = Vec::new();
    for i in 0..300 {
        let mut ops = Vec::new();
        for p in 0..(1 + next(5)) {
            let ct = |name: &str, cpu: u64, restartable: bool| {
                format!(
                    r#"{{"name":"{name}","requests":{{"cpu":"{cpu}","memory":"1Gi"}},"limits":{{"cpu":"{cpu}","memory":"1Gi"}},"restartable":{restartable}}}"#
                )
            };
            let init = if next(2) == 0 {
                format!(",\"init\":[{}]", ct("init", 1 + next(4), next(2) == 0))
            } else {
                String::new()
            };
            ops.push(format!(
                r#"{{"op":"admit","pod":{{"uid":"uid-{i}-{p}","name":"p{p}"{init},"containers":[{},{}]}}}}"#,
                ct("app", 1 + next(4), false),
                ct("helper", 1 + next(2), false)
            ));
            if next(4) == 0 {
                ops.push(format!(r#"{{"op":"remove","uid":"uid-{i}-{p}"}}"#));
            }
        }
        let options = [
            "{}",
            r#"{"full-pcpus-only":"true"}"#,
            r#"{"strict-cpu-reservation":"true"}"#,
        ][next(3) as usize];
        cases.push(format!(
            r#"{{"id":"ck{i}","machine":{machine},"cpuOptions":{options},"numReserved":{},"tmPolicy":"single-numa-node","tmScope":"container","ops":[{}],"checkpoint":true}}"#,
            1 + next(2),
            ops.join(",")
        ));
    }
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = cases.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut verified = 0;
    for line in stdout.lines() {
        let line = line.expect("oracle output");
        let a: serde_json::Value = serde_json::from_str(&line).expect("answer");
        assert!(
            a.get("error").is_none() && a.get("timeout").is_none(),
            "{line}"
        );
        let text = a["checkpoint"].as_str().expect("checkpoint text");
        let path = PathBuf::from(format!("/oracle/{}", a["id"]));
        let s = parse(&path, text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(s.format, CheckpointFormat::V4);
        assert_eq!(s.checksum_check, ChecksumCheck::Verified, "{text}");
        assert_eq!(
            s.default_cpu_set.to_string(),
            a["defaultCPUSet"].as_str().expect("d")
        );
        let mut want = BTreeMap::new();
        for (uid, cs) in a["assignments"].as_object().into_iter().flatten() {
            let mut m = BTreeMap::new();
            for (c, v) in cs.as_object().into_iter().flatten() {
                m.insert(c.clone(), v.as_str().expect("set").to_string());
            }
            if !m.is_empty() {
                want.insert(uid.clone(), m);
            }
        }
        let got: BTreeMap<String, BTreeMap<String, String>> = s
            .entries
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(u, m)| {
                (
                    u.clone(),
                    m.iter().map(|(c, v)| (c.clone(), v.to_string())).collect(),
                )
            })
            .collect();
        assert_eq!(got, want, "{text}");
        verified += 1;
    }
    writer.join().expect("writer").expect("write cases");
    let _ = child.wait();
    assert_eq!(verified, cases.len());
    eprintln!("kubelet checkpoint files: {verified} written by kubelet v1.37.2 code, all verified");
}
