//! Runs every case of the vendored `topologymanager-*.json` vector files (kubelet unit-test
//! tables) through the engine, merge cases through both the reference and the product merge.

use std::path::Path;

use nodetopo_engine::conformance::topologymanager::evaluate;

#[test]
fn every_topologymanager_vector_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("vectors directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("topologymanager-") && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        3,
        "expected the three topologymanager vector files"
    );
    let mut total = 0;
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(f).expect("read vector file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("vector JSON");
        let results = evaluate(&name, &json).unwrap_or_else(|e| panic!("{e}"));
        println!("{name}: {} cases", results.len());
        total += results.len();
        for r in results {
            if let Some(why) = r.failure {
                failures.push(format!("{name}: {}: {why}", r.case));
            }
        }
    }
    println!(
        "{total} topology-manager vector cases, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // 161+5+7+25+9 merge, 6+5+13+23+16 numa-distance, 71 bitmask.
    assert_eq!(total, 341);
}

/// Merge cases in the vector schema are accepted at any node count up to 64 (the kubelet's
/// tables stop at 8), with non-contiguous ids.
#[test]
fn merge_cases_beyond_eight_nodes() {
    let all: Vec<usize> = (0..64).collect();
    let case = |providers: serde_json::Value, expect: serde_json::Value, admit: bool| {
        serde_json::json!({
            "name": "64 nodes", "policy": "restricted", "numa_nodes": all,
            "options": {"prefer-closest-numa-nodes": false, "max-allowable-numa-nodes": null},
            "distances": null, "providers": providers, "expect": expect, "admit": admit
        })
    };
    let file = serde_json::json!({
        "cases": [
            case(
                serde_json::json!([
                    {"resources": {"cpu": [{"affinity": [63], "preferred": true}, {"affinity": all, "preferred": false}]}},
                    {"resources": {"gpu": [{"affinity": [63], "preferred": true}]}}
                ]),
                serde_json::json!({"affinity": [63], "preferred": true}),
                true,
            ),
            case(
                serde_json::json!([
                    {"resources": {"cpu": [{"affinity": [40, 63], "preferred": true}]}},
                    {"resources": {"gpu": [{"affinity": [63], "preferred": true}]}}
                ]),
                serde_json::json!({"affinity": [63], "preferred": false}),
                false,
            ),
            case(
                serde_json::json!([{"resources": {"cpu": []}}]),
                serde_json::json!({"affinity": all, "preferred": false}),
                false,
            ),
        ]
    });
    let results = evaluate("topologymanager-large.json", &file).expect("evaluates");
    assert_eq!(results.len(), 3);
    for r in results {
        assert!(r.failure.is_none(), "{}: {:?}", r.case, r.failure);
    }
    // And a wrong expectation is reported, not passed.
    let mut wrong = file.clone();
    wrong["cases"][0]["expect"]["preferred"] = serde_json::json!(false);
    let results = evaluate("topologymanager-large.json", &wrong).expect("evaluates");
    assert!(results[0]
        .failure
        .as_deref()
        .is_some_and(|f| f.contains("product")));
}
