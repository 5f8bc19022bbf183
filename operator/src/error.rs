//! Operator errors, classified for metrics and retry.

/// An error while reconciling one object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted, e.g. "apply NodeTopology spec".
        action: &'static str,
        /// The object, e.g. `nodetopology/worker-1`.
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// An object lacks a field the operator needs (never expected from a real API server).
    #[error("{object}: missing {field}")]
    Missing {
        /// The object.
        object: String,
        /// The missing field.
        field: &'static str,
    },
    /// A watch store stopped before its first full list (only while shutting down).
    #[error("the {store} store closed before it was filled")]
    StoreClosed {
        /// Which store.
        store: &'static str,
    },
}

impl Error {
    /// A small fixed set of label values for the error metric.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Api { source, .. } => match source {
                kube::Error::Api(s) if s.code == 409 => "conflict",
                kube::Error::Api(s) if s.code == 404 => "not_found",
                kube::Error::Api(s) if s.code == 403 || s.code == 401 => "forbidden",
                kube::Error::Api(s) if s.code == 422 || s.code == 400 => "invalid",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Error::Missing { .. } => "invalid_object",
            Error::StoreClosed { .. } => "shutdown",
        }
    }

    /// Whether retrying the same object can help: false for an object the API server or the
    /// operator found invalid (it changes only when someone edits it, and the edit triggers
    /// a reconcile by itself), true for conflicts, transport and server errors.
    pub fn is_transient(&self) -> bool {
        !matches!(self.category(), "invalid" | "invalid_object" | "forbidden")
    }
}
