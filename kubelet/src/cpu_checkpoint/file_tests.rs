//! The file-level reader ([`parse_file`], [`read`]): errors name the file, and files the
//! kubelet's own code wrote (the kept fixtures, and new ones from `e2e/kubelet-oracle`)
//! verify and hold the kubelet's assignments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::gohash::data_checksum;

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
fn zero_checksum_is_accepted_unverified_as_the_kubelet_does() {
    let s = parse_file(
        Path::new("/k/cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"u1":{"app":"2-5"}},"checksum":0}"#,
    )
    .expect("valid");
    assert_eq!(s.checksum_check, ChecksumCheck::NotRecorded);
    assert_eq!(s.entries["u1"]["app"].to_string(), "2-5");
}

#[test]
fn the_data_checksum_of_a_kubelet_file_matches_the_kubelet() {
    // The value kubelet v1.37.2 wrote (dump.ForHash + hash/fnv).
    let (_, text) = fixture("cpu_manager_state.v1.37");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let data = v["data"].as_str().expect("data");
    assert_eq!(
        u64::from(data_checksum(data)),
        v["dataChecksum"].as_u64().expect("n")
    );
}

#[test]
fn errors_name_file_and_field() {
    let p = Path::new("/k/cpu_manager_state");
    let e = parse_file(
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
    let e = parse_file(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"cid":"2-3"},"checksum":1}"#,
    )
    .expect_err("v1");
    assert!(e.to_string().contains("entries"), "{e}");
    let e = parse_file(p, "{\"policyName\":\"sta").expect_err("truncated");
    assert!(e.to_string().contains("/k/cpu_manager_state"), "{e}");
    let e = parse_file(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"x\"}","dataChecksum":1}"#,
    )
    .expect_err("bad data set");
    assert!(e.to_string().contains("data.defaultCpuSet"), "{e}");
    // Unknown members are skipped, as Go's encoding/json does.
    let s = parse_file(
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
    assert!(matches!(e, ReadError::Io { .. }), "{e}");
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
        let s = parse_file(&path, text).unwrap_or_else(|e| panic!("{e}: {text}"));
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
