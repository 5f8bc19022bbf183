//! The committed CRD manifests under `charts/nodetopo/crds/` must equal what the Rust types
//! generate. Regenerate with `NODETOPO_UPDATE_CRDS=1 cargo test -p nodetopo-crds --test crd_drift`
//! (or `nodetopo-operator crds`), then review the diff.

use std::path::PathBuf;

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/nodetopo/crds")
}

#[test]
fn committed_crds_equal_generated() {
    let files = nodetopo_crds::generate::crd_files().expect("CRDs serialise");
    let dir = chart_dir();
    if std::env::var_os("NODETOPO_UPDATE_CRDS").is_some() {
        std::fs::create_dir_all(&dir).expect("create chart crds dir");
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).expect("write CRD");
        }
    }
    for (name, text) in &files {
        let path = dir.join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (run with NODETOPO_UPDATE_CRDS=1)", path.display())
        });
        assert!(
            committed == *text,
            "{} differs from the generated CRD; regenerate with NODETOPO_UPDATE_CRDS=1 cargo test -p nodetopo-crds --test crd_drift",
            path.display()
        );
    }
    // No stray CRD files that the types no longer generate.
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("read chart crds dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    on_disk.sort();
    let mut generated: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    generated.sort();
    assert_eq!(on_disk, generated);
}
