//! nodetopo's NodeResourceTopology objects on a real apiserver, under the upstream CRD
//! (noderesourcetopology-api v0.1.3 `manifests/crd.yaml`, vendored byte-identical in
//! charts/nodetopo/files/noderesourcetopology-api/): every golden object of
//! crds/tests/data/nrt is accepted, read back unchanged (nothing pruned), and replaced by
//! server-side apply with the agent's field manager; objects that break the CRD's schema
//! are rejected, so acceptance means something.

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodetopo_controlplane::repo_root;
use nodetopo_crds::nrt::NodeResourceTopology;
use serde_json::json;

use crate::common::{api_message, control_plane};

fn golden(file: &Path) -> NodeResourceTopology {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// What the server must give back unchanged: everything but server-set metadata.
fn content(o: &NodeResourceTopology) -> serde_json::Value {
    json!({
        "topologyPolicies": o.topology_policies,
        "zones": o.zones,
        "attributes": o.attributes,
        "ownerReferences": o.metadata.owner_references,
    })
}

#[tokio::test]
async fn nrt_objects_accepted_by_upstream_crd() {
    let Some(cp) = control_plane() else { return };
    let client = cp.client();
    cp.install_nrt_crd().await.expect("NRT CRD");
    // Discovery of a new CRD's resource can lag Established by a moment.
    let api: Api<NodeResourceTopology> = Api::all(client);
    let dir = repo_root().join("crds/tests/data/nrt");
    let mut machines: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".before.json"))
                .map(str::to_string)
        })
        .collect();
    machines.sort();
    assert_eq!(machines.len(), 3, "three machines' golden objects");
    let mut accepted = 0;
    // Written as the agent writes: server-side apply with its field manager, unforced (a
    // conflict with another producer, e.g. NFD's updater, must surface, not be overridden).
    let apply = PatchParams::apply(nodetopo_crds::AGENT_FIELD_MANAGER);
    for m in &machines {
        let name = format!("cp-{m}");
        let mut before = golden(&dir.join(format!("{m}.before.json")));
        let mut after = golden(&dir.join(format!("{m}.after.json")));
        before.metadata.name = Some(name.clone());
        after.metadata.name = Some(name.clone());
        let _ = api.delete(&name, &DeleteParams::default()).await;
        // Create (retrying while the new resource is not yet served).
        let deadline = Instant::now() + Duration::from_secs(30);
        let created = loop {
            match api.patch(&name, &apply, &Patch::Apply(&before)).await {
                Ok(o) => break o,
                Err(kube::Error::Api(s)) if s.code == 404 && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{m}: creating the before object: {e}"),
            }
        };
        assert_eq!(content(&created), content(&before), "{m}: stored as sent");
        let read = api.get(&name).await.expect("read back");
        assert_eq!(content(&read), content(&before), "{m}: read back unchanged");
        accepted += 1;
        // The next write replaces the lists (atomic in this CRD's schema).
        let applied = api
            .patch(&name, &apply, &Patch::Apply(&after))
            .await
            .unwrap_or_else(|e| panic!("{m}: applying the after object: {e}"));
        assert_eq!(content(&applied), content(&after), "{m}: applied as sent");
        accepted += 1;
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
    }

    // The schema is enforced: each of these is rejected with the field named.
    let base = serde_json::to_value(golden(&dir.join(format!("{}.before.json", machines[0]))))
        .expect("json");
    let mut rejected = 0;
    let raw: Api<kube::api::DynamicObject> = Api::all_with(
        cp.client(),
        &kube::api::ApiResource::erase::<NodeResourceTopology>(&()),
    );
    for (what, mutate, field) in [
        (
            "no zones",
            Box::new(|v: &mut serde_json::Value| {
                v.as_object_mut().expect("object").remove("zones");
            }) as Box<dyn Fn(&mut serde_json::Value)>,
            "zones",
        ),
        (
            "a quantity that is not one",
            Box::new(|v: &mut serde_json::Value| {
                v["zones"][0]["resources"][0]["available"] = json!("3 cpus");
            }),
            "available",
        ),
        (
            "a resource without capacity",
            Box::new(|v: &mut serde_json::Value| {
                v["zones"][0]["resources"][0]
                    .as_object_mut()
                    .expect("resource")
                    .remove("capacity");
            }),
            "capacity",
        ),
        (
            "a cost that is not an integer",
            Box::new(|v: &mut serde_json::Value| {
                v["zones"][0]["costs"][0]["value"] = json!("near");
            }),
            "value",
        ),
    ] {
        let mut v = base.clone();
        v["metadata"] = json!({"name": "cp-nrt-bad"});
        mutate(&mut v);
        // Sent as raw JSON: several of these cannot be expressed in the Rust type.
        let dynamic: kube::api::DynamicObject = serde_json::from_value(v).expect("dynamic object");
        let err = raw.create(&PostParams::default(), &dynamic).await.err();
        let err = err.unwrap_or_else(|| panic!("{what}: accepted, but the CRD forbids it"));
        let msg = api_message(&err);
        assert!(
            msg.contains(field),
            "{what}: message {msg:?} does not name {field}"
        );
        rejected += 1;
    }
    println!(
        "nrt on the control plane: {accepted} objects of {} machines accepted under the upstream CRD, {rejected} bad objects rejected",
        machines.len()
    );
}
