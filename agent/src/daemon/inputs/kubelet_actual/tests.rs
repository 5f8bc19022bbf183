//! Source choice and the PodResources conversion, without a server (the end-to-end path
//! through a generated gRPC server is in `podresources::tests`).

use super::*;
use crate::daemon::inputs::podresources::ContainerCpus;

fn topo() -> CpuTopology {
    nodetopo_engine::presets::build("epyc-7303-2p").expect("preset")
}

fn view(containers: &[(&str, &str, &str)], allocatable: &str) -> KubeletView {
    KubeletView {
        allocatable_cpus: CpuSet::parse(allocatable).expect("set"),
        containers: containers
            .iter()
            .map(|(pod, c, cpus)| ContainerCpus {
                namespace: "default".into(),
                pod: (*pod).into(),
                container: (*c).into(),
                cpus: CpuSet::parse(cpus).expect("set"),
            })
            .collect(),
        pods: vec![],
        memory: vec![],
        allocatable_memory: vec![],
        devices: Default::default(),
    }
}

#[test]
fn podresources_keys_by_uid_and_names_the_rest() {
    let uid = |_: &str, n: &str| (n == "a").then(|| "uid-a".to_string());
    let a = from_podresources(
        &view(&[("a", "app", "4-5"), ("b", "main", "8")], "1-31,33-63"),
        &topo(),
        uid,
    )
    .expect("valid");
    assert_eq!(a.source, KubeletSource::PodResources);
    assert_eq!(a.policy_name, "static");
    assert_eq!(a.exclusive(), CpuSet::parse("4-5,8").expect("set"));
    assert_eq!(
        a.default_cpu_set,
        CpuSet::parse("0-3,6-7,9-63").expect("set")
    );
    let o = a.observed();
    let got: Vec<(&str, &str, &str, &str)> = o
        .assignments
        .iter()
        .map(|x| {
            (
                x.pod_uid.as_str(),
                x.pod.as_str(),
                x.container.as_str(),
                x.cpus.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("", "default/b", "main", "8"),
            ("uid-a", "default/a", "app", "4-5")
        ]
    );
    let none = from_podresources(&view(&[], ""), &topo(), uid).expect("valid");
    assert_eq!(none.policy_name, "none");
    let e = from_podresources(&view(&[], "0-99"), &topo(), uid).expect_err("refused");
    assert!(e.contains("allocatable cpu 64"), "{e}");
}

/// PodResources read, checkpoint read, the expected source or error.
type Case = (
    Result<Option<KubeletActual>, String>,
    Result<Option<KubeletActual>, String>,
    Result<Option<KubeletSource>, &'static str>,
);

#[test]
fn choose_prefers_podresources_and_says_why_not() {
    let cp = |n: &str| {
        let mut a = from_podresources(&view(&[], "1-63"), &topo(), |_, _| None).expect("ok");
        a.source = KubeletSource::Checkpoint;
        a.policy_name = n.to_string();
        a
    };
    let pr = from_podresources(&view(&[], "1-63"), &topo(), |_, _| None).expect("ok");
    let cases: Vec<Case> = vec![
        (
            Ok(Some(pr.clone())),
            Ok(Some(cp("static"))),
            Ok(Some(KubeletSource::PodResources)),
        ),
        (
            Ok(Some(pr.clone())),
            Err("bad file".into()),
            Ok(Some(KubeletSource::PodResources)),
        ),
        (
            Ok(None),
            Ok(Some(cp("static"))),
            Ok(Some(KubeletSource::Checkpoint)),
        ),
        (
            Err("socket: refused".into()),
            Ok(Some(cp("static"))),
            Ok(Some(KubeletSource::Checkpoint)),
        ),
        (Ok(None), Ok(None), Ok(None)),
        (Ok(None), Err("bad file".into()), Err("bad file")),
        (
            Err("socket: refused".into()),
            Ok(None),
            Err("socket: refused; and there is no kubelet CPU manager checkpoint to fall back to"),
        ),
        (
            Err("socket: refused".into()),
            Err("bad file".into()),
            Err("socket: refused; bad file"),
        ),
    ];
    let n = cases.len();
    for (p, c, want) in cases {
        let fell_back = p.is_err();
        let got = choose(p, c);
        match (&got, want) {
            (Ok(g), Ok(w)) => {
                assert_eq!(g.as_ref().map(|a| a.source), w);
                if let Some(a) = g {
                    assert_eq!(
                        a.fallback.as_deref(),
                        fell_back.then_some("socket: refused")
                    );
                }
            }
            (Err(g), Err(w)) => assert_eq!(g, w),
            _ => panic!("{got:?} vs {want:?}"),
        }
    }
    println!("kubelet source choice: {n} cases");
}
