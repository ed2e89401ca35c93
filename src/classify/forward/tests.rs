//! Trace messages between partitions: a tree fed as the ingest tier routes it, to a processor
//! that keeps its state by partition, with the trace messages it queues delivered back (as the
//! input topic would) at the points each test chooses.

use std::sync::Arc;

use super::*;
use crate::classify::{Class, EngineOptions};
use crate::config::ModelConfig;
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::process::{Clock, Decoded, Processor, ProcessorOptions};
use crate::sim::*;

const ALICE: &str = "alice@example.com";

fn processor() -> Processor {
    processor_on(Clock::EventTime, 0)
}

/// A processor whose reorder buffer holds writes for `window_us` of `clock`.
fn processor_on(clock: Clock, window_us: i64) -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    Processor::new(
        engine,
        Arc::new(Metrics::new()),
        ProcessorOptions { reorder_window_us: window_us, clock, ..ProcessorOptions::default() },
    )
}

/// Feeds one event as the ingest tier routes it among `n` partitions (a state-only copy
/// silent), releasing what the reorder buffer holds after each message; returns what was
/// emitted.
fn feed(p: &mut Processor, ev: &str, n: i32) -> Vec<Enriched> {
    feed_at(p, ev, n, 0, true)
}

/// [`feed`], received at `at_us` on the arrival clock; the reorder buffer is flushed after
/// each message only when `flush`.
fn feed_at(p: &mut Processor, ev: &str, n: i32, at_us: i64, flush: bool) -> Vec<Enriched> {
    let decoder = p.decoder();
    let routed =
        crate::route::route_body(ev.as_bytes(), &crate::decode::DecodeOptions::default(), None, &Default::default(), n);
    let mut out = Vec::new();
    for m in &routed.messages {
        let mut decoded = Decoded::default();
        decoder.decode(None, &ev.as_bytes()[m.range.clone()], crate::decode::Unwrap::None, "test", &mut decoded);
        decoder.partition_from(&mut decoded, 0, m.partition);
        if m.copy == crate::route::Copy::State {
            decoded.silence_from(0);
        }
        p.ingest_decoded(decoded, at_us, at_us, &mut out);
        if flush {
            p.flush(at_us, &mut out);
        }
    }
    out
}

/// Delivers trace messages to their partitions, as the input topic would.
fn deliver(p: &mut Processor, forwards: &[Forward]) {
    for f in forwards {
        let out = deliver_at(p, f, 0, true);
        assert!(out.is_empty(), "a trace message emits nothing: {out:?}");
    }
}

/// Delivers one trace message, received at `at_us` on the arrival clock (the reorder buffer
/// flushed after it when `flush`); returns what was emitted.
fn deliver_at(p: &mut Processor, f: &Forward, at_us: i64, flush: bool) -> Vec<Enriched> {
    let mut decoded = Decoded::default();
    p.decoder().decode_trace(&f.value, "kafka", &mut decoded);
    p.decoder().partition_from(&mut decoded, 0, f.partition);
    let mut out = Vec::new();
    p.ingest_decoded(decoded, at_us, at_us, &mut out);
    if flush {
        p.flush(at_us, &mut out);
    }
    out
}

/// The (kind, name, user) of each hop of an output's trace, root first.
fn hops(e: &Enriched) -> Vec<(String, String, Option<String>)> {
    e.trace.iter().map(|h| (h.kind.to_string(), h.name.to_string(), h.user.as_deref().map(str::to_string))).collect()
}

fn hop(kind: &str, name: &str, user: &str) -> (String, String, Option<String>) {
    (kind.to_string(), name.to_string(), Some(user.to_string()))
}

fn count(p: &Processor, c: Completion) -> u64 {
    p.metrics().trace_message_count(c)
}

fn part(uid: &str, n: i32) -> i32 {
    crate::route::partition_of(uid.as_bytes(), n)
}

/// Another tree first (Deployment, ReplicaSet, Pod): until a ReplicaSet has owned something
/// here, a ReplicaSet's trace is not sent. Its events, its Deployment and its ReplicaSet.
fn warm_up(api: &mut ApiServer) -> (Vec<String>, ObjRef, ObjRef) {
    let (d, ev_d) = api.create(ALICE, deployment("tools", "warm", 1, "warm:1"));
    let (rs, ev_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "0a0a", 1, "warm:1"));
    let (_, ev_pod) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "warm:1"));
    (vec![ev_d, ev_rs, ev_pod], d, rs)
}

/// Feeds the warm-up tree and drops what it sent.
fn feed_warm_up(p: &mut Processor, events: &[String], n: i32) {
    for ev in events {
        feed(p, ev, n);
    }
    p.engine().forwards.take();
}

#[test]
fn a_replicasets_trace_reaches_its_own_partition_and_its_later_pods_start_at_the_deployment() {
    // The whole stream first (its UIDs choose the partition count), then fed in steps.
    let mut api = ApiServer::new();
    let (warm, warm_deploy, warm_rs) = warm_up(&mut api);
    let (deploy, ev_deploy) = api.create(ALICE, deployment("shop", "web", 2, "web:1"));
    let (rs, ev_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    let (_, ev_pod_a) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    let (_, ev_pod_b) = api.create(REPLICASET_CONTROLLER, pod(&rs, "b", "web:1"));
    let ev_rollout =
        api.update(ALICE, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = "web:2".into());
    let (rs2, ev_rs2) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "7c9e", 1, "web:2"));
    let (_, ev_pod_c) = api.create(REPLICASET_CONTROLLER, pod(&rs2, "c", "web:2"));
    // Each ReplicaSet judged on its Deployment's partition, away from its own.
    let n = (2..64)
        .find(|&n| {
            part(&rs.uid, n) != part(&deploy.uid, n)
                && part(&rs2.uid, n) != part(&deploy.uid, n)
                && part(&warm_rs.uid, n) != part(&warm_deploy.uid, n)
        })
        .unwrap();

    let mut p = processor();
    p.engine().forwards.enable(n);
    // The first ReplicaSet, before any ReplicaSet owned something here: not sent.
    for ev in &warm[..2] {
        feed(&mut p, ev, n);
    }
    assert!(p.engine().forwards.take().is_empty(), "a kind not known to own anything yet");
    // Its Pod makes the kind an owner (its judged copy, or its state-only copy: both name it).
    feed_warm_up(&mut p, &warm[2..], n);
    for ev in [&ev_deploy, &ev_rs] {
        feed(&mut p, ev, n);
    }
    let sent = p.engine().forwards.take();
    assert_eq!(sent.len(), 1, "the ReplicaSet's write, judged on its Deployment's partition: {sent:?}");
    assert_eq!((sent[0].partition, sent[0].key.as_str()), (part(&rs.uid, n), rs.uid.as_str()));

    // A pod written before the message arrives: its trace starts at its ReplicaSet.
    let out = feed(&mut p, &ev_pod_a, n);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].class, Class::Initializing, "its ReplicaSet has not reported yet");
    assert_eq!(
        hops(&out[0]),
        vec![
            hop("ReplicaSet", &rs.name, DEPLOYMENT_CONTROLLER),
            hop("Pod", &out[0].object.name, REPLICASET_CONTROLLER)
        ]
    );
    // A Pod's is not sent: its kind owns nothing.
    assert!(p.engine().forwards.take().is_empty());

    // The message arrives (the ReplicaSet's own node, built for pod a, is built again on it).
    deliver(&mut p, &sent);
    assert_eq!(count(&p, Completion::Applied), 1);
    let out = feed(&mut p, &ev_pod_b, n);
    assert_eq!(
        hops(&out[0]),
        vec![
            hop("Deployment", "web", ALICE),
            hop("ReplicaSet", &rs.name, DEPLOYMENT_CONTROLLER),
            hop("Pod", &out[0].object.name, REPLICASET_CONTROLLER)
        ],
        "a pod written after the message: its trace runs from the person"
    );
    assert!(p.engine().forwards.take().is_empty(), "a Pod's trace is not sent");

    // The same message again (delivered twice, at-least-once): a duplicate, dropped.
    let dups = p.metrics().duplicates();
    deliver(&mut p, &sent);
    assert_eq!((p.metrics().duplicates() - dups, count(&p, Completion::Applied)), (1, 1));

    // A rollout: the person's new template, a new ReplicaSet whose message arrives before any
    // of its pods (its producing write is still kept as a write, not a built node).
    feed(&mut p, &ev_rollout, n);
    feed(&mut p, &ev_rs2, n);
    let sent2 = p.engine().forwards.take();
    assert_eq!(sent2.len(), 1, "{sent2:?}");
    deliver(&mut p, &sent2);
    assert_eq!(count(&p, Completion::Applied), 2);
    let out = feed(&mut p, &ev_pod_c, n);
    let trace = &out[0].trace;
    assert_eq!(
        hops(&out[0]),
        vec![
            hop("Deployment", "web", ALICE),
            hop("ReplicaSet", &rs2.name, DEPLOYMENT_CONTROLLER),
            hop("Pod", &out[0].object.name, REPLICASET_CONTROLLER)
        ]
    );
    assert_eq!(
        (trace[0].generation, trace[1].generation),
        (Some(2), Some(1)),
        "the Deployment's hop as of the rollout"
    );

    // The same trace as a single process keeping the whole cluster gives.
    let mut whole = processor();
    let mut last = Vec::new();
    for ev in warm.iter().chain([&ev_deploy, &ev_rs, &ev_pod_a, &ev_pod_b, &ev_rollout, &ev_rs2, &ev_pod_c]) {
        last = Vec::new();
        whole.ingest_body(None, ev.as_bytes(), "test", 0, &mut last);
        whole.flush(0, &mut last);
    }
    assert_eq!(serde_json::to_value(&last[0].trace).unwrap(), serde_json::to_value(trace).unwrap());
}

/// A trace message written by hand for the object `uid` of the partition `partition`.
fn message(p: &Processor, uid: Uid, user: &str, time_us: i64, partition: i32, prev_user: &str) -> Forward {
    let i = &p.engine().interner;
    let ty = i.ty(i.intern("apps/v1"), i.intern("Deployment"));
    let prev = trace::origin(trace::Hop {
        ty,
        name: crate::write::Name::from("web"),
        generation: std::num::NonZeroI64::new(1),
        user: Some(i.intern(prev_user)),
        timestamp: std::num::NonZeroI64::new(5),
        labels: None,
    });
    let value = encode_trace_message(
        i,
        "default",
        uid,
        &format!("audit-{user}-{time_us}-{prev_user}"),
        i.intern(user),
        time_us,
        &prev,
    );
    Forward { partition, key: format!("{uid:x}"), value }
}

#[test]
fn a_message_that_does_not_match_the_state_leaves_it_as_it_is() {
    let mut api = ApiServer::new();
    let (warm, _, _) = warm_up(&mut api);
    let (deploy, ev_deploy) = api.create(ALICE, deployment("shop", "web", 1, "web:1"));
    let (rs, ev_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 1, "web:1"));
    let (pod_a, ev_pod) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    let ev_scale = api.scale(ALICE, &rs, 3);
    let n = (2..64).find(|&n| part(&rs.uid, n) != part(&deploy.uid, n)).unwrap();
    let own = part(&rs.uid, n);
    let mut p = processor();
    p.engine().forwards.enable(n);
    feed_warm_up(&mut p, &warm, n);
    for ev in [&ev_deploy, &ev_rs, &ev_pod] {
        feed(&mut p, ev, n);
    }
    let sent = p.engine().forwards.take();
    let rs_uid = crate::write::uid_key(&rs.uid);
    let time_us = {
        let scope = p.engine().interner.lookup(&format!("default#p{own}")).unwrap();
        p.engine().store.read(&ObjKey::new(scope, rs_uid), |s| s.trace_parts().2).unwrap()
    };

    // Another user, or another time, than the producing write the state holds: stale.
    let (other_user, other_time) = (
        message(&p, rs_uid, "someone-else", time_us, own, "x"),
        message(&p, rs_uid, DEPLOYMENT_CONTROLLER, time_us + 1, own, "x"),
    );
    deliver(&mut p, &[other_user, other_time]);
    assert_eq!(count(&p, Completion::Stale), 2);
    // A Pod's (a kind that owns nothing; sent by another build, say): a leaf, not kept.
    let pod_uid = crate::write::uid_key(&pod_a.uid);
    let pod_time = {
        let scope = p.engine().interner.lookup(&format!("default#p{}", part(&pod_a.uid, n))).unwrap();
        p.engine().store.read(&ObjKey::new(scope, pod_uid), |s| s.trace_parts().2).unwrap()
    };
    let leaf = message(&p, pod_uid, REPLICASET_CONTROLLER, pod_time, part(&pod_a.uid, n), "x");
    deliver(&mut p, &[leaf]);
    assert_eq!(count(&p, Completion::Leaf), 1);
    // An object this partition does not hold: unknown.
    let not_held = message(&p, 0xdead_beef, DEPLOYMENT_CONTROLLER, time_us, own, "x");
    deliver(&mut p, &[not_held]);
    assert_eq!(count(&p, Completion::Unknown), 1);
    // The matching one: applied; a second message with the same hops: already.
    let rs_message = sent.iter().find(|f| f.key == rs.uid).cloned().expect("the ReplicaSet's message");
    deliver(&mut p, &[rs_message]);
    assert_eq!(count(&p, Completion::Applied), 1);
    let hand_made = message(&p, rs_uid, DEPLOYMENT_CONTROLLER, time_us, own, ALICE);
    deliver(&mut p, std::slice::from_ref(&hand_made));
    assert_eq!(count(&p, Completion::Applied), 2, "other hops (a hand-made Deployment hop): applied");
    // The same hops under another auditID (not a duplicate): nothing to change.
    let same_hops = {
        let i = &p.engine().interner;
        let prev = crate::state::RecordReader::new(i).read_trace_message(&hand_made.value).unwrap().prev;
        encode_trace_message(i, "default", rs_uid, "another-audit-id", i.intern(DEPLOYMENT_CONTROLLER), time_us, &prev)
    };
    deliver(&mut p, &[Forward { value: same_hops, ..hand_made }]);
    assert_eq!(count(&p, Completion::Already), 1);

    // A person scales the ReplicaSet on its own partition: the state's producing write is now
    // hers, and a message about the controller's write is stale.
    feed(&mut p, &ev_scale, n);
    let late = message(&p, rs_uid, DEPLOYMENT_CONTROLLER, time_us, own, "late");
    deliver(&mut p, &[late]);
    assert_eq!(count(&p, Completion::Stale), 3);

    // A message that cannot be read is counted invalid, and the messages around it still apply.
    let invalid_before = p.metrics().invalid_count(crate::decode::InvalidReason::NotAuditEvent);
    let mut decoded = Decoded::default();
    p.decoder().decode_trace(b"t\x05not a message", "kafka", &mut decoded);
    p.decoder().decode_trace(&[], "kafka", &mut decoded);
    let mut out = Vec::new();
    p.ingest_decoded(decoded, 0, 0, &mut out);
    assert_eq!(p.metrics().invalid_count(crate::decode::InvalidReason::NotAuditEvent) - invalid_before, 2);
}

#[test]
fn nothing_is_sent_within_one_partition_for_a_silent_copy_or_without_a_changelog() {
    let mut api = ApiServer::new();
    let (warm, _, _) = warm_up(&mut api);
    let (deploy, ev_deploy) = api.create(ALICE, deployment("shop", "web", 1, "web:1"));
    let (rs, ev_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 1, "web:1"));
    // The partition count that does send (the ReplicaSet judged away from its own partition).
    let apart = (2..64).find(|&n| part(&rs.uid, n) != part(&deploy.uid, n)).unwrap();
    let mut p = processor();
    p.engine().forwards.enable(apart);
    feed_warm_up(&mut p, &warm, apart);
    for ev in [&ev_deploy, &ev_rs] {
        feed(&mut p, ev, apart);
    }
    assert_eq!(p.engine().forwards.take().len(), 1, "the case that sends");
    // One partition: every object's own partition is the judged one.
    let mut p = processor();
    p.engine().forwards.enable(1);
    feed_warm_up(&mut p, &warm, 1);
    for ev in [&ev_deploy, &ev_rs] {
        feed(&mut p, ev, 1);
    }
    assert!(p.engine().forwards.take().is_empty());
    // Not enabled (no changelog): nothing queued, whatever the partitions.
    let mut p = processor();
    feed_warm_up(&mut p, &warm, apart);
    for ev in [&ev_deploy, &ev_rs] {
        feed(&mut p, ev, apart);
    }
    assert!(p.engine().forwards.take().is_empty());
    // Not by partition at all (a single process): nothing.
    let mut p = processor();
    p.engine().forwards.enable(apart);
    for ev in warm.iter().chain([&ev_deploy, &ev_rs]) {
        let mut out = Vec::new();
        p.ingest_body(None, ev.as_bytes(), "test", 0, &mut out);
        p.flush(0, &mut out);
    }
    assert!(p.engine().forwards.take().is_empty());
}

#[test]
fn a_failed_write_puts_its_messages_back_before_the_new_ones() {
    let f = Forwards::default();
    let m = |k: &str| Forward { partition: 1, key: k.to_string(), value: vec![1] };
    f.push(m("a"));
    let taken = f.take();
    f.push(m("b"));
    f.put_back(taken);
    assert_eq!(f.take().iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    assert!(f.take().is_empty());
}

/// A trace message waits in the reorder buffer like any message, but after everything seen:
/// it completes a write applied already and is not itself a write of the cluster. A write
/// that arrives late meanwhile (a higher resourceVersion was released before it came) is
/// applied at once and flagged late, as without the message; it does not wait among writes
/// placed by their time (where the old time of the message's write would put it).
#[test]
fn a_trace_message_held_in_the_reorder_buffer_does_not_hold_a_late_write_back() {
    let mut api = ApiServer::new();
    let (deploy, ev_deploy) = api.create(ALICE, deployment("shop", "web", 2, "web:1"));
    let (rs, ev_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    let (pod_a, ev_pod_a) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    let (pod_b, ev_pod_b) = api.create(REPLICASET_CONTROLLER, pod(&rs, "b", "web:1"));
    let second = 1_000_000;
    let mut p = processor_on(Clock::Arrival, second);
    // Pod b (the later resourceVersion) is released before pod a comes.
    for ev in [&ev_deploy, &ev_rs, &ev_pod_b] {
        feed_at(&mut p, ev, 1, 0, false);
    }
    let mut out = Vec::new();
    p.tick(2 * second, &mut out);
    let names: Vec<String> = out.iter().map(|e| e.object.name.to_string()).collect();
    assert!(names.contains(&pod_b.name) && !names.contains(&pod_a.name), "{names:?}");
    assert_eq!(p.held(), 0);

    // A trace message about the ReplicaSet's write, received at 3 s: held for its window.
    let rs_uid = crate::write::uid_key(&rs.uid);
    let time_us = {
        let scope = p.engine().interner.lookup("default#p0").unwrap();
        p.engine().store.read(&ObjKey::new(scope, rs_uid), |s| s.trace_parts().2).unwrap()
    };
    let trace = message(&p, rs_uid, DEPLOYMENT_CONTROLLER, time_us, 0, ALICE);
    assert!(deliver_at(&mut p, &trace, 3 * second, false).is_empty());
    assert_eq!(p.held(), 1, "the message waits for its window");

    // Pod a, late: out at once, flagged, while the message still waits.
    let out = feed_at(&mut p, &ev_pod_a, 1, 3 * second + 100_000, false);
    assert_eq!(
        out.iter().map(|e| (e.object.name.to_string(), e.late)).collect::<Vec<_>>(),
        vec![(pod_a.name.clone(), true)]
    );
    assert_eq!((p.held(), p.metrics().late_writes()), (1, 1));

    // The message, once its window is over: applied, not counted late.
    let mut out = Vec::new();
    p.tick(5 * second, &mut out);
    assert_eq!((out.len(), p.held(), count(&p, Completion::Applied), p.metrics().late_writes()), (0, 0, 1, 1));
}
