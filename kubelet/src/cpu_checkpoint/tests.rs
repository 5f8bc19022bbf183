use super::*;

/// Files written by the kubelet's own code (see `file_tests.rs`: v1.37.2's `NewCheckpointState` for 1.37, its
/// `CPUManagerCheckpointV2/V3.MarshalCheckpoint` for the others).
fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/kubelet-state")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sample() -> KubeletCpuState {
    let mut st = CpuState {
        default_cpuset: CpuSet::parse("0-1,6-7").unwrap(),
        ..Default::default()
    };
    st.set("uid-a", "app", CpuSet::parse("2-5").unwrap());
    KubeletCpuState {
        policy_name: "static".into(),
        state: st,
    }
}

#[test]
fn reads_every_kubelets_file_as_the_kubelet_does() {
    let cases = [
        ("cpu_manager_state.v1.34", CheckpointFormat::V2, "static", 1),
        (
            "cpu_manager_state.v1.35-none",
            CheckpointFormat::V2,
            "none",
            0,
        ),
        ("cpu_manager_state.v1.36", CheckpointFormat::V2, "static", 2),
        // The planner's former reader refused this file (its v3 checksum).
        ("cpu_manager_state.v3", CheckpointFormat::V3, "static", 1),
        ("cpu_manager_state.v1.37", CheckpointFormat::V4, "static", 2),
    ];
    for (name, format, policy, pods) in cases {
        let s = parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.format, format, "{name}");
        assert_eq!(s.checksum_check, ChecksumCheck::Verified, "{name}");
        assert_eq!(s.policy_name, policy, "{name}");
        assert_eq!(s.entries.len(), pods, "{name}");
        assert!(s.engine_state().is_ok(), "{name}");
    }
    let s = parse(&fixture("cpu_manager_state.v1.37")).unwrap();
    let web = &s.entries["7f1c0a2e-4444-4a4a-9c9c-000000000004"];
    assert_eq!(web["app"].to_string(), "2-3,6-7");
    assert_eq!(s.default_cpu_set.to_string(), "0,4,9-11,13-15");
}

#[test]
fn v4_trusts_data_alone_and_ignores_the_legacy_view() {
    let text = fixture("cpu_manager_state.v1.37");
    // The legacy copy changed (its checksum now wrong): the kubelet 1.37 runs with data.
    let tampered = text.replacen("\"db\":\"8,12\"", "\"db\":\"8,14\"", 1);
    assert_ne!(tampered, text);
    let s = parse(&tampered).expect("the kubelet accepts it");
    assert_eq!(s.checksum_check, ChecksumCheck::Verified);
    assert_eq!(
        s.entries["7f1c0a2e-5555-4a4a-9c9c-000000000005"]["db"].to_string(),
        "8,12"
    );
    // A legacy checksum alone wrong: accepted.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let legacy = v["checksum"].as_u64().unwrap();
    let tampered = text.replacen(&format!("\"checksum\":{legacy}"), "\"checksum\":1", 1);
    assert_ne!(tampered, text);
    assert_eq!(
        parse(&tampered).unwrap().checksum_check,
        ChecksumCheck::Verified
    );
}

#[test]
fn a_changed_byte_in_what_the_kubelet_verifies_is_a_mismatch() {
    let text = fixture("cpu_manager_state.v1.34").replace("\"app\":\"2-5\"", "\"app\":\"2-6\"");
    let s = parse(&text).unwrap();
    assert!(matches!(
        s.checksum_check,
        ChecksumCheck::Mismatch {
            field: "checksum",
            ..
        }
    ));
    assert!(s.engine_state().unwrap_err().contains("would refuse"));
    let text = fixture("cpu_manager_state.v1.37").replacen(
        "\\\"db\\\":\\\"8,12\\\"",
        "\\\"db\\\":\\\"8,13\\\"",
        1,
    );
    let s = parse(&text).unwrap();
    assert!(matches!(
        s.checksum_check,
        ChecksumCheck::Mismatch {
            field: "dataChecksum",
            ..
        }
    ));
}

#[test]
fn v4_with_data_set_never_falls_back() {
    let e = parse(
        r#"{"policyName":"none","defaultCpuSet":"","checksum":0,"data":"{","dataChecksum":0}"#,
    )
    .unwrap_err();
    assert!(e.contains("could not load v4 checkpoint"), "{e}");
    // Neither set: v2 with a zero checksum.
    let s = parse(
        r#"{"policyName":"none","defaultCpuSet":"0-3","checksum":0,"data":"","dataChecksum":0}"#,
    )
    .unwrap();
    assert_eq!(
        (s.format, s.checksum_check),
        (CheckpointFormat::V2, ChecksumCheck::NotRecorded)
    );
}

#[test]
fn nesting_deeper_than_go_allows_is_refused_shallower_is_skipped() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let ok = format!(
        r#"{{"x":{},"policyName":"none","defaultCpuSet":"0-3","checksum":0}}"#,
        nest(9_999)
    );
    assert_eq!(parse(&ok).unwrap().policy_name, "none");
    let deep = ok.replace(&nest(9_999), &nest(10_000));
    assert_eq!(parse(&deep).unwrap_err(), "exceeded max depth");
}

#[test]
fn a_repeated_key_takes_the_last_value() {
    let s =
        parse(r#"{"policyName":"static","policyName":"none","defaultCpuSet":"0-3","checksum":0}"#)
            .unwrap();
    assert_eq!(s.policy_name, "none");
}

#[test]
fn render_then_parse_round_trips_in_every_format() {
    for f in [
        CheckpointFormat::V2,
        CheckpointFormat::V3,
        CheckpointFormat::V4,
    ] {
        let text = render(&sample(), f);
        let back = parse(&text).unwrap();
        assert_eq!(back.engine_state().unwrap(), sample(), "{f:?}: {text}");
        assert_eq!(
            (back.format, back.checksum_check),
            (f, ChecksumCheck::Verified),
            "{text}"
        );
    }
}

#[test]
fn pod_entries_are_read_and_refused_by_the_planner() {
    let s = parse(&fixture("cpu_manager_state.v3")).unwrap();
    assert!(s.pod_entries.is_empty());
    let e = parse(r#"{"policyName":"static","defaultCpuSet":"0-3","podEntries":{"u":{"cpuSet":"x"}},"checksum":0}"#)
        .unwrap();
    // The v3 load fails (bad cpuSet, zero checksum): v2, which has no podEntries.
    assert_eq!(e.format, CheckpointFormat::V2);
}

/// A checkpoint of `n` pods with one container each on `cpus`, as the kubelet writes it.
fn many(n: usize, cpus: &str, format: CheckpointFormat) -> String {
    let mut st = CpuState {
        default_cpuset: CpuSet::parse("0").unwrap(),
        ..Default::default()
    };
    let set = CpuSet::parse(cpus).unwrap();
    for i in 0..n {
        st.set(&format!("p{i}"), "c", set.clone());
    }
    render(
        &KubeletCpuState {
            policy_name: "static".into(),
            state: st,
        },
        format,
    )
}

#[test]
fn hostile_sizes_are_refused_before_they_are_decoded() {
    // At the limit: read (v2 and v4, whose text holds the entries twice).
    for format in [CheckpointFormat::V2, CheckpointFormat::V4] {
        let c = parse(&many(MAX_ENTRIES, "1", format)).unwrap();
        assert_eq!(c.entries.len(), MAX_ENTRIES);
    }
    // One more entry than CPUs Linux can run: refused, naming the limit.
    let e = parse(&many(MAX_ENTRIES + 1, "1", CheckpointFormat::V2)).unwrap_err();
    assert!(
        e.contains("8193 container entries, more than the 8192"),
        "{e}"
    );
    // A flood of tiny entries is refused by the member count, before any map is built.
    let flood = many(20_000, "1", CheckpointFormat::V4);
    let e = parse(&flood).unwrap_err();
    assert!(e.contains("JSON members, more than the 32832"), "{e}");
    // A CPU id past Linux's largest NR_CPUS (each set is a bitmap up to its highest id).
    let e = parse(&many(2, "1048575", CheckpointFormat::V2)).unwrap_err();
    assert!(
        e.contains("CPU 1048575 is above the largest CPU id nodetopo reads (8191"),
        "{e}"
    );
    assert!(parse(&many(2, "8191", CheckpointFormat::V2)).is_ok());
}
