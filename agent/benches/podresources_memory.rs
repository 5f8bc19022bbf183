//! Peak memory of a PodResources `List` answer, decoded as the agent decoded it before the
//! 100,000-field limit (prost straight away) and as it decodes it now
//! (`podresources::bounded::check` on the wire bytes, then prost only when accepted).
//!
//! Each (answer, decoder) pair runs in a child process of its own (this bench re-executed
//! with `NODETOPO_PR_CASE`), which builds the wire bytes by hand (one pod of N containers,
//! each holding CPU 1: 5 bytes per container, so 700,000 make the 3.5 MB answer of issue 26),
//! reads its peak resident memory (`VmHWM` in /proc/self/status) before and after the
//! decode, and prints one line. The parent prints the table, then criterion times the
//! wire walk on the hostile answer and on the largest accepted one.

#[allow(dead_code, clippy::all, missing_docs)]
#[path = "../src/daemon/inputs/podresources/v1.rs"]
mod v1;

#[allow(dead_code)]
#[path = "../src/daemon/inputs/podresources/bounded.rs"]
mod bounded;

use std::process::Command;

use criterion::Criterion;
use prost::Message as _;

const CASE_ENV: &str = "NODETOPO_PR_CASE";

/// The answers: (name, containers in the one pod).
const ANSWERS: [(&str, usize); 3] = [
    ("hostile: 700,000 containers on CPU 1", 700_000),
    // 1 pod + 2 fields per container (the container, its CPU id list) = 99,999 fields.
    ("largest accepted: 49,999 containers", 49_999),
    ("a node of 1,000 containers", 1_000),
];

fn varint(mut v: usize, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `ListPodResourcesResponse` of one pod with `n` containers, each `cpu_ids: [1]`:
/// container = field 3 of PodResources, cpu_ids = packed field 3 of ContainerResources.
fn answer(n: usize) -> Vec<u8> {
    let mut pod = Vec::with_capacity(5 * n);
    for _ in 0..n {
        pod.extend_from_slice(&[0x1a, 0x03, 0x1a, 0x01, 0x01]);
    }
    let mut out = vec![0x0a];
    varint(pod.len(), &mut out);
    out.extend_from_slice(&pod);
    out
}

/// Peak resident memory of this process so far, in KiB.
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child: one answer, one decoder; prints `bytes fields hwm_before hwm_after outcome`.
fn child(spec: &str) {
    let (n, bounded_mode) = match spec.split_once(':') {
        Some((n, mode)) => (n.parse::<usize>().unwrap_or(0), mode == "bounded"),
        None => return,
    };
    let bytes = answer(n);
    let before = vm_hwm_kib();
    let outcome = if bounded_mode {
        match bounded::check(&bytes, bounded::Msg::List) {
            Ok(_) => match v1::ListPodResourcesResponse::decode(bytes.as_slice()) {
                Ok(r) => format!("decoded {} containers", r.pod_resources[0].containers.len()),
                Err(e) => format!("decode error {e}"),
            },
            Err(e) => format!("refused: {e}"),
        }
    } else {
        match v1::ListPodResourcesResponse::decode(bytes.as_slice()) {
            Ok(r) => format!("decoded {} containers", r.pod_resources[0].containers.len()),
            Err(e) => format!("decode error {e}"),
        }
    };
    let after = vm_hwm_kib();
    let fields = bounded::check(&bytes, bounded::Msg::List)
        .map_or_else(|_| "over".into(), |c| c.to_string());
    println!("{} {fields} {before} {after} {outcome}", bytes.len());
}

fn table() {
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    // The hand-made wire bytes are what prost itself writes.
    let pod = v1::PodResources {
        containers: vec![
            v1::ContainerResources {
                cpu_ids: vec![1],
                ..Default::default()
            };
            3
        ],
        ..Default::default()
    };
    let encoded = v1::ListPodResourcesResponse {
        pod_resources: vec![pod],
    }
    .encode_to_vec();
    assert_eq!(
        encoded,
        answer(3),
        "hand-made wire bytes differ from prost's"
    );
    println!("PodResources List answer: peak resident memory (VmHWM) of a process decoding it");
    println!(
        "{:<40} {:>10} {:>8} {:>10} {:>12} {:>12}  outcome",
        "answer", "bytes", "fields", "decoder", "before KiB", "peak KiB"
    );
    for (name, n) in ANSWERS {
        for mode in ["prost", "bounded"] {
            let out = Command::new(&me)
                .env(CASE_ENV, format!("{n}:{mode}"))
                .output();
            let Ok(out) = out else { continue };
            let line = String::from_utf8_lossy(&out.stdout);
            let mut f = line.trim().splitn(5, ' ');
            let (bytes, fields, before, after, outcome) = (
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
                f.next().unwrap_or(""),
            );
            let decoder = if mode == "prost" {
                "unbounded"
            } else {
                "bounded"
            };
            println!("{name:<40} {bytes:>10} {fields:>8} {decoder:>10} {before:>12} {after:>12}  {outcome}");
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CASE_ENV) {
        child(&spec);
        return;
    }
    table();
    let mut c = Criterion::default().configure_from_args();
    for (name, n) in [
        ("hostile 700k", 700_000),
        ("largest accepted 49,999", 49_999),
    ] {
        let bytes = answer(n);
        c.bench_function(&format!("podresources wire check, {name}"), |b| {
            b.iter(|| bounded::check(std::hint::black_box(&bytes), bounded::Msg::List).is_ok())
        });
    }
    c.final_summary();
}
