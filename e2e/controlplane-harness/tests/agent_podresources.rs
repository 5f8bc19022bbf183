//! The agent binary reading a kubelet's PodResources API (a gRPC server generated from the
//! same vendored proto as the agent's client, on a Unix socket) against a real apiserver:
//! NodeTopology status shows the kubelet's assignments with `kubelet.source: PodResources`,
//! the NodeResourceTopology follows the same source (CPUs, pods, devices per NUMA zone),
//! nothing is rewritten while the kubelet's answer stays the same (several re-reads), and
//! both objects follow when the kubelet's answer changes, not the agent's own prediction; a
//! device-only change rewrites the NodeResourceTopology alone.

mod agent_common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_common::{cpus_available, nrt_node_with_two_pods, start_nrt_agent, wait_object};
use kube::api::{Api, DynamicObject};
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_crds::nrt::fingerprint::PodFingerprint;
use nodetopo_crds::nrt::NodeResourceTopology;
use tonic::{Request, Response, Status};

#[allow(clippy::all, missing_docs, dead_code)]
#[path = "../../../agent/src/daemon/inputs/podresources/v1.rs"]
mod v1;

use v1::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use v1::*;

const NODE: &str = "podres-node";
const NS: &str = "podres-test";

/// A kubelet whose answer the test changes; counts the `List` calls it served.
#[derive(Clone, Default)]
struct FakeKubelet {
    list: Arc<Mutex<ListPodResourcesResponse>>,
    allocatable: AllocatableResourcesResponse,
    calls: Arc<Mutex<usize>>,
}

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        *self.calls.lock().map_err(|_| Status::internal("lock"))? += 1;
        let answer = self
            .list
            .lock()
            .map_err(|_| Status::internal("lock"))?
            .clone();
        Ok(Response::new(answer))
    }
    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Ok(Response::new(self.allocatable.clone()))
    }
    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by nodetopo"))
    }
}

fn pod_resources(name: &str, cpus: &[i64], devices: Vec<ContainerDevices>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: NS.into(),
        containers: vec![ContainerResources {
            name: "app".into(),
            cpu_ids: cpus.to_vec(),
            devices,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn gpu(id: &str) -> ContainerDevices {
    ContainerDevices {
        resource_name: "nvidia.com/gpu".into(),
        device_ids: vec![id.into()],
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: 0 }],
        }),
    }
}

fn gpus(o: &NodeResourceTopology) -> Option<(String, String)> {
    let r = o.zone("node-0")?.resource("nvidia.com/gpu")?;
    Some((r.capacity.clone(), r.available.clone()))
}

#[tokio::test]
async fn agent_publishes_what_podresources_reports() {
    let Some((Fixture { cp, bin }, _, nt, _)) = nrt_node_with_two_pods(NS, NODE).await else {
        return;
    };
    let client = cp.client();

    // The kubelet: CPUs of its own choosing (not nodetopo's first-fit ones), two GPUs on
    // NUMA node 0, one of them g-1's.
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let socket: PathBuf = sock_dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet {
        list: Arc::new(Mutex::new(ListPodResourcesResponse {
            pod_resources: vec![
                pod_resources("g-1", &[40, 41, 104, 105], vec![gpu("gpu1")]),
                pod_resources("g-2", &[50, 114], vec![]),
            ],
        })),
        allocatable: AllocatableResourcesResponse {
            cpu_ids: (1..64).chain(65..128).collect(),
            devices: vec![gpu("gpu0"), gpu("gpu1")],
            ..Default::default()
        },
        calls: Arc::default(),
    };
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(kubelet.clone()))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );

    let (_agent, log_path) = start_nrt_agent(&cp, &bin, NODE, "podres-agent", &socket);

    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let (api_ref, nt_ref) = (&api, &nt);
    let get_nrt = move || async move { api_ref.get_opt(NODE).await.ok().flatten() };
    let get_nt = move || async move { nt_ref.get_opt(NODE).await.ok().flatten() };
    let timeout = Duration::from_secs(90);
    let both: PodFingerprint = [(NS, "g-1"), (NS, "g-2")].into_iter().collect();
    let o = wait_object(
        "an object from PodResources with both pods",
        timeout,
        &log_path,
        get_nrt,
        |o: &NodeResourceTopology| {
            o.attribute("nodetopo.io/allocationSource") == Some("PodResources")
                && o.attribute("nodeTopologyPodsFingerprint") == Some(both.sign().as_str())
        },
    )
    .await;
    assert_eq!(cpus_available(&o), 128 - 2 - 6);
    assert_eq!(gpus(&o), Some(("2".to_string(), "1".to_string())));

    // NodeTopology status: the kubelet's view, its source, and the kubelet's CPUs shown.
    let status = wait_object(
        "status.kubelet from PodResources",
        timeout,
        &log_path,
        get_nt,
        |o: &DynamicObject| o.data["status"]["kubelet"]["source"] == "PodResources",
    )
    .await
    .data["status"]
        .clone();
    let k = &status["kubelet"];
    assert_eq!(k["policyName"], "static");
    let assigned: Vec<(String, String)> = k["assignments"]
        .as_array()
        .expect("assignments")
        .iter()
        .map(|a| {
            (
                a["pod"].as_str().unwrap_or_default().to_string(),
                a["cpus"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        assigned.iter().collect::<std::collections::BTreeSet<_>>(),
        [
            (format!("{NS}/g-1"), "40-41,104-105".to_string()),
            (format!("{NS}/g-2"), "50,114".to_string())
        ]
        .iter()
        .collect()
    );
    let g1 = status["allocations"]
        .as_array()
        .expect("allocations")
        .iter()
        .find(|a| a["pod"] == format!("{NS}/g-1"))
        .expect("g-1 allocation")
        .clone();
    assert_eq!(g1["cpus"], "40-41,104-105", "the kubelet's CPUs are shown");
    assert!(
        g1["predictedCPUs"].is_string(),
        "nodetopo's own in predictedCPUs"
    );

    // Writes bounded: the kubelet answers the same across several re-reads (the agent
    // re-reads on its 10 s kubelet tick), and neither object is rewritten.
    let nrt_rv = api.get(NODE).await.expect("nrt").metadata.resource_version;
    let nt_rv = nt.get(NODE).await.expect("nt").metadata.resource_version;
    let calls_before = *kubelet.calls.lock().expect("lock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while *kubelet.calls.lock().expect("lock") < calls_before + 2 {
        assert!(
            Instant::now() < deadline,
            "the agent stopped reading PodResources"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rereads = *kubelet.calls.lock().expect("lock") - calls_before;
    assert_eq!(
        api.get(NODE).await.expect("nrt").metadata.resource_version,
        nrt_rv,
        "NodeResourceTopology rewritten with nothing changed"
    );
    assert_eq!(
        nt.get(NODE).await.expect("nt").metadata.resource_version,
        nt_rv,
        "NodeTopology status rewritten with nothing changed"
    );

    // The kubelet released g-2 (the pod is still in the API, so nodetopo's own admissions
    // would still count it): both objects follow the kubelet's CPUs. The fingerprint is the
    // scheduler plugin's, over the pods the API shows: g-2 is still Running there.
    kubelet.list.lock().expect("lock").pod_resources.truncate(1);
    let o = wait_object(
        "g-2 gone from the kubelet's answer",
        timeout,
        &log_path,
        get_nrt,
        |o: &NodeResourceTopology| cpus_available(o) == 128 - 2 - 4,
    )
    .await;
    assert_eq!(
        o.attribute("nodeTopologyPodsFingerprint"),
        Some(both.sign().as_str())
    );
    assert_eq!(cpus_available(&o), 128 - 2 - 4);
    assert_ne!(o.metadata.resource_version, nrt_rv);
    wait_object(
        "status.kubelet without g-2",
        timeout,
        &log_path,
        get_nt,
        |o: &DynamicObject| {
            o.data["status"]["kubelet"]["assignments"]
                .as_array()
                .is_some_and(|a| a.len() == 1)
        },
    )
    .await;

    // A change the kubelet reports for devices only (g-1 now also holds gpu0): nothing in
    // NodeTopology status changes, the NodeResourceTopology does.
    let nt_rv = nt.get(NODE).await.expect("nt").metadata.resource_version;
    kubelet.list.lock().expect("lock").pod_resources[0].containers[0]
        .devices
        .push(gpu("gpu0"));
    let o = wait_object(
        "gpu0 assigned",
        timeout,
        &log_path,
        get_nrt,
        |o: &NodeResourceTopology| gpus(o) == Some(("2".to_string(), "0".to_string())),
    )
    .await;
    assert_eq!(cpus_available(&o), 128 - 2 - 4);
    assert_eq!(
        nt.get(NODE).await.expect("nt").metadata.resource_version,
        nt_rv,
        "NodeTopology status rewritten for a device change it does not show"
    );
    println!(
        "agent + PodResources: both objects from the kubelet's answer (2 pods, 2 GPUs), no rewrite across {rereads} unchanged re-reads, both rewritten when the kubelet released a pod, only the NRT when a device was assigned"
    );
}
