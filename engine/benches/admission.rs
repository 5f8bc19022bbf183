//! `plan` for 500 containers, measured on the engine entry point it uses: one
//! `NodeAdmitter` per variant, 500 single-container Guaranteed pods admitted in order, for
//! the four default variants side by side (what `nodetopo plan --containers ...`
//! computes before printing).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use nodetopo_engine::admission::{CpuPolicyConfig, MemoryManagerConfig, NodeAdmitter, NodeConfig};
use nodetopo_engine::cpumanager::{ReservedCpus, StaticPolicyOptions};
use nodetopo_engine::memorymanager::{MemoryResource, ReservedMemory};
use nodetopo_engine::topologymanager::{TmOptions, TmPolicy, TmScope};
use nodetopo_engine::{presets, Container, CpuTopology, Pod, ResourceList};

fn pods(sizes: &[u64], n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let rl = ResourceList {
                cpu_millis: Some(sizes[i % sizes.len()] * 1000),
                memory_bytes: Some(256 << 20),
                ..Default::default()
            };
            Pod {
                namespace: "default".into(),
                name: format!("c{}", i + 1),
                uid: format!("default/c{}", i + 1),
                init_containers: vec![],
                containers: vec![Container {
                    name: "main".into(),
                    requests: rl.clone(),
                    limits: rl,
                    restartable: false,
                }],
            }
        })
        .collect()
}

fn variants(t: &CpuTopology) -> Vec<NodeConfig> {
    let numa = t.numa_nodes().len();
    let mut reserved = ReservedMemory::new();
    reserved
        .entry(t.numa_nodes()[0].id)
        .or_default()
        .insert(MemoryResource::Memory, 100 << 20);
    let opts = [
        StaticPolicyOptions::default(),
        StaticPolicyOptions {
            prefer_align_cpus_by_uncorecache: true,
            ..Default::default()
        },
        StaticPolicyOptions {
            distribute_cpus_across_numa: true,
            ..Default::default()
        },
        StaticPolicyOptions {
            distribute_cpus_across_cores: true,
            ..Default::default()
        },
    ];
    opts.into_iter()
        .map(|options| NodeConfig {
            cpu: CpuPolicyConfig::Static {
                reserved: ReservedCpus::Count(2),
                options,
            },
            tm_policy: TmPolicy::BestEffort,
            tm_scope: TmScope::Container,
            tm_options: TmOptions {
                prefer_closest_numa_nodes: false,
                max_allowable_numa_nodes: numa.max(8),
            },
            devices: vec![],
            device_resources: vec![],
            // Presets without per-node memory sizes run without the Memory Manager, as
            // `plan` does.
            memory: if t.numa_nodes().iter().all(|n| n.memory_bytes.is_some()) {
                MemoryManagerConfig::Static {
                    reserved: reserved.clone(),
                }
            } else {
                MemoryManagerConfig::None
            },
        })
        .collect()
}

fn plan(t: &CpuTopology, configs: &[NodeConfig], workload: &[Pod]) -> usize {
    let mut admitted = 0;
    for c in configs {
        let mut a = NodeAdmitter::new(t.clone(), c).expect("valid config");
        for p in workload {
            admitted += usize::from(a.admit(p).admitted());
        }
    }
    admitted
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan_500_containers");
    g.sample_size(10);
    for (preset, sizes) in [
        ("epyc-9754-2p", &[1u64, 2, 1, 4][..]),
        ("epyc-9654-2p-l3-as-numa", &[1u64, 2, 1][..]),
        ("synthetic-64-numa", &[1u64][..]),
    ] {
        let t = presets::build(preset).expect("preset");
        let configs = variants(&t);
        let workload = pods(sizes, 500);
        g.bench_function(preset, |b| {
            b.iter(|| black_box(plan(&t, &configs, &workload)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
