//! Differential test: a seeded corpus of NodeResourcePolicy specs, valid and invalid, judged
//! by the real apiserver (dry-run create: OpenAPI schema + CEL) and by the crate's Rust mirror
//! of the rules (`serde` into the typed spec, then `validation::validate_policy_spec`). Every
//! disagreement is printed with its spec and fails the test. Where both reject, the server's
//! message must contain one of the Rust messages of a CEL rule, or name a field the Rust side
//! also names (schema errors have the server's own wording).

use kube::api::{Api, DynamicObject, PostParams};
use nodetopo_crds::validation::validate_policy_spec;
use nodetopo_crds::NodeResourcePolicySpec;
use nodetopo_testkit::SplitMix as Rng;
use serde_json::{json, Map, Value};

use crate::common::{api_message, control_plane, install_crds};
use crate::crds::{object, resource};

/// How many specs the corpus holds.
const CORPUS: usize = 600;
/// The seed: the corpus is the same on every run.
const SEED: u64 = 0x6e6f_6465_746f_706f;

const CPU_OPTION_NAMES: &[&str] = &[
    "align-by-socket",
    "distribute-cpus-across-cores",
    "distribute-cpus-across-numa",
    "full-pcpus-only",
    "prefer-align-cpus-by-uncorecache",
    "strict-cpu-reservation",
    "Full-pcpus-only",
    "full-pcpus-only ",
    "it's",
    "back\\slash",
    "",
];
const BOOL_VALUES: &[&str] = &[
    "true", "true", "false", "false", "True", "1", "", "yes", "truee", "false!",
];
const CPU_LISTS: &[&str] = &[
    "0", "0-1", "0,2,4-7", "1-3", "3-1", "0-", "-1", "a", "0,,1", " 0", "0 ", "00001", "99999",
    "100000", "0-99999", "7-7", "1,0", "0-1,4-2", "", "0x1", "1\n", "٣",
];
const TM_OPTION_NAMES: &[&str] = &[
    "prefer-closest-numa-nodes",
    "max-allowable-numa-nodes",
    "max-allowable-numa-nodes",
    "numa-magic",
    "Prefer-closest-numa-nodes",
];
const NUMA_VALUES: &[&str] = &[
    "8", "16", "999", "7", "0", "08", "1000", "abc", "", "-8", "8.0", "true",
];
const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "in", "Gt"];

fn options(rng: &mut Rng, names: &[&str], values: &dyn Fn(&mut Rng, &str) -> String) -> Value {
    let mut m = Map::new();
    for _ in 0..rng.below(4) {
        let k = rng.pick(names).to_string();
        let v = values(rng, &k);
        m.insert(k, Value::String(v));
    }
    Value::Object(m)
}

fn gen_spec(rng: &mut Rng) -> Value {
    let mut spec = Map::new();
    if rng.chance(40) {
        let mut sel = Map::new();
        if rng.chance(50) {
            sel.insert("matchLabels".into(), json!({"pool": "a"}));
        }
        if rng.chance(60) {
            let exprs: Vec<Value> = (0..1 + rng.below(2))
                .map(|_| {
                    let op = *rng.pick(OPERATORS);
                    let n = rng.below(3);
                    let mut e = json!({"key": "pool", "operator": op});
                    if n > 0 || rng.chance(30) {
                        e["values"] = json!((0..n).map(|i| format!("v{i}")).collect::<Vec<_>>());
                    }
                    e
                })
                .collect();
            sel.insert("matchExpressions".into(), Value::Array(exprs));
        }
        spec.insert("nodeSelector".into(), Value::Object(sel));
    }
    if rng.chance(50) {
        let p: i64 = *rng.pick(&[
            0,
            1,
            -5,
            100,
            2147483647,
            -2147483648,
            2147483648,
            -2147483649,
        ]);
        spec.insert("priority".into(), json!(p));
    }
    if rng.chance(85) {
        let mut cpu = Map::new();
        if rng.chance(95) {
            let policy = *rng.pick(&["static", "static", "static", "none", "None", "dynamic"]);
            cpu.insert("policy".into(), json!(policy));
        }
        if rng.chance(70) {
            let bool_value = |r: &mut Rng, _: &str| r.pick(BOOL_VALUES).to_string();
            cpu.insert(
                "options".into(),
                options(rng, CPU_OPTION_NAMES, &bool_value),
            );
        }
        if rng.chance(55) {
            cpu.insert("reservedSystemCPUs".into(), json!(rng.pick(CPU_LISTS)));
        }
        if rng.chance(45) {
            let n: i64 = *rng.pick(&[0, 1, 2, 4, -1, 2147483648]);
            cpu.insert("reservedCPUs".into(), json!(n));
        }
        spec.insert("cpuManager".into(), Value::Object(cpu));
    }
    if rng.chance(70) {
        let mut tm = Map::new();
        if rng.chance(95) {
            let p = *rng.pick(&[
                "none",
                "best-effort",
                "restricted",
                "single-numa-node",
                "strict",
            ]);
            tm.insert("policy".into(), json!(p));
        }
        if rng.chance(50) {
            let s = *rng.pick(&["container", "pod", "node"]);
            tm.insert("scope".into(), json!(s));
        }
        if rng.chance(50) {
            let value = |r: &mut Rng, k: &str| {
                if k == "max-allowable-numa-nodes" {
                    r.pick(NUMA_VALUES).to_string()
                } else {
                    r.pick(BOOL_VALUES).to_string()
                }
            };
            tm.insert("options".into(), options(rng, TM_OPTION_NAMES, &value));
        }
        spec.insert("topologyManager".into(), Value::Object(tm));
    }
    Value::Object(spec)
}

/// The Rust side's verdict: `Ok(())` or the messages it gives.
fn rust_verdict(spec: &Value) -> Result<(), Vec<String>> {
    let typed: NodeResourcePolicySpec = serde_json::from_value(spec.clone())
        .map_err(|e| vec![format!("does not deserialise: {e}")])?;
    let errs = validate_policy_spec(&typed);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.iter().map(|e| e.message.clone()).collect())
    }
}

#[tokio::test]
async fn apiserver_and_rust_rules_agree_on_a_generated_corpus() {
    let Some(cp) = control_plane() else { return };
    install_crds(cp).await;
    let api: Api<DynamicObject> = Api::all_with(cp.client(), &resource("NodeResourcePolicy"));
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut rng = Rng(SEED);
    let (mut accepted, mut rejected, mut agreed) = (0, 0, 0);
    let mut disagreements = Vec::new();
    for i in 0..CORPUS {
        let spec = gen_spec(&mut rng);
        let server = api
            .create(
                &pp,
                &object("NodeResourcePolicy", &format!("corpus-{i}"), spec.clone()),
            )
            .await
            .map(|_| ())
            .map_err(|e| api_message(&e));
        let rust = rust_verdict(&spec);
        match (&server, &rust) {
            (Ok(()), Ok(())) => {
                accepted += 1;
                agreed += 1;
            }
            (Err(s), Err(r)) => {
                rejected += 1;
                // A CEL message the Rust side gives must be one the server gives, unless the
                // server stopped at a schema error first (it skips CEL on invalid input).
                let schema_error = !s.contains("Invalid value: \"object\"")
                    && !s.contains("Invalid value: \"string\"");
                let shared = r.iter().any(|m| s.contains(m.as_str()));
                if shared || schema_error {
                    agreed += 1;
                } else {
                    disagreements.push(format!(
                        "case {i}: both reject, different reasons\n  spec:   {spec}\n  server: {s}\n  rust:   {r:?}"
                    ));
                }
            }
            _ => disagreements.push(format!(
                "case {i}: server {} but rust {}\n  spec:   {spec}\n  server: {server:?}\n  rust:   {rust:?}",
                if server.is_ok() { "accepts" } else { "rejects" },
                if rust.is_ok() { "accepts" } else { "rejects" },
            )),
        }
    }
    println!(
        "differential: {CORPUS} NodeResourcePolicy specs (seed {SEED:#x}): {accepted} accepted and {rejected} rejected by both, {agreed} agreements, {} disagreements",
        disagreements.len()
    );
    for d in &disagreements {
        println!("{d}");
    }
    assert!(
        accepted >= 50 && rejected >= 50,
        "the corpus must hold both kinds"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements (printed above)",
        disagreements.len()
    );
}
