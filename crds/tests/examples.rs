//! The example policies in `examples/` parse as NodeResourcePolicy and pass validation.

use std::path::PathBuf;

use nodetopo_crds::validation::validate_policy_spec;
use nodetopo_crds::NodeResourcePolicy;

#[test]
fn examples_are_valid_policies() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read example");
        let p: NodeResourcePolicy =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let errs = validate_policy_spec(&p.spec);
        assert!(errs.is_empty(), "{}: {errs:?}", path.display());
        seen.push(p.metadata.name.unwrap_or_default());
    }
    seen.sort();
    assert_eq!(seen, vec!["strict-single-numa", "telco", "uncore-aligned"]);
}
