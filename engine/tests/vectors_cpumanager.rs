//! Runs every `cpumanager-*.json` vector (the vendored copies in `tests/vectors/`) through
//! the same evaluator as `nodetopo-agent conformance`, and checks the copies are byte-identical
//! to the project's shared reference data when that directory is present.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use nodetopo_engine::conformance::cpumanager::load_topologies;
use nodetopo_engine::conformance::{
    evaluate_case_file, file_kind, FileKind, FileResult, Topologies,
};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn cpumanager_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("tests/vectors is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            matches!(
                file_kind(&name),
                Some(FileKind::CpuManager | FileKind::CpuManagerTopologies)
            )
        })
        .collect();
    v.sort();
    v
}

/// Number of cases in the files' case arrays, counted independently of the evaluator.
fn expected_case_count(files: &[PathBuf]) -> usize {
    let mut n = 0;
    for f in files {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if file_kind(&name) != Some(FileKind::CpuManager) {
            continue;
        }
        for (k, v) in json.as_object().unwrap() {
            if k != "topologies" {
                n += v.as_array().unwrap().len();
            }
        }
    }
    n
}

/// A changed expectation must fail: the evaluator really compares.
#[test]
fn a_wrong_expectation_fails() {
    let dir = vectors_dir();
    let take = dir.join("cpumanager-take.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&take).unwrap()).unwrap();
    let topologies = nodetopo_engine::conformance::cpumanager::load_topologies(
        "cpumanager-topologies.json",
        &serde_json::from_str(
            &std::fs::read_to_string(dir.join("cpumanager-topologies.json")).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let cases = json["cases"].as_array_mut().unwrap();
    let i = cases
        .iter()
        .position(|c| c["expect"].as_str().is_some_and(|s| !s.is_empty()))
        .unwrap();
    let c = &mut cases[i];
    let want = nodetopo_engine::CpuSet::parse(c["expect"].as_str().unwrap()).unwrap();
    // Swap one expected CPU for one outside the expectation.
    let all: nodetopo_engine::CpuSet = (0..4096).collect();
    let other = all.difference(&want).first().unwrap();
    let mut wrong = want.clone();
    wrong.remove(want.first().unwrap());
    wrong.insert(other);
    c["expect"] = serde_json::Value::String(wrong.to_string());
    let results =
        nodetopo_engine::conformance::cpumanager::evaluate("take", &json, &topologies).unwrap();
    let prefix = format!("cases[{i}] ");
    let changed = results
        .iter()
        .find(|r| r.case.starts_with(&prefix))
        .unwrap();
    assert!(changed.failure.is_some(), "{changed:?}");
    assert_eq!(
        results.iter().filter(|r| r.failure.is_some()).count(),
        1,
        "only the changed case fails"
    );
}

fn read_json(f: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(f).expect("vector file readable"))
        .expect("vector file is JSON")
}

/// Every file through the engine's evaluator, with the machines of the directory's
/// topology files (all files lie in one directory, so they are both "beside" and "given").
fn evaluate_files(files: &[PathBuf]) -> Vec<FileResult> {
    let kind = |f: &Path| file_kind(&f.file_name().unwrap().to_string_lossy());
    let mut machines = Topologies::new();
    for f in files {
        if kind(f) == Some(FileKind::CpuManagerTopologies) {
            let t = load_topologies(&f.display().to_string(), &read_json(f));
            machines.extend(t.expect("topology file loads"));
        }
    }
    let mut out = Vec::new();
    for f in files {
        let k = kind(f).expect("a vector file");
        if k == FileKind::CpuManagerTopologies {
            continue;
        }
        let file = f.display().to_string();
        let r = evaluate_case_file(&file, k, &read_json(f), &machines, &machines);
        out.push(match r {
            Ok(cases) => FileResult {
                file,
                cases,
                error: None,
            },
            Err(e) => FileResult {
                file,
                cases: Vec::new(),
                error: Some(e.to_string()),
            },
        });
    }
    out
}

#[test]
fn every_cpumanager_vector_passes() {
    let files = cpumanager_files();
    assert!(
        files.len() >= 4,
        "expected the cpumanager vector files, found {files:?}"
    );
    let results = evaluate_files(&files);
    let mut total = 0;
    let mut failures = Vec::new();
    for f in &results {
        assert_eq!(f.error, None, "{} could not be evaluated", f.file);
        let n = f.cases.len();
        total += n;
        println!("{}: {n} cases", f.file);
        for c in &f.cases {
            if let Some(why) = &c.failure {
                failures.push(format!("{}: {}: {why}", f.file, c.case));
            }
        }
    }
    println!(
        "cpumanager vectors: {total} cases run, {} failed",
        failures.len()
    );
    assert_eq!(
        total,
        expected_case_count(&files),
        "every case array is evaluated"
    );
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}

/// The vendored copies must equal the shared reference data (`../shared/vectors` or
/// `../../shared/vectors` relative to the repository) whenever it is there.
#[test]
fn vendored_vectors_match_shared_copies() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shared = [
        repo.join("../shared/vectors"),
        repo.join("../../shared/vectors"),
    ]
    .into_iter()
    .find(|p| p.is_dir());
    let Some(shared) = shared else {
        // Written to the stderr handle, which the test harness does not capture, so the skip
        // shows in `cargo test` output.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: vendored_vectors_match_shared_copies: no shared/vectors directory beside the repository"
        );
        return;
    };
    let mut compared = 0;
    for entry in std::fs::read_dir(vectors_dir()).expect("tests/vectors is readable") {
        let p = entry.expect("directory entry").path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("cpumanager-") || name.ends_with("-cpumanager.md")) {
            continue;
        }
        let theirs = shared.join(&name);
        let ours = std::fs::read(&p).expect("vendored vector readable");
        let reference = std::fs::read(&theirs)
            .unwrap_or_else(|e| panic!("{} is missing from {}: {e}", name, shared.display()));
        assert!(
            ours == reference,
            "{} differs from {}",
            p.display(),
            theirs.display()
        );
        compared += 1;
    }
    assert!(compared >= 6, "compared only {compared} files");
}
