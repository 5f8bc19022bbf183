//! `nodetopo-operator crds` prints exactly the committed chart CRDs (concatenated as a YAML
//! stream in file order), and `--help` documents flags with their environment variables.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn crds_command_output_equals_chart_files() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodetopo-operator"))
        .arg("crds")
        .output()
        .expect("run nodetopo-operator crds");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/nodetopo/crds");
    let expected: String = nodetopo_crds::generate::crd_files()
        .expect("generate")
        .into_iter()
        .map(|(name, _)| {
            let text = std::fs::read_to_string(dir.join(&name))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(&name).display()));
            format!("---\n{text}")
        })
        .collect();
    assert_eq!(
        printed, expected,
        "regenerate charts/nodetopo/crds with `nodetopo-operator crds`"
    );
    assert_eq!(printed.matches("kind: CustomResourceDefinition").count(), 2);
}

#[test]
fn help_lists_flags_and_env() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodetopo-operator"))
        .arg("--help")
        .output()
        .expect("run --help");
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "crds",
        "--log-format",
        "[env: NODETOPO_LOG_FORMAT=]",
        "--metrics-addr",
        "[env: POD_NAME=]",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
