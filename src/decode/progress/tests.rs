//! Each signal of DESIGN §1.3, field by field, present and absent, reason by reason.

use serde_json::{json, Value};

use super::in_progress;
use crate::config::progress::{Builtin, Comparison, ConditionReason, KindProgress};
use crate::decode::{ObjectView, StatusView};

fn builtin(b: Builtin) -> KindProgress {
    KindProgress { builtin: Some(b), ..KindProgress::default() }
}

/// Whether `obj` (spec and status) shows work in progress for `p`.
fn shows(p: &KindProgress, obj: &Value) -> bool {
    let text = obj.to_string();
    let view: ObjectView = serde_json::from_str(&text).expect("object");
    let status = StatusView::parse(view.status);
    in_progress(p, &view, &status)
}

fn with(replicas: Option<i64>, status: Value) -> Value {
    let spec = match replicas {
        Some(r) => json!({"replicas": r, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
        None => json!({"template": {}}),
    };
    json!({"spec": spec, "status": status})
}

#[test]
fn deployment_progressing_reasons_under_way_and_done() {
    let d = builtin(Builtin::Deployment);
    let cond = |reason: &str| {
        with(
            Some(3),
            json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "True", "reason": reason}]}),
        )
    };
    for reason in ["NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"] {
        assert!(shows(&d, &cond(reason)), "{reason} is a rollout under way");
    }
    for reason in ["NewReplicaSetAvailable", "ProgressDeadlineExceeded", "DeploymentPaused"] {
        assert!(!shows(&d, &cond(reason)), "{reason} is not");
    }
    let other_type =
        with(Some(3), json!({"conditions": [{"type": "Available", "status": "True", "reason": "ReplicaSetUpdated"}]}));
    assert!(!shows(&d, &other_type), "only the Progressing condition's reason counts");
    let no_reason = with(Some(3), json!({"conditions": [{"type": "Progressing", "status": "True"}]}));
    assert!(!shows(&d, &no_reason));
}

#[test]
fn deployment_counters_against_the_desired_replicas() {
    let d = builtin(Builtin::Deployment);
    let done = json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3});
    assert!(!shows(&d, &with(Some(3), done.clone())));
    for field in ["updatedReplicas", "availableReplicas", "replicas"] {
        let mut st = done.clone();
        st[field] = json!(2);
        assert!(shows(&d, &with(Some(3), st.clone())), "{field} below the desired replicas");
        st[field] = json!(4);
        assert!(shows(&d, &with(Some(3), st.clone())), "{field} above (a surge)");
        st.as_object_mut().unwrap().remove(field);
        if field == "replicas" {
            assert!(!shows(&d, &with(Some(3), st)), "without the count of replicas an absent counter shows nothing");
        } else {
            assert!(shows(&d, &with(Some(3), st)), "{field} absent beside replicas reads as 0");
        }
    }
    assert!(!shows(&d, &with(Some(3), json!({"readyReplicas": 1}))), "readyReplicas is not a Deployment signal");
    assert!(!shows(&d, &with(Some(3), json!({"observedGeneration": 1}))), "a status without counters shows nothing");
    // spec.replicas left out: Kubernetes defaults it to 1.
    assert!(!shows(&d, &with(None, json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}))));
    assert!(shows(&d, &with(None, json!({"replicas": 2, "updatedReplicas": 1, "availableReplicas": 1}))));
    // Scaled to 0: the counters are left out when they reach 0.
    assert!(!shows(&d, &with(Some(0), json!({"observedGeneration": 3}))));
    assert!(shows(&d, &with(Some(0), json!({"replicas": 1}))));
    assert!(!shows(&d, &json!({"status": {"replicas": 1}})), "no spec: no desired replicas");
    assert!(!shows(&d, &with(Some(3), json!("odd"))), "a status of another shape shows nothing");
}

#[test]
fn deployment_counters_left_out_beside_replicas_are_0() {
    let d = builtin(Builtin::Deployment);
    let done = |reason: &str| json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": reason}]);
    // The first report of a rollback of 12: no replica of the new ReplicaSet yet, so
    // `updatedReplicas` (0) is left out, and the reason of the rollout before is kept.
    let rollback = json!({"observedGeneration": 3, "replicas": 12, "readyReplicas": 12, "availableReplicas": 12, "unavailableReplicas": 3,
                          "conditions": done("NewReplicaSetAvailable")});
    assert!(shows(&d, &with(Some(12), rollback)), "0 of 12 updated");
    let none_available = json!({"replicas": 3, "updatedReplicas": 3, "unavailableReplicas": 3, "conditions": done("NewReplicaSetAvailable")});
    assert!(shows(&d, &with(Some(3), none_available)), "0 of 3 available");
    // Without `replicas` the rule before holds: what is left out shows nothing.
    assert!(!shows(&d, &with(Some(3), json!({"updatedReplicas": 3, "availableReplicas": 3}))));
    assert!(!shows(&d, &with(Some(3), json!({"observedGeneration": 1, "conditions": done("NewReplicaSetAvailable")}))));
    // Scaled to 0: `replicas` is 0 and left out with every counter; or written as 0.
    assert!(!shows(&d, &with(Some(0), json!({"observedGeneration": 4, "conditions": done("NewReplicaSetAvailable")}))));
    assert!(!shows(&d, &with(Some(0), json!({"replicas": 0}))));
}

#[test]
fn a_paused_deployment_asks_for_no_progress() {
    let d = builtin(Builtin::Deployment);
    // Paused halfway through a rollout: one of 3 updated, a surge pod up.
    let halfway = json!({"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 4, "availableReplicas": 4,
                         "conditions": [{"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused"}]});
    let spec = |paused: Value| json!({"replicas": 3, "paused": paused, "template": {}});
    assert!(!shows(&d, &json!({"spec": spec(json!(true)), "status": halfway})));
    assert!(shows(&d, &json!({"spec": spec(json!(false)), "status": halfway})));
    assert!(shows(&d, &json!({"spec": spec(json!("true")), "status": halfway})), "only the boolean true pauses");
    let under_way = json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3,
                           "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]});
    assert!(!shows(&d, &json!({"spec": spec(json!(true)), "status": under_way})), "paused: no signal at all");
}

#[test]
fn a_paused_key_is_read_however_the_text_spells_it() {
    let d = builtin(Builtin::Deployment);
    let halfway = r#"{"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "availableReplicas": 4}"#;
    let shows_text = |spec: &str| {
        let text = format!(r#"{{"spec": {spec}, "status": {halfway}}}"#);
        let view: ObjectView = serde_json::from_str(&text).expect("object");
        in_progress(&d, &view, &StatusView::parse(view.status))
    };
    assert!(!shows_text(r#"{"replicas": 3, "paused": true}"#));
    // An escaped key is the same key.
    assert!(!shows_text(r#"{"replicas": 3, "pa\u0075sed": true}"#));
    // The word as a value, or inside a longer key, is no `paused` key.
    assert!(shows_text(
        r#"{"replicas": 3, "template": {"metadata": {"labels": {"state": "paused", "unpaused": "true"}}}}"#
    ));
    assert!(shows_text(r#"{"replicas": 3, "xpaused": true, "pausedx": true}"#));
}

#[test]
fn a_partitioned_statefulset_finishes_as_far_as_its_partition() {
    let s = builtin(Builtin::StatefulSet);
    let obj = |replicas: i64, partition: Value, status: Value| {
        json!({"spec": {"replicas": replicas, "template": {}, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}},
               "status": status})
    };
    let rev = |st: Value| {
        let mut st = st;
        st["currentRevision"] = json!("db-7c9f8d6b5");
        st["updateRevision"] = json!("db-5b8d7f9c4");
        st
    };
    // Partition 2 of 3: ordinal 2 updated, all ready; currentRevision stays behind.
    let canary = rev(
        json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 2, "updatedReplicas": 1, "availableReplicas": 3}),
    );
    assert!(!shows(&s, &obj(3, json!(2), canary.clone())));
    assert!(shows(&s, &obj(3, json!(0), canary.clone())), "without a partition the revisions must meet");
    assert!(shows(&s, &obj(3, json!(1), canary.clone())), "partition 1 asks for 2 updated");
    assert!(shows(&s, &obj(3, json!("2"), canary.clone())), "a partition that is not a number is 0");
    let no_partition = json!({"spec": {"replicas": 3, "template": {}}, "status": canary});
    assert!(shows(&s, &no_partition), "no partition: the rule before");
    // `updatedReplicas` left out beside replicas is 0: not yet as far as the partition asks.
    let started = rev(json!({"replicas": 3, "readyReplicas": 2, "currentReplicas": 2, "availableReplicas": 2}));
    assert!(shows(&s, &obj(3, json!(2), started)));
    let not_ready = rev(
        json!({"replicas": 3, "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 1, "availableReplicas": 2}),
    );
    assert!(shows(&s, &obj(3, json!(2), not_ready)), "the ready counts must still be met");
    // A partition at or above the desired replicas asks for no pod to move (floor 0).
    let none_updated = rev(json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "availableReplicas": 3}));
    assert!(!shows(&s, &obj(3, json!(3), none_updated.clone())));
    assert!(!shows(&s, &obj(3, json!(5), none_updated)));
    // More updated than the partition asks (a StatefulSet created with a partition): finished.
    let all =
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "currentRevision": "a", "updateRevision": "a"});
    assert!(!shows(&s, &obj(3, json!(2), all.clone())));
    assert!(shows(&s, &obj(2, json!(1), all)), "a scale-down under way");
}

#[test]
fn an_on_delete_statefulset_asks_no_pod_to_move() {
    let s = builtin(Builtin::StatefulSet);
    let obj = |strategy: Value, status: Value| json!({"spec": {"replicas": 3, "template": {}, "updateStrategy": strategy}, "status": status});
    // A new template observed: the revisions apart, no pod updated, all ready.
    let observed = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "availableReplicas": 3, "currentRevision": "a", "updateRevision": "b"});
    assert!(!shows(&s, &obj(json!({"type": "OnDelete"}), observed.clone())), "OnDelete: finished when observed");
    assert!(
        shows(&s, &obj(json!({"type": "RollingUpdate"}), observed.clone())),
        "RollingUpdate: the revisions must meet"
    );
    // One pod deleted and recreated at the update revision: still nothing more asked.
    let one = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 2, "updatedReplicas": 1, "availableReplicas": 3, "currentRevision": "a", "updateRevision": "b"});
    assert!(!shows(&s, &obj(json!({"type": "OnDelete"}), one)));
    // The ready counts still count.
    let short = json!({"replicas": 3, "readyReplicas": 2, "currentReplicas": 3, "availableReplicas": 2, "currentRevision": "a", "updateRevision": "b"});
    assert!(shows(&s, &obj(json!({"type": "OnDelete"}), short)));
}

#[test]
fn statefulset_revisions_and_counters() {
    let s = builtin(Builtin::StatefulSet);
    let done = json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "currentReplicas": 3, "availableReplicas": 3,
                      "currentRevision": "web-6d4b", "updateRevision": "web-6d4b"});
    assert!(!shows(&s, &with(Some(3), done.clone())));
    let mut rolling = done.clone();
    rolling["updateRevision"] = json!("web-77c9");
    assert!(shows(&s, &with(Some(3), rolling.clone())), "currentRevision != updateRevision");
    rolling.as_object_mut().unwrap().remove("currentRevision");
    assert!(!shows(&s, &with(Some(3), rolling)), "one revision absent: they cannot be compared");
    for field in ["updatedReplicas", "readyReplicas", "replicas"] {
        let mut st = done.clone();
        st[field] = json!(2);
        assert!(shows(&s, &with(Some(3), st)), "{field} other than the desired replicas");
    }
    assert!(
        !shows(
            &s,
            &with(Some(3), json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "availableReplicas": 1}))
        ),
        "availableReplicas is not one"
    );
    // `replicas` is always written: a counter left out is 0 (omitempty).
    for field in ["updatedReplicas", "readyReplicas"] {
        let mut st = done.clone();
        st.as_object_mut().unwrap().remove(field);
        assert!(shows(&s, &with(Some(3), st)), "{field} absent beside replicas reads as 0");
    }
    // Without `replicas` (a producer that does not write it), only what is there counts.
    assert!(!shows(&s, &with(Some(3), json!({"readyReplicas": 3}))));
    assert!(shows(&s, &with(Some(3), json!({"readyReplicas": 1}))));
    assert!(!shows(&s, &with(Some(3), json!({"observedGeneration": 1}))));
    // The first scale-up of a new StatefulSet: one pod of three so far.
    assert!(shows(&s, &with(Some(3), json!({"replicas": 1, "currentRevision": "a", "updateRevision": "a"}))));
    assert!(
        !shows(&s, &with(None, json!({"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}))),
        "spec.replicas defaults to 1"
    );
}

#[test]
fn daemonset_updated_and_available_below_desired() {
    let ds = builtin(Builtin::DaemonSet);
    let done = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "numberMisscheduled": 0,
                      "updatedNumberScheduled": 3, "numberAvailable": 3});
    let obj = |st: Value| json!({"spec": {"template": {}}, "status": st});
    assert!(!shows(&ds, &obj(done.clone())));
    for field in ["updatedNumberScheduled", "numberAvailable"] {
        let mut st = done.clone();
        st[field] = json!(2);
        assert!(shows(&ds, &obj(st.clone())), "{field} below desiredNumberScheduled");
        st[field] = json!(4);
        assert!(!shows(&ds, &obj(st.clone())), "{field} above is not below");
        st.as_object_mut().unwrap().remove(field);
        assert!(shows(&ds, &obj(st)), "{field} left out is 0 (omitempty): the start of a rolling update");
    }
    assert!(
        !shows(&ds, &obj(json!({"updatedNumberScheduled": 0, "numberAvailable": 0}))),
        "without desiredNumberScheduled nothing"
    );
    assert!(!shows(&ds, &obj(json!({"desiredNumberScheduled": 0}))), "nothing to schedule");
    assert!(
        !shows(
            &ds,
            &obj(
                json!({"numberReady": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3})
            )
        ),
        "numberReady is not one"
    );
}

#[test]
fn a_job_runs_from_its_start_until_it_reports_itself_over_and_a_cronjob_always_runs() {
    let job = builtin(Builtin::Job);
    let spec = json!({"completions": 3, "parallelism": 1});
    let of = |status: Value| json!({"spec": spec, "status": status});
    assert!(!shows(&job, &of(json!({"active": 0}))), "not started (suspended): nothing shows");
    assert!(shows(&job, &of(json!({"startTime": "2023-11-14T22:13:21Z", "active": 1}))));
    assert!(shows(
        &job,
        &of(
            json!({"startTime": "t", "succeeded": 3, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]})
        )
    ));
    for over in [
        json!({"startTime": "t", "completionTime": "t2", "succeeded": 3}),
        json!({"startTime": "t", "conditions": [{"type": "Complete", "status": "True"}]}),
        json!({"startTime": "t", "failed": 7, "conditions": [{"type": "Failed", "status": "True"}]}),
    ] {
        assert!(!shows(&job, &of(over.clone())), "{over}");
    }
    let cron = builtin(Builtin::CronJob);
    assert!(shows(&cron, &json!({"spec": {"schedule": "0 3 * * *"}, "status": {}})));
    assert!(shows(&cron, &json!({"spec": {"schedule": "0 3 * * *"}, "status": {"lastScheduleTime": "t"}})));
}

#[test]
fn replicaset_counters_against_the_desired_replicas() {
    let rs = builtin(Builtin::ReplicaSet);
    let done = json!({"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2, "observedGeneration": 1});
    assert!(!shows(&rs, &with(Some(2), done.clone())));
    for field in ["replicas", "readyReplicas", "availableReplicas"] {
        let mut st = done.clone();
        st[field] = json!(1);
        assert!(shows(&rs, &with(Some(2), st.clone())), "{field} below");
        st[field] = json!(3);
        assert!(shows(&rs, &with(Some(2), st)), "{field} above (a scale-down under way)");
    }
    let mut st = done.clone();
    st["fullyLabeledReplicas"] = json!(0);
    assert!(!shows(&rs, &with(Some(2), st)), "fullyLabeledReplicas is not one");
    // As the replicaset controller writes it after creating the pods: ready and available are 0
    // and left out.
    assert!(shows(&rs, &with(Some(2), json!({"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1}))));
    assert!(shows(&rs, &with(Some(2), json!({"replicas": 0, "observedGeneration": 1}))));
    // Scaled to 0 and done: every counter 0.
    assert!(!shows(&rs, &with(Some(0), json!({"replicas": 0, "observedGeneration": 3}))));
    // A status without replicas: only what is there counts.
    assert!(!shows(&rs, &with(Some(2), json!({"observedGeneration": 1}))));
    assert!(!shows(&rs, &with(Some(2), json!({"readyReplicas": 2}))));
    assert!(shows(&rs, &with(Some(2), json!({"availableReplicas": 1}))));
    assert!(
        !shows(&rs, &with(None, json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}))),
        "spec.replicas defaults to 1"
    );
    assert!(
        shows(
            &rs,
            &json!({"spec": {"replicas": null}, "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}})
        ),
        "null is the default 1"
    );
}

#[test]
fn configured_conditions_match_type_and_reason() {
    let p = KindProgress {
        conditions: vec![
            ConditionReason::parse("Synced=Reconciling").unwrap(),
            ConditionReason::parse("Ready=Creating").unwrap(),
        ],
        ..KindProgress::default()
    };
    let obj = |conds: Value| json!({"spec": {}, "status": {"conditions": conds}});
    assert!(shows(&p, &obj(json!([{"type": "Synced", "status": "True", "reason": "Reconciling"}]))));
    assert!(shows(
        &p,
        &obj(
            json!([{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}, {"type": "Ready", "status": "False", "reason": "Creating"}])
        )
    ));
    assert!(!shows(
        &p,
        &obj(
            json!([{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}, {"type": "Ready", "status": "True", "reason": "Available"}])
        )
    ));
    assert!(
        !shows(&p, &obj(json!([{"type": "Ready", "status": "False", "reason": "Reconciling"}]))),
        "the reason of another type"
    );
    assert!(!shows(&p, &obj(json!([{"type": "Synced", "status": "True"}]))), "no reason");
    assert!(!shows(&p, &obj(json!([{"type": "Synced", "reason": 5}]))), "a reason of another shape");
    assert!(!shows(&p, &json!({"spec": {}})), "no status");
}

#[test]
fn configured_comparisons_read_fields_numbers_strings_and_booleans() {
    let p = |c: &str| KindProgress { fields: vec![Comparison::parse(c).unwrap()], ..KindProgress::default() };
    let obj = json!({"spec": {"replicas": 3, "paused": false, "rollout": {"strategy": "canary"}},
                     "status": {"updated": 2, "phase": "Updating", "weight": 0.5, "nested": {"deep": {"count": 7}}}});
    let holds = |c: &str| shows(&p(c), &obj);
    assert!(holds("status.updated != spec.replicas"));
    assert!(holds("status.updated < spec.replicas"));
    assert!(!holds("status.updated >= spec.replicas"));
    assert!(holds("status.phase == Updating"));
    assert!(!holds("status.phase != Updating"));
    assert!(holds(r#"status.phase == "Updating""#));
    assert!(holds("status.weight < 1"));
    assert!(holds("status.nested.deep.count > 6"));
    assert!(holds("spec.rollout.strategy == canary"));
    assert!(holds("spec.paused == false"));
    // A string with escapes is read unescaped.
    let escaped = r#"{"spec": {}, "status": {"phase": "Up\u0064ating"}}"#;
    let view: ObjectView = serde_json::from_str(escaped).unwrap();
    assert!(in_progress(&p("status.phase == Updating"), &view, &StatusView::parse(view.status)));
    // An absent side, or sides of different types, never hold: absent shows nothing.
    assert!(!holds("status.missing != spec.replicas"));
    assert!(!holds("status.updated != spec.missing"));
    assert!(!holds("status.nested.missing.count > 0"));
    assert!(!holds("status.phase != 3"));
    assert!(!holds("status.updated == Updating"));
    assert!(!holds("status.nested != 1"), "an object is not a value");
    assert!(!shows(&p("status.updated != 1"), &json!({"spec": {}})), "no status");
}

#[test]
fn configured_paused_comparisons_hold_every_signal_back() {
    let cmp = |c: &str| Comparison::parse(c).unwrap();
    let p = KindProgress {
        builtin: Some(Builtin::Deployment),
        conditions: vec![ConditionReason::parse("Progressing=ReplicaSetUpdated").unwrap()],
        fields: vec![cmp("status.updatedReplicas < status.expectedUpdatedReplicas")],
        paused: vec![cmp("spec.updateStrategy.paused == true"), cmp("spec.suspend == true")],
    };
    let busy = json!({"replicas": 3, "updatedReplicas": 1, "expectedUpdatedReplicas": 2,
                      "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]});
    let obj = |spec: Value| json!({"spec": spec, "status": busy});
    assert!(shows(&p, &obj(json!({"replicas": 3}))));
    assert!(!shows(&p, &obj(json!({"replicas": 3, "updateStrategy": {"paused": true}}))), "paused: no signal holds");
    assert!(!shows(&p, &obj(json!({"replicas": 3, "suspend": true}))), "any one of them");
    assert!(shows(&p, &obj(json!({"replicas": 3, "suspend": false}))));
    assert!(shows(&p, &obj(json!({"replicas": 3, "suspend": "yes"}))), "a field of another type does not hold");
    // A lowered target that the controller reports in its status is compared as it is.
    let fields = KindProgress {
        fields: vec![cmp("status.updatedReplicas < status.expectedUpdatedReplicas")],
        ..KindProgress::default()
    };
    assert!(shows(&fields, &obj(json!({"replicas": 3}))));
    assert!(!shows(&fields, &json!({"spec": {}, "status": {"updatedReplicas": 2, "expectedUpdatedReplicas": 2}})));
}

#[test]
fn signals_of_a_kind_add_up() {
    let p = KindProgress {
        builtin: Some(Builtin::ReplicaSet),
        conditions: vec![ConditionReason::parse("Scaling=Waiting").unwrap()],
        fields: vec![Comparison::parse("status.phase == Busy").unwrap()],
        paused: Vec::new(),
    };
    let done = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1});
    assert!(!shows(&p, &with(Some(1), done.clone())));
    let mut st = done.clone();
    st["phase"] = json!("Busy");
    assert!(shows(&p, &with(Some(1), st)));
    let mut st = done;
    st["conditions"] = json!([{"type": "Scaling", "reason": "Waiting"}]);
    assert!(shows(&p, &with(Some(1), st)));
}
