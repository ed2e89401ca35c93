//! What a drift reverts (DESIGN §1.8). A write by someone other than the controller to a
//! child is kept on the child as an origin write, with the leaf fields it changed when the
//! child's content before it is in the cache of recent contents; a removal of a child by
//! someone other than the controller is kept on the parent. A later write of the controller
//! to the child settles the child's origin writes (those whose fields it overwrites, or all of
//! them when the fields are unknown) and a controller's create takes the removed sibling it
//! replaces (by name first, else the oldest): a drift names them in `reverts`, any other class drops them silently (the parent
//! asked for the change).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use serde_json::value::RawValue;
use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64;

use super::child::{Child, Written};
use super::{Class, Engine, Identity};
use crate::enriched::{FieldOut, RevertOut, RevertedObject};
use crate::filter::Verb;
use crate::state::{FastBuild, FieldChange, ObjKey, OriginWrite};
use crate::write::{Uid, Write};

mod put_back;
mod raw;
pub use put_back::field_label;
use raw::diff_texts;

/// Most fields an origin write records (the first by path).
const MAX_FIELDS: usize = 32;
/// Longest value kept as it is; a longer one is kept as its length and hash.
const MAX_VALUE_BYTES: usize = 256;

/// A person, for `revertsPerson` and the revert metric: a user whose name does not start with
/// `system:` (service accounts `system:serviceaccount:...`, nodes `system:node:...`, the
/// control plane's own `system:kube-controller-manager`, ...). Impersonation counts as the
/// impersonated user (the effective user of the write).
pub fn is_person(user: &str) -> bool {
    !user.is_empty() && !user.starts_with("system:")
}

/// The leaf fields of a content text: dotted path (`spec.replicas`,
/// `spec.template.spec.containers[0].image`) to compact JSON text. Leaves are scalars and
/// empty arrays or objects.
pub(super) type Leaves = BTreeMap<String, Box<str>>;

/// A content text parsed, for [`diff_values`] and reading leaves by path.
fn parse(content: &str) -> Option<Value> {
    serde_json::from_str(content).ok()
}

/// The leaves of a content text (`None`: not JSON).
pub fn leaves(content: &str) -> Option<Leaves> {
    let v: Value = serde_json::from_str(content).ok()?;
    let mut out = Leaves::new();
    walk(&v, &mut String::new(), &mut out);
    Some(out)
}

fn walk(v: &Value, path: &mut String, out: &mut Leaves) {
    let len = path.len();
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                walk(child, path, out);
                path.truncate(len);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, child) in a.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                walk(child, path, out);
                path.truncate(len);
            }
        }
        leaf => {
            out.insert(path.clone(), leaf_text(leaf));
        }
    }
}

/// A leaf's text as [`Leaves`] keep it: compact JSON, or its length and hash when long.
fn leaf_text(leaf: &Value) -> Box<str> {
    let text = leaf.to_string();
    let kept = if text.len() > MAX_VALUE_BYTES {
        format!("\"({} bytes, xxh3 {:016x})\"", text.len(), xxh3_64(text.as_bytes()))
    } else {
        text
    };
    kept.into_boxed_str()
}

/// The value of the leaf at `path` (as [`leaves`] names it) in a parsed content: `None` when
/// there is none (absent, or a non-empty object or array there).
fn leaf_at(content: &Value, path: &str) -> Option<Box<str>> {
    lookup(content, path, true).map(leaf_text)
}

/// The leaf under `rest`, what is left of a path below `v` (`.key...` or `[i]...`; at the
/// root the first key has no dot). A key may hold dots (`app.kubernetes.io/name`), so every
/// key the path starts with is tried, until one reading ends at a leaf (`a.b` in
/// `{"a":{"b":[1]},"a.b":2}` is the key `a.b`: `a` then `b` ends at an array).
fn lookup<'a>(v: &'a Value, rest: &str, root: bool) -> Option<&'a Value> {
    if rest.is_empty() {
        return is_leaf(v).then_some(v);
    }
    match v {
        Value::Object(m) => {
            let rest = if root { rest } else { rest.strip_prefix('.')? };
            m.iter().filter(|(k, _)| rest.starts_with(k.as_str())).find_map(|(k, child)| {
                let after = &rest[k.len()..];
                (after.is_empty() || after.starts_with('.') || after.starts_with('['))
                    .then(|| lookup(child, after, false))
                    .flatten()
            })
        }
        Value::Array(a) => {
            let inner = rest.strip_prefix('[')?;
            let close = inner.find(']')?;
            let i: usize = inner[..close].parse().ok()?;
            lookup(a.get(i)?, &inner[close + 1..], false)
        }
        _ => None,
    }
}

/// The leaf fields that differ between two parsed contents: what [`diff`] gives for their
/// [`leaves`], found by walking both at once, so that the leaves that did not change are never
/// spelled out. (The service reads them from the texts, [`diff_texts`]; this is what those
/// are held to.)
#[cfg(test)]
pub(super) fn diff_values(before: &Value, after: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    diff_walk(Some(before), Some(after), &mut String::new(), &mut out);
    merge_changes(out)
}

/// The changes [`diff_walk`] found, by path, each once, at most [`MAX_FIELDS`].
fn merge_changes(mut out: Vec<FieldChange>) -> Vec<FieldChange> {
    out.sort_by(|a, b| a.path.cmp(&b.path));
    // One path spelled by two shapes (a key `a.b` before, `a` holding `b` after) is one leaf,
    // as [`leaves`] names it: its value before from the one, after from the other.
    let mut merged: Vec<FieldChange> = Vec::with_capacity(out.len());
    for f in out {
        match merged.last_mut() {
            Some(last) if last.path == f.path => {
                last.before = last.before.take().or(f.before);
                last.after = last.after.take().or(f.after);
            }
            _ => merged.push(f),
        }
    }
    merged.retain(|f| f.before != f.after);
    merged.truncate(MAX_FIELDS);
    merged
}

fn diff_walk(before: Option<&Value>, after: Option<&Value>, path: &mut String, out: &mut Vec<FieldChange>) {
    let len = path.len();
    match (before, after) {
        (Some(Value::Object(b)), Some(Value::Object(a))) if !b.is_empty() && !a.is_empty() => {
            // Both maps are sorted by key: walk them side by side.
            for (key, bv, av) in side_by_side(b.iter(), a.iter()) {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                diff_walk(bv, av, path, out);
                path.truncate(len);
            }
        }
        (Some(Value::Array(b)), Some(Value::Array(a))) if !b.is_empty() && !a.is_empty() => {
            use std::fmt::Write as _;
            for i in 0..b.len().max(a.len()) {
                let _ = write!(path, "[{i}]");
                diff_walk(b.get(i), a.get(i), path, out);
                path.truncate(len);
            }
        }
        (Some(b), Some(a)) if is_leaf(b) && is_leaf(a) => {
            if b != a {
                let (bt, at) = (leaf_text(b), leaf_text(a));
                if bt != at {
                    out.push(FieldChange { path: path.as_str().into(), before: Some(bt), after: Some(at) });
                }
            }
        }
        (None, None) => {}
        _ => {
            // Different shapes, or one side absent: the leaves of each side, compared.
            let side = |v: Option<&Value>| {
                let mut l = Leaves::new();
                if let Some(v) = v {
                    walk(v, &mut path.clone(), &mut l);
                }
                l
            };
            out.extend(diff(&side(before), &side(after)).into_iter().filter(|f| f.before != f.after));
        }
    }
}

/// The members of two maps sorted by key, side by side: each key once, with its value in
/// each map (`None` where it has none).
fn side_by_side<'m, K: Ord + 'm, V: 'm>(
    before: impl Iterator<Item = (&'m K, &'m V)>,
    after: impl Iterator<Item = (&'m K, &'m V)>,
) -> impl Iterator<Item = (&'m K, Option<&'m V>, Option<&'m V>)> {
    let (mut bi, mut ai) = (before.peekable(), after.peekable());
    std::iter::from_fn(move || match (bi.peek(), ai.peek()) {
        (None, None) => None,
        (Some((bk, _)), Some((ak, _))) if bk == ak => {
            let ((k, bv), (_, av)) = (bi.next()?, ai.next()?);
            Some((k, Some(bv), Some(av)))
        }
        (Some((bk, _)), Some((ak, _))) if bk > ak => ai.next().map(|(k, av)| (k, None, Some(av))),
        (Some(_), _) => bi.next().map(|(k, bv)| (k, Some(bv), None)),
        (None, Some(_)) => ai.next().map(|(k, av)| (k, None, Some(av))),
    })
}

/// A scalar, or an empty object or array: what [`leaves`] keeps as one leaf.
fn is_leaf(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => true,
    }
}

/// The leaf fields that differ between `before` and `after`, by path (at most [`MAX_FIELDS`]).
pub fn diff(before: &Leaves, after: &Leaves) -> Vec<FieldChange> {
    let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| before.get(*p) != after.get(*p))
        .take(MAX_FIELDS)
        .map(|p| FieldChange { path: p.as_str().into(), before: before.get(p).cloned(), after: after.get(p).cloned() })
        .collect()
}

/// What the controller's write leaves in a child, as far as it is known.
pub(super) enum Now {
    /// Its whole content.
    Full(Value),
    /// Only these fields (a scale write: `spec.replicas`); the others did not change.
    Partial(Leaves),
    /// The child was deleted.
    Removed,
    /// Not known (kind not tracked, content not cached).
    Unknown,
}

impl Now {
    /// The value of `path` now: `Some(None)` when absent, `None` when not known.
    fn value(&self, path: &str) -> Option<Option<Box<str>>> {
        match self {
            Now::Full(v) => Some(leaf_at(v, path)),
            Now::Partial(l) => l.get(path).map(|v| Some(v.clone())),
            Now::Removed => Some(None),
            Now::Unknown => None,
        }
    }
}

/// What a write leaves in a child, as text.
enum After {
    Text(Arc<str>),
    Replicas(i64),
    Removed,
    Unknown,
}

impl After {
    fn leaves(&self) -> Now {
        match self {
            After::Text(t) => parse(t).map_or(Now::Unknown, Now::Full),
            After::Replicas(n) => {
                Now::Partial(Leaves::from([("spec.replicas".to_string(), n.to_string().into_boxed_str())]))
            }
            After::Removed => Now::Removed,
            After::Unknown => Now::Unknown,
        }
    }
}

/// What a write leaves, parsed the first time it is asked for: most writes find no other
/// user's write on the object to compare it with, and need only the fields they changed.
pub(super) struct Leaving<'a> {
    after: &'a After,
    now: std::cell::OnceCell<Now>,
}

impl<'a> Leaving<'a> {
    fn new(after: &'a After) -> Self {
        Leaving { after, now: std::cell::OnceCell::new() }
    }

    pub(super) fn now(&self) -> &Now {
        self.now.get_or_init(|| self.after.leaves())
    }
}

/// The fields a write leaving `after` changed in a content that was `before` (`None`: not
/// known).
fn changed_fields(before: Option<&str>, after: &After) -> Option<Vec<FieldChange>> {
    match after {
        After::Text(a) => diff_texts(before?, a),
        _ => None,
    }
}

/// A revert found: the origin write, and the fields the controller's write overwrote with, for
/// each, whether it restored the value before the origin write (`None`: fields unknown).
pub(super) struct Reverted {
    pub write: OriginWrite,
    pub fields: Option<Vec<(FieldChange, bool)>>,
    /// The write undone had itself put back a write of the user undoing it: a fight.
    pub fight: bool,
}

/// Splits a child's origin writes at a controller's write that leaves `now`: those it
/// reverts, and those it leaves standing. Writes older than `since_us` are dropped.
pub(super) fn settle(writes: &[OriginWrite], now: &Now, since_us: i64) -> (Vec<Reverted>, Vec<OriginWrite>) {
    let (mut reverted, mut standing) = (Vec::new(), Vec::new());
    for w in writes.iter().filter(|w| w.time_us >= since_us) {
        let Some(fields) = w.fields.as_deref() else {
            reverted.push(Reverted { write: w.clone(), fields: None, fight: false });
            continue;
        };
        if matches!(now, Now::Unknown) {
            reverted.push(Reverted { write: w.clone(), fields: None, fight: false });
            continue;
        }
        let overwritten: Vec<(FieldChange, bool)> = fields
            .iter()
            .filter_map(|f| {
                let value = now.value(&f.path)?;
                (value != f.after).then(|| (f.clone(), value == f.before))
            })
            .collect();
        if overwritten.is_empty() {
            standing.push(w.clone());
        } else {
            reverted.push(Reverted { write: w.clone(), fields: Some(overwritten), fight: false });
        }
    }
    (reverted, standing)
}

type ContentMap = LruCache<ObjKey, Arc<str>, FastBuild>;

/// The recent contents of controller-owned children (DESIGN §1.8): what an origin write needs
/// to name the fields it changed. Bounded by entries and by bytes of text; the least recently
/// written go first.
pub struct Contents {
    /// The contents, and the bytes of text they hold.
    map: Mutex<(ContentMap, usize)>,
    max_entries: usize,
    max_bytes: usize,
}

impl Contents {
    /// An empty cache holding at most `max_entries` contents (at least 1) and `max_bytes` of text.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        let cap = NonZeroUsize::new(max_entries.max(1)).expect("non-zero");
        Contents {
            map: Mutex::new((LruCache::with_hasher(cap, FastBuild::default()), 0)),
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    /// Keeps `content` as the object's latest; returns the one it replaces.
    pub fn swap(&self, key: ObjKey, content: Option<Arc<str>>) -> Option<Arc<str>> {
        let mut guard = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (map, bytes) = &mut *guard;
        let old = map.pop(&key);
        *bytes -= old.as_ref().map_or(0, |o| o.len());
        if let Some(c) = content.filter(|c| c.len() <= self.max_bytes) {
            *bytes += c.len();
            if let Some((_, evicted)) = map.push(key, c) {
                *bytes -= evicted.len();
            }
            while *bytes > self.max_bytes || map.len() > self.max_entries {
                match map.pop_lru() {
                    Some((_, evicted)) => *bytes -= evicted.len(),
                    None => break,
                }
            }
        }
        old
    }

    /// (entries, bytes of text) held.
    pub fn usage(&self) -> (usize, usize) {
        let guard = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (guard.0.len(), guard.1)
    }
}

/// `spec.replicas` set to `replicas` in a content text.
pub(super) fn with_replicas(content: &str, replicas: i64) -> Option<Arc<str>> {
    let mut v: Value = serde_json::from_str(content).ok()?;
    v.get_mut("spec")?.as_object_mut()?.insert("replicas".to_string(), Value::from(replicas));
    Some(Arc::from(v.to_string()))
}

/// The write `w` to `child` as an origin write, with the fields it changed and the user whose
/// write it put back.
fn origin_write(
    w: &Write,
    child: &Child<'_>,
    fields: Option<Vec<FieldChange>>,
    reverted: Option<crate::state::Sym>,
) -> OriginWrite {
    OriginWrite {
        user: w.user,
        audit_id: w.audit_id.clone(),
        stage_timestamp: w.stage_timestamp.clone(),
        time_us: w.time_us,
        verb: w.verb,
        ty: child.ty,
        name: child.name.clone(),
        fields: fields.map(Vec::into_boxed_slice),
        reverted,
        node: None,
    }
}

/// Whether the write removes the object it names: a delete, a deletecollection, or an
/// eviction (a `create` of `pods/eviction`: a delete of the pod, DESIGN §1.5).
fn removes(w: &Write) -> bool {
    w.verb.is_delete() || w.subresource == crate::filter::Subresource::Eviction
}

impl Engine {
    /// Keeps the cache of recent contents up to date with a write to a controller-owned child
    /// and returns the content before it and what it leaves (texts, parsed only when needed).
    fn contents_at(&self, key: ObjKey, written: Written<'_>, removes: bool) -> (Option<Arc<str>>, After) {
        if removes {
            return (self.contents.swap(key, None), After::Removed);
        }
        match written {
            Written::Full(text) => (self.contents.swap(key, Some(text.clone())), After::Text(text.clone())),
            Written::Replicas(n) => {
                let before = self.contents.swap(key, None);
                match before.as_deref().and_then(|b| with_replicas(b, n)) {
                    Some(after) => {
                        self.contents.swap(key, Some(after.clone()));
                        (before, After::Text(after))
                    }
                    None => (before, After::Replicas(n)),
                }
            }
            Written::Nothing => (None, After::Unknown),
        }
    }

    /// DESIGN §1.8 for one judged write to a controller-owned child of a known parent: a write
    /// by someone else is kept as an origin write (on the child, or as a removed child on the
    /// parent); a write by the controller settles the child's origin writes and, when it
    /// creates, takes the removed sibling it replaces (by name, else the oldest). Returns the reverts of a drift (`None` for
    /// any other class).
    pub(super) fn track_origins(
        &self,
        w: &Write,
        child: &Child<'_>,
        parent: Uid,
        class: Class,
        identity: &Identity,
    ) -> Option<Vec<RevertOut>> {
        let key = ObjKey::new(w.scope, child.uid);
        let removes = removes(w);
        let (before, after) = self.contents_at(key, child.written, removes);
        if class == Class::Deleting {
            return None;
        }
        match identity {
            Identity::Undetermined => None,
            Identity::NotController(_) if removes => {
                self.store.update(&self.owner_key(w.scope, parent), |p| {
                    p.push_removed_child(OriginWrite {
                        node: child.node.cloned(),
                        ..origin_write(w, child, None, None)
                    })
                });
                None
            }
            Identity::NotController(_) => {
                let now = Leaving::new(&after);
                let fields = changed_fields(before.as_deref(), &after);
                // What it puts back of others' writes (a controller's drift undoing an earlier
                // write of this user: a fight), named though it is no drift.
                let (found, standing) = self.put_back_at(key, &now, w.user, w.time_us);
                // A write whose tracked fields all stayed as they were has nothing to revert.
                if fields.as_ref().is_none_or(|f| !f.is_empty()) || !found.is_empty() {
                    let origin = origin_write(w, child, fields, found.first().map(|r| r.write.user));
                    self.store.update(&key, |c| {
                        if let Some(standing) = standing {
                            c.set_origin_writes(standing);
                        }
                        c.push_origin_write(origin);
                    });
                }
                (!found.is_empty()).then(|| found.into_iter().map(|r| self.revert_out(r)).collect())
            }
            Identity::Controller(_) => {
                let since = self.revert_since(w.time_us);
                let writes = self.store.read(&key, |c| c.origin_writes().to_vec()).unwrap_or_default();
                let mut reverted = Vec::new();
                if !writes.is_empty() {
                    // Its own earlier put-backs are no origin writes to it.
                    let (own, others): (Vec<OriginWrite>, Vec<OriginWrite>) =
                        writes.into_iter().partition(|o| o.user == w.user);
                    let now = after.leaves();
                    let (mut found, mut standing) = settle(&others, &now, since);
                    for r in &mut found {
                        r.fight = r.write.reverted == Some(w.user) && r.restored().next().is_some();
                    }
                    standing.extend(own.into_iter().filter(|o| o.time_us >= since));
                    // A drift that put fields back is an origin write to whom it undid: their
                    // putting them back again is a fight.
                    if class == Class::Drift {
                        if let Some(first) = found.iter().find(|r| r.restored().next().is_some()) {
                            let fields: Vec<FieldChange> = found
                                .iter()
                                .flat_map(|r| r.restored())
                                .map(|f| FieldChange {
                                    path: f.path.clone(),
                                    before: f.after.clone(),
                                    after: f.before.clone(),
                                })
                                .collect();
                            standing.push(origin_write(w, child, Some(fields), Some(first.write.user)));
                        }
                    }
                    self.store.update(&key, |c| c.set_origin_writes(standing));
                    reverted = found;
                }
                if w.verb == Verb::Create {
                    let sibling = self
                        .store
                        .update(&self.owner_key(w.scope, parent), |p| {
                            p.take_removed_child(since, child.name, child.node.map(|n| n.as_str()))
                        })
                        .flatten();
                    reverted.extend(sibling.map(|write| Reverted { write, fields: None, fight: false }));
                }
                (class == Class::Drift).then(|| reverted.into_iter().map(|r| self.revert_out(r)).collect())
            }
        }
    }

    /// A revert as the enriched event writes it.
    pub(super) fn revert_out(&self, r: Reverted) -> RevertOut {
        let w = r.write;
        let user = self.interner.resolve(w.user);
        let (api_version, kind) = self.interner.parts(w.ty);
        let raw = |t: &Option<Box<str>>| t.as_deref().and_then(|t| RawValue::from_string(t.to_string()).ok());
        RevertOut {
            person: is_person(&user),
            user,
            audit_id: w.audit_id,
            time: w.stage_timestamp,
            verb: w.verb,
            object: RevertedObject {
                api_version: self.interner.resolve(api_version),
                kind: self.interner.resolve(kind),
                name: w.name,
            },
            fields: r.fields.map(|fields| {
                fields
                    .into_iter()
                    .map(|(f, restored)| FieldOut {
                        before: raw(&f.before),
                        after: raw(&f.after),
                        path: f.path.into(),
                        restored,
                    })
                    .collect()
            }),
            fight: r.fight,
        }
    }

    /// The oldest time an origin write may have to still count, as of `time_us`.
    pub(super) fn revert_since(&self, time_us: i64) -> i64 {
        time_us.saturating_sub(self.revert_horizon_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Sym, Ty};
    use crate::write::Name;
    use proptest::prelude::*;

    /// JSON values of contents' shapes: keys with dots and brackets (labels), arrays, empty
    /// containers, long strings, and the same small key set so that two draws overlap.
    pub(super) fn content() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec!["spec", "replicas", "a", "a.b", "app.kubernetes.io/name", "x[0]", "b"]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..4).prop_map(Value::from),
            prop::sample::select(vec!["v", "w", "a.b"]).prop_map(Value::from),
            (250usize..260).prop_map(|n| Value::from("y".repeat(n))),
            Just(Value::Object(Default::default())),
            Just(Value::Array(Vec::new())),
        ];
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone().prop_map(String::from), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Walking two contents at once finds exactly the changed leaves that comparing all
        /// their leaves finds, and a leaf read by path is the one `leaves` names.
        #[test]
        fn diff_values_is_diff_of_leaves(before in content(), after in content()) {
            let (lb, la) = (leaves(&before.to_string()).unwrap(), leaves(&after.to_string()).unwrap());
            // Paths that two shapes spell alike (a key `a.b` and `a` holding `b`) are one leaf
            // in a map and can be two in a walk: such draws say nothing.
            let spelled_once = |v: &Value, l: &Leaves| { let mut n = 0; count_leaves(v, &mut n); n == l.len() };
            prop_assume!(spelled_once(&before, &lb) && spelled_once(&after, &la));
            prop_assert_eq!(diff_values(&before, &after), diff(&lb, &la));
            for (path, value) in &la {
                let got = leaf_at(&after, path);
                prop_assert_eq!(got.as_ref(), Some(value), "{}", path);
            }
            for path in lb.keys().filter(|p| !la.contains_key(*p)) {
                prop_assert_eq!(leaf_at(&after, path), None, "{}", path);
            }
        }
    }

    fn count_leaves(v: &Value, n: &mut usize) {
        match v {
            Value::Object(m) if !m.is_empty() => m.values().for_each(|c| count_leaves(c, n)),
            Value::Array(a) if !a.is_empty() => a.iter().for_each(|c| count_leaves(c, n)),
            _ => *n += 1,
        }
    }

    #[test]
    fn one_path_spelled_by_two_shapes_is_one_leaf() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(diff_values(&v(r#"{"a.b":null}"#), &v(r#"{"a":{"b":null}}"#)), Vec::new());
        let d = diff_values(&v(r#"{"a.b":1}"#), &v(r#"{"a":{"b":2}}"#));
        assert_eq!(d, diff(&leaves(r#"{"a.b":1}"#).unwrap(), &leaves(r#"{"a":{"b":2}}"#).unwrap()));
        assert_eq!((&*d[0].path, d[0].before.as_deref(), d[0].after.as_deref()), ("a.b", Some("1"), Some("2")));
    }

    /// Found by the property test above (before `null`, after this): `a.b` read as `a` then
    /// `b` ends at an array, not a leaf; the key `a.b` is the leaf.
    #[test]
    fn a_path_read_two_ways_is_the_reading_that_ends_at_a_leaf() {
        let v: Value = serde_json::from_str(r#"{"a":{"b":[null]},"a.b":null}"#).unwrap();
        assert_eq!(leaf_at(&v, "a.b").as_deref(), Some("null"));
        assert_eq!(leaf_at(&v, "a.b[0]").as_deref(), Some("null"));
        assert_eq!(leaf_at(&v, "a"), None, "a map, not a leaf");
        let d = diff_values(&Value::Null, &v);
        let la = leaves(&v.to_string()).unwrap();
        assert_eq!(d, diff(&leaves("null").unwrap(), &la));
    }

    #[test]
    fn a_leaf_is_read_through_keys_that_hold_dots() {
        let v: Value =
            serde_json::from_str(r#"{"metadata":{"labels":{"app":"x","app.kubernetes.io/name":"shop"}},"spec":{"c":[{"image":"a:1"}],"e":{}}}"#).unwrap();
        assert_eq!(leaf_at(&v, "metadata.labels.app.kubernetes.io/name").as_deref(), Some("\"shop\""));
        assert_eq!(leaf_at(&v, "metadata.labels.app").as_deref(), Some("\"x\""));
        assert_eq!(leaf_at(&v, "spec.c[0].image").as_deref(), Some("\"a:1\""));
        assert_eq!(leaf_at(&v, "spec.e").as_deref(), Some("{}"));
        assert_eq!(leaf_at(&v, "spec.c"), None, "a non-empty array is no leaf");
        assert_eq!(leaf_at(&v, "spec.c[1].image"), None);
        assert_eq!(leaf_at(&v, "spec.missing"), None);
    }

    fn origin(fields: Option<Vec<FieldChange>>, time_us: i64) -> OriginWrite {
        OriginWrite {
            user: Sym::EMPTY,
            audit_id: Arc::from("a"),
            stage_timestamp: Arc::from(""),
            time_us,
            verb: Verb::Update,
            ty: Ty::EMPTY,
            name: Name::from("rs"),
            fields: fields.map(Vec::into_boxed_slice),
            reverted: None,
            node: None,
        }
    }

    fn l(s: &str) -> Leaves {
        leaves(s).unwrap()
    }

    #[test]
    fn leaves_are_dotted_paths_to_compact_json() {
        let got = l(
            r#"{"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"a:1","args":[]}]}},"paused":null,"sel":{}}}"#,
        );
        let keys: Vec<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "spec.paused",
                "spec.replicas",
                "spec.sel",
                "spec.template.spec.containers[0].args",
                "spec.template.spec.containers[0].image"
            ]
        );
        assert_eq!(&*got["spec.template.spec.containers[0].image"], "\"a:1\"");
        assert_eq!(&*got["spec.sel"], "{}");
        let long = format!(r#"{{"data":{{"k":"{}"}}}}"#, "x".repeat(300));
        let v = &l(&long)["data.k"];
        assert!(v.starts_with("\"(302 bytes, xxh3 ") && v.len() < 60, "{v}");
        assert!(leaves("not json").is_none());
    }

    #[test]
    fn diff_names_changed_added_and_removed_leaves() {
        let d = diff(&l(r#"{"spec":{"replicas":2,"a":1}}"#), &l(r#"{"spec":{"replicas":5,"b":true}}"#));
        let got: Vec<(&str, Option<&str>, Option<&str>)> =
            d.iter().map(|f| (&*f.path, f.before.as_deref(), f.after.as_deref())).collect();
        assert_eq!(
            got,
            [("spec.a", Some("1"), None), ("spec.b", None, Some("true")), ("spec.replicas", Some("2"), Some("5"))]
        );
        let many_before =
            l(&format!("{{\"spec\":{{{}}}}}", (0..40).map(|i| format!("\"f{i:02}\":1")).collect::<Vec<_>>().join(",")));
        assert_eq!(diff(&many_before, &Leaves::new()).len(), MAX_FIELDS);
    }

    #[test]
    fn settle_reverts_what_the_controller_overwrites_and_keeps_the_rest() {
        let scale = FieldChange { path: "spec.replicas".into(), before: Some("2".into()), after: Some("5".into()) };
        let edit = FieldChange { path: "spec.paused".into(), before: None, after: Some("true".into()) };
        let writes = vec![
            origin(Some(vec![scale.clone()]), 10),
            origin(Some(vec![edit.clone()]), 20),
            origin(None, 30),
            origin(None, 1),
        ];
        // Scaled back to 2, paused left as the person set it.
        let (reverted, standing) =
            settle(&writes, &Now::Full(serde_json::from_str(r#"{"spec":{"replicas":2,"paused":true}}"#).unwrap()), 5);
        assert_eq!(reverted.len(), 2, "the scale and the write of unknown fields; the one past the horizon is dropped");
        assert_eq!(reverted[0].fields.as_ref().unwrap(), &vec![(scale.clone(), true)]);
        assert!(reverted[1].fields.is_none());
        assert_eq!(standing, vec![writes[1].clone()]);
        // Scaled to 3: overwritten, not restored.
        let (reverted, _) = settle(&writes[..1], &Now::Partial(l(r#"{"spec":{"replicas":3}}"#)), 0);
        assert_eq!(reverted[0].fields.as_ref().unwrap(), &vec![(scale.clone(), false)]);
        // A scale leaves the edit standing; a removal reverts it (absent is its value before).
        let (reverted, standing) = settle(&writes[1..2], &Now::Partial(l(r#"{"spec":{"replicas":3}}"#)), 0);
        assert!(reverted.is_empty() && standing.len() == 1);
        let (reverted, _) = settle(&writes[1..2], &Now::Removed, 0);
        assert_eq!(reverted[0].fields.as_ref().unwrap(), &vec![(edit, true)]);
        // Nothing known of the controller's write: reverted, fields unknown.
        let (reverted, standing) = settle(&writes[..1], &Now::Unknown, 0);
        assert!(reverted[0].fields.is_none() && standing.is_empty());
    }

    #[test]
    fn contents_are_bounded_by_entries_and_bytes() {
        let key = |i: u128| ObjKey::new(Sym::EMPTY, i);
        let c = Contents::new(3, 10);
        assert_eq!(c.swap(key(1), Some("aaaa".into())), None);
        assert_eq!(c.swap(key(1), Some("bbbb".into())).as_deref(), Some("aaaa"));
        c.swap(key(2), Some("cccc".into()));
        assert_eq!(c.usage(), (2, 8));
        c.swap(key(3), Some("dd".into()));
        assert_eq!(c.usage(), (3, 10));
        c.swap(key(4), Some("e".into()));
        assert_eq!(c.usage(), (3, 7), "the least recent went");
        assert_eq!(c.swap(key(1), None), None, "evicted");
        assert_eq!(c.swap(key(5), Some("x".repeat(11).into())), None);
        assert_eq!(c.swap(key(5), None), None, "larger than the whole budget: not kept");
        assert_eq!(c.swap(key(4), None).as_deref(), Some("e"));
        assert_eq!(c.usage(), (2, 6));
    }

    #[test]
    fn persons_are_users_outside_system() {
        for (user, person) in [
            ("alice@example.com", true),
            ("kubernetes-admin", true),
            ("oidc:bob", true),
            ("system:serviceaccount:kube-system:horizontal-pod-autoscaler", false),
            ("system:node:worker-1", false),
            ("system:kube-controller-manager", false),
            ("", false),
        ] {
            assert_eq!(is_person(user), person, "{user}");
        }
    }

    #[test]
    fn replicas_are_set_in_a_content_text() {
        assert_eq!(
            with_replicas(r#"{"spec":{"replicas":2,"x":1}}"#, 5).as_deref(),
            Some(r#"{"spec":{"replicas":5,"x":1}}"#)
        );
        assert_eq!(with_replicas(r#"{"data":{}}"#, 5), None);
    }
}
