//! The kubelet's topology manager configuration from its configuration file and drop-ins
//! (`--read-kubelet-config`), read through `nodetopo_kubelet::config` exactly as the kubelet
//! reads them: the best source of the policy and scope the NodeResourceTopology publishes
//! (see `nodetopo_crds::nrt::tmsource`).
//!
//! The files say what the kubelet read at its last start as long as nobody changed them
//! since (an apply under way writes them just before restarting the kubelet). Flags on the
//! kubelet's command line (`--topology-manager-policy`, deprecated) are not seen.

use std::collections::BTreeMap;
use std::path::PathBuf;

use nodetopo_crds::nrt::TopologyManagerView;
use nodetopo_engine::topologymanager::options::OptionGates;
use nodetopo_engine::topologymanager::{TmOptions, TmPolicy, TmScope};
use nodetopo_kubelet::config::{self as kubelet, KubeletFileConfig};

/// Where the kubelet's configuration is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletConfigPaths {
    /// The `--config` file.
    pub config: PathBuf,
    /// The `--config-dir` drop-in directory (`None`: the kubelet runs without one).
    pub config_dir: Option<PathBuf>,
}

/// Reads the files and returns the topology manager configuration they give; errors name
/// the file or field.
pub fn read(paths: &KubeletConfigPaths) -> Result<TopologyManagerView, String> {
    let files = kubelet::read_config(&paths.config, paths.config_dir.as_deref())
        .map_err(|e| format!("{e:#}"))?;
    tm_view(&files)
}

/// The topology manager configuration of the kubelet's merged files, with the kubelet's
/// defaults (`none`, `container`, 8 NUMA nodes) for what they leave out, and its options
/// checked under the feature gates the files set (alpha off, beta on by default), as the
/// kubelet checks them at start: a value it would refuse is an error, not a guess.
pub fn tm_view(files: &KubeletFileConfig) -> Result<TopologyManagerView, String> {
    let owned = &files.owned;
    let policy: TmPolicy = owned
        .tm_policy()
        .parse()
        .map_err(|e| format!("topologyManagerPolicy: {e}"))?;
    let scope: TmScope = if owned.topology_manager_scope.is_empty() {
        TmScope::Container
    } else {
        owned
            .topology_manager_scope
            .parse()
            .map_err(|e| format!("topologyManagerScope: {e}"))?
    };
    let gate =
        |name: &str, default: bool| files.feature_gates.get(name).copied().unwrap_or(default);
    let gates = OptionGates {
        alpha: gate("TopologyManagerPolicyAlphaOptions", false),
        beta: gate("TopologyManagerPolicyBetaOptions", true),
    };
    let options: &BTreeMap<String, String> = &owned.topology_manager_policy_options;
    let options = TmOptions::from_map_with(options, gates, &[])
        .map_err(|e| format!("topologyManagerPolicyOptions: {e}"))?;
    Ok(TopologyManagerView {
        policy,
        scope,
        max_numa_nodes: options.max_allowable_numa_nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn the_last_drop_in_wins_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write(
            dir.path(),
            "config.yaml",
            &format!("{HEAD}topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n"),
        );
        let conf_d = dir.path().join("conf.d");
        std::fs::create_dir(&conf_d).expect("mkdir");
        write(
            &conf_d,
            "90-nodetopo.conf",
            &format!("{HEAD}topologyManagerPolicy: single-numa-node\ntopologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"16\"\n"),
        );
        let v = read(&KubeletConfigPaths {
            config: config.clone(),
            config_dir: Some(conf_d),
        })
        .expect("reads");
        assert_eq!(
            v,
            TopologyManagerView {
                policy: TmPolicy::SingleNumaNode,
                scope: TmScope::Pod,
                max_numa_nodes: 16,
            }
        );
        // Without the drop-in directory: the config file alone.
        let v = read(&KubeletConfigPaths {
            config,
            config_dir: None,
        })
        .expect("reads");
        assert_eq!(
            (v.policy, v.scope, v.max_numa_nodes),
            (TmPolicy::Restricted, TmScope::Pod, 8)
        );
        // Nothing set: the kubelet's defaults.
        let bare = write(dir.path(), "bare.yaml", HEAD);
        let v = read(&KubeletConfigPaths {
            config: bare,
            config_dir: None,
        })
        .expect("reads");
        assert_eq!(
            (v.policy, v.scope, v.max_numa_nodes),
            (TmPolicy::None, TmScope::Container, 8)
        );
    }

    #[test]
    fn what_the_kubelet_would_refuse_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad_policy = write(
            dir.path(),
            "a.yaml",
            &format!("{HEAD}topologyManagerPolicy: numa-please\n"),
        );
        let e = read(&KubeletConfigPaths {
            config: bad_policy,
            config_dir: None,
        })
        .unwrap_err();
        assert!(
            e.contains("topologyManagerPolicy") && e.contains("numa-please"),
            "{e}"
        );
        // A beta option with the beta gate off.
        let gated = write(
            dir.path(),
            "b.yaml",
            &format!("{HEAD}featureGates:\n  TopologyManagerPolicyBetaOptions: false\ntopologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"16\"\n"),
        );
        let e = read(&KubeletConfigPaths {
            config: gated,
            config_dir: None,
        })
        .unwrap_err();
        assert!(e.contains("topologyManagerPolicyOptions"), "{e}");
        // A missing file names its path.
        let e = read(&KubeletConfigPaths {
            config: dir.path().join("absent.yaml"),
            config_dir: None,
        })
        .unwrap_err();
        assert!(e.contains("absent.yaml"), "{e}");
    }
}
