//! The topology manager configuration the NodeResourceTopology publishes, in the agent
//! core: the sources (the kubelet's files as last read, the configuration actuation last
//! applied and verified, the spec), the choice among them
//! (`nodetopo_crds::nrt::tmsource::resolve`), and what status says of it (agent with
//! `--nrt`): `status.nodeResourceTopology` and the `TopologyManagerAgreement` condition.

use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::nrt::{
    from_engine, tmsource, TmAgreement, TmResolution, TmSources, TopologyManagerView,
};
use nodetopo_crds::NrtReport;

use super::{Core, Outcome};
use crate::daemon::inputs::spec::node_config;

/// Whether `outcome` says actuation applied the spec of its generation and verified it:
/// the kubelet was restarted on it and agreed (`RestartOnly`, `StateRewritten`). `NoChange`
/// restarted nothing, so it confirms only the files, which are their own source.
pub fn verified_apply(outcome: &Outcome) -> bool {
    outcome.condition.status
        && (outcome.condition.reason == reason::RESTART_ONLY
            || outcome.condition.reason == reason::STATE_REWRITTEN)
}

impl Core {
    /// The spec's topology manager configuration, when a spec that applies is known.
    fn spec_topology_manager(&self) -> Option<TopologyManagerView> {
        let config = node_config(self.spec.as_ref()?).ok()?;
        Some(from_engine::topology_manager_view(&config))
    }

    /// Remembers the spec's configuration as the kubelet's when `outcome` verified an apply
    /// of the generation the core holds; kept until a later verified apply, so after a
    /// rolled-back apply or during a rollout it still names what the kubelet runs.
    pub(super) fn note_verified_apply(&mut self, outcome: &Outcome) {
        if verified_apply(outcome) && self.generation == Some(outcome.generation) {
            if let Some(view) = self.spec_topology_manager() {
                self.verified_tm = Some(view);
            }
        }
    }

    /// The configuration to publish and the agreement of its sources (`None` without a spec
    /// that applies).
    pub fn topology_manager(&self) -> Option<TmResolution> {
        let spec = self.spec_topology_manager()?;
        Some(tmsource::resolve(&TmSources {
            kubelet_config: self.kubelet_config.clone(),
            applied: self.verified_tm,
            spec,
        }))
    }

    /// `status.nodeResourceTopology` and the `TopologyManagerAgreement` condition.
    pub(super) fn topology_manager_status(&self) -> Option<(NrtReport, ConditionSpec)> {
        let r = self.topology_manager()?;
        let report = NrtReport {
            topology_manager_policy: r.view.policy.name().to_string(),
            topology_manager_scope: r.view.scope.name().to_string(),
            topology_manager_max_numa_nodes: i32::try_from(r.view.max_numa_nodes)
                .unwrap_or(i32::MAX),
            topology_manager_source: r.source.as_str().to_string(),
        };
        let (status, why, message) = match r.agreement {
            TmAgreement::Agree(m) => (true, reason::AGREE, m),
            TmAgreement::Disagree(m) => (false, reason::DISAGREE, m),
            TmAgreement::Unverified(m) => (false, reason::UNVERIFIED, m),
        };
        let condition =
            ConditionSpec::new(conditions::TOPOLOGY_MANAGER_AGREEMENT, status, why, message);
        Some((report, condition))
    }
}
