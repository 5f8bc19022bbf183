//! Static-policy options (`cpuManagerPolicyOptions`) with the kubelet's parsing and
//! compatibility rules (`policy_options.go`: `NewStaticPolicyOptions`,
//! `ValidateStaticPolicyOptions`).
//!
//! Differences from the kubelet, on purpose: feature gates are not modelled (every option is
//! available, as with the alpha/beta gates on), and options are checked in name order
//! (the kubelet walks a Go map, so with several bad options its first error is random).

use std::collections::BTreeMap;

use crate::options::{Maturity, OptionKind, OptionTable, PolicyOption};
use crate::topology::CpuTopology;

/// `full-pcpus-only`.
pub const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
/// `distribute-cpus-across-numa`.
pub const DISTRIBUTE_CPUS_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
/// `align-by-socket`.
pub const ALIGN_BY_SOCKET: &str = "align-by-socket";
/// `distribute-cpus-across-cores`.
pub const DISTRIBUTE_CPUS_ACROSS_CORES: &str = "distribute-cpus-across-cores";
/// `strict-cpu-reservation`.
pub const STRICT_CPU_RESERVATION: &str = "strict-cpu-reservation";
/// `prefer-align-cpus-by-uncorecache`.
pub const PREFER_ALIGN_CPUS_BY_UNCORECACHE: &str = "prefer-align-cpus-by-uncorecache";

/// The static policy's options, in the kubelet's declaration order (`policy_options.go`),
/// with their maturity there (k8s.io/kubernetes v1.37.2: strict-cpu-reservation and
/// prefer-align-cpus-by-uncorecache are stable, distribute-cpus-across-numa beta). Feature gates are not modelled when parsing (every option is
/// available); the maturity feeds the docs table.
pub const CPU_OPTIONS: [PolicyOption; 6] = [
    PolicyOption {
        name: FULL_PCPUS_ONLY,
        kind: OptionKind::Bool,
        maturity: Maturity::Ga,
        summary: "allocate whole physical cores only (`SMTAlignmentError` otherwise)",
    },
    PolicyOption {
        name: DISTRIBUTE_CPUS_ACROSS_NUMA,
        kind: OptionKind::Bool,
        maturity: Maturity::Beta,
        summary: "spread a request evenly over the fewest NUMA nodes",
    },
    PolicyOption {
        name: ALIGN_BY_SOCKET,
        kind: OptionKind::Bool,
        maturity: Maturity::Alpha,
        summary: "widen NUMA hints to whole sockets",
    },
    PolicyOption {
        name: DISTRIBUTE_CPUS_ACROSS_CORES,
        kind: OptionKind::Bool,
        maturity: Maturity::Alpha,
        summary: "one CPU per core before siblings (\"spread\" sorting)",
    },
    PolicyOption {
        name: STRICT_CPU_RESERVATION,
        kind: OptionKind::Bool,
        maturity: Maturity::Ga,
        summary: "reserved CPUs leave the shared pool too",
    },
    PolicyOption {
        name: PREFER_ALIGN_CPUS_BY_UNCORECACHE,
        kind: OptionKind::Bool,
        maturity: Maturity::Ga,
        summary: "pack requests into the fewest uncore caches",
    },
];

/// Pairs of options the kubelet refuses to combine (both on), in the order
/// `NewStaticPolicyOptions` checks them.
pub const INCOMPATIBLE: [(&str, &str); 4] = [
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (
        PREFER_ALIGN_CPUS_BY_UNCORECACHE,
        DISTRIBUTE_CPUS_ACROSS_CORES,
    ),
    (
        PREFER_ALIGN_CPUS_BY_UNCORECACHE,
        DISTRIBUTE_CPUS_ACROSS_NUMA,
    ),
];

/// The CPU manager's option table: every option needs the static policy.
pub const CPU_OPTION_TABLE: OptionTable = OptionTable {
    field: "cpuManagerPolicyOptions",
    gate_prefix: "CPUManagerPolicy",
    needs_policy: Some("static"),
    options: &CPU_OPTIONS,
    conflicts: &INCOMPATIBLE,
};

/// The static policy's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StaticPolicyOptions {
    /// `full-pcpus-only`: allocate whole physical cores only (SMTAlignmentError otherwise).
    pub full_pcpus_only: bool,
    /// `distribute-cpus-across-numa`: spread a request evenly over the fewest NUMA nodes.
    pub distribute_cpus_across_numa: bool,
    /// `align-by-socket`: widen NUMA hints to whole sockets.
    pub align_by_socket: bool,
    /// `distribute-cpus-across-cores`: one CPU per core before siblings ("spread" sorting).
    pub distribute_cpus_across_cores: bool,
    /// `prefer-align-cpus-by-uncorecache`: pack requests into the fewest uncore caches.
    pub prefer_align_cpus_by_uncorecache: bool,
    /// `strict-cpu-reservation`: reserved CPUs leave the shared pool too.
    pub strict_cpu_reservation: bool,
}

/// Why an option map or combination is rejected; Display is the kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// An option name the kubelet does not know.
    #[error("unknown CPU Manager Policy option: {0:?}")]
    Unknown(String),
    /// A value that Go's `strconv.ParseBool` rejects.
    #[error("bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    BadValue {
        /// The option.
        name: String,
        /// The rejected value.
        value: String,
    },
    /// Two options that cannot be combined.
    #[error("static policy options {0} and {1} can not be used at the same time")]
    Incompatible(&'static str, &'static str),
    /// align-by-socket with the topology manager's single-numa-node policy.
    #[error("Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option")]
    AlignBySocketSingleNuma,
    /// align-by-socket on a machine with more sockets than NUMA nodes.
    #[error("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")]
    AlignBySocketHardware,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &str, value: &str) -> Result<bool, OptionsError> {
    crate::options::go_parse_bool(value).ok_or_else(|| OptionsError::BadValue {
        name: name.to_string(),
        value: value.to_string(),
    })
}

impl StaticPolicyOptions {
    /// `NewStaticPolicyOptions`: parses the kubelet's string map (values as Go's
    /// `strconv.ParseBool` reads them) and applies the compatibility rules.
    pub fn from_map(m: &BTreeMap<String, String>) -> Result<Self, OptionsError> {
        let mut o = StaticPolicyOptions::default();
        for (name, value) in m {
            if CPU_OPTION_TABLE.get(name).is_none() {
                return Err(OptionsError::Unknown(name.clone()));
            }
            let on = parse_bool(name, value)?;
            let slot = o
                .flag_mut(name)
                .ok_or_else(|| OptionsError::Unknown(name.clone()))?;
            *slot = on;
        }
        o.check_compatible()?;
        Ok(o)
    }

    /// The field of an option (the one place an option's name meets its engine logic), or
    /// `None` for a name outside [`CPU_OPTIONS`].
    fn flag_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            FULL_PCPUS_ONLY => &mut self.full_pcpus_only,
            DISTRIBUTE_CPUS_ACROSS_NUMA => &mut self.distribute_cpus_across_numa,
            ALIGN_BY_SOCKET => &mut self.align_by_socket,
            DISTRIBUTE_CPUS_ACROSS_CORES => &mut self.distribute_cpus_across_cores,
            STRICT_CPU_RESERVATION => &mut self.strict_cpu_reservation,
            PREFER_ALIGN_CPUS_BY_UNCORECACHE => &mut self.prefer_align_cpus_by_uncorecache,
            _ => return None,
        })
    }

    /// Whether the option of a name is on (`false` for unknown names).
    pub fn is_on(&self, name: &str) -> bool {
        let mut copy = *self;
        copy.flag_mut(name).is_some_and(|b| *b)
    }

    /// The kubelet's pairwise compatibility rules ([`INCOMPATIBLE`]), in the kubelet's order.
    pub fn check_compatible(&self) -> Result<(), OptionsError> {
        match INCOMPATIBLE
            .into_iter()
            .find(|(a, b)| self.is_on(a) && self.is_on(b))
        {
            Some((a, b)) => Err(OptionsError::Incompatible(a, b)),
            None => Ok(()),
        }
    }

    /// `ValidateStaticPolicyOptions`: align-by-socket needs a topology-manager policy other
    /// than single-numa-node and (declared) no more sockets than NUMA nodes.
    pub fn validate_for(
        &self,
        topology: &CpuTopology,
        tm_single_numa_node: bool,
    ) -> Result<(), OptionsError> {
        if self.align_by_socket {
            if tm_single_numa_node {
                return Err(OptionsError::AlignBySocketSingleNuma);
            }
            let d = topology.declared();
            if d.num_sockets > d.num_numa_nodes {
                return Err(OptionsError::AlignBySocketHardware);
            }
        }
        Ok(())
    }

    /// The options as the kubelet's string map (only the options that are on).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        CPU_OPTIONS
            .iter()
            .filter(|o| self.is_on(o.name))
            .map(|o| (o.name.to_string(), "true".to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_go_bools_and_rejects_bad_input() {
        let o = StaticPolicyOptions::from_map(&map(&[(FULL_PCPUS_ONLY, "T")])).unwrap();
        assert!(o.full_pcpus_only);
        let o = StaticPolicyOptions::from_map(&map(&[(FULL_PCPUS_ONLY, "0")])).unwrap();
        assert!(!o.full_pcpus_only);
        assert_eq!(
            StaticPolicyOptions::from_map(&map(&[(FULL_PCPUS_ONLY, "yes")]))
                .unwrap_err()
                .to_string(),
            "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        assert_eq!(
            StaticPolicyOptions::from_map(&map(&[("nope", "true")]))
                .unwrap_err()
                .to_string(),
            "unknown CPU Manager Policy option: \"nope\""
        );
        assert_eq!(
            StaticPolicyOptions::from_map(&map(&[
                (FULL_PCPUS_ONLY, "true"),
                (DISTRIBUTE_CPUS_ACROSS_CORES, "true")
            ]))
            .unwrap_err()
            .to_string(),
            "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"
        );
        for (a, b) in [
            (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
            (
                PREFER_ALIGN_CPUS_BY_UNCORECACHE,
                DISTRIBUTE_CPUS_ACROSS_CORES,
            ),
            (
                PREFER_ALIGN_CPUS_BY_UNCORECACHE,
                DISTRIBUTE_CPUS_ACROSS_NUMA,
            ),
        ] {
            assert!(matches!(
                StaticPolicyOptions::from_map(&map(&[(a, "true"), (b, "true")])),
                Err(OptionsError::Incompatible(_, _))
            ));
        }
        let all = StaticPolicyOptions {
            full_pcpus_only: true,
            strict_cpu_reservation: true,
            ..Default::default()
        };
        let round: BTreeMap<String, String> = all.to_map();
        assert_eq!(StaticPolicyOptions::from_map(&round).unwrap(), all);
    }

    /// Every table entry has its engine logic (a field), every field its entry, and each
    /// option turns on exactly its own field.
    #[test]
    fn table_and_fields_agree() {
        for o in &CPU_OPTIONS {
            let on = StaticPolicyOptions::from_map(&map(&[(o.name, "true")]));
            let on = on.unwrap_or_else(|e| panic!("{}: {e}", o.name));
            assert_eq!(on.to_map(), map(&[(o.name, "true")]), "{}", o.name);
            assert_eq!(o.kind, OptionKind::Bool, "{}", o.name);
        }
        let StaticPolicyOptions {
            full_pcpus_only: _,
            distribute_cpus_across_numa: _,
            align_by_socket: _,
            distribute_cpus_across_cores: _,
            prefer_align_cpus_by_uncorecache: _,
            strict_cpu_reservation: _,
        } = StaticPolicyOptions::default();
        println!("{} CPU manager options checked", CPU_OPTIONS.len());
        for (a, b) in INCOMPATIBLE {
            assert!(CPU_OPTION_TABLE.get(a).is_some() && CPU_OPTION_TABLE.get(b).is_some());
        }
    }
}
