//! nodetopo-operator: reconciles NodeResourcePolicy objects into per-node NodeTopology specs.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use nodetopo_operator::admin;
use nodetopo_operator::cli::{Cli, Command, RunArgs};
use nodetopo_operator::controller;
use nodetopo_operator::leader::{self, LeaseConfig};
use nodetopo_operator::metrics::Metrics;
use nodetopo_runtime::admin::Readiness;
use nodetopo_runtime::shutdown::Shutdown;

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

async fn run(args: RunArgs) -> anyhow::Result<()> {
    nodetopo_runtime::log::init(args.log_format);
    let metrics = Arc::new(Metrics::new());
    let ready = Readiness::new();
    let admin = nodetopo_runtime::admin::spawn(
        &args.metrics_addr.to_string(),
        admin::router(metrics.clone(), ready.clone()),
    )
    .await?;

    let shutdown = Shutdown::on_signals();
    {
        // Not ready from the first signal on, while in-flight reconciles drain.
        let (ready, asked) = (ready.clone(), shutdown.requested());
        tokio::spawn(async move {
            asked.await;
            ready.stop();
        });
    }
    let stopped = {
        let shutdown = shutdown.clone();
        move || shutdown.requested()
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
        ready.set(true);
        tracing::info!(lease = %cfg.name, namespace = %args.lease_namespace, %identity, "waiting for the leader lease");
        let observer = tokio::select! {
            o = leader::acquire(&leases, &cfg) => o,
            _ = stopped() => return Ok(()),
        };
        ready.set(false);
        metrics.leader.set(1);
        tracing::info!(%identity, "acquired the leader lease");
        let on_loss = shutdown.clone();
        lost_lease = Some(tokio::spawn(async move {
            leader::hold(&leases, &cfg, observer).await;
            on_loss.request();
        }));
    }

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nodetopo-operator".into(),
            instance: Some(identity),
        },
    );
    controller::run(client, metrics.clone(), recorder, ready.clone(), stopped).await;
    ready.stop();
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
