//! The kubelet configuration fields nodetopo owns, typed: one value from the API's spec
//! ([`OwnedConfig::from_spec`]), from the kubelet's files and flags (the kubelet
//! crate's reader), to the planner ([`super::check_config`]), to the engine's admission
//! configuration ([`OwnedConfig::cpu_policy_config`],
//! [`OwnedConfig::tm_options`]) and to nodetopo's drop-in (serialised from it by the
//! kubelet crate).
//!
//! Policies and scope are the enums the spec and the topology manager use, so a name the
//! kubelet does not know is refused where it is read (the file or flag named), not later.
//! The option maps stay the kubelet's own `map[string]string`: which names are known, and
//! whether a value parses, depends on the policy, the feature gates and the machine
//! (`validate_for`), and the drop-in must write back exactly the names and spellings the
//! policy gave; they are parsed once, by [`OwnedConfig::cpu_policy_config`] and
//! [`OwnedConfig::tm_options`], which name the field in their errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::admission::{CpuPolicyConfig, MemoryManagerConfig, NodeConfig};
use crate::cpumanager::options::OptionsError;
use crate::cpumanager::{ReservedCpus, StaticPolicyOptions};
use crate::cpuset::CpuSet;
use crate::spec::validate::{self, Reservation};
use crate::spec::{CpuManagerConfig, CpuManagerPolicy, SpecError, TopologyManagerConfig};
use crate::topologymanager::{TmError, TmOptions, TmPolicy, TmScope};

/// The kubelet configuration fields nodetopo owns (KubeletConfiguration names), with the
/// kubelet's defaults for what is not set (policy `none`, topology manager `none` and
/// `container`, no options, nothing reserved).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnedConfig {
    /// `cpuManagerPolicy`.
    #[serde(default)]
    pub cpu_manager_policy: CpuManagerPolicy,
    /// `cpuManagerPolicyOptions`.
    #[serde(default)]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    /// `reservedSystemCPUs`.
    #[serde(default, rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: CpuSet,
    /// The reserved CPU count from `kubeReserved.cpu + systemReserved.cpu` (whole CPUs), or
    /// the spec's `reservedCPUs`, used by the static policy when `reservedSystemCPUs` is
    /// empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_cpu_count: Option<usize>,
    /// `topologyManagerPolicy`.
    #[serde(default)]
    pub topology_manager_policy: TmPolicy,
    /// `topologyManagerScope`.
    #[serde(default)]
    pub topology_manager_scope: TmScope,
    /// `topologyManagerPolicyOptions`.
    #[serde(default)]
    pub topology_manager_policy_options: BTreeMap<String, String>,
}

/// An option map the kubelet's parser refuses, naming the KubeletConfiguration field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionFieldError {
    /// `cpuManagerPolicyOptions`.
    #[error("cpuManagerPolicyOptions: {0}")]
    Cpu(#[source] OptionsError),
    /// `topologyManagerPolicyOptions`.
    #[error("topologyManagerPolicyOptions: {0}")]
    Tm(#[source] TmError),
}

impl OwnedConfig {
    /// The fields a NodeTopology (or NodeResourcePolicy) spec asks for, field by field,
    /// every field of both spec structs stated (a new one fails to compile here until it
    /// is handled). The reservation is read as the API reads it ([`validate::reservation`]:
    /// a list in CPU-list syntax, or a count, not both); nothing else is checked here (the
    /// planner and [`crate::spec::node_config`] check the rest).
    pub fn from_spec(
        cpu: &CpuManagerConfig,
        tm: &TopologyManagerConfig,
    ) -> Result<OwnedConfig, SpecError> {
        let CpuManagerConfig {
            policy,
            options,
            reserved_system_cpus: _,
            reserved_cpus: _,
        } = cpu;
        let (reserved_system_cpus, reserved_cpu_count) = match validate::reservation(cpu)? {
            Reservation::None => (CpuSet::new(), None),
            Reservation::Explicit(set) => (set, None),
            Reservation::Count(n) => (CpuSet::new(), Some(n)),
        };
        let TopologyManagerConfig {
            policy: tm_policy,
            scope,
            options: tm_options,
        } = tm;
        Ok(OwnedConfig {
            cpu_manager_policy: *policy,
            cpu_manager_policy_options: options.clone(),
            reserved_system_cpus,
            reserved_cpu_count,
            topology_manager_policy: *tm_policy,
            topology_manager_scope: *scope,
            topology_manager_policy_options: tm_options.clone(),
        })
    }

    /// The reserved CPUs the static policy takes: the explicit set, else the count (0 when
    /// neither is set).
    pub fn reserved(&self) -> ReservedCpus {
        if self.reserved_system_cpus.is_empty() {
            ReservedCpus::Count(self.reserved_cpu_count.unwrap_or(0))
        } else {
            ReservedCpus::Explicit(self.reserved_system_cpus.clone())
        }
    }

    /// The static policy's options, parsed (the kubelet's names and values).
    pub fn static_options(&self) -> Result<StaticPolicyOptions, OptionFieldError> {
        StaticPolicyOptions::from_map(&self.cpu_manager_policy_options)
            .map_err(OptionFieldError::Cpu)
    }

    /// The topology manager's options, parsed (the kubelet's names and values).
    pub fn tm_options(&self) -> Result<TmOptions, OptionFieldError> {
        TmOptions::from_map(&self.topology_manager_policy_options).map_err(OptionFieldError::Tm)
    }

    /// The CPU manager policy as admission runs it (options under `none` are not looked at,
    /// as the kubelet ignores them).
    pub fn cpu_policy_config(&self) -> Result<CpuPolicyConfig, OptionFieldError> {
        Ok(match self.cpu_manager_policy {
            CpuManagerPolicy::None => CpuPolicyConfig::None,
            CpuManagerPolicy::Static => CpuPolicyConfig::Static {
                reserved: self.reserved(),
                options: self.static_options()?,
            },
        })
    }

    /// The engine's admission configuration of these fields: the one conversion from the
    /// kubelet's CPU and topology manager fields to a [`NodeConfig`]. Devices and the
    /// Memory Manager are not among them: empty and `None`.
    pub fn node_config(&self) -> Result<NodeConfig, OptionFieldError> {
        Ok(NodeConfig {
            cpu: self.cpu_policy_config()?,
            tm_policy: self.topology_manager_policy,
            tm_scope: self.topology_manager_scope,
            tm_options: self.tm_options()?,
            devices: Vec::new(),
            device_resources: Vec::new(),
            memory: MemoryManagerConfig::None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_cpu(policy: CpuManagerPolicy) -> CpuManagerConfig {
        CpuManagerConfig {
            policy,
            ..Default::default()
        }
    }

    #[test]
    fn a_spec_becomes_the_kubelet_fields_field_by_field() {
        let mut cpu = spec_cpu(CpuManagerPolicy::Static);
        cpu.options.insert("full-pcpus-only".into(), "true".into());
        cpu.reserved_system_cpus = Some("0,64".into());
        let tm = TopologyManagerConfig {
            policy: TmPolicy::SingleNumaNode,
            scope: TmScope::Pod,
            options: [("max-allowable-numa-nodes".to_string(), "16".to_string())].into(),
        };
        let c = OwnedConfig::from_spec(&cpu, &tm).unwrap();
        assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
        assert_eq!(c.cpu_manager_policy_options, cpu.options);
        assert_eq!(c.reserved_system_cpus, CpuSet::parse("0,64").unwrap());
        assert_eq!(c.reserved_cpu_count, None);
        assert_eq!(c.topology_manager_policy, TmPolicy::SingleNumaNode);
        assert_eq!(c.topology_manager_scope, TmScope::Pod);
        assert_eq!(c.topology_manager_policy_options, tm.options);
        let node = c.node_config().unwrap();
        assert_eq!(node.tm_options.max_allowable_numa_nodes, 16);
        assert!(
            matches!(&node.cpu, CpuPolicyConfig::Static { options, reserved: ReservedCpus::Explicit(s) } if options.full_pcpus_only && s.len() == 2)
        );

        cpu.reserved_system_cpus = None;
        cpu.reserved_cpus = Some(3);
        let c = OwnedConfig::from_spec(&cpu, &tm).unwrap();
        assert_eq!(c.reserved(), ReservedCpus::Count(3));
    }

    #[test]
    fn a_bad_reservation_or_option_names_its_field() {
        let mut cpu = spec_cpu(CpuManagerPolicy::Static);
        cpu.reserved_system_cpus = Some("0-".into());
        let e = OwnedConfig::from_spec(&cpu, &TopologyManagerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.cpuManager.reservedSystemCPUs"), "{e}");
        cpu.reserved_system_cpus = Some("0".into());
        cpu.reserved_cpus = Some(1);
        let e = OwnedConfig::from_spec(&cpu, &TopologyManagerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.cpuManager"), "{e}");

        let mut c = OwnedConfig {
            cpu_manager_policy: CpuManagerPolicy::Static,
            ..Default::default()
        };
        c.cpu_manager_policy_options
            .insert("go-faster".into(), "true".into());
        let e = c.node_config().unwrap_err().to_string();
        assert!(e.starts_with("cpuManagerPolicyOptions: "), "{e}");
        c.cpu_manager_policy_options.clear();
        c.topology_manager_policy_options
            .insert("prefer-closest-numa-nodes".into(), "maybe".into());
        let e = c.node_config().unwrap_err().to_string();
        assert!(e.starts_with("topologyManagerPolicyOptions: "), "{e}");
    }
}
