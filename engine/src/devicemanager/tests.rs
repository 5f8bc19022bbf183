use super::*;
use crate::pod::ResourceList;

fn dev(r: &str, id: &str, nodes: &[usize]) -> DeviceSpec {
    DeviceSpec {
        resource: r.into(),
        id: id.into(),
        numa_nodes: nodes.to_vec(),
        healthy: true,
    }
}

fn pod(uid: &str, gpus: u64) -> Pod {
    let mut rl = ResourceList::default();
    rl.extended.insert("x/gpu".into(), gpus);
    Pod {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
        containers: vec![Container {
            name: "main".into(),
            requests: rl.clone(),
            limits: rl,
            restartable: false,
        }],
        ..Default::default()
    }
}

fn hints_of(m: &DeviceManager, p: &Pod) -> Vec<TopologyHint> {
    match m
        .container_hints(p, &p.containers[0])
        .and_then(|mut h| h.remove("x/gpu"))
    {
        Some(DeviceHints::Implicit(s)) => s.materialize(),
        Some(DeviceHints::Explicit(v)) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn h(bits: u64, preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(NumaMask::from_bits(bits)),
        preferred,
    }
}

#[test]
fn kubelet_hint_rules_and_allocation() {
    let devs = [
        dev("x/gpu", "a", &[0]),
        dev("x/gpu", "b", &[0]),
        dev("x/gpu", "c", &[1]),
        dev("x/gpu", "d", &[1]),
    ];
    let mut m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    let p1 = pod("p1", 1);
    assert_eq!(hints_of(&m, &p1), vec![h(1, true), h(2, true), h(3, false)]);
    let p3 = pod("p3", 3);
    assert_eq!(hints_of(&m, &p3), vec![h(3, true)]);
    // Two on node 1 by hint; then a 3-device request no longer fits anywhere.
    let p2 = pod("p2", 2);
    m.allocate(&p2, &p2.containers[0], Some(&h(2, true)))
        .unwrap();
    assert_eq!(
        m.allocated("p2", "main").unwrap()["x/gpu"],
        ["c".to_string(), "d".to_string()].into_iter().collect()
    );
    assert_eq!(hints_of(&m, &p3), vec![]);
    assert_eq!(hints_of(&m, &p1), vec![h(1, true), h(3, false)]);
    m.remove_pod("p2");
    assert_eq!(m.free("x/gpu").len(), 4);
    // No affinity anywhere: don't care.
    let m2 = DeviceManager::new(&[dev("x/gpu", "a", &[])], &[0, 1]).unwrap();
    assert!(matches!(
        m2.container_hints(&p1, &p1.containers[0]).unwrap()["x/gpu"],
        DeviceHints::DontCare
    ));
    // Unknown resource: nil map.
    let m3 = DeviceManager::new(&[], &[0]).unwrap();
    assert!(m3.container_hints(&p1, &p1.containers[0]).is_none());
    assert!(DeviceManager::new(&[dev("x/gpu", "a", &[7])], &[0]).is_err());
}

#[test]
fn spanning_devices_and_min_width() {
    let devs = [dev("x/gpu", "a", &[0, 1]), dev("x/gpu", "b", &[2])];
    let m = DeviceManager::new(&devs, &[0, 1, 2]).unwrap();
    let hints = hints_of(&m, &pod("p", 2));
    // {0,2} and {1,2} both touch two devices: width 2 is the narrowest.
    assert_eq!(hints[0], h(0b101, true));
    assert_eq!(hints[1], h(0b110, true));
    assert!(hints.iter().all(|x| x.affinity.unwrap().count() >= 2));
}

/// Oracle divergence (kubelet v1.37.2 `deviceNUMANodes`): hints enumerate only the
/// nodes the resource's devices are attached to. Devices on node 0 of a two-node
/// machine: the kubelet answers `[{0} preferred]`, no `{0,1}`.
#[test]
fn hints_cover_only_nodes_with_devices() {
    let devs = [dev("x/gpu", "a", &[0]), dev("x/gpu", "b", &[0])];
    let m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    assert_eq!(hints_of(&m, &pod("p", 1)), vec![h(0b01, true)]);
    assert_eq!(hints_of(&m, &pod("p", 2)), vec![h(0b01, true)]);
    // Sparse ids: devices on nodes 2 and 5 of {0, 2, 5}: masks over {2, 5} only.
    let devs = [dev("x/gpu", "a", &[2]), dev("x/gpu", "b", &[5])];
    let m = DeviceManager::new(&devs, &[0, 2, 5]).unwrap();
    assert_eq!(
        hints_of(&m, &pod("p", 1)),
        vec![
            h(1 << 2, true),
            h(1 << 5, true),
            h((1 << 2) | (1 << 5), false)
        ]
    );
    assert_eq!(
        hints_of(&m, &pod("p", 2)),
        vec![h((1 << 2) | (1 << 5), true)]
    );
}

/// Oracle divergence (kubelet `devicesToAllocate`): a shortfall after reusable devices
/// reports what is still needed and the free devices apart from the reusable ones.
#[test]
fn shortfall_after_reuse_reports_the_remaining_need() {
    let devs = [
        dev("x/gpu", "a", &[0]),
        dev("x/gpu", "b", &[0]),
        dev("x/gpu", "c", &[1]),
    ];
    let mut m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    let mut p = pod("p", 3);
    let mut init = p.containers[0].clone();
    init.name = "init".into();
    init.requests.extended.insert("x/gpu".into(), 1);
    init.limits.extended.insert("x/gpu".into(), 1);
    p.init_containers.push(init);
    let other = pod("q", 1);
    m.allocate(&other, &other.containers[0], Some(&h(0b10, true)))
        .unwrap();
    m.allocate(&p, &p.init_containers[0], Some(&h(0b01, true)))
        .unwrap();
    let err = m
        .allocate(&p, &p.containers[0], Some(&h(0b01, true)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested number of devices unavailable for x/gpu. Requested: 2, Available: 1"
    );
}

/// Allocation order: devices touching the hint by id, then other nodes, then devices
/// without NUMA affinity; with no hint, devices with a topology first (what the kubelet
/// takes with a plugin preferring the lowest ids; without a preference it picks any).
#[test]
fn allocation_order_by_group_then_id() {
    let devs = [
        dev("x/gpu", "a", &[]),
        dev("x/gpu", "b", &[1]),
        dev("x/gpu", "c", &[0]),
        dev("x/gpu", "d", &[0, 1]),
        dev("x/gpu", "e", &[0]),
    ];
    let m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    let free: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    let order = |hint| m.order_by_affinity("x/gpu", &free, hint);
    assert_eq!(
        order(Some(NumaMask::from_bits(0b01))),
        ["c", "d", "e", "b", "a"]
    );
    assert_eq!(
        order(Some(NumaMask::from_bits(0b10))),
        ["b", "d", "c", "e", "a"]
    );
    assert_eq!(order(None), ["b", "c", "d", "e", "a"]);
}

/// Oracle divergence (kubelet `getPodDeviceRequest`: `int(Quantity.Value())` of an exact
/// sum): two containers asking for 3 and 2^63 - 1 devices make a pod request past int64,
/// read as a negative count, which the hints treat as 0 (every mask over the device
/// nodes, single nodes preferred); the engine answered "unavailable" (empty list).
#[test]
fn pod_request_past_int64_wraps_like_the_kubelet() {
    let devs = [dev("x/gpu", "a", &[0]), dev("x/gpu", "b", &[1])];
    let m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    let mut p = pod("p", 3);
    let mut second = p.containers[0].clone();
    second.name = "second".into();
    second
        .limits
        .extended
        .insert("x/gpu".into(), i64::MAX as u64);
    second
        .requests
        .extended
        .insert("x/gpu".into(), i64::MAX as u64);
    p.containers.push(second);
    assert_eq!(m.pod_request(&p)["x/gpu"], 0);
    let Some(DeviceHints::Implicit(s)) = m.pod_hints(&p).and_then(|mut h| h.remove("x/gpu")) else {
        panic!("expected hints");
    };
    assert_eq!(s.materialize(), vec![h(1, true), h(2, true), h(3, false)]);
}

/// Unhealthy devices are never free, but still count where the kubelet decides the
/// hint universe and the narrowest width (`allDevices`).
#[test]
fn unhealthy_devices_count_for_width_not_for_allocation() {
    let mut sick = dev("x/gpu", "b", &[0]);
    sick.healthy = false;
    let devs = [dev("x/gpu", "a", &[0]), sick, dev("x/gpu", "c", &[1])];
    let m = DeviceManager::new(&devs, &[0, 1]).unwrap();
    assert_eq!(m.free("x/gpu").len(), 2);
    // Two devices: node 0 would do with both of its devices (minAffinitySize 1), but
    // only one is healthy, so {0,1} is the only hint and it is not preferred.
    assert_eq!(hints_of(&m, &pod("p", 2)), vec![h(3, false)]);
}
