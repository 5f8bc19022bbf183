//! `nodetopo-agent apply` against a REAL kubelet: k8s.io/kubernetes v1.37.2's kubelet
//! (`e2e/kubelet-standalone`, built by its build.sh) runs standalone (no API server) with a
//! fake CRI runtime in the same process, started and stopped by shell hooks handed to
//! `apply --restart command`. Both sides see this machine: the kubelet through cadvisor,
//! nodetopo through the default sysfs (/sys), no preset.
//!
//! The kubelet runs in a private mount namespace (`unshare --mount`) in which the six kernel
//! tunables its container manager sets at start (vm/overcommit_memory, kernel/panic, ...) are
//! bind-mounted from files already holding the wanted values, so it changes nothing on the
//! host, and /var/lib and /var/log are empty tmpfs mounts, so what the kubelet writes to its
//! hard-coded paths there (device-plugins/, pki/, /var/log/containers) stays out of the host;
//! its pod logs and volume plugin directories are in the test's directory.
//!
//! `apply_on_a_real_kubelet`, on one kubelet (static policy, reservedSystemCPUs "0"):
//! 1. RestartOnly (topology manager best-effort): the kubelet restarted, logs the new
//!    effective configuration, its state is kept.
//! 2. RewriteState (strict-cpu-reservation): the kubelet stopped, the state rewritten, the
//!    kubelet started, accepts the state (CPU 0 out of the shared pool) and stays up.
//! 3. The same policy again: NoChange, no restart.
//! 4. Control: the state as it was before the rewrite (the backup) under the new
//!    configuration makes the real kubelet refuse to start, so the rewrite was needed.
//! 5. An alpha CPU manager option whose feature gate the kubelet's configuration leaves off:
//!    nodetopo refuses it before planning (exit 2), nothing is written, no restart.
//! 6. A beta option with the beta gate off on this kubelet's command line: nodetopo reads
//!    the command line from /proc/PID/cmdline (the kubelet runs as root from a hard link
//!    named `kubelet`, its executable, with a kubelet's own flags) and refuses before planning.
//! 7. The same policy with `--no-kubelet-process-check` (a node where nodetopo cannot see
//!    the kubelet's process): the kubelet refuses it at start, apply rolls back and the
//!    kubelet runs again on the previous drop-in.
//! 8. The agent told another drop-in directory than the kubelet's `--config-dir`: refused
//!    before anything is written.
//!
//! Every apply's report names the kubelet process it checked.
//!
//! `apply_keeps_a_pinned_pod_on_a_real_kubelet`: the fake runtime in its own process (its pod
//! and container outlive kubelet restarts, as a real runtime's do) and a Guaranteed static pod
//! holding one exclusive CPU:
//! 1. RestartOnly (single-numa-node, pod scope) with the pod running: the restarted kubelet
//!    re-admits the pod keeping its CPU, does not recreate or kill its container, and the
//!    state file is unchanged.
//! 2. A reserved set taking the pod's CPU: EvictFirst from the real kubelet's checkpoint
//!    (WaitingForEviction naming the pod), nothing written, no restart.
//!
//! `apply_waits_for_the_real_kubelets_node`: the kubelet registered as Node `real-kubelet`
//! with a real kube-apiserver and etcd (e2e/controlplane, admin kubeconfig): it posts Ready
//! itself; RestartOnly with `apply --node` waits for the restarted kubelet's Ready heartbeat,
//! and a policy the kubelet refuses (a beta option, the beta gate off on its command line,
//! the command-line check turned off) is rolled back with the Node Ready again.
//! Skips with the control-plane tests' reason when their binaries cannot be built, unless
//! NODETOPO_REQUIRE_CONTROLPLANE=1.
//!
//! `rollout_on_a_real_kubelet`: the operator and the agent daemon (`run --actuation`, hooks as
//! above) on that API server; the real kubelet runs a Guaranteed pod bound to it through the
//! API (one exclusive CPU). A NodeResourcePolicy in Apply mode: the agent restarts the
//! kubelet, waits for its Node Ready and KubeletAgreement on a read of the real checkpoint
//! after the restart, and the NodeTopology reports Applied True RestartOnly.
//!
//! Skips, printing why, when go is missing, when not root, without `unshare`, or with fewer
//! than 2 online CPUs, unless NODETOPO_REQUIRE_ORACLE=1.

mod api;
mod kubelet;
mod local;
