//! The enriched event: one JSON record per classified mutation (DESIGN §4). Its schema is
//! published in `schema/enriched-event.schema.json`. Sinks write it with [`Enriched::write_json`]
//! (module `json`), byte for byte what its `Serialize` gives, at a fraction of the cost.

mod json;

use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::classify::policy::Resolution;
use crate::classify::Class;
use crate::filter::Verb;
use crate::write::{Name, ObservedSource};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enriched {
    #[serde(rename = "auditID")]
    pub audit_id: Arc<str>,
    pub cluster: Arc<str>,
    pub stage_timestamp: Arc<str>,
    pub verb: Verb,
    pub user: Arc<str>,
    pub user_hash: Arc<str>,
    pub object: ObjectOut,
    pub class: Class,
    /// Why this class, in words.
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentOut>,
    pub actor: ActorOut,
    /// Drift only: what the parent's approvals and rejections say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// The parent carries `kausality.io/freeze` and a child was changed anyway.
    pub freeze_violation: bool,
    /// Drift under an unexpired `kausality.io/snooze`: no drift report.
    pub snoozed: bool,
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

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectOut {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub namespace: Arc<str>,
    pub name: Name,
    pub uid: Arc<str>,
    pub generation: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Initializing,
    Initialized,
    Deleting,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "initializing",
            Phase::Initialized => "initialized",
            Phase::Deleting => "deleting",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentOut {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Name,
    pub uid: Arc<str>,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub observed_generation_source: Option<ObservedSource>,
    /// `None` when the parent was never seen.
    pub phase: Option<Phase>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorOut {
    /// `None` when the controller cannot be told apart yet.
    pub is_controller: Option<bool>,
    /// Who the controller is (or may be), as far as the stream tells.
    pub controllers: Vec<Arc<str>>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HopOut {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Name,
    pub generation: Option<i64>,
    pub user: Option<Arc<str>>,
    pub timestamp: Option<Arc<str>>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub labels: serde_json::Map<String, serde_json::Value>,
}

/// The Kausality-compatible 5-character user hash: the first 4 bytes of SHA-256 of the user
/// name as a big-endian u32, in base 36 (modulo 36^5, so it always fits), left-padded with `0`.
pub fn user_hash(user: &str) -> String {
    let digest = Sha256::digest(user.as_bytes());
    let mut n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % 60_466_176; // 36^5
    let mut out = [b'0'; 5];
    for slot in out.iter_mut().rev() {
        *slot = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8(out.to_vec()).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_hash_is_five_base36_chars_and_stable() {
        let h = user_hash("system:serviceaccount:kube-system:deployment-controller");
        assert_eq!(h.len(), 5);
        assert!(h.bytes().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()));
        assert_eq!(h, user_hash("system:serviceaccount:kube-system:deployment-controller"));
        assert_ne!(h, user_hash("alice"));
        // SHA-256("alice") starts 2bd806c9; 0x2bd806c9 mod 36^5 in base 36 is "5xzgp".
        assert_eq!(user_hash("alice"), "5xzgp");
    }
}
