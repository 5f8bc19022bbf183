//! `plan --explain POD/CONTAINER`: each hint provider's hints and the topology manager's
//! merge for one container, per variant (identical variants folded), recorded by the
//! engine during the same admission sequence the table shows.

use std::fmt::Write as _;

use anyhow::bail;
use nodetopo_engine::admission::explain::{Explanation, HintList};
use nodetopo_engine::admission::NodeAdmitter;
use nodetopo_engine::topologymanager::{TmPolicy, TopologyHint};

use super::render::{shared_reason, variant_config};
use super::Plan;

/// `{0,1} pref`, `any non-pref`.
fn hint_text(h: &TopologyHint) -> String {
    let nodes = match h.affinity {
        None => "any".to_string(),
        Some(m) => {
            let ids: Vec<String> = m.ids().map(|i| i.to_string()).collect();
            format!("{{{}}}", ids.join(","))
        }
    };
    format!("{nodes} {}", if h.preferred { "pref" } else { "non-pref" })
}

fn list_text(l: &HintList) -> String {
    match l {
        HintList::DontCare => "no preference".into(),
        HintList::Listed(v) if v.is_empty() => "no hint: cannot be satisfied".into(),
        HintList::Listed(v) => v.iter().map(hint_text).collect::<Vec<_>>().join(", "),
        HintList::NotListed => "(too many NUMA nodes to list every hint)".into(),
    }
}

fn explanation_text(e: &Explanation, policy: TmPolicy) -> String {
    let mut out = String::new();
    for p in &e.providers {
        if p.resources.is_empty() {
            let _ = writeln!(out, "  {:<8} no preference", p.provider);
        }
        for (r, l) in &p.resources {
            let _ = writeln!(out, "  {:<8} {r}: {}", p.provider, list_text(l));
        }
    }
    match &e.merged {
        Ok(m) => {
            let _ = writeln!(
                out,
                "  merge    {policy}: {} -> {}",
                hint_text(&m.hint),
                if m.admit {
                    "admitted"
                } else {
                    "not admitted (TopologyAffinityError)"
                }
            );
        }
        Err(msg) => {
            let _ = writeln!(out, "  merge    failed: {msg}");
        }
    }
    out
}

/// The explanation text for `target` (`NAMESPACE/POD/CONTAINER` or `POD/CONTAINER`).
pub fn explain(plan: &Plan, target: &str) -> anyhow::Result<String> {
    let parts: Vec<&str> = target.split('/').collect();
    let (ns, name, container) = match parts.as_slice() {
        [pod, c] => ("default", *pod, *c),
        [ns, pod, c] => (*ns, *pod, *c),
        _ => bail!("--explain {target:?}: expected POD/CONTAINER or NAMESPACE/POD/CONTAINER"),
    };
    let Some(index) = plan
        .pods
        .iter()
        .position(|p| p.namespace == ns && p.name == name)
    else {
        let known: Vec<String> = plan.pods.iter().map(|p| p.key()).collect();
        bail!(
            "--explain {target:?}: no pod {ns}/{name} in the workload; its pods: {}",
            known.join(", ")
        );
    };
    let pod = &plan.pods[index];
    let Some(c) = pod.all_containers().find(|c| c.name == container) else {
        let known: Vec<&str> = pod.all_containers().map(|c| c.name.as_str()).collect();
        bail!(
            "--explain {target:?}: pod {} has no container {container:?}; its containers: {}",
            pod.key(),
            known.join(", ")
        );
    };
    // Per variant: replay the admissions before the pod, then admit it while recording.
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for r in &plan.results {
        let body = match NodeAdmitter::new(plan.topology.clone(), &r.variant.config) {
            Err(e) => format!("  configuration rejected: {e}\n"),
            Ok(mut admitter) => {
                for p in &plan.pods[..index] {
                    admitter.admit(p);
                }
                let (admission, seen) = admitter.admit_explained(pod, container);
                let mut body = match seen {
                    Some(e) => explanation_text(&e, r.variant.config.tm_policy),
                    None if r.variant.config.tm_policy == TmPolicy::None => {
                        "  topology manager policy none: no hints are gathered or merged\n".into()
                    }
                    None => "  no merge ran for it: an earlier container of the pod was refused\n"
                        .into(),
                };
                let result = if let Some(a) = admission
                    .allocations
                    .iter()
                    .find(|a| a.container == container)
                {
                    format!("exclusive CPUs {}", a.cpus)
                } else if let Some(x) = admission.rejections.first() {
                    format!(
                        "pod rejected at container {}: {}: {}",
                        x.container, x.reason, x.message
                    )
                } else {
                    format!("shared pool: {}", shared_reason(pod, c))
                };
                let _ = writeln!(body, "  result   {result}");
                body
            }
        };
        match sections.iter_mut().find(|(b, _)| *b == body) {
            Some((_, names)) => names.push(&r.variant.name),
            None => sections.push((body, vec![&r.variant.name])),
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "explain {}/{container} on {} (pods admitted before it: {})",
        pod.key(),
        plan.source,
        index
    );
    for (body, names) in &sections {
        out.push('\n');
        for n in names {
            if let Some(r) = plan.results.iter().find(|r| &r.variant.name == n) {
                let _ = writeln!(out, "== {n}: {}", variant_config(r));
            }
        }
        out.push_str(body);
    }
    Ok(out)
}
