//! Ground truth of a scenario, from what the test did, never from kausality-stream's output.
//!
//! The scenario records a [`Plan`]: its steps in order (each started once the namespace has
//! gone quiet after the step before), what each step caused ([`Cause`]), and the test's own
//! writes by their `Audit-Id` with the class they must get (a top-level object is `unowned`, a
//! person's write to a child `origin`). [`label`] then walks the namespace's audit log in etcd
//! order and labels every write by its actor and by what the test caused:
//!
//! - the test's own writes: as declared;
//! - not a mutation of intent (status writes, metadata-only or no-op updates, the final delete
//!   of an object that already carries a `deletionTimestamp`, other subresources): no class;
//! - a controller's write to an object without a controller owner: `unowned`;
//! - under a parent being deleted, or in the namespace's teardown: `deleting`;
//! - under a parent not yet initialized (DESIGN §1.4, the default signals per kind):
//!   `initializing`;
//! - in a step whose cause is an intent of the test (a create, a spec change, a scale of a
//!   top-level object), a controller's write under that object: `expected`;
//! - a controller's create of a pod under a parent one of whose pods a person removed in this
//!   step (a delete, an eviction): `drift`, reverting that removal;
//! - the parent's controller's write to an object a person changed in this step: `drift`,
//!   reverting that change; the object's own controller's writes to its children carry the
//!   change out: `expected`;
//! - the Widget controller's change of its child with nothing asked (a knob of the test):
//!   `drift`, reverting nobody;
//! - a controller's write under a workload one of whose own nodes the test changed (a
//!   DaemonSet's pod on a node added): `drift`, reverting nobody; another actor's delete of
//!   its pod (the taint manager's, the pod garbage collector's) is an `origin`.
//!
//! A write no rule explains is an error of the scenario (the truth cannot be told), never a
//! guess. [`Judgement`] compares the labels with kausality-stream's events: every mismatch,
//! the confusion table (truth × class), drift and origin precision and recall.

mod judge;
mod label;

pub use judge::Judgement;
pub use label::label;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::enriched::Event;

/// The class of a write kausality-stream must not classify.
pub const NONE: &str = "none";

/// The classes in the order of the confusion table.
pub const CLASSES: [&str; 9] =
    ["drift", "expected", "origin", "unowned", "initializing", "deleting", "undetermined", "unknown-parent", NONE];

/// What a step of the test caused, and so what the controllers' writes in it carry out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Cause {
    /// The namespace's own objects; no controller write is caused by the test.
    Setup,
    /// The test created, changed or scaled these top-level objects (kind, name): every
    /// controller write under them carries that intent out.
    Intent(Vec<(String, String)>),
    /// A person removed pods (deletes, evictions: the step's [`Role::Removal`] writes): a
    /// controller's create of a pod under the same parent reverts a removal.
    Removed,
    /// A person changed an owned object (the step's [`Role::Change`] write): its parent's
    /// controller's write to it reverts the change, its own controller's writes under it carry
    /// the change out.
    Changed,
    /// The Widget controller changes its child with nothing asked (external state).
    Unprompted,
    /// Something outside the namespace changed (a node of the workload's own added, removed,
    /// cordoned, tainted): a controller's write under the workload carries out no intent of
    /// the test, and reverts no write of it.
    Node,
    /// The namespace is deleted: every delete in it is teardown.
    Teardown,
}

/// What a write of the test is, for the controllers' writes it causes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Plain,
    /// Removes a pod (delete, eviction).
    Removal,
    /// Changes an owned object (a scale, an edit).
    Change,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Own {
    pub audit_id: String,
    pub class: String,
    pub role: Role,
    pub what: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    /// Wall time (µs since the epoch) when the step started: every write it causes is received
    /// by the API server later, every write of the step before it earlier.
    pub started_us: i64,
    pub cause: Cause,
    pub own: Vec<Own>,
}

/// What the test did, step by step (kept next to the scenario's audit log, to label it again).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Who controls the children of each kind of parent (kind → user): what the test knows of
    /// the controllers it runs. A write under a parent by anyone else is not its controller's.
    #[serde(default)]
    pub controllers: BTreeMap<String, String>,
}

impl Plan {
    /// A plan that knows kube-controller-manager's controllers (they run with
    /// `--use-service-account-credentials`).
    pub fn new() -> Plan {
        let sa = |n: &str| format!("system:serviceaccount:kube-system:{n}");
        let controllers = [
            ("Deployment", sa("deployment-controller")),
            ("ReplicaSet", sa("replicaset-controller")),
            ("StatefulSet", sa("statefulset-controller")),
            ("DaemonSet", sa("daemon-set-controller")),
            ("Job", sa("job-controller")),
            ("CronJob", sa("cronjob-controller")),
        ];
        Plan { steps: Vec::new(), controllers: controllers.into_iter().map(|(k, u)| (k.to_string(), u)).collect() }
    }

    /// `user` controls the children of parents of `kind`.
    pub fn controller(&mut self, kind: &str, user: &str) {
        self.controllers.insert(kind.to_string(), user.to_string());
    }

    /// Starts a step now (after the namespace went quiet).
    pub fn step(&mut self, name: &str, cause: Cause) {
        self.steps.push(Step { name: name.to_string(), started_us: now_us(), cause, own: Vec::new() });
    }

    /// A step that started at `started_us` (µs since the epoch), before the plan was made.
    pub fn step_from(&mut self, name: &str, cause: Cause, started_us: i64) {
        self.steps.push(Step { name: name.to_string(), started_us, cause, own: Vec::new() });
    }

    /// A write of the test in the current step, and the class it must get.
    pub fn own(&mut self, audit_id: &str, class: &'static str, role: Role, what: &str) {
        let step = self.steps.last_mut().expect("a step before the test's first write");
        step.own.push(Own { audit_id: audit_id.to_string(), class: class.to_string(), role, what: what.to_string() });
    }

    fn step_at(&self, received_us: i64) -> Option<usize> {
        self.steps.iter().rposition(|s| s.started_us <= received_us)
    }

    fn own_write(&self, audit_id: &str) -> Option<(usize, &Own)> {
        self.steps.iter().enumerate().find_map(|(i, s)| s.own.iter().find(|o| o.audit_id == audit_id).map(|o| (i, o)))
    }
}

pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// `2026-11-24T13:50:01.123456Z` → µs since the epoch (the API server writes UTC).
pub fn parse_time_us(s: &str) -> Option<i64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let micros: i64 = format!("{frac:0<6}")[..6].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000) + micros)
}

/// What a drift must name in `reverts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reverts {
    /// At least one of these writes of a person (one removal of several pods of a parent is
    /// undone by any of its replacements).
    AnyOf(Vec<String>),
    /// No write of the stream: the cause is outside it.
    Nobody,
}

/// The truth about one write (one object of a deletecollection).
#[derive(Clone, Debug)]
pub struct Label {
    /// auditID, or `auditID/uid` for an object of a deletecollection.
    pub key: String,
    pub class: String,
    pub reverts: Option<Reverts>,
    pub verb: String,
    pub object: String,
    pub user: String,
    pub step: String,
    pub why: String,
}

/// The key of an enriched event, as [`Label::key`].
pub fn event_key(e: &Event) -> String {
    key(&e.audit_id, &e.verb, &e.object.uid)
}

pub fn key(audit_id: &str, verb: &str, uid: &str) -> String {
    if verb == "deletecollection" {
        format!("{audit_id}/{uid}")
    } else {
        audit_id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_to_microseconds() {
        assert_eq!(parse_time_us("1970-01-01T00:00:00.000001Z"), Some(1));
        assert_eq!(parse_time_us("2000-03-01T00:00:00Z"), Some(951_868_800_000_000));
        assert_eq!(parse_time_us("2026-11-24T13:50:01.5Z").map(|t| t % 1_000_000), Some(500_000));
    }
}
