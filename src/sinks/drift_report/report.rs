//! The `kausality.io/v1alpha1` `DriftReport` that Kausality's drift callbacks receive
//! (`pkg/callback/v1alpha1` in kausality-io/kausality), built from an enriched drift event.
//!
//! Kausality builds reports in an admission webhook, so it has the request and both object
//! versions. From the audit stream we fill what we know: `request.user` / `uid` (the auditID) /
//! `operation`, and a `newObject` that carries only the child's identity (the audit event's
//! full object is not kept past classification). Fields Kausality does not define are
//! kausality-stream's additions, which Kausality's receivers ignore: `cluster`, `user`,
//! `timestamp`, `resolution`, `policy` (what resolved it), `reverts` (the origin writes the
//! drift undoes, as in the enriched event).

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::enriched::{Enriched, Phase as LifecyclePhase, RevertOut};
use crate::filter::Verb;
use crate::state::policy::Resolution;

/// The report's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// A drift was seen.
    Detected,
    /// The drift is over (see [`super::tracker`]).
    Resolved,
}

impl Phase {
    /// The `phase` label of `kausality_drift_reports_total`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Detected => "detected",
            Phase::Resolved => "resolved",
        }
    }
}

/// A `DriftReport` as Kausality's callbacks take it (see the module's doc).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftReport {
    /// `kausality.io/v1alpha1`.
    pub api_version: &'static str,
    /// `DriftReport`.
    pub kind: &'static str,
    /// What drifted, where, and by whom.
    pub spec: Spec,
}

/// The report's body.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// 16 hex characters of SHA-256 over parent UID, child UID and parent generation: the same
    /// drift reported twice (a redelivery, a second controller write) has the same id; the
    /// Resolved report carries the id of the Detected one.
    pub id: String,
    /// Detected or resolved.
    pub phase: Phase,
    /// The parent whose intent the write departs from.
    pub parent: ObjectReference,
    /// The object written.
    pub child: ObjectReference,
    /// The object written, reduced to its identity (apiVersion, kind, metadata).
    pub new_object: serde_json::Value,
    /// The write's request.
    pub request: RequestContext,
    /// The cluster (kausality-stream's addition).
    pub cluster: String,
    /// The user that wrote it (kausality-stream's addition).
    pub user: String,
    /// The stageTimestamp of the drifting write.
    pub timestamp: String,
    /// How the drift was resolved, when it was (kausality-stream's addition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// What resolved the drift: a platform policy's name or the parent's annotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The origin writes the drift undoes (DESIGN §1.8), as in the enriched event; empty when
    /// it undoes nobody's write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverts: Option<Vec<RevertOut>>,
}

/// An object as a report names it.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace, empty for a cluster-scoped object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Its `metadata.generation`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Its `status.observedGeneration`, when known (a parent's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Its lifecycle phase as Kausality names it, when known (a parent's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle_phase: Option<&'static str>,
}

/// The write's request.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    /// The user that made the request.
    pub user: String,
    /// The auditID of the write.
    pub uid: String,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
}

/// The report id: 16 hex characters of SHA-256(parent UID, child UID, parent generation).
pub fn drift_id(parent_uid: &str, child_uid: &str, parent_generation: i64) -> String {
    let mut h = Sha256::new();
    h.update(parent_uid.as_bytes());
    h.update([0]);
    h.update(child_uid.as_bytes());
    h.update([0]);
    h.update(parent_generation.to_string().as_bytes());
    let d = h.finalize();
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn operation(v: Verb) -> &'static str {
    match v {
        Verb::Create => "CREATE",
        Verb::Delete | Verb::Deletecollection => "DELETE",
        _ => "UPDATE",
    }
}

fn lifecycle(p: Option<LifecyclePhase>) -> Option<&'static str> {
    p.map(|p| match p {
        LifecyclePhase::Initializing => "Initializing",
        LifecyclePhase::Initialized => "Initialized",
        LifecyclePhase::Deleting => "Deleting",
    })
}

/// The Detected report of a drift event (`None` when the event has no parent).
/// `parent_namespace` is the parent's own namespace when known (cluster-scoped parents have none).
pub fn detected(e: &Enriched, parent_namespace: Option<&str>) -> Option<DriftReport> {
    let p = e.parent.as_ref()?;
    let generation = p.generation.unwrap_or(0);
    let child = ObjectReference {
        api_version: e.object.api_version.to_string(),
        kind: e.object.kind.to_string(),
        namespace: e.object.namespace.to_string(),
        name: e.object.name.to_string(),
        uid: e.object.uid.to_string(),
        generation: e.object.generation,
        observed_generation: None,
        lifecycle_phase: None,
    };
    let mut metadata = serde_json::json!({"name": child.name, "uid": child.uid});
    if !child.namespace.is_empty() {
        metadata["namespace"] = child.namespace.clone().into();
    }
    if let Some(g) = child.generation {
        metadata["generation"] = g.into();
    }
    Some(DriftReport {
        api_version: "kausality.io/v1alpha1",
        kind: "DriftReport",
        spec: Spec {
            id: drift_id(&p.uid, &e.object.uid, generation),
            phase: Phase::Detected,
            parent: ObjectReference {
                api_version: p.api_version.to_string(),
                kind: p.kind.to_string(),
                namespace: parent_namespace.unwrap_or(&e.object.namespace).to_string(),
                name: p.name.to_string(),
                uid: p.uid.to_string(),
                generation: p.generation,
                observed_generation: p.observed_generation,
                lifecycle_phase: lifecycle(p.phase),
            },
            new_object: serde_json::json!({"apiVersion": child.api_version, "kind": child.kind, "metadata": metadata}),
            child,
            request: RequestContext {
                user: e.user.to_string(),
                uid: e.audit_id.to_string(),
                operation: operation(e.verb),
            },
            cluster: e.cluster.to_string(),
            user: e.user.to_string(),
            timestamp: e.stage_timestamp.to_string(),
            resolution: e.resolution,
            policy: e.policy.as_deref().map(str::to_string),
            reverts: e.reverts.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_content_based() {
        let a = drift_id("p", "c", 3);
        assert_eq!(a.len(), 16);
        assert_eq!(a, drift_id("p", "c", 3));
        assert_ne!(a, drift_id("p", "c", 4));
        assert_ne!(a, drift_id("pc", "", 3));
    }
}
