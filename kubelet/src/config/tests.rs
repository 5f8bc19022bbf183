use nodetopo_engine::spec::{CpuManagerPolicy, TopologyManagerPolicy, TopologyManagerScope};

use super::*;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn write(p: &Path, body: &str) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(p, format!("{HEAD}{body}")).unwrap();
}

#[test]
fn dropins_override_in_walk_order_maps_merge_and_null_resets() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    write(
            &main,
            "cpuManagerPolicy: static\nkubeReserved: {cpu: 500m}\nsystemReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions: {full-pcpus-only: \"true\", align-by-socket: \"true\"}\ntopologyManagerScope: pod\n",
        );
    let d = dir.path().join("conf.d");
    write(&d.join("50-a.conf"), "topologyManagerPolicy: restricted\n");
    write(
            &d.join("60-b.conf"),
            "topologyManagerPolicy: single-numa-node\ncpuManagerPolicyOptions: {strict-cpu-reservation: \"true\", align-by-socket: null}\ntopologyManagerScope: null\n",
        );
    // A subdirectory is walked where its name sorts: after 60-b.conf, before 90-z.conf.
    write(
        &d.join("7-sub/99-c.conf"),
        "topologyManagerPolicy: best-effort\n",
    );
    write(&d.join("90-z.conf"), "systemReserved: {cpu: null}\n");
    std::fs::write(d.join("70-ignored.yaml"), "cpuManagerPolicy: none\n").unwrap();
    let names: Vec<String> = dropins(&d)
        .unwrap()
        .iter()
        .map(|p| p.strip_prefix(&d).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        ["50-a.conf", "60-b.conf", "7-sub/99-c.conf", "90-z.conf"]
    );
    let c = read_effective(&main, Some(&d)).unwrap();
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    assert_eq!(c.topology_manager_policy, TopologyManagerPolicy::BestEffort);
    assert_eq!(
        c.topology_manager_scope,
        TopologyManagerScope::Container,
        "null: the default again"
    );
    assert_eq!(
        c.cpu_manager_policy_options.keys().collect::<Vec<_>>(),
        ["full-pcpus-only", "strict-cpu-reservation"]
    );
    assert_eq!(
        c.reserved_cpu_count,
        Some(1),
        "ceil(0.5): systemReserved.cpu deleted"
    );
    // Below nodetopo's drop-in: 50-a, 60-b and the subdirectory "7-sub" sort before it.
    let below = read_below_dropin(&main, &d).unwrap();
    assert_eq!(
        below.topology_manager_policy,
        TopologyManagerPolicy::BestEffort
    );
    assert_eq!(below.reserved_cpu_count, Some(2), "ceil(1.5)");
}

#[test]
fn files_the_kubelet_refuses_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    write(&main, "cpuManagerPolicy: static\n");
    let d = dir.path().join("conf.d");
    std::fs::create_dir(&d).unwrap();
    let cases = [
            ("10-bare.conf", "maxPods: 3\n", "apiVersion None, kind None"),
            ("10-empty.conf", "", "the file is empty"),
            (
                "10-v1.conf",
                "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
                "refuses to start on this file",
            ),
            (
                "10-bool.conf",
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicyOptions: {full-pcpus-only: true}\n",
                "cpuManagerPolicyOptions.full-pcpus-only is not a string",
            ),
        ];
    for (name, text, want) in cases {
        std::fs::write(d.join(name), text).unwrap();
        let e = format!("{:#}", read_effective(&main, Some(&d)).unwrap_err());
        assert!(e.contains(name) && e.contains(want), "{name}: {e}");
        std::fs::remove_file(d.join(name)).unwrap();
    }
    let e = format!(
        "{:#}",
        read_effective(&main, Some(&dir.path().join("missing"))).unwrap_err()
    );
    assert!(
        e.contains("kubelet drop-in directory") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn the_dropin_reads_back_as_the_same_fields_and_removes_unwanted_options() {
    let mut c = OwnedConfig {
        cpu_manager_policy: CpuManagerPolicy::Static,
        reserved_system_cpus: CpuSet::parse("0-1").unwrap(),
        topology_manager_policy: TopologyManagerPolicy::Restricted,
        topology_manager_scope: TopologyManagerScope::Pod,
        ..Default::default()
    };
    c.cpu_manager_policy_options
        .insert("full-pcpus-only".into(), "true".into());
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    write(
            &main,
            "cpuManagerPolicy: none\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\ntopologyManagerPolicyOptions: {prefer-closest-numa-nodes: \"true\"}\n",
        );
    let d = dir.path().join("conf.d");
    std::fs::create_dir(&d).unwrap();
    let below = read_below_dropin(&main, &d).unwrap();
    let text = render_dropin(&c, &below).unwrap();
    assert!(text.contains("\"align-by-socket\": null"), "{text}");
    std::fs::write(d.join(DROPIN_NAME), &text).unwrap();
    assert_eq!(read_effective(&main, Some(&d)).unwrap(), c);
}

#[test]
fn feature_gates_merge_and_gate_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    write(
        &main,
        "featureGates: {CPUManagerPolicyAlphaOptions: true, CPUManagerPolicyBetaOptions: false}\n",
    );
    let d = dir.path().join("conf.d");
    write(
        &d.join("50-site.conf"),
        "featureGates: {CPUManagerPolicyBetaOptions: null, SomeGate: true}\n",
    );
    let gates = read_feature_gates(&main, Some(&d)).unwrap();
    assert_eq!(
        gates.into_iter().collect::<Vec<_>>(),
        [
            ("CPUManagerPolicyAlphaOptions".to_string(), true),
            ("SomeGate".to_string(), true)
        ]
    );
    let mut c = OwnedConfig {
        cpu_manager_policy: CpuManagerPolicy::Static,
        ..Default::default()
    };
    c.cpu_manager_policy_options
        .insert("align-by-socket".into(), "true".into());
    check_gates(
        &read_feature_gates(&main, Some(&d)).unwrap(),
        &BTreeMap::new(),
        &c,
    )
    .unwrap();
    write(
        &d.join("60-off.conf"),
        "featureGates: {CPUManagerPolicyAlphaOptions: false}\n",
    );
    let e = check_gates(
        &read_feature_gates(&main, Some(&d)).unwrap(),
        &BTreeMap::new(),
        &c,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("align-by-socket is alpha") && e.contains("sets it false"),
        "{e}"
    );
    write(
        &d.join("70-bad.conf"),
        "featureGates: {SomeGate: \"yes\"}\n",
    );
    let e = read_feature_gates(&main, Some(&d)).unwrap_err().to_string();
    assert!(
        e.contains("featureGates.SomeGate") && e.contains("70-bad.conf"),
        "{e}"
    );
    // The kubelet refuses the whole configuration over it, so the owned fields too.
    let e = read_effective(&main, Some(&d)).unwrap_err().to_string();
    assert!(e.contains("featureGates.SomeGate"), "{e}");
}

/// A `null` gate in the `--config` file is false for the kubelet (Go's JSON decoding
/// stores the zero value); it used to be refused as "not true or false". In a drop-in it
/// deletes the gate (above).
#[test]
fn null_gate_in_the_config_file_is_false() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    write(
        &main,
        "featureGates: {CPUManagerPolicyBetaOptions: null, CPUManagerPolicyAlphaOptions: ~}\n",
    );
    let gates = read_feature_gates(&main, None).unwrap();
    assert_eq!(gates.get("CPUManagerPolicyBetaOptions"), Some(&false));
    assert_eq!(gates.get("CPUManagerPolicyAlphaOptions"), Some(&false));
}

#[test]
fn yaml_is_read_as_the_kubelet_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    // YAML 1.1 booleans, a merge key, a key given twice (the later wins in the config
    // file) and a second document that is never read.
    write(
            &main,
            "featureGates: {CPUManagerPolicyAlphaOptions: on, CPUManagerPolicyBetaOptions: n}\nbase: &b {topologyManagerScope: pod}\n<<: *b\ncpuManagerPolicy: none\ncpuManagerPolicy: static\n---\ncpuManagerPolicy: 5\n",
        );
    let d = dir.path().join("conf.d");
    std::fs::create_dir_all(&d).unwrap();
    let gates = read_feature_gates(&main, Some(&d)).unwrap();
    assert!(gates["CPUManagerPolicyAlphaOptions"]);
    assert!(!gates["CPUManagerPolicyBetaOptions"]);
    let c = read_effective(&main, Some(&d)).unwrap();
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    assert_eq!(c.topology_manager_scope, TopologyManagerScope::Pod);
    // `yes` is a boolean where the kubelet wants a string.
    write(
        &d.join("10-opts.conf"),
        "cpuManagerPolicyOptions: {full-pcpus-only: yes}\n",
    );
    let e = read_effective(&main, Some(&d)).unwrap_err().to_string();
    assert!(
        e.contains("cpuManagerPolicyOptions.full-pcpus-only is not a string")
            && e.contains("10-opts.conf"),
        "{e}"
    );
    // A key given twice in a drop-in: the kubelet decodes drop-ins strictly.
    write(
        &d.join("10-opts.conf"),
        "cpuManagerPolicy: static\ncpuManagerPolicy: none\n",
    );
    let e = read_effective(&main, Some(&d)).unwrap_err().to_string();
    assert!(
        e.contains("10-opts.conf") && e.contains("line 4") && e.contains("already set"),
        "{e}"
    );
}

#[test]
fn a_bad_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.yaml");
    write(&f, "reservedSystemCPUs: \"0-\"\n");
    let e = read_effective(&f, None).unwrap_err().to_string();
    assert!(e.contains("reservedSystemCPUs"), "{e}");
}

/// A policy or scope name the kubelet does not know is refused where it is read, naming
/// the field, the value and the file (or the flag) that set it.
#[test]
fn an_unknown_policy_name_names_the_field_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    let d = dir.path().join("conf.d");
    write(&main, "cpuManagerPolicy: static\n");
    for (body, field, value) in [
        ("cpuManagerPolicy: dynamic\n", "cpuManagerPolicy", "dynamic"),
        (
            "topologyManagerPolicy: strict\n",
            "topologyManagerPolicy",
            "strict",
        ),
        (
            "topologyManagerScope: node\n",
            "topologyManagerScope",
            "node",
        ),
    ] {
        let file = d.join("50-site.conf");
        write(&file, body);
        let e = format!("{:#}", read_effective(&main, Some(&d)).unwrap_err());
        assert!(
            e.contains(&format!(
                "{field} \"{value}\" (last set in {})",
                file.display()
            )),
            "{e}"
        );
    }
    std::fs::remove_file(d.join("50-site.conf")).unwrap();
    let flags = crate::cmdline::parse(0, &["--topology-manager-policy=numa-please".to_string()])
        .unwrap()
        .flags;
    let e = format!(
        "{:#}",
        read_config_with_flags(&main, Some(&d), &flags).unwrap_err()
    );
    assert!(
        e.contains("topologyManagerPolicy \"numa-please\" (set by --topology-manager-policy on the kubelet's command line)"),
        "{e}"
    );
}

/// `apply --policy`: the policy file is read as the API types; its fields come out as the
/// kubelet's, and a bad one is named with the file.
#[test]
fn a_policy_file_reads_as_the_spec_types() {
    let file = Path::new("policy.yaml");
    let c = desired_from_policy(
        "apiVersion: nodetopo.io/v1alpha1\nkind: NodeResourcePolicy\nspec:\n  cpuManager:\n    policy: static\n    reservedCPUs: 2\n    options: {full-pcpus-only: \"true\"}\n  topologyManager: {policy: restricted, scope: pod}\n",
        file,
    )
    .unwrap();
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    assert_eq!(c.reserved_cpu_count, Some(2));
    assert_eq!(c.cpu_manager_policy_options["full-pcpus-only"], "true");
    assert_eq!(c.topology_manager_policy, TopologyManagerPolicy::Restricted);
    assert_eq!(c.topology_manager_scope, TopologyManagerScope::Pod);
    assert_eq!(
        desired_from_policy("spec: {}\n", file).unwrap(),
        OwnedConfig::default(),
        "absent managers: policy none"
    );
    for (text, want) in [
        (
            "spec:\n  cpuManager: {policy: dynamic}\n",
            "spec.cpuManager.policy",
        ),
        (
            "spec:\n  cpuManager: {policy: static, options: {full-pcpus-only: true}}\n",
            "spec.cpuManager.options",
        ),
        (
            "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0-\"}\n",
            "spec.cpuManager.reservedSystemCPUs",
        ),
        ("kind: NodeResourcePolicy\n", "no spec"),
    ] {
        let e = format!("{:#}", desired_from_policy(text, file).unwrap_err());
        assert!(e.starts_with("policy.yaml: "), "{e}");
        assert!(e.contains(want), "{want:?} in {e}");
    }
}

/// The drop-in's text: type meta plain, every owned field stated with its value quoted,
/// unwanted options and reserved set of earlier files deleted with `null`.
#[test]
fn the_dropin_is_the_serialised_fields() {
    let mut c = OwnedConfig {
        cpu_manager_policy: CpuManagerPolicy::Static,
        reserved_system_cpus: CpuSet::parse("0-1,32-33").unwrap(),
        topology_manager_policy: TopologyManagerPolicy::BestEffort,
        ..Default::default()
    };
    c.cpu_manager_policy_options
        .insert("strict-cpu-reservation".into(), "true".into());
    c.topology_manager_policy_options
        .insert("prefer-closest-numa-nodes".into(), "false".into());
    let mut below = OwnedConfig::default();
    below
        .topology_manager_policy_options
        .insert("max-allowable-numa-nodes".into(), "16".into());
    assert_eq!(
        render_dropin(&c, &below).unwrap(),
        "# Written by nodetopo (NodeResourcePolicy actuation); do not edit: the agent rewrites it.\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         cpuManagerPolicy: \"static\"\n\
         cpuManagerPolicyOptions:\n  \"strict-cpu-reservation\": \"true\"\n\
         reservedSystemCPUs: \"0-1,32-33\"\n\
         topologyManagerPolicy: \"best-effort\"\n\
         topologyManagerScope: \"container\"\n\
         topologyManagerPolicyOptions:\n  \"prefer-closest-numa-nodes\": \"false\"\n  \"max-allowable-numa-nodes\": null  # set by an earlier file; not wanted\n"
    );
    let none = OwnedConfig::default();
    let below = OwnedConfig {
        reserved_system_cpus: CpuSet::parse("0").unwrap(),
        ..Default::default()
    };
    assert_eq!(
        render_dropin(&none, &below).unwrap(),
        "# Written by nodetopo (NodeResourcePolicy actuation); do not edit: the agent rewrites it.\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         cpuManagerPolicy: \"none\"\n\
         cpuManagerPolicyOptions: {}\n\
         reservedSystemCPUs: null  # set by an earlier file; not wanted\n\
         topologyManagerPolicy: \"none\"\n\
         topologyManagerScope: \"container\"\n\
         topologyManagerPolicyOptions: {}\n"
    );
}
