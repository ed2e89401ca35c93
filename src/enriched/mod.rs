//! The enriched event: one JSON record per classified mutation (DESIGN §4). Its schema is
//! published in `schema/enriched-event.schema.json`. Sinks write it with [`Enriched::write_json`]
//! (module `json`), byte for byte what its `Serialize` gives, at a fraction of the cost.

mod json;
mod vocabulary;

/// Events for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod testing {
    pub(crate) use super::json::tests::event;
}

use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::filter::Verb;
use crate::write::{Name, ObservedSource};
pub use vocabulary::{Class, Resolution};

/// One classified mutation, as every sink writes it (field by field in docs/enriched-events.md).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enriched {
    /// The audit event's auditID.
    #[serde(rename = "auditID")]
    pub audit_id: Arc<str>,
    /// The cluster the event came from (the webhook path, a Kafka header or the pipeline's default).
    pub cluster: Arc<str>,
    /// The audit event's stageTimestamp, as the API server wrote it.
    pub stage_timestamp: Arc<str>,
    /// The write's verb.
    pub verb: Verb,
    /// The subresource written through (`scale`, `eviction`); absent for the object itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<&'static str>,
    /// The effective user: the impersonated user when present, else the authenticated one.
    pub user: Arc<str>,
    /// [`user_hash`] of `user`: the 5 characters Kausality writes into its annotations.
    pub user_hash: Arc<str>,
    /// The mutated object.
    pub object: ObjectOut,
    /// The verdict.
    pub class: Class,
    /// Why this class, in words.
    pub reason: String,
    /// The controller owner, or the applier's parent the object's markers name; absent when
    /// `unowned`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentOut>,
    /// Whether the writer is the parent's controller, and who that is.
    pub actor: ActorOut,
    /// Drift only: what the parent's approvals and rejections say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// Drift only: what resolved it: a platform policy's name, or the parent's annotation
    /// (`kausality.io/approvals`, `kausality.io/rejections`); absent when unresolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Arc<str>>,
    /// Drift only: the origin writes this drift undoes (DESIGN §1.8); empty when it undoes
    /// nobody's write (its cause is outside the stream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverts: Option<Vec<RevertOut>>,
    /// The parent carries `kausality.io/freeze` and a child was changed anyway.
    pub freeze_violation: bool,
    /// Drift under an unexpired `kausality.io/snooze`: no drift report.
    pub snoozed: bool,
    /// The hops from the original intent to this mutation, root first.
    pub trace: Vec<HopOut>,
    /// The trace's oldest hops were cut (an ownership cycle, or a chain deeper than
    /// `options.max_trace_hops`); written only when true.
    #[serde(skip_serializing_if = "is_false")]
    pub trace_truncated: bool,
    /// Applied after writes with a higher resourceVersion (came later than the reorder window).
    pub late: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The mutated object, as the enriched event names it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectOut {
    /// The object's apiVersion.
    pub api_version: Arc<str>,
    /// The object's kind.
    pub kind: Arc<str>,
    /// The namespace; absent (empty) for a cluster-scoped object.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub namespace: Arc<str>,
    /// The object's name.
    pub name: Name,
    /// The UID, as the API server wrote it.
    pub uid: Arc<str>,
    /// `metadata.generation` after the write; `None` for kinds without one.
    pub generation: Option<i64>,
}

/// Where a parent is in its life, as last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// It has not yet shown that it finished initializing (DESIGN §1.4).
    Initializing,
    /// It has shown that it initialized (a high-water mark: it stays so).
    Initialized,
    /// It is being deleted (`metadata.deletionTimestamp` set).
    Deleting,
}

impl Phase {
    /// As the enriched event writes it (`initializing`, `initialized`, `deleting`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "initializing",
            Phase::Initialized => "initialized",
            Phase::Deleting => "deleting",
        }
    }
}

/// The parent of the mutated object, as last seen.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentOut {
    /// The parent's apiVersion.
    pub api_version: Arc<str>,
    /// The parent's kind.
    pub kind: Arc<str>,
    /// The parent's name.
    pub name: Name,
    /// The parent's UID, as the API server wrote it.
    pub uid: Arc<str>,
    /// The parent's `metadata.generation` as last seen; `None` when unknown.
    pub generation: Option<i64>,
    /// The generation its controller last reported observed; `None` when never reported.
    pub observed_generation: Option<i64>,
    /// Where `observed_generation` was read (DESIGN §1.3).
    pub observed_generation_source: Option<ObservedSource>,
    /// The controller has finished the observed generation: a write reported it observed with
    /// no work in progress (DESIGN §1.3); `None` without an observed generation.
    pub finished: Option<bool>,
    /// `None` when the parent was never seen.
    pub phase: Option<Phase>,
    /// The applier whose parent this is (DESIGN §1.9), and the revisions it shows; absent for
    /// a controller's parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applier: Option<Box<ApplierOut>>,
}

impl ParentOut {
    /// A parent known by its identity only: nothing of its generations, phase or applier yet.
    pub fn named(api_version: Arc<str>, kind: Arc<str>, name: Name, uid: Arc<str>) -> Self {
        ParentOut {
            api_version,
            kind,
            name,
            uid,
            generation: None,
            observed_generation: None,
            observed_generation_source: None,
            finished: None,
            phase: None,
            applier: None,
        }
    }
}

/// An applier's parent's intent, as the enriched event writes it (DESIGN §1.9).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApplierOut {
    /// The applier profile's name (`flux-kustomize`, `argocd`, ...).
    pub name: Arc<str>,
    /// The source revision the parent shows applied last; `None` before its first.
    pub revision: Option<Arc<str>>,
    /// The revision the parent shows it is applying (Flux' last attempted, Argo CD's sync
    /// revision); `None` when it shows none.
    pub target_revision: Option<Arc<str>>,
}

/// Who wrote, as far as the stream tells.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorOut {
    /// `None` when the controller cannot be told apart yet.
    pub is_controller: Option<bool>,
    /// Who the controller is (or may be), as far as the stream tells.
    pub controllers: Vec<Arc<str>>,
}

/// An origin write that a drift undoes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevertOut {
    /// The origin write's effective user.
    pub user: Arc<str>,
    /// The user is a person (not a `system:` user: no service account, node or control-plane
    /// component).
    pub person: bool,
    /// The origin write's auditID.
    #[serde(rename = "auditID")]
    pub audit_id: Arc<str>,
    /// The origin write's stageTimestamp.
    pub time: Arc<str>,
    /// The origin write's verb.
    pub verb: crate::filter::Verb,
    /// What it touched: the drifting child itself, or the sibling it removed.
    pub object: RevertedObject,
    /// The fields the drift overwrote (`None`: not known, the content before the origin write
    /// was not at hand).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FieldOut>>,
    /// The write undone had itself put back a write of this write's user: the two flip the
    /// same fields back and forth, a fight (DESIGN §1.8). Absent when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fight: bool,
}

/// The object an origin write touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevertedObject {
    /// Its apiVersion.
    pub api_version: Arc<str>,
    /// Its kind.
    pub kind: Arc<str>,
    /// Its name.
    pub name: Name,
}

/// A leaf field an origin write changed and the drift overwrote.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldOut {
    /// Dotted path, arrays by index: `spec.replicas`, `spec.template.spec.containers[0].image`.
    pub path: Arc<str>,
    /// The value before the origin write; absent when the field was absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Box<serde_json::value::RawValue>>,
    /// The value the origin write set; absent when it removed the field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Box<serde_json::value::RawValue>>,
    /// The drift put back the value before the origin write.
    pub restored: bool,
}

impl PartialEq for FieldOut {
    fn eq(&self, o: &Self) -> bool {
        let text = |v: &Option<Box<serde_json::value::RawValue>>| v.as_ref().map(|r| r.get().to_string());
        self.path == o.path
            && text(&self.before) == text(&o.before)
            && text(&self.after) == text(&o.after)
            && self.restored == o.restored
    }
}

/// One hop of the trace, as the enriched event writes it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HopOut {
    /// The object's apiVersion.
    pub api_version: Arc<str>,
    /// The object's kind.
    pub kind: Arc<str>,
    /// The object's name (the trace node's, not copied).
    pub name: crate::trace::HopName,
    /// The object's generation after the write; `None` when unknown or the kind keeps none.
    pub generation: Option<i64>,
    /// Who wrote; `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Arc<str>>,
    /// When the write happened, RFC 3339 in µs, UTC; the last hop's is this event's
    /// stageTimestamp as written; `None` when unknown.
    pub timestamp: Option<Arc<str>>,
    /// The object's `kausality.io/trace-<key>` labels, by key; left out when empty.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub labels: serde_json::Map<String, serde_json::Value>,
}

/// Kausality's `HashUsername`: the first 4 bytes of SHA-256 of the user name as a big-endian
/// u32, written in base 36, left-padded with `0` to 5 characters, and then its **first** 5
/// characters (a u32 takes up to 7 base-36 digits: the leading ones are kept, so the hash
/// matches the one Kausality writes into its annotations).
pub fn user_hash(user: &str) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let digest = Sha256::digest(user.as_bytes());
    let mut n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    // The base-36 digits, least significant first: at most 7 for a u32.
    let mut rev = [b'0'; 7];
    let mut len = 0;
    while n > 0 {
        rev[len] = DIGITS[(n % 36) as usize];
        n /= 36;
        len += 1;
    }
    let len = len.max(5);
    rev[..len].iter().rev().take(5).map(|&b| b as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_hash_is_kausalitys_hash_username() {
        // Each computed independently of this code:
        // python3 -c 'import hashlib,sys; n=int.from_bytes(hashlib.sha256(sys.argv[1].encode()).digest()[:4],"big");
        //   d=""; exec("while n: d=\"0123456789abcdefghijklmnopqrstuvwxyz\"[n%36]+d; n//=36"); print(d.rjust(5,"0")[:5])' USER
        for (user, hash) in [
            // 0xb2f220d9 = "1dnfu1l" in base 36 (Kausality's own example).
            ("kubernetes-admin", "1dnfu"),
            // 0x2bd806c9 = "c5xzgp".
            ("alice", "c5xzg"),
            // 0xcf4a98ab = "1likqej".
            ("system:serviceaccount:kube-system:deployment-controller", "1likq"),
            // 0x31b95566 = "dsofom".
            ("system:kube-controller-manager", "dsofo"),
            // 0xe3b0c442 = "1r6c4le".
            ("", "1r6c4"),
            // 0x011ed9f0 = "b6xgw": exactly five digits.
            ("user-132", "b6xgw"),
            // 0x0004316f = "5w1b": padded to "05w1b".
            ("user-399", "05w1b"),
        ] {
            assert_eq!(user_hash(user), hash, "{user:?}");
        }
    }
}
