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

/// The events as JSON without `reverts`: origin writes and the cache of recent contents are not
/// in the snapshot (docs/enriched-events.md), so a revert across a restart is told apart below.
fn masked(out: &[kausality_stream::enriched::Enriched]) -> Vec<String> {
    out.iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap();
            v.as_object_mut().unwrap().remove("reverts");
            v.to_string()
        })
        .collect()
}

/// Who the drift of the write `event` reverts, and whether its fields are known.
fn reverted(out: &[kausality_stream::enriched::Enriched], event: &str) -> Vec<(String, bool)> {
    let e = common::find(out, event).expect("classified");
    e.reverts.iter().flatten().map(|r| (r.user.to_string(), r.fields.is_some())).collect()
}

#[test]
fn restart_from_a_snapshot_classifies_like_an_uninterrupted_run() {
    let events = stream();
    let uninterrupted = run(&events);
    let reference = masked(&uninterrupted);
    assert_eq!(reverted(&uninterrupted, &events[5]), [("alice".to_string(), true)]);

    let mut first = processor(Default::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut first, &events[..5], &mut out);
    first.flush(0, &mut out);
    let mut snap = Vec::new();
    let stats = first.snapshot(&mut snap).unwrap();
    assert_eq!(stats.objects, 2);
    assert_eq!(
        stats.trace_nodes, 0,
        "alice's edit made the ReplicaSet's trace a new origin; the Deployment's is its own hop"
    );
    // Right after the ReplicaSet's create, its trace extends the Deployment's: one shared node.
    let mut early = processor(Default::default(), 500_000);
    let mut sink = Vec::new();
    feed(&mut early, &events[..2], &mut sink);
    early.flush(0, &mut sink);
    let mut buf = Vec::new();
    assert_eq!(early.snapshot(&mut buf).unwrap().trace_nodes, 1);
    // There the Deployment keeps its own built node, not its producing write: restored from
    // that, the rest of the stream still reads as if uninterrupted (traces included).
    let mut from_early = processor(Default::default(), 500_000);
    from_early.restore(&mut buf.as_slice()).unwrap();
    let mut early_out = sink.clone();
    feed(&mut from_early, &events, &mut early_out);
    from_early.flush(0, &mut early_out);
    assert_eq!(masked(&early_out), reference);
    // The contents before alice's write were not kept across the restart: named, fields unknown.
    assert_eq!(reverted(&early_out, &events[5]), [("alice".to_string(), false)]);

    let mut second = processor(Default::default(), 500_000);
    let restored = second.restore(&mut snap.as_slice()).unwrap();
    assert_eq!(restored, stats);
    // The first part is delivered again (at-least-once): the dedupe window drops it.
    feed(&mut second, &events, &mut out);
    second.flush(0, &mut out);
    let got = masked(&out);
    assert_eq!(got, reference);
    // Alice's origin write was not in the snapshot: the drift after the restart names nobody.
    assert_eq!(reverted(&out, &events[5]), []);
    assert_eq!(second.metrics().duplicates(), 5);
    // The approval survived the restart and was used up once.
    assert_eq!(got.iter().filter(|l| l.contains("\"resolution\":\"approved\"")).count(), 1);
}

/// The snapshot of a processor that took all of [`stream`].
fn snapshot_of_stream() -> Vec<u8> {
    let mut p = processor(Default::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, &stream(), &mut out);
    p.flush(0, &mut out);
    let mut snap = Vec::new();
    p.snapshot(&mut snap).unwrap();
    snap
}

#[test]
fn corrupt_or_foreign_snapshots_are_refused() {
    let snap = snapshot_of_stream();
    let mut flipped = snap.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    assert!(matches!(processor(Default::default(), 1).restore(&mut flipped.as_slice()), Err(SnapshotError::Checksum)));
    assert!(matches!(
        processor(Default::default(), 1).restore(&mut &b"{\"not\":\"a snapshot\"}"[..]),
        Err(SnapshotError::BadMagic)
    ));
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
    second.engine().for_each_state(|k, s| names.push((k.uid() == uid, s.name().map(|n| n.to_string()))));
    names.sort();
    assert_eq!(
        names,
        [(false, None), (false, Some("web".to_string())), (true, Some("api".to_string()))],
        "the ReplicaSet keeps no name (nothing named it as an owner); a Deployment created after the restore keeps its own"
    );
}

#[test]
fn a_parent_whose_trace_node_was_built_keeps_its_hop_through_a_snapshot() {
    // The Deployment's trace node is built when its first ReplicaSet extends it; the state then
    // keeps the node in place of the producing write. A snapshot taken there and restored must
    // give the next child the same Deployment hop: the admin's create, at its time.
    let mut api = ApiServer::new();
    let (d, create) = api.create(ADMIN, deployment("s", "web", 2, "web:1"));
    let (_, first) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h", 2, "web:1"));
    let (_, second) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h2", 1, "web:1"));
    let events = vec![create.clone(), first, second.clone()];
    let reference = run(&events);

    let mut before = processor(Default::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut before, &events[..2], &mut out);
    before.flush(0, &mut out);
    let mut snap = Vec::new();
    assert_eq!(
        before.snapshot(&mut snap).unwrap().trace_nodes,
        1,
        "the Deployment's node, shared by the first ReplicaSet"
    );
    let mut after = processor(Default::default(), 500_000);
    after.restore(&mut snap.as_slice()).unwrap();
    feed(&mut after, &events[2..], &mut out);
    after.flush(0, &mut out);
    assert_eq!(
        out.iter().map(|e| serde_json::to_string(e).unwrap()).collect::<Vec<_>>(),
        reference.iter().map(|e| serde_json::to_string(e).unwrap()).collect::<Vec<_>>()
    );

    let judged = common::find(&out, &second).expect("the second ReplicaSet's create is classified");
    assert_eq!(
        judged.class,
        kausality_stream::classify::Class::Initializing,
        "the controller of a new Deployment: extends its trace"
    );
    let hops: Vec<_> = judged.trace.iter().map(|h| (&*h.kind, h.user.as_deref(), h.timestamp.as_deref())).collect();
    let created = common::find(&reference, &create).expect("the Deployment's create is classified");
    assert_eq!(
        hops,
        vec![
            ("Deployment", Some(ADMIN), Some(&*created.stage_timestamp)),
            ("ReplicaSet", Some(DEPLOYMENT_CONTROLLER), Some(&*judged.stage_timestamp))
        ]
    );
}

/// The rollout fixture recorded on a real control plane, as lines.
fn rollout_lines() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/controlplane/rollout.jsonl");
    std::fs::read_to_string(path).expect("rollout fixture").lines().map(str::to_string).collect()
}

/// Line 41 of the rollout fixture: the deployment controller scales the old ReplicaSet to 0
/// while the Deployment's status reports generation 2 observed with `Progressing:
/// ReplicaSetUpdated` (the rollout under way).
const SCALE_DOWN: usize = 40;

#[test]
fn a_snapshot_of_format_4_is_read_with_its_observed_generations_finished() {
    // `tests/fixtures/snapshot/rollout-prefix-v4.snap` was written by the format-4 writer (the
    // release before finishing was kept): `serve` with `reorder_window = "0s"`, a file source of
    // the rollout fixture's first 40 lines and `[state] snapshot`, stopped with SIGTERM.
    let v4 = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/snapshot/rollout-prefix-v4.snap"))
        .expect("fixture");
    assert!(v4.starts_with(b"KAUSALITY-STATE 4\n"));
    let lines = rollout_lines();
    let mut old = processor(Default::default(), 0);
    let stats = old.restore(&mut v4.as_slice()).expect("format 4 is read");
    assert_eq!(stats.objects, 9);
    let mut out = Vec::new();
    feed(&mut old, &lines[..=SCALE_DOWN], &mut out);
    old.flush(0, &mut out);
    assert_eq!(out.len(), 1, "the first 40 lines are known to the restored dedupe window");
    let e = &out[0];
    assert_eq!(
        e.class,
        kausality_stream::classify::Class::Drift,
        "format 4 knew no finishing: its observed generation reads as finished"
    );
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));

    // The same state written now (format 8, which keeps it as 5 did) keeps that the rollout was
    // not finished.
    let mut first = processor(Default::default(), 0);
    let mut sink = Vec::new();
    feed(&mut first, &lines[..SCALE_DOWN], &mut sink);
    first.flush(0, &mut sink);
    let mut v5 = Vec::new();
    first.snapshot(&mut v5).unwrap();
    assert!(v5.starts_with(b"KAUSALITY-STATE 8\n"));
    let mut new = processor(Default::default(), 0);
    new.restore(&mut v5.as_slice()).unwrap();
    let mut out = Vec::new();
    feed(&mut new, &lines[SCALE_DOWN..=SCALE_DOWN], &mut out);
    new.flush(0, &mut out);
    assert_eq!(out[0].class, kausality_stream::classify::Class::Expected);
    assert_eq!(out[0].parent.as_ref().unwrap().finished, Some(false));
}

#[test]
fn a_snapshot_of_an_unknown_format_version_names_the_version_found_and_those_read() {
    let snap = snapshot_of_stream();
    let body = &snap["KAUSALITY-STATE 8\n".len()..];
    for found in ["3", "9", "12", "x"] {
        let mut other = format!("KAUSALITY-STATE {found}\n").into_bytes();
        other.extend_from_slice(body);
        let err = processor(Default::default(), 1).restore(&mut other.as_slice()).unwrap_err();
        assert!(matches!(&err, SnapshotError::UnknownVersion { found: f } if f == found), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("format version {found},")) && msg.contains("reads 4, 5, 6, 7, 8)"), "{msg}");
        assert!(!msg.contains("not a kausality-stream state snapshot"), "{msg}");
    }
    let err = processor(Default::default(), 1).restore(&mut &b"KAUSALITY-STATE"[..]).unwrap_err();
    assert!(matches!(err, SnapshotError::BadMagic), "no version line at all: {err:?}");
}
