//! Shared set-up: the control plane, the CRDs installed and Established.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use nodetopo_controlplane::ControlPlane;

/// The shared control plane, or `None` when the tests skip (reason already printed).
pub fn control_plane() -> Option<&'static ControlPlane> {
    match ControlPlane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("control plane: {e}"),
    }
}

/// Applies every generated CRD (server-side apply; idempotent, so every test may call it) and
/// waits until each is Established. Returns the CRDs as the server stored them.
pub async fn install_crds(cp: &ControlPlane) -> Vec<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(cp.client());
    let pp = PatchParams::apply("nodetopo-controlplane-tests").force();
    let mut names = Vec::new();
    for crd in nodetopo_crds::generate::crds() {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        api.patch(&name, &pp, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    for name in names {
        loop {
            let crd = api.get(&name).await.expect("reading back the CRD");
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                out.push(crd);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "CRD {name} not Established after 30s: {:?}",
                crd.status
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    out
}

/// The message of an API error, or a panic naming what was expected.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other}"),
    }
}
