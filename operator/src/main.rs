//! nodetopo-operator: reconciles NodeResourcePolicy objects into per-node NodeTopology specs.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use nodetopo_operator::admin::{self, AdminState};
use nodetopo_operator::cli::{Cli, Command, LogFormat, RunArgs};
use nodetopo_operator::controller;
use nodetopo_operator::leader::{self, LeaseConfig};
use nodetopo_operator::metrics::Metrics;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Crds) => print_crds(),
        Some(Command::Run) | None => run(cli.run).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodetopo-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_crds() -> anyhow::Result<()> {
    let yaml = nodetopo_crds::generate::crd_yaml().context("serialising the CRDs")?;
    print!("{yaml}");
    Ok(())
}

/// Resolves on the first SIGTERM or Ctrl-C; a second one aborts the process.
async fn signals(tx: watch::Sender<bool>) {
    let first = wait_signal().await;
    tracing::info!(
        signal = first,
        "shutting down: draining in-flight reconciles"
    );
    let _ = tx.send(true);
    let second = wait_signal().await;
    tracing::warn!(signal = second, "second signal: aborting");
    std::process::exit(130);
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

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let admin_state = AdminState {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let addr = args.metrics_addr;
    let admin = tokio::spawn(async move { admin::serve(addr, admin_state).await });

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(signals(stop_tx.clone()));
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        }
    };

    let client = Client::try_default()
        .await
        .context("building the Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("nodetopo-operator-{}", std::process::id()));

    let mut lost_lease = None;
    if !args.no_leader_election {
        if args.lease_renew_seconds * 2 > args.lease_duration_seconds {
            anyhow::bail!(
                "--lease-renew-seconds ({}) must be at most half of --lease-duration-seconds ({})",
                args.lease_renew_seconds,
                args.lease_duration_seconds
            );
        }
        let cfg = LeaseConfig {
            name: args.lease_name.clone(),
            identity: identity.clone(),
            duration: Duration::from_secs(args.lease_duration_seconds),
            renew_every: Duration::from_secs(args.lease_renew_seconds),
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
        // A standby is healthy and ready: it serves its purpose by waiting.
        ready.store(true, Ordering::SeqCst);
        tracing::info!(lease = %cfg.name, namespace = %args.lease_namespace, %identity, "waiting for the leader lease");
        let observer = tokio::select! {
            o = leader::acquire(&leases, &cfg) => o,
            _ = stopped() => return Ok(()),
        };
        ready.store(false, Ordering::SeqCst);
        metrics.leader.set(1);
        tracing::info!(%identity, "acquired the leader lease");
        let tx = stop_tx.clone();
        lost_lease = Some(tokio::spawn(async move {
            leader::hold(&leases, &cfg, observer).await;
            let _ = tx.send(true);
        }));
    }

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nodetopo-operator".into(),
            instance: Some(identity),
        },
    );
    let ready_flag = ready.clone();
    controller::run(client, metrics.clone(), recorder, ready, stopped).await;
    ready_flag.store(false, Ordering::SeqCst);
    metrics.leader.set(0);
    admin.abort();
    if let Some(handle) = lost_lease {
        if handle.is_finished() {
            anyhow::bail!("lost the leader lease; exiting so that a standby takes over");
        }
        handle.abort();
    }
    tracing::info!("stopped");
    Ok(())
}
