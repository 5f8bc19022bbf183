//! Evaluation of `topologymanager-*.json` vector files (schema:
//! `engine/tests/vectors/README-topologymanager.md`).
//!
//! Every case array of the three files is understood: bitmask operations, merge cases
//! (through **both** the reference and the product merge; either one differing fails the
//! case), the single-NUMA filter, the best-non-preferred count, single fold comparisons,
//! average distances, `Closest`, NUMA info, option parsing/availability and manager
//! construction. Merge cases may use any NUMA ids 0..=63 (any node count up to 64); when the
//! reference refuses a case whose cross product is too large to enumerate, only the product
//! merge is checked and the case still counts.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CaseResult, ConformanceError};
use crate::topologymanager::lists::{filter_single_numa, narrowest_count, Chooser};
use crate::topologymanager::options::{check_option_available, OptionGates, OptionLevel};
use crate::topologymanager::{
    fast, mask, reference, ManagerConfig, NumaInfo, NumaMask, ProviderHints, ResourceHints,
    TmError, TmOptions, TmPolicy, TopologyHint,
};

type Res<T> = Result<T, String>;

/// The shared signature of the two merge implementations.
type MergeFn = fn(
    TmPolicy,
    &NumaInfo,
    &TmOptions,
    &[ProviderHints],
) -> Result<crate::topologymanager::MergeResult, TmError>;

/// Evaluates every case array of a `topologymanager-*.json` file against the engine (through
/// both the reference and the product merge).
pub fn evaluate(file: &str, json: &Value) -> Result<Vec<CaseResult>, ConformanceError> {
    let obj = json
        .as_object()
        .ok_or_else(|| ConformanceError::Malformed {
            file: file.to_string(),
            reason: "top level is not a JSON object".into(),
        })?;
    let mut out = Vec::new();
    let mut arrays = 0;
    for (array, value) in obj {
        let Some(cases) = value.as_array() else {
            continue;
        };
        let eval: fn(&Value) -> Res<Option<String>> = match array.as_str() {
            "cases" | "derived_edge_cases" => eval_case,
            "filter_single_numa_cases" => eval_filter,
            "max_of_min_cases" => eval_max_of_min,
            "compare_cases" => eval_compare,
            "closest_cases" => eval_closest,
            "numa_info_cases" => eval_numa_info,
            "option_cases" => eval_option,
            "manager_cases" => eval_manager,
            _ => {
                return Err(ConformanceError::Malformed {
                    file: file.to_string(),
                    reason: format!("unknown case array {array:?}"),
                })
            }
        };
        arrays += 1;
        for (i, case) in cases.iter().enumerate() {
            let label = case
                .get("name")
                .and_then(Value::as_str)
                .or_else(|| case.get("source").and_then(Value::as_str))
                .unwrap_or("");
            let failure = match eval(case) {
                Ok(f) => f,
                Err(e) => Err(ConformanceError::Malformed {
                    file: file.to_string(),
                    reason: format!("{array}[{i}] {label}: {e}"),
                })?,
            };
            out.push(CaseResult {
                case: format!("{array}[{i}] {label}"),
                failure,
            });
        }
    }
    if arrays == 0 {
        return Err(ConformanceError::Malformed {
            file: file.to_string(),
            reason: "no case arrays found".into(),
        });
    }
    Ok(out)
}

fn field<'a>(v: &'a Value, name: &str) -> Res<&'a Value> {
    v.get(name).ok_or_else(|| format!("missing field {name:?}"))
}

fn str_field<'a>(v: &'a Value, name: &str) -> Res<&'a str> {
    field(v, name)?
        .as_str()
        .ok_or_else(|| format!("field {name:?} is not a string"))
}

fn bool_field(v: &Value, name: &str) -> Res<bool> {
    field(v, name)?
        .as_bool()
        .ok_or_else(|| format!("field {name:?} is not a boolean"))
}

fn ints(v: &Value, what: &str) -> Res<Vec<i64>> {
    v.as_array()
        .ok_or_else(|| format!("{what} is not an array"))?
        .iter()
        .map(|x| {
            x.as_i64()
                .ok_or_else(|| format!("{what} holds a non-integer: {x}"))
        })
        .collect()
}

fn mask_of(v: &Value, what: &str) -> Res<NumaMask> {
    NumaMask::from_signed(ints(v, what)?).map_err(|e| format!("{what}: {e}"))
}

fn mask_json(m: NumaMask) -> String {
    format!("{:?}", m.ids().collect::<Vec<_>>())
}

fn hint_of(v: &Value, what: &str) -> Res<TopologyHint> {
    let affinity = match field(v, "affinity")? {
        Value::Null => None,
        a => Some(mask_of(a, what)?),
    };
    Ok(TopologyHint {
        affinity,
        preferred: bool_field(v, "preferred")?,
    })
}

fn hints_of(v: &Value, what: &str) -> Res<Vec<TopologyHint>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a.iter().map(|h| hint_of(h, what)).collect(),
        _ => Err(format!("{what} is not a hint list")),
    }
}

fn show_hint(h: &TopologyHint) -> String {
    match h.affinity {
        None => format!("{{affinity: null, preferred: {}}}", h.preferred),
        Some(m) => format!("{{affinity: {}, preferred: {}}}", mask_json(m), h.preferred),
    }
}

fn rows_of(v: &Value) -> Res<Option<Vec<Vec<u64>>>> {
    match v {
        Value::Null => Ok(None),
        Value::Array(rows) => rows
            .iter()
            .map(|r| {
                ints(r, "distance row")?
                    .into_iter()
                    .map(|d| u64::try_from(d).map_err(|_| format!("negative distance {d}")))
                    .collect()
            })
            .collect::<Res<Vec<_>>>()
            .map(Some),
        _ => Err("distances is neither null nor an array".into()),
    }
}

/// A full matrix (row index = node id) as NumaInfo input for `ids`.
fn numa_for(
    ids: &[usize],
    rows: &Option<Vec<Vec<u64>>>,
    prefer_closest: bool,
) -> Result<NumaInfo, TmError> {
    let nodes = ids
        .iter()
        .map(|&id| (id, rows.as_ref().and_then(|r| r.get(id).cloned())))
        .collect();
    NumaInfo::new(nodes, prefer_closest)
}

fn policy_of(v: &Value) -> Res<TmPolicy> {
    str_field(v, "policy")?
        .parse()
        .map_err(|e: TmError| e.to_string())
}

fn eval_case(c: &Value) -> Res<Option<String>> {
    if c.get("op").is_some() {
        eval_bitmask(c)
    } else if c.get("providers").is_some() {
        eval_merge(c)
    } else if c.get("expect_avg").is_some() {
        eval_avg(c)
    } else {
        Err("case is neither a bitmask, merge nor average-distance case".into())
    }
}

fn eval_merge(c: &Value) -> Res<Option<String>> {
    let policy = policy_of(c)?;
    let ids: Vec<usize> = ints(field(c, "numa_nodes")?, "numa_nodes")?
        .into_iter()
        .map(|i| usize::try_from(i).map_err(|_| format!("negative NUMA id {i}")))
        .collect::<Res<_>>()?;
    let options = field(c, "options")?;
    let prefer_closest = options
        .get("prefer-closest-numa-nodes")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut opts = TmOptions {
        prefer_closest_numa_nodes: prefer_closest,
        ..TmOptions::default()
    };
    if let Some(n) = options
        .get("max-allowable-numa-nodes")
        .and_then(Value::as_u64)
    {
        opts.max_allowable_numa_nodes = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let rows = rows_of(field(c, "distances")?)?;
    let numa = numa_for(&ids, &rows, prefer_closest).map_err(|e| e.to_string())?;
    let mut providers: Vec<ProviderHints> = Vec::new();
    for p in field(c, "providers")?
        .as_array()
        .ok_or("providers is not an array")?
    {
        providers.push(match field(p, "resources")? {
            Value::Null => None,
            Value::Object(m) => {
                let mut r = BTreeMap::new();
                for (name, hints) in m {
                    let h = match hints {
                        Value::Null => ResourceHints::DontCare,
                        h => ResourceHints::Explicit(hints_of(h, name)?),
                    };
                    r.insert(name.clone(), h);
                }
                Some(r)
            }
            _ => return Err("provider resources is neither null nor an object".into()),
        });
    }
    let expect = hint_of(field(c, "expect")?, "expect")?;
    let admit = bool_field(c, "admit")?;
    let mut problems = Vec::new();
    let runs: [(&str, MergeFn); 2] = [("reference", reference::merge), ("product", fast::merge)];
    for (name, f) in runs {
        match f(policy, &numa, &opts, &providers) {
            Ok(r) => {
                if r.hint != expect || r.admit != admit {
                    problems.push(format!(
                        "{name}: expected {} admit={admit}, got {} admit={}",
                        show_hint(&expect),
                        show_hint(&r.hint),
                        r.admit
                    ));
                }
            }
            Err(TmError::TooManyPermutations { .. }) if name == "reference" => {}
            Err(e) => problems.push(format!("{name}: error {e}")),
        }
    }
    Ok((!problems.is_empty()).then(|| problems.join("; ")))
}

fn eval_bitmask(c: &Value) -> Res<Option<String>> {
    let op = str_field(c, "op")?;
    let a = || mask_of(field(c, "a")?, "a");
    let b = || mask_of(field(c, "b")?, "b");
    let masks = || -> Res<Vec<NumaMask>> {
        field(c, "masks")?
            .as_array()
            .ok_or("masks is not an array")?
            .iter()
            .map(|m| mask_of(m, "masks"))
            .collect()
    };
    let bits = || ints(field(c, "bits")?, "bits");
    let expect = field(c, "expect")?;
    let expect_error = c
        .get("expect_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let got: Value = match op {
        "is_narrower_than" => Value::Bool(a()?.is_narrower_than(b()?)),
        "is_less_than" => Value::Bool(a()?.is_less_than(b()?)),
        "is_equal" => Value::Bool(a()? == b()?),
        "and" | "or" => ids_value(fold_masks(op == "and", masks()?)),
        "count" => Value::from(a()?.count()),
        "get_bits" => ids_value(a()?),
        "is_empty" => Value::Bool(a()?.is_empty()),
        "clear" => {
            a()?;
            ids_value(NumaMask::EMPTY)
        }
        "fill" => {
            a()?;
            ids_value(NumaMask::FULL)
        }
        "is_set" => {
            let bit = field(c, "bit")?.as_i64().ok_or("bit is not an integer")?;
            Value::Bool(a()?.any_set([bit]))
        }
        "any_set" => Value::Bool(a()?.any_set(bits()?)),
        "add" | "remove" => {
            let start = a()?;
            let r = if op == "add" {
                start.with_added(bits()?)
            } else {
                start.with_removed(bits()?)
            };
            let (mask, err) = match r {
                Ok(m) => (m, false),
                Err(_) => (start, true),
            };
            if err != expect_error {
                return Ok(Some(format!(
                    "expected error={expect_error}, got error={err}"
                )));
            }
            ids_value(mask)
        }
        "new" => match NumaMask::from_signed(bits()?) {
            Ok(m) => {
                if expect_error {
                    return Ok(Some(format!("expected an error, got {}", mask_json(m))));
                }
                ids_value(m)
            }
            Err(_) => Value::Null,
        },
        "iterate_count" | "iterate_order" => iterate_masks(op == "iterate_count", bits()?)?,
        other => return Err(format!("unknown bitmask op {other:?}")),
    };
    Ok((&got != expect).then(|| format!("expected {expect}, got {got}")))
}

/// The kubelet's `And` (`and`) or `Or` of `masks` in order; no mask is the empty mask.
fn fold_masks(and: bool, masks: Vec<NumaMask>) -> NumaMask {
    let mut it = masks.into_iter();
    let first = it.next().unwrap_or(NumaMask::EMPTY);
    it.fold(first, |acc, m| if and { acc.and(m) } else { acc.or(m) })
}

/// The masks `IterateBitMasks` visits over the NUMA ids `bits`: their count (`count`) or
/// the masks in visiting order. Refuses ids outside 0..64 and more than 24 bits.
fn iterate_masks(count: bool, bits: Vec<i64>) -> Res<Value> {
    let ids: Vec<usize> = bits
        .into_iter()
        .map(|b| {
            usize::try_from(b)
                .ok()
                .filter(|b| *b < 64)
                .ok_or(format!("bit {b} out of range"))
        })
        .collect::<Res<_>>()?;
    if ids.len() > 24 {
        return Err(format!(
            "iterating {} bits would visit 2^{} masks; at most 24 bits",
            ids.len(),
            ids.len()
        ));
    }
    let mut seen = Vec::new();
    mask::iterate_bit_masks(&ids, |m| seen.push(m));
    Ok(if count {
        Value::from(seen.len())
    } else {
        Value::Array(seen.into_iter().map(ids_value).collect())
    })
}

fn ids_value(m: NumaMask) -> Value {
    Value::Array(m.ids().map(Value::from).collect())
}

fn eval_avg(c: &Value) -> Res<Option<String>> {
    let rows = rows_of(field(c, "distances")?)?.unwrap_or_default();
    let mask = mask_of(field(c, "mask")?, "mask")?;
    let expect = field(c, "expect_avg")?
        .as_f64()
        .ok_or("expect_avg is not a number")?;
    if rows.is_empty() {
        // No nodes at all: the kubelet's average of an empty mask is 0.
        let got = if mask.is_empty() { 0.0 } else { f64::NAN };
        return Ok((got != expect).then(|| format!("expected {expect}, got {got}")));
    }
    let ids: Vec<usize> = (0..rows.len()).collect();
    let numa = numa_for(&ids, &Some(rows), true).map_err(|e| e.to_string())?;
    let got = numa.average_distance(mask);
    Ok((got != expect).then(|| format!("expected {expect}, got {got}")))
}

fn eval_closest(c: &Value) -> Res<Option<String>> {
    let current = mask_of(field(c, "current")?, "current")?;
    let candidate = mask_of(field(c, "candidate")?, "candidate")?;
    let rows = rows_of(field(c, "distances")?)?;
    let n = rows
        .as_ref()
        .map_or(0, Vec::len)
        .max(current.or(candidate).ids().last().map_or(0, |i| i + 1));
    let ids: Vec<usize> = (0..n).collect();
    let numa = numa_for(&ids, &rows, rows.is_some()).map_err(|e| e.to_string())?;
    let got = numa.closest(candidate, current);
    let got = if got == current {
        "current"
    } else {
        "candidate"
    };
    let expect = str_field(c, "expect")?;
    Ok((got != expect).then(|| format!("expected {expect}, got {got}")))
}

fn eval_filter(c: &Value) -> Res<Option<String>> {
    let input = field(c, "input")?
        .as_array()
        .ok_or("input is not an array")?;
    let got: Vec<Vec<TopologyHint>> = input
        .iter()
        .map(|l| hints_of(l, "input").map(|h| filter_single_numa(&h)))
        .collect::<Res<_>>()?;
    let expect: Vec<Vec<TopologyHint>> = match field(c, "expect")? {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|l| hints_of(l, "expect"))
            .collect::<Res<_>>()?,
        _ => return Err("expect is not a list".into()),
    };
    Ok((got != expect).then(|| format!("expected {expect:?}, got {got:?}")))
}

fn eval_max_of_min(c: &Value) -> Res<Option<String>> {
    let lists = field(c, "hint_lists")?
        .as_array()
        .ok_or("hint_lists is not an array")?;
    let mut t = 0u32;
    for l in lists {
        if let Some(n) = narrowest_count(&hints_of(l, "hint_lists")?) {
            t = t.max(n);
        }
    }
    let expect = field(c, "expect")?
        .as_u64()
        .ok_or("expect is not an integer")?;
    Ok((u64::from(t) != expect).then(|| format!("expected {expect}, got {t}")))
}

fn eval_compare(c: &Value) -> Res<Option<String>> {
    let policy = policy_of(c)?;
    let prefer_closest = bool_field(c, "prefer_closest")?;
    let t = field(c, "best_non_preferred_affinity_count")?
        .as_i64()
        .ok_or("best_non_preferred_affinity_count is not an integer")?;
    let current = match field(c, "current")? {
        Value::Null => None,
        h => Some(hint_of(h, "current")?),
    };
    let candidate = hint_of(field(c, "candidate")?, "candidate")?;
    let span = current
        .and_then(|h| h.affinity)
        .unwrap_or(NumaMask::EMPTY)
        .or(candidate.affinity.unwrap_or(NumaMask::EMPTY));
    let ids: Vec<usize> = (0..span.ids().last().map_or(1, |i| i + 1)).collect();
    let numa = numa_for(&ids, &None, false).map_err(|e| e.to_string())?;
    let chooser = Chooser::new(&numa, policy, prefer_closest, t);
    let kept = chooser.compare(current, candidate);
    // The kubelet returns a pointer to one of the two; equal hints keep current.
    let got = if (current.is_none() && kept.is_some())
        || (kept == Some(candidate) && current != Some(candidate))
    {
        "candidate"
    } else {
        "current"
    };
    let expect = str_field(c, "expect")?;
    Ok((got != expect).then(|| format!("expected {expect}, got {got}")))
}

fn topology_of(v: &Value) -> Res<Vec<(usize, Option<Vec<u64>>)>> {
    match v {
        Value::Null => Ok(vec![(0, Some(vec![10]))]),
        Value::Array(nodes) => nodes
            .iter()
            .map(|n| {
                let id = field(n, "id")?.as_u64().ok_or("id is not an integer")?;
                let row = match field(n, "distances")? {
                    Value::Null => None,
                    r => Some(
                        ints(r, "distances")?
                            .into_iter()
                            .map(|d| u64::try_from(d).map_err(|_| format!("negative distance {d}")))
                            .collect::<Res<Vec<u64>>>()?,
                    ),
                };
                Ok((usize::try_from(id).unwrap_or(usize::MAX), row))
            })
            .collect(),
        _ => Err("topology is neither null nor an array".into()),
    }
}

fn eval_numa_info(c: &Value) -> Res<Option<String>> {
    let nodes = topology_of(field(c, "topology")?)?;
    let prefer = bool_field(c, "prefer_closest")?;
    let expect_error = field(c, "expect_error")?.as_str();
    match (NumaInfo::new(nodes, prefer), expect_error) {
        (Err(e), Some(want)) => Ok((!e.to_string().contains(want))
            .then(|| format!("expected error containing {want:?}, got {e}"))),
        (Err(e), None) => Ok(Some(format!("unexpected error {e}"))),
        (Ok(_), Some(want)) => Ok(Some(format!(
            "expected error containing {want:?}, got success"
        ))),
        (Ok(info), None) => {
            let expect = field(c, "expect")?;
            let want_nodes = ints(field(expect, "nodes")?, "expect.nodes")?;
            let got_nodes: Vec<i64> = info.nodes().iter().map(|&i| i as i64).collect();
            if got_nodes != want_nodes {
                return Ok(Some(format!(
                    "expected nodes {want_nodes:?}, got {got_nodes:?}"
                )));
            }
            let dists = field(expect, "distances")?
                .as_object()
                .ok_or("expect.distances is not an object")?;
            for (id, row) in dists {
                let id: usize = id.parse().map_err(|_| format!("bad node id key {id:?}"))?;
                let want = match row {
                    Value::Null => None,
                    r => Some(
                        ints(r, "expect row")?
                            .into_iter()
                            .map(|d| d as u64)
                            .collect::<Vec<_>>(),
                    ),
                };
                let got = info.distance_row(id).map(<[u64]>::to_vec);
                if got != want {
                    return Ok(Some(format!(
                        "node {id}: expected row {want:?}, got {got:?}"
                    )));
                }
            }
            Ok(None)
        }
    }
}

fn gates_of(c: &Value) -> Res<OptionGates> {
    let mut gates = OptionGates::default();
    if let Some(g) = c.get("feature_gates").and_then(Value::as_object) {
        for (k, v) in g {
            let on = v
                .as_bool()
                .ok_or_else(|| format!("feature gate {k} is not a boolean"))?;
            match k.as_str() {
                "TopologyManagerPolicyAlphaOptions" => gates.alpha = on,
                "TopologyManagerPolicyBetaOptions" => gates.beta = on,
                _ => return Err(format!("unknown feature gate {k:?}")),
            }
        }
    }
    Ok(gates)
}

fn injected_of(c: &Value) -> Res<Vec<(String, OptionLevel)>> {
    let mut out = Vec::new();
    if let Some(m) = c.get("test_injected_options").and_then(Value::as_object) {
        for (k, v) in m {
            let level = match v.as_str() {
                Some("alpha") => OptionLevel::Alpha,
                Some("beta") => OptionLevel::Beta,
                _ => return Err(format!("injected option {k:?} has an unknown level {v}")),
            };
            out.push((k.clone(), level));
        }
    }
    Ok(out)
}

fn string_map(v: &Value) -> Res<BTreeMap<String, String>> {
    match v {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| format!("option {k:?} is not a string"))
            })
            .collect(),
        _ => Err("policy_options is neither null nor an object".into()),
    }
}

fn eval_option(c: &Value) -> Res<Option<String>> {
    let gates = gates_of(c)?;
    let injected = injected_of(c)?;
    let extra: Vec<(&str, OptionLevel)> = injected.iter().map(|(k, l)| (k.as_str(), *l)).collect();
    match str_field(c, "kind")? {
        "availability" => {
            let option = str_field(c, "option")?;
            let want = bool_field(field(c, "expect")?, "available")?;
            let got = check_option_available(option, gates, &extra).is_ok();
            Ok((got != want).then(|| format!("expected available={want}, got {got}")))
        }
        "parse" => {
            let m = string_map(field(c, "policy_options")?)?;
            let r = TmOptions::from_map_with(&m, gates, &extra);
            let want_err = field(c, "expect_error")?.as_str();
            match (r, want_err) {
                (Err(e), Some(w)) => Ok((!e.to_string().contains(w))
                    .then(|| format!("expected error containing {w:?}, got {e}"))),
                (Err(e), None) => Ok(Some(format!("unexpected error {e}"))),
                (Ok(o), Some(w)) => Ok(Some(format!("expected error containing {w:?}, got {o:?}"))),
                (Ok(o), None) => {
                    let expect = field(c, "expect")?;
                    let pc = bool_field(expect, "prefer-closest-numa-nodes")?;
                    let max = field(expect, "max-allowable-numa-nodes")?
                        .as_u64()
                        .ok_or("expect max-allowable-numa-nodes is not an integer")?;
                    let ok = o.prefer_closest_numa_nodes == pc
                        && o.max_allowable_numa_nodes as u64 == max;
                    Ok((!ok).then(|| format!("expected prefer-closest={pc} max={max}, got {o:?}")))
                }
            }
        }
        k => Err(format!("unknown option case kind {k:?}")),
    }
}

fn eval_manager(c: &Value) -> Res<Option<String>> {
    let policy = str_field(c, "policy")?;
    let scope = str_field(c, "scope")?;
    let m = string_map(field(c, "policy_options")?)?;
    let nodes = topology_of(field(c, "topology")?)?;
    let want_err = field(c, "expect_error")?.as_str();
    match (
        ManagerConfig::new(policy, scope, &m, OptionGates::default(), nodes),
        want_err,
    ) {
        (Err(e), Some(w)) => Ok((!e.to_string().contains(w))
            .then(|| format!("expected error containing {w:?}, got {e}"))),
        (Err(e), None) => Ok(Some(format!("unexpected error {e}"))),
        (Ok(cfg), Some(w)) => Ok(Some(format!(
            "expected error containing {w:?}, got {cfg:?}"
        ))),
        (Ok(cfg), None) => {
            if let Some(p) = c.get("expect_policy").and_then(Value::as_str) {
                if cfg.policy.name() != p {
                    return Ok(Some(format!("expected policy {p}, got {}", cfg.policy)));
                }
            }
            if let Some(s) = c.get("expect_scope").and_then(Value::as_str) {
                if cfg.scope.name() != s {
                    return Ok(Some(format!("expected scope {s}, got {}", cfg.scope)));
                }
            }
            Ok(None)
        }
    }
}
