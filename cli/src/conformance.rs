//! `conformance PATH...`: evaluates test-vector files (the `shared/vectors` schema) with the
//! engine. Prints one line per failing case (and per file that cannot be evaluated), then
//! `N passed, M failed`; exits 1 when anything failed.
//!
//! Paths may be files or directories (all vector files inside). Machines named by cases
//! come from `cpumanager-topologies*.json` files among the paths, beside the case file, or
//! from the case file's own `topologies` object.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nodetopo_engine::conformance::cpumanager::load_topologies;
use nodetopo_engine::conformance::{
    evaluate_case_file, file_kind, CaseResult, ConformanceError, FileKind, FileResult, Topologies,
};

/// Arguments of `conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Vector files or directories (e.g. shared/vectors/cpumanager-take.json).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// Runs `conformance`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let results = evaluate_paths(&args.paths)?;
    let (lines, passed, failed) = summarize(&results);
    for l in &lines {
        println!("{l}");
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads and parses a JSON file; errors name the file.
fn read_json(path: &Path) -> Result<serde_json::Value, ConformanceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConformanceError::Io {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ConformanceError::Malformed {
        file,
        reason: format!("not valid JSON: {e}"),
    })
}

/// Every `*.json` file of a directory that is a known vector kind, sorted by name.
fn json_files_in(dir: &Path) -> Result<Vec<PathBuf>, ConformanceError> {
    let rd = std::fs::read_dir(dir).map_err(|e| ConformanceError::Io {
        file: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut v = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| ConformanceError::Io {
            file: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let p = entry.path();
        if p.is_file() && file_kind(&base_name(&p)).is_some() {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

/// Adds the machines of one `cpumanager-topologies*.json` file.
fn load_topology_file(path: &Path, into: &mut Topologies) -> Result<(), ConformanceError> {
    let json = read_json(path)?;
    into.extend(load_topologies(&path.display().to_string(), &json)?);
    Ok(())
}

/// The machines of the `cpumanager-topologies*.json` files in a directory, in name order.
fn topologies_in(dir: &Path) -> Result<Topologies, ConformanceError> {
    let mut topologies = Topologies::new();
    for p in json_files_in(dir)? {
        if file_kind(&base_name(&p)) == Some(FileKind::CpuManagerTopologies) {
            load_topology_file(&p, &mut topologies)?;
        }
    }
    Ok(topologies)
}

/// Evaluates every case file among `paths` (directories are expanded to their vector
/// files). Topology files among the paths serve every case file; each case file also sees
/// the topology files of its own directory and its own `topologies` object. A case file
/// that cannot be evaluated yields a [`FileResult`] with `error` set; unreadable arguments,
/// unknown file kinds and broken topology files given as arguments are errors.
pub fn evaluate_paths(paths: &[PathBuf]) -> Result<Vec<FileResult>, ConformanceError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(json_files_in(p)?);
        } else {
            files.push(p.clone());
        }
    }
    let mut given = Topologies::new();
    for f in &files {
        if file_kind(&base_name(f)) == Some(FileKind::CpuManagerTopologies) {
            load_topology_file(f, &mut given)?;
        }
    }
    let mut out = Vec::new();
    for f in &files {
        let file = f.display().to_string();
        let outcome = match file_kind(&base_name(f)) {
            None => return Err(ConformanceError::UnknownKind(file)),
            Some(FileKind::CpuManagerTopologies) => continue,
            Some(kind) => evaluate_file(f, kind, &given),
        };
        out.push(match outcome {
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
    Ok(out)
}

/// One case file: its JSON and, for a `cpumanager-*` file, the machines of its directory.
fn evaluate_file(
    f: &Path,
    kind: FileKind,
    given: &Topologies,
) -> Result<Vec<CaseResult>, ConformanceError> {
    let file = f.display().to_string();
    let json = read_json(f)?;
    let beside = if kind == FileKind::CpuManager {
        let dir = f
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        topologies_in(dir)?
    } else {
        Topologies::new()
    };
    evaluate_case_file(&file, kind, &json, &beside, given)
}

/// The failure lines and the totals. A file that cannot be evaluated counts as one failure.
fn summarize(results: &[FileResult]) -> (Vec<String>, usize, usize) {
    let mut lines = Vec::new();
    let (mut passed, mut failed) = (0, 0);
    for f in results {
        if let Some(e) = &f.error {
            lines.push(format!("FAIL {}: cannot evaluate: {e}", f.file));
            failed += 1;
        }
        for c in &f.cases {
            match &c.failure {
                None => passed += 1,
                Some(why) => {
                    failed += 1;
                    lines.push(format!("FAIL {}: {}: {why}", f.file, c.case));
                }
            }
        }
    }
    (lines, passed, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lines() {
        let r = vec![
            FileResult {
                file: "a.json".into(),
                cases: vec![
                    CaseResult {
                        case: "cases[0] x".into(),
                        failure: None,
                    },
                    CaseResult {
                        case: "cases[1] y".into(),
                        failure: Some("cpus: expected \"1\", got \"2\"".into()),
                    },
                ],
                error: None,
            },
            FileResult {
                file: "b.json".into(),
                cases: vec![],
                error: Some("bad".into()),
            },
        ];
        let (lines, p, f) = summarize(&r);
        assert_eq!((p, f), (1, 2));
        assert_eq!(
            lines,
            vec![
                "FAIL a.json: cases[1] y: cpus: expected \"1\", got \"2\"".to_string(),
                "FAIL b.json: cannot evaluate: bad".to_string()
            ]
        );
    }
}
