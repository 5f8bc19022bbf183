//! Explaining a kubelet admission failure: the refused pod replayed through the engine on
//! the node's state at that moment.
//!
//! [`explain_rejection`] takes the node's admission state (the pods admitted so far), the
//! refused pod, the pods admitted after it (they were not there when the kubelet decided)
//! and the kubelet's reason and message, and returns an [`ExplanationReport`]: each hint
//! provider's hints and the topology manager's merge for the refused container, the
//! replay's own verdict, and the numbers behind it (what each container asks for, what each
//! NUMA node had free: CPUs, whole cores, devices).
//!
//! Guarantees: pure (the state passed in is not changed; the replay runs on copies); the
//! same inputs give the same report. Where the replay does not reach the kubelet's reason
//! (it admits the pod, or refuses it for another reason) the report says `Disagree` and the
//! summary says plainly that this is a nodetopo fidelity bug: it is never smoothed over.
//!
//! Caveats: the replay sees what nodetopo models of the kubelet (CPU manager, Memory Manager
//! when configured, devices nodetopo knows of); a refusal caused by something else (a
//! device nodetopo was not told about) shows as a disagreement, which is what it is.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::explain::HintList;
use super::{hint_report, NodeAdmitter};
use crate::cpumanager::guaranteed_cpus;
use crate::cpumanager::options::CPU_OPTIONS;
use crate::pod::Pod;
use crate::report::{
    Agreement, ExplanationReport, HintReport, MergeReport, NumaFreeReport, ProviderHintsReport,
    RequestReport,
};
use crate::topologymanager::TmPolicy;

/// The kubelet's admission-failure reasons that come from its resource managers (CPU,
/// memory, devices, topology) in v1.37.2: the ones nodetopo can replay.
pub const MANAGER_REASONS: [&str; 4] = [
    "TopologyAffinityError",
    "SMTAlignmentError",
    "UnexpectedAdmissionError",
    "EmptyPodSharedPoolError",
];

/// Whether a failed pod's `status.reason` is one of [`MANAGER_REASONS`].
pub fn is_manager_reason(reason: &str) -> bool {
    MANAGER_REASONS.contains(&reason)
}

/// Longest summary kept (an Event's note holds at most 1 kB).
pub const SUMMARY_LIMIT: usize = 1000;

/// Replays `pod` on `admitter`'s state without the pod itself and without the pods in
/// `admitted_after` (UIDs of pods admitted after the kubelet refused `pod`), and explains
/// the kubelet's refusal (`kubelet_reason`, `kubelet_message`). See the module
/// documentation.
pub fn explain_rejection(
    admitter: &NodeAdmitter,
    pod: &Pod,
    admitted_after: &[String],
    kubelet_reason: &str,
    kubelet_message: &str,
) -> ExplanationReport {
    let mut base = admitter.clone();
    base.remove_pod(&pod.uid);
    for uid in admitted_after {
        base.remove_pod(uid);
    }
    let numa_nodes = numa_free(&base);
    let free_devices_without_numa: BTreeMap<String, u64> = base
        .devices
        .free_by_numa()
        .into_iter()
        .filter_map(|(r, per)| per.get(&None).map(|n| (r, *n)))
        .collect();
    let requests = requests_of(&base, pod);
    let outcome = base.clone().admit(pod);
    let refused = outcome.rejections.first();
    let container = match refused {
        Some(r) => r.container.clone(),
        None => requests
            .iter()
            .find(|r| r.exclusive_cpus > 0 || !r.devices.is_empty())
            .or(requests.first())
            .map(|r| r.container.clone())
            .unwrap_or_default(),
    };
    let (_, seen) = base.clone().admit_explained(pod, &container);
    let (providers, merged, merge_error) = match seen {
        None => (Vec::new(), None, String::new()),
        Some(e) => {
            let providers = e
                .providers
                .iter()
                .flat_map(|p| {
                    if p.resources.is_empty() {
                        return vec![ProviderHintsReport {
                            provider: p.provider.to_string(),
                            ..ProviderHintsReport::default()
                        }];
                    }
                    p.resources
                        .iter()
                        .map(|(r, l)| ProviderHintsReport {
                            provider: p.provider.to_string(),
                            resource: r.clone(),
                            hints: match l {
                                HintList::DontCare | HintList::NotListed => None,
                                HintList::Listed(v) => Some(v.iter().map(hint_report).collect()),
                            },
                            not_listed: matches!(l, HintList::NotListed),
                        })
                        .collect()
                })
                .collect();
            match e.merged {
                Ok(m) => (
                    providers,
                    Some(MergeReport {
                        hint: hint_report(&m.hint),
                        admit: m.admit,
                    }),
                    String::new(),
                ),
                Err(msg) => (providers, None, msg),
            }
        }
    };
    let (replay_reason, replay_message) = match refused {
        Some(r) => (r.reason.clone(), r.message.clone()),
        None => (String::new(), String::new()),
    };
    let agreement = if replay_reason == kubelet_reason {
        Agreement::Agree
    } else {
        Agreement::Disagree
    };
    let mut report = ExplanationReport {
        agreement,
        replay_reason,
        replay_message,
        container,
        config: config_text(&base),
        providers,
        merged,
        merge_error,
        requests,
        numa_nodes,
        free_devices_without_numa,
        summary: String::new(),
    };
    report.summary = summary(&report, kubelet_reason, kubelet_message, base.tm.policy);
    report
}

/// `cpu manager static (full-pcpus-only); topology manager single-numa-node, scope container`.
fn config_text(a: &NodeAdmitter) -> String {
    let cpu = match &a.cpu {
        None => "cpu manager none".to_string(),
        Some(p) => {
            let on: Vec<&str> = CPU_OPTIONS
                .iter()
                .map(|o| o.name)
                .filter(|n| p.options().is_on(n))
                .collect();
            if on.is_empty() {
                "cpu manager static".to_string()
            } else {
                format!("cpu manager static ({})", on.join(", "))
            }
        }
    };
    let tm = if a.tm.policy == TmPolicy::None {
        "topology manager none".to_string()
    } else {
        format!("topology manager {}, scope {}", a.tm.policy, a.tm.scope)
    };
    let memory = if a.memory.is_some() {
        "; memory manager Static"
    } else {
        ""
    };
    format!("{cpu}; {tm}{memory}")
}

/// What each container of `pod` asks for.
fn requests_of(a: &NodeAdmitter, pod: &Pod) -> Vec<RequestReport> {
    pod.all_containers()
        .map(|c| RequestReport {
            container: c.name.clone(),
            cpu_millis: c.requests.cpu_millis.unwrap_or(0),
            exclusive_cpus: if a.cpu.is_some() {
                guaranteed_cpus(pod, c) as u64
            } else {
                0
            },
            memory_bytes: c.requests.memory_bytes,
            devices: a.devices.container_request(c),
        })
        .collect()
}

/// Free CPUs, whole cores and devices per NUMA node on `a`'s state.
fn numa_free(a: &NodeAdmitter) -> Vec<NumaFreeReport> {
    let t = &a.topology;
    // Under CPU manager policy none nothing is handed out exclusively.
    let free = if a.cpu.is_some() {
        a.pools().free
    } else {
        Default::default()
    };
    let devices = a.devices.free_by_numa();
    t.numa_nodes()
        .iter()
        .map(|n| {
            let mine = n.cpus.intersection(&free);
            let free_cores = t
                .ids_of(&mine, |c| c.core)
                .into_iter()
                .filter(|core| t.cpus_where(|c| c.core == *core).is_subset(&mine))
                .count() as u64;
            NumaFreeReport {
                id: n.id as u64,
                free_cpus: mine.to_string(),
                free_cpu_count: mine.len() as u64,
                free_cores,
                free_devices: devices
                    .iter()
                    .filter_map(|(r, per)| per.get(&Some(n.id)).map(|k| (r.clone(), *k)))
                    .collect(),
            }
        })
        .collect()
}

fn hint_text(h: &HintReport) -> String {
    let nodes = match &h.numa_nodes {
        None => "any".to_string(),
        Some(ids) => {
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            format!("{{{}}}", ids.join(","))
        }
    };
    format!(
        "{nodes} {}",
        if h.preferred {
            "preferred"
        } else {
            "not preferred"
        }
    )
}

fn hints_text(p: &ProviderHintsReport) -> String {
    match (&p.hints, p.not_listed) {
        (_, true) => "too many NUMA nodes to list".into(),
        (None, _) => "no preference".into(),
        (Some(v), _) if v.is_empty() => "no NUMA combination can satisfy it".into(),
        (Some(v), _) => v.iter().map(hint_text).collect::<Vec<_>>().join(", "),
    }
}

/// The one-paragraph explanation (the Event's note), at most [`SUMMARY_LIMIT`] bytes.
fn summary(
    r: &ExplanationReport,
    kubelet_reason: &str,
    kubelet_message: &str,
    policy: TmPolicy,
) -> String {
    let mut s = String::new();
    let _ = write!(s, "kubelet: {kubelet_reason}");
    if !kubelet_message.is_empty() {
        let _ = write!(s, " ({kubelet_message})");
    }
    let _ = write!(s, ". Replayed on {}", r.config);
    let asks: Vec<String> = r
        .requests
        .iter()
        .filter(|q| q.cpu_millis > 0 || !q.devices.is_empty())
        .map(|q| {
            let mut parts = Vec::new();
            if q.exclusive_cpus > 0 {
                parts.push(format!("{} exclusive CPUs", q.exclusive_cpus));
            } else if q.cpu_millis > 0 {
                parts.push(format!("{}m shared CPU", q.cpu_millis));
            }
            for (d, k) in &q.devices {
                parts.push(format!("{k} {d}"));
            }
            format!("{} asks {}", q.container, parts.join(" + "))
        })
        .collect();
    if !asks.is_empty() {
        let _ = write!(s, ". Requests: {}", asks.join("; "));
    }
    let free: Vec<String> = r
        .numa_nodes
        .iter()
        .map(|n| {
            let mut t = format!(
                "node {}: {} CPUs ({}) in {} whole cores",
                n.id,
                n.free_cpu_count,
                if n.free_cpus.is_empty() {
                    "none"
                } else {
                    &n.free_cpus
                },
                n.free_cores
            );
            for (d, k) in &n.free_devices {
                let _ = write!(t, ", {k} {d}");
            }
            t
        })
        .collect();
    let _ = write!(s, ". Free before the pod: {}", free.join("; "));
    for (d, k) in &r.free_devices_without_numa {
        let _ = write!(s, "; {k} {d} without NUMA affinity");
    }
    if !r.providers.is_empty() {
        let hints: Vec<String> = r
            .providers
            .iter()
            .map(|p| {
                if p.resource.is_empty() {
                    format!("{}: no preference", p.provider)
                } else {
                    format!("{} {}: {}", p.provider, p.resource, hints_text(p))
                }
            })
            .collect();
        let _ = write!(s, ". Hints for {}: {}", r.container, hints.join("; "));
    }
    match (&r.merged, r.merge_error.is_empty()) {
        (Some(m), _) => {
            let _ = write!(
                s,
                ". Merged ({policy}): {} -> {}",
                hint_text(&m.hint),
                if m.admit { "admitted" } else { "refused" }
            );
        }
        (None, false) => {
            let _ = write!(s, ". Merge failed: {}", r.merge_error);
        }
        (None, true) if policy == TmPolicy::None => {
            let _ = write!(s, ". No hints are merged under topology manager none");
        }
        (None, true) => {}
    }
    match (r.agreement, r.replay_reason.is_empty()) {
        (Agreement::Agree, _) => {
            let _ = write!(
                s,
                ". nodetopo's replay agrees: {} ({})",
                r.replay_reason, r.replay_message
            );
        }
        (Agreement::Disagree, true) => {
            let _ = write!(
                s,
                ". nodetopo's replay disagrees: fidelity bug: the replay admits the pod, the kubelet refused it with {kubelet_reason}"
            );
        }
        (Agreement::Disagree, false) => {
            let _ = write!(
                s,
                ". nodetopo's replay disagrees: fidelity bug: the replay refuses the pod with {} ({}), the kubelet with {kubelet_reason}",
                r.replay_reason, r.replay_message
            );
        }
    }
    s.push('.');
    truncate(s, SUMMARY_LIMIT)
}

/// Cuts `s` to at most `limit` bytes on a character boundary, marking the cut with `...`;
/// the verdict (the last sentence) is kept whole.
fn truncate(s: String, limit: usize) -> String {
    if s.len() <= limit {
        return s;
    }
    let verdict_at = s.rfind(". nodetopo's replay").unwrap_or(s.len());
    let verdict = &s[verdict_at..];
    let room = limit.saturating_sub(verdict.len() + 4);
    let mut cut = room.min(verdict_at);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    let out = format!("{} ...{verdict}", &s[..cut]);
    if out.len() <= limit {
        return out;
    }
    let mut cut = limit.saturating_sub(3);
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &out[..cut])
}

#[cfg(test)]
mod tests;
