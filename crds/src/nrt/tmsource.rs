//! Which topology manager policy and scope the object publishes: the ones the running
//! kubelet uses where the agent can know them, not nodetopo's spec (during a rollout, or
//! after an apply was rolled back, the two differ and the scheduler plugin would enforce a
//! policy the node is not running).
//!
//! Sources, best first ([`resolve`]):
//! 1. the running kubelet's effective configuration: its configuration file and drop-ins,
//!    read as the kubelet reads them (the agent with `--read-kubelet-config`, the files
//!    mounted read-only), with the configuration flags of its command line over them (read
//!    from the host's `/proc`; a flag wins over every file, as in the kubelet).
//!    Published as [`TopologyManagerSource::KubeletCommandLine`] when a topology manager
//!    flag (`--topology-manager-policy`, `--topology-manager-scope`,
//!    `--topology-manager-policy-options`) is on its command line, else as
//!    [`TopologyManagerSource::KubeletConfig`]. When the command line could not be read,
//!    the files alone are published as `KubeletConfig` and the agreement's message says so;
////! 2. [`TopologyManagerSource::Applied`]: the configuration the agent's actuation last
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

use nodetopo_engine::topologymanager::{TmPolicy, TmScope};

/// The topology manager's configuration, as the kubelet runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyManagerView {
    /// Policy.
    pub policy: TmPolicy,
    /// Scope.
    pub scope: TmScope,
    /// `max-allowable-numa-nodes` (8 unless the option says otherwise).
    pub max_numa_nodes: usize,
}

/// Attribute: where `topologyManagerPolicy`, `topologyManagerScope` and
/// `topologyManagerMaxNUMANodes` came from ([`TopologyManagerSource::as_str`]).
pub const ATTR_TM_SOURCE: &str = "nodetopo.io/topologyManagerSource";

/// Where the published topology manager configuration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyManagerSource {
    /// The kubelet's configuration file and drop-ins (its command line, where read, sets
    /// none of the three).
    KubeletConfig,
    /// The kubelet's command line sets at least one of them (a flag wins over the files);
    /// the others from its files.
    KubeletCommandLine,
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
            TopologyManagerSource::KubeletCommandLine => "KubeletCommandLine",
            TopologyManagerSource::Applied => "Applied",
            TopologyManagerSource::SpecUnverified => "SpecUnverified",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            TopologyManagerSource::KubeletConfig => "the kubelet's configuration files",
            TopologyManagerSource::KubeletCommandLine => {
                "the kubelet's command line over its configuration files"
            }
            TopologyManagerSource::Applied => "the configuration actuation applied and verified",
            TopologyManagerSource::SpecUnverified => "the NodeTopology spec",
        }
    }
}

/// Whether the running kubelet's command line was read for the configuration flags that
/// override its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLine {
    /// Read: its topology manager flags as `--name=value` words, in the order the kubelet
    /// applies them (empty: none; the files decide alone).
    Read(Vec<String>),
    /// Not read, and why (no access to the host's processes, no kubelet process found,
    /// the check turned off): a flag there would win over the files unseen.
    NotRead(String),
}

/// The running kubelet's effective topology manager configuration as the agent read it:
/// its files with, where read, its command line over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletTm {
    /// The configuration.
    pub view: TopologyManagerView,
    /// Whether the command line was read, and the topology manager flags it gives.
    pub command_line: CommandLine,
}

impl KubeletTm {
    /// The source this configuration is published as.
    pub fn source(&self) -> TopologyManagerSource {
        match &self.command_line {
            CommandLine::Read(flags) if !flags.is_empty() => {
                TopologyManagerSource::KubeletCommandLine
            }
            _ => TopologyManagerSource::KubeletConfig,
        }
    }

    /// What the message adds about the command line: the flags that set the values, or
    /// why it was not read.
    fn note(&self) -> String {
        match &self.command_line {
            CommandLine::Read(flags) if !flags.is_empty() => format!(
                " (the kubelet's command line sets {}, which win over its files)",
                flags.join(" ")
            ),
            CommandLine::Read(_) => String::new(),
            CommandLine::NotRead(why) => format!(
                "; the kubelet's command line was not read ({why}), so a --topology-manager-policy, --topology-manager-scope or --topology-manager-policy-options flag there, which would win over the files, is not seen"
            ),
        }
    }
}

/// What each source says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmSources {
    /// The running kubelet's configuration (files, and the command line where read):
    /// `None` when the agent does not read it, `Some(Err)` with why the files could not
    /// be read, do not give a valid configuration, or are not the running kubelet's.
    pub kubelet_config: Option<Result<KubeletTm, String>>,
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
    if let Some(k) = files {
        known.push((k.source(), &k.view));
    }
    if let Some(v) = &s.applied {
        known.push((S::Applied, v));
    }
    known.push((S::SpecUnverified, &s.spec));
    let (source, view) = known[0];
    // Said after the first clause whichever the verdict: the flags that set the published
    // values, or that the command line was not read.
    let note = files.map(KubeletTm::note).unwrap_or_default();
    let differing: Vec<String> = known[1..]
        .iter()
        .filter(|(_, v)| *v != view)
        .map(|(src, v)| format!("{} says {}", src.describe(), values(v)))
        .collect();
    let agreement = if !differing.is_empty() {
        TmAgreement::Disagree(format!(
            "published {} from {}{note}; {} (the kubelet runs what its files and command line say: a rollout not yet applied, a rolled-back apply, or a configuration changed outside nodetopo)",
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
            "published {} from {}{note}; {} {}",
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

    /// The kubelet's files, its command line read and setting nothing.
    fn files(view: TopologyManagerView) -> Option<Result<KubeletTm, String>> {
        Some(Ok(KubeletTm {
            view,
            command_line: CommandLine::Read(vec![]),
        }))
    }

    #[test]
    fn the_kubelet_files_win_and_agree_with_the_spec() {
        let r = resolve(&TmSources {
            kubelet_config: files(view(SNN, C)),
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
            kubelet_config: files(view(TmPolicy::Restricted, C)),
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
            kubelet_config: files(wide),
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
    fn a_flag_on_the_kubelet_command_line_is_the_source_and_named() {
        // The files say restricted; --topology-manager-policy=single-numa-node wins (the
        // reader merged it): published with the command line as source, the flag named.
        let r = resolve(&TmSources {
            kubelet_config: Some(Ok(KubeletTm {
                view: view(SNN, C),
                command_line: CommandLine::Read(vec![
                    "--topology-manager-policy=single-numa-node".into()
                ]),
            })),
            applied: None,
            spec: view(TmPolicy::Restricted, C),
        });
        assert_eq!(r.view, view(SNN, C));
        assert_eq!(r.source, TopologyManagerSource::KubeletCommandLine);
        let TmAgreement::Disagree(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(
            m.contains("from the kubelet's command line over its configuration files (the kubelet's command line sets --topology-manager-policy=single-numa-node, which win over its files); the NodeTopology spec says policy restricted"),
            "{m}"
        );
        // Agreeing with the spec: still named.
        let r = resolve(&TmSources {
            kubelet_config: Some(Ok(KubeletTm {
                view: view(SNN, C),
                command_line: CommandLine::Read(vec!["--topology-manager-scope=container".into()]),
            })),
            applied: None,
            spec: view(SNN, C),
        });
        assert_eq!(r.source, TopologyManagerSource::KubeletCommandLine);
        let TmAgreement::Agree(m) = &r.agreement else {
            panic!("{:?}", r.agreement)
        };
        assert!(m.contains("--topology-manager-scope=container"), "{m}");
    }

    #[test]
    fn an_unread_command_line_is_said_in_every_verdict() {
        let unread = |v| {
            Some(Ok(KubeletTm {
                view: v,
                command_line: CommandLine::NotRead("no kubelet process under /host/proc".into()),
            }))
        };
        for (spec, agree) in [(view(SNN, C), true), (view(TmPolicy::BestEffort, C), false)] {
            let r = resolve(&TmSources {
                kubelet_config: unread(view(SNN, C)),
                applied: None,
                spec,
            });
            assert_eq!(r.source, TopologyManagerSource::KubeletConfig);
            let m = match (&r.agreement, agree) {
                (TmAgreement::Agree(m), true) | (TmAgreement::Disagree(m), false) => m,
                (a, _) => panic!("{a:?}"),
            };
            assert!(
                m.contains(
                    "the kubelet's command line was not read (no kubelet process under /host/proc)"
                ),
                "{m}"
            );
        }
    }

    #[test]
    fn source_names_are_stable() {
        assert_eq!(
            TopologyManagerSource::KubeletConfig.as_str(),
            "KubeletConfig"
        );
        assert_eq!(
            TopologyManagerSource::KubeletCommandLine.as_str(),
            "KubeletCommandLine"
        );
        assert_eq!(TopologyManagerSource::Applied.as_str(), "Applied");
        assert_eq!(
            TopologyManagerSource::SpecUnverified.as_str(),
            "SpecUnverified"
        );
    }
}
