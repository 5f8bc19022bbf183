//! `conformance PATH...`: evaluates test-vector files (the `shared/vectors` schema) with the
//! engine. Prints one line per failing case (and per file that cannot be evaluated), then
//! `N passed, M failed`; exits 1 when anything failed.
//!
//! Paths may be files or directories (all vector files inside). Machines named by cases
//! come from `cpumanager-topologies*.json` files among the paths, beside the case file, or
//! from the case file's own `topologies` object.

use std::path::PathBuf;
use std::process::ExitCode;

use nodetopo_engine::conformance::{evaluate_paths, FileResult};

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
    use nodetopo_engine::conformance::CaseResult;

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
