use super::*;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;
const POD: &str = "6f2c1d0e-0000-4000-8000-000000000002";
const CONTAINER_POD: &str = "6f2c1d0e-0000-4000-8000-000000000001";

#[test]
fn reads_the_files_the_kubelets_code_writes() {
    for (name, format, pods) in [
        ("memory_manager_state.v1", MemoryCheckpointFormat::V1, 0),
        ("memory_manager_state.v2", MemoryCheckpointFormat::V2, 1),
        ("memory_manager_state.v3", MemoryCheckpointFormat::V3, 1),
    ] {
        let c = parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.format, format, "{name}");
        assert_eq!(c.checksum_check, ChecksumCheck::Verified, "{name}");
        let s = c.trusted().unwrap();
        assert_eq!(s.policy_name, "Static");
        assert_eq!(s.pod_level_blocks().len(), pods, "{name}");
        let blocks = s.entries.as_ref().unwrap()[CONTAINER_POD].as_ref().unwrap()["app"]
            .as_ref()
            .unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].size, 4 * GI);
        let t = s.tables().unwrap();
        let mem = t[&0][&MemoryResource::Memory];
        assert_eq!((mem.total, mem.reserved), (64 * GI, 4 * GI));
        assert_eq!(mem.free + mem.reserved, mem.allocatable);
        let huge = t[&0][&MemoryResource::HugePages { page_bytes: 2 * MI }];
        assert_eq!((huge.total, huge.reserved), (GI, 256 * MI));
        // The pod-level allocation is counted in node 1's table.
        assert_eq!(t[&1][&MemoryResource::Memory].reserved, 2 * GI);
        if pods == 1 {
            assert_eq!(s.pod_level_blocks()[POD][0].size, 2 * GI);
        }
    }
}

#[test]
fn renders_the_kubelets_bytes() {
    let v3 = parse(&fixture("memory_manager_state.v3")).unwrap();
    for (name, format) in [
        ("memory_manager_state.v1", MemoryCheckpointFormat::V1),
        ("memory_manager_state.v2", MemoryCheckpointFormat::V2),
        ("memory_manager_state.v3", MemoryCheckpointFormat::V3),
    ] {
        assert_eq!(render(&v3.state, format), fixture(name), "{name}");
    }
}

fn replace_json(text: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    f(&mut v);
    v.to_string()
}

#[test]
fn v3_trusts_data_and_its_checksum_alone() {
    let file = fixture("memory_manager_state.v3");
    // The legacy view and its checksum differ from data: data wins, no complaint.
    let other = replace_json(&file, |v| {
        v["checksum"] = 1.into();
        v["policyName"] = "None".into();
        v["machineState"] = serde_json::json!({});
    });
    let c = parse(&other).unwrap();
    assert_eq!(c.checksum_check, ChecksumCheck::Verified);
    assert_eq!(c.state.policy_name, "Static");
    assert_eq!(c.state.tables().unwrap().len(), 2);
    // A wrong dataChecksum: the kubelet refuses (and does not fall back to the v1 fields).
    let bad = replace_json(&file, |v| {
        let dc = v["dataChecksum"].as_u64().unwrap();
        v["dataChecksum"] = (dc + 1).into();
    });
    let c = parse(&bad).unwrap();
    assert_eq!(c.format, MemoryCheckpointFormat::V3);
    assert!(matches!(
        c.checksum_check,
        ChecksumCheck::Mismatch {
            field: "dataChecksum",
            ..
        }
    ));
    let e = c.trusted().unwrap_err();
    assert!(e.contains("dataChecksum") && e.contains("refuse"), "{e}");
    // data that does not decode is final too.
    let broken = replace_json(&file, |v| v["data"] = "{\"machineState\":5}".into());
    let e = parse(&broken).unwrap_err();
    assert!(
        e.starts_with("could not load v3 checkpoint: data.machineState"),
        "{e}"
    );
    // dataChecksum alone set: no fallback either.
    let e = parse(&replace_json(&file, |v| v["data"] = "".into())).unwrap_err();
    assert!(e.starts_with("could not load v3 checkpoint: data"), "{e}");
}

#[test]
fn without_data_the_kubelet_falls_back_to_v2_then_v1() {
    let v3 = fixture("memory_manager_state.v3");
    // The v1 view of a v3 file, without data: a v1 file with a good checksum.
    let v1_view = replace_json(&v3, |v| {
        let o = v.as_object_mut().unwrap();
        o.remove("data");
        o.remove("dataChecksum");
    });
    let c = parse(&v1_view).unwrap();
    assert_eq!(
        (c.format, c.checksum_check.clone()),
        (MemoryCheckpointFormat::V1, ChecksumCheck::Verified)
    );
    // A v2 file whose checksum is 0 loads as v1, unverified, without its pod entries.
    let v2 = replace_json(&fixture("memory_manager_state.v2"), |v| {
        v["checksum"] = 0.into()
    });
    let c = parse(&v2).unwrap();
    assert_eq!(
        (c.format, c.checksum_check.clone()),
        (MemoryCheckpointFormat::V1, ChecksumCheck::NotRecorded)
    );
    assert!(c.state.pod_level_blocks().is_empty());
    // A v2 file with a wrong checksum: v1's verdict, a mismatch.
    let v2 = replace_json(&fixture("memory_manager_state.v2"), |v| {
        v["checksum"] = 7.into()
    });
    let c = parse(&v2).unwrap();
    assert!(matches!(
        c.checksum_check,
        ChecksumCheck::Mismatch {
            field: "checksum",
            recorded: 7,
            ..
        }
    ));
}

#[test]
fn go_json_rules_apply() {
    let v1 = fixture("memory_manager_state.v1");
    // A repeated top-level key takes the last value (and breaks the checksum here).
    let body = &v1[1..];
    let c = parse(&format!("{{\"policyName\":\"None\",{body}")).unwrap();
    assert_eq!(c.state.policy_name, "Static");
    assert_eq!(c.checksum_check, ChecksumCheck::Verified);
    // Case-folded keys name the field.
    let c = parse(&v1.replacen("\"policyName\"", "\"POLICYNAME\"", 1)).unwrap();
    assert_eq!(c.state.policy_name, "Static");
    // Nesting over Go's limit is refused however deep the fields read are.
    let n = crate::gojson::GO_MAX_DEPTH;
    let deep = format!("{{\"x\":{}{},{body}", "[".repeat(n), "]".repeat(n));
    assert_eq!(parse(&deep).unwrap_err(), "exceeded max depth");
    let ok = format!("{{\"x\":{}{},{body}", "[".repeat(n - 1), "]".repeat(n - 1));
    assert!(parse(&ok).is_ok());
}

#[test]
fn hostile_values_are_refused_with_the_field_named() {
    let v1 = fixture("memory_manager_state.v1");
    let cases: [(&str, String, &str); 6] = [
        (
            "negative size",
            v1.replacen("\"size\":4294967296", "\"size\":-1", 1),
            "entries[",
        ),
        (
            "fractional int",
            v1.replacen(
                "\"numberOfAssignments\":2",
                "\"numberOfAssignments\":2.0",
                1,
            ),
            "numberOfAssignments: 2.0 is not",
        ),
        (
            "a NUMA id that is no integer",
            v1.replacen(
                "\"0\":{\"numberOfAssignments\"",
                "\"zero\":{\"numberOfAssignments\"",
                1,
            ),
            "machineState[\"zero\"]: the key is not an integer",
        ),
        (
            "a list where an object goes",
            v1.replacen("\"cells\":[0]", "\"cells\":{}", 1),
            "cells: {} is not a list",
        ),
        ("not an object", "[1]".to_string(), "invalid type"),
        ("trailing garbage", format!("{v1} x"), "trailing"),
    ];
    for (what, text, needle) in cases {
        assert_ne!(text, v1, "{what}: the edit applied");
        let e = parse(&text).unwrap_err();
        assert!(e.contains(needle), "{what}: {e}");
    }
    // A null memory table: the kubelet crashes restoring it; refused here.
    let null_table = v1.replacen(
        "\"hugepages-2Mi\":{\"total\":1073741824,\"systemReserved\":0,\"allocatable\":1073741824,\"reserved\":268435456,\"free\":805306368}",
        "\"hugepages-2Mi\":null",
        1,
    );
    assert_ne!(null_table, v1);
    let e = parse(&null_table).unwrap_err();
    assert!(e.contains("memoryMap[\"hugepages-2Mi\"] is null"), "{e}");
    // A huge value is cut in the message.
    let long = v1.replacen(
        "\"size\":4294967296",
        &format!("\"size\":\"{}\"", "9".repeat(100_000)),
        1,
    );
    let e = parse(&long).unwrap_err();
    assert!(e.len() < 300, "{}", e.len());
}

#[test]
fn tables_refuse_what_cannot_be_a_memory_managers_table() {
    let mut s = parse(&fixture("memory_manager_state.v3")).unwrap().state;
    let mut bad = s.clone();
    bad.machine_state
        .as_mut()
        .unwrap()
        .insert(-1, Some(NumaNodeState::default()));
    assert!(bad
        .tables()
        .unwrap_err()
        .contains("-1 is not a NUMA node id"));
    let mut bad = s.clone();
    bad.machine_state.as_mut().unwrap().insert(2, None);
    assert!(bad
        .tables()
        .unwrap_err()
        .contains("machineState[2] is null"));
    let node = s
        .machine_state
        .as_mut()
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .as_mut()
        .unwrap();
    let t = node
        .memory_map
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .as_mut()
        .unwrap();
    t.free += 1;
    assert!(s.tables().unwrap_err().contains("do not add up"));
}

#[test]
fn the_file_read_is_bounded_and_absent_is_none() {
    let dir = tempfile::tempdir().unwrap();
    assert!(read(&dir.path().join("memory_manager_state"))
        .unwrap()
        .is_none());
    let big = dir.path().join("big");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_BYTES + 1).unwrap();
    let e = read(&big).unwrap_err().to_string();
    assert!(e.contains(&big.display().to_string()), "{e}");
    // A directory in its place is an error, not a hang or a panic.
    assert!(read(dir.path()).is_err());
    let ok = dir.path().join("ok");
    std::fs::write(&ok, fixture("memory_manager_state.v2")).unwrap();
    assert_eq!(
        read(&ok).unwrap().unwrap().format,
        MemoryCheckpointFormat::V2
    );
    std::fs::write(&ok, "{").unwrap();
    let e = read(&ok).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("kubelet Memory Manager state {}", ok.display())),
        "{e}"
    );
}
