//! The two sources of a pod give the same record, and the same errors.

use super::*;
use k8s_openapi::jiff::Timestamp;

/// A pod with an init container, a sidecar and an app container, whose creation time is
/// `created` and whose status is `status` (YAML flow mapping, or empty for none).
fn yaml(created: &str, status: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: web-0, namespace: prod, uid: u-1, creationTimestamp: "{created}"}}
spec:
  initContainers:
  - name: setup
    resources: {{limits: {{cpu: "1", memory: 1Gi}}}}
  - name: sidecar
    restartPolicy: Always
    resources: {{limits: {{cpu: 500m, memory: 64Mi}}}}
  containers:
  - name: app
    resources:
      requests: {{cpu: "2"}}
      limits: {{cpu: "2", memory: 2Gi, hugepages-2Mi: 1Gi, example.com/nic: "1", ephemeral-storage: 1G}}
{status}"#
    )
}

/// The same text read both ways: as local mode reads a pod file, and as the API's Pod (the
/// shape a watch delivers).
fn both(text: &str) -> (Result<PodInfo, PodError>, Result<PodInfo, PodError>) {
    let manifests = nodetopo_kubelet::pods::pods_from_yaml(text).expect("pod YAML");
    assert_eq!(manifests.len(), 1);
    let api: ApiPod = serde_yaml::from_str(text).expect("an API Pod");
    (
        PodInfo::from_manifest(&manifests[0]),
        PodInfo::from_k8s(&api),
    )
}

fn at(text: &str) -> Option<Time> {
    Some(Time(text.parse::<Timestamp>().expect("a timestamp")))
}

#[test]
fn the_api_and_yaml_give_the_same_pod_info() {
    // (as written, the same instant in UTC): whole seconds, a fraction down to nanoseconds,
    // and a timezone offset.
    let times = [
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
        (
            "2024-05-01T10:00:00.123456789Z",
            "2024-05-01T10:00:00.123456789Z",
        ),
        ("2024-05-01T12:00:00.5+02:00", "2024-05-01T10:00:00.5Z"),
    ];
    let statuses = [
        "",
        "status: {phase: Running}\n",
        "status: {phase: Failed, reason: TopologyAffinityError, message: 'Pod was rejected: m'}\n",
        "status: {phase: Succeeded}\n",
    ];
    for (written, utc) in times {
        for status in statuses {
            let (from_yaml, from_api) = both(&yaml(written, status));
            let from_yaml = from_yaml.expect("YAML converts");
            assert_eq!(
                from_api.expect("API converts"),
                from_yaml,
                "{written} {status}"
            );
            assert_eq!(from_yaml.created, at(utc), "{written}");
        }
    }
    // What the record holds, once (the conversion itself is tested in nodetopo-kubelet).
    let (p, _) = both(&yaml(times[0].0, statuses[2]));
    let p = p.expect("converts");
    assert_eq!(
        (p.pod.key(), p.pod.uid.as_str()),
        ("prod/web-0".into(), "u-1")
    );
    let names: Vec<_> = p.pod.all_containers().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["setup", "sidecar", "app"]);
    assert!(p.pod.init_containers[1].restartable);
    assert_eq!(p.pod.containers[0].requests.memory_bytes, Some(2 << 30));
    assert_eq!(
        p.pod.containers[0].limits.extended.get("example.com/nic"),
        Some(&1)
    );
    assert_eq!((p.phase.as_str(), p.terminal), ("Failed", true));
    assert_eq!(
        p.kubelet_refusal,
        Some(("TopologyAffinityError".into(), "Pod was rejected: m".into()))
    );
}

#[test]
fn a_pod_without_creation_time_has_none_on_both_paths() {
    let text = yaml("x", "").replace(", creationTimestamp: \"x\"", "");
    let (from_yaml, from_api) = both(&text);
    let from_yaml = from_yaml.expect("converts");
    assert_eq!(from_yaml.created, None);
    assert_eq!(from_api.expect("converts"), from_yaml);
}

#[test]
fn the_api_time_is_taken_as_is() {
    let mut api: ApiPod = serde_yaml::from_str(&yaml("2024-05-01T10:00:00Z", "")).expect("pod");
    // A time no text round trip would give back: the API's own value is kept, to the
    // nanosecond.
    let t = Time(Timestamp::new(1_714_557_600, 123_456_789).expect("in range"));
    api.metadata.creation_timestamp = Some(t.clone());
    assert_eq!(PodInfo::from_k8s(&api).expect("converts").created, Some(t));
}

#[test]
fn only_the_api_pod_has_running_containers() {
    let status = "status:\n  phase: Running\n  containerStatuses:\n  - {name: app, containerID: 'containerd://abc', state: {running: {}}, image: i, imageID: '', ready: true, restartCount: 0}\n  initContainerStatuses:\n  - {name: setup, containerID: 'containerd://def', state: {terminated: {exitCode: 0}}, image: i, imageID: '', ready: false, restartCount: 0}\n  - {name: sidecar, containerID: '', state: {running: {}}, image: i, imageID: '', ready: false, restartCount: 0}\n";
    let (from_yaml, from_api) = both(&yaml("2024-05-01T10:00:00Z", status));
    let from_api = from_api.expect("converts");
    assert_eq!(
        from_api.running,
        BTreeMap::from([("app".to_string(), "containerd://abc".to_string())])
    );
    let from_yaml = from_yaml.expect("converts");
    assert!(from_yaml.running.is_empty());
    assert_eq!(
        PodInfo {
            running: BTreeMap::new(),
            ..from_api
        },
        from_yaml
    );
}

#[test]
fn both_paths_name_the_same_problem() {
    let good = yaml("2024-05-01T10:00:00Z", "");
    let cases = [
        (
            good.replace("cpu: 500m", "cpu: 5x"),
            "pod prod/web-0 container sidecar: resources.limits.cpu: invalid quantity \"5x\": unknown suffix",
        ),
        (
            good.replace("- name: setup", "- name: app"),
            "pod prod/web-0: duplicate container name \"app\"",
        ),
        (
            good.replace("name: web-0, ", ""),
            "pod prod/<unnamed>: missing metadata.name",
        ),
        (
            good[..good.find("spec:").expect("spec")].to_string(),
            "pod prod/web-0: missing spec",
        ),
        (
            good.replace("example.com/nic: \"1\"", "example.com/nic: 500m"),
            "pod prod/web-0 container app: resources.limits.example.com/nic: quantity \"500m\" must be a whole number",
        ),
    ];
    for (text, want) in cases {
        let (from_yaml, from_api) = both(&text);
        let from_yaml = from_yaml.expect_err("YAML refused").to_string();
        let from_api = from_api.expect_err("API refused").to_string();
        assert_eq!((from_yaml.as_str(), from_api.as_str()), (want, want));
    }
}

#[test]
fn a_yaml_creation_time_that_is_not_a_time_names_the_pod_and_the_text() {
    for bad in ["yesterday", "2024-05-01 10:00", "2024-05-01T10:00:00"] {
        let manifests = nodetopo_kubelet::pods::pods_from_yaml(&yaml(bad, "")).expect("pod YAML");
        let e = PodInfo::from_manifest(&manifests[0]).expect_err("refused");
        let want =
            format!("pod prod/web-0: metadata.creationTimestamp {bad:?} is not an RFC 3339 time: ");
        assert!(matches!(e, PodError::CreationTimestamp { .. }), "{e}");
        assert!(e.to_string().starts_with(&want), "{e}");
    }
    // A bad quantity is named first, as the engine's conversion runs before the time.
    let both_bad = yaml("yesterday", "").replace("cpu: 500m", "cpu: 5x");
    let manifests = nodetopo_kubelet::pods::pods_from_yaml(&both_bad).expect("pod YAML");
    let e = PodInfo::from_manifest(&manifests[0]).expect_err("refused");
    assert!(matches!(e, PodError::Pod(_)), "{e}");
}

#[test]
fn only_the_resource_managers_reasons_are_explained() {
    let info = |reason: &str| {
        let status = format!(
            "status: {{phase: Failed, reason: {reason}, message: 'Pod was rejected: m'}}\n"
        );
        let (from_yaml, from_api) = both(&yaml("2024-05-01T10:00:00Z", &status));
        let from_yaml = from_yaml.expect("pod");
        assert_eq!(from_api.expect("pod"), from_yaml);
        from_yaml.kubelet_refusal
    };
    assert_eq!(
        info("SMTAlignmentError"),
        Some(("SMTAlignmentError".into(), "Pod was rejected: m".into()))
    );
    assert_eq!(info("OutOfcpu"), None);
    assert_eq!(info("Evicted"), None);
}
