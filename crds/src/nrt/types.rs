//! The `NodeResourceTopology` kind of `topology.node.k8s.io/v1alpha2`, as the
//! noderesourcetopology-api module defines it (`pkg/apis/topology/v1alpha2/types.go`).
//!
//! The kind has no `spec`/`status`: `topologyPolicies`, `zones` and `attributes` sit at the
//! top level, so it is written by hand here (kube's `CustomResource` derive wants a spec)
//! with a manual [`kube::Resource`] implementation. Field names and JSON shapes follow the Go
//! types exactly; quantities are strings in Kubernetes quantity syntax.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// API group of the kind.
pub const GROUP: &str = "topology.node.k8s.io";
/// The version nodetopo writes.
pub const VERSION: &str = "v1alpha2";
/// Kind name.
pub const KIND: &str = "NodeResourceTopology";
/// Plural resource name.
pub const PLURAL: &str = "noderesourcetopologies";
/// `apiVersion` of the objects.
pub const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// Zone type of a NUMA node (`helper.ZoneTypeNUMANode` in the API module).
pub const ZONE_TYPE_NUMA_NODE: &str = "Node";
/// Zone type nodetopo uses for an L3 (uncore) cache inside a NUMA node. The scheduler plugin
/// only reads zones of type `Node` and skips every other type.
pub const ZONE_TYPE_L3_CACHE: &str = "L3Cache";

/// One node's resources and their topology (cluster-scoped, named after the node).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopology {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Object metadata (name = node name, owner reference to the Node).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Deprecated in v1alpha2 (the API says: use the top-level attributes). nodetopo leaves
    /// it empty and out of the JSON, as RTE does: the plugin reads the attributes, and logs
    /// a deprecation notice on every read of an object that carries it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_policies: Vec<String>,
    /// Zones: one per NUMA node (`node-<id>`, type `Node`), then L3 caches where written.
    #[serde(default)]
    pub zones: Vec<Zone>,
    /// Node-wide attributes (topology manager policy and scope, pod-set fingerprint, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
}

/// A resource topology zone (NUMA node, cache ...).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Zone {
    /// Zone name (`node-0`, `l3cache-4`).
    pub name: String,
    /// Zone type (`Node`, `L3Cache`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Name of the enclosing zone, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent: String,
    /// Distances to the zones of the same type (`node-<id>` -> NUMA distance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<CostInfo>,
    /// Zone attributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
    /// Resources of the zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceInfo>,
}

/// One resource of a zone.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Resource name (`cpu`, `memory`, `hugepages-2Mi`, a device resource).
    pub name: String,
    /// Total amount in the zone.
    pub capacity: String,
    /// Amount usable by pods (capacity minus what the node reserves).
    pub allocatable: String,
    /// Allocatable minus what running pods hold exclusively.
    pub available: String,
}

/// The cost (distance) from a zone to another.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CostInfo {
    /// The other zone's name.
    pub name: String,
    /// The cost (the kernel's NUMA distance).
    pub value: i64,
}

/// A name/value attribute.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AttributeInfo {
    /// Attribute name.
    pub name: String,
    /// Attribute value.
    pub value: String,
}

impl AttributeInfo {
    /// An attribute.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }
}

impl NodeResourceTopology {
    /// The first attribute of that name (the API helper's `attribute.Get` semantics).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }

    /// The zone of that name.
    pub fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }
}

impl Zone {
    /// The resource of that name.
    pub fn resource(&self, name: &str) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| r.name == name)
    }

    /// The first attribute of that name.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }
}

impl kube::Resource for NodeResourceTopology {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
