//! Actuation: make the kubelet run a policy's CPU/topology-manager settings, or take it back
//! to its own configuration. One executor, driven by two shells: the `apply` and `revert`
//! subcommands ([`command`]: [`command::run`], [`command::run_revert`]) and cluster mode
//! ([`cluster`]: [`cluster::run`] follows the node's NodeTopology and publishes the verdict).
//!
//! The phases, in the order an apply goes through them, each in its module with the
//! function that owns it:
//!
//! 1. files: where the kubelet's files are ([`files`]: [`KubeletFiles`]).
//! 2. recover: an apply interrupted by a crash is finished or undone first
//!    ([`recover`]: [`recover()`]); then the running kubelet's command line is checked
//!    ([`ProcessArgs::check`], in [`apply()`]).
//! 3. read: the kubelet's effective configuration and CPU manager checkpoint
//!    ([`read`]: `read_state`; the configuration through nodetopo-kubelet).
//! 4. plan: the change to the desired owned fields, the state to write and the drop-in
//!    ([`plan`]: `target_of_apply`, `plan_from_state`); a plan that needs pods gone, or
//!    nothing, ends here (`apply::not_carried_out`); a dry run lists what it would do
//!    (`dry_run_actions`). [`apply()`] runs phases 2-4, then `apply::carry_out` the rest:
//! 5. guard: armed before anything changes (`apply::arm`; [`guard`]).
//! 6. stop and re-plan: a state rewrite stops the kubelet, reads its files again and plans
//!    again; another class stops the apply (`apply::stop_and_replan`; [`plan::replan`]).
//! 7. stage: backups, then the journal and the new files, every write confined
//!    ([`stage`]: `back_up`, `write_new`; [`AllowedWrites`]).
//! 8. restart: start after a stop, or restart ([`restart`]: `start_new`, through a
//!    [`KubeletService`]: systemd over D-Bus, commands, or a dry run).
//! 9. verify: healthy, the effective owned fields as desired, the state file accepted
//!    ([`verify`]: `verify`); cluster mode also waits for the Node to be Ready again
//!    ([`node_ready`]) and for `KubeletAgreement` after the restart ([`agreement`]).
//! 10. commit: the journal removed, the guard disarmed (`apply::commit`); on any failure in
//!     7-9 instead: roll back and start again (`recover::roll_back_and_start`).
//! 11. report: what was done ([`report`]: [`ApplyReport`]); cluster mode's `Applied`
//!     verdict from it (`cluster::outcome_of`).
//!
//! `revert` ([`revert`]) plans back to the node's own configuration and uses the same
//! phases 5-10.
//!
//! The plan comes from `nodetopo_engine::change::plan_change` (the same as `diff`). This
//! module carries out the plans that need no pod to move: RestartOnly and RewriteState.
//! EvictFirst and Drain are reported (`WaitingForEviction`, `DrainRequired`) and nothing is
//! touched: evictions go through the Eviction API in the cluster agent, never here.
//!
//! Files written: the drop-in `<config dir>/90-nodetopo.conf` (a full KubeletConfiguration
//! holding only the owned fields, mode 0644) and, for RewriteState, the CPU manager
//! checkpoint, in the format it was in, with the kubelet's checksums. Every write is atomic
//! (temp file in the same directory, fsync, rename, fsync of the directory), and every write
//! goes through [`AllowedWrites`], which refuses any path but the drop-in, the state file,
//! their backups and the journal.
//!
//! Crash safety (the agent can be killed at any instant): before anything is changed the
//! current files are copied to `<name>.nodetopo-backup` beside them, then a journal
//! (`<state dir>/nodetopo-apply.journal`) records which files existed. Only then are the new
//! files renamed in. The journal moves to `written` once both are in place and is removed
//! when the kubelet is verified. [`recover()`] (run first by every `apply`) rolls a journal in
//! `applying` back from the backups, so after any kill the pair (drop-in, state) is either
//! all old or all new, and a backup is never removed while a journal needs it.
//!
//! Order: the guard is armed first ([`guard`]: a transient systemd unit that starts the
//! kubelet, restoring the backups when the apply was not verified, if the agent dies). For
//! RewriteState the kubelet is stopped before the state file is rewritten (a running kubelet
//! rewrites its checkpoint from memory at every change), its files are read again and the
//! change planned again ([`plan::replan`]: a plan of another class stops the apply, the kubelet
//! started unchanged), the backups are taken, and it is started after; RestartOnly
//! re-plans, writes the drop-in and restarts. `revert` ([`revert`]) goes the same way back to
//! the node's own configuration. Then verify: the service is healthy, the
//! kubelet's effective owned fields (config file + every drop-in) are the desired ones (a
//! later drop-in may override ours), and the state file on disk is one the kubelet accepts
//! under the new configuration. On failure: restore the backups, restart again, report
//! `Failed` with the reason.

pub mod apply;
pub mod cluster;
pub mod command;
pub mod files;
pub mod plan;
pub mod read;
pub mod recover;
pub mod report;
pub mod restart;
pub mod revert;
pub mod stage;
pub mod verify;

pub use apply::{apply, ApplyInput};
pub use command::{run, run_revert, Args, RestartMode};
pub use files::{backup_of, KubeletFiles, ProcessArgs};
pub use recover::{recover, recover_and_start, Recovery};
pub use report::ApplyReport;
pub use restart::systemd::{SystemdBus, SYSTEM_BUS};
#[cfg(test)]
pub use restart::STEPS;
pub use restart::{guard, Commands, DryRun, KubeletService, Step};
pub use stage::writes::AllowedWrites;
pub use verify::{agreement, node_ready, AfterStart, StartCheck, Started};
