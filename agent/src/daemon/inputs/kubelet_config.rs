//! The running kubelet's topology manager configuration (`--read-kubelet-config`): its
//! configuration file and drop-ins, read through `nodetopo_kubelet::config` exactly as the
//! kubelet reads them, with the configuration flags of its command line over them (the
//! kubelet re-applies its flags after loading its files, so a `--topology-manager-policy`
//! wins over every file). The best source of the policy and scope the NodeResourceTopology
//! publishes (see `nodetopo_crds::nrt::tmsource`).
//!
//! The kubelet process is the one `nodetopo_kubelet::cmdline` identifies (effective uid 0,
//! executable named `kubelet`) under the host's `/proc` (`--host-proc`), started with the
//! config file the agent reads (as the host names it, `--kubelet-host-config`). When its
//! command line cannot be read (no access to the host's processes, no kubelet process,
//! `--no-kubelet-process-check`), the files alone are used and the result says why the
//! command line was not ([`CommandLine::NotRead`]); when it shows that the files the agent
//! reads are not the running kubelet's (another `--config`, another or no `--config-dir`),
//! the result is an error naming that.
//!
//! The files say what the kubelet read at its last start as long as nobody changed them
//! since (an apply under way writes them just before restarting the kubelet).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_crds::nrt::{CommandLine, KubeletTm, TopologyManagerView};
use nodetopo_engine::topologymanager::options::OptionGates;
use nodetopo_engine::topologymanager::TmOptions;
use nodetopo_kubelet::cmdline::{self, Checked, ConfigFlags, KubeletCommandLine, ProcessCheck};
use nodetopo_kubelet::config::{self as kubelet, KubeletFileConfig};

/// Where the kubelet's configuration is read from.
#[derive(Debug, Clone)]
pub struct KubeletConfigPaths {
    /// The `--config` file.
    pub config: PathBuf,
    /// The `--config-dir` drop-in directory (`None`: the kubelet runs without one).
    pub config_dir: Option<PathBuf>,
    /// Where the running kubelet's command line is looked for, and its files as the host
    /// names them (`None`: not looked at, `--no-kubelet-process-check`).
    pub process: Option<ProcessCheck>,
}

/// What the look at the kubelet's command line found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The kubelet that reads the files the agent reads: its configuration flags.
    Flags(Box<ConfigFlags>),
    /// Its command line was not read, and why.
    NotRead(String),
}

/// Reads the kubelet's command line (where `paths.process` says) and files, and returns
/// the topology manager configuration the kubelet runs; errors name the file, field or
/// flag.
pub fn read(paths: &KubeletConfigPaths) -> Result<KubeletTm, String> {
    let found = match &paths.process {
        None => Found::NotRead(
            "the agent does not look at it: --no-kubelet-process-check (chart: agent.actuation.checkKubeletProcess false)".into(),
        ),
        Some(check) => command_line(
            cmdline::kubelets(&check.proc_root),
            check,
            paths.config_dir.is_some(),
        )?,
    };
    effective(paths, &found)
}

/// Picks, among the kubelet processes found (or why none could be listed), the one that
/// runs with the config file the agent reads, and checks that it reads the drop-in
/// directory the agent reads (`reads_dropins`: the agent reads one, the host's
/// `check.host_config_dir`), so that files and flags together are its configuration.
pub fn command_line(
    found: anyhow::Result<Vec<KubeletCommandLine>>,
    check: &ProcessCheck,
    reads_dropins: bool,
) -> Result<Found, String> {
    let found = match found {
        Ok(found) => found,
        Err(e) => return Ok(Found::NotRead(format!("{e:#}"))),
    };
    let not_ours = |e: String| {
        format!(
            "the kubelet configuration files the agent reads are not the running kubelet's: {e}"
        )
    };
    if found.is_empty() {
        return Ok(Found::NotRead(format!(
            "no kubelet process under {}",
            check.proc_root.display()
        )));
    }
    if reads_dropins {
        // The check actuation runs before an apply answers the same question.
        return match cmdline::decide(found, check) {
            Ok(Checked::Found(k)) => Ok(Found::Flags(Box::new(k.flags))),
            Ok(Checked::NoKubelet) => Ok(Found::NotRead(format!(
                "no kubelet process under {}",
                check.proc_root.display()
            ))),
            Err(e) => Err(not_ours(format!("{e:#}"))),
        };
    }
    let pids: Vec<String> = found
        .iter()
        .map(KubeletCommandLine::describe_process)
        .collect();
    let mut ours: Vec<KubeletCommandLine> = found
        .into_iter()
        .filter(|k| {
            k.config
                .as_deref()
                .is_some_and(|c| Path::new(c) == check.host_config.as_path())
        })
        .collect();
    let k = match (ours.pop(), ours.is_empty()) {
        (None, _) => {
            return Err(not_ours(format!(
                "no kubelet runs with --config {} ({})",
                check.host_config.display(),
                pids.join(", ")
            )))
        }
        (Some(_), false) => {
            return Err(not_ours(format!(
                "several kubelet processes run with --config {} ({})",
                check.host_config.display(),
                pids.join(", ")
            )))
        }
        (Some(k), true) => k,
    };
    if let Some(e) = k.error {
        return Err(e);
    }
    match k.config_dir {
        Some(d) => Err(not_ours(format!(
            "the kubelet (process {}) also reads the drop-ins in --config-dir {d}, which the agent does not read (its --kubelet-config-dir is empty)",
            k.pid
        ))),
        None => Ok(Found::Flags(Box::new(k.flags))),
    }
}

/// The kubelet's effective topology manager configuration from its files at `paths` and,
/// where `found` has them, its command line's flags over them.
pub fn effective(paths: &KubeletConfigPaths, found: &Found) -> Result<KubeletTm, String> {
    let none = ConfigFlags::default();
    let flags: &ConfigFlags = match found {
        Found::Flags(f) => f,
        Found::NotRead(_) => &none,
    };
    let files = kubelet::read_config_with_flags(&paths.config, paths.config_dir.as_deref(), flags)
        .map_err(|e| format!("{e:#}"))?;
    let view = tm_view(&files, flags)?;
    let command_line = match found {
        Found::Flags(f) => CommandLine::Read(tm_flags(f)),
        Found::NotRead(why) => CommandLine::NotRead(why.clone()),
    };
    Ok(KubeletTm { view, command_line })
}

/// The topology manager flags among `flags`, as `--name=value` words.
pub fn tm_flags(flags: &ConfigFlags) -> Vec<String> {
    flags
        .describe()
        .into_iter()
        .filter(|w| w.starts_with("--topology-manager-"))
        .collect()
}

/// The topology manager configuration of the kubelet's merged files and flags, with the
/// kubelet's defaults (`none`, `container`, 8 NUMA nodes) for what they leave out, and its
/// options checked under the feature gates they set (alpha off, beta on by default), as
/// the kubelet checks them at start: a value it would refuse is an error naming the field
/// (and the flag, where the command line set it), not a guess. Policy and scope come typed
/// from the reader ([`kubelet::read_config_with_flags`] refuses a name the kubelet does
/// not know, naming the file or the flag).
pub fn tm_view(
    files: &KubeletFileConfig,
    flags: &ConfigFlags,
) -> Result<TopologyManagerView, String> {
    let owned = &files.owned;
    let named = |key: &str, given: bool| {
        if given {
            format!(
                "{key} (set by {} on the kubelet's command line)",
                kubelet::flag_of(key)
            )
        } else {
            key.to_string()
        }
    };
    let gate =
        |name: &str, default: bool| files.feature_gates.get(name).copied().unwrap_or(default);
    let gates = OptionGates {
        alpha: gate("TopologyManagerPolicyAlphaOptions", false),
        beta: gate("TopologyManagerPolicyBetaOptions", true),
    };
    let options: &BTreeMap<String, String> = &owned.topology_manager_policy_options;
    let options = TmOptions::from_map_with(options, gates, &[]).map_err(|e| {
        format!(
            "{}: {e}",
            named(
                "topologyManagerPolicyOptions",
                flags.topology_manager_policy_options.is_some()
            )
        )
    })?;
    Ok(TopologyManagerView {
        policy: owned.topology_manager_policy,
        scope: owned.topology_manager_scope,
        max_numa_nodes: options.max_allowable_numa_nodes,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nodetopo_engine::topologymanager::{TmPolicy, TmScope};

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
            process: None,
        })
        .expect("reads")
        .view;
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
            process: None,
        })
        .expect("reads")
        .view;
        assert_eq!(
            (v.policy, v.scope, v.max_numa_nodes),
            (TmPolicy::Restricted, TmScope::Pod, 8)
        );
        // Nothing set: the kubelet's defaults.
        let bare = write(dir.path(), "bare.yaml", HEAD);
        let v = read(&KubeletConfigPaths {
            config: bare,
            config_dir: None,
            process: None,
        })
        .expect("reads")
        .view;
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
            process: None,
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
            process: None,
        })
        .unwrap_err();
        assert!(e.contains("topologyManagerPolicyOptions"), "{e}");
        // A missing file names its path.
        let e = read(&KubeletConfigPaths {
            config: dir.path().join("absent.yaml"),
            config_dir: None,
            process: None,
        })
        .unwrap_err();
        assert!(e.contains("absent.yaml"), "{e}");
    }

    fn files(dir: &Path, config: &str, dropin: &str) -> KubeletConfigPaths {
        let config = write(dir, "config.yaml", &format!("{HEAD}{config}"));
        let conf_d = dir.join("conf.d");
        std::fs::create_dir_all(&conf_d).expect("mkdir");
        write(&conf_d, "90-nodetopo.conf", &format!("{HEAD}{dropin}"));
        KubeletConfigPaths {
            config,
            config_dir: Some(conf_d),
            process: None,
        }
    }

    fn flags(line: &str) -> Box<ConfigFlags> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        Box::new(cmdline::parse(1, &args).expect("parses").flags)
    }

    #[test]
    fn a_flag_on_the_command_line_wins_over_the_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Files: restricted/pod, 16 NUMA nodes; flags: single-numa-node and other options.
        let paths = files(
            dir.path(),
            "topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n",
            "topologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"16\"\n",
        );
        let t = effective(
            &paths,
            &Found::Flags(flags(
                "--topology-manager-policy=single-numa-node --topology-manager-policy-options=prefer-closest-numa-nodes=true",
            )),
        )
        .expect("reads");
        assert_eq!(
            t.view,
            TopologyManagerView {
                policy: TmPolicy::SingleNumaNode,
                // Not on the command line: the files'.
                scope: TmScope::Pod,
                // The options flag replaces the files' whole map: the default again.
                max_numa_nodes: 8,
            }
        );
        assert_eq!(
            t.command_line,
            CommandLine::Read(vec![
                "--topology-manager-policy=single-numa-node".into(),
                "--topology-manager-policy-options=prefer-closest-numa-nodes=true".into(),
            ])
        );
        // Other configuration flags do not count as topology manager flags.
        let t = effective(
            &paths,
            &Found::Flags(flags("--cpu-manager-policy=static --reserved-cpus=0")),
        )
        .expect("reads");
        assert_eq!(t.view.policy, TmPolicy::Restricted);
        assert_eq!(t.command_line, CommandLine::Read(vec![]));
        // A gate turned off on the command line makes the files' beta option one the
        // kubelet refuses.
        let e = effective(
            &paths,
            &Found::Flags(flags(
                "--feature-gates=TopologyManagerPolicyBetaOptions=false",
            )),
        )
        .unwrap_err();
        assert!(e.contains("topologyManagerPolicyOptions"), "{e}");
        // A bad flag value is named with its flag.
        let e = effective(
            &paths,
            &Found::Flags(flags("--topology-manager-scope=everything")),
        )
        .unwrap_err();
        assert!(
            e.contains("--topology-manager-scope") && e.contains("everything"),
            "{e}"
        );
        // Not read: the files alone, and why.
        let t = effective(
            &paths,
            &Found::NotRead("no kubelet process under /host/proc".into()),
        )
        .expect("reads");
        assert_eq!(t.view.policy, TmPolicy::Restricted);
        assert_eq!(t.view.max_numa_nodes, 16);
        assert_eq!(
            t.command_line,
            CommandLine::NotRead("no kubelet process under /host/proc".into())
        );
    }

    fn kubelet(pid: u32, line: &str) -> KubeletCommandLine {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        cmdline::parse_lenient(pid, &args)
    }

    fn check() -> ProcessCheck {
        ProcessCheck {
            proc_root: "/host/proc".into(),
            host_config: "/var/lib/kubelet/config.yaml".into(),
            host_config_dir: "/etc/kubernetes/kubelet.conf.d".into(),
        }
    }

    #[test]
    fn the_kubelet_reading_the_agents_files_is_the_one_whose_flags_count() {
        let c = check();
        let ours = "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d --topology-manager-scope=pod";
        // Found among others (another kubelet with another config file is not ours).
        let got = command_line(
            Ok(vec![kubelet(7, "--config=/other.yaml"), kubelet(9, ours)]),
            &c,
            true,
        )
        .expect("found");
        assert_eq!(got, Found::Flags(flags("--topology-manager-scope=pod")));
        // No process list, or no kubelet in it: not read, saying why.
        let got = command_line(
            Err(anyhow::anyhow!("/host/proc: cannot list processes: denied")),
            &c,
            true,
        )
        .expect("not read");
        assert_eq!(
            got,
            Found::NotRead("/host/proc: cannot list processes: denied".into())
        );
        let got = command_line(Ok(vec![]), &c, true).expect("not read");
        assert_eq!(
            got,
            Found::NotRead("no kubelet process under /host/proc".into())
        );
        // The kubelet runs with another drop-in directory, or none, or another config
        // file: the files the agent reads are not its configuration.
        for line in [
            "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/other.d",
            "--config=/var/lib/kubelet/config.yaml",
            "--config=/etc/kubelet.yaml --config-dir=/etc/kubernetes/kubelet.conf.d",
        ] {
            let e = command_line(Ok(vec![kubelet(9, line)]), &c, true).unwrap_err();
            assert!(
                e.contains("not the running kubelet's") && e.contains("process 9"),
                "{line}: {e}"
            );
        }
        // The agent reads no drop-in directory: the kubelet must run without one.
        let got = command_line(
            Ok(vec![kubelet(
                9,
                "--config=/var/lib/kubelet/config.yaml --topology-manager-policy=restricted",
            )]),
            &c,
            false,
        )
        .expect("found");
        assert_eq!(
            got,
            Found::Flags(flags("--topology-manager-policy=restricted"))
        );
        let e = command_line(Ok(vec![kubelet(9, ours)]), &c, false).unwrap_err();
        assert!(
            e.contains("--config-dir /etc/kubernetes/kubelet.conf.d"),
            "{e}"
        );
        let e = command_line(
            Ok(vec![
                kubelet(9, "--config=/var/lib/kubelet/config.yaml"),
                kubelet(10, "--config=/var/lib/kubelet/config.yaml"),
            ]),
            &c,
            false,
        )
        .unwrap_err();
        assert!(e.contains("several kubelet processes"), "{e}");
        // A command line the kubelet itself would refuse.
        let e = command_line(
            Ok(vec![kubelet(
                9,
                "--config=/var/lib/kubelet/config.yaml --topology-manager-policy",
            )]),
            &c,
            false,
        )
        .unwrap_err();
        assert!(e.contains("--topology-manager-policy"), "{e}");
    }

    /// A process directory as `/proc` shows one: its command line and its owner.
    pub(crate) fn fake_process(proc_root: &Path, pid: u32, uid: u32, argv: &[&str]) {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut cmdline = Vec::new();
        for a in argv {
            cmdline.extend_from_slice(a.as_bytes());
            cmdline.push(0);
        }
        std::fs::write(dir.join("cmdline"), cmdline).expect("cmdline");
        std::fs::write(
            dir.join("status"),
            format!("Name:\tkubelet\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        )
        .expect("status");
    }

    #[test]
    fn read_finds_the_kubelet_in_proc_and_applies_its_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths = files(dir.path(), "topologyManagerPolicy: restricted\n", "");
        let proc_root = dir.path().join("proc");
        let config = paths.config.display().to_string();
        let conf_d = paths.config_dir.clone().expect("dir").display().to_string();
        let line = |policy: &str| {
            vec![
                "/usr/bin/kubelet".to_string(),
                format!("--config={config}"),
                format!("--config-dir={conf_d}"),
                format!("--topology-manager-policy={policy}"),
            ]
        };
        // A non-root process calling itself kubelet is not the kubelet.
        let fake: Vec<String> = line("none");
        fake_process(
            &proc_root,
            40,
            1000,
            &fake.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        paths.process = Some(ProcessCheck {
            proc_root: proc_root.clone(),
            host_config: paths.config.clone(),
            host_config_dir: paths.config_dir.clone().expect("dir"),
        });
        let t = read(&paths).expect("reads");
        assert_eq!(t.view.policy, TmPolicy::Restricted);
        assert!(
            matches!(&t.command_line, CommandLine::NotRead(why) if why.contains("no kubelet process under")),
            "{:?}",
            t.command_line
        );
        // The root one with the flag: the flag wins.
        let real = line("single-numa-node");
        fake_process(
            &proc_root,
            41,
            0,
            &real.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let t = read(&paths).expect("reads");
        assert_eq!(t.view.policy, TmPolicy::SingleNumaNode);
        assert_eq!(
            t.command_line,
            CommandLine::Read(vec!["--topology-manager-policy=single-numa-node".into()])
        );
        // No process check: the files, saying the command line was not looked at.
        paths.process = None;
        let t = read(&paths).expect("reads");
        assert_eq!(t.view.policy, TmPolicy::Restricted);
        assert!(
            matches!(&t.command_line, CommandLine::NotRead(why) if why.contains("--no-kubelet-process-check")),
            "{:?}",
            t.command_line
        );
    }
}
