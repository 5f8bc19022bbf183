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
