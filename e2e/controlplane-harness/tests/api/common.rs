//! Shared set-up: the control plane, the CRDs installed and Established.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use nodetopo_controlplane::ControlPlane;

/// The shared control plane, or `None` when the tests skip (reason already printed).
pub fn control_plane() -> Option<&'static ControlPlane> {
    match ControlPlane::shared() {
        Ok(cp) => {
            if let Some(cp) = cp {
                println!("control plane: started in {:?} ({})", cp.start_time, cp.url);
            }
            cp
        }
        Err(e) => panic!("control plane: {e}"),
    }
}

/// Every generated CRD applied and Established, as served.
pub async fn install_crds(cp: &ControlPlane) -> Vec<CustomResourceDefinition> {
    cp.install_crds().await.unwrap_or_else(|e| panic!("{e}"))
}

/// The message of an API error, or a panic naming what was expected.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other}"),
    }
}
