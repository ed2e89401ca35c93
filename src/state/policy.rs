//! Drift resolution policy read from a parent's annotations (DESIGN §1.7):
//! `kausality.io/approvals`, `kausality.io/rejections`, `kausality.io/freeze`,
//! `kausality.io/snooze`, plus the `kausality.io/trace-*` labels and `kausality.io/phase`.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::decode::time::parse_rfc3339_micros;
use crate::state::{FastBuild, SharedPolicy};
use crate::trace::Labels;
use crate::write::Annotations;

/// The annotation listing a parent's approvals of drift (a JSON list of [`Approval`]).
pub const APPROVALS: &str = "kausality.io/approvals";
/// The annotation listing a parent's rejections of drift (a JSON list of [`Rejection`]).
pub const REJECTIONS: &str = "kausality.io/rejections";
/// The annotation freezing a parent (`"true"` or `{"user": ..., "message": ...}`).
pub const FREEZE: &str = "kausality.io/freeze";
/// The annotation silencing a parent's drift reports until a time (RFC 3339, or
/// `{"expiry": ...}`).
pub const SNOOZE: &str = "kausality.io/snooze";
/// The annotation by which a parent says it has initialized (`initialized`).
pub const PHASE: &str = "kausality.io/phase";
/// The prefix of the annotations whose `<key>: <value>` every trace hop of the object carries.
pub const TRACE_LABEL_PREFIX: &str = "kausality.io/trace-";

/// How long an approval holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Valid at its generation, used up by the first drift it approves (the default).
    #[default]
    Once,
    /// Valid while the parent is at its generation.
    Generation,
    /// Always valid.
    Always,
}

/// Which children a rule applies to; `*` (or an absent field) matches any value.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildPattern {
    /// The child's apiVersion, or `*`.
    #[serde(default = "star")]
    pub api_version: String,
    /// The child's kind, or `*`.
    #[serde(default = "star")]
    pub kind: String,
    /// The child's name, or `*`.
    #[serde(default = "star")]
    pub name: String,
}

/// Pre-approval of drift on matching children.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Approval {
    /// The children it approves drift on.
    #[serde(flatten)]
    pub child: ChildPattern,
    /// The parent generation it is valid at (`once`, `generation`); ignored by `always`. Default 0.
    #[serde(default)]
    pub generation: i64,
    /// How long it holds; `once` by default.
    #[serde(default)]
    pub mode: ApprovalMode,
}

/// Rejection of drift on matching children; wins over any approval.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Rejection {
    /// The children it rejects drift on.
    #[serde(flatten)]
    pub child: ChildPattern,
    /// 0: active at every generation; else only at that one.
    #[serde(default)]
    pub generation: i64,
    /// Why, in words, from the annotation; may be empty.
    #[serde(default)]
    pub reason: String,
}

fn star() -> String {
    "*".to_string()
}

/// The child a rule is matched against.
#[derive(Clone, Copy, Debug)]
pub struct ChildRef<'a> {
    /// The child's apiVersion.
    pub api_version: &'a str,
    /// The child's kind.
    pub kind: &'a str,
    /// The child's name.
    pub name: &'a str,
}

fn field_matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

impl ChildPattern {
    /// Whether every field of the pattern matches `c`.
    pub fn matches(&self, c: ChildRef<'_>) -> bool {
        field_matches(&self.api_version, c.api_version)
            && field_matches(&self.kind, c.kind)
            && field_matches(&self.name, c.name)
    }
}

impl Approval {
    /// Whether the approval's pattern matches `c`.
    pub fn matches(&self, c: ChildRef<'_>) -> bool {
        self.child.matches(c)
    }

    /// Whether it holds at the parent's generation `parent_generation` (a used-up `once`
    /// approval is told apart by its [`Approval::key`]).
    pub fn valid_at(&self, parent_generation: i64) -> bool {
        match self.mode {
            ApprovalMode::Always => true,
            ApprovalMode::Once | ApprovalMode::Generation => self.generation == parent_generation,
        }
    }

    /// Identity of this approval for "used up" bookkeeping.
    pub fn key(&self) -> u64 {
        let c = &self.child;
        xxh3_64(format!("{}\0{}\0{}\0{}", c.api_version, c.kind, c.name, self.generation).as_bytes())
    }
}

impl Rejection {
    /// Whether the rejection's pattern matches `c`.
    pub fn matches(&self, c: ChildRef<'_>) -> bool {
        self.child.matches(c)
    }

    /// Whether it is active at the parent's generation `parent_generation`.
    pub fn active_at(&self, parent_generation: i64) -> bool {
        self.generation == 0 || self.generation == parent_generation
    }
}

/// Most `kausality.io/trace-*` labels an object's hops carry (the first in the annotations'
/// order); the rest are left out and reported as problems.
pub const MAX_TRACE_LABELS: usize = 16;
/// Longest trace label key (after the prefix): Kubernetes allows 63 bytes in a key's name
/// part, of which the prefix takes 6.
pub const MAX_TRACE_LABEL_KEY_BYTES: usize = 57;
/// Longest trace label value kept; a longer one is cut (at a character boundary).
pub const MAX_TRACE_LABEL_VALUE_BYTES: usize = 256;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut_at(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let end = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..end]
}

pub use crate::enriched::Resolution;

/// A freeze on a parent: every child mutation is a violation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Freeze {
    /// Who froze the parent, when the annotation says.
    pub user: Option<String>,
    /// Why (`message`, or `reason`), when the annotation says.
    pub message: Option<String>,
}

/// Everything read from an object's `kausality.io/` annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Pre-approvals of drift, in the annotation's order.
    pub approvals: Vec<Approval>,
    /// Rejections of drift; any match wins over an approval.
    pub rejections: Vec<Rejection>,
    /// The freeze, when the parent is frozen.
    pub freeze: Option<Freeze>,
    /// Drift reports are silenced until this event time (µs).
    pub snooze_until_us: Option<i64>,
    /// `kausality.io/phase: initialized`.
    pub phase_initialized: bool,
    /// `kausality.io/trace-<key>: <value>`, as (key, value); shared by every trace hop of the
    /// object. `None` when there is none.
    pub trace_labels: Option<Labels>,
    /// Annotations that could not be read, with the reason (reported, never fatal).
    pub problems: Vec<String>,
    /// The annotations this was parsed from (kept for snapshots; few objects carry any).
    pub source: Annotations,
    /// Hash of the annotations this was parsed from.
    pub source_hash: u64,
}

impl Policy {
    /// Reads `a` into a policy; what cannot be read goes into `problems`, never an error.
    pub fn parse(a: &Annotations) -> Policy {
        let mut p = Policy { source_hash: a.hash, source: a.clone(), ..Policy::default() };
        let mut labels = Vec::new();
        for (k, v) in &a.entries {
            let (k, v) = (&**k, &**v);
            match k {
                APPROVALS => match serde_json::from_str::<Vec<Approval>>(v) {
                    Ok(list) => p.approvals = list,
                    Err(e) => p.problems.push(format!("{APPROVALS}: not a JSON list of approvals: {e}")),
                },
                REJECTIONS => match serde_json::from_str::<Vec<Rejection>>(v) {
                    Ok(list) => p.rejections = list,
                    Err(e) => p.problems.push(format!("{REJECTIONS}: not a JSON list of rejections: {e}")),
                },
                FREEZE => p.freeze = parse_freeze(v),
                SNOOZE => match parse_snooze(v) {
                    Some(t) => p.snooze_until_us = Some(t),
                    None if v.trim().is_empty() => {}
                    None => p
                        .problems
                        .push(format!("{SNOOZE}: expected an RFC 3339 time or {{\"expiry\": time}}, got {v:?}")),
                },
                PHASE => p.phase_initialized = v.trim() == "initialized",
                _ => {
                    if let Some(label) = k.strip_prefix(TRACE_LABEL_PREFIX) {
                        if label.is_empty() {
                        } else if labels.len() == MAX_TRACE_LABELS || label.len() > MAX_TRACE_LABEL_KEY_BYTES {
                            p.problems.push(format!(
                                "{k}: left out of traces (at most {MAX_TRACE_LABELS} trace labels of keys up to {MAX_TRACE_LABEL_KEY_BYTES} bytes)"
                            ));
                        } else {
                            labels.push((Box::from(label), Box::from(cut_at(v, MAX_TRACE_LABEL_VALUE_BYTES))));
                        }
                    }
                }
            }
        }
        p.trace_labels = (!labels.is_empty()).then(|| Arc::new(labels));
        p
    }

    /// Resolves a drift on `child` at the parent's `generation`; returns the resolution and,
    /// for a `once` approval, the key that is now used up.
    pub fn resolve(&self, child: ChildRef<'_>, generation: i64, used: &[u64]) -> (Resolution, Option<u64>) {
        if self.rejections.iter().any(|r| r.matches(child) && r.active_at(generation)) {
            return (Resolution::Rejected, None);
        }
        for a in &self.approvals {
            if !a.matches(child) || !a.valid_at(generation) {
                continue;
            }
            if a.mode == ApprovalMode::Once {
                let key = a.key();
                if used.contains(&key) {
                    continue;
                }
                return (Resolution::Approved, Some(key));
            }
            return (Resolution::Approved, None);
        }
        (Resolution::Unresolved, None)
    }

    /// Whether the snooze holds at event time `time_us` (µs): drift reports are silenced.
    pub fn snoozed_at(&self, time_us: i64) -> bool {
        self.snooze_until_us.is_some_and(|until| time_us < until)
    }
}

/// Recently parsed policies by the hash of their annotations. Objects made from one template
/// carry the same annotations (every Deployment of a team with the same trace label): they share
/// one parsed policy instead of a copy each, and while they have no other rare part, one box of
/// rare parts holding it ([`SharedPolicy`]).
#[derive(Debug)]
pub struct PolicyCache(Mutex<LruCache<u64, SharedPolicy, FastBuild>>);

impl Default for PolicyCache {
    /// Room for a thousand distinct policies: more than the templates of a large cluster.
    fn default() -> Self {
        PolicyCache::new(1024)
    }
}

impl PolicyCache {
    /// A cache of at most `capacity` policies (at least 1).
    pub fn new(capacity: usize) -> Self {
        PolicyCache(Mutex::new(LruCache::with_hasher(
            NonZeroUsize::new(capacity.max(1)).expect("non-zero"),
            FastBuild::default(),
        )))
    }

    /// The policy of `annotations`: the cached one when the same annotations were seen
    /// recently, else parsed now.
    pub fn get(&self, annotations: &Annotations) -> SharedPolicy {
        let cached = self.0.lock().expect("policy cache lock poisoned").get(&annotations.hash).cloned();
        if let Some(p) = cached.filter(|p| p.policy().source.entries == annotations.entries) {
            return p;
        }
        let p = SharedPolicy::new(Arc::new(Policy::parse(annotations)));
        self.0.lock().expect("policy cache lock poisoned").put(annotations.hash, p.clone());
        p
    }
}

/// `"true"`, or a JSON object (`{"user": ..., "message": ...}`); `"false"` or empty is no freeze.
fn parse_freeze(v: &str) -> Option<Freeze> {
    let t = v.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("false") {
        return None;
    }
    #[derive(Deserialize)]
    struct F {
        #[serde(default)]
        user: Option<String>,
        #[serde(default, alias = "reason")]
        message: Option<String>,
    }
    match serde_json::from_str::<F>(t) {
        Ok(f) => Some(Freeze { user: f.user, message: f.message }),
        Err(_) => Some(Freeze::default()),
    }
}

/// An RFC 3339 time, or a JSON object with `expiry` (or `until`, `expiresAt`).
fn parse_snooze(v: &str) -> Option<i64> {
    let t = v.trim();
    if let Some(us) = parse_rfc3339_micros(t) {
        return Some(us);
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct S {
        #[serde(default, alias = "until", alias = "expiresAt", alias = "expires")]
        expiry: Option<String>,
    }
    serde_json::from_str::<S>(t).ok()?.expiry.and_then(|e| parse_rfc3339_micros(e.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(pairs: &[(&str, &str)]) -> Policy {
        let a = Annotations { entries: pairs.iter().map(|(k, v)| (Box::from(*k), Box::from(*v))).collect(), hash: 1 };
        Policy::parse(&a)
    }

    const RS: ChildRef<'static> = ChildRef { api_version: "apps/v1", kind: "ReplicaSet", name: "web-1" };

    #[test]
    fn approval_modes() {
        let p = policy(&[(
            APPROVALS,
            r#"[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3,"mode":"once"}]"#,
        )]);
        let (r, used) = p.resolve(RS, 3, &[]);
        assert_eq!(r, Resolution::Approved);
        let used = used.expect("a once approval is used up");
        assert_eq!(p.resolve(RS, 3, &[used]).0, Resolution::Unresolved, "used up by the first drift");
        assert_eq!(p.resolve(RS, 4, &[]).0, Resolution::Unresolved, "only at its generation");

        let p = policy(&[(
            APPROVALS,
            r#"[{"apiVersion":"*","kind":"ReplicaSet","name":"*","generation":3,"mode":"generation"}]"#,
        )]);
        assert_eq!(p.resolve(RS, 3, &[]), (Resolution::Approved, None));
        assert_eq!(p.resolve(RS, 3, &[]), (Resolution::Approved, None), "not used up");
        assert_eq!(p.resolve(RS, 2, &[]).0, Resolution::Unresolved);

        let p =
            policy(&[(APPROVALS, r#"[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]"#)]);
        assert_eq!(p.resolve(RS, 99, &[]), (Resolution::Approved, None));
        assert_eq!(p.resolve(ChildRef { name: "web-2", ..RS }, 99, &[]).0, Resolution::Unresolved, "name must match");

        let p =
            policy(&[(APPROVALS, r#"[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3}]"#)]);
        assert!(p.resolve(RS, 3, &[]).1.is_some(), "mode defaults to once");
    }

    #[test]
    fn rejection_wins_and_respects_generation() {
        let both = [
            (APPROVALS, r#"[{"apiVersion":"*","kind":"*","name":"*","mode":"always"}]"#),
            (REJECTIONS, r#"[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"no"}]"#),
        ];
        assert_eq!(policy(&both).resolve(RS, 1, &[]).0, Resolution::Rejected);
        let at5 = [(REJECTIONS, r#"[{"apiVersion":"*","kind":"*","name":"*","generation":5}]"#)];
        assert_eq!(policy(&at5).resolve(RS, 5, &[]).0, Resolution::Rejected);
        assert_eq!(policy(&at5).resolve(RS, 6, &[]).0, Resolution::Unresolved);
    }

    #[test]
    fn freeze_snooze_phase_labels_and_problems() {
        let p = policy(&[
            (FREEZE, r#"{"user":"alice","message":"incident 42"}"#),
            (SNOOZE, r#"{"expiry":"2030-01-01T00:00:00Z"}"#),
            (PHASE, "initialized"),
            ("kausality.io/trace-ticket", "OPS-1"),
            (APPROVALS, "not json"),
        ]);
        assert_eq!(p.freeze.as_ref().unwrap().user.as_deref(), Some("alice"));
        assert!(p.snoozed_at(parse_rfc3339_micros("2029-12-31T00:00:00Z").unwrap()));
        assert!(!p.snoozed_at(parse_rfc3339_micros("2030-01-02T00:00:00Z").unwrap()));
        assert!(p.phase_initialized);
        assert_eq!(
            p.trace_labels.as_deref().map(Vec::as_slice),
            Some(&[(Box::from("ticket"), Box::from("OPS-1"))][..])
        );
        assert_eq!(p.problems.len(), 1);
        assert!(policy(&[(FREEZE, "true")]).freeze.is_some());
        assert!(policy(&[(FREEZE, "false")]).freeze.is_none());
        assert!(policy(&[(SNOOZE, "2030-01-01T00:00:00Z")]).snooze_until_us.is_some());
    }

    #[test]
    fn trace_labels_are_bounded_in_number_key_and_value() {
        let keys: Vec<String> = (0..40).map(|i| format!("kausality.io/trace-k{i:02}")).collect();
        let long_value = format!("{}é{}", "v".repeat(255), "x".repeat(100_000));
        let long_key = format!("kausality.io/trace-{}", "k".repeat(58));
        let mut entries: Vec<(&str, &str)> = vec![(&long_key, "a"), ("kausality.io/trace-big", &long_value)];
        entries.extend(keys.iter().map(|k| (k.as_str(), "v")));
        let p = policy(&entries);
        let labels = p.trace_labels.as_deref().unwrap();
        assert_eq!(labels.len(), MAX_TRACE_LABELS);
        assert_eq!(
            (&*labels[0].0, labels[0].1.len()),
            ("big", 255),
            "cut before the two-byte character that would pass 256 bytes"
        );
        assert_eq!(&*labels[15].0, "k14");
        assert_eq!(p.problems.len(), 1 + 40 - 15, "the long key and the labels past 16: {:?}", p.problems);
        assert!(p.problems[0].contains(&long_key));
        let fits = format!("kausality.io/trace-{}", "k".repeat(57));
        assert_eq!(policy(&[(&fits, "x")]).trace_labels.as_deref().map(Vec::len), Some(1));
    }

    #[test]
    fn same_annotations_share_one_policy() {
        let cache = PolicyCache::new(16);
        let a = |v: &str| Annotations { entries: vec![(Box::from("kausality.io/trace-team"), Box::from(v))], hash: 7 };
        let (p, q) = (cache.get(&a("red")), cache.get(&a("red")));
        assert!(Arc::ptr_eq(p.policy(), q.policy()));
        let other = cache.get(&a("blue"));
        assert_eq!(
            other.policy().trace_labels.as_deref().map(Vec::as_slice),
            Some(&[(Box::from("team"), Box::from("blue"))][..]),
            "same hash, other entries: parsed anew"
        );
    }
}
