//! The client against a PodResourcesLister server generated from the same proto, on a Unix
//! socket in a temporary directory: what the kubelet answers comes out as CPU sets; a
//! failing call, a missing socket and a bad CPU id are errors that name what is wrong.

use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::v1::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use super::v1::*;
use super::*;

#[derive(Clone)]
struct FakeKubelet {
    list: ListPodResourcesResponse,
    allocatable: Result<AllocatableResourcesResponse, Status>,
}

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(self.list.clone()))
    }
    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        self.allocatable.clone().map(Response::new)
    }
    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by nodetopo"))
    }
}

/// Serves `kubelet` on a fresh socket; returns the guard and the socket path.
fn serve(kubelet: FakeKubelet) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(kubelet))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    (dir, socket)
}

fn devices(resource: &str, ids: &[&str], nodes: &[i64]) -> ContainerDevices {
    ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|i| i.to_string()).collect(),
        topology: (!nodes.is_empty()).then(|| TopologyInfo {
            nodes: nodes.iter().map(|id| NumaNode { id: *id }).collect(),
        }),
    }
}

fn container(name: &str, cpus: &[i64], memory: Vec<v1::ContainerMemory>) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        cpu_ids: cpus.to_vec(),
        memory,
        ..Default::default()
    }
}

fn pod(ns: &str, name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers,
        ..Default::default()
    }
}

fn list() -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "default",
                "web-0",
                vec![
                    container("app", &[5, 4, 37, 36], vec![]),
                    container("sidecar", &[], vec![]),
                ],
            ),
            pod(
                "batch",
                "job-1",
                vec![container(
                    "main",
                    &[8],
                    vec![v1::ContainerMemory {
                        memory_type: "hugepages-1Gi".into(),
                        size: 2 << 30,
                        topology: Some(TopologyInfo {
                            nodes: vec![NumaNode { id: 1 }],
                        }),
                    }],
                )],
            ),
        ],
    }
}

#[tokio::test]
async fn reads_list_and_allocatable_from_a_generated_server() {
    let mut answer = list();
    answer.pod_resources[1].containers[0].devices =
        vec![devices("example.com/nic", &["vf1"], &[1])];
    let (_dir, socket) = serve(FakeKubelet {
        list: answer,
        allocatable: Ok(AllocatableResourcesResponse {
            cpu_ids: (2..64).collect(),
            devices: vec![
                devices("example.com/nic", &["vf0"], &[0]),
                devices("example.com/nic", &["vf1"], &[1]),
                // One device on two nodes comes as one entry per node.
                devices("example.com/nic", &["vf2"], &[0]),
                devices("example.com/nic", &["vf2"], &[1]),
                devices("example.com/dongle", &["d0"], &[]),
            ],
            ..Default::default()
        }),
    });
    let v = read(&socket, Duration::from_secs(5)).await.expect("read");
    assert_eq!(v.allocatable_cpus, CpuSet::parse("2-63").expect("set"));
    let nics = &v.devices.allocatable["example.com/nic"];
    let on = |id: &str| nics[id].iter().copied().collect::<Vec<usize>>();
    assert_eq!(
        (on("vf0"), on("vf1"), on("vf2")),
        (vec![0], vec![1], vec![0, 1])
    );
    assert!(v.devices.allocatable["example.com/dongle"]["d0"].is_empty());
    assert_eq!(
        v.devices.assigned["example.com/nic"]
            .iter()
            .collect::<Vec<_>>(),
        ["vf1"]
    );
    let got: Vec<(String, String, String)> = v
        .containers
        .iter()
        .map(|c| {
            (
                format!("{}/{}", c.namespace, c.pod),
                c.container.clone(),
                c.cpus.to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "batch/job-1".to_string(),
                "main".to_string(),
                "8".to_string()
            ),
            (
                "default/web-0".to_string(),
                "app".to_string(),
                "4-5,36-37".to_string()
            ),
        ],
        "sorted, CPU-less containers left out"
    );
    assert_eq!(v.memory.len(), 1);
    assert_eq!(
        (
            v.memory[0].memory_type.as_str(),
            v.memory[0].size,
            v.memory[0].numa_nodes.clone()
        ),
        ("hugepages-1Gi", 2 << 30, vec![1])
    );
}

#[tokio::test]
async fn failures_name_the_socket_the_call_and_the_value() {
    let (_dir, socket) = serve(FakeKubelet {
        list: list(),
        allocatable: Err(Status::unavailable("kubelet restarting")),
    });
    let e = read(&socket, Duration::from_secs(5))
        .await
        .expect_err("fails");
    let msg = e.to_string();
    assert!(
        msg.contains("GetAllocatableResources failed")
            && msg.contains("kubelet restarting")
            && msg.contains(&socket.display().to_string()),
        "{msg}"
    );

    let missing = socket.with_file_name("absent.sock");
    let e = read(&missing, Duration::from_secs(2))
        .await
        .expect_err("fails");
    assert!(matches!(e, PodResourcesError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("absent.sock"), "{e}");

    let mut bad = list();
    bad.pod_resources[0].containers[0].cpu_ids.push(-3);
    let e = view(&bad, &AllocatableResourcesResponse::default()).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "PodResources: pod default/web-0 container app lists CPU id -3, which is not a valid CPU id (nodetopo reads ids 0 to 8191, Linux's largest NR_CPUS)"
    );
    let bad_numa = AllocatableResourcesResponse {
        devices: vec![devices("example.com/nic", &["vf0"], &[-1])],
        ..Default::default()
    };
    let e = view(&list(), &bad_numa).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "PodResources: allocatable example.com/nic devices [\"vf0\"] names NUMA node -1, which is not a valid NUMA node id"
    );
    println!("podresources: 2 servers, 5 error cases");
}

/// Guaranteed pod `name` with one container per `(container, cpus)`.
fn guaranteed(
    name: &str,
    uid: &str,
    containers: &[(&str, u64)],
) -> crate::daemon::inputs::pods::PodInfo {
    use nodetopo_engine::{Container, Pod, ResourceList};
    let containers = containers
        .iter()
        .map(|(c, cpus)| {
            let res = ResourceList {
                cpu_millis: Some(cpus * 1000),
                memory_bytes: Some(1 << 30),
                ..Default::default()
            };
            Container {
                name: (*c).into(),
                requests: res.clone(),
                limits: res,
                restartable: false,
            }
        })
        .collect();
    crate::daemon::inputs::pods::PodInfo {
        pod: Pod {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
            init_containers: vec![],
            containers,
        },
        created: None,
        terminal: false,
        phase: "Running".into(),
        kubelet_refusal: None,
        running: Default::default(),
    }
}

/// The agent's whole path: a kubelet answering over the generated server, read by the
/// client the daemon uses, fed to the core; NodeTopology status shows the kubelet's CPUs
/// with source `PodResources`, and falls back to the checkpoint (saying why) when the
/// server fails or answers malformed ids, and reads nothing when the socket is absent.
#[tokio::test]
async fn status_follows_podresources_and_falls_back_to_the_checkpoint() {
    use crate::daemon::core::{Core, Event};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nodetopo_crds::conditions;
    use nodetopo_crds::KubeletSource;
    use nodetopo_kubelet::cpu_checkpoint::{CheckpointFormat, ChecksumCheck, CpuCheckpoint};
    use std::collections::BTreeMap;

    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let spec: nodetopo_crds::NodeTopologySpec = serde_json::from_value(serde_json::json!({
        "cpuManager": {"policy": "static", "reservedSystemCPUs": "0,32"},
        "topologyManager": {"policy": "single-numa-node"}
    }))
    .expect("spec");
    let now = Time("2030-01-01T00:00:00Z".parse().expect("ts"));
    let mut core = Core::new(topo.clone(), None, None);
    core.apply(Event::Spec(Some((spec, Some(1)))));
    core.apply(Event::PodsSynced(vec![
        guaranteed("web-0", "u1", &[("app", 4), ("sidecar", 2)]),
        guaranteed("db-0", "u22", &[("main", 2)]),
    ]));
    assert!(core.reconcile());
    // What nodetopo decided, per container: the kubelet is made to answer exactly that.
    let mut decided: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for a in core.allocations() {
        let ids = CpuSet::parse(&a.cpus)
            .expect("set")
            .iter()
            .map(|c| c as i64)
            .collect();
        decided.insert((a.pod.clone(), a.container.clone()), ids);
    }
    assert_eq!(decided.len(), 3);
    let ids = |pod: &str, c: &str| decided[&(format!("default/{pod}"), c.to_string())].clone();
    let answer = ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "default",
                "web-0",
                vec![
                    container("app", &ids("web-0", "app"), vec![]),
                    container("sidecar", &ids("web-0", "sidecar"), vec![]),
                ],
            ),
            pod(
                "default",
                "db-0",
                vec![ContainerResources {
                    devices: vec![devices("nvidia.com/gpu", &["gpu1"], &[0])],
                    ..container("main", &ids("db-0", "main"), vec![])
                }],
            ),
            pod("kube-system", "shared", vec![container("c", &[], vec![])]),
        ],
    };
    let allocatable = AllocatableResourcesResponse {
        cpu_ids: (1..32).chain(33..64).collect(),
        devices: vec![
            devices("nvidia.com/gpu", &["gpu0"], &[0]),
            devices("nvidia.com/gpu", &["gpu1"], &[0]),
        ],
        ..Default::default()
    };
    let (_dir, socket) = serve(FakeKubelet {
        list: answer.clone(),
        allocatable: Ok(allocatable.clone()),
    });
    let timeout = Duration::from_secs(5);
    core.apply(Event::PodResources(read_if_present(&socket, timeout).await));
    let st = core.status(&[], &now);
    let k = st.kubelet.clone().expect("kubelet");
    assert_eq!(k.source, KubeletSource::PodResources);
    assert_eq!(k.policy_name, "static");
    assert_eq!(k.assignments.len(), 3);
    assert!(
        k.assignments.iter().all(|a| !a.pod_uid.is_empty()),
        "UIDs resolved"
    );
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (agree.status.as_str(), agree.reason.as_str()),
        ("True", "Agree"),
        "{}",
        agree.message
    );
    assert!(agree.message.contains("PodResources"), "{}", agree.message);
    // The NodeResourceTopology object reads the same source, devices included.
    let nrt = crate::daemon::publish::nrt::desired(&core, &st, "n1").expect("object");
    assert_eq!(
        nrt.attribute("nodetopo.io/allocationSource"),
        Some("PodResources")
    );
    let gpu = |zone: &str| {
        nrt.zone(zone)
            .and_then(|z| z.resource("nvidia.com/gpu"))
            .map(|r| (r.capacity.clone(), r.available.clone()))
    };
    assert_eq!(gpu("node-0"), Some(("2".to_string(), "1".to_string())));
    assert_eq!(gpu("node-1"), None);

    // The kubelet placed web-0/app elsewhere: status shows the kubelet's CPUs.
    let mut moved = answer.clone();
    let free: Vec<i64> = (1..64)
        .filter(|c| *c != 32 && !decided.values().flatten().any(|d| d == c))
        .take(4)
        .collect();
    moved.pod_resources[0].containers[0].cpu_ids = free.clone();
    let (_dir2, socket2) = serve(FakeKubelet {
        list: moved,
        allocatable: Ok(allocatable.clone()),
    });
    core.apply(Event::PodResources(
        read_if_present(&socket2, timeout).await,
    ));
    let st = core.status(&[], &now);
    let app = st
        .allocations
        .iter()
        .find(|a| a.pod == "default/web-0" && a.container == "app")
        .expect("app");
    let want: CpuSet = free.iter().map(|c| *c as usize).collect();
    assert_eq!(app.cpus, want.to_string(), "the kubelet's CPUs are shown");
    assert!(
        app.predicted_cpus.is_some(),
        "nodetopo's moved to predictedCPUs"
    );
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(agree.reason, "Disagree", "{}", agree.message);
    assert!(
        agree.message.contains("default/web-0/app"),
        "{}",
        agree.message
    );

    // A checkpoint to fall back to.
    let mut entries: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    entries.entry("u22".into()).or_default().insert(
        "main".into(),
        ids("db-0", "main").iter().map(|c| *c as usize).collect(),
    );
    core.apply(Event::Kubelet(Ok(Some(CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: CpuSet::new(),
        entries,
        checksum: 0,
        format: CheckpointFormat::V2,
        pod_entries: Default::default(),
        checksum_check: ChecksumCheck::NotRecorded,
    }))));

    // The server fails: the checkpoint is used, and the condition says why.
    let (_dir3, failing) = serve(FakeKubelet {
        list: answer.clone(),
        allocatable: Err(Status::internal("cpu manager not ready")),
    });
    core.apply(Event::PodResources(
        read_if_present(&failing, timeout).await,
    ));
    let st = core.status(&[], &now);
    let k = st.kubelet.clone().expect("kubelet");
    assert_eq!(
        (k.source, k.assignments.len()),
        (KubeletSource::Checkpoint, 1)
    );
    assert_eq!(k.assignments[0].pod, "default/db-0", "named from the pods");
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert!(
        agree.message.contains("PodResources failed")
            && agree.message.contains("cpu manager not ready")
            && agree.message.contains("checkpoint"),
        "{}",
        agree.message
    );

    // Malformed ids: refused with the pod and container named; the checkpoint is used.
    let mut bad = answer.clone();
    bad.pod_resources[1].containers[0].cpu_ids.push(-1);
    let (_dir4, malformed) = serve(FakeKubelet {
        list: bad,
        allocatable: Ok(allocatable.clone()),
    });
    core.apply(Event::PodResources(
        read_if_present(&malformed, timeout).await,
    ));
    let st = core.status(&[], &now);
    assert_eq!(
        st.kubelet.as_ref().map(|k| k.source),
        Some(KubeletSource::Checkpoint)
    );
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert!(
        agree
            .message
            .contains("pod default/db-0 container main lists CPU id -1"),
        "{}",
        agree.message
    );

    // A CPU the machine does not have, or one CPU in two pods: an invariant, named.
    for (pod_ix, id, what) in [(1usize, 200i64, "not a CPU of this machine"), (1, -2, "")] {
        if id < 0 {
            // Two pods on one CPU.
            let mut two = answer.clone();
            two.pod_resources[1].containers[0].cpu_ids = ids("web-0", "app");
            let (_d, s) = serve(FakeKubelet {
                list: two,
                allocatable: Ok(allocatable.clone()),
            });
            core.apply(Event::PodResources(read_if_present(&s, timeout).await));
            let st = core.status(&[], &now);
            let agree =
                conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
            assert!(
                agree.message.contains("is held by both"),
                "{}",
                agree.message
            );
            continue;
        }
        let mut off = answer.clone();
        off.pod_resources[pod_ix].containers[0].cpu_ids = vec![id];
        let (_d, s) = serve(FakeKubelet {
            list: off,
            allocatable: Ok(allocatable.clone()),
        });
        core.apply(Event::PodResources(read_if_present(&s, timeout).await));
        let st = core.status(&[], &now);
        let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
        assert!(agree.message.contains(what), "{}", agree.message);
    }

    // The socket is absent (not mounted): the checkpoint, silently; no socket configured
    // either.
    let absent = socket.with_file_name("absent.sock");
    assert_eq!(read_if_present(&absent, timeout).await, Ok(None));
    assert_eq!(read_if_present(Path::new(""), timeout).await, Ok(None));
    core.apply(Event::PodResources(Ok(None)));
    let st = core.status(&[], &now);
    assert_eq!(
        st.kubelet.as_ref().map(|k| k.source),
        Some(KubeletSource::Checkpoint)
    );
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert!(!agree.message.contains("PodResources"), "{}", agree.message);

    // Neither source: source None, and a failing PodResources with no checkpoint is an error.
    core.apply(Event::Kubelet(Ok(None)));
    let st = core.status(&[], &now);
    assert_eq!(
        st.kubelet.as_ref().map(|k| k.source),
        Some(KubeletSource::None)
    );
    core.apply(Event::PodResources(
        read_if_present(&failing, timeout).await,
    ));
    let st = core.status(&[], &now);
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(agree.reason, "KubeletStateUnreadable", "{}", agree.message);
    assert!(
        agree.message.contains("no kubelet CPU manager checkpoint"),
        "{}",
        agree.message
    );

    // A kubelet with policy none (no allocatable CPUs): said so, not shown as pinned.
    let (_dir5, none) = serve(FakeKubelet {
        list: ListPodResourcesResponse {
            pod_resources: vec![pod("default", "web-0", vec![container("app", &[], vec![])])],
        },
        allocatable: Ok(AllocatableResourcesResponse::default()),
    });
    core.apply(Event::PodResources(read_if_present(&none, timeout).await));
    let st = core.status(&[], &now);
    let k = st.kubelet.clone().expect("kubelet");
    assert_eq!(
        (k.source, k.policy_name.as_str()),
        (KubeletSource::PodResources, "none")
    );
    let agree = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (agree.status.as_str(), agree.reason.as_str()),
        ("False", "KubeletPolicyNone"),
        "{}",
        agree.message
    );
    assert!(
        agree
            .message
            .contains("3 allocations shown are nodetopo's predictions"),
        "{}",
        agree.message
    );
    println!(
        "podresources status path: 7 servers (agree, moved, failing, malformed id, off-machine id, shared CPU, policy none), 2 absent sockets, checkpoint fallback 4 times"
    );
}

/// Pod-level resource managers: a pod's pod-level `cpu_ids` are read (a bad id named), and
/// its pod-level memory blocks replace its containers' (which they include).
#[test]
fn pod_level_cpus_and_memory_are_read() {
    let mem = |size: u64, node: i64| v1::ContainerMemory {
        memory_type: "memory".into(),
        size,
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: node }],
        }),
    };
    let mut p = pod(
        "team",
        "p",
        vec![container("app", &[9], vec![mem(1 << 30, 1)])],
    );
    p.cpu_ids = vec![8, 9, 10];
    p.memory = vec![mem(3 << 30, 1)];
    let list = ListPodResourcesResponse {
        pod_resources: vec![p.clone()],
    };
    let v = view(&list, &AllocatableResourcesResponse::default()).expect("view");
    assert_eq!(v.pods.len(), 1);
    assert_eq!(
        (v.pods[0].pod.as_str(), v.pods[0].cpus.to_string()),
        ("p", "8-10".to_string())
    );
    let blocks: Vec<(&str, u64)> = v
        .memory
        .iter()
        .map(|m| (m.container.as_str(), m.size))
        .collect();
    assert_eq!(
        blocks,
        [("", 3 << 30)],
        "the pod's blocks, not its container's too"
    );
    p.cpu_ids = vec![-1];
    let list = ListPodResourcesResponse {
        pod_resources: vec![p],
    };
    let e = view(&list, &AllocatableResourcesResponse::default()).unwrap_err();
    assert!(e.to_string().contains("pod team/p"), "{e}");
}
