use nodetopo_engine::spec::{CpuManagerPolicy, TopologyManagerPolicy};

use super::*;
use crate::cmdline;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn flags(line: &str) -> ConfigFlags {
    let args: Vec<String> = line.split_whitespace().map(String::from).collect();
    cmdline::parse(0, &args).unwrap().flags
}

/// Flags win over the config file and the drop-ins (kubeletConfigFlagPrecedence): a
/// string flag replaces the field, a map flag the whole map, gates one by one; a bad
/// file value a flag replaces does not matter, a bad flag value is named.
#[test]
fn flags_override_files_and_dropins() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    std::fs::write(
            &main,
            format!("{HEAD}cpuManagerPolicy: static\nreservedSystemCPUs: \"0-\"\nkubeReserved: {{cpu: 500m, memory: 1Gi}}\nfeatureGates: {{CPUManagerPolicyAlphaOptions: true, CPUManagerPolicyBetaOptions: false}}\n"),
        )
        .unwrap();
    let d = dir.path().join("conf.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(
            d.join("50-a.conf"),
            format!("{HEAD}topologyManagerPolicy: restricted\ncpuManagerPolicyOptions: {{full-pcpus-only: \"true\"}}\n"),
        )
        .unwrap();
    // Without flags the file's reservedSystemCPUs is refused.
    let e = read_config(&main, Some(&d)).unwrap_err().to_string();
    assert!(
        e.contains("reservedSystemCPUs \"0-\"") && e.contains("config.yaml"),
        "{e}"
    );
    let c = read_config_with_flags(
            &main,
            Some(&d),
            &flags("--reserved-cpus=0,32 --topology-manager-policy single-numa-node --cpu-manager-policy-options=align-by-socket=true --kube-reserved=pid=10 --feature-gates=CPUManagerPolicyBetaOptions=true --memory-manager-policy=Static --reserved-memory=0:memory=1Gi"),
        )
        .unwrap();
    assert_eq!(c.owned.reserved_system_cpus.to_string(), "0,32");
    assert_eq!(
        c.owned.topology_manager_policy,
        TopologyManagerPolicy::SingleNumaNode
    );
    assert_eq!(
        c.owned
            .cpu_manager_policy_options
            .keys()
            .collect::<Vec<_>>(),
        ["align-by-socket"],
        "the drop-in's options replaced, not merged"
    );
    assert_eq!(c.kube_reserved.keys().collect::<Vec<_>>(), ["pid"]);
    assert!(c.feature_gates["CPUManagerPolicyBetaOptions"]);
    assert!(c.feature_gates["CPUManagerPolicyAlphaOptions"], "kept");
    assert_eq!(c.memory_manager_policy, "Static");
    assert_eq!(c.reserved_memory.as_ref().map(Vec::len), Some(1));
    // The reserved count follows the flags too.
    let c = read_config_with_flags(
        &main,
        Some(&d),
        &flags("--reserved-cpus= --system-reserved=cpu=1"),
    )
    .unwrap();
    assert_eq!(c.owned.reserved_cpu_count, Some(2), "ceil(0.5 + 1)");
    for (line, want) in [
        (
            "--reserved-cpus=x",
            "set by --reserved-cpus on the kubelet's command line",
        ),
        (
            "--reserved-cpus= --kube-reserved=cpu=lots",
            "kubeReserved.cpu \"lots\" (set by --kube-reserved",
        ),
        ("--reserved-cpus=1 --reserved-memory=0:memory=0", "is zero"),
        (
            "--reserved-cpus=1 --reserved-memory=0:memory=1 --reserved-memory=0:memory=2",
            "reserves memory twice",
        ),
    ] {
        let e = read_config_with_flags(&main, Some(&d), &flags(line))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{line}: {want:?} in {e}");
    }
}

/// `reservedMemory` of the files as the kubelet reads it: the last file that sets the
/// list wins it whole, a drop-in's null limits are pruned, `--reserved-memory` replaces
/// the files' list and an empty one keeps it; values checked on the final list.
#[test]
fn reserved_memory_of_files_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("config.yaml");
    std::fs::write(
            &main,
            format!("{HEAD}reservedMemory: [{{numaNode: 0, limits: {{memory: 1Gi}}}}, {{numaNode: 1.0, limits: {{memory: 1073741824}}}}]\n"),
        )
        .unwrap();
    let d = dir.path().join("conf.d");
    std::fs::create_dir(&d).unwrap();
    let nodes = |c: &KubeletFileConfig| -> Vec<(i32, Vec<(String, String)>)> {
        c.reserved_memory
            .iter()
            .flatten()
            .map(|m| (m.numa_node, m.limits.clone().into_iter().collect()))
            .collect()
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    let c = read_config(&main, Some(&d)).unwrap();
    assert_eq!(
        nodes(&c),
        [
            (0, vec![s("memory", "1Gi")]),
            (1, vec![s("memory", "1073741824")])
        ]
    );
    std::fs::write(
            d.join("50-a.conf"),
            format!("{HEAD}reservedMemory: [{{numaNode: 2, limits: {{memory: null, hugepages-2Mi: \" 4Mi \"}}}}]\n"),
        )
        .unwrap();
    let c = read_config(&main, Some(&d)).unwrap();
    assert_eq!(nodes(&c), [(2, vec![s("hugepages-2Mi", "4Mi")])]);
    let c = read_config_with_flags(&main, Some(&d), &flags("--reserved-memory=")).unwrap();
    assert_eq!(nodes(&c), [(2, vec![s("hugepages-2Mi", "4Mi")])]);
    let c =
        read_config_with_flags(&main, Some(&d), &flags("--reserved-memory=3:memory=1G")).unwrap();
    assert_eq!(nodes(&c), [(3, vec![s("memory", "1G")])]);
    std::fs::write(d.join("60-b.conf"), format!("{HEAD}reservedMemory: null\n")).unwrap();
    assert_eq!(read_config(&main, Some(&d)).unwrap().reserved_memory, None);
    for (body, want) in [
        (
            "reservedMemory: [{numaNode: 0, limits: {cpu: \"1\"}}]",
            "\"cpu\" on NUMA node 0 is not a memory type",
        ),
        (
            "reservedMemory: [{numaNode: 0, limits: {memory: null}}]",
            "is zero",
        ),
        (
            "reservedMemory: [{numaNode: \"0\"}]",
            "numaNode \"0\" is not a number",
        ),
        (
            "reservedMemory: [{numaNode: 4294967297}]",
            "not a 32-bit integer",
        ),
        (
            "reservedMemory: [{numaNode: 0, limits: {memory: lots}}]",
            "limits.memory",
        ),
        (
            "reservedMemory: {numaNode: 0}",
            "reservedMemory is not a list",
        ),
    ] {
        std::fs::write(&main, format!("{HEAD}{body}\n")).unwrap();
        let e = format!("{:#}", read_config(&main, None).unwrap_err());
        assert!(
            e.contains(want) && e.contains("config.yaml"),
            "{body}: {want:?} in {e}"
        );
    }
}

/// AllAlpha/AllBeta as the kubelet v1.37.2 starts with them (checked by the
/// configuration oracle's table cases).
#[test]
fn gate_sets_the_kubelet_refuses() {
    let g = |pairs: &[(&str, bool)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>()
    };
    let none = g(&[]);
    // (flags, config file, merged)
    for (f, d, m) in [
        (g(&[]), g(&[]), g(&[])),
        (g(&[]), g(&[]), g(&[("AllAlpha", true), ("AllBeta", true)])),
        (
            g(&[("GenericWorkload", true)]),
            g(&[("AllAlpha", true), ("GenericWorkload", true)]),
            g(&[("AllAlpha", true), ("GenericWorkload", true)]),
        ),
        (g(&[]), g(&[("AllBeta", false)]), g(&[("AllBeta", false)])),
        (
            g(&[("AllBeta", false)]),
            g(&[("AllBeta", false)]),
            g(&[("AllBeta", false)]),
        ),
        (
            g(&[]),
            g(&[]),
            g(&[
                ("AllBeta", false),
                ("KubeletCrashLoopBackOffMax", true),
                ("KubeletEnsureSecretPulledImages", true),
            ]),
        ),
    ] {
        check_gate_set(&f, &d, &m).unwrap();
    }
    for (f, d, m, want) in [
        (
            none.clone(),
            g(&[("AllAlpha", true)]),
            g(&[("AllAlpha", true)]),
            "WorkloadWithJob is enabled, but depends on GenericWorkload disabled",
        ),
        (
            none.clone(),
            none.clone(),
            g(&[("AllBeta", false)]),
            "KubeletEnsureSecretPulledImages is disabled",
        ),
        (
            none.clone(),
            none.clone(),
            g(&[("KubeletCrashLoopBackOffMax", false)]),
            "KubeletCrashLoopBackOffMax is disabled",
        ),
        (
            none.clone(),
            none.clone(),
            g(&[
                ("AllAlpha", true),
                ("AllBeta", true),
                ("DRAPartitionableDevices", false),
            ]),
            "DRAPartitionableDevicesType is enabled, but depends on DRAPartitionableDevices",
        ),
    ] {
        let e = check_gate_set(&f, &d, &m).unwrap_err().to_string();
        assert!(e.contains(want), "{want:?} in {e}");
    }
}

/// A flag that overrides what the drop-in would set is refused, naming it; one that
/// agrees is fine.
#[test]
fn flags_overriding_the_dropin_are_refused() {
    let mut want = OwnedConfig {
        cpu_manager_policy: CpuManagerPolicy::Static,
        reserved_system_cpus: CpuSet::parse("0-3").unwrap(),
        topology_manager_policy: TopologyManagerPolicy::Restricted,
        ..Default::default()
    };
    want.cpu_manager_policy_options
        .insert("full-pcpus-only".into(), "true".into());
    for fine in [
        "",
        "--reserved-cpus=0-3",
        "--reserved-cpus=0,1,2,3 --cpu-manager-policy=static --topology-manager-scope=container",
        "--cpu-manager-policy-options=full-pcpus-only=true --kube-reserved=cpu=7",
    ] {
        check_flags(&flags(fine), &want).unwrap();
    }
    for (line, name) in [
        ("--reserved-cpus=0-1", "--reserved-cpus=0-1"),
        ("--reserved-cpus=", "--reserved-cpus="),
        ("--cpu-manager-policy=none", "--cpu-manager-policy=none"),
        (
            "--topology-manager-policy=best-effort",
            "--topology-manager-policy=best-effort",
        ),
        (
            "--topology-manager-scope=pod",
            "--topology-manager-scope=pod",
        ),
        (
            "--cpu-manager-policy-options=align-by-socket=true",
            "--cpu-manager-policy-options=align-by-socket=true",
        ),
        (
            "--topology-manager-policy-options=prefer-closest-numa-nodes=true",
            "--topology-manager-policy-options",
        ),
    ] {
        let e = check_flags(&flags(line), &want).unwrap_err().to_string();
        assert!(
            e.contains(name) && e.contains("nothing is planned or changed"),
            "{line}: {e}"
        );
    }
    let e = check_flags(&flags("--reserved-cpus=z"), &want)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--reserved-cpus=z"), "{e}");
}
