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
    let (_dir, socket) = serve(FakeKubelet {
        list: list(),
        allocatable: Ok(AllocatableResourcesResponse {
            cpu_ids: (2..64).collect(),
            ..Default::default()
        }),
    });
    let v = read(&socket, Duration::from_secs(5)).await.expect("read");
    assert_eq!(v.allocatable_cpus, CpuSet::parse("2-63").expect("set"));
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
    assert_eq!(v.exclusive(), CpuSet::parse("4-5,8,36-37").expect("set"));
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
        "PodResources: pod default/web-0 container app lists CPU id -3, which is not a valid CPU id"
    );
    println!("podresources: 2 servers, 4 error cases");
}
