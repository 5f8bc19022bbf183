//! The suite's settings, all from environment variables (set by `e2e/run.sh`).
//!
//! The suite talks to a real cluster, so it runs only when `NODETOPO_E2E=1`; otherwise
//! [`E2eConfig::from_env`] returns the reason it is skipped, which the test prints.

use std::collections::BTreeMap;
use std::time::Duration;

/// Why the suite does not run, printed as `SKIPPED: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

/// A setting that is present but unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("environment variable {name}={value:?}: {problem}")]
pub struct ConfigError {
    /// The variable's name.
    pub name: &'static str,
    /// Its value as given.
    pub value: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// Everything the e2e test needs to know about the cluster and the installed release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2eConfig {
    /// Namespace of the Helm release (`NODETOPO_E2E_NAMESPACE`, default `nodetopo-system`).
    pub release_namespace: String,
    /// Helm release name (`NODETOPO_E2E_RELEASE`, default `nodetopo`).
    pub release: String,
    /// Namespace the test pods are created in (`NODETOPO_E2E_POD_NAMESPACE`, default `nodetopo-e2e`).
    pub pod_namespace: String,
    /// The helm binary (`NODETOPO_E2E_HELM`, default `helm` on PATH).
    pub helm: String,
    /// The kubectl binary (`NODETOPO_E2E_KUBECTL`, default `kubectl` on PATH).
    pub kubectl: String,
    /// Image with `cat` and `sleep` for the test pods (`NODETOPO_E2E_POD_IMAGE`, default `busybox:1.36`).
    pub pod_image: String,
    /// Exclusive CPUs per Guaranteed test container (`NODETOPO_E2E_CPUS`, default 1).
    pub cpus: u32,
    /// Label (key=value) that marks the nodes the test policy selects
    /// (`NODETOPO_E2E_NODE_LABEL`, default `nodetopo.io/e2e=true`, set by e2e/kind-config.yaml).
    pub node_label: (String, String),
    /// Upper bound for each wait (`NODETOPO_E2E_TIMEOUT_SECS`, default 180).
    pub timeout: Duration,
}

impl E2eConfig {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Result<Self, Skip>, ConfigError> {
        let vars: BTreeMap<String, String> = std::env::vars().collect();
        Self::from_vars(&vars)
    }

    /// Reads the settings from `vars` (the environment, injectable for tests).
    /// `Ok(Err(skip))` means the suite is not enabled.
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Result<Self, Skip>, ConfigError> {
        match vars.get("NODETOPO_E2E").map(String::as_str) {
            Some("1") => {}
            Some(other) => {
                return Ok(Err(Skip(format!(
                    "NODETOPO_E2E={other:?}; set NODETOPO_E2E=1 (e2e/run.sh does) to run the kind suite"
                ))))
            }
            None => {
                return Ok(Err(Skip(
                    "NODETOPO_E2E is not set; the kind suite runs through e2e/run.sh (NODETOPO_E2E=1)"
                        .to_string(),
                )))
            }
        }
        let get = |name: &str, default: &str| -> String {
            vars.get(name)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| default.to_string())
        };
        let cpus_text = get("NODETOPO_E2E_CPUS", "1");
        let cpus = match cpus_text.parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(ConfigError {
                    name: "NODETOPO_E2E_CPUS",
                    value: cpus_text,
                    problem: "must be a whole number of CPUs >= 1",
                })
            }
        };
        let timeout_text = get("NODETOPO_E2E_TIMEOUT_SECS", "180");
        let timeout = match timeout_text.parse::<u64>() {
            Ok(n) if n >= 1 => Duration::from_secs(n),
            _ => {
                return Err(ConfigError {
                    name: "NODETOPO_E2E_TIMEOUT_SECS",
                    value: timeout_text,
                    problem: "must be a whole number of seconds >= 1",
                })
            }
        };
        let label_text = get("NODETOPO_E2E_NODE_LABEL", "nodetopo.io/e2e=true");
        let node_label = match label_text.split_once('=') {
            Some((k, v)) if !k.is_empty() => (k.to_string(), v.to_string()),
            _ => {
                return Err(ConfigError {
                    name: "NODETOPO_E2E_NODE_LABEL",
                    value: label_text,
                    problem: "must be key=value",
                })
            }
        };
        Ok(Ok(Self {
            release_namespace: get("NODETOPO_E2E_NAMESPACE", "nodetopo-system"),
            release: get("NODETOPO_E2E_RELEASE", "nodetopo"),
            pod_namespace: get("NODETOPO_E2E_POD_NAMESPACE", "nodetopo-e2e"),
            helm: get("NODETOPO_E2E_HELM", "helm"),
            kubectl: get("NODETOPO_E2E_KUBECTL", "kubectl"),
            pod_image: get("NODETOPO_E2E_POD_IMAGE", "busybox:1.36"),
            cpus,
            node_label,
            timeout,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn not_enabled_is_a_skip_with_the_reason() {
        let skip = E2eConfig::from_vars(&vars(&[])).unwrap().unwrap_err();
        assert!(skip.0.contains("NODETOPO_E2E is not set"), "{skip:?}");
        let skip = E2eConfig::from_vars(&vars(&[("NODETOPO_E2E", "yes")]))
            .unwrap()
            .unwrap_err();
        assert!(skip.0.contains("NODETOPO_E2E=\"yes\""), "{skip:?}");
    }

    #[test]
    fn defaults_when_enabled() {
        let c = E2eConfig::from_vars(&vars(&[("NODETOPO_E2E", "1")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.release_namespace, "nodetopo-system");
        assert_eq!(c.release, "nodetopo");
        assert_eq!(c.cpus, 1);
        assert_eq!(
            c.node_label,
            ("nodetopo.io/e2e".to_string(), "true".to_string())
        );
        assert_eq!(c.timeout, Duration::from_secs(180));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = E2eConfig::from_vars(&vars(&[("NODETOPO_E2E", "1"), ("NODETOPO_E2E_CPUS", "0")]))
            .unwrap_err();
        assert_eq!(err.name, "NODETOPO_E2E_CPUS");
        assert_eq!(
            err.to_string(),
            "environment variable NODETOPO_E2E_CPUS=\"0\": must be a whole number of CPUs >= 1"
        );
        let err = E2eConfig::from_vars(&vars(&[
            ("NODETOPO_E2E", "1"),
            ("NODETOPO_E2E_NODE_LABEL", "novalue"),
        ]))
        .unwrap_err();
        assert_eq!(err.name, "NODETOPO_E2E_NODE_LABEL");
        let err = E2eConfig::from_vars(&vars(&[
            ("NODETOPO_E2E", "1"),
            ("NODETOPO_E2E_TIMEOUT_SECS", "soon"),
        ]))
        .unwrap_err();
        assert_eq!(err.name, "NODETOPO_E2E_TIMEOUT_SECS");
    }
}
