//! The pure decision function at scale: 5,000 nodes, 50 policies (selectors over a few
//! label keys, mixed priorities, some ties), every node with an existing NodeTopology.

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, Criterion};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use k8s_openapi::jiff::Timestamp;
use nodetopo_crds::{
    CpuManagerConfig, CpuManagerPolicy, NodeResourcePolicy, NodeResourcePolicySpec, NodeTopology,
    TopologyManagerConfig, TopologyManagerPolicy,
};
use nodetopo_operator::decide::{compile, decide, desire_node};

fn policies(n: usize) -> Vec<NodeResourcePolicy> {
    (0..n)
        .map(|i| {
            let mut p = NodeResourcePolicy::new(
                &format!("policy-{i:02}"),
                NodeResourcePolicySpec {
                    node_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "pool".to_string(),
                            format!("pool-{}", i % 20),
                        )])),
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: "zone".into(),
                            operator: "In".into(),
                            values: Some(vec![
                                format!("zone-{}", i % 3),
                                format!("zone-{}", (i + 1) % 3),
                            ]),
                        }]),
                    }),
                    priority: (i % 4) as i32,
                    cpu_manager: Some(CpuManagerConfig {
                        policy: CpuManagerPolicy::Static,
                        options: BTreeMap::from([(
                            "full-pcpus-only".to_string(),
                            "true".to_string(),
                        )]),
                        reserved_system_cpus: Some("0-1".into()),
                        reserved_cpus: None,
                    }),
                    topology_manager: Some(TopologyManagerConfig {
                        policy: TopologyManagerPolicy::BestEffort,
                        ..Default::default()
                    }),
                    rollout: None,
                },
            );
            p.metadata.generation = Some(1);
            p
        })
        .collect()
}

fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node {
            metadata: ObjectMeta {
                name: Some(format!("node-{i:05}")),
                uid: Some(format!("uid-{i}")),
                labels: Some(BTreeMap::from([
                    ("pool".to_string(), format!("pool-{}", i % 25)),
                    ("zone".to_string(), format!("zone-{}", i % 3)),
                    ("kubernetes.io/hostname".to_string(), format!("node-{i:05}")),
                ])),
                ..Default::default()
            },
            ..Default::default()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let ps = policies(50);
    let ns = nodes(5_000);
    let now = Time(Timestamp::from_second(1_700_000_000).expect("valid time"));
    // Existing NodeTopologies as the first pass rendered them (the steady state).
    let compiled = compile(&ps);
    let existing: Vec<NodeTopology> = ns
        .iter()
        .map(|n| desire_node(&compiled, n))
        .map(|d| {
            let mut nt = NodeTopology::new(&d.node, d.spec.clone());
            nt.metadata.generation = Some(1);
            nt
        })
        .collect();
    c.bench_function("decide 5000 nodes x 50 policies", |b| {
        b.iter(|| decide(&ps, &ns, &existing, &now))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
