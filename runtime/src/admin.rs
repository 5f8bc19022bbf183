//! Readiness and the admin HTTP endpoints: `/healthz` (liveness: the process serves),
//! `/readyz` (200 while [`Readiness`] says so, 503 otherwise) and `/metrics` (the text a
//! binary's metrics registry encodes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;

/// Whether the process is ready for its purpose; once [`Readiness::stop`] was called it
/// stays not ready, whatever a later [`Readiness::set`] says.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl Readiness {
    /// Not ready, not stopping.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets readiness (ignored once stopping).
    pub fn set(&self, ready: bool) {
        let stopping = self.stopping.load(Ordering::SeqCst);
        self.ready.store(ready && !stopping, Ordering::SeqCst);
    }

    /// Not ready for good: the process is shutting down.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.ready.store(false, Ordering::SeqCst);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// The content type of the Prometheus/OpenMetrics text exposition.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The admin router. `metrics` encodes the binary's registry; an error answers 500 with its
/// text.
pub fn router<M>(ready: Readiness, metrics: M) -> Router
where
    M: Fn() -> Result<String, String> + Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.is_ready();
                async move {
                    if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = metrics();
                async move {
                    match body {
                        Ok(text) => (
                            StatusCode::OK,
                            [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
                            text,
                        ),
                        Err(e) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                            format!("encoding metrics failed: {e}\n"),
                        ),
                    }
                }
            }),
        )
}

/// Binds `addr` and serves `router` in the background; an error binding names the address.
pub async fn spawn(addr: &str, router: Router) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("admin server: binding {addr}: {e}")))?;
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("admin server stopped: {e}");
        }
    }))
}

/// One plain HTTP/1.1 GET against an admin server, answered as the raw response text (status
/// line, headers, body). For tests of both binaries' admin endpoints.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        http_get(addr, path).await.expect("admin server answers")
    }

    #[tokio::test]
    async fn endpoints_follow_readiness_and_metrics() {
        let ready = Readiness::new();
        let fail = Arc::new(AtomicBool::new(false));
        let f = fail.clone();
        let metrics = move || {
            if f.load(Ordering::SeqCst) {
                Err("broken".to_string())
            } else {
                Ok("# TYPE x gauge\nx 1\n".to_string())
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(ready.clone(), metrics);
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut checked = 0;
        let mut expect = |got: String, status: &str, body: &str| {
            assert!(got.starts_with(status), "{got}");
            assert!(got.contains(body), "{got}");
            checked += 1;
        };
        expect(get(addr, "/healthz").await, "HTTP/1.1 200", "ok");
        expect(get(addr, "/readyz").await, "HTTP/1.1 503", "not ready");
        ready.set(true);
        expect(get(addr, "/readyz").await, "HTTP/1.1 200", "ready");
        expect(get(addr, "/metrics").await, "HTTP/1.1 200", "x 1");
        fail.store(true, Ordering::SeqCst);
        expect(get(addr, "/metrics").await, "HTTP/1.1 500", "broken");
        ready.stop();
        ready.set(true);
        expect(get(addr, "/readyz").await, "HTTP/1.1 503", "not ready");
        println!("{checked} admin responses checked");
    }

    #[tokio::test]
    async fn binding_a_bad_address_names_it() {
        let err = spawn("not-an-address", Router::new()).await.unwrap_err();
        assert!(err.to_string().contains("binding not-an-address"), "{err}");
    }
}
