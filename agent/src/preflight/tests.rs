use std::fs;

use super::*;

const DIR: &str = "/etc/kubernetes/kubelet.conf.d";
const CONFIG: &str = "/var/lib/kubelet/config.yaml";

fn want() -> Want {
    Want {
        config: CONFIG.to_string(),
        config_dir: DIR.to_string(),
    }
}

fn kubelet(args: &[&str]) -> KubeletCommandLine {
    let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    kubelet_cmdline::parse(812, &argv).expect("a valid command line")
}

/// A node where everything is in place.
fn ready() -> HostFacts {
    HostFacts {
        kubelets: vec![kubelet(&[
            "--config=/var/lib/kubelet/config.yaml",
            "--config-dir=/etc/kubernetes/kubelet.conf.d",
        ])],
        config_dir_exists: true,
        config_exists: true,
        system_bus: true,
        systemd_private: true,
        layout: Layout {
            kubeadm: true,
            ..Layout::default()
        },
    }
}

fn failed(findings: &[Finding]) -> Vec<(&'static str, String)> {
    findings
        .iter()
        .filter(|f| !f.ok)
        .map(|f| (f.check, f.change.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn a_ready_node_passes_every_check() {
    let f = advise(&ready(), &want());
    assert!(f.iter().all(|f| f.ok && f.change.is_none()), "{f:#?}");
    assert_eq!(
        f.iter().map(|f| f.check).collect::<Vec<_>>(),
        [
            "config-dir",
            "config",
            "config-dir-exists",
            "config-exists",
            "systemd-socket"
        ]
    );
}

#[test]
fn stock_kubeadm_gets_the_extra_args_line_with_its_current_flags_kept() {
    let mut facts = ready();
    facts.kubelets = vec![kubelet(&["--config=/var/lib/kubelet/config.yaml"])];
    facts.config_dir_exists = false;
    facts.layout.extra_args_file = Some((
        "/etc/default/kubelet".to_string(),
        Some("--node-ip=10.0.0.5".to_string()),
    ));
    let f = advise(&facts, &want());
    assert_eq!(
        failed(&f),
        [
            (
                "config-dir",
                "mkdir -p /etc/kubernetes/kubelet.conf.d\nin /etc/default/kubelet, set the line:\n  KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5 --config-dir=/etc/kubernetes/kubelet.conf.d\nsystemctl restart kubelet".to_string()
            ),
            (
                "config-dir-exists",
                "mkdir -p /etc/kubernetes/kubelet.conf.d   (before the kubelet restarts with the flag)"
                    .to_string()
            ),
        ]
    );
    let msg = &f
        .iter()
        .find(|f| f.check == "config-dir")
        .expect("check")
        .message;
    assert!(
        msg.contains("process 812") && msg.contains("without --config-dir"),
        "{msg}"
    );
}

#[test]
fn kind_needs_the_private_socket_and_a_lasting_kubeadm_patch() {
    let mut facts = ready();
    facts.kubelets = vec![kubelet(&["--config=/var/lib/kubelet/config.yaml"])];
    facts.system_bus = false;
    facts.layout.kind = true;
    facts.layout.extra_args_file = Some(("/etc/default/kubelet".to_string(), None));
    let f = failed(&advise(&facts, &want()));
    assert_eq!(f.len(), 2, "{f:#?}");
    assert_eq!(f[0].0, "config-dir");
    assert!(
        f[0].1
            .contains("KUBELET_EXTRA_ARGS=--config-dir=/etc/kubernetes/kubelet.conf.d\n")
            && f[0].1.contains("kubeadmConfigPatches")
            && f[0]
                .1
                .contains("{name: config-dir, value: /etc/kubernetes/kubelet.conf.d}"),
        "{}",
        f[0].1
    );
    assert_eq!(
        f[1],
        (
            "systemd-socket",
            "helm values: agent.actuation.systemdBus=private".to_string()
        )
    );
}

#[test]
fn a_kubelet_with_other_files_names_the_chart_values() {
    let mut facts = ready();
    facts.kubelets = vec![kubelet(&[
        "--config=/etc/kubernetes/kubelet/config.json",
        "--config-dir=/etc/kubernetes/kubelet/config.json.d",
    ])];
    assert_eq!(
        failed(&advise(&facts, &want())),
        [
            (
                "config-dir",
                "helm values: agent.actuation.kubeletConfigDir=/etc/kubernetes/kubelet/config.json.d"
                    .to_string()
            ),
            (
                "config",
                "helm values: agent.actuation.kubeletConfig=/etc/kubernetes/kubelet/config.json"
                    .to_string()
            ),
        ]
    );
}

#[test]
fn an_embedded_kubelet_points_at_its_own_directory() {
    let mut facts = ready();
    facts.kubelets.clear();
    facts.config_exists = false;
    facts.layout = Layout {
        embedded: Some((
            "k3s".to_string(),
            "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d".to_string(),
        )),
        ..Layout::default()
    };
    let f = failed(&advise(&facts, &want()));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].0, "kubelet");
    assert!(
        f[0].1.contains(
            "agent.actuation.kubeletConfigDir=/var/lib/rancher/k3s/agent/etc/kubelet.conf.d"
        ) && f[0].1.contains("checkKubeletProcess=false")
            && f[0].1.contains("k3s.service or k3s-agent.service"),
        "{}",
        f[0].1
    );
}

#[test]
fn no_kubelet_and_no_systemd_socket_are_both_named() {
    let mut facts = ready();
    facts.kubelets.clear();
    facts.layout = Layout::default();
    facts.system_bus = false;
    facts.systemd_private = false;
    let f = advise(&facts, &want());
    let bad = failed(&f);
    assert_eq!(
        bad.iter().map(|b| b.0).collect::<Vec<_>>(),
        ["kubelet", "systemd-socket"]
    );
    assert!(bad[1].1.contains("restart=command") && bad[1].1.contains("restart=none"));
}

#[test]
fn env_values_lose_their_quotes_and_the_last_line_wins() {
    let text = "# comment\nKUBELET_EXTRA_ARGS=--a=1\nKUBELET_EXTRA_ARGS=\"--b=2 --c\"\nOTHER=x\n";
    assert_eq!(
        env_value(text, "KUBELET_EXTRA_ARGS").as_deref(),
        Some("--b=2 --c")
    );
    assert_eq!(env_value(text, "KUBELET_EXTRA"), None);
    assert_eq!(env_value("", "KUBELET_EXTRA_ARGS"), None);
}

/// The whole command on a recorded host: a kubeadm node (deb) whose kubelet runs without
/// --config-dir, with a system bus.
#[test]
fn reads_a_host_tree_and_its_proc() {
    let root = tempfile::tempdir().expect("temp dir");
    let r = root.path();
    let write = |p: &str, body: &[u8]| {
        let path = r.join(p);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, body).expect("write");
    };
    write(
        "proc/812/cmdline",
        b"/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--node-ip=10.0.0.5\0",
    );
    // The kubelet runs as root (its executable is not readable in a tree like this one: the
    // program name counts).
    write("proc/812/status", b"Name:\tkubelet\nUid:\t0\t0\t0\t0\n");
    write("proc/900/cmdline", b"/usr/sbin/sshd\0-D\0");
    write("proc/self/cmdline", b"x\0");
    write(
        "etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        b"[Service]\n",
    );
    write(
        "etc/default/kubelet",
        b"KUBELET_EXTRA_ARGS=\"--max-pods=200\"\n",
    );
    write("etc/debian_version", b"12.0\n");
    write(
        "var/lib/kubelet/config.yaml",
        b"kind: KubeletConfiguration\n",
    );
    write("run/dbus/system_bus_socket", b"");
    let facts = HostFacts::read(r, &r.join("proc"), &want()).expect("facts");
    assert_eq!(facts.kubelets.len(), 1, "{:?}", facts.kubelets);
    assert_eq!(facts.kubelets[0].pid, 812);
    assert!(facts.layout.kubeadm && !facts.layout.kind && facts.config_exists);
    assert!(!facts.config_dir_exists && facts.system_bus && !facts.systemd_private);
    let f = failed(&advise(&facts, &want()));
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(
        f[0].1.contains(
            "in /etc/default/kubelet, set the line:\n  KUBELET_EXTRA_ARGS=--max-pods=200 --config-dir=/etc/kubernetes/kubelet.conf.d"
        ),
        "{}",
        f[0].1
    );
    assert_eq!(f[1].0, "config-dir-exists");

    // The same host once changed as told: ready.
    fs::create_dir_all(r.join("etc/kubernetes/kubelet.conf.d")).expect("mkdir");
    write(
        "proc/812/cmdline",
        b"/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--config-dir=/etc/kubernetes/kubelet.conf.d\0",
    );
    let facts = HostFacts::read(r, &r.join("proc"), &want()).expect("facts");
    assert!(advise(&facts, &want()).iter().all(|f| f.ok));
}

#[test]
fn an_unreadable_proc_is_an_error_naming_it() {
    let root = tempfile::tempdir().expect("temp dir");
    let missing = root.path().join("no-proc");
    let err = HostFacts::read(root.path(), &missing, &want()).expect_err("no /proc");
    assert!(format!("{err:#}").contains("no-proc"), "{err:#}");
}
