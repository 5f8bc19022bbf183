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
    // v4: the embedded v2 copy changed (an older kubelet would refuse the file).
    let tampered = text.replacen("\"db\":\"8,12\"", "\"db\":\"8,14\"", 1);
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
    let mut e = RawEntries::new();
    e.insert(
        "u2".into(),
        [("b".into(), "3".into()), ("a".into(), "2-5".into())].into(),
    );
    e.insert("u1".into(), [("x".into(), "7".into())].into());
    assert_eq!(
        go_print_entries(Some(&e)),
        "map[u1:map[x:7] u2:map[a:2-5 b:3]]"
    );
    assert_eq!(go_print_entries(None), "<nil>");
}

#[test]
fn errors_name_file_and_field() {
    let p = Path::new("/k/cpu_manager_state");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u1":{"app":"5-2"}},"checksum":1}"#,
    )
    .expect_err("bad set");
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "kubelet CPU manager state /k/cpu_manager_state: entries[\"u1\"][\"app\"] \"5-2\""
        ),
        "{msg}"
    );
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"cid":"2-3"},"checksum":1}"#,
    )
    .expect_err("v1");
    assert!(e.to_string().contains("v1 is not supported"), "{e}");
    let e = parse(p, "{\"policyName\":\"sta").expect_err("truncated");
    assert!(e.to_string().contains("/k/cpu_manager_state"), "{e}");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"data":"{}"}"#,
    )
    .expect_err("data without checksum");
    assert!(e.to_string().contains("data without dataChecksum"), "{e}");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"x\"}","dataChecksum":1}"#,
    )
    .expect_err("bad data set");
    assert!(e.to_string().contains("data.defaultCpuSet \"x\""), "{e}");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"data":"{\"policyName\":\"none\",\"defaultCpuSet\":\"0\"}","dataChecksum":1}"#,
    )
    .expect_err("policy differs");
    assert!(e.to_string().contains("data.policyName"), "{e}");
    let e = parse(
        p,
        r#"{"policyName":"static","defaultCpuSet":"0","checksum":1,"surprise":1}"#,
    )
    .expect_err("unknown field");
    assert!(e.to_string().contains("surprise"), "{e}");
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(read(&dir.path().join("absent"))
        .expect("absent ok")
        .is_none());
    // A directory where the file should be: unreadable, an error naming the path.
    let e = read(dir.path()).expect_err("unreadable");
    assert!(matches!(e, KubeletStateError::Io { .. }), "{e}");
}
