//! Which topology manager policy and scope the object publishes: the ones the running
//! kubelet uses where the agent can know them, not nodetopo's spec (during a rollout, or
//! after an apply was rolled back, the two differ and the scheduler plugin would enforce a
//! policy the node is not running).
//!
//! Sources, best first ([`resolve`]):
//! 1. [`TopologyManagerSource::KubeletConfig`]: the kubelet's configuration file and its
//!    drop-ins, read as the kubelet reads them (the agent with `--read-kubelet-config`, the
//!    files mounted read-only);
//! 2. [`TopologyManagerSource::Applied`]: the configuration the agent's actuation last
//!    applied and verified (the kubelet restarted on it and agreed);
//! 3. [`TopologyManagerSource::SpecUnverified`]: nodetopo's spec, which nothing confirms the
//!    kubelet runs.
//!
//! The first known source is published; every other known source is compared with it, and
//! [`TmAgreement`] says whether they agree (the agent publishes it as the
//! `TopologyManagerAgreement` condition).
//!
//! Caveat: the files say what the kubelet read at its last start only if nobody changed
//! them since; an apply under way writes them just before it restarts the kubelet.

use super::build::TopologyManagerView;

/// Attribute: where `topologyManagerPolicy`, `topologyManagerScope` and
/// `topologyManagerMaxNUMANodes` came from ([`TopologyManagerSource::as_str`]).
pub const ATTR_TM_SOURCE: &str = "nodetopo.io/topologyManagerSource";

/// Where the published topology manager configuration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyManagerSource {
    /// The kubelet's configuration file and drop-ins.
    KubeletConfig,
    /// The configuration the agent's actuation applied and verified.
    Applied,
    /// nodetopo's spec, unverified.
    SpecUnverified,
}

impl TopologyManagerSource {
    /// The attribute (and status) value.
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyManagerSource::KubeletConfig => "KubeletConfig",
            TopologyManagerSource::Applied => "Applied",
            TopologyManagerSource::SpecUnverified => "SpecUnverified",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            TopologyManagerSource::KubeletConfig => "the kubelet's configuration files",
            TopologyManagerSource::Applied => "the configuration actuation applied and verified",
            TopologyManagerSource::SpecUnverified => "the NodeTopology spec",
        }
    }
}

/// What each source says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmSources {
    /// The kubelet's files: `None` when the agent does not read them, `Some(Err)` with why
    /// they could not be read or do not give a valid configuration.
    pub kubelet_config: Option<Result<TopologyManagerView, String>>,
    /// The configuration the agent's actuation last applied and verified, if any.
    pub applied: Option<TopologyManagerView>,
    /// The spec's.
    pub spec: TopologyManagerView,
}

/// Whether the sources agree with what is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmAgreement {
    /// The published configuration comes from the kubelet's files or a verified apply, and
    /// every other known source says the same; the message names them.
    Agree(String),
    /// Some known source says otherwise; the message names each and its values.
    Disagree(String),
    /// Only the spec is known; the message says why the others are not.
    Unverified(String),
}

/// The configuration to publish, its source and the agreement of the sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmResolution {
    /// What the object publishes.
    pub view: TopologyManagerView,
    /// Where it came from.
    pub source: TopologyManagerSource,
    /// Whether the other sources agree.
    pub agreement: TmAgreement,
}

fn values(v: &TopologyManagerView) -> String {
    format!(
        "policy {}, scope {}, max NUMA nodes {}",
        v.policy.name(),
        v.scope.name(),
        v.max_numa_nodes
    )
}

/// Picks the best known source (see the module documentation) and compares the others
/// with it.
pub fn resolve(s: &TmSources) -> TmResolution {
    use TopologyManagerSource as S;
    let files = s.kubelet_config.as_ref().and_then(|r| r.as_ref().ok());
    let mut known: Vec<(S, &TopologyManagerView)> = Vec::new();
    if let Some(v) = files {
        known.push((S::KubeletConfig, v));
    }
    if let Some(v) = &s.applied {
        known.push((S::Applied, v));
    }
    known.push((S::SpecUnverified, &s.spec));
    let (source, view) = known[0];
    let differing: Vec<String> = known[1..]
        .iter()
        .filter(|(_, v)| *v != view)
        .map(|(src, v)| format!("{} says {}", src.describe(), values(v)))
        .collect();
    let agreement = if !differing.is_empty() {
        TmAgreement::Disagree(format!(
            "published {} from {}; {} (the kubelet runs what its files say: a rollout not yet applied, a rolled-back apply, or a configuration changed outside nodetopo)",
            values(view),
            source.describe(),
            differing.join("; ")
        ))
    } else if source == S::SpecUnverified {
        // The spec is chosen only when the files were not read or were unreadable.
        let why = match s.kubelet_config.as_ref().and_then(|r| r.as_ref().err()) {
            Some(e) => format!("the kubelet's configuration files could not be read: {e}"),
            None => "the agent does not read the kubelet's configuration files (--read-kubelet-config; chart value agent.readKubeletConfig)".to_string(),
        };
        TmAgreement::Unverified(format!(
            "published {} from the NodeTopology spec, unverified: {why}, and actuation has verified no apply",
            values(view)
        ))
    } else {
        let others: Vec<&str> = known[1..].iter().map(|(src, _)| src.describe()).collect();
        TmAgreement::Agree(format!(
            "published {} from {}; {} {}",
            values(view),
            source.describe(),
            others.join(" and "),
            if others.len() == 1 { "agrees" } else { "agree" }
        ))
    };
    TmResolution {
        view: *view,
        source,
        agreement,
    }
}

#[cfg(test)]
mod tests {
    use nodetopo_engine::topologymanager::{TmPolicy, TmScope};

    use super::*;

    fn view(policy: TmPolicy, scope: TmScope) -> TopologyManagerView {
        TopologyManagerView {
            policy,
            scope,
            max_numa_nodes: 8,
        }
    }

    const SNN: TmPolicy = TmPolicy::SingleNumaNode;
    const C: TmScope = TmScope::Container;

    #[test]
    fn the_kubelet_files_win_and_agree_with_the_spec() {
        let r = resolve(&TmSources {
            kubelet_config: Some(Ok(view(SNN, C))),
            applied: None,
            spec: view(SNN, C),
        });
        assert_eq!(r.view, view(SNN, C));
        assert_eq!(r.source, TopologyManagerSource::KubeletConfig);
        let TmAgreement::Agree(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(
            m.contains("configuration files; the NodeTopology spec agrees"),
            "{m}"
        );
    }

    #[test]
    fn a_rollout_not_yet_on_the_kubelet_publishes_the_files_and_disagrees() {
        // The spec moved to single-numa-node/pod; the kubelet's files still say restricted.
        let r = resolve(&TmSources {
            kubelet_config: Some(Ok(view(TmPolicy::Restricted, C))),
            applied: Some(view(TmPolicy::Restricted, C)),
            spec: view(SNN, TmScope::Pod),
        });
        assert_eq!(r.view, view(TmPolicy::Restricted, C));
        assert_eq!(r.source, TopologyManagerSource::KubeletConfig);
        let TmAgreement::Disagree(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(
            m.contains("the NodeTopology spec says policy single-numa-node, scope pod"),
            "{m}"
        );
        // The verified apply agrees with the files: not named as differing.
        assert!(!m.contains("actuation applied and verified says"), "{m}");
    }

    #[test]
    fn the_max_numa_nodes_option_counts_as_a_difference() {
        let mut wide = view(SNN, C);
        wide.max_numa_nodes = 16;
        let r = resolve(&TmSources {
            kubelet_config: Some(Ok(wide)),
            applied: None,
            spec: view(SNN, C),
        });
        assert_eq!(r.view.max_numa_nodes, 16);
        assert!(matches!(r.agreement, TmAgreement::Disagree(_)));
    }

    #[test]
    fn unreadable_files_fall_back_to_the_verified_apply() {
        let r = resolve(&TmSources {
            kubelet_config: Some(Err("config.yaml: permission denied".into())),
            applied: Some(view(TmPolicy::BestEffort, TmScope::Pod)),
            spec: view(TmPolicy::BestEffort, TmScope::Pod),
        });
        assert_eq!(r.source, TopologyManagerSource::Applied);
        assert_eq!(r.view, view(TmPolicy::BestEffort, TmScope::Pod));
        assert!(matches!(r.agreement, TmAgreement::Agree(_)));
    }

    #[test]
    fn after_a_rolled_back_apply_the_verified_one_is_published() {
        // Generation 2 was applied and verified; generation 3's apply failed and was rolled
        // back, so the kubelet runs generation 2's configuration.
        let r = resolve(&TmSources {
            kubelet_config: None,
            applied: Some(view(TmPolicy::Restricted, C)),
            spec: view(SNN, C),
        });
        assert_eq!(r.source, TopologyManagerSource::Applied);
        assert_eq!(r.view.policy, TmPolicy::Restricted);
        let TmAgreement::Disagree(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(
            m.contains("the NodeTopology spec says policy single-numa-node"),
            "{m}"
        );
    }

    #[test]
    fn the_spec_alone_is_unverified_and_says_why() {
        let r = resolve(&TmSources {
            kubelet_config: None,
            applied: None,
            spec: view(SNN, C),
        });
        assert_eq!(r.source, TopologyManagerSource::SpecUnverified);
        assert_eq!(r.view, view(SNN, C));
        let TmAgreement::Unverified(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(m.contains("--read-kubelet-config"), "{m}");
        let r = resolve(&TmSources {
            kubelet_config: Some(Err("config.yaml: no such file".into())),
            applied: None,
            spec: view(SNN, C),
        });
        assert_eq!(r.source, TopologyManagerSource::SpecUnverified);
        let TmAgreement::Unverified(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(m.contains("config.yaml: no such file"), "{m}");
    }

    #[test]
    fn source_names_are_stable() {
        assert_eq!(
            TopologyManagerSource::KubeletConfig.as_str(),
            "KubeletConfig"
        );
        assert_eq!(TopologyManagerSource::Applied.as_str(), "Applied");
        assert_eq!(
            TopologyManagerSource::SpecUnverified.as_str(),
            "SpecUnverified"
        );
    }
}
