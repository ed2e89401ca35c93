//! Ordering and delivery invariants, as properties: any permutation of a stream within the
//! reorder window gives the same output; duplicates change nothing; batches from two API
//! servers interleaved in any way give the same classes as one server in order.

mod common;

use common::{classes, processor, run};
use kausality_stream::decode::time::format_rfc3339_micros;
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::sim::*;
use proptest::prelude::*;
use serde_json::json;

/// A stream exercising most rules: rollout, image change (and a no-op re-apply of it), hand
/// edits, drift, HPA scaling, pod deletion and replacement, approvals, deletion. Events are
/// 1 ms apart.
fn stream() -> Vec<String> {
    let mut api = ApiServer::new();
    let mut ev = Vec::new();
    let (d, e) = api.create(ADMIN, deployment("a", "web", 2, "web:1"));
    ev.push(e);
    let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h1", 2, "web:1"));
    ev.push(e);
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "False")]));
    let (p1, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    ev.push(e);
    let (_, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, "b", "web:1"));
    ev.push(e);
    ev.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
    ev.push(api.update("alice", &rs, |r| r["spec"]["replicas"] = json!(4)));
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(2)));
    ev.push(api.delete("bob", &p1, &[]));
    let (_, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, "c", "web:1"));
    ev.push(e);
    ev.push(api.scale(HPA, &d, 3));
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3)));
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
    ev.push(api.update(ADMIN, &d, |x| x["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")));
    // A GitOps tool applies the same manifest again: a no-op update answered with the
    // resourceVersion the admin's update made. Arriving first, it must not take the change.
    ev.push(api.update("argocd", &d, |x| x["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")));
    let (rs2, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h2", 1, "web:2"));
    ev.push(e);
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(2)));
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
    let (_, e) = api.create(REPLICASET_CONTROLLER, pod(&rs2, "x", "web:2"));
    ev.push(e);
    ev.push(api.update(DEPLOYMENT_CONTROLLER, &rs2, |r| r["spec"]["replicas"] = json!(3)));
    ev.push(api.delete(ADMIN, &d, &[]));
    ev.push(api.delete(GARBAGE_COLLECTOR, &rs, &[]));
    ev.push(api.delete(GARBAGE_COLLECTOR, &rs2, &[]));
    ev
}

fn json_lines(out: &[Enriched]) -> Vec<String> {
    out.iter().map(|e| serde_json::to_string(e).unwrap()).collect()
}

#[test]
fn the_reference_stream_covers_many_classes() {
    let out = run(&stream());
    let mut seen: Vec<&str> = out.iter().map(|e| e.class.as_str()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["deleting", "drift", "expected", "initializing", "origin", "unowned"]);
    assert!(out.iter().all(|e| !e.late));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The whole stream spans less than the window: every arrival order gives the same output.
    #[test]
    fn any_permutation_within_the_window_gives_the_same_output(order in Just((0..stream().len()).collect::<Vec<usize>>()).prop_shuffle()) {
        let s = stream();
        let reference = json_lines(&run(&s));
        let shuffled: Vec<String> = order.iter().map(|&i| s[i].clone()).collect();
        prop_assert_eq!(json_lines(&run(&shuffled)), reference);
    }

    /// At-least-once delivery: any events delivered again, anywhere later within the window,
    /// change nothing.
    #[test]
    fn duplicates_change_nothing(dups in proptest::collection::vec((0usize..24, 0usize..24), 0..30)) {
        let s = stream();
        let reference = json_lines(&run(&s));
        let mut with_dups = s.clone();
        for (what, at) in dups {
            let what = what % s.len();
            let at = (at % with_dups.len()).max(1);
            with_dups.insert(at, s[what].clone());
        }
        prop_assert_eq!(json_lines(&run(&with_dups)), reference);
    }

    /// Two API servers each deliver their own events as EventList batches; the batches arrive
    /// interleaved in any order: the classes are those of the ordered stream.
    #[test]
    fn two_api_servers_in_any_batch_order(split in proptest::collection::vec(any::<bool>(), 24), batch in 1usize..6, order in any::<u64>()) {
        let s = stream();
        let reference = classes(&run(&s));
        let (a, b): (Vec<_>, Vec<_>) = s.iter().zip(split.iter().cycle()).partition(|(_, &x)| x);
        let batches = |evs: Vec<(&String, &bool)>| -> Vec<String> {
            evs.chunks(batch).map(|c| format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}]}}"#,
                c.iter().map(|(e, _)| e.as_str()).collect::<Vec<_>>().join(","))).collect()
        };
        let (mut ba, mut bb) = (batches(a), batches(b));
        let mut bodies = Vec::new();
        let mut bits = order;
        while !ba.is_empty() || !bb.is_empty() {
            let take_a = bb.is_empty() || (!ba.is_empty() && bits & 1 == 1);
            bits = bits.rotate_right(1);
            bodies.push(if take_a { ba.remove(0) } else { bb.remove(0) });
        }
        let mut p = processor(Default::default(), 500_000);
        let mut out = Vec::new();
        for body in &bodies {
            p.ingest_body(None, body.as_bytes(), "webhook", 0, &mut out);
        }
        p.flush(0, &mut out);
        prop_assert_eq!(classes(&out), reference);
    }

    /// A longer stream (10 ms apart, 500 ms window) whose events arrive up to 400 ms of event
    /// time out of place: still the same output, nothing late.
    #[test]
    fn bounded_displacement_on_a_long_stream(jitter in proptest::collection::vec(0i64..40, 96)) {
        let mut api = ApiServer::new();
        let mut evs = Vec::new();
        let (d, e) = api.create(ADMIN, deployment("b", "api", 1, "api:1"));
        evs.push(e);
        let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h", 1, "api:1"));
        evs.push(e);
        api.advance_ms(9);
        evs.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
        for i in 0..93 {
            api.advance_ms(9);
            let who = if i % 3 == 0 { "carol" } else { DEPLOYMENT_CONTROLLER };
            evs.push(api.update(who, &rs, |r| r["spec"]["replicas"] = json!(i + 2)));
        }
        let reference = json_lines(&run(&evs));
        let mut keyed: Vec<(i64, usize)> = jitter.iter().enumerate().map(|(i, j)| (i as i64 * 10 + j * 10, i)).collect();
        keyed.sort();
        let shuffled: Vec<String> = keyed.iter().map(|&(_, i)| evs[i].clone()).collect();
        let mut p = processor(Default::default(), 500_000);
        let mut out = Vec::new();
        for (i, ev) in shuffled.iter().enumerate() {
            p.ingest_document(None, ev.as_bytes(), Location::Line(i + 1), "test", 0, &mut out);
        }
        p.flush(0, &mut out);
        prop_assert!(out.iter().all(|e| !e.late));
        prop_assert_eq!(json_lines(&out), reference);
    }
}

#[test]
fn an_event_later_than_the_window_is_applied_and_flagged_late() {
    let mut api = ApiServer::new();
    let (d, e1) = api.create(ADMIN, deployment("c", "x", 1, "x:1"));
    let e2 = api.update(ADMIN, &d, |x| x["spec"]["replicas"] = json!(2));
    api.advance_ms(2_000);
    let e3 = api.update(ADMIN, &d, |x| x["spec"]["replicas"] = json!(3));
    api.advance_ms(2_000);
    let e4 = api.update(ADMIN, &d, |x| x["spec"]["replicas"] = json!(4));
    // e2 arrives last, after e4 moved the clock on and e3 (a higher resourceVersion) was applied.
    let out = run(&[e1, e3, e4, e2.clone()]);
    let late: Vec<bool> = out.iter().map(|e| e.late).collect();
    assert_eq!(late, [false, false, true, false]);
    assert_eq!(common::audit_id(&e2), &*out[2].audit_id);
}

/// On the arrival clock (`serve`), a write's reorder window starts when its source received
/// it, not when the processor takes it in after decoding: a body decoded for 60 ms is held
/// 40 ms more, and one that waited past its window is released as it is taken in.
#[test]
fn the_window_runs_from_when_the_body_was_received() {
    use kausality_stream::classify::{Engine, EngineOptions};
    use kausality_stream::process::{Clock, Decoded, Processor, ProcessorOptions};
    use std::sync::Arc;

    const WINDOW: i64 = 100_000;
    const T: i64 = 1_700_000_000_000_000;
    let events = stream();
    let body = events[..2].join("\n");
    let take_in = |received: i64, now: i64| {
        let engine = Arc::new(Engine::new(Default::default(), EngineOptions::default()));
        let opts = ProcessorOptions { reorder_window_us: WINDOW, clock: Clock::Arrival, ..ProcessorOptions::default() };
        let mut p = Processor::new(engine, Default::default(), opts);
        let decoder = p.decoder();
        let mut decoded = Decoded::default();
        decoder.decode(None, body.as_bytes(), decoder.unwrap(), "test", &mut decoded);
        let mut out = Vec::new();
        let report = p.ingest_decoded(decoded, received, now, &mut out);
        assert_eq!(report.events, 2);
        (p, out)
    };

    // Taken in as received: held for the whole window.
    let (mut p, mut out) = take_in(T, T);
    assert!(out.is_empty());
    p.tick(T + WINDOW - 1, &mut out);
    assert!(out.is_empty(), "released before its window was over");
    p.tick(T + WINDOW, &mut out);
    assert_eq!(classes(&out).len(), 2, "both writes released when the window is over");

    // Taken in 60 ms after it was received: released 100 ms after receipt, not 160.
    let (mut p, mut out) = take_in(T, T + 60_000);
    assert!(out.is_empty());
    assert_eq!(p.next_release_us(), Some(T + WINDOW));
    p.tick(T + WINDOW, &mut out);
    assert_eq!(classes(&out).len(), 2);

    // Taken in after its window: applied at once.
    let (_, out) = take_in(T, T + WINDOW + 5_000);
    assert_eq!(classes(&out).len(), 2);
}

/// A delete as the API server answers it when the object had no finalizers left: a `Status`
/// and no resourceVersion, with the request received at `received_us` and answered at
/// `stage_us`.
fn answered_with_status(delete: &str, received_us: i64, stage_us: i64) -> String {
    let mut ev: serde_json::Value = serde_json::from_str(delete).expect("an event");
    let obj = ev["responseObject"].take();
    let details = json!({"name": obj["metadata"]["name"], "group": "apps", "kind": ev["objectRef"]["resource"], "uid": obj["metadata"]["uid"]});
    ev["responseObject"] =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
    timed(&ev.to_string(), received_us, stage_us)
}

fn timed(event: &str, received_us: i64, stage_us: i64) -> String {
    let mut ev: serde_json::Value = serde_json::from_str(event).expect("an event");
    ev["requestReceivedTimestamp"] = json!(format_rfc3339_micros(received_us));
    ev["stageTimestamp"] = json!(format_rfc3339_micros(stage_us));
    ev.to_string()
}

/// Two API servers under load (docs/e2e.md, `dual-deletes`): the admin's background delete of
/// a Deployment and the garbage collector's delete of its ReplicaSet are both answered with a
/// `Status`. The collector's request came after the admin's (it reacts to it), but its response
/// completed first, as did the collector's delete of a pod (which has a resourceVersion), and
/// the collector's API server sent its batch first. Ordered by when each request came, the
/// owner's delete goes first and both of the collector's deletes are teardown; ordered by
/// stageTimestamp, the ReplicaSet's delete read as a new origin.
#[test]
fn an_owners_delete_goes_before_its_dependents_by_when_each_request_came() {
    let mut api = ApiServer::new();
    let mut ev = Vec::new();
    let (d, e) = api.create(ADMIN, deployment("a", "web", 1, "web:1"));
    ev.push(e);
    let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "h1", 1, "web:1"));
    ev.push(e);
    let (p, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    ev.push(e);
    ev.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    ev.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
    api.advance_ms(100);
    let t = api.now_us();
    let delete_deployment = answered_with_status(&api.delete(ADMIN, &d, &[]), t, t + 40_000);
    let delete_rs = answered_with_status(&api.delete(GARBAGE_COLLECTOR, &rs, &[]), t + 5_000, t + 10_000);
    let delete_pod = timed(&api.delete(GARBAGE_COLLECTOR, &p, &[]), t + 12_000, t + 15_000);
    // The collector's batch first, then the admin's.
    let mut arrived = ev.clone();
    arrived.extend([delete_rs.clone(), delete_pod.clone(), delete_deployment.clone()]);
    let out = common::run_with(Default::default(), &arrived);
    assert_eq!(common::class_of(&out, &delete_deployment), kausality_stream::classify::Class::Unowned);
    assert_eq!(common::class_of(&out, &delete_rs), kausality_stream::classify::Class::Deleting, "{:?}", classes(&out));
    assert_eq!(common::class_of(&out, &delete_pod), kausality_stream::classify::Class::Deleting);
    // In any order of arrival within the window, the same.
    let mut reversed = ev;
    reversed.extend([delete_deployment.clone(), delete_pod.clone(), delete_rs.clone()]);
    assert_eq!(classes(&common::run_with(Default::default(), &reversed)), classes(&out));
}
