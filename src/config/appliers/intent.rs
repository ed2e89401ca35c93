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
    /// A HelmRelease of Flux' `v2` API: the digest of the values of the last attempt, and the
    /// releases made (it writes no `lastAppliedRevision`).
    last_attempted_config_digest: Option<String>,
    history: Option<Vec<HelmSnapshot>>,
}

/// One release of a HelmRelease's `status.history` (Flux' `v2` API).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HelmSnapshot {
    version: i64,
    status: Option<String>,
    chart_version: Option<String>,
    config_digest: Option<String>,
}

impl FluxStatus {
    /// The revision applied last and whether it is the attempted one, with the attempted
    /// values: a Kustomization's `lastAppliedRevision`; for a HelmRelease of the `v2` API, the
    /// chart version of its newest `deployed` release, the attempt carried out when no newer
    /// release exists (a failed or pending one) and chart and values are the attempted ones
    /// (helm-controller keeps the newest first; versions are compared whatever the order). An
    /// OCI chart's attempted revision carries a digest after a `+`.
    fn applied_revision(&self) -> (Option<&str>, bool) {
        if let Some(applied) = self.last_applied_revision.as_deref() {
            return (Some(applied), self.last_attempted_revision.as_deref() == Some(applied));
        }
        let history = self.history.as_deref().unwrap_or_default();
        let deployed = history.iter().filter(|s| s.status.as_deref() == Some("deployed")).max_by_key(|s| s.version);
        let Some((latest, chart)) = deployed.and_then(|s| Some((s, s.chart_version.as_deref()?))) else {
            return (None, false);
        };
        // A newer release that failed (or is pending): the attempt is not carried out.
        if history.iter().any(|s| s.version > latest.version) {
            return (Some(chart), false);
        }
        let attempted = self
            .last_attempted_revision
            .as_deref()
            .is_some_and(|a| a == chart || a.strip_prefix(chart).is_some_and(|rest| rest.starts_with('+')));
        let values = self.last_attempted_config_digest.is_none()
            || self.last_attempted_config_digest.as_deref() == latest.config_digest.as_deref();
        (Some(chart), attempted && values)
    }
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
            let attempted = s.last_attempted_revision.as_deref();
            // New values (a HelmRelease's `valuesFrom` changed) are a new intent too.
            let key = match s.last_attempted_config_digest.as_deref() {
                None => hash_parts(&[generation_text.as_deref(), attempted, requested_at]),
                Some(values) => hash_parts(&[generation_text.as_deref(), attempted, requested_at, Some(values)]),
            };
            let (revision, at_attempted) = s.applied_revision();
            let applied = at_attempted
                && (generation.is_none() || s.observed_generation == generation)
                && requested_at.is_none_or(|r| s.last_handled_reconcile_at.as_deref() == Some(r));
            Some(IntentFacts { key, applied, revision: revision.map(Arc::from), target: attempted.map(Arc::from) })
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
    fn a_v2_helm_release_shows_its_intent_applied_by_its_latest_release() {
        let s = |st: &str| intent(IntentRule::Flux, Some(st), Some(1), None, None).unwrap();
        let release = |version: i64, status: &str, chart: &str, values: &str| {
            format!(
                r#"{{"version":{version},"status":"{status}","chartName":"web","chartVersion":"{chart}","configDigest":"{values}","digest":"sha256:x","name":"web","namespace":"shop"}}"#
            )
        };
        let status = |attempted: &str, values: &str, history: &[String]| {
            format!(
                r#"{{"observedGeneration":1,"lastAttemptedRevision":"{attempted}","lastAttemptedConfigDigest":"{values}","history":[{}]}}"#,
                history.join(",")
            )
        };
        let v1 = release(1, "deployed", "1.0.0", "sha256:a");
        let installing = s(&status("1.0.0", "sha256:a", &[]));
        let installed = s(&status("1.0.0", "sha256:a", std::slice::from_ref(&v1)));
        assert!(!installing.applied && installed.applied);
        assert_eq!(installing.key, installed.key, "the same intent, carried out");
        assert_eq!((installed.revision.as_deref(), installed.target.as_deref()), (Some("1.0.0"), Some("1.0.0")));
        // A new chart version, then new values at the same version: each a new intent.
        let upgrading = s(&status("1.1.0", "sha256:a", std::slice::from_ref(&v1)));
        assert!(!upgrading.applied && upgrading.key != installed.key);
        assert_eq!(upgrading.revision.as_deref(), Some("1.0.0"));
        let new_values = s(&status("1.0.0", "sha256:b", std::slice::from_ref(&v1)));
        assert!(!new_values.applied && new_values.key != installed.key);
        let v2 = release(2, "deployed", "1.1.0", "sha256:a");
        let upgraded = s(&status("1.1.0", "sha256:a", &[v2, release(1, "superseded", "1.0.0", "sha256:a")]));
        assert!(upgraded.applied && upgraded.key == upgrading.key);
        // The newest release failed: not applied; the revision applied is the one still deployed.
        let failed = s(&status("1.1.0", "sha256:a", &[release(2, "failed", "1.1.0", "sha256:a"), v1.clone()]));
        assert!(!failed.applied);
        assert_eq!(failed.revision.as_deref(), Some("1.0.0"));
        let retried = s(&status("1.0.0", "sha256:a", &[release(2, "failed", "1.0.0", "sha256:a"), v1.clone()]));
        assert!(!retried.applied, "a newer release than the deployed one failed");
        // An OCI chart's attempted revision carries the digest after a `+`.
        let oci = s(&status("1.0.0+0123456789ab", "sha256:a", std::slice::from_ref(&v1)));
        assert!(oci.applied);
        let other = s(&status("1.0.01+0123456789ab", "sha256:a", std::slice::from_ref(&v1)));
        assert!(!other.applied);
        // A Kustomization's key is as it was (no values digest): restored states keep theirs.
        let ks = r#"{"lastAttemptedRevision":"r","lastAppliedRevision":"r","observedGeneration":1}"#;
        assert_eq!(
            intent(IntentRule::Flux, Some(ks), Some(1), None, None).unwrap().key,
            hash_parts(&[Some("1"), Some("r"), None])
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
