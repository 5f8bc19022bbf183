//! The one CPU manager checkpoint reader and writer, and the one Memory Manager checkpoint
//! reader and writer (v1, v2, v3; the PodLevelResourceManagers gate off and on), against the kubelet's own checkpoint code
//! (`e2e/kubelet-checkpoint-oracle`, k8s.io/kubernetes v1.37.2): files the kubelet writes in
//! v2, v3 and v4 (with and without pod entries), and the same files altered the ways the
//! kubelet's reading rules tell apart (the two views of v4 differing, each checksum wrong, a
//! repeated or case-folded key, nesting at and over Go's limit, wrong types), are restored by
//! the kubelet's `NewCheckpointState` and read by [`cpu_checkpoint::parse`]: both must accept
//! the same files with the same state and refuse the same files. Skipped (loudly) without Go
//! unless NODETOPO_REQUIRE_ORACLE=1.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodetopo_engine::change::KubeletCpuState;
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::CpuSet;
use nodetopo_kubelet::cpu_checkpoint::{self, CheckpointFormat, ChecksumCheck};
use nodetopo_kubelet::memory_checkpoint::{self, MemoryCheckpointFormat};
use nodetopo_testkit::{go_tool_or_skip, SplitMix};
use serde_json::{json, Value};

fn oracle_or_skip() -> Option<PathBuf> {
    go_tool_or_skip(
        "e2e/kubelet-checkpoint-oracle/build.sh",
        "the kubelet checkpoint oracle",
    )
}

/// One answer per request, in order.
fn ask(bin: &Path, requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the kubelet checkpoint oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines: Vec<String> = requests.iter().map(|r| r.to_string()).collect();
    let writer = std::thread::spawn(move || {
        for l in lines {
            writeln!(stdin, "{l}").expect("writing to the oracle");
        }
    });
    let answers: Vec<Value> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .take(requests.len())
        .map(|l| serde_json::from_str(&l.expect("reading the oracle")).expect("answer"))
        .collect();
    writer.join().expect("writer");
    assert!(child.wait().expect("oracle exit").success());
    assert_eq!(answers.len(), requests.len());
    answers
}

/// A random checkpoint content: policy, shared pool, container entries, pod entries.
fn random_state(r: &mut SplitMix) -> Value {
    let cpus = |r: &mut SplitMix| {
        let lo = r.below(32);
        let hi = lo + r.below(4);
        let range = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        };
        if r.chance(30) {
            format!("{range},{}", hi + 2 + r.below(3))
        } else if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        }
    };
    let mut entries = serde_json::Map::new();
    for p in 0..r.below(4) {
        let mut cs = serde_json::Map::new();
        for c in 0..1 + r.below(3) {
            let name = *r.pick(&["app", "side<car>", "db&x", "c"]);
            cs.insert(format!("{name}{c}"), json!(cpus(r)));
        }
        entries.insert(format!("uid-{p}-{}", r.below(1000)), Value::Object(cs));
    }
    let mut pods = serde_json::Map::new();
    if r.chance(40) {
        pods.insert(format!("pod-{}", r.below(100)), json!(cpus(r)));
    }
    json!({
        "policyName": *r.pick(&["static", "static", "none"]),
        "defaultCpuSet": if r.chance(10) { String::new() } else { cpus(r) },
        "entries": entries,
        "podEntries": pods,
    })
}

/// The same file altered in the ways the kubelet's reading rules tell apart.
fn variants(file: &str) -> Vec<(&'static str, String)> {
    let v: Value = serde_json::from_str(file).expect("the kubelet writes JSON");
    let mut out = vec![("as written", file.to_string())];
    let legacy = v["checksum"].as_u64().unwrap_or(0);
    out.push((
        "checksum + 1",
        file.replacen(
            &format!("\"checksum\":{legacy}"),
            &format!("\"checksum\":{}", legacy + 1),
            1,
        ),
    ));
    out.push((
        "checksum 0",
        file.replacen(&format!("\"checksum\":{legacy}"), "\"checksum\":0", 1),
    ));
    if let Some(dc) = v["dataChecksum"].as_u64() {
        out.push((
            "dataChecksum + 1",
            file.replacen(
                &format!("\"dataChecksum\":{dc}"),
                &format!("\"dataChecksum\":{}", dc + 1),
                1,
            ),
        ));
        // The legacy view differs from data (as an older kubelet could leave it).
        let mut w = v.clone();
        w["defaultCpuSet"] = json!("0-63");
        w["policyName"] = json!("none");
        out.push(("legacy view differs", w.to_string()));
        // data differs from the legacy view, dataChecksum recomputed.
        let mut w = v.clone();
        let mut d: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
        d["defaultCpuSet"] = json!("40-47");
        let data = d.to_string();
        w["data"] = json!(data);
        w["dataChecksum"] = json!(nodetopo_kubelet::gohash::data_checksum(&data));
        out.push(("data differs, dataChecksum recomputed", w.to_string()));
    }
    if v.get("data").is_none() && v.get("podEntries").is_none() {
        // A v2 file hashed under the versioned struct name (as kubelets before the legacy
        // name was restored wrote it): refused with the PodLevelResourceManagers gate on.
        let entries: BTreeMap<String, BTreeMap<String, String>> =
            serde_json::from_value(v.get("entries").cloned().unwrap_or(json!({}))).unwrap();
        let print = format!(
            "(*state.CPUManagerCheckpointV2){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string){} Checksum:(checksum.Checksum)0}}",
            v["policyName"].as_str().unwrap(),
            v["defaultCpuSet"].as_str().unwrap(),
            nodetopo_kubelet::gohash::go_print_string_maps(Some(&entries))
        );
        let sum = nodetopo_kubelet::gohash::fnv32a(print.as_bytes());
        let mut w = v.clone();
        w["checksum"] = json!(sum);
        out.push(("v2 hashed under CPUManagerCheckpointV2", w.to_string()));
    }
    let body = &file[1..];
    out.push((
        "repeated policyName first",
        format!("{{\"policyName\":\"other\",{body}"),
    ));
    out.push((
        "repeated policyName last",
        format!("{},\"policyName\":\"other\"}}", &file[..file.len() - 1]),
    ));
    out.push((
        "case-folded key",
        file.replacen("\"policyName\"", "\"POLICYNAME\"", 1),
    ));
    out.push((
        "case-folded data key",
        file.replacen("\"data\"", "\"Data\"", 1),
    ));
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    out.push((
        "unknown member at depth 9999",
        format!("{{\"x\":{},{body}", nest(9_999)),
    ));
    out.push((
        "unknown member at depth 10000",
        format!("{{\"x\":{},{body}", nest(10_000)),
    ));
    out.push((
        "checksum a string",
        file.replacen(&format!("\"checksum\":{legacy}"), "\"checksum\":\"1\"", 1),
    ));
    out.push((
        "entries null",
        file.replacen("\"entries\":{", "\"entries\":null,\"e\":{", 1),
    ));
    out.push(("trailing garbage", format!("{file} x")));
    out.push(("null", "null".into()));
    out
}

/// What the kubelet runs with, as comparable JSON; `None` when it refuses the file.
fn ours(text: &str, gate: bool) -> Option<Value> {
    let gates = cpu_checkpoint::ReadGates {
        pod_level_resource_managers: gate,
    };
    let c = cpu_checkpoint::parse_gated(text, gates).ok()?;
    if matches!(c.checksum_check, ChecksumCheck::Mismatch { .. }) {
        return None;
    }
    let entries: BTreeMap<String, BTreeMap<String, String>> = c
        .entries
        .iter()
        .map(|(u, cs)| {
            (
                u.clone(),
                cs.iter().map(|(n, s)| (n.clone(), s.to_string())).collect(),
            )
        })
        .collect();
    let pods: BTreeMap<&String, String> = c
        .pod_entries
        .iter()
        .filter(|_| gate)
        .map(|(u, s)| (u, s.to_string()))
        .collect();
    Some(
        json!({"policyName": c.policy_name, "defaultCpuSet": c.default_cpu_set.to_string(), "entries": entries, "podEntries": pods}),
    )
}

fn theirs(answer: &Value) -> Option<Value> {
    (answer["ok"] == json!(true)).then(|| {
        // The answer omits empty strings.
        let text = |k: &str| answer[k].as_str().unwrap_or_default().to_string();
        json!({"policyName": text("policyName"), "defaultCpuSet": text("defaultCpuSet"), "entries": answer["entries"], "podEntries": answer["podEntries"]})
    })
}

#[test]
fn reads_as_the_kubelet_restores_and_writes_its_bytes() {
    let Some(bin) = oracle_or_skip() else { return };
    let mut r = SplitMix(0x5eed_c0de);
    let states: Vec<Value> = (0..60).map(|_| random_state(&mut r)).collect();
    let writes: Vec<Value> = states
        .iter()
        .flat_map(|s| {
            [2, 3, 4].map(|version| {
                let mut w = s.clone();
                w["op"] = json!("write-cpu");
                w["version"] = json!(version);
                w
            })
        })
        .collect();
    let files = ask(&bin, &writes);

    // Our writer: the kubelet's bytes wherever there are no pod entries.
    let mut rendered = 0;
    for (w, f) in writes.iter().zip(&files) {
        assert_eq!(f["ok"], json!(true), "{w}: {f}");
        if w["podEntries"].as_object().is_some_and(|p| !p.is_empty()) {
            continue;
        }
        let mut st = CpuState {
            default_cpuset: CpuSet::parse(w["defaultCpuSet"].as_str().unwrap()).unwrap(),
            ..Default::default()
        };
        for (uid, cs) in w["entries"].as_object().unwrap() {
            for (name, set) in cs.as_object().unwrap() {
                st.set(uid, name, CpuSet::parse(set.as_str().unwrap()).unwrap());
            }
        }
        let state = KubeletCpuState {
            policy_name: w["policyName"].as_str().unwrap().into(),
            state: st,
        };
        let format = match w["version"].as_u64() {
            Some(2) => CheckpointFormat::V2,
            Some(3) => CheckpointFormat::V3,
            _ => CheckpointFormat::V4,
        };
        // The generator spells every CPU set canonically, as the kubelet writes them.
        let text = cpu_checkpoint::render(&state, format);
        assert_eq!(text, f["file"].as_str().unwrap(), "{w}");
        rendered += 1;
    }

    // Our reader: the kubelet's verdict and state on every file and variant.
    // Also the files older kubelets wrote (tests/data/kubelet-state: v2 files hashed
    // under the versioned struct name, which the PodLevelResourceManagers gate refuses).
    let mut cases = Vec::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kubelet-state");
    let mut older: Vec<_> = std::fs::read_dir(&dir)
        .expect("the kubelet-state fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    older.sort();
    for p in older {
        let text = std::fs::read_to_string(&p).expect("fixture");
        for gate in [false, true] {
            cases.push(("older kubelet's file", text.clone(), gate));
        }
    }
    for f in &files {
        for (what, text) in variants(f["file"].as_str().unwrap()) {
            for gate in [false, true] {
                cases.push((what, text.clone(), gate));
            }
        }
    }
    let reads: Vec<Value> = cases
        .iter()
        .map(|(_, t, gate)| json!({"op": "read-cpu", "file": t, "podLevelResourceManagers": gate}))
        .collect();
    let answers = ask(&bin, &reads);
    let (mut accepted, mut refused) = (0, 0);
    let mut per_variant: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((what, text, gate), a) in cases.iter().zip(&answers) {
        let (k, o) = (theirs(a), ours(text, *gate));
        let shown: String = text.chars().take(400).collect();
        assert_eq!(o, k, "{what} (gate {gate}): {shown}\nkubelet: {a}");
        let e = per_variant.entry(what).or_default();
        if k.is_some() {
            accepted += 1;
            e.0 += 1;
        } else {
            refused += 1;
            e.1 += 1;
        }
    }
    eprintln!(
        "checkpoint oracle: {} files written by the kubelet ({rendered} byte-identical renders), {} reads compared: {accepted} accepted, {refused} refused; per variant (accepted, refused): {per_variant:?}",
        files.len(),
        cases.len()
    );
    assert!(rendered > 30 && accepted > 100 && refused > 100);
}

// ---------------------------------------------------------------- the Memory Manager's

/// A random Memory Manager state: 1-4 NUMA nodes with `memory` and maybe huge pages,
/// consistent tables, container blocks and pod-level blocks.
fn random_memory_state(r: &mut SplitMix) -> Value {
    let nodes = r.range(1, 4);
    let types: Vec<&str> = ["memory", "hugepages-2Mi", "hugepages-1Gi"]
        .into_iter()
        .filter(|t| *t == "memory" || r.chance(50))
        .collect();
    let mut machine = serde_json::Map::new();
    for n in 0..nodes {
        let mut mm = serde_json::Map::new();
        for t in &types {
            let total = (r.range(1, 64) as u64) << 30;
            let system = if *t == "memory" {
                (r.below(4) as u64) << 28
            } else {
                0
            };
            let allocatable = total - system;
            let reserved = (r.below(4) as u64) * (allocatable / 8);
            mm.insert(
                t.to_string(),
                json!({"total": total, "systemReserved": system, "allocatable": allocatable,
                       "reserved": reserved, "free": allocatable - reserved}),
            );
        }
        let cells: Vec<usize> = if r.chance(30) && nodes > 1 {
            vec![n, (n + 1) % nodes]
        } else {
            vec![n]
        };
        machine.insert(
            n.to_string(),
            json!({"numberOfAssignments": r.below(5), "memoryMap": mm, "cells": cells}),
        );
    }
    let block = |r: &mut SplitMix| json!({"numaAffinity": [r.below(nodes)], "type": *r.pick(&types), "size": (r.range(1, 4096) as u64) << 20});
    let mut entries = serde_json::Map::new();
    for p in 0..r.below(4) {
        let mut cs = serde_json::Map::new();
        for c in 0..1 + r.below(2) {
            let name = *r.pick(&["app", "side<car>", "db&x"]);
            let blocks: Vec<Value> = (0..1 + r.below(2)).map(|_| block(r)).collect();
            cs.insert(format!("{name}{c}"), Value::Array(blocks));
        }
        entries.insert(format!("uid-{p}-{}", r.below(1000)), Value::Object(cs));
    }
    let mut pods = serde_json::Map::new();
    if r.chance(50) {
        let blocks: Vec<Value> = (0..1 + r.below(2)).map(|_| block(r)).collect();
        pods.insert(
            format!("pod-{}", r.below(100)),
            json!({ "memoryBlocks": blocks }),
        );
    }
    json!({
        "policyName": *r.pick(&["Static", "Static", "None"]),
        "machineState": machine,
        "entries": entries,
        "podEntries": pods,
    })
}

/// The same file altered in the ways the kubelet's reading rules tell apart.
fn memory_variants(file: &str) -> Vec<(&'static str, String)> {
    let v: Value = serde_json::from_str(file).expect("the kubelet writes JSON");
    let mut out = vec![("as written", file.to_string())];
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut w = v.clone();
        f(&mut w);
        w.to_string()
    };
    let legacy = v["checksum"].as_u64().unwrap_or(0);
    out.push(("checksum + 1", edit(&|w| w["checksum"] = json!(legacy + 1))));
    out.push(("checksum 0", edit(&|w| w["checksum"] = json!(0))));
    out.push(("checksum a string", edit(&|w| w["checksum"] = json!("1"))));
    if let Some(dc) = v["dataChecksum"].as_u64() {
        out.push((
            "dataChecksum + 1",
            edit(&|w| w["dataChecksum"] = json!(dc + 1)),
        ));
        out.push((
            "legacy view differs",
            edit(&|w| {
                w["policyName"] = json!("None");
                w["machineState"] = json!({});
            }),
        ));
        let data: Value = serde_json::from_str(v["data"].as_str().unwrap()).unwrap();
        let with_data = |f: &dyn Fn(&mut Value)| {
            let mut d = data.clone();
            f(&mut d);
            let text = d.to_string();
            let mut w = v.clone();
            w["dataChecksum"] = json!(nodetopo_kubelet::gohash::data_checksum(&text));
            w["data"] = json!(text);
            w.to_string()
        };
        out.push((
            "data differs, dataChecksum recomputed",
            with_data(&|d| d["policyName"] = json!("None")),
        ));
        out.push((
            "data: memory table null",
            with_data(&|d| d["machineState"]["0"]["memoryMap"]["memory"] = Value::Null),
        ));
        out.push((
            "data: node null, cells null",
            with_data(&|d| {
                d["machineState"]["0"]["cells"] = Value::Null;
                if let Some(m) = d["machineState"].as_object_mut() {
                    m.insert("7".into(), Value::Null);
                }
            }),
        ));
        out.push((
            "data: memoryMap null",
            with_data(&|d| d["machineState"]["0"]["memoryMap"] = Value::Null),
        ));
        out.push((
            "data: a fractional size",
            with_data(&|d| {
                if let Some(m) = d["machineState"]["0"]["memoryMap"].as_object_mut() {
                    for t in m.values_mut() {
                        t["free"] = json!(1.5);
                    }
                }
            }),
        ));
        out.push(("data not JSON", edit(&|w| w["data"] = json!("{"))));
        out.push(("data empty", edit(&|w| w["data"] = json!(""))));
        out.push((
            "data and dataChecksum removed",
            edit(&|w| {
                let o = w.as_object_mut().unwrap();
                o.remove("data");
                o.remove("dataChecksum");
            }),
        ));
    }
    let body = &file[1..];
    out.push((
        "repeated policyName first",
        format!("{{\"policyName\":\"other\",{body}"),
    ));
    out.push((
        "repeated policyName last",
        format!("{},\"policyName\":\"other\"}}", &file[..file.len() - 1]),
    ));
    out.push((
        "case-folded key",
        file.replacen("\"machineState\"", "\"MACHINESTATE\"", 1),
    ));
    out.push((
        "case-folded data key",
        file.replacen("\"data\"", "\"DATA\"", 1),
    ));
    out.push((
        "node key +0",
        file.replacen("\"machineState\":{\"0\"", "\"machineState\":{\"+0\"", 1),
    ));
    out.push((
        "node key x",
        file.replacen("\"machineState\":{\"0\"", "\"machineState\":{\"x\"", 1),
    ));
    out.push((
        "memory table null (legacy view)",
        edit(&|w| w["machineState"]["0"]["memoryMap"]["memory"] = Value::Null),
    ));
    out.push((
        "machineState null",
        edit(&|w| w["machineState"] = Value::Null),
    ));
    out.push((
        "negative numberOfAssignments",
        edit(&|w| w["machineState"]["0"]["numberOfAssignments"] = json!(-3)),
    ));
    out.push((
        "a size of -1",
        edit(&|w| {
            if let Some(m) = w["machineState"]["0"]["memoryMap"].as_object_mut() {
                for t in m.values_mut() {
                    t["total"] = json!(-1);
                }
            }
        }),
    ));
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    out.push((
        "unknown member at depth 9999",
        format!("{{\"x\":{},{body}", nest(9_999)),
    ));
    out.push((
        "unknown member at depth 10000",
        format!("{{\"x\":{},{body}", nest(10_000)),
    ));
    out.push(("trailing garbage", format!("{file} x")));
    out.push(("null", "null".into()));
    out
}

/// The kubelet's in-memory view of a state (its `Clone`s: nil lists become empty, nil maps
/// empty ones, except `memoryMap` and `numaAffinity`).
fn kubelet_view(s: &memory_checkpoint::MemoryState, pods: bool) -> Value {
    let ints = |v: &Option<Vec<i64>>| json!(v.clone().unwrap_or_default());
    let blocks = |b: &Option<Vec<memory_checkpoint::Block>>| {
        Value::Array(
            b.iter()
                .flatten()
                .map(|b| json!({"numaAffinity": b.numa_affinity, "type": b.resource, "size": b.size}))
                .collect(),
        )
    };
    let machine: serde_json::Map<String, Value> = s
        .machine_state
        .iter()
        .flatten()
        .map(|(id, n)| {
            let v = n.as_ref().map_or(Value::Null, |n| {
                let mm = n.memory_map.as_ref().map_or(Value::Null, |m| {
                    m.iter()
                        .map(|(k, t)| {
                            let t = t.expect("null tables are refused");
                            (k.clone(), json!({"total": t.total, "systemReserved": t.system_reserved,
                                "allocatable": t.allocatable, "reserved": t.reserved, "free": t.free}))
                        })
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                });
                json!({"numberOfAssignments": n.number_of_assignments, "memoryMap": mm, "cells": ints(&n.cells)})
            });
            (id.to_string(), v)
        })
        .collect();
    let entries: serde_json::Map<String, Value> = s
        .entries
        .iter()
        .flatten()
        .map(|(uid, cs)| {
            let cs: serde_json::Map<String, Value> = cs
                .iter()
                .flatten()
                .map(|(c, b)| (c.clone(), blocks(b)))
                .collect();
            (uid.clone(), Value::Object(cs))
        })
        .collect();
    let pod_entries: serde_json::Map<String, Value> = s
        .pod_entries
        .iter()
        .flatten()
        .filter(|_| pods)
        .map(|(uid, b)| {
            let v = if b.as_ref().is_some_and(|b| !b.is_empty()) {
                json!({ "memoryBlocks": blocks(b) })
            } else {
                json!({})
            };
            (uid.clone(), v)
        })
        .collect();
    json!({"policyName": s.policy_name, "machineState": machine, "entries": entries, "podEntries": pod_entries})
}

fn ours_memory(text: &str, pods: bool) -> Option<Value> {
    let c = memory_checkpoint::parse(text).ok()?;
    let s = c.trusted().ok()?;
    Some(kubelet_view(s, pods))
}

fn theirs_memory(a: &Value) -> Option<Value> {
    (a["ok"] == json!(true)).then(|| {
        json!({"policyName": a["policyName"].as_str().unwrap_or_default(),
               "machineState": a["machineState"], "entries": a["entries"], "podEntries": a["podEntries"]})
    })
}

#[test]
fn memory_checkpoints_read_as_the_kubelet_restores_and_write_its_bytes() {
    let Some(bin) = oracle_or_skip() else { return };
    let mut r = SplitMix(0x3e30_c0de);
    let states: Vec<Value> = (0..60).map(|_| random_memory_state(&mut r)).collect();
    let writes: Vec<Value> = states
        .iter()
        .flat_map(|s| {
            [1, 2, 3].map(|version| {
                let mut w = s.clone();
                w["op"] = json!("write-memory");
                w["version"] = json!(version);
                w
            })
        })
        .collect();
    let files = ask(&bin, &writes);

    // Our writer: the kubelet's bytes for every version.
    for (w, f) in writes.iter().zip(&files) {
        assert_eq!(f["ok"], json!(true), "{w}: {f}");
        let file = f["file"].as_str().unwrap();
        let state = memory_checkpoint::parse(file).unwrap().state;
        let format = match w["version"].as_u64() {
            Some(1) => MemoryCheckpointFormat::V1,
            Some(2) => MemoryCheckpointFormat::V2,
            _ => MemoryCheckpointFormat::V3,
        };
        assert_eq!(memory_checkpoint::render(&state, format), file, "{w}");
    }

    // Our reader: the kubelet's verdict and state on every file and variant, with the
    // PodLevelResourceManagers gate off (its default) and on.
    // (The deep variants, 10,000 levels each, on one file in ten.)
    let mut cases = Vec::new();
    for (i, f) in files.iter().enumerate() {
        for (what, text) in memory_variants(f["file"].as_str().unwrap()) {
            if what.contains("depth") && i % 10 != 0 {
                continue;
            }
            for gate in [false, true] {
                cases.push((what, text.clone(), gate));
            }
        }
    }
    let reads: Vec<Value> = cases
        .iter()
        .map(|(_, t, gate)| json!({"op": "read-memory", "file": t, "podLevelResourceManagers": gate}))
        .collect();
    let answers = ask(&bin, &reads);
    let (mut accepted, mut refused, mut panics) = (0, 0, 0);
    let mut per_variant: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((what, text, gate), a) in cases.iter().zip(&answers) {
        let (k, o) = (theirs_memory(a), ours_memory(text, *gate));
        let shown: String = text.chars().take(400).collect();
        assert_eq!(o, k, "{what} (gate {gate}): {shown}\nkubelet: {a}");
        let e = per_variant.entry(what).or_default();
        if k.is_some() {
            accepted += 1;
            e.0 += 1;
        } else {
            refused += 1;
            e.1 += 1;
            panics += usize::from(a["panic"] == json!(true));
        }
    }
    eprintln!(
        "memory checkpoint oracle: {} files written by the kubelet (all rendered byte-identical), {} reads compared: {accepted} accepted, {refused} refused ({panics} of them a kubelet panic); per variant (accepted, refused): {per_variant:?}",
        files.len(),
        cases.len()
    );
    assert!(accepted > 300 && refused > 300 && panics > 0);
}
