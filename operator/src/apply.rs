//! The thin write layer: server-side apply of NodeTopology specs and policy statuses, with
//! field manager `nodetopo-operator` and `force` (the operator is the only writer of these
//! fields; force takes them back from anyone who edited them by hand).

use kube::api::{Patch, PatchParams};
use kube::Api;
use nodetopo_crds::{
    NodeResourcePolicy, NodeResourcePolicyStatus, NodeTopology, OPERATOR_FIELD_MANAGER,
};
use serde_json::{json, Value};

use crate::decide::DesiredNode;
use crate::error::Error;

/// The apply parameters every write uses.
pub fn params() -> PatchParams {
    PatchParams::apply(OPERATOR_FIELD_MANAGER).force()
}

/// The apply body for a node's NodeTopology: name, owner reference to the Node (so the
/// garbage collector deletes it with the node), and the spec. Nothing else, so the operator
/// owns exactly these fields.
pub fn node_topology_body(d: &DesiredNode) -> Value {
    json!({
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "metadata": {
            "name": d.node,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Node",
                "name": d.node,
                "uid": d.node_uid,
                "controller": true,
            }],
        },
        "spec": d.spec,
    })
}

/// The apply body for a policy's status subresource.
pub fn policy_status_body(status: &NodeResourcePolicyStatus) -> Value {
    json!({
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeResourcePolicy",
        "status": status,
    })
}

/// Applies a node's NodeTopology spec.
pub async fn apply_node_topology(
    api: &Api<NodeTopology>,
    d: &DesiredNode,
) -> Result<NodeTopology, Error> {
    api.patch(&d.node, &params(), &Patch::Apply(node_topology_body(d)))
        .await
        .map_err(|source| Error::Api {
            action: "apply NodeTopology spec",
            object: format!("nodetopology/{}", d.node),
            source,
        })
}

/// Applies a policy's status.
pub async fn apply_policy_status(
    api: &Api<NodeResourcePolicy>,
    name: &str,
    status: &NodeResourcePolicyStatus,
) -> Result<NodeResourcePolicy, Error> {
    api.patch_status(name, &params(), &Patch::Apply(policy_status_body(status)))
        .await
        .map_err(|source| Error::Api {
            action: "apply NodeResourcePolicy status",
            object: format!("noderesourcepolicy/{name}"),
            source,
        })
}

#[cfg(test)]
mod tests;
