//! Command line: flags with environment variables, shown in `--help`.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};

/// nodetopo-operator: turns NodeResourcePolicy objects into per-node NodeTopology specs.
#[derive(Debug, Parser)]
#[command(name = "nodetopo-operator", version, about, long_about = None)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `run` (also accepted without the subcommand).
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator (default).
    Run,
    /// Print the CRD manifests (the content of charts/nodetopo/crds/) and exit.
    Crds,
}

pub use nodetopo_runtime::log::LogFormat;

/// Options of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Address of the admin server (/metrics, /healthz, /readyz).
    #[arg(long, env = "NODETOPO_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log format. The level comes from RUST_LOG (default "info").
    #[arg(long, env = "NODETOPO_LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// Disable leader election (only for a single replica, e.g. local development).
    #[arg(long, env = "NODETOPO_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, env = "NODETOPO_LEASE_NAME", default_value = "nodetopo-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (the operator's own namespace, from the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "nodetopo-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the pod name, from the downward API)
    /// [default: $HOSTNAME, else nodetopo-operator-<process id>].
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, env = "NODETOPO_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    pub lease_duration_seconds: u64,
    /// Seconds between renewals (must be well under the lease duration).
    #[arg(long, env = "NODETOPO_LEASE_RENEW_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_renew_seconds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn help_documents_env_vars() {
        let help = Cli::command().render_help().to_string();
        for env in [
            "NODETOPO_METRICS_ADDR",
            "NODETOPO_LOG_FORMAT",
            "NODETOPO_NO_LEADER_ELECTION",
            "NODETOPO_LEASE_NAME",
            "POD_NAMESPACE",
            "POD_NAME",
            "NODETOPO_LEASE_DURATION_SECONDS",
            "NODETOPO_LEASE_RENEW_SECONDS",
        ] {
            assert!(help.contains(env), "{env} missing from --help");
        }
    }

    #[test]
    fn parses_crds_and_defaults() {
        let c = Cli::try_parse_from(["nodetopo-operator", "crds"]).unwrap();
        assert!(matches!(c.command, Some(Command::Crds)));
        let c = Cli::try_parse_from(["nodetopo-operator", "--log-format", "json"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(c.run.log_format, LogFormat::Json);
        assert!(Cli::try_parse_from(["nodetopo-operator", "--log-format", "xml"]).is_err());
        assert!(
            Cli::try_parse_from(["nodetopo-operator", "--lease-duration-seconds", "1"]).is_err()
        );
    }
}
