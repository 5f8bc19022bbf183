//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz` (liveness: the process
//! serves), `/readyz` (200 once this replica is useful: standing by for the lease, or leading
//! with all watches synced; 503 before that and again after SIGTERM).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

/// Shared state of the admin server.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// The metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Readiness flag.
    pub ready: Arc<AtomicBool>,
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    match s.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}"),
        ),
    }
}

async fn readyz(State(s): State<AdminState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// The router (separate from [`serve`] for tests).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves the admin endpoints until the process ends.
pub async fn serve(addr: SocketAddr, state: AdminState) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(state)).await
}
