//! Label selector matching for node selection (meta/v1 LabelSelector semantics), through
//! kube-core's [`kube::core::Selector`]: this module only decides what an unparsable
//! selector means here (it selects nothing).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::SelectorExt as _;

/// A selector compiled for repeated matching. Built only from selectors that passed
/// `nodetopo_crds::validation::validate_selector`; one kube-core cannot parse (an unknown
/// operator, `In` without values) never matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Option<kube::core::Selector>);

impl Default for Selector {
    /// The empty selector: selects everything.
    fn default() -> Self {
        Selector(Some(kube::core::Selector::default()))
    }
}

impl Selector {
    /// Compiles a selector; `None` and the empty selector select everything.
    pub fn compile(sel: Option<&LabelSelector>) -> Self {
        match sel {
            None => Selector::default(),
            Some(s) => Selector(kube::core::Selector::try_from(s.clone()).ok()),
        }
    }

    /// Whether a node with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.as_ref().is_some_and(|s| s.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn empty_selects_all() {
        assert!(Selector::compile(None).matches(&labels(&[])));
        assert!(Selector::compile(Some(&LabelSelector::default())).matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("pool", "telco")])),
            match_expressions: Some(vec![
                expr("zone", "In", &["a", "b"]),
                expr("maint", "DoesNotExist", &[]),
                expr("gpu", "NotIn", &["true"]),
                expr("cpu", "Exists", &[]),
            ]),
        };
        let s = Selector::compile(Some(&sel));
        let base = [("pool", "telco"), ("zone", "a"), ("cpu", "x")];
        assert!(s.matches(&labels(&base)));
        assert!(s.matches(&labels(&[
            ("pool", "telco"),
            ("zone", "b"),
            ("cpu", "x"),
            ("gpu", "false")
        ])));
        assert!(!s.matches(&labels(&[("pool", "web"), ("zone", "a"), ("cpu", "x")])));
        assert!(!s.matches(&labels(&[("pool", "telco"), ("zone", "c"), ("cpu", "x")])));
        assert!(!s.matches(&labels(&[
            ("pool", "telco"),
            ("zone", "a"),
            ("cpu", "x"),
            ("maint", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("pool", "telco"),
            ("zone", "a"),
            ("cpu", "x"),
            ("gpu", "true")
        ])));
        assert!(!s.matches(&labels(&[("pool", "telco"), ("zone", "a")])));
    }

    #[test]
    fn unknown_operator_matches_nothing() {
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("a", "Like", &["b"])]),
        };
        assert!(!Selector::compile(Some(&sel)).matches(&labels(&[("a", "b")])));
    }
}
