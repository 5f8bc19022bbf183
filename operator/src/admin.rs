//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz` (liveness: the process
//! serves), `/readyz` (200 once this replica is useful: standing by for the lease, or leading
//! with all watches synced; 503 before that and again after SIGTERM).

use std::sync::Arc;

use axum::Router;
use nodetopo_runtime::admin::Readiness;

use crate::metrics::Metrics;

/// The operator's admin router: [`nodetopo_runtime::admin::router`] over its [`Metrics`].
pub fn router(metrics: Arc<Metrics>, ready: Readiness) -> Router {
    nodetopo_runtime::admin::router(ready, move || metrics.encode().map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        nodetopo_runtime::admin::http_get(addr, path)
            .await
            .expect("admin server answers")
    }

    #[tokio::test]
    async fn endpoints() {
        let ready = Readiness::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(Arc::new(Metrics::new()), ready.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        ready.set(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(m.contains("# TYPE nodetopo_operator_leader gauge"), "{m}");
    }
}
