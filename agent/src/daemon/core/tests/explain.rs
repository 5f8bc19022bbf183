//! Pods the kubelet refused: explained, published, kept across a restart, bounded.

use super::*;

/// `p` as the kubelet leaves a pod it refused at admission.
fn refused_by_kubelet(mut p: PodInfo, reason: &str) -> PodInfo {
    p.terminal = true;
    p.phase = "Failed".into();
    p.kubelet_refusal = Some((
        reason.into(),
        "Pod was rejected: Resources cannot be allocated with Topology locality".into(),
    ));
    p
}

#[test]
fn a_kubelet_refusal_is_explained_once_published_and_kept_across_a_restart() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    let big = refused_by_kubelet(
        pod("big", "ubig", "2024-01-01T00:00:01Z", 40),
        "TopologyAffinityError",
    );
    core.apply(Event::PodsSynced(vec![
        pod("fill", "ufill", "2024-01-01T00:00:00Z", 20),
        big.clone(),
        pod("later", "ulater", "2024-01-01T00:00:02Z", 2),
    ]));
    assert!(core.reconcile());
    let st = core.status(&[], &now());
    let [r] = st.rejections.as_slice() else {
        panic!("one rejection: {:?}", st.rejections)
    };
    assert!(r.by_kubelet);
    assert_eq!(
        (r.pod.as_str(), r.container.as_str(), r.reason.as_str()),
        ("default/big", "app", "TopologyAffinityError")
    );
    let e = r.explanation.as_ref().expect("an explanation");
    assert_eq!(e.agreement, nodetopo_engine::report::Agreement::Agree);
    // The replay runs without "later" (created after big): fill's 20 CPUs are on node 0,
    // whose 30 assignable CPUs (0 and its sibling 32 reserved) leave 10; node 1 has 32.
    let free: Vec<(u64, u64)> = e
        .numa_nodes
        .iter()
        .map(|n| (n.id, n.free_cpu_count))
        .collect();
    assert_eq!(free, vec![(0, 10), (1, 32)]);
    assert_eq!(st.summary.as_ref().map(|s| s.rejections), Some(1));
    assert_eq!(
        core.tally.explanations,
        BTreeMap::from([(("TopologyAffinityError".to_string(), "Agree"), 1)])
    );
    let metrics = crate::daemon::publish::metrics::Metrics::new();
    metrics.observe(&core, std::time::Duration::ZERO);
    metrics.observe(&core, std::time::Duration::ZERO);
    let text = metrics.encode();
    assert!(
        text.contains(
            "nodetopo_admission_explanations_total{reason=\"TopologyAffinityError\",agreement=\"Agree\"} 1\n"
        ),
        "{text}"
    );
    // One Event's worth, once.
    assert_eq!(core.take_new_explanations().len(), 1);
    assert!(!core.reconcile());
    assert!(core.take_new_explanations().is_empty());
    // A restart keeps the explanation made at the time, and makes no new one.
    let cp = core.checkpoint().expect("checkpoint");
    let mut again = Core::new(topo(), Some(cp), None);
    again.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    again.apply(Event::PodsSynced(vec![
        pod("fill", "ufill", "2024-01-01T00:00:00Z", 20),
        big,
        pod("later", "ulater", "2024-01-01T00:00:02Z", 2),
    ]));
    again.reconcile();
    assert!(again.take_new_explanations().is_empty());
    assert_eq!(again.status(&[], &now()).rejections, st.rejections);
    // Gone with its pod.
    again.apply(Event::PodDelete("ubig".into()));
    assert!(again.reconcile());
    assert!(again.status(&[], &now()).rejections.is_empty());
}

#[test]
fn a_kubelet_refusal_the_replay_admits_is_published_as_a_disagreement() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    // nodetopo admitted the pod first; then the kubelet refused it.
    let small = pod("small", "usmall", "2024-01-01T00:00:00Z", 2);
    core.apply(Event::PodsSynced(vec![small.clone()]));
    core.reconcile();
    assert_eq!(core.allocations().count(), 1);
    core.apply(Event::PodUpsert(Box::new(refused_by_kubelet(
        small,
        "TopologyAffinityError",
    ))));
    assert!(core.reconcile());
    assert_eq!(core.allocations().count(), 0, "released");
    let st = core.status(&[], &now());
    let e = st.rejections[0].explanation.as_ref().expect("explained");
    assert_eq!(e.agreement, nodetopo_engine::report::Agreement::Disagree);
    assert!(
        e.summary
            .contains("nodetopo's replay disagrees: fidelity bug"),
        "{}",
        e.summary
    );
    // Its own CPUs are not counted as taken in the replay.
    assert_eq!(e.numa_nodes[0].free_cpu_count, 30);
    assert_eq!(
        core.tally.explanations,
        BTreeMap::from([(("TopologyAffinityError".to_string(), "Disagree"), 1)])
    );
}

#[test]
fn only_the_newest_kubelet_refusals_are_published() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    let n = MAX_PUBLISHED_EXPLAINED + 5;
    let pods: Vec<PodInfo> = (0..n)
        .map(|i| {
            refused_by_kubelet(
                pod(
                    &format!("p{i:02}"),
                    &format!("u{i:02}"),
                    &format!("2024-01-01T00:00:{i:02}Z"),
                    40,
                ),
                "TopologyAffinityError",
            )
        })
        .collect();
    core.apply(Event::PodsSynced(pods));
    core.reconcile();
    let st = core.status(&[], &now());
    assert_eq!(st.rejections.len(), MAX_PUBLISHED_EXPLAINED);
    assert_eq!(st.rejections[0].pod, "default/p05");
    assert_eq!(st.summary.map(|s| s.rejections), Some(n as i32));
    assert_eq!(core.take_new_explanations().len(), n);
}
