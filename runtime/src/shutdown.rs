//! Graceful stop: the first SIGTERM or Ctrl-C (or [`Shutdown::request`]) asks the process to
//! finish its work in flight; a second signal aborts it at once (exit status 130).

use std::future::Future;

use tokio::sync::watch;

/// The shutdown request shared by a binary's tasks.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
    rx: watch::Receiver<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A request nobody made yet, and no signal handler (see [`Shutdown::on_signals`]).
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Self { tx, rx }
    }

    /// Installs the signal handlers (in the current tokio runtime): the first signal
    /// requests shutdown, a second one aborts the process.
    pub fn on_signals() -> Self {
        let s = Self::new();
        let tx = s.tx.clone();
        tokio::spawn(async move {
            let first = wait_signal().await;
            tracing::info!(
                signal = first,
                "shutting down: finishing the work in flight"
            );
            let _ = tx.send(true);
            let second = wait_signal().await;
            tracing::warn!(signal = second, "second signal: aborting");
            std::process::exit(130);
        });
        s
    }

    /// Requests shutdown (e.g. when a lost lease must end the process).
    pub fn request(&self) {
        let _ = self.tx.send(true);
    }

    /// Whether shutdown was requested.
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once shutdown is requested (at once if it was).
    pub fn requested(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.rx.clone();
        async move {
            // The sender lives in `self` (and the signal task): an error cannot happen
            // while anyone waits.
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

async fn wait_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_request_wakes_every_waiter_and_stays() {
        let s = Shutdown::new();
        assert!(!s.is_requested());
        let waiters: Vec<_> = (0..3).map(|_| tokio::spawn(s.requested())).collect();
        let early = tokio::time::timeout(Duration::from_millis(20), s.requested()).await;
        assert!(early.is_err(), "nothing requested yet");
        s.clone().request();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("woken")
                .expect("task");
        }
        assert!(s.is_requested());
        tokio::time::timeout(Duration::from_secs(5), s.requested())
            .await
            .expect("a later waiter resolves at once");
    }
}
