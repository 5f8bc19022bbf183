use super::*;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

#[test]
fn flags_are_read_as_pflag_reads_them() {
    let k = parse(
            7,
            &args("--v=2 --config /var/lib/kubelet/config.yaml --register-node --config-dir=/etc/k/conf.d --feature-gates=A=true,B=f --feature-gates B=T,C=0 --"),
        )
        .unwrap();
    assert_eq!(k.config.as_deref(), Some("/var/lib/kubelet/config.yaml"));
    assert_eq!(k.config_dir.as_deref(), Some("/etc/k/conf.d"));
    assert_eq!(
        k.flags.feature_gates.into_iter().collect::<Vec<_>>(),
        [("A".into(), true), ("B".into(), true), ("C".into(), false)]
    );
    // An empty --config-dir is no drop-in directory, whatever came before.
    let k = parse(7, &args("--config-dir=/etc/k/conf.d --config-dir=")).unwrap();
    assert_eq!(k.config_dir, None);
    assert!(parse(1, &args("--config"))
        .unwrap_err()
        .contains("--config has no value"));
    assert!(parse(1, &args("--feature-gates=A=yes"))
        .unwrap_err()
        .contains("\"yes\" is not a boolean"));
}

/// The command line split as pflag splits it over the kubelet's whole flag set: a flag
/// that takes a value takes the next word, whatever it looks like, a boolean never
/// does; unknown flags, stray words and shorthands the kubelet does not have are
/// refused, naming them.
#[test]
fn words_are_split_by_the_kubelets_flag_set() {
    // A value-taking flag the kubelet has swallows the next word ...
    let k = parse(
        1,
        &args("--hostname-override --reserved-cpus=0-1 --node-ip 10.0.0.1"),
    )
    .unwrap();
    assert_eq!(
        k.flags.reserved_cpus, None,
        "the hostname is --reserved-cpus=0-1"
    );
    // ... a boolean does not, nor does --version.
    let k = parse(
        1,
        &args("--register-node --reserved-cpus=0-1 --version --config=/c --version=false"),
    )
    .unwrap();
    assert_eq!(k.flags.reserved_cpus.as_deref(), Some("0-1"));
    assert_eq!(k.config.as_deref(), Some("/c"));
    // Shorthands: -v takes a value in every spelling, -h does not.
    for line in [
        "-v 3 --config=/c",
        "-v=3 --config=/c",
        "-v3 --config=/c",
        "-v 2 --config=/x --config=/c --version=false",
    ] {
        let k = parse(1, &args(line)).unwrap();
        assert_eq!(k.config.as_deref(), Some("/c"), "{line}");
    }
    // An empty argument is a value (/proc keeps it).
    let k = parse(1, &words(b"--reserved-cpus\0\0--config=/c\0")).unwrap();
    assert_eq!(k.flags.reserved_cpus.as_deref(), Some(""));
    assert_eq!(k.config.as_deref(), Some("/c"));
    for (line, want) in [
        (
            "--some-unknown-flag --reserved-cpus=0-1",
            "--some-unknown-flag is not a flag of the kubelet",
        ),
        ("--config=/c stray", "\"stray\" is not a flag"),
        (
            "--config=/c -- --reserved-cpus=1",
            "after \"--\" is not a flag",
        ),
        ("-x", "-x in \"-x\" is not a shorthand flag"),
        ("---config=/c", "bad flag syntax"),
        (
            "--register-node=maybe",
            "--register-node=maybe: \"maybe\" is not a boolean",
        ),
        ("--register-node false", "\"false\" is not a flag"),
        ("-v", "-v has no value"),
        (
            "-v --config=/c",
            "--v=--config=/c: \"--config=/c\" is not a log level",
        ),
        ("--hostname-override", "--hostname-override has no value"),
        ("-hv 3", "--help: the kubelet prints its help"),
        ("--help=false --help", "--help: the kubelet prints its help"),
        ("--help=false --config=/c", "exits re-reading its flags"),
        ("--version", "prints its version and exits"),
        ("--version=raw", "prints its version and exits"),
        ("--version=maybe", "not true, false, raw"),
    ] {
        let e = parse(1, &args(line)).unwrap_err();
        assert!(e.contains(want), "{line}: {want:?} in {e}");
    }
}

/// The configuration flags as the kubelet's flag types read them.
#[test]
fn configuration_flags_are_read_as_the_kubelet_flag_types_read_them() {
    let f = parse(
            1,
            &args("--cpu-manager-policy static --cpu_manager_policy=none --reserved-cpus=0-1 --kube-reserved=cpu=1,,memory=1Gi --kube-reserved cpu=2 --system-reserved= --cpu-manager-policy-options=full-pcpus-only=true,align-by-socket=true --cpu-manager-policy-options a=b --topology-manager-policy=restricted --topology-manager-scope pod --topology-manager-policy-options=prefer-closest-numa-nodes=true --memory-manager-policy=Static --reserved-memory=0:memory=1Gi;1:memory=2Gi,hugepages-2Mi=4Mi --reserved-memory 4294967297:memory=1 --feature-gates= --feature-gates=A=1"),
        )
        .unwrap()
        .flags;
    assert_eq!(
        f.cpu_manager_policy.as_deref(),
        Some("none"),
        "last wins, _ is -"
    );
    assert_eq!(f.reserved_cpus.as_deref(), Some("0-1"));
    let map = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    assert_eq!(f.kube_reserved, map(&[("cpu", "2"), ("memory", "1Gi")]));
    assert_eq!(f.system_reserved, map(&[]), "given empty: an empty map");
    // Not split at commas: one option whose value is the rest.
    assert_eq!(
        f.cpu_manager_policy_options,
        map(&[("a", "b"), ("full-pcpus-only", "true,align-by-socket=true")])
    );
    assert_eq!(f.topology_manager_scope.as_deref(), Some("pod"));
    assert_eq!(
        f.topology_manager_policy_options,
        map(&[("prefer-closest-numa-nodes", "true")])
    );
    assert_eq!(f.memory_manager_policy.as_deref(), Some("Static"));
    let rm = f.reserved_memory.unwrap();
    assert_eq!(
        rm.iter().map(|m| m.numa_node).collect::<Vec<_>>(),
        [0, 1, 1],
        "appended; the node converted to 32 bits as Go's int32() does"
    );
    assert_eq!(rm[1].limits.len(), 2);
    assert_eq!(f.feature_gates.get("A"), Some(&true));
    for (line, want) in [
        ("--reserved-cpus", "--reserved-cpus has no value"),
        (
            "--kube-reserved=cpu",
            "--kube-reserved=cpu: \"cpu\" is not KEY=VALUE",
        ),
        (
            "--cpu-manager-policy-options=",
            "--cpu-manager-policy-options=: \"\" is not KEY=VALUE",
        ),
        ("--feature-gates=A=true,B", "\"B\" is not GATE=BOOL"),
        ("--reserved-memory=0:cpu=1", "\"cpu\" is not a memory type"),
        (
            "--reserved-memory=x:memory=1",
            "NUMA node \"x\" is not an integer",
        ),
        ("--reserved-memory=0:memory=1;", "\"\" is not NUMA-NODE"),
        (
            "--reserved-memory=0:memory=1x",
            "--reserved-memory=0:memory=1x: memory:",
        ),
        (
            "--reserved-memory= --reserved-memory=0:memory=1",
            "given again after an empty --reserved-memory",
        ),
    ] {
        let e = parse(1, &args(line)).unwrap_err();
        assert!(e.contains(want), "{line}: {want:?} in {e}");
    }
    // An empty --reserved-memory leaves the files' reservations.
    assert_eq!(
        parse(1, &args("--reserved-memory="))
            .unwrap()
            .flags
            .reserved_memory,
        None
    );
}

fn check() -> ProcessCheck {
    ProcessCheck {
        proc_root: PathBuf::from("/proc"),
        host_config: PathBuf::from("/var/lib/kubelet/config.yaml"),
        host_config_dir: PathBuf::from("/etc/kubernetes/kubelet.conf.d"),
    }
}

fn kubelet(pid: u32, a: &str) -> KubeletCommandLine {
    parse(pid, &args(a)).unwrap()
}

#[test]
fn the_kubelet_must_read_the_dropin_directory() {
    let c = check();
    assert_eq!(decide(vec![], &c).unwrap(), Checked::NoKubelet);
    let good = kubelet(
        10,
        "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d/",
    );
    assert_eq!(
        decide(vec![kubelet(3, "--config=/other.yaml"), good.clone()], &c).unwrap(),
        Checked::Found(Box::new(good))
    );
    for (found, want) in [
            (
                vec![kubelet(10, "--config=/var/lib/kubelet/config.yaml")],
                "runs without --config-dir",
            ),
            (
                vec![kubelet(10, "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/k")],
                "reads its drop-ins from --config-dir /etc/k",
            ),
            (
                vec![kubelet(4, "--config=/a.yaml"), kubelet(5, "--v=2")],
                "no kubelet runs with --config /var/lib/kubelet/config.yaml (process 4 with --config /a.yaml, process 5 with --config (none))",
            ),
            (
                vec![
                    kubelet(4, "--config=/var/lib/kubelet/config.yaml"),
                    kubelet(5, "--config=/var/lib/kubelet/config.yaml"),
                ],
                "processes 4 and 5 both run",
            ),
        ] {
            let e = decide(found, &c).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} in {e}");
        }
}

#[test]
fn kubelets_are_found_under_a_proc_tree() {
    let dir = tempfile::tempdir().unwrap();
    let put_as = |pid: &str, uid: u32, exe: Option<&str>, argv: &[&str]| {
        let d = dir.path().join(pid);
        std::fs::create_dir_all(&d).unwrap();
        let mut bytes = Vec::new();
        for a in argv {
            bytes.extend_from_slice(a.as_bytes());
            bytes.push(0);
        }
        std::fs::write(d.join("cmdline"), bytes).unwrap();
        std::fs::write(
            d.join("status"),
            format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        )
        .unwrap();
        if let Some(exe) = exe {
            std::os::unix::fs::symlink(exe, d.join("exe")).unwrap();
        }
    };
    let put = |pid: &str, argv: &[&str]| put_as(pid, 0, None, argv);
    put("1", &["/sbin/init"]);
    put("2", &[]);
    put(
        "40",
        &["/usr/bin/kubelet", "--config", "/c.yaml", "--config-dir=/d"],
    );
    put("41", &["/usr/bin/kubelet-helper", "--config=/c.yaml"]);
    put("self", &["kubelet"]);
    std::fs::create_dir_all(dir.path().join("99")).unwrap(); // ended: no cmdline
                                                             // Named `kubelet` but not one: another user's process, a root process whose
                                                             // executable is a shell.
    let bogus = ["kubelet", "--config=/c.yaml", "--feature-gates=A=maybe"];
    put_as("42", 1000, None, &bogus);
    put_as("43", 0, Some("/usr/bin/dash"), &bogus);
    // The kubelet by its executable, whatever its command line calls it (a replaced
    // binary shows ` (deleted)`).
    put_as(
        "44",
        0,
        Some("/opt/bin/kubelet (deleted)"),
        &["kubelet-v1.37", "--config=/other.yaml", "--feature-gates=B"],
    );
    let found = kubelets(dir.path()).unwrap();
    assert_eq!(
        found.iter().map(|k| k.pid).collect::<Vec<_>>(),
        [40, 44],
        "{found:?}"
    );
    assert_eq!(found[0].config_dir.as_deref(), Some("/d"));
    assert!(found[0].error.is_none());
    // A broken command line of a kubelet nodetopo does not check blocks nothing ...
    let e = found[1].error.as_deref().unwrap();
    assert!(
        e.contains("the kubelet process 44") && e.contains("\"B\" is not GATE=BOOL"),
        "{e}"
    );
    let c = ProcessCheck {
        proc_root: dir.path().to_path_buf(),
        host_config: PathBuf::from("/c.yaml"),
        host_config_dir: PathBuf::from("/d"),
    };
    assert_eq!(
        decide(found.clone(), &c).unwrap(),
        Checked::Found(Box::new(found[0].clone()))
    );
    // ... while that of the checked one does.
    let c = ProcessCheck {
        host_config: PathBuf::from("/other.yaml"),
        ..c
    };
    let e = decide(found, &c).unwrap_err().to_string();
    assert!(e.contains("is not GATE=BOOL"), "{e}");
    let e = kubelets(&dir.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot list processes"), "{e}");
}

#[test]
fn a_saved_command_line_is_read_with_or_without_its_program() {
    let dir = tempfile::tempdir().unwrap();
    let nul = dir.path().join("cmdline");
    std::fs::write(
        &nul,
        b"/usr/bin/kubelet\0--config-dir=/etc/k\0--reserved-cpus=0-1\0",
    )
    .unwrap();
    let k = read_file(&nul).unwrap();
    assert_eq!((k.pid, k.config_dir.as_deref()), (0, Some("/etc/k")));
    assert_eq!(k.flags.reserved_cpus.as_deref(), Some("0-1"));
    let text = dir.path().join("args");
    std::fs::write(&text, "--config-dir /etc/k --cpu-manager-policy static\n").unwrap();
    let k = read_file(&text).unwrap();
    assert_eq!(k.config_dir.as_deref(), Some("/etc/k"));
    assert_eq!(k.flags.cpu_manager_policy.as_deref(), Some("static"));
    let empty = dir.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let e = read_file(&empty).unwrap_err().to_string();
    assert_eq!(e, format!("{}: empty", empty.display()));
    std::fs::write(&text, "kubelet --config").unwrap();
    let e = read_file(&text).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: ", text.display())) && e.contains("--config has no value"),
        "{e}"
    );
    let e = read_file(&dir.path().join("absent"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent: the file"), "{e}");
}
