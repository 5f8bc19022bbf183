//! The rollout's only write: the mark on a NodeTopology that lets its agent apply a spec
//! (annotations `nodetopo.io/apply-generation`, `nodetopo.io/eviction` and
//! `nodetopo.io/apply-started`, the mark's time in RFC 3339), by server-side
//! apply with its own field manager `nodetopo-rollout`, so it neither takes nor gives up the
//! spec that the node controller owns. Which nodes to mark is decided in
//! [`crate::decide::rollout`].

use kube::api::{Patch, PatchParams};
use kube::Api;
use nodetopo_crds::rollout::EvictionMode;
use nodetopo_crds::{
    NodeTopology, APPLY_GENERATION_ANNOTATION, APPLY_STARTED_ANNOTATION, EVICTION_ANNOTATION,
    ROLLOUT_FIELD_MANAGER,
};
use serde_json::{json, Value};

use crate::decide::rollout::Mark;
use crate::error::Error;

/// The apply body of a mark: only the three annotations (the start time in whole seconds).
pub fn mark_body(m: &Mark) -> Value {
    let eviction = match m.eviction {
        EvictionMode::Never => "Never",
        EvictionMode::Evict => "Evict",
    };
    json!({
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {
            "name": m.node,
            "annotations": {
                APPLY_GENERATION_ANNOTATION: m.generation.to_string(),
                EVICTION_ANNOTATION: eviction,
                APPLY_STARTED_ANNOTATION: started(m),
            },
        },
    })
}

fn started(m: &Mark) -> String {
    k8s_openapi::jiff::Timestamp::from_second(m.started.as_second())
        .unwrap_or(m.started)
        .to_string()
}

/// Writes one mark.
pub async fn write_mark(api: &Api<NodeTopology>, m: &Mark) -> Result<(), Error> {
    api.patch(
        &m.node,
        &PatchParams::apply(ROLLOUT_FIELD_MANAGER).force(),
        &Patch::Apply(mark_body(m)),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Api {
        action: "mark NodeTopology for apply",
        object: format!("nodetopology/{}", m.node),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_body_holds_only_the_annotations() {
        let b = mark_body(&Mark {
            policy: "p".into(),
            node: "n1".into(),
            generation: 7,
            eviction: EvictionMode::Evict,
            started: k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
        });
        assert_eq!(
            b["metadata"]["annotations"][APPLY_GENERATION_ANNOTATION],
            "7"
        );
        assert_eq!(b["metadata"]["annotations"][EVICTION_ANNOTATION], "Evict");
        assert_eq!(
            b["metadata"]["annotations"][APPLY_STARTED_ANNOTATION],
            "2023-11-14T22:13:20Z"
        );
        assert!(b.get("spec").is_none());
        assert_eq!(b["metadata"]["name"], "n1");
    }
}
