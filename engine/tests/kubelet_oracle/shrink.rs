//! Shrinking a failing case to a minimal reproducer.

use crate::cpu::{compare, op_uid, run_engine};
use crate::oracle::Oracle;
use crate::protocol::*;

/// Smaller variants of a failing case, most aggressive first.
pub(crate) fn shrink_candidates(c: &CaseJson) -> Vec<CaseJson> {
    let mut out = Vec::new();
    for i in (0..c.ops.len()).rev() {
        let mut s = c.clone();
        let removed = s.ops.remove(i);
        if removed.op == "admit" {
            let uid = op_uid(&removed).to_string();
            s.ops.retain(|o| {
                !(matches!(o.op.as_str(), "remove" | "readmit" | "retry") && o.uid == uid)
            });
        }
        out.push(s);
    }
    // Containers go from every admission of the same pod (a pod admitted again keeps its
    // spec).
    let drop_from = |s: &mut CaseJson, uid: &str, init: bool, j: usize| {
        for o in &mut s.ops {
            if let Some(p) = o.pod.as_mut().filter(|p| p.uid == uid) {
                if init {
                    p.init.remove(j);
                } else {
                    p.containers.remove(j);
                }
            }
        }
    };
    let mut done = std::collections::BTreeSet::new();
    for i in 0..c.ops.len() {
        if let Some(p) = &c.ops[i].pod {
            if !done.insert(p.uid.clone()) {
                continue;
            }
            for j in 0..p.init.len() {
                let mut s = c.clone();
                drop_from(&mut s, &p.uid, true, j);
                out.push(s);
            }
            for j in 0..p.containers.len() {
                if p.containers.len() > 1 {
                    let mut s = c.clone();
                    drop_from(&mut s, &p.uid, false, j);
                    out.push(s);
                }
            }
        }
    }
    for k in c.cpu_options.keys() {
        let mut s = c.clone();
        s.cpu_options.remove(k);
        out.push(s);
    }
    for k in c.tm_options.keys() {
        let mut s = c.clone();
        s.tm_options.remove(k);
        out.push(s);
    }
    out
}

pub(crate) fn disagreement(oracle: &mut Oracle, c: &CaseJson) -> Option<String> {
    let k = oracle.ask(std::slice::from_ref(c)).pop()?;
    if k.timeout || !k.panic.is_empty() {
        return None;
    }
    let e = match run_engine(c) {
        Ok(e) => e,
        Err(err) => return Some(format!("engine could not run the case: {err}")),
    };
    compare(c, &k, &e)
}

pub(crate) fn shrink(oracle: &mut Oracle, mut c: CaseJson, mut why: String) -> (CaseJson, String) {
    let mut progress = true;
    let mut steps = 0;
    while progress && steps < 400 {
        progress = false;
        for cand in shrink_candidates(&c) {
            steps += 1;
            if let Some(w) = disagreement(oracle, &cand) {
                c = cand;
                why = w;
                progress = true;
                break;
            }
        }
    }
    (c, why)
}

pub(crate) fn reproducer(c: &CaseJson) -> String {
    let json = serde_json::to_string(c).expect("case serialises");
    format!(
        "NODETOPO_ORACLE_CASE='{json}' cargo test -p nodetopo-engine --release --test kubelet_oracle oracle_replay -- --ignored --nocapture"
    )
}
