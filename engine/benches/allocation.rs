//! Static-policy allocation cost on a large machine: 2 sockets, 4 NUMA nodes, 32 uncore
//! caches of 8 cores, SMT-2 (512 CPUs), one option set per benchmark. Each iteration allocates
//! one 8-CPU container (hinted to NUMA node 1) on a node already holding 24 containers; the
//! state clone is setup, not measured.
//!
//! Two measurements: wall-clock time (criterion's default) and this thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which stays meaningful on a loaded build machine.

use std::hint::black_box;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nodetopo_engine::cpumanager::{CpuState, ReservedCpus, StaticPolicy, StaticPolicyOptions};
use nodetopo_engine::topologymanager::{NumaMask, TopologyHint};
use nodetopo_engine::{Container, CpuInfo, CpuTopology, NumaNode, Pod, ResourceList};

const SOCKETS: usize = 2;
const NUMA_PER_SOCKET: usize = 2;
const UNCORE_PER_NUMA: usize = 8;
const CORES_PER_UNCORE: usize = 8;
const CORES: usize = SOCKETS * NUMA_PER_SOCKET * UNCORE_PER_NUMA * CORES_PER_UNCORE;

/// 512 CPUs; siblings are `c` and `c + 256`, as Linux numbers them on x86 servers.
fn machine() -> CpuTopology {
    let mut cpus = Vec::new();
    for core in 0..CORES {
        let uncore = core / CORES_PER_UNCORE;
        let numa = uncore / UNCORE_PER_NUMA;
        let socket = numa / NUMA_PER_SOCKET;
        for t in 0..2 {
            cpus.push(CpuInfo {
                id: core + t * CORES,
                core,
                socket,
                numa,
                uncore,
            });
        }
    }
    let nodes = (0..SOCKETS * NUMA_PER_SOCKET)
        .map(|id| NumaNode {
            id,
            cpus: cpus.iter().filter(|c| c.numa == id).map(|c| c.id).collect(),
            distances: None,
            memory_bytes: None,
            hugepages: vec![],
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, vec![]).expect("valid machine")
}

fn pod(uid: &str, cpus: u64) -> Pod {
    let r = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    Pod {
        namespace: "bench".into(),
        name: uid.into(),
        uid: uid.into(),
        containers: vec![Container {
            name: "main".into(),
            requests: r.clone(),
            limits: r,
            restartable: false,
        }],
        ..Default::default()
    }
}

fn option_sets() -> Vec<(&'static str, StaticPolicyOptions)> {
    let d = StaticPolicyOptions::default();
    vec![
        ("packed", d),
        (
            "full-pcpus-only",
            StaticPolicyOptions {
                full_pcpus_only: true,
                ..d
            },
        ),
        (
            "prefer-align-cpus-by-uncorecache",
            StaticPolicyOptions {
                prefer_align_cpus_by_uncorecache: true,
                full_pcpus_only: true,
                ..d
            },
        ),
        (
            "distribute-cpus-across-cores",
            StaticPolicyOptions {
                distribute_cpus_across_cores: true,
                ..d
            },
        ),
        (
            "distribute-cpus-across-numa",
            StaticPolicyOptions {
                distribute_cpus_across_numa: true,
                full_pcpus_only: true,
                ..d
            },
        ),
        (
            "align-by-socket",
            StaticPolicyOptions {
                align_by_socket: true,
                ..d
            },
        ),
        (
            "strict-cpu-reservation",
            StaticPolicyOptions {
                strict_cpu_reservation: true,
                ..d
            },
        ),
    ]
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Criterion measurement of thread CPU time.
struct CpuTime;

/// Formats nanoseconds like criterion's wall-time formatter.
struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e3, "µs")
        } else {
            (1e6, "ms")
        };
        for v in values {
            *v /= div;
        }
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, values: &mut [f64]) -> &'static str {
        for v in values {
            *v *= 1.0;
        }
        "elem/ns"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, i: u64) -> u64 {
        thread_cpu_ns().saturating_sub(i)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &NsFormatter
    }
}

fn bench_wall(c: &mut Criterion<WallTime>) {
    bench(c, "wall");
}

fn bench_cpu(c: &mut Criterion<CpuTime>) {
    bench(c, "cpu");
}

fn bench<M: Measurement>(c: &mut Criterion<M>, what: &str) {
    let t = machine();
    let mut g = c.benchmark_group(format!("allocate_8cpu_512cpu_machine_{what}"));
    for (name, opts) in option_sets() {
        let p = StaticPolicy::new(t.clone(), ReservedCpus::Count(4), opts).expect("valid policy");
        let mut st = CpuState::default();
        p.start(&mut st).expect("empty state starts");
        // A partly used node: 24 containers of 2, 4 or 6 CPUs.
        for i in 0..24u64 {
            let pd = pod(&format!("fill-{i}"), 2 + 2 * (i % 3));
            p.allocate(&mut st, &pd, &pd.containers[0], None)
                .expect("fill allocation fits");
        }
        let pd = pod("bench", 8);
        let hint = TopologyHint {
            affinity: Some(NumaMask::new([1]).expect("mask")),
            preferred: true,
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || st.clone(),
                |mut s| {
                    p.allocate(&mut s, &pd, &pd.containers[0], Some(&hint))
                        .expect("allocation fits");
                    black_box(s)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = wall;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench_wall
}
criterion_group! {
    name = cpu;
    config = Criterion::default()
        .with_measurement(CpuTime)
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench_cpu
}
criterion_main!(wall, cpu);
