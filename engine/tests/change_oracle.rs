//! The change planner against the kubelet's own start-up code (`e2e/kubelet-oracle`,
//! `-validate-state`: `state.NewCheckpointState` + the policy's `Start`, k8s.io/kubernetes
//! pinned in its go.mod).
//!
//! Random (state, old config, new config) triples on random machines: a state the old
//! configuration produced (sometimes left inconsistent as in kubernetes#136604, sometimes
//! missing), the pods it names, and a new configuration mutated from the old one. For
//! every plan:
//! - the checkpoint the plan writes (RewriteState, Drain), rendered by the engine's writer
//!   with the kubelet's checksums, must be accepted by the kubelet under the new
//!   configuration, and the kubelet must run with exactly the state the plan expects;
//! - a plan that writes nothing (NoChange, RestartOnly, EvictFirst) must leave a file the
//!   kubelet accepts as it is (after the planned evictions), again with the expected state;
//! - a plan that rewrites must be necessary: the kubelet refuses the file as it was.
//!
//! `NODETOPO_CHANGE_ORACLE_CASES` (default 2,000) and `NODETOPO_CHANGE_ORACLE_SEED` (default
//! fixed) choose the campaign. Skips with one line when Go is absent, unless
//! `NODETOPO_REQUIRE_ORACLE=1`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nodetopo_engine::change::{
    plan_change, ChangeClass, ChangeInput, ChangePlan, KubeletCpuState, OwnedConfig,
};
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::spec::CpuManagerPolicy;
use nodetopo_engine::topologymanager::TmScope;
use nodetopo_engine::{Container, CpuInfo, CpuSet, CpuTopology, NumaNode, Pod, ResourceList};
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};
use nodetopo_testkit::{go_tool_or_skip, SplitMix as Rng};
use serde::{Deserialize, Serialize};

const FIXED_SEED: u64 = 0x6368_616e_6765_3133;
const DEFAULT_CASES: usize = 2_000;

#[derive(Serialize)]
struct NumaJson {
    id: usize,
}

#[derive(Serialize)]
struct MachineJson {
    cpus: Vec<[usize; 5]>,
    numa: Vec<NumaJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidateCase {
    id: String,
    machine: MachineJson,
    cpu_policy: String,
    cpu_options: BTreeMap<String, String>,
    #[serde(rename = "reservedCPUs")]
    reserved_cpus: String,
    num_reserved: usize,
    tm_policy: String,
    tm_scope: String,
    tm_options: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
struct ValidateAnswer {
    #[serde(default)]
    id: String,
    #[serde(default)]
    config_error: String,
    #[serde(default)]
    accepted: bool,
    #[serde(default)]
    refusal: String,
    #[serde(default, rename = "defaultCPUSet")]
    default_cpuset: String,
    #[serde(default)]
    assignments: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    error: String,
}

fn gen_machine(r: &mut Rng) -> (CpuTopology, MachineJson) {
    let sockets = r.range(1, 2);
    let numa_per_socket = r.range(1, 2);
    let cores_per_numa = r.range(1, 4);
    let threads = r.range(1, 2);
    let cores = sockets * numa_per_socket * cores_per_numa;
    let mut cpus = Vec::new();
    for t in 0..threads {
        for k in 0..cores {
            let numa = k / cores_per_numa;
            let socket = numa / numa_per_socket;
            cpus.push(CpuInfo {
                id: k + t * cores,
                core: k,
                socket,
                numa,
                uncore: socket,
            });
        }
    }
    let n_numa = sockets * numa_per_socket;
    let numa = (0..n_numa)
        .map(|n| NumaNode {
            id: n,
            cpus: CpuSet::from_ids(cpus.iter().filter(|c| c.numa == n).map(|c| c.id)),
            distances: None,
            memory_bytes: None,
            hugepages: vec![],
        })
        .collect();
    let json = MachineJson {
        cpus: cpus
            .iter()
            .map(|c| [c.id, c.core, c.socket, c.numa, c.uncore])
            .collect(),
        numa: (0..n_numa).map(|id| NumaJson { id }).collect(),
    };
    let t = CpuTopology::with_derived_counts(cpus, numa, vec![]).expect("generated machine");
    (t, json)
}

const CPU_OPTIONS: [&str; 5] = [
    "full-pcpus-only",
    "distribute-cpus-across-numa",
    "strict-cpu-reservation",
    "align-by-socket",
    "prefer-align-cpus-by-uncorecache",
];
const TM_POLICIES: [&str; 4] = ["none", "best-effort", "restricted", "single-numa-node"];

fn random_subset(r: &mut Rng, all: &CpuSet, max: usize) -> CpuSet {
    let ids = all.to_vec();
    let n = r.range(1, max.min(ids.len()).max(1));
    let mut out = CpuSet::new();
    while out.len() < n {
        out.insert(*r.pick(&ids));
    }
    out
}

fn gen_config(r: &mut Rng, t: &CpuTopology) -> OwnedConfig {
    let mut c = OwnedConfig::default();
    if r.chance(85) {
        c.cpu_manager_policy = CpuManagerPolicy::Static;
        if r.chance(80) {
            c.reserved_system_cpus = random_subset(r, &t.all_cpus(), 3.min(t.all_cpus().len() - 1));
        } else {
            c.reserved_cpu_count = Some(r.range(1, 2));
        }
        for o in CPU_OPTIONS {
            if r.chance(20) {
                c.cpu_manager_policy_options.insert(o.into(), "true".into());
            }
        }
    }
    c.topology_manager_policy = r.pick(&TM_POLICIES).parse().unwrap();
    c.topology_manager_scope = if r.chance(30) {
        TmScope::Pod
    } else {
        TmScope::Container
    };
    c
}

fn mutate(r: &mut Rng, t: &CpuTopology, old: &OwnedConfig) -> OwnedConfig {
    if r.chance(8) {
        return gen_config(r, t);
    }
    let mut c = old.clone();
    if c.cpu_manager_policy == CpuManagerPolicy::Static && r.chance(50) {
        c.reserved_system_cpus = random_subset(r, &t.all_cpus(), 3.min(t.all_cpus().len() - 1));
        c.reserved_cpu_count = None;
    }
    if c.cpu_manager_policy == CpuManagerPolicy::Static && r.chance(40) {
        let o = *r.pick(&CPU_OPTIONS);
        if c.cpu_manager_policy_options.remove(o).is_none() {
            c.cpu_manager_policy_options.insert(o.into(), "true".into());
        }
    }
    if r.chance(40) {
        c.topology_manager_policy = r.pick(&TM_POLICIES).parse().unwrap();
    }
    if r.chance(20) {
        c.topology_manager_scope = if c.topology_manager_scope == TmScope::Pod {
            TmScope::Container
        } else {
            TmScope::Pod
        };
    }
    c
}

fn res(cpus: usize) -> ResourceList {
    ResourceList {
        cpu_millis: Some(cpus as u64 * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    }
}

/// A state the old configuration could have produced (then maybe damaged), and its pods.
fn gen_state(
    r: &mut Rng,
    t: &CpuTopology,
    old: &OwnedConfig,
) -> Option<(Option<KubeletCpuState>, Vec<Pod>)> {
    let cfg = nodetopo_engine::change::check_config(t, old, "current").ok()?;
    if r.chance(5) {
        return Some((None, vec![]));
    }
    let Some(policy) = &cfg.policy else {
        return Some((
            Some(KubeletCpuState {
                policy_name: "none".into(),
                state: CpuState::default(),
            }),
            vec![],
        ));
    };
    let mut st = CpuState::default();
    policy.start(&mut st).ok()?;
    let mut pods = Vec::new();
    for p in 0..r.range(0, 4) {
        let uid = format!("pod-{p}");
        let mut containers = Vec::new();
        for c in 0..r.range(1, 2) {
            let free = st.default_cpuset.difference(policy.reserved());
            if free.len() < 2 {
                break;
            }
            let n = r.range(1, (free.len() - 1).min(4));
            // Mostly the allocator's own choice; sometimes any CPUs (what older kubelets or
            // other options left behind).
            let cpus = if r.chance(70) {
                policy.take_by_topology(&free, n).ok()?
            } else {
                random_subset(r, &free, n)
            };
            let name = format!("c{c}");
            st.set(&uid, &name, cpus.clone());
            st.default_cpuset = st.default_cpuset.difference(&cpus);
            containers.push(Container {
                name,
                requests: res(cpus.len()),
                limits: res(cpus.len()),
                restartable: false,
            });
        }
        if !containers.is_empty() {
            pods.push(Pod {
                namespace: "default".into(),
                name: uid.clone(),
                uid,
                init_containers: vec![],
                containers,
            });
        }
    }
    // kubernetes#136604: a kubelet killed between its two writes.
    if r.chance(12) {
        let assigned = st.assigned();
        if !assigned.is_empty() && r.chance(50) {
            st.default_cpuset = st.default_cpuset.union(&random_subset(r, &assigned, 2));
        } else if st.default_cpuset.len() > 1 {
            let lost = random_subset(r, &st.default_cpuset, 1);
            st.default_cpuset = st.default_cpuset.difference(&lost);
        }
    }
    Some((
        Some(KubeletCpuState {
            policy_name: "static".into(),
            state: st,
        }),
        pods,
    ))
}

fn validate_case(
    id: String,
    machine: &MachineJson,
    t: &CpuTopology,
    cfg: &OwnedConfig,
    checkpoint: Option<String>,
) -> ValidateCase {
    let (reserved, num) = if cfg.cpu_manager_policy != CpuManagerPolicy::Static {
        (String::new(), 0)
    } else if cfg.reserved_system_cpus.is_empty() {
        (String::new(), cfg.reserved_cpu_count.unwrap_or(0))
    } else {
        (
            cfg.reserved_system_cpus.to_string(),
            cfg.reserved_system_cpus.len(),
        )
    };
    let _ = t;
    ValidateCase {
        id,
        machine: MachineJson {
            cpus: machine.cpus.clone(),
            numa: machine.numa.iter().map(|n| NumaJson { id: n.id }).collect(),
        },
        cpu_policy: cfg.cpu_manager_policy.as_str().into(),
        cpu_options: cfg.cpu_manager_policy_options.clone(),
        reserved_cpus: reserved,
        num_reserved: num,
        tm_policy: cfg.topology_manager_policy.name().into(),
        tm_scope: cfg.topology_manager_scope.name().into(),
        tm_options: cfg.topology_manager_policy_options.clone(),
        checkpoint,
    }
}

/// What the kubelet's state is after the plan's evictions (its RemoveContainer).
fn after_evictions(state: &KubeletCpuState, plan: &ChangePlan, pods: &[Pod]) -> KubeletCpuState {
    let mut st = state.clone();
    let evicted: Vec<&String> = plan
        .steps
        .iter()
        .filter(|s| s.class == ChangeClass::EvictFirst)
        .flat_map(|s| s.pods.iter())
        .collect();
    let uids: Vec<String> = evicted
        .iter()
        .map(|name| {
            pods.iter()
                .find(|p| &&p.key() == name)
                .map_or((*name).clone(), |p| p.uid.clone())
        })
        .collect();
    for uid in uids {
        if let Some(cs) = st.state.assignments.remove(&uid) {
            for s in cs.values() {
                st.state.default_cpuset = st.state.default_cpuset.union(s);
            }
        }
    }
    st
}

struct Pending {
    description: String,
    expected: Option<CpuState>,
    /// Whether the kubelet must accept (true) or refuse (false) this file.
    accept: bool,
}

fn oracle_or_skip() -> Option<PathBuf> {
    go_tool_or_skip(
        "e2e/kubelet-oracle/build.sh",
        "the kubelet oracle (change oracle)",
    )
}

fn ask(bin: &PathBuf, cases: Vec<ValidateCase>) -> Vec<ValidateAnswer> {
    let mut child = Command::new(bin)
        .arg("-validate-state")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the kubelet oracle");
    let mut stdin = child.stdin.take().expect("stdin");
    let n = cases.len();
    let writer = std::thread::spawn(move || {
        for c in cases {
            let line = serde_json::to_string(&c).expect("case json");
            writeln!(stdin, "{line}").expect("writing to the oracle");
        }
    });
    let reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut answers = Vec::with_capacity(n);
    for line in reader.lines() {
        let line = line.expect("reading the oracle");
        answers.push(serde_json::from_str::<ValidateAnswer>(&line).expect("answer json"));
        if answers.len() == n {
            break;
        }
    }
    writer.join().expect("writer thread");
    let status = child.wait().expect("oracle exit");
    assert!(status.success(), "oracle exited with {status}");
    assert_eq!(
        answers.len(),
        n,
        "the oracle answered fewer cases than asked"
    );
    answers
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a number"))
    })
}

#[test]
fn planned_states_are_accepted_by_the_kubelet() {
    let Some(bin) = oracle_or_skip() else { return };
    let cases = env_usize("NODETOPO_CHANGE_ORACLE_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env_usize("NODETOPO_CHANGE_ORACLE_SEED").map_or(FIXED_SEED, |s| s as u64);
    let mut r = Rng(seed);
    let mut asks = Vec::new();
    let mut pending = Vec::new();
    let mut by_class: BTreeMap<ChangeClass, usize> = BTreeMap::new();
    let mut refused_configs = 0;
    let mut triples = 0;
    while triples < cases {
        let (t, machine) = gen_machine(&mut r);
        let old = gen_config(&mut r, &t);
        let Some((state, pods)) = gen_state(&mut r, &t, &old) else {
            continue;
        };
        let new = mutate(&mut r, &t, &old);
        triples += 1;
        let id = format!("t{triples}");
        let plan = match plan_change(ChangeInput {
            topology: &t,
            current: &old,
            state: state.as_ref(),
            pods: &pods,
            desired: &new,
        }) {
            Ok(p) => p,
            Err(e) => {
                assert!(e.to_string().contains("kubelet configuration"), "{id}: {e}");
                refused_configs += 1;
                continue;
            }
        };
        *by_class.entry(plan.class).or_default() += 1;
        let format = if r.chance(70) {
            CheckpointFormat::V4
        } else {
            CheckpointFormat::V2
        };
        let description = format!(
            "{id}: old {old:?}\nnew {new:?}\nstate {state:?}\nplan {}",
            serde_json::to_string_pretty(&plan).unwrap_or_default()
        );
        let before = state.as_ref().map(|s| after_evictions(s, &plan, &pods));
        match &plan.new_state {
            Some(written) => {
                asks.push(validate_case(
                    format!("{id}-written"),
                    &machine,
                    &t,
                    &new,
                    Some(checkpoint::render(written, format)),
                ));
                pending.push(Pending {
                    description: description.clone(),
                    expected: plan.expected_state.clone(),
                    accept: true,
                });
                // The rewrite was necessary: the file as it was is refused.
                if let Some(b) = &before {
                    asks.push(validate_case(
                        format!("{id}-as-it-was"),
                        &machine,
                        &t,
                        &new,
                        Some(checkpoint::render(b, format)),
                    ));
                    pending.push(Pending {
                        description,
                        expected: None,
                        accept: false,
                    });
                }
            }
            None => {
                asks.push(validate_case(
                    format!("{id}-kept"),
                    &machine,
                    &t,
                    &new,
                    before.as_ref().map(|b| checkpoint::render(b, format)),
                ));
                pending.push(Pending {
                    description,
                    expected: plan.expected_state.clone(),
                    accept: true,
                });
            }
        }
    }
    let n_asks = asks.len();
    let answers = ask(&bin, asks);
    let mut failures = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for (a, p) in answers.iter().zip(&pending) {
        if !a.error.is_empty() || !a.config_error.is_empty() {
            failures.push(format!(
                "{}: oracle error {:?} / config error {:?}\n{}",
                a.id, a.error, a.config_error, p.description
            ));
            continue;
        }
        if a.accepted != p.accept {
            failures.push(format!(
                "{}: kubelet accepted={} (refusal {:?}), planner expected accepted={}\n{}",
                a.id, a.accepted, a.refusal, p.accept, p.description
            ));
            continue;
        }
        if a.accepted {
            accepted += 1;
            if let Some(exp) = &p.expected {
                let got_default = CpuSet::parse(&a.default_cpuset).unwrap_or_default();
                let got: BTreeMap<String, BTreeMap<String, CpuSet>> = a
                    .assignments
                    .iter()
                    .map(|(u, cs)| {
                        (
                            u.clone(),
                            cs.iter()
                                .map(|(c, s)| (c.clone(), CpuSet::parse(s).unwrap_or_default()))
                                .collect(),
                        )
                    })
                    .collect();
                if got_default != exp.default_cpuset || got != exp.assignments {
                    failures.push(format!(
                        "{}: kubelet runs with default {} {:?}, planner expected {} {:?}\n{}",
                        a.id, got_default, got, exp.default_cpuset, exp.assignments, p.description
                    ));
                }
            }
        } else {
            refused += 1;
        }
    }
    println!(
        "change oracle: {triples} triples (seed {seed:#x}), {refused_configs} desired configurations refused by the planner, {n_asks} checkpoint files checked by the kubelet: {accepted} accepted as planned, {refused} refused as planned; plans by class: {:?}",
        by_class
    );
    if !failures.is_empty() {
        panic!(
            "{} disagreements with the kubelet; first:\n{}",
            failures.len(),
            failures[0]
        );
    }
}
