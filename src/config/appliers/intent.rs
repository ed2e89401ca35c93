//! Where an applier's parent shows its intent (DESIGN §1.9): the source revision it applies,
//! as Flux and Argo CD write it in the parent's status, and what else asks for a new apply.

use std::sync::Arc;

use serde::Deserialize;
use xxhash_rust::xxh3::Xxh3;

use super::IntentRule;

/// What a parent's latest response shows of its intent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentFacts {
    /// Changes whenever a new intent arrives (a new revision, a spec change, a person's request
    /// or sync).
    pub key: u64,
    /// The parent shows that intent carried out.
    pub applied: bool,
    /// The revision applied last; `None` before the first.
    pub revision: Option<Arc<str>>,
    /// The revision being applied; `None` when the parent shows none.
    pub target: Option<Arc<str>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct FluxStatus {
    last_applied_revision: Option<String>,
    last_attempted_revision: Option<String>,
    last_handled_reconcile_at: Option<String>,
    observed_generation: Option<i64>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Initiated {
    username: Option<String>,
    automated: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ArgoOperation {
    initiated_by: Option<Initiated>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Revision {
    revision: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OperationState {
    phase: Option<String>,
    operation: Option<ArgoOperation>,
    sync_result: Option<Revision>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ArgoStatus {
    sync: Option<Revision>,
    operation_state: Option<OperationState>,
}

fn person_of(op: Option<&ArgoOperation>) -> Option<&str> {
    op.and_then(|o| o.initiated_by.as_ref())
        .filter(|i| i.automated != Some(true))
        .and_then(|i| i.username.as_deref())
        .filter(|u| !u.is_empty())
}

fn hash_parts(parts: &[Option<&str>]) -> u64 {
    let mut h = Xxh3::new();
    for p in parts {
        match p {
            Some(s) => {
                h.update(b"1");
                h.update(s.as_bytes());
            }
            None => h.update(b"0"),
        }
        h.update(&[0]);
    }
    h.digest()
}

/// The intent of a parent under `rule`, from its status, its generation, its annotation
/// `requested_at` and (Argo CD) its top-level `operation`; `None` for [`IntentRule::Generation`].
pub fn intent(
    rule: IntentRule,
    status: Option<&str>,
    generation: Option<i64>,
    requested_at: Option<&str>,
    operation: Option<&str>,
) -> Option<IntentFacts> {
    match rule {
        IntentRule::Generation => None,
        IntentRule::Flux => {
            let s: FluxStatus = status.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
            let generation_text = generation.map(|g| g.to_string());
            let key = hash_parts(&[generation_text.as_deref(), s.last_attempted_revision.as_deref(), requested_at]);
            let applied = s.last_applied_revision.is_some()
                && s.last_applied_revision == s.last_attempted_revision
                && (generation.is_none() || s.observed_generation == generation)
                && requested_at.is_none_or(|r| s.last_handled_reconcile_at.as_deref() == Some(r));
            Some(IntentFacts {
                key,
                applied,
                revision: s.last_applied_revision.map(Arc::from),
                target: s.last_attempted_revision.map(Arc::from),
            })
        }
        IntentRule::ArgoCd => {
            let s: ArgoStatus = status.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
            let op: Option<ArgoOperation> = operation.and_then(|o| serde_json::from_str(o).ok());
            let state = s.operation_state.as_ref();
            let running = state.is_some_and(|st| st.phase.as_deref() == Some("Running"));
            // A person's sync, pending or running: an intent of its own.
            let person = person_of(op.as_ref()).or_else(|| {
                if running {
                    person_of(state.and_then(|st| st.operation.as_ref()))
                } else {
                    None
                }
            });
            let target = s.sync.and_then(|r| r.revision);
            let synced = state.and_then(|st| st.sync_result.as_ref()).and_then(|r| r.revision.clone());
            let key = hash_parts(&[target.as_deref(), person]);
            let applied = person.is_none() && synced.is_some() && synced == target;
            Some(IntentFacts { key, applied, revision: synced.map(Arc::from), target: target.map(Arc::from) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_intent_is_the_revision_and_a_request() {
        let s = |st: &str| intent(IntentRule::Flux, Some(st), Some(1), None, None).unwrap();
        let attempting =
            s(r#"{"lastAttemptedRevision":"main@sha1:b","lastAppliedRevision":"main@sha1:a","observedGeneration":1}"#);
        let applied =
            s(r#"{"lastAttemptedRevision":"main@sha1:b","lastAppliedRevision":"main@sha1:b","observedGeneration":1}"#);
        assert!(!attempting.applied && applied.applied);
        assert_eq!(attempting.key, applied.key, "the same intent, carried out");
        let next =
            s(r#"{"lastAttemptedRevision":"main@sha1:c","lastAppliedRevision":"main@sha1:b","observedGeneration":1}"#);
        assert_ne!(next.key, applied.key);
        let st = r#"{"lastAttemptedRevision":"r","lastAppliedRevision":"r","observedGeneration":1,"lastHandledReconcileAt":"t1"}"#;
        let asked = intent(IntentRule::Flux, Some(st), Some(1), Some("t2"), None).unwrap();
        assert!(!asked.applied && asked.key != intent(IntentRule::Flux, Some(st), Some(1), None, None).unwrap().key);
        assert!(intent(IntentRule::Flux, Some(st), Some(1), Some("t1"), None).unwrap().applied);
        assert!(
            !intent(IntentRule::Flux, Some(st), Some(2), None, None).unwrap().applied,
            "a spec change not yet observed"
        );
    }

    #[test]
    fn argo_intent_is_the_sync_revision_and_a_persons_sync() {
        let synced =
            r#"{"sync":{"revision":"a1"},"operationState":{"phase":"Succeeded","syncResult":{"revision":"a1"}}}"#;
        let i = intent(IntentRule::ArgoCd, Some(synced), Some(1), None, None).unwrap();
        assert!(i.applied);
        let new = r#"{"sync":{"revision":"b2"},"operationState":{"phase":"Succeeded","syncResult":{"revision":"a1"}}}"#;
        assert!(!intent(IntentRule::ArgoCd, Some(new), Some(1), None, None).unwrap().applied);
        let by_person =
            intent(IntentRule::ArgoCd, Some(synced), Some(1), None, Some(r#"{"initiatedBy":{"username":"alice"}}"#))
                .unwrap();
        assert!(!by_person.applied && by_person.key != i.key);
        let automated =
            intent(IntentRule::ArgoCd, Some(synced), Some(1), None, Some(r#"{"initiatedBy":{"automated":true}}"#))
                .unwrap();
        assert_eq!(automated, i, "the applier's own sync at the same revision is no new intent");
    }
}
