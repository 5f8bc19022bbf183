use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodetopo_crds::conditions::{self, ConditionSpec};
use tokio::sync::{watch, Notify};

use super::{agreement_after_restart, AgreementCheck, AgreementFeed, AgreementSeen};
use crate::actuation::KubeletService;

fn seen(read_at: Instant, generation: i64, reason: &str, diffs: &[&str]) -> AgreementSeen {
    AgreementSeen {
        read_at,
        generation: Some(generation),
        condition: ConditionSpec::new(
            conditions::KUBELET_AGREEMENT,
            reason == "Agree",
            reason,
            format!("{reason} message"),
        ),
        differences: diffs.iter().map(|d| d.to_string()).collect(),
    }
}

#[test]
fn agreement_after_restart_decisions() {
    let t0 = Instant::now();
    let since = t0 + Duration::from_secs(5);
    let after = since + Duration::from_millis(1);
    let old = "default/db/app (kubelet \"1,33\", nodetopo \"2,34\")";
    let new = "default/web/app (kubelet \"3,35\", nodetopo \"4,36\")";
    let before_agree = seen(t0, 2, "Agree", &[]);
    let before_old = seen(t0, 2, "Disagree", &[old]);
    type Case<'a> = (
        &'a str,
        Option<&'a AgreementSeen>,
        Option<AgreementSeen>,
        Result<&'a str, &'a str>,
    );
    let cases: Vec<Case> =
        vec![
        ("nothing read", None, None, Err("has not read the kubelet yet")),
        (
            "read before the restart",
            Some(&before_agree),
            Some(seen(since - Duration::from_millis(1), 3, "Agree", &[])),
            Err("no kubelet read since the restart yet"),
        ),
        (
            "old generation in effect",
            Some(&before_agree),
            Some(seen(after, 2, "Agree", &[])),
            Err("has not taken in the spec of generation 3 yet (in effect: 2)"),
        ),
        (
            "agree",
            Some(&before_agree),
            Some(seen(after, 3, "Agree", &[])),
            Ok("KubeletAgreement True on a kubelet read after the restart: Agree message"),
        ),
        (
            "agree without a before",
            None,
            Some(seen(after, 3, "Agree", &[])),
            Ok("KubeletAgreement True"),
        ),
        (
            "only the differences present before",
            Some(&before_old),
            Some(seen(after, 3, "Disagree", &[old])),
            Ok("with only the 1 differences already present before the apply"),
        ),
        (
            "pinned memory differing as before the apply",
            Some(&before_old),
            Some(seen(after, 3, "KubeletMemoryDisagree", &[old])),
            Ok("with only the 1 differences already present before the apply"),
        ),
        (
            "pinned memory differing anew",
            Some(&before_agree),
            Some(seen(after, 3, "KubeletMemoryDisagree", &[old])),
            Err("with 1 differences not present before the apply: default/db/app"),
        ),
        (
            "a new difference",
            Some(&before_old),
            Some(seen(after, 3, "Disagree", &[old, new])),
            Err("with 1 differences not present before the apply: default/web/app"),
        ),
        (
            "differences where there were none",
            Some(&before_agree),
            Some(seen(after, 3, "Disagree", &[old])),
            Err("with 1 differences not present before the apply: default/db/app"),
        ),
        (
            "no kubelet state",
            Some(&before_agree),
            Some(seen(after, 3, "NoKubeletState", &[])),
            Err("KubeletAgreement False NoKubeletState after the restart: NoKubeletState message"),
        ),
        (
            "checksum mismatch",
            Some(&before_agree),
            Some(seen(after, 3, "KubeletStateChecksumMismatch", &[])),
            Err("KubeletAgreement False KubeletStateChecksumMismatch"),
        ),
        (
            "kubelet runs none",
            Some(&before_agree),
            Some(seen(after, 3, "KubeletPolicyNone", &[])),
            Err("KubeletAgreement False KubeletPolicyNone"),
        ),
    ];
    let n = cases.len();
    for (name, before, now, want) in cases {
        let got = agreement_after_restart(before, now.as_ref(), 3, since);
        match (&got, want) {
            (Ok(m), Ok(w)) | (Err(m), Err(w)) => assert!(m.contains(w), "{name}: {m}"),
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    println!("agreement-after-restart decisions checked: {n}");
}

/// An inner service that records its calls.
struct Hooks(Arc<Mutex<Vec<&'static str>>>);

impl KubeletService for Hooks {
    fn stop(&mut self) -> Result<(), String> {
        self.0.lock().expect("log").push("stop");
        Ok(())
    }
    fn start(&mut self) -> Result<(), String> {
        self.0.lock().expect("log").push("start");
        Ok(())
    }
    fn healthy(&mut self) -> Result<(), String> {
        self.0.lock().expect("log").push("healthy");
        Ok(())
    }
}

struct Rig {
    rt: tokio::runtime::Runtime,
    tx: watch::Sender<Option<AgreementSeen>>,
    read_now: Arc<Notify>,
    calls: Arc<Mutex<Vec<&'static str>>>,
    verified: Arc<Mutex<Option<String>>>,
}

fn rig(before: Option<AgreementSeen>, wait: Duration) -> (Rig, AgreementCheck) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, rx) = watch::channel(before);
    let read_now = Arc::new(Notify::new());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let verified = Arc::new(Mutex::new(None));
    let check = AgreementCheck::new(
        Box::new(Hooks(calls.clone())),
        rt.handle().clone(),
        AgreementFeed {
            seen: rx,
            read_now: read_now.clone(),
        },
        3,
        wait,
        verified.clone(),
    );
    (
        Rig {
            rt,
            tx,
            read_now,
            calls,
            verified,
        },
        check,
    )
}

#[test]
fn the_check_asks_for_a_read_and_waits_for_agreement_after_the_restart() {
    let before = seen(Instant::now(), 2, "Agree", &[]);
    let (rig, mut check) = rig(Some(before), Duration::from_secs(60));
    let worker = std::thread::spawn(move || {
        check.restart().expect("restart");
        check.healthy()
    });
    // Plays the agent loop: on each read asked for, publishes a read; the first one still
    // runs the old generation, the second agrees under generation 3.
    let (tx, read_now) = (rig.tx.clone(), rig.read_now.clone());
    let reads = rig.rt.block_on(async move {
        for (n, generation) in [(1, 2), (2, 3)] {
            read_now.notified().await;
            tx.send_replace(Some(seen(Instant::now(), generation, "Agree", &[])));
            if generation == 3 {
                return n;
            }
        }
        0
    });
    assert_eq!(worker.join().expect("worker"), Ok(()));
    assert_eq!(reads, 2, "two reads asked for");
    assert_eq!(
        *rig.calls.lock().expect("log"),
        ["stop", "start", "healthy"]
    );
    let v = rig.verified.lock().expect("verified").clone();
    assert!(
        v.as_deref().is_some_and(
            |v| v.starts_with("KubeletAgreement True on a kubelet read after the restart")
        ),
        "{v:?}"
    );
}

#[test]
fn the_check_fails_naming_what_it_saw_and_recovery_does_not_judge_agreement() {
    let old = "default/db/app (kubelet \"1,33\", nodetopo \"2,34\")";
    let (rig, mut check) = rig(
        Some(seen(Instant::now(), 3, "Agree", &[])),
        Duration::from_secs(1),
    );
    check.start().expect("start");
    // A read after the start that disagrees where nothing did before.
    rig.tx
        .send_replace(Some(seen(Instant::now(), 3, "Disagree", &[old])));
    let err = check.healthy().expect_err("a new difference fails");
    assert!(
        err.starts_with("KubeletAgreement not confirmed within 1s (--actuation-verify-seconds) of the kubelet restart: KubeletAgreement False after the restart with 1 differences not present before the apply: default/db/app"),
        "{err}"
    );
    assert!(rig.verified.lock().expect("verified").is_none());
    // After a rollback only the inner service's health counts.
    check.start().expect("start again");
    assert_eq!(check.recovered(), Ok(()));
    assert_eq!(
        *rig.calls.lock().expect("log"),
        ["start", "healthy", "start", "healthy"]
    );
    drop(rig.rt);
}
