//! Discovery of the largest vendored sysfs tree (by entry count), unpacked once into a
//! temporary directory outside the timed loop. Target: median under 20 ms.

use std::fs;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use nodetopo_engine::sysfs;

fn largest_tree() -> (tempfile::TempDir, String) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sysfs");
    let mut best: Option<(usize, PathBuf)> = None;
    for e in fs::read_dir(&data).expect("tests/data/sysfs") {
        let p = e.expect("dir entry").path();
        if !p.to_string_lossy().ends_with(".tar.gz") {
            continue;
        }
        let f = fs::File::open(&p).expect("archive");
        let n = tar::Archive::new(flate2::read::GzDecoder::new(f))
            .entries()
            .expect("tar")
            .count();
        if best.as_ref().is_none_or(|(m, _)| n > *m) {
            best = Some((n, p));
        }
    }
    let (_, archive) = best.expect("at least one vendored tree");
    let tmp = tempfile::tempdir().expect("tempdir");
    let f = fs::File::open(&archive).expect("archive");
    tar::Archive::new(flate2::read::GzDecoder::new(f))
        .unpack(tmp.path())
        .expect("unpack");
    let name = archive
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string();
    (tmp, name)
}

fn discovery(c: &mut Criterion) {
    let (tmp, name) = largest_tree();
    let root = tmp.path().join(&name).join("sys");
    let t = sysfs::discover(&root).expect("discovery");
    eprintln!("benchmarking discovery of {name}: {} CPUs", t.cpus().len());
    c.bench_function(&format!("discover/{name}"), |b| {
        b.iter(|| sysfs::discover(std::hint::black_box(&root)).expect("discovery"))
    });
}

criterion_group!(benches, discovery);
criterion_main!(benches);
