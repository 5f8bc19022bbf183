//! `nodetopo plan` as a user runs it: the KEP-4800 worked example, every preset under
//! every topology-manager policy, Pod YAML with memory and devices, a sysfs tree, errors.
//! Never reads the host's /sys: every run names a preset or a fixture tree.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodetopo"))
        .arg("plan")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = plan(args);
    assert!(
        out.status.success(),
        "plan {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(&all)).expect("plan -o json prints JSON")
}

fn variant<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variant {name} in {doc}"))
}

fn allocation<'a>(v: &'a Value, pod: &str) -> &'a Value {
    v["allocations"]
        .as_array()
        .expect("allocations")
        .iter()
        .find(|a| a["pod"] == pod)
        .unwrap_or_else(|| panic!("no allocation for {pod} in {v}"))
}

const KEP: [&str; 6] = [
    "--preset",
    "kep-4800-example",
    "--reserved",
    "0-1",
    "--containers",
    "4,4,4",
];

#[test]
fn kep_4800_worked_example() {
    let doc = json(&KEP);
    assert_eq!(doc["topology"]["cpus"], "0-15");
    assert_eq!(
        doc["topology"]["uncoreCaches"].as_array().map(Vec::len),
        Some(2)
    );
    let names: Vec<&str> = doc["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "packed",
            "uncore-aligned",
            "numa-distributed",
            "cores-distributed"
        ]
    );
    // Without the option container 2 straddles both uncore caches...
    let packed = allocation(variant(&doc, "packed"), "default/c2");
    assert_eq!(packed["cpus"], "6-9");
    assert_eq!(packed["uncoreCaches"], serde_json::json!([0, 1]));
    assert_eq!(packed["aligned"]["uncoreCache"], false);
    // ...with prefer-align-cpus-by-uncorecache it lands inside one.
    let uncore = variant(&doc, "uncore-aligned");
    assert_eq!(
        uncore["cpuManager"]["options"]["prefer-align-cpus-by-uncorecache"],
        "true"
    );
    assert_eq!(uncore["cpuManager"]["reservedSystemCPUs"], "0-1");
    let c2 = allocation(uncore, "default/c2");
    assert_eq!(c2["cpus"], "8-11");
    assert_eq!(c2["uncoreCaches"], serde_json::json!([1]));
    assert_eq!(c2["aligned"]["uncoreCache"], true);
    assert_eq!(c2["container"], "main");
    assert_eq!(c2["podUID"], "default/c2");

    // The table says the same, side by side.
    let table = ok(&KEP);
    let row = table
        .lines()
        .find(|l| l.starts_with("default/c2/main"))
        .expect("side-by-side row for c2");
    let cells: Vec<&str> = row.split("  ").filter(|c| !c.trim().is_empty()).collect();
    assert_eq!(cells[1].trim(), "6-9 (2 llc)", "{row}");
    assert_eq!(cells[2].trim(), "8-11 (1 llc)", "{row}");
    assert!(table.contains("2/3 in one uncore cache"), "{table}");
    assert!(table.contains("3/3 in one uncore cache"), "{table}");

    // An explicit option gives exactly one variant.
    let mut one = KEP.to_vec();
    one.extend(["--option", "prefer-align-cpus-by-uncorecache=true"]);
    let doc = json(&one);
    assert_eq!(doc["variants"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        allocation(&doc["variants"][0], "default/c2")["cpus"],
        "8-11"
    );
}

#[test]
fn every_preset_under_every_topology_manager_policy() {
    let list = ok(&["--preset", "list"]);
    let presets: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        presets.len() >= 9 && presets.contains(&"kep-4800-example"),
        "{list}"
    );
    for preset in &presets {
        for policy in ["none", "best-effort", "restricted", "single-numa-node"] {
            let doc = json(&[
                "--preset",
                preset,
                "--topology-manager-policy",
                policy,
                "--containers",
                "2,4,8,1",
            ]);
            let v = &doc["variants"][0];
            assert_eq!(doc["variants"].as_array().map(Vec::len), Some(1));
            assert!(v.get("error").is_none(), "{preset} {policy}: {v}");
            assert_eq!(v["topologyManager"]["policy"], policy);
            let placed = v["allocations"].as_array().map_or(0, Vec::len)
                + v["rejections"].as_array().map_or(0, Vec::len);
            assert_eq!(
                placed, 4,
                "{preset} {policy}: every container is accounted for"
            );
            if policy != "none" {
                for a in v["allocations"].as_array().expect("allocations") {
                    assert!(a["hint"].is_object(), "{preset} {policy}: {a}");
                }
            }
        }
    }
}

#[test]
fn pod_yaml_with_memory_devices_and_pod_scope() {
    // The workload docs/plan.md shows, shipped in examples/.
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/pods/web.yaml");
    let f = file.to_str().expect("utf-8 path");
    let doc = json(&[
        "--preset",
        "epyc-9654-2p-nps4",
        "--pods",
        f,
        "--device",
        "example.com/nic=5:1",
        "--topology-manager-policy",
        "restricted",
        "--topology-manager-scope",
        "pod",
    ]);
    let v = &doc["variants"][0];
    assert_eq!(v["topologyManager"]["scope"], "pod");
    assert_eq!(v["rejections"], serde_json::json!([]), "{v}");
    // The NIC sits on NUMA node 5: the pod's CPUs follow it.
    let nic = allocation(v, "net/nic-user");
    assert_eq!(nic["numaNodes"], serde_json::json!([5]));
    assert_eq!(nic["hint"]["numaNodes"], serde_json::json!([5]));
    // Init-container CPUs are reused by the app container; the sidecar is shared.
    let web: Vec<&Value> = v["allocations"]
        .as_array()
        .expect("allocations")
        .iter()
        .filter(|a| a["pod"].as_str().is_some_and(|p| p.starts_with("shop/web")))
        .collect();
    assert_eq!(web.len(), 4, "warm + app for two replicas: {v}");
    assert_eq!(web[0]["cpus"], web[1]["cpus"]);
}

#[test]
fn sysfs_tree_and_demo_workload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let w = |p: &str, s: &str| {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).expect("mkdir");
        std::fs::write(path, s).expect("write");
    };
    w("devices/system/cpu/online", "0-1\n");
    for c in 0..2 {
        w(
            &format!("devices/system/cpu/cpu{c}/topology/physical_package_id"),
            "0\n",
        );
        w(
            &format!("devices/system/cpu/cpu{c}/topology/core_id"),
            &format!("{c}\n"),
        );
        w(
            &format!("devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            &format!("{c}\n"),
        );
    }
    w("devices/system/node/node0/cpulist", "0-1\n");
    // A 2-CPU machine like the CI VM: the demo still runs and explains itself.
    let r = root.to_str().expect("utf-8 path");
    let table = ok(&["--sysfs-root", r]);
    assert!(table.contains("default/c1"), "{table}");
    // The four variants place this workload alike: one table naming them all.
    assert!(
        table.contains(
            "== packed, uncore-aligned, numa-distributed, cores-distributed (4 variants, identical results)"
        ),
        "{table}"
    );
    assert_eq!(table.matches("POD  ").count(), 1, "{table}");
    assert!(!table.contains("== side by side"), "{table}");
    // Which CPU is reserved, what the shared pool is, why each container landed where it did.
    assert!(
        table.contains(
            "reserved CPUs: 0 (1 taken topologically, as the kubelet does)\nshared pool:   0-1 (where non-exclusive containers run; it includes the reserved CPUs, as in the kubelet); 1 CPU(s) assignable"
        ),
        "{table}"
    );
    assert!(
        table.contains("shared pool: pod is Burstable, not Guaranteed: container main requests 500m CPU but its limit is 1"),
        "{table}"
    );
    assert!(
        table.contains(
            "asked for 2 CPUs and 256Mi of memory; free CPUs before this pod: 0 (node 0: 0)"
        ),
        "{table}"
    );
    assert!(table.contains("legend:"), "{table}");
    let doc = json(&["--sysfs-root", r]);
    assert_eq!(doc["variants"].as_array().map(Vec::len), Some(4));
    assert_eq!(allocation(&doc["variants"][0], "default/c1")["cpus"], "1");
}

#[test]
fn bad_input_is_named() {
    let err = |args: &[&str]| {
        let out = plan(args);
        assert!(!out.status.success(), "plan {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(err(&["--preset", "nope"]).contains("kep-4800-example"));
    assert!(err(&["--preset", "graviton3", "--containers", "4,x"]).contains("\"x\""));
    assert!(
        err(&["--preset", "graviton3", "--option", "no-such-option=true"])
            .contains("no-such-option")
    );
    assert!(err(&[
        "--preset",
        "graviton3",
        "--topology-manager-policy",
        "maybe"
    ])
    .contains("maybe"));
    assert!(err(&["--preset", "graviton3", "--device", "x/y=7:1"]).contains("NUMA node 7"));
    assert!(
        err(&["--preset", "graviton3", "--pods", "/nonexistent/pods.yaml"])
            .contains("/nonexistent/pods.yaml")
    );
    assert!(err(&["--preset", "graviton3", "-o", "yaml"]).contains("yaml"));
}

#[test]
fn rejections_carry_numbers_and_explain_shows_the_merge() {
    let args = [
        "--preset",
        "epyc-7303-2p",
        "--containers",
        "24,40",
        "--topology-manager-policy",
        "restricted",
    ];
    let table = ok(&args);
    assert!(
        table.contains(
            "asked for 40 CPUs and 256Mi of memory; free CPUs before this pod: 39 (node 0: 7, node 1: 32); the best NUMA node, 1, had 32"
        ),
        "{table}"
    );
    let mut with = args.to_vec();
    with.extend(["--explain", "c2/main"]);
    let text = ok(&with);
    assert!(
        text.contains("  cpu      cpu: no hint: cannot be satisfied"),
        "{text}"
    );
    assert!(
        text.contains(
            "  merge    restricted: {0,1} non-pref -> not admitted (TopologyAffinityError)"
        ),
        "{text}"
    );
    let text = ok(&[
        "--preset",
        "epyc-7303-2p",
        "--containers",
        "24",
        "--explain",
        "default/c1/main",
    ]);
    assert!(
        text.contains("  cpu      cpu: {0} pref, {1} pref, {0,1} non-pref"),
        "{text}"
    );
    assert!(
        text.contains("  merge    best-effort: {0} pref -> admitted"),
        "{text}"
    );
    assert_eq!(
        text.matches("  merge ").count(),
        3,
        "identical variants fold: {text}"
    );
}

#[test]
fn invalid_values_list_the_valid_ones() {
    let err = |args: &[&str]| {
        let out = plan(args);
        assert!(!out.status.success(), "plan {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = err(&[
        "--preset",
        "graviton3",
        "--topology-manager-policy",
        "single-numa",
    ]);
    assert!(
        e.contains("[possible values: none, best-effort, restricted, single-numa-node]"),
        "{e}"
    );
    let e = err(&["--preset", "graviton3", "--topology-manager-scope", "pods"]);
    assert!(e.contains("[possible values: container, pod]"), "{e}");
    let e = err(&["--preset", "graviton3", "--option", "bogus=1"]);
    assert!(
        e.contains("known options: full-pcpus-only, distribute-cpus-across-numa"),
        "{e}"
    );
    let e = err(&["--preset", "graviton3", "--option", "full-pcpus-only=yes"]);
    assert!(
        e.contains("\"yes\" is not a boolean; the kubelet accepts true, false, 1, 0"),
        "{e}"
    );
    let e = err(&[
        "--preset",
        "graviton3",
        "--topology-manager-option",
        "max-allowable-numa-nodes=x",
    ]);
    assert!(e.contains("is not a whole number"), "{e}");
    let e = err(&["--preset", "graviton3", "--explain", "c1"]);
    assert!(e.contains("expected POD/CONTAINER"), "{e}");
    // Every kubelet spelling of a boolean is accepted.
    for b in [
        "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
    ] {
        let opt = format!("full-pcpus-only={b}");
        ok(&[
            "--preset",
            "graviton3",
            "--containers",
            "2",
            "--option",
            &opt,
        ]);
    }
    // A configuration no variant can run exits non-zero and says why.
    let out = plan(&["--preset", "kep-4800-example", "--reserved", "99"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("no variant can run on this machine (CPUs 0-15)"),
        "{e}"
    );
    assert!(e.contains("99"), "{e}");
}

/// `plan --help` lists every CPU manager option of the engine's table (the help text is
/// built from the table, not written by hand).
#[test]
fn help_lists_every_cpu_manager_option_of_the_table() {
    let help = ok(&["--help"]);
    let names: Vec<&str> = nodetopo_engine::cpumanager::options::CPU_OPTION_TABLE
        .options
        .iter()
        .map(|o| o.name)
        .collect();
    for name in &names {
        assert!(
            help.contains(name),
            "plan --help lacks option {name}:\n{help}"
        );
    }
    println!("options found in plan --help: {}", names.len());
}
