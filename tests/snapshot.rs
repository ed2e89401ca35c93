//! A snapshot taken in the middle of a stream and restored into a fresh processor classifies the
//! rest of the stream exactly as an uninterrupted run does.

mod common;

use common::{feed, processor, run};
use kausality_stream::sim::*;
use kausality_stream::state::SnapshotError;
use serde_json::json;

fn stream() -> Vec<String> {
    let mut api = ApiServer::new();
    let mut ev = Vec::new();
    let mut d = deployment("s", "web", 2, "web:1");
    d["metadata"]["annotations"] = json!({"kausality.io/trace-ticket": "T-9", "kausality.io/approvals": "[{\"apiVersion\":\"*\",\"kind\":\"ReplicaSet\",\"name\":\"*\",\"generation\":1}]"});
    let (d, e) = api.create(ADMIN, d);
    ev.push(e);
    let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h", 2, "web:1"));
    ev.push(e);
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
    ev.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    ev.push(api.update("alice", &rs, |r| r["spec"]["replicas"] = json!(3)));
    // --- snapshot taken here in the interrupted run ---
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(2)));
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(1)));
    ev.push(api.update(ADMIN, &d, |x| x["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")));
    let (_, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h2", 1, "web:2"));
    ev.push(e);
    ev
}

#[test]
fn restart_from_a_snapshot_classifies_like_an_uninterrupted_run() {
    let events = stream();
    let reference: Vec<String> = run(&events).iter().map(|e| serde_json::to_string(e).unwrap()).collect();

    let mut first = processor(Default::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut first, &events[..5], &mut out);
    first.flush(0, &mut out);
    let mut snap = Vec::new();
    let stats = first.snapshot(&mut snap).unwrap();
    assert_eq!(stats.objects, 2);
    assert_eq!(stats.trace_nodes, 0, "alice's edit made the ReplicaSet's trace a new origin; the Deployment's is its own hop");
    // Right after the ReplicaSet's create, its trace extends the Deployment's: one shared node.
    let mut early = processor(Default::default(), 500_000);
    let mut sink = Vec::new();
    feed(&mut early, &events[..2], &mut sink);
    early.flush(0, &mut sink);
    let mut buf = Vec::new();
    assert_eq!(early.snapshot(&mut buf).unwrap().trace_nodes, 1);

    let mut second = processor(Default::default(), 500_000);
    let restored = second.restore(&mut snap.as_slice()).unwrap();
    assert_eq!(restored, stats);
    // The first part is delivered again (at-least-once): the dedupe window drops it.
    feed(&mut second, &events, &mut out);
    second.flush(0, &mut out);
    let got: Vec<String> = out.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    assert_eq!(got, reference);
    assert_eq!(second.metrics().dedup_hits.get(), 5);
    // The approval survived the restart and was used up once.
    assert_eq!(got.iter().filter(|l| l.contains("\"resolution\":\"approved\"")).count(), 1);
}

#[test]
fn corrupt_or_foreign_snapshots_are_refused() {
    let mut p = processor(Default::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, &stream(), &mut out);
    p.flush(0, &mut out);
    let mut snap = Vec::new();
    p.snapshot(&mut snap).unwrap();
    let mut flipped = snap.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    assert!(matches!(processor(Default::default(), 1).restore(&mut flipped.as_slice()), Err(SnapshotError::Checksum)));
    assert!(matches!(processor(Default::default(), 1).restore(&mut &b"{\"not\":\"a snapshot\"}"[..]), Err(SnapshotError::BadMagic)));
    let cut = &snap[..snap.len() / 3];
    assert!(processor(Default::default(), 1).restore(&mut &cut[..]).is_err());
}

#[test]
fn a_restored_engine_still_knows_which_kinds_own_others() {
    let mut api = ApiServer::new();
    let (d, create_d) = api.create(ADMIN, deployment("s", "web", 2, "web:1"));
    let (_, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h", 2, "web:1"));
    let mut first = processor(Default::default(), 0);
    let mut out = Vec::new();
    feed(&mut first, &[create_d, create_rs], &mut out);
    first.flush(0, &mut out);
    let mut snap = Vec::new();
    first.snapshot(&mut snap).unwrap();

    let mut second = processor(Default::default(), 0);
    second.restore(&mut snap.as_slice()).unwrap();
    let (other, create_other) = api.create(ADMIN, deployment("s", "api", 1, "api:1"));
    feed(&mut second, &[create_other], &mut out);
    second.flush(0, &mut out);
    let uid = kausality_stream::write::uid_key(&other.uid);
    let mut names = Vec::new();
    second.engine().store.for_each(|k, s| names.push((k.uid() == uid, s.name.as_deref().map(str::to_string))));
    names.sort();
    assert_eq!(
        names,
        [(false, None), (false, Some("web".to_string())), (true, Some("api".to_string()))],
        "the ReplicaSet keeps no name (nothing named it as an owner); a Deployment created after the restore keeps its own"
    );
}
