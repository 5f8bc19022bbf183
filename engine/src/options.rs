//! The kubelet's policy options described once: name, kind of value, maturity (with the
//! feature gate that enables it), the policy they need and the combinations the kubelet
//! refuses. The CPU manager's table is [`crate::cpumanager::options::CPU_OPTIONS`], the
//! topology manager's [`crate::topologymanager::options::TM_OPTIONS`]; the CRDs' CEL rules,
//! their Rust mirror, `plan`'s flag checks and the docs table are generated from them.

/// The kind of value an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A boolean as Go's `strconv.ParseBool` reads it (the API takes `"true"`/`"false"`).
    Bool,
    /// A whole number (Go's `strconv.Atoi`) of at least `min`.
    Count {
        /// The kubelet's lower bound.
        min: u32,
    },
}

/// Go's `strconv.ParseBool`: how the kubelet reads every boolean option and flag.
pub fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Maturity level of a policy option, which decides the feature gate it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maturity {
    /// Needs the manager's `...PolicyAlphaOptions` gate (default off).
    Alpha,
    /// Needs the manager's `...PolicyBetaOptions` gate (default on).
    Beta,
    /// Always available.
    Ga,
}

impl Maturity {
    /// `alpha`, `beta` or `GA`, as the docs table prints it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Alpha => "alpha",
            Self::Beta => "beta",
            Self::Ga => "GA",
        }
    }
}

/// One kubelet policy option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOption {
    /// The kubelet's name.
    pub name: &'static str,
    /// The kind of value.
    pub kind: OptionKind,
    /// The maturity in the kubelet revision the engine follows.
    pub maturity: Maturity,
    /// What the option does, in one line (the docs table's text).
    pub summary: &'static str,
}

/// A manager's options: the table, the policy they need, the feature-gate prefix and the
/// pairs that cannot both be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionTable {
    /// The kubelet configuration field (`cpuManagerPolicyOptions`).
    pub field: &'static str,
    /// The prefix of the manager's gates (`CPUManagerPolicy` gives
    /// `CPUManagerPolicyAlphaOptions`/`CPUManagerPolicyBetaOptions`).
    pub gate_prefix: &'static str,
    /// The policy every option needs, when only one policy takes options.
    pub needs_policy: Option<&'static str>,
    /// The options, in the kubelet's declaration order.
    pub options: &'static [PolicyOption],
    /// Pairs of boolean options that cannot both be on, in the kubelet's checking order.
    pub conflicts: &'static [(&'static str, &'static str)],
}

impl OptionTable {
    /// The option of a name.
    pub fn get(&self, name: &str) -> Option<&'static PolicyOption> {
        self.options.iter().find(|o| o.name == name)
    }

    /// The feature gate an option of `maturity` needs, if any.
    pub fn gate(&self, maturity: Maturity) -> Option<String> {
        match maturity {
            Maturity::Alpha => Some(format!("{}AlphaOptions", self.gate_prefix)),
            Maturity::Beta => Some(format!("{}BetaOptions", self.gate_prefix)),
            Maturity::Ga => None,
        }
    }

    /// Why the kubelet would refuse `options` under `gates` (its `featureGates`, absent
    /// gates at their defaults: alpha off, beta on), one message per option, as the
    /// kubelet's `CheckPolicyOptionAvailable` decides: every option present counts, whatever
    /// its value. Unknown names are left to the option parser.
    pub fn gate_problems<'a>(
        &self,
        options: impl IntoIterator<Item = &'a String>,
        gates: &std::collections::BTreeMap<String, bool>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for name in options {
            let Some(o) = self.get(name) else { continue };
            let Some(gate) = self.gate(o.maturity) else {
                continue;
            };
            // component-base: a gate set by name wins; otherwise `AllAlpha` sets every
            // alpha gate and `AllBeta` every beta gate (the `...AlphaOptions` gates are
            // alpha, the `...BetaOptions` gates beta); otherwise the default (beta on).
            let all = match o.maturity {
                Maturity::Alpha => "AllAlpha",
                _ => "AllBeta",
            };
            let default = o.maturity == Maturity::Beta;
            let (value, why) = match (gates.get(&gate), gates.get(all)) {
                (Some(v), _) => (*v, "the kubelet's configuration sets it false".to_string()),
                (None, Some(v)) => (
                    *v,
                    format!("the kubelet's configuration sets {all} false and does not set {gate}"),
                ),
                (None, None) => (
                    default,
                    "it is off by default and the kubelet's configuration does not set it"
                        .to_string(),
                ),
            };
            if !value {
                out.push(format!(
                    "{}: {name} is {} in the kubelet, which refuses it unless featureGates.{gate} is true ({why})",
                    self.field,
                    o.maturity.label(),
                ));
            }
        }
        out
    }

    /// The options as a Markdown table (name, value, maturity and gate, conflicts, what it
    /// does); `docs/options.md` holds this text, and a test keeps them equal.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| option | value | maturity (feature gate) | cannot be combined with | what it does |\n| --- | --- | --- | --- | --- |\n",
        );
        for o in self.options {
            let value = match o.kind {
                OptionKind::Bool => "`\"true\"`/`\"false\"`".to_string(),
                OptionKind::Count { min } => format!("whole number, at least {min}"),
            };
            let maturity = match self.gate(o.maturity) {
                Some(g) => format!("{} (`{g}`)", o.maturity.label()),
                None => o.maturity.label().to_string(),
            };
            let conflicts: Vec<String> = self
                .conflicts
                .iter()
                .filter_map(|(a, b)| match (*a == o.name, *b == o.name) {
                    (true, _) => Some(format!("`{b}`")),
                    (_, true) => Some(format!("`{a}`")),
                    _ => None,
                })
                .collect();
            let conflicts = if conflicts.is_empty() {
                "-".to_string()
            } else {
                conflicts.join(", ")
            };
            out.push_str(&format!(
                "| `{}` | {value} | {maturity} | {conflicts} | {} |\n",
                o.name, o.summary
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::go_parse_bool;

    #[test]
    fn booleans_read_as_go_reads_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "tRUE", "on", " true", "2"] {
            assert_eq!(go_parse_bool(bad), None, "{bad:?}");
        }
    }
}
