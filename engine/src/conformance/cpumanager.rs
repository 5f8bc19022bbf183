//! Evaluation of `cpumanager-*.json` vector files (schema: `README-cpumanager.md` beside the
//! vectors). Every case array of a file is evaluated; an array this evaluator does not know
//! is an error rather than silently skipped, so a new vector kind cannot pass by accident.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{CaseResult, ConformanceError, Topologies};
use crate::cpumanager::{
    generate_cpu_topology_hints, pod_guaranteed_cpus, take_by_topology_numa_distributed,
    take_by_topology_numa_packed, CpuAccumulator, CpuSortingStrategy, CpuState, StaticPolicy,
    StaticPolicyOptions,
};
use crate::cpuset::CpuSet;
use crate::pod::{Container, Pod, QosClass, ResourceList};
use crate::topology::{CpuInfo, CpuTopology, DeclaredCounts, NumaNode};
use crate::topologymanager::{NumaMask, TopologyHint};

type R<T> = Result<T, String>;

fn field<'a>(c: &'a Value, name: &str) -> R<&'a Value> {
    c.get(name).ok_or_else(|| format!("missing field {name:?}"))
}

fn as_str<'a>(c: &'a Value, name: &str) -> R<&'a str> {
    field(c, name)?
        .as_str()
        .ok_or_else(|| format!("field {name:?} is not a string"))
}

fn opt_str<'a>(c: &'a Value, name: &str) -> R<Option<&'a str>> {
    match c.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| format!("field {name:?} is not a string or null")),
    }
}

fn as_usize(c: &Value, name: &str) -> R<usize> {
    field(c, name)?
        .as_u64()
        .map(|v| v as usize)
        .ok_or_else(|| format!("field {name:?} is not a non-negative integer"))
}

fn as_bool(c: &Value, name: &str) -> R<bool> {
    field(c, name)?
        .as_bool()
        .ok_or_else(|| format!("field {name:?} is not a boolean"))
}

fn cpus(c: &Value, name: &str) -> R<CpuSet> {
    let s = as_str(c, name)?;
    CpuSet::parse(s).map_err(|e| format!("field {name:?}: {e}"))
}

fn opt_cpus(c: &Value, name: &str) -> R<Option<CpuSet>> {
    match opt_str(c, name)? {
        None => Ok(None),
        Some(s) => CpuSet::parse(s)
            .map(Some)
            .map_err(|e| format!("field {name:?}: {e}")),
    }
}

fn ids(c: &Value, name: &str) -> R<Vec<usize>> {
    field(c, name)?
        .as_array()
        .ok_or_else(|| format!("field {name:?} is not an array"))?
        .iter()
        .map(|v| {
            v.as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| format!("field {name:?} holds a non-integer"))
        })
        .collect()
}

fn topology<'a>(c: &Value, topologies: &'a Topologies) -> R<&'a CpuTopology> {
    let name = as_str(c, "topology")?;
    topologies
        .get(name)
        .ok_or_else(|| format!("unknown topology {name:?} (not in any cpumanager-topologies*.json or the file's \"topologies\")"))
}

/// Reads the machines of a `cpumanager-topologies*.json` file (or a case file's top-level
/// `topologies` object), keeping their declared counts.
pub fn load_topologies(file: &str, json: &Value) -> Result<Topologies, ConformanceError> {
    let bad = |reason: String| ConformanceError::Malformed {
        file: file.to_string(),
        reason,
    };
    let obj = json
        .as_object()
        .ok_or_else(|| bad("topologies must be a JSON object of name -> machine".into()))?;
    let mut out = Topologies::new();
    for (name, t) in obj {
        let ctx = |e: String| bad(format!("topology {name:?}: {e}"));
        let list = field(t, "cpus")
            .map_err(ctx)?
            .as_array()
            .ok_or_else(|| ctx("field \"cpus\" is not an array".into()))?;
        let mut cpus = Vec::new();
        for c in list {
            // `uncore: null` is Go's zero value.
            let uncore = match c.get("uncore") {
                None | Some(Value::Null) => 0,
                Some(_) => as_usize(c, "uncore").map_err(ctx)?,
            };
            cpus.push(CpuInfo {
                id: as_usize(c, "id").map_err(ctx)?,
                core: as_usize(c, "core").map_err(ctx)?,
                socket: as_usize(c, "socket").map_err(ctx)?,
                numa: as_usize(c, "numa").map_err(ctx)?,
                uncore,
            });
        }
        let declared = DeclaredCounts {
            num_cpus: as_usize(t, "num_cpus").map_err(ctx)?,
            num_cores: as_usize(t, "num_cores").map_err(ctx)?,
            num_sockets: as_usize(t, "num_sockets").map_err(ctx)?,
            num_numa_nodes: as_usize(t, "num_numa_nodes").map_err(ctx)?,
            num_uncore_caches: as_usize(t, "num_uncore_cache").map_err(ctx)?,
        };
        let node_ids: BTreeSet<usize> = cpus.iter().map(|c| c.numa).collect();
        let nodes = node_ids
            .into_iter()
            .map(|id| NumaNode {
                id,
                cpus: cpus.iter().filter(|c| c.numa == id).map(|c| c.id).collect(),
                distances: None,
                memory_bytes: None,
                hugepages: vec![],
            })
            .collect();
        let topo =
            CpuTopology::new(cpus, nodes, vec![], declared).map_err(|e| ctx(e.to_string()))?;
        out.insert(name.clone(), topo);
    }
    Ok(out)
}

/// The case arrays this evaluator knows.
const ARRAYS: [&str; 8] = [
    "cases",
    "accumulator_cases",
    "start_cases",
    "remove_cases",
    "allocate_cpus_cases",
    "pod_sequence_cases",
    "pod_guaranteed_cpus_cases",
    "topologies",
];

/// Evaluates every case array of a `cpumanager-*.json` file against the engine.
pub fn evaluate(
    file: &str,
    json: &Value,
    topologies: &Topologies,
) -> Result<Vec<CaseResult>, ConformanceError> {
    let obj = json
        .as_object()
        .ok_or_else(|| ConformanceError::Malformed {
            file: file.to_string(),
            reason: "top level must be a JSON object of case arrays".into(),
        })?;
    let mut out = Vec::new();
    for (array, value) in obj {
        if !ARRAYS.contains(&array.as_str()) {
            return Err(ConformanceError::Malformed {
                file: file.to_string(),
                reason: format!("unknown case array {array:?}"),
            });
        }
        if array == "topologies" {
            continue;
        }
        let list = value
            .as_array()
            .ok_or_else(|| ConformanceError::Malformed {
                file: file.to_string(),
                reason: format!("{array:?} is not an array"),
            })?;
        for (i, case) in list.iter().enumerate() {
            let name = case
                .get("name")
                .and_then(Value::as_str)
                .or_else(|| case.get("source").and_then(Value::as_str))
                .unwrap_or("");
            let outcome = match array.as_str() {
                "cases" => {
                    if case.get("function").is_some() {
                        take_case(case, topologies)
                    } else if case.get("mode").is_some() {
                        hints_case(case, topologies)
                    } else {
                        allocate_case(case, topologies)
                    }
                }
                "accumulator_cases" => accumulator_case(case, topologies),
                "start_cases" => start_case(case, topologies),
                "remove_cases" => remove_case(case, topologies),
                "allocate_cpus_cases" => allocate_cpus_case(case, topologies),
                "pod_sequence_cases" => pod_sequence_case(case, topologies),
                _ => pod_guaranteed_case(case),
            };
            out.push(CaseResult {
                case: format!("{array}[{i}] {name}"),
                failure: outcome.err(),
            });
        }
    }
    Ok(out)
}

fn check<T: PartialEq + std::fmt::Debug>(what: &str, expected: T, got: T) -> R<()> {
    if expected == got {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected:?}, got {got:?}"))
    }
}

fn check_set(what: &str, expected: &CpuSet, got: &CpuSet) -> R<()> {
    if expected == got {
        Ok(())
    } else {
        Err(format!("{what}: expected \"{expected}\", got \"{got}\""))
    }
}

fn take_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let available = cpus(c, "available")?;
    let n = as_usize(c, "request")?;
    let strategy = match as_str(c, "sorting")? {
        "packed" => CpuSortingStrategy::Packed,
        "spread" => CpuSortingStrategy::Spread,
        other => return Err(format!("unknown sorting {other:?}")),
    };
    let got = match as_str(c, "function")? {
        "packed" => {
            let uncore = as_bool(c, "prefer_align_uncore")?;
            take_by_topology_numa_packed(t, &available, n, strategy, uncore)
        }
        "distributed" => {
            let g = as_usize(c, "cpu_group_size")?;
            let by_socket = c
                .get("align_by_socket")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            take_by_topology_numa_distributed(t, &available, n, g, strategy, by_socket)
        }
        other => return Err(format!("unknown function {other:?}")),
    };
    expect_result(c, got.map_err(|e| e.to_string()))
}

/// Compares a take result with `expect` / `expect_error`.
fn expect_result(c: &Value, got: Result<CpuSet, String>) -> R<()> {
    match (opt_str(c, "expect_error")?, got) {
        (Some(e), Err(g)) => check("error", e, g.as_str()),
        (Some(e), Ok(s)) => Err(format!("expected error {e:?}, got \"{s}\"")),
        (None, Err(g)) => Err(format!("unexpected error {g:?}")),
        (None, Ok(s)) => check_set("cpus", &cpus(c, "expect")?, &s),
    }
}

fn accumulator_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let available = cpus(c, "available")?;
    let method = as_str(c, "method")?;
    let n = if method == "take" {
        as_usize(c, "num_cpus")?
    } else {
        0
    };
    let mut acc = CpuAccumulator::new(t, &available, n, CpuSortingStrategy::Packed);
    let ordered = c
        .get("order_checked")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let cmp = |what: &str, expected: Vec<usize>, mut got: Vec<usize>| {
        let mut expected = expected;
        if !ordered {
            expected.sort_unstable();
            got.sort_unstable();
        }
        check(what, expected, got)
    };
    match method {
        "freeSockets" => cmp("free sockets", ids(c, "expect")?, acc.free_sockets()),
        "freeNUMANodes" => cmp("free NUMA nodes", ids(c, "expect")?, acc.free_numa_nodes()),
        "freeCores" => cmp("free cores", ids(c, "expect")?, acc.free_cores()),
        "freeCPUs" => cmp("free cpus", ids(c, "expect")?, acc.free_cpus()),
        "freeSocketsAndNUMANodes" => {
            cmp(
                "free sockets",
                ids(c, "expect_sockets")?,
                acc.free_sockets(),
            )?;
            cmp(
                "free NUMA nodes",
                ids(c, "expect_numa_nodes")?,
                acc.free_numa_nodes(),
            )
        }
        "take" => {
            let seq = field(c, "take_sequence")?
                .as_array()
                .ok_or("field \"take_sequence\" is not an array")?;
            for s in seq {
                let s = s.as_str().ok_or("take_sequence holds a non-string")?;
                let set = CpuSet::parse(s).map_err(|e| format!("take_sequence: {e}"))?;
                acc.take(&set);
            }
            check(
                "satisfied",
                as_bool(c, "expect_satisfied")?,
                acc.is_satisfied(),
            )?;
            check("failed", as_bool(c, "expect_failed")?, acc.is_failed())?;
            check(
                "cpus needed",
                as_usize(c, "expect_num_cpus_needed")? as i64,
                acc.needed(),
            )
        }
        other => Err(format!("unknown accumulator method {other:?}")),
    }
}

/// Parses a CPU amount: an integer (CPUs) or a string quantity ("2", "977m").
fn millis(v: &Value, what: &str) -> R<u64> {
    if let Some(n) = v.as_u64() {
        return Ok(n * 1000);
    }
    let s = v
        .as_str()
        .ok_or_else(|| format!("{what} is neither an integer nor a quantity string"))?;
    let parsed = match s.strip_suffix('m') {
        Some(m) => m.parse::<u64>().ok(),
        None => s.parse::<u64>().ok().map(|n| n * 1000),
    };
    parsed.ok_or_else(|| format!("{what}: unsupported CPU quantity {s:?}"))
}

/// A container with CPU request/limit and memory request = limit (so the QoS class is
/// decided by the CPU values, as in the kubelet tests' pods).
fn container(name: &str, req_millis: u64, lim_millis: u64, restartable: bool) -> Container {
    let mem = Some(1 << 30);
    Container {
        name: name.to_string(),
        requests: ResourceList {
            cpu_millis: Some(req_millis),
            memory_bytes: mem,
            ..Default::default()
        },
        limits: ResourceList {
            cpu_millis: Some(lim_millis),
            memory_bytes: mem,
            ..Default::default()
        },
        restartable,
    }
}

fn assignments(c: &Value) -> R<BTreeMap<String, BTreeMap<String, CpuSet>>> {
    let mut out: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    let Some(obj) = c.get("assignments").and_then(Value::as_object) else {
        return Ok(out);
    };
    for (key, v) in obj {
        let (pod, cont) = key
            .split_once('/')
            .ok_or_else(|| format!("assignment key {key:?} is not pod/container"))?;
        let s = v
            .as_str()
            .ok_or_else(|| format!("assignment {key:?} is not a string"))?;
        let set = CpuSet::parse(s).map_err(|e| format!("assignment {key:?}: {e}"))?;
        out.entry(pod.to_string())
            .or_default()
            .insert(cont.to_string(), set);
    }
    Ok(out)
}

fn state(c: &Value) -> R<CpuState> {
    Ok(CpuState {
        default_cpuset: opt_cpus(c, "default_cpuset")?.unwrap_or_default(),
        assignments: assignments(c)?,
    })
}

fn options(c: &Value) -> R<StaticPolicyOptions> {
    let raw: BTreeMap<String, String> = match c.get("options_raw") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => v
            .as_object()
            .ok_or("field \"options_raw\" is not an object")?
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| format!("option {k:?} is not a string"))
            })
            .collect::<R<_>>()?,
    };
    let o = StaticPolicyOptions::from_map(&raw).map_err(|e| format!("options: {e}"))?;
    if let Some(b) = c.get("options").and_then(Value::as_object) {
        let m = o.to_map();
        for (k, v) in b {
            let on = v.as_bool().unwrap_or(false);
            if on != m.contains_key(k) {
                return Err(format!(
                    "options_raw and options disagree on {k:?} (parsed {})",
                    !on
                ));
            }
        }
    }
    Ok(o)
}

fn policy(c: &Value, t: &CpuTopology, reserved_field: &str) -> R<StaticPolicy> {
    let reserved = opt_cpus(c, reserved_field)?.unwrap_or_default();
    StaticPolicy::new_kubelet(
        t.clone(),
        as_usize(c, "num_reserved")?,
        &reserved,
        options(c)?,
    )
    .map_err(|e| format!("policy: {e}"))
}

fn hint(c: &Value, name: &str) -> R<Option<TopologyHint>> {
    match c.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(h) => {
            let aff = match h.get("affinity") {
                None | Some(Value::Null) => None,
                Some(_) => Some(NumaMask::new(ids(h, "affinity")?).map_err(|e| e.to_string())?),
            };
            Ok(Some(TopologyHint {
                affinity: aff,
                preferred: as_bool(h, "preferred")?,
            }))
        }
    }
}

fn qos(s: &str) -> R<QosClass> {
    match s {
        "Guaranteed" => Ok(QosClass::Guaranteed),
        "Burstable" => Ok(QosClass::Burstable),
        "BestEffort" => Ok(QosClass::BestEffort),
        o => Err(format!("unknown qos {o:?}")),
    }
}

fn allocate_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let p = policy(c, t, "reserved")?;
    let mut st = state(c)?;
    let uid = as_str(c, "pod_uid")?;
    if c.get("allocate_all_containers").and_then(Value::as_bool) == Some(true) {
        let list = field(c, "containers")?
            .as_array()
            .ok_or("field \"containers\" is not an array")?;
        let mut pod = Pod {
            uid: uid.to_string(),
            ..Default::default()
        };
        for k in list {
            let cont = container(
                as_str(k, "name")?,
                millis(field(k, "request_cpus")?, "request_cpus")?,
                millis(field(k, "limit_cpus")?, "limit_cpus")?,
                false,
            );
            match as_str(k, "kind")? {
                "init" => pod.init_containers.push(cont),
                _ => pod.containers.push(cont),
            }
        }
        let mut given = CpuSet::new();
        let mut first: Option<CpuSet> = None;
        for k in pod.all_containers() {
            p.allocate(&mut st, &pod, k, None).map_err(|e| {
                format!("container {}: unexpected error {:?}", k.name, e.to_string())
            })?;
            let got = st.get(uid, &k.name).cloned().unwrap_or_default();
            first.get_or_insert_with(|| got.clone());
            given = given.union(&got);
        }
        if as_bool(c, "expect_alloc")? {
            return check_set(
                "first container's cpus",
                &cpus(c, "expect_cpuset")?,
                &first.unwrap_or_default(),
            );
        }
        let ids: CpuSet = t.ids_of(&given, |ci| ci.uncore).into_iter().collect();
        return check_set(
            "uncore cache ids",
            &cpus(c, "expect_uncore_cache_ids")?,
            &ids,
        );
    }
    let name = as_str(c, "container_name")?;
    let req = millis(field(c, "request_cpus")?, "request_cpus")?;
    let lim = millis(field(c, "limit_cpus")?, "limit_cpus")?;
    let pod = Pod {
        uid: uid.to_string(),
        containers: vec![container(name, req, lim, false)],
        ..Default::default()
    };
    check(
        "qos class of the modelled pod",
        qos(as_str(c, "qos")?)?,
        pod.qos_class(),
    )?;
    let before = st.clone();
    let h = hint(c, "topology_hint")?;
    let r = p.allocate(&mut st, &pod, &pod.containers[0], h.as_ref());
    match (opt_str(c, "expect_error")?, r) {
        (Some(e), Err(g)) => {
            check("error", e, g.to_string().as_str())?;
            check("state after a failed allocation", &before, &st)
        }
        (Some(e), Ok(())) => Err(format!("expected error {e:?}, got success")),
        (None, Err(g)) => Err(format!("unexpected error {:?}", g.to_string())),
        (None, Ok(())) => {
            let got = st.get(uid, name).cloned();
            if as_bool(c, "expect_alloc")? {
                let want = cpus(c, "expect_cpuset")?;
                let got = got.ok_or("container has no assignment")?;
                check_set("cpus", &want, &got)?;
                if !want.is_disjoint(&st.default_cpuset) {
                    return Err(format!(
                        "allocated cpus \"{want}\" still in the default set \"{}\"",
                        st.default_cpuset
                    ));
                }
                Ok(())
            } else {
                check("assignment", None, got)
            }
        }
    }
}

fn start_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let want_err = opt_str(c, "expect_error")?;
    let stage = opt_str(c, "expect_error_stage")?;
    let reserved = opt_cpus(c, "reserved_explicit")?.unwrap_or_default();
    let p = match StaticPolicy::new_kubelet(
        t.clone(),
        as_usize(c, "num_reserved")?,
        &reserved,
        options(c)?,
    ) {
        Ok(p) => p,
        Err(e) => {
            return match (want_err, stage) {
                (Some(w), Some("new")) => check("error", w, e.to_string().as_str()),
                _ => Err(format!("unexpected policy error {:?}", e.to_string())),
            }
        }
    };
    if let Some(r) = opt_cpus(c, "expect_reserved")? {
        check_set("reserved", &r, p.reserved())?;
    }
    let mut st = state(c)?;
    match (want_err, p.start(&mut st)) {
        (Some(w), Err(e)) => {
            check("error stage", Some("start"), stage)?;
            check("error", w, e.to_string().as_str())
        }
        (Some(w), Ok(())) => Err(format!("expected error {w:?}, got success")),
        (None, Err(e)) => Err(format!("unexpected error {:?}", e.to_string())),
        (None, Ok(())) => check_set(
            "default cpuset",
            &cpus(c, "expect_default_cpuset")?,
            &st.default_cpuset,
        ),
    }
}

fn remove_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let p = policy(c, t, "reserved")?;
    let mut st = state(c)?;
    let uid = as_str(c, "remove_pod_uid")?;
    let name = as_str(c, "remove_container_name")?;
    p.remove_container(&mut st, uid, name);
    check_set(
        "default cpuset",
        &cpus(c, "expect_default_cpuset")?,
        &st.default_cpuset,
    )?;
    if as_bool(c, "expect_container_absent")? {
        check("assignment", None, st.get(uid, name))?;
    }
    Ok(())
}

fn allocate_cpus_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let p = policy(c, t, "reserved")?;
    let mut st = state(c)?;
    p.start(&mut st).map_err(|e| format!("start: {e}"))?;
    let mask = match c.get("numa_affinity") {
        None | Some(Value::Null) => None,
        Some(_) => Some(NumaMask::new(ids(c, "numa_affinity")?).map_err(|e| e.to_string())?),
    };
    let reusable = opt_cpus(c, "reusable")?.unwrap_or_default();
    let got = p
        .allocate_cpus(&mut st, as_usize(c, "request")?, mask, &reusable)
        .map_err(|e| format!("unexpected error {:?}", e.to_string()))?;
    check_set("cpus", &cpus(c, "expect_cpuset")?, &got)
}

fn pod_sequence_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let p = policy(c, t, "reserved")?;
    let mut st = state(c)?;
    let uid = as_str(c, "pod_uid")?;
    let mut pod = Pod {
        uid: uid.to_string(),
        ..Default::default()
    };
    for k in field(c, "containers")?
        .as_array()
        .ok_or("field \"containers\" is not an array")?
    {
        let restartable = opt_str(k, "restart_policy")? == Some("Always");
        let cont = container(
            as_str(k, "name")?,
            millis(field(k, "request_cpus")?, "request_cpus")?,
            millis(field(k, "limit_cpus")?, "limit_cpus")?,
            restartable,
        );
        match as_str(k, "kind")? {
            "init" => pod.init_containers.push(cont),
            _ => pod.containers.push(cont),
        }
    }
    for (i, step) in field(c, "steps")?
        .as_array()
        .ok_or("field \"steps\" is not an array")?
        .iter()
        .enumerate()
    {
        match as_str(step, "op")? {
            "allocate_all_in_order" => {
                let ignore = as_bool(step, "errors_ignored")?;
                for k in pod.all_containers() {
                    if let Err(e) = p.allocate(&mut st, &pod, k, None) {
                        if !ignore {
                            return Err(format!("step {i}: container {}: {e}", k.name));
                        }
                    }
                }
            }
            "remove_container" => {
                let name = as_str(step, "container_name")?;
                p.remove_container(&mut st, uid, name);
                if step.get("expect_container_absent").and_then(Value::as_bool) == Some(true) {
                    check(&format!("step {i}: assignment"), None, st.get(uid, name))?;
                }
            }
            other => return Err(format!("step {i}: unknown op {other:?}")),
        }
        check_set(
            &format!("step {i}: default cpuset"),
            &cpus(step, "expect_default_cpuset")?,
            &st.default_cpuset,
        )?;
    }
    Ok(())
}

fn hints_case(c: &Value, topologies: &Topologies) -> R<()> {
    let t = topology(c, topologies)?;
    let p = policy_for_hints(c, t)?;
    let st = state(c)?;
    let uid = as_str(c, "pod_uid")?;
    let name = as_str(c, "container_name")?;
    let n = as_usize(c, "request")? as u64 * 1000;
    let pod = Pod {
        uid: uid.to_string(),
        containers: vec![container(name, n, n, false)],
        ..Default::default()
    };
    let got = match as_str(c, "mode")? {
        "container" => p.container_hints(&st, &pod, &pod.containers[0]),
        "pod" => p.pod_hints(&st, &pod),
        other => return Err(format!("unknown mode {other:?}")),
    };
    // The generator's own entry point must agree on the "fresh" and "regenerate" paths.
    if let (Some(avail), Some(reusable)) = (opt_cpus(c, "available")?, opt_cpus(c, "reusable")?) {
        let direct = generate_cpu_topology_hints(
            t,
            &avail,
            &reusable,
            as_usize(c, "request")?,
            p.options().align_by_socket,
        );
        check("generate_cpu_topology_hints", Some(&direct), got.as_ref())?;
    }
    let mut got: Vec<(Vec<usize>, bool)> = got
        .unwrap_or_default()
        .into_iter()
        .map(|h| {
            (
                h.affinity.map(|m| m.ids().collect()).unwrap_or_default(),
                h.preferred,
            )
        })
        .collect();
    let mut want: Vec<(Vec<usize>, bool)> = match c.get("expect") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => v
            .as_array()
            .ok_or("field \"expect\" is not an array")?
            .iter()
            .map(|h| Ok((ids(h, "affinity")?, as_bool(h, "preferred")?)))
            .collect::<R<_>>()?,
    };
    got.sort();
    want.sort();
    check("hints", want, got)
}

fn policy_for_hints(c: &Value, t: &CpuTopology) -> R<StaticPolicy> {
    let reserved = opt_cpus(c, "reserved")?.unwrap_or_default();
    StaticPolicy::new_kubelet(t.clone(), reserved.len(), &reserved, options(c)?)
        .map_err(|e| format!("policy: {e}"))
}

fn pod_guaranteed_case(c: &Value) -> R<()> {
    let mut pod = Pod {
        uid: "pod".into(),
        ..Default::default()
    };
    for (list, init) in [("init_containers", true), ("app_containers", false)] {
        for (i, k) in field(c, list)?
            .as_array()
            .ok_or_else(|| format!("field {list:?} is not an array"))?
            .iter()
            .enumerate()
        {
            let restartable = opt_str(k, "restart_policy")? == Some("Always");
            let cont = container(
                &format!("{list}-{i}"),
                millis(field(k, "request_cpus")?, "request_cpus")?,
                millis(field(k, "limit_cpus")?, "limit_cpus")?,
                restartable,
            );
            if init {
                pod.init_containers.push(cont);
            } else {
                pod.containers.push(cont);
            }
        }
    }
    check(
        "guaranteed cpus",
        as_usize(c, "expect_guaranteed_cpus")?,
        pod_guaranteed_cpus(&pod),
    )
}
