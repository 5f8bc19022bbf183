//! Report: what an apply or a revert did ([`ApplyReport`], printed as JSON by the
//! subcommand); cluster mode turns it into the `Applied` verdict ([`verdict`]).

use std::process::ExitCode;

use nodetopo_engine::change::ChangePlan;
use serde::Serialize;

use super::Recovery;

/// The outcome of an apply, with the Applied condition's reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// Applied condition status: `True` or `False`.
    pub applied: bool,
    /// `NoChange`, `RestartOnly`, `StateRewritten`, `WaitingForEviction`, `DrainRequired`,
    /// `Failed`.
    pub reason: String,
    /// For people.
    pub message: String,
    /// What recovery did first.
    pub recovery: Recovery,
    /// The plan.
    pub plan: ChangePlan,
    /// Dry-run: what would be done.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// What the check of the kubelet's command line found (absent when it was off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_command_line: Option<String>,
}

pub(super) fn report(
    applied: bool,
    reason: &str,
    message: String,
    recovery: Recovery,
    plan: ChangePlan,
) -> ApplyReport {
    ApplyReport {
        applied,
        reason: reason.into(),
        message,
        recovery,
        plan,
        actions: vec![],
        kubelet_command_line: None,
    }
}

/// Prints an apply's or a revert's report as JSON; exit 0 when applied (or nothing to
/// do), 1 otherwise.
pub(super) fn print_report(report: &ApplyReport) -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(report)?);
    Ok(if report.applied {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
