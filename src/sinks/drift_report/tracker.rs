//! Which drift reports are open, and when they close. Pure bookkeeping (no I/O), so that the
//! rules are tested on their own:
//! - a drift is reported once per id within the TTL (Kausality's callback tracker does the
//!   same), never while its parent's `kausality.io/snooze` holds, and not when an approval
//!   already covers it;
//! - an open report is resolved when the parent's generation moves on (someone changed the
//!   intent), the parent or the child is deleted, or an approval now covers the child. Later
//!   enriched events show most of these; [`Tracker::sweep`] checks the rest (an approval added
//!   to the parent's annotations is not itself an enriched event) against the model's state.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::report::{detected, DriftReport, Phase};
use crate::classify::Class;
use crate::enriched::Enriched;
use crate::state::policy::Resolution;

/// Open reports kept at most; past it, new drifts are still reported but not tracked for
/// resolution (a bound on memory when something drifts everywhere at once).
const MAX_OPEN: usize = 100_000;

/// A parent: (cluster, UID).
pub type ParentKey = (Arc<str>, Arc<str>);

/// A Detected report waiting for its resolution.
#[derive(Clone, Debug)]
pub struct Open {
    /// The Detected report.
    pub report: DriftReport,
    /// The parent's generation when it was sent.
    pub parent_generation: i64,
}

impl Open {
    /// The UID of the child that drifted.
    pub fn child_uid(&self) -> &str {
        &self.report.spec.child.uid
    }
}

/// Which drift was reported when, and which reports are still open.
pub struct Tracker {
    ttl: Duration,
    /// When each id was last reported (Detected).
    sent: HashMap<String, Instant>,
    open: HashMap<ParentKey, Vec<Open>>,
    open_count: usize,
}

impl Tracker {
    /// A tracker that reports the same drift once within `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Tracker { ttl, sent: HashMap::new(), open: HashMap::new(), open_count: 0 }
    }

    /// Reports open.
    pub fn open_count(&self) -> usize {
        self.open_count
    }

    /// Takes one enriched event; appends the reports to send. `parent_namespace` looks up the
    /// parent's namespace in the model (for the report's parent reference).
    pub fn on_event(
        &mut self,
        e: &Enriched,
        now: Instant,
        parent_namespace: impl Fn(&Enriched) -> Option<String>,
        out: &mut Vec<DriftReport>,
    ) {
        let is_delete = e.verb.is_delete();
        // The event's object is itself a parent with open reports: its spec changed or it went.
        let own_key: ParentKey = (e.cluster.clone(), e.object.uid.clone());
        if self.open.contains_key(&own_key) {
            let generation = e.object.generation;
            self.resolve_where(&own_key, out, |o| is_delete || generation.is_some_and(|g| g > o.parent_generation));
        }
        let Some(p) = e.parent.as_ref() else { return };
        let key: ParentKey = (e.cluster.clone(), p.uid.clone());
        if self.open.contains_key(&key) {
            let generation = p.generation;
            let approved = e.class == Class::Drift && e.resolution == Some(Resolution::Approved);
            let child = &*e.object.uid;
            self.resolve_where(&key, out, |o| {
                generation.is_some_and(|g| g > o.parent_generation)
                    || ((is_delete || approved) && o.child_uid() == child)
            });
        }
        if e.class != Class::Drift || e.snoozed || e.resolution == Some(Resolution::Approved) {
            return;
        }
        let Some(report) = detected(e, parent_namespace(e).as_deref()) else { return };
        let id = &report.spec.id;
        if self.sent.get(id).is_some_and(|at| now.duration_since(*at) < self.ttl) {
            return;
        }
        self.sent.insert(id.clone(), now);
        let opens = self.open.entry(key).or_default();
        if !opens.iter().any(|o| o.report.spec.id == *id) && self.open_count < MAX_OPEN {
            opens.push(Open { report: report.clone(), parent_generation: p.generation.unwrap_or(0) });
            self.open_count += 1;
        }
        out.push(report);
    }

    /// Resolves the open reports for which `resolved` says so (checked against the model's
    /// state), and forgets ids whose TTL has passed.
    pub fn sweep(
        &mut self,
        now: Instant,
        mut resolved: impl FnMut(&ParentKey, &Open) -> bool,
        out: &mut Vec<DriftReport>,
    ) {
        let ttl = self.ttl;
        self.sent.retain(|_, at| now.duration_since(*at) < ttl);
        let keys: Vec<ParentKey> = self.open.keys().cloned().collect();
        for key in keys {
            let k = key.clone();
            self.resolve_where(&key, out, |o| resolved(&k, o));
        }
    }

    fn resolve_where(&mut self, key: &ParentKey, out: &mut Vec<DriftReport>, mut pred: impl FnMut(&Open) -> bool) {
        let Some(opens) = self.open.get_mut(key) else { return };
        let sent = &mut self.sent;
        let before = opens.len();
        opens.retain(|o| {
            if pred(o) {
                // As Kausality does: once resolved, the same drift may be reported again.
                sent.remove(&o.report.spec.id);
                let mut r = o.report.clone();
                r.spec.phase = Phase::Resolved;
                out.push(r);
                false
            } else {
                true
            }
        });
        self.open_count -= before - opens.len();
        if opens.is_empty() {
            self.open.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enriched::{ActorOut, ObjectOut, ParentOut, Phase as Lifecycle};
    use crate::filter::Verb;

    fn drift(audit: &str, child: &str, parent_gen: i64) -> Enriched {
        Enriched {
            audit_id: Arc::from(audit),
            cluster: Arc::from("c"),
            stage_timestamp: Arc::from("2024-05-01T10:00:00Z"),
            verb: Verb::Update,
            subresource: None,
            user: Arc::from("ctrl"),
            user_hash: Arc::from("00000"),
            object: ObjectOut {
                api_version: Arc::from("v1"),
                kind: Arc::from("ConfigMap"),
                namespace: Arc::from("ns"),
                name: crate::write::Name::from(child),
                uid: Arc::from(child),
                generation: None,
            },
            class: Class::Drift,
            reason: String::new(),
            parent: Some(ParentOut {
                api_version: Arc::from("example.org/v1"),
                kind: Arc::from("App"),
                name: crate::write::Name::from("app"),
                uid: Arc::from("P"),
                generation: Some(parent_gen),
                observed_generation: Some(parent_gen),
                observed_generation_source: None,
                finished: Some(true),
                phase: Some(Lifecycle::Initialized),
                applier: None,
            }),
            actor: ActorOut { is_controller: Some(true), controllers: vec![] },
            resolution: Some(Resolution::Unresolved),
            policy: None,
            reverts: Some(Vec::new()),
            freeze_violation: false,
            snoozed: false,
            trace: vec![],
            trace_truncated: false,
            late: false,
        }
    }

    #[test]
    fn the_report_carries_what_the_drift_reverts_and_the_policy() {
        let mut e = drift("1", "a", 1);
        let report = |e: &Enriched| serde_json::to_value(super::super::report::detected(e, None).unwrap()).unwrap();
        assert_eq!(report(&e)["spec"]["reverts"], serde_json::json!([]), "reverts nobody: an empty list");
        e.reverts = Some(vec![crate::enriched::RevertOut {
            user: Arc::from("alice"),
            person: true,
            audit_id: Arc::from("x-1"),
            time: Arc::from("2024-05-01T09:00:00.000001Z"),
            verb: Verb::Update,
            object: crate::enriched::RevertedObject {
                api_version: Arc::from("v1"),
                kind: Arc::from("ConfigMap"),
                name: crate::write::Name::from("a"),
            },
            fields: None,
            fight: false,
        }]);
        let r = report(&e);
        assert_eq!(r["spec"]["reverts"][0]["user"], "alice");
        assert_eq!(r["spec"]["reverts"][0]["auditID"], "x-1");
        assert!(r["spec"]["reverts"][0].get("fields").is_none(), "fields unknown: absent");
        e.reverts = None;
        assert!(report(&e)["spec"].get("reverts").is_none());
        assert!(report(&e)["spec"].get("policy").is_none(), "unresolved: no policy");
        e.resolution = Some(Resolution::Rejected);
        e.policy = Some(Arc::from("no-person-reverts"));
        assert_eq!(report(&e)["spec"]["policy"], "no-person-reverts");
    }

    fn phases(out: &[DriftReport]) -> Vec<(Phase, String)> {
        out.iter().map(|r| (r.spec.phase, r.spec.child.name.clone())).collect()
    }

    #[test]
    fn reports_once_per_ttl_skips_snoozed_and_approved_and_resolves() {
        let t0 = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        let mut out = Vec::new();
        let ns = |_: &Enriched| None;
        t.on_event(&drift("1", "a", 1), t0, ns, &mut out);
        t.on_event(&drift("2", "a", 1), t0, ns, &mut out);
        assert_eq!(phases(&out), vec![(Phase::Detected, "a".into())], "same id within the TTL: once");
        let mut snoozed = drift("3", "b", 1);
        snoozed.snoozed = true;
        let mut approved = drift("4", "c", 1);
        approved.resolution = Some(Resolution::Approved);
        t.on_event(&snoozed, t0, ns, &mut out);
        t.on_event(&approved, t0, ns, &mut out);
        assert_eq!(out.len(), 1);
        t.on_event(&drift("5", "d", 1), t0, ns, &mut out);
        assert_eq!(t.open_count(), 2);
        // The child d is deleted: its report is resolved, a's stays open.
        let mut gone = drift("6", "d", 1);
        gone.class = Class::Deleting;
        gone.verb = Verb::Delete;
        out.clear();
        t.on_event(&gone, t0, ns, &mut out);
        assert_eq!(phases(&out), vec![(Phase::Resolved, "d".into())]);
        // The parent's generation moves on: a is resolved, with the id it was detected with.
        out.clear();
        let mut next = drift("7", "e", 2);
        next.class = Class::Expected;
        t.on_event(&next, t0, ns, &mut out);
        assert_eq!(phases(&out), vec![(Phase::Resolved, "a".into())]);
        assert_eq!(out[0].spec.id, super::super::report::drift_id("P", "a", 1));
        assert_eq!(t.open_count(), 0);
        // After the TTL the same drift would be reported again.
        out.clear();
        t.on_event(&drift("8", "f", 2), t0, ns, &mut out);
        t.sweep(t0 + Duration::from_secs(601), |_, _| false, &mut out);
        t.on_event(&drift("9", "f", 2), t0 + Duration::from_secs(601), ns, &mut out);
        assert_eq!(out.len(), 2);
    }
}
