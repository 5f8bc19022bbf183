//! Label selector matching for node selection (meta/v1 LabelSelector semantics).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One compiled requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A selector compiled for repeated matching. Built only from selectors that passed
/// `nodetopo_crds::validation::validate_selector`; an unknown operator never matches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    reqs: Vec<Requirement>,
    /// Set when an expression had an operator we do not know: matches nothing.
    never: bool,
}

impl Selector {
    /// Compiles a selector; `None` and the empty selector select everything.
    pub fn compile(sel: Option<&LabelSelector>) -> Self {
        let mut out = Selector::default();
        let Some(sel) = sel else { return out };
        for (k, v) in sel.match_labels.iter().flatten() {
            out.reqs.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let key = e.key.clone();
            out.reqs.push(match e.operator.as_str() {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                _ => {
                    out.never = true;
                    continue;
                }
            });
        }
        out
    }

    /// Whether a node with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.never
            && self.reqs.iter().all(|r| match r {
                Requirement::Equals(k, v) => labels.get(k) == Some(v),
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
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
