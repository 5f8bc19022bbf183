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

/// What one dry-run write of a rule case must do.
pub struct Expect<'a> {
    /// `None`: accepted; `Some(field)`: rejected with a message naming `field`.
    pub rejected_at: Option<&'a str>,
    /// Whether the field may also be named as the prefix of a nested path (`field.`).
    pub nested: bool,
    /// Text the rejection must also carry (a CEL rule's message).
    pub message: Option<&'a str>,
}

/// Judges a write against what the case expects: `Ok` says what happened as expected
/// (`accepted` or `rejected: <message>`), `Err` what went wrong.
pub fn expect_rejected<T>(
    got: &Result<T, kube::Error>,
    want: &Expect<'_>,
) -> Result<String, String> {
    match (got, want.rejected_at) {
        (Ok(_), None) => Ok("accepted".to_string()),
        (Err(e), Some(field)) => {
            let msg = api_message(e);
            // A format check on a map's value (int32 under `additionalProperties`) is
            // phrased by the server as `<root>: Invalid value: ...: ... in <path below root>`.
            let below_root = field.split_once('.').map(|(_, rest)| rest);
            let names_field = msg.contains(&format!("{field}:"))
                || (want.nested && msg.contains(&format!("{field}.")))
                || below_root.is_some_and(|rest| msg.ends_with(&format!(" in {rest}")));
            if !names_field {
                Err(format!("rejected without naming {field}: {msg}"))
            } else if want.message.is_some_and(|m| !msg.contains(m)) {
                Err(format!("rejected without the rule's message: {msg}"))
            } else {
                Ok(format!("rejected: {msg}"))
            }
        }
        (Ok(_), Some(field)) => Err(format!("accepted, expected a rejection at {field}")),
        (Err(e), None) => Err(format!("rejected, expected acceptance: {e}")),
    }
}
