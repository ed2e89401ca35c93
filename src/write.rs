//! A [`Write`]: one completed, persisted write to the API, owned and compact, with everything
//! the model needs and nothing else. Built from a borrowed [`AuditEvent`] once the filter has
//! admitted it; this is what the reorder buffer holds and the classifier consumes.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::value::RawValue;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64, Xxh3};

use crate::config::appliers::{self, IntentFacts, Member, Membership, TargetCluster};
use crate::config::{kind_key_in, ModelConfig, KIND_KEY_BYTES};
use crate::decode::time::parse_rfc3339_micros;
use crate::decode::{
    in_progress, AuditEvent, Invalid, InvalidReason, Location, ObjectView, StatusView, ANNOTATION_PREFIX,
};
use crate::filter::{Admitted, Ignored, Subresource, Verb};
use crate::intern::{Interner, Marks, Sym, Ty};

/// An object UID as a map key: the 128 bits of a UUID, or a 128-bit hash of any other string.
pub type Uid = u128;

pub use crate::intern::Name;

/// The map key of a UID string: a lower-case UUID's own 128 bits, any other string's xxh3-128 hash.
pub fn uid_key(uid: &str) -> Uid {
    parse_uuid(uid).unwrap_or_else(|| xxh3_128(uid.as_bytes()))
}

fn parse_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    // The digits of the five groups by table, without a branch each: an object's UIDs are
    // read at every write (its own, its owners').
    let (mut hi, mut lo, mut bad) = (0u64, 0u64, 0u8);
    for &c in b[0..8].iter().chain(&b[9..13]).chain(&b[14..18]) {
        let d = HEX_DIGIT[c as usize];
        bad |= d;
        hi = hi << 4 | u64::from(d);
    }
    for &c in b[19..23].iter().chain(&b[24..36]) {
        let d = HEX_DIGIT[c as usize];
        bad |= d;
        lo = lo << 4 | u64::from(d);
    }
    if bad & 0xF0 == 0 {
        return Some(u128::from(hi) << 64 | u128::from(lo));
    }
    parse_uuid_lenient(b)
}

/// A UUID's text with something other than 32 lower-case hex digits between its dashes: a
/// dash among the digits is skipped (as UIDs have always been keyed), anything else refused.
fn parse_uuid_lenient(b: &[u8]) -> Option<u128> {
    let mut v: u128 = 0;
    for &c in b {
        let d = match c {
            b'-' => continue,
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            // Upper case is a different string, so it must not collide with the lower-case UUID.
            _ => return None,
        };
        v = (v << 4) | d as u128;
    }
    Some(v)
}

/// The value of each lower-case hex digit; 0xFF for every other byte.
const HEX_DIGIT: [u8; 256] = {
    let mut t = [0xFF; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Where the observed generation came from (DESIGN §1.3), in order of precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ObservedSource {
    /// `status.observedGeneration`.
    Status,
    /// `observedGeneration` of the `Synced` condition.
    SyncedCondition,
    /// `observedGeneration` of the `Ready` condition.
    ReadyCondition,
    /// The generation at the parent's latest status write.
    Synthetic,
}

impl ObservedSource {
    /// As the enriched event writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ObservedSource::Status => "status",
            ObservedSource::SyncedCondition => "syncedCondition",
            ObservedSource::ReadyCondition => "readyCondition",
            ObservedSource::Synthetic => "synthetic",
        }
    }
}

/// Conditions that are `True`, as bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    /// The `Initialized` condition is `True`.
    pub initialized: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The `Available` condition is `True`.
    pub available: bool,
    /// Not a condition: the status carries `startTime` (a Job its controller started).
    pub started: bool,
}

/// The controller ownerReference of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerLink {
    /// The owner's UID as a map key ([`uid_key`]).
    pub uid: Uid,
    /// The owner's UID as the ownerReference writes it.
    pub uid_text: Arc<str>,
    /// The owner's (apiVersion, kind).
    pub ty: Ty,
    /// The owner's name (same namespace as the child, or cluster-scoped).
    pub name: Name,
}

/// The `kausality.io/` annotations of an object, raw; parsed into a policy only when they change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// (key, value) pairs, full keys with the `kausality.io/` prefix, in the object's order
    /// (and a Helm release's trace label, last).
    pub entries: Vec<(Box<str>, Box<str>)>,
    /// Hash of all entries, to notice a change cheaply.
    pub hash: u64,
}

impl Annotations {
    /// The value of the annotation with the full key `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
    }
}

/// What the write's response says about the object.
#[derive(Clone, Debug)]
pub struct ObjectFacts {
    /// The object's UID as a map key ([`uid_key`]).
    pub uid: Uid,
    /// The object's UID as the API server wrote it, for the output.
    pub uid_text: Arc<str>,
    /// (apiVersion, kind).
    pub ty: Ty,
    /// `metadata.namespace`, the empty string for a cluster-scoped object.
    pub namespace: Sym,
    /// `metadata.name`.
    pub name: Name,
    /// `metadata.generation`, when the kind keeps one.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion`, when it is a number.
    pub resource_version: Option<u64>,
    /// The controller ownerReference, when there is one.
    pub owner: Option<OwnerLink>,
    /// Hash of `spec` (or, for kinds without one, of every top-level field but apiVersion,
    /// kind, metadata, status), configured ignored fields left out.
    pub content_hash: u64,
    /// 32 bits of the status's hash (see [`crate::state::ObjectState::status_hash`]).
    pub status_hash: Option<u32>,
    /// The generation the controller reports observed, and where that was read.
    pub observed: Option<(i64, ObservedSource)>,
    /// The conditions that are `True`.
    pub conditions: Conditions,
    /// The status shows the controller still at work on the generation it reports observed
    /// (the kind's signals of work in progress, DESIGN §1.3).
    pub in_progress: bool,
    /// `metadata.deletionTimestamp` is set: the object is being deleted.
    pub deleting: bool,
    /// Being deleted, no finalizer left and no grace period left to wait: this write was the
    /// object's last.
    pub gone: bool,
    /// The `kausality.io/` annotations (and a Helm release's trace label); `None` when there are
    /// none.
    pub annotations: Option<Box<Annotations>>,
    /// What the object wants, as JSON text (`{"spec":...}`, or the other top-level fields of a
    /// kind without `spec`): kept only for controller-owned objects of kinds whose field
    /// changes are tracked ([`ModelConfig::tracks_fields`]), so that an origin write can name
    /// the fields it changed and a drift the fields it reverts (DESIGN §1.8).
    pub content: Option<Arc<str>>,
    /// Which of the platform policies' label selectors the object's labels match, one bit each
    /// ([`ModelConfig::selector_bits`]); 0 when no policy has a selector.
    pub selector_bits: u64,
    /// The applier's parent that the object's markers name (DESIGN §1.9); `None` with a
    /// controller ownerReference, which wins.
    pub applier: Option<Box<Membership>>,
    /// The answer holds the object's metadata only (`PartialObjectMetadata`, what a client of
    /// the metadata API gets: the garbage collector orphaning or adopting an object): it says
    /// nothing of the spec or the status.
    pub metadata_only: bool,
    /// What an applier's parent shows of its intent (its source revision, DESIGN §1.9):
    /// only for the parents of appliers whose intent is a revision.
    pub intent: Option<Box<IntentFacts>>,
    /// An applier's parent that applies to another cluster: that cluster's name (`*`: any),
    /// DESIGN §1.9.
    pub target_cluster: Option<Arc<str>>,
    /// A pod's node ([`pod_node`]), for its create and its delete only: what a DaemonSet's pod
    /// keeps when its controller replaces it, as a StatefulSet's pod keeps its name (DESIGN §1.8).
    pub node: Option<Name>,
}

impl ObjectFacts {
    /// Marks the strings and types the facts hold, for a sweep of the interner.
    pub fn mark(&self, m: &mut Marks) {
        m.ty(self.ty);
        m.sym(self.namespace);
        if let Some(o) = &self.owner {
            m.ty(o.ty);
        }
    }
}

/// What was written.
#[derive(Clone, Debug)]
pub enum Target {
    /// A full object (create, update, patch, status write, or a delete that returned it).
    Object(ObjectFacts),
    /// A write through the `scale` subresource: only the UID, the new resourceVersion and
    /// `spec.replicas` are known.
    Scale {
        /// The object's UID as a map key ([`uid_key`]).
        uid: Uid,
        /// The object's UID as the API server wrote it.
        uid_text: Arc<str>,
        /// The scaled object's namespace (the `Scale`'s, else the objectRef's).
        namespace: Sym,
        /// The scaled object's name (the `Scale`'s, else the objectRef's).
        name: Name,
        /// `objectRef.resource` (`deployments`).
        resource: Sym,
        /// The scaled object's apiVersion, from the objectRef (`apps/v1`).
        api_version: Sym,
        /// `spec.replicas` of the `Scale`, when present.
        replicas: Option<i64>,
    },
    /// A delete answered with a `Status`: the object is gone, known by UID and objectRef only.
    Gone {
        /// The object's UID as a map key ([`uid_key`]).
        uid: Uid,
        /// The object's UID as the API server wrote it.
        uid_text: Arc<str>,
        /// `objectRef.namespace`.
        namespace: Sym,
        /// `objectRef.name`.
        name: Name,
        /// The objectRef's apiVersion and the kind of its resource.
        ty: Ty,
    },
    /// A deletecollection: every deleted object.
    Many(Vec<ObjectFacts>),
    /// An eviction (`create pods/eviction`): a delete of the pod, answered with a `Status`, so
    /// known only by the objectRef's namespace and name; its UID comes from state.
    Eviction {
        /// The pod's namespace.
        namespace: Sym,
        /// The pod's name.
        name: Name,
        /// The resourceVersion the reorder buffer placed it after (set when it is released),
        /// to tell which pod of that name it meant when it comes late.
        place: Option<u64>,
    },
    /// Not an audit event: a trace message (docs/scale-out.md, "Traces across partitions"),
    /// the trace that the object's producing write (the write's user and time) extended where
    /// it was judged. Applied to the object's state here; emits nothing.
    Trace {
        /// The object whose trace it is.
        uid: Uid,
        /// The trace its producing write extended.
        prev: crate::trace::Trace,
    },
}

impl Write {
    /// The UIDs of the objects the write names (none for an eviction, which names its pod).
    pub fn uids(&self) -> impl Iterator<Item = Uid> + '_ {
        let (one, many): (Option<Uid>, &[ObjectFacts]) = match &self.target {
            Target::Object(f) => (Some(f.uid), &[]),
            Target::Scale { uid, .. } | Target::Gone { uid, .. } | Target::Trace { uid, .. } => (Some(*uid), &[]),
            Target::Many(items) => (None, items),
            Target::Eviction { .. } => (None, &[]),
        };
        one.into_iter().chain(many.iter().map(|f| f.uid)).filter(|u| *u != 0)
    }

    /// Marks the strings and types the write holds (a write held in a reorder buffer), for a
    /// sweep of the interner.
    pub fn mark(&self, m: &mut Marks) {
        m.sym(self.cluster);
        m.sym(self.scope);
        m.sym(self.user);
        m.sym(self.resource);
        match &self.target {
            Target::Object(f) => f.mark(m),
            Target::Scale { namespace, resource, api_version, .. } => {
                [*namespace, *resource, *api_version].into_iter().for_each(|s| m.sym(s))
            }
            Target::Gone { namespace, ty, .. } => {
                m.sym(*namespace);
                m.ty(*ty);
            }
            Target::Many(items) => items.iter().for_each(|f| f.mark(m)),
            Target::Eviction { namespace, .. } => m.sym(*namespace),
            Target::Trace { prev, .. } => {
                let mut cur = Some(prev);
                while let Some(n) = cur {
                    m.ty(n.head().ty);
                    if let Some(u) = n.head().user {
                        m.sym(u);
                    }
                    cur = n.prev();
                }
            }
        }
    }
}

/// One completed, persisted write, as the reorder buffer holds it and the model applies it.
#[derive(Clone, Debug)]
pub struct Write {
    /// Arrival order, the tie-breaker of the reorder buffer.
    pub seq: u64,
    /// The cluster the event came from (the source's configured name).
    pub cluster: Sym,
    /// The event's auditID, the key duplicates are dropped by.
    pub audit_id: Arc<str>,
    /// Event time (stageTimestamp) in µs since the epoch; 0 when unknown.
    pub time_us: i64,
    /// When the API server received the request (requestReceivedTimestamp), in µs since the
    /// epoch; 0 when unknown. Orders a write that has no resourceVersion: a request that
    /// causes another is always received before it, while their stageTimestamps (taken when
    /// each response completes) can come in either order under load.
    pub received_us: i64,
    /// The stageTimestamp as the API server wrote it, for the output.
    pub stage_timestamp: Arc<str>,
    /// The request's verb.
    pub verb: Verb,
    /// The subresource written, when one of those the filter admits.
    pub subresource: Subresource,
    /// The effective user: the impersonated user when present, else the authenticated one.
    pub user: Sym,
    /// The field manager the request named (`?fieldManager=` in its URI), when it is an
    /// applier profile's: that applier wrote it, whoever it acted as.
    pub field_manager: Option<Sym>,
    /// The written object's resourceVersion: the order of writes within a cluster.
    pub resource_version: Option<u64>,
    /// `objectRef.resource` and `objectRef.namespace`, for scoping.
    pub resource: Sym,
    /// What was written.
    pub target: Target,
    /// Set by the reorder buffer when the write came after later writes were applied.
    pub late: bool,
    /// Read again after a restart only to bring the state up to date: its outputs were
    /// written before the restart, so it is classified and applied but not emitted.
    pub silent: bool,
    /// The Kafka partition the write came from, when its state is kept per partition (a
    /// state changelog): the objects it changes belong to that partition.
    pub partition: Option<i32>,
    /// Whose state the write reads and changes: its cluster, or, with a state kept per
    /// partition, the cluster's state of its partition (each partition judges its writes by
    /// what that partition showed, as the process that owned it before did).
    pub scope: Sym,
}

/// Why an admitted event still could not become a [`Write`].
#[derive(Debug)]
pub enum Rejected {
    /// The write is one the filter lets through but the model cannot use (no object, e.g.).
    Ignored(Ignored),
    /// The event is malformed (a mutating event without a user, e.g.).
    Invalid(Invalid),
}

/// Context for building writes: the interner and the model's configuration.
pub struct Extractor<'c> {
    /// Interns users, kinds, namespaces and clusters into the write's handles.
    pub interner: &'c Interner,
    /// The model's options: ignored fields, tracked kinds, selectors, appliers.
    pub config: &'c ModelConfig,
}

/// The `fieldManager` query parameter of a request URI, percent-decoded.
fn field_manager(uri: &str) -> Option<Cow<'_, str>> {
    let (_, query) = uri.split_once('?')?;
    let value = query.split('&').find_map(|kv| kv.strip_prefix("fieldManager="))?;
    if !value.contains('%') && !value.contains('+') {
        return Some(Cow::Borrowed(value));
    }
    let mut out = Vec::with_capacity(value.len());
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?, 16) {
                    Ok(b) => out.push(b),
                    Err(_) => return None,
                }
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok().map(Cow::Owned)
}

impl Extractor<'_> {
    /// The [`Write`] of an admitted event, or why it cannot be one: its user, target object (or
    /// subresource's answer) and times read once, here, on the decoding thread.
    pub fn extract(
        &self,
        ev: &AuditEvent<'_>,
        adm: Admitted,
        cluster: Sym,
        seq: u64,
        location: Location,
    ) -> Result<Write, Rejected> {
        let user = ev.effective_user().ok_or_else(|| {
            Rejected::Invalid(
                Invalid::new(location, InvalidReason::MissingField, "mutating event without user.username or user.uid")
                    .at_field("user"),
            )
        })?;
        let stage_ts = ev.event_time().unwrap_or("");
        let oref = ev.object_ref.as_ref();
        let resource = self.interner.intern(oref.and_then(|o| o.resource.as_deref()).unwrap_or(""));
        let target = match (adm.subresource, ev.response_object.as_ref()) {
            (Subresource::Eviction, _) => {
                let name = oref
                    .and_then(|o| o.name.as_deref())
                    .filter(|n| !n.is_empty())
                    .ok_or(Rejected::Ignored(Ignored::NoObject))?;
                Target::Eviction {
                    namespace: self.interner.intern(oref.and_then(|o| o.namespace.as_deref()).unwrap_or("")),
                    name: Name::from(name),
                    place: None,
                }
            }
            (Subresource::Scale, Some(obj)) => {
                let uid = obj.metadata.uid.as_deref().or(oref.and_then(|o| o.uid.as_deref()));
                let uid = uid.filter(|u| !u.is_empty()).ok_or(Rejected::Ignored(Ignored::NoObject))?;
                Target::Scale {
                    uid: uid_key(uid),
                    uid_text: Arc::from(uid),
                    namespace: self.interner.intern(
                        obj.metadata.namespace.as_deref().or(oref.and_then(|o| o.namespace.as_deref())).unwrap_or(""),
                    ),
                    name: Name::from(
                        obj.metadata.name.as_deref().or(oref.and_then(|o| o.name.as_deref())).unwrap_or(""),
                    ),
                    resource,
                    api_version: self.interner.intern(&ref_api_version(oref)),
                    replicas: obj.spec.and_then(scale_replicas),
                }
            }
            (_, Some(obj)) if obj.is_list() => {
                let items = obj.field("items").map(|raw| self.list_items(obj, raw)).unwrap_or_default();
                Target::Many(items)
            }
            (_, Some(obj)) if obj.is_status() || obj.metadata.uid.is_none() => {
                // A delete answered with a Status carries the UID in `details`.
                let uid = status_details_uid(obj).or_else(|| oref.and_then(|o| o.uid.as_deref().map(str::to_string)));
                match (adm.verb, uid) {
                    (Verb::Delete, Some(uid)) if !uid.is_empty() => self.gone(&uid, oref),
                    _ => return Err(Rejected::Ignored(Ignored::NoObject)),
                }
            }
            (_, Some(obj)) => {
                let mut f = self.facts(obj).ok_or(Rejected::Ignored(Ignored::NoObject))?;
                // Only a pod's create and its removal need its node (DESIGN §1.8): no parse
                // for the many status writes of pods.
                if matches!(adm.verb, Verb::Create | Verb::Delete) && adm.subresource == Subresource::None {
                    f.node = node_of(obj);
                }
                Target::Object(f)
            }
            (_, None) => match (adm.verb, oref.and_then(|o| o.uid.as_deref())) {
                (Verb::Delete, Some(uid)) if !uid.is_empty() => self.gone(uid, oref),
                _ => return Err(Rejected::Ignored(Ignored::NoObject)),
            },
        };
        let resource_version = match &target {
            Target::Object(f) => f.resource_version,
            _ => ev.response_object.as_ref().and_then(|o| parse_rv(o.metadata.resource_version.as_deref())),
        };
        Ok(Write {
            seq,
            cluster,
            audit_id: Arc::from(ev.audit_id.as_deref().unwrap_or("")),
            time_us: parse_rfc3339_micros(stage_ts).unwrap_or(0),
            received_us: ev.request_received_timestamp.as_deref().and_then(parse_rfc3339_micros).unwrap_or(0),
            stage_timestamp: Arc::from(stage_ts),
            verb: adm.verb,
            subresource: adm.subresource,
            user: self.interner.intern(user),
            field_manager: ev
                .request_uri
                .as_deref()
                .and_then(field_manager)
                .filter(|m| self.config.appliers.knows_field_manager(m))
                .map(|m| self.interner.intern(&m)),
            resource_version,
            resource,
            target,
            late: false,
            silent: false,
            partition: None,
            scope: cluster,
        })
    }

    fn gone(&self, uid: &str, oref: Option<&crate::decode::ObjectRef<'_>>) -> Target {
        let resource = oref.and_then(|o| o.resource.as_deref()).unwrap_or("");
        Target::Gone {
            uid: uid_key(uid),
            uid_text: Arc::from(uid),
            namespace: self.interner.intern(oref.and_then(|o| o.namespace.as_deref()).unwrap_or("")),
            name: Name::from(oref.and_then(|o| o.name.as_deref()).unwrap_or("")),
            ty: self
                .interner
                .ty(self.interner.intern(&ref_api_version(oref)), self.interner.intern(kind_of_resource(resource))),
        }
    }

    /// The items of a List: the API server leaves each item's apiVersion and kind out (they are
    /// the list's: a `PodList` of `v1` holds `v1` Pods).
    fn list_items<'a>(&self, list: &ObjectView<'a>, raw: &'a RawValue) -> Vec<ObjectFacts> {
        let mut items: Vec<ObjectView<'a>> = serde_json::from_str(raw.get()).unwrap_or_default();
        let kind = list.kind.as_deref().and_then(|k| k.strip_suffix("List"));
        for item in &mut items {
            if item.api_version.as_deref().is_none_or(str::is_empty) {
                item.api_version = list.api_version.clone();
            }
            if item.kind.as_deref().is_none_or(str::is_empty) {
                item.kind = kind.map(|k| Cow::Owned(k.to_string()));
            }
        }
        items.iter().filter_map(|o| self.facts(o)).collect()
    }

    /// The facts of a full object; `None` when it has no UID (nothing to key state by).
    pub fn facts(&self, obj: &ObjectView<'_>) -> Option<ObjectFacts> {
        let md = &obj.metadata;
        let uid = md.uid.as_deref().filter(|u| !u.is_empty())?;
        let api_version = obj.api_version.as_deref().unwrap_or("");
        let kind = obj.kind.as_deref().unwrap_or("");
        let mut key_bytes = [0; KIND_KEY_BYTES];
        let key = kind_key_in(api_version, kind, &mut key_bytes);
        let status = StatusView::parse(obj.status);
        let observed = status
            .observed_generation
            .map(|g| (g, ObservedSource::Status))
            .or_else(|| {
                status
                    .condition("Synced")
                    .and_then(|c| c.observed_generation)
                    .map(|g| (g, ObservedSource::SyncedCondition))
            })
            .or_else(|| {
                status
                    .condition("Ready")
                    .and_then(|c| c.observed_generation)
                    .map(|g| (g, ObservedSource::ReadyCondition))
            });
        let owner = md.controller_ref().map(|r| {
            let uid = r.uid.as_deref().unwrap_or("");
            let api_version = self.interner.intern(r.api_version.as_deref().unwrap_or(""));
            let kind = self.interner.intern(r.kind.as_deref().unwrap_or(""));
            OwnerLink {
                uid: uid_key(uid),
                uid_text: Arc::from(uid),
                ty: self.interner.ty(api_version, kind),
                name: Name::from(r.name.as_deref().unwrap_or("")),
            }
        });
        // A Helm release is no applier (a person runs `helm upgrade`), but names the group an
        // object was installed with: a trace label, unless the object sets that label itself
        // (DESIGN §1.9).
        let release = md
            .annotation(appliers::HELM_RELEASE_NAME)
            .filter(|_| md.annotation(HELM_TRACE_LABEL).is_none())
            .map(|name| {
                let ns = md.annotation(appliers::HELM_RELEASE_NAMESPACE).unwrap_or("");
                (
                    Cow::Borrowed(HELM_TRACE_LABEL),
                    Cow::Owned(if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") }),
                )
            });
        let policy_annotations =
            md.annotations.iter().filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX)).chain(release.as_ref());
        let annotations = (policy_annotations.clone().next().is_some()).then(|| {
            let mut h = Xxh3::new();
            let entries: Vec<(Box<str>, Box<str>)> = policy_annotations
                .map(|(k, v)| {
                    h.update(k.as_bytes());
                    h.update(&[0]);
                    h.update(v.as_bytes());
                    h.update(&[0]);
                    (Box::from(k.as_ref()), Box::from(v.as_ref()))
                })
                .collect();
            Box::new(Annotations { entries, hash: h.digest() })
        });
        let namespace = md.namespace.as_deref().unwrap_or("");
        let name = md.name.as_deref().unwrap_or("");
        let label = |k: &str| md.labels.iter().find(|(lk, _)| lk == k).map(|(_, v)| v.as_ref());
        let applier = if owner.is_some() {
            None
        } else {
            let member = Member { api_version, kind, namespace, name };
            self.config.appliers.membership(&member, label, |k| md.annotation(k)).map(Box::new)
        };
        let profile = self.config.appliers.of_parent(&key).and_then(|p| self.config.appliers.get(p));
        let target_cluster = profile.and_then(|p| match &p.target_cluster {
            TargetCluster::Own => None,
            TargetCluster::Any => Some(Arc::from("*")),
            TargetCluster::Field(path) => obj.spec.and_then(|spec| spec_string(spec, path)).map(Arc::from),
        });
        let intent = profile.and_then(|p| {
            appliers::intent(
                p.intent,
                obj.status.map(RawValue::get),
                md.generation,
                md.annotation(appliers::FLUX_REQUESTED_AT),
                obj.field("operation").map(RawValue::get),
            )
            .map(Box::new)
        });
        Some(ObjectFacts {
            metadata_only: kind == "PartialObjectMetadata" && api_version.starts_with("meta.k8s.io/"),
            uid: uid_key(uid),
            uid_text: Arc::from(uid),
            ty: self.interner.ty(self.interner.intern(api_version), self.interner.intern(kind)),
            namespace: self.interner.intern(namespace),
            name: Name::from(name),
            generation: md.generation,
            resource_version: parse_rv(md.resource_version.as_deref()),
            content_hash: content_hash(obj, self.config.ignored(&key)),
            status_hash: obj.status.map(|s| xxh3_64(s.get().as_bytes()) as u32),
            observed,
            conditions: Conditions {
                initialized: status.condition_true("Initialized"),
                ready: status.condition_true("Ready"),
                available: status.condition_true("Available"),
                started: status.start_time.is_some(),
            },
            in_progress: self.config.progress(&key).is_some_and(|p| in_progress(p, obj, &status)),
            deleting: md.deletion_timestamp.as_deref().is_some_and(|t| !t.is_empty()),
            // A pod deleted with a grace period stays until the kubelet's final delete, which
            // answers with a grace period of 0.
            gone: md.deletion_timestamp.as_deref().is_some_and(|t| !t.is_empty())
                && md.finalizers == 0
                && md.deletion_grace_period_seconds.is_none_or(|g| g <= 0),
            annotations,
            selector_bits: if self.config.policy_selectors.is_empty() { 0 } else { self.config.selector_bits(label) },
            // Every object's (DESIGN §1.8: a write to any object may put back another's).
            content: if self.config.tracks_fields(&key) {
                Some(self.config.sensitive.redact(&key, content_text(obj)))
            } else {
                None
            },
            owner,
            applier,
            intent,
            target_cluster,
            node: None,
        })
    }
}

/// A pod's node ([`pod_node`]); `None` for any other object.
fn node_of(obj: &ObjectView<'_>) -> Option<Name> {
    let pod = obj.kind.as_deref() == Some("Pod") && obj.api_version.as_deref() == Some("v1");
    obj.spec.filter(|_| pod).and_then(pod_node)
}

/// The node a pod's spec ties it to: the one node its required node affinity selects by
/// `metadata.name` (what a DaemonSet's controller sets in each pod it creates: its pod on
/// that node), else `spec.nodeName` (where it was bound). `None` for a pod tied to no node.
pub fn pod_node(spec: &RawValue) -> Option<Name> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec<'a> {
        #[serde(borrow, default)]
        node_name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        affinity: Option<Affinity<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Affinity<'a> {
        #[serde(borrow, default)]
        node_affinity: Option<NodeAffinity<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct NodeAffinity<'a> {
        #[serde(borrow, default)]
        required_during_scheduling_ignored_during_execution: Option<Selector<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Selector<'a> {
        #[serde(borrow, default)]
        node_selector_terms: Vec<Term<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Term<'a> {
        #[serde(borrow, default)]
        match_fields: Vec<Requirement<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Requirement<'a> {
        #[serde(borrow, default)]
        key: Cow<'a, str>,
        #[serde(borrow, default)]
        operator: Cow<'a, str>,
        #[serde(borrow, default)]
        values: Vec<Cow<'a, str>>,
    }
    let text = spec.get();
    // Most writes of pods are status writes of bound pods: one scan before a parse.
    if !text.contains("\"nodeName\"") && !text.contains("\"matchFields\"") {
        return None;
    }
    let spec: Spec<'_> = serde_json::from_str(text).ok()?;
    let pinned = spec
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .and_then(|s| {
            s.node_selector_terms.into_iter().flat_map(|t| t.match_fields).find_map(|r| {
                (r.key == "metadata.name" && r.operator == "In" && r.values.len() == 1).then(|| r.values[0].clone())
            })
        });
    pinned.or(spec.node_name).filter(|n| !n.is_empty()).map(|n| Name::from(n.as_ref()))
}

/// The non-empty string at `path` in a spec.
fn spec_string(spec: &RawValue, path: &[String]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(spec.get()).ok()?;
    path.iter().try_fold(&v, |v, k| v.get(k.as_str()))?.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The trace label an object installed by a Helm release carries: `<namespace>/<release>`.
const HELM_TRACE_LABEL: &str = "kausality.io/trace-helm-release";

/// The kind behind a well-known resource, for objects known only by their objectRef; other
/// resources are named by their resource name.
pub fn kind_of_resource(resource: &str) -> &str {
    match resource {
        "pods" => "Pod",
        "services" => "Service",
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "serviceaccounts" => "ServiceAccount",
        "namespaces" => "Namespace",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        "replicationcontrollers" => "ReplicationController",
        "deployments" => "Deployment",
        "replicasets" => "ReplicaSet",
        "statefulsets" => "StatefulSet",
        "daemonsets" => "DaemonSet",
        "controllerrevisions" => "ControllerRevision",
        "jobs" => "Job",
        "cronjobs" => "CronJob",
        "roles" => "Role",
        "rolebindings" => "RoleBinding",
        "clusterroles" => "ClusterRole",
        "clusterrolebindings" => "ClusterRoleBinding",
        "horizontalpodautoscalers" => "HorizontalPodAutoscaler",
        "ingresses" => "Ingress",
        "networkpolicies" => "NetworkPolicy",
        "poddisruptionbudgets" => "PodDisruptionBudget",
        other => other,
    }
}

/// `group/version` of an objectRef (`version` alone for the core group).
fn ref_api_version(oref: Option<&crate::decode::ObjectRef<'_>>) -> String {
    let group = oref.and_then(|o| o.api_group.as_deref()).unwrap_or("");
    let version = oref.and_then(|o| o.api_version.as_deref()).unwrap_or("");
    match (group, version) {
        ("", v) => v.to_string(),
        (g, "") => g.to_string(),
        (g, v) => format!("{g}/{v}"),
    }
}

fn parse_rv(rv: Option<&str>) -> Option<u64> {
    rv.and_then(|s| s.parse().ok())
}

/// The UID a `Status` answer to a delete names in its `details`.
pub(crate) fn status_details_uid(obj: &ObjectView<'_>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Details {
        #[serde(default)]
        uid: Option<String>,
    }
    obj.field("details").and_then(|d| serde_json::from_str::<Details>(d.get()).ok()).and_then(|d| d.uid)
}

/// Hash of what an object *wants*: `spec`, or for spec-less kinds every top-level field but
/// apiVersion, kind, metadata and status. The API server encodes objects deterministically, so
/// the raw bytes are hashed as they are unless some fields are configured to be ignored.
fn content_hash(obj: &ObjectView<'_>, ignored: Option<&[Vec<String>]>) -> u64 {
    let mut h = Xxh3::new();
    let mut add = |key: &str, raw: &RawValue| {
        h.update(key.as_bytes());
        h.update(b"=");
        match ignored.map(|paths| paths.iter().filter(|p| p.first().is_some_and(|f| f == key)).collect::<Vec<_>>()) {
            Some(paths) if !paths.is_empty() => {
                let mut v: serde_json::Value = serde_json::from_str(raw.get()).unwrap_or(serde_json::Value::Null);
                for p in paths {
                    remove_path(&mut v, &p[1..]);
                }
                h.update(v.to_string().as_bytes());
            }
            _ => h.update(raw.get().as_bytes()),
        }
        h.update(b"\n");
    };
    if let Some(spec) = obj.spec {
        add("spec", spec);
    } else {
        for (k, v) in &obj.other {
            add(k, v);
        }
    }
    h.digest()
}

/// What an object wants as one JSON object text: `{"spec":...}`, or for kinds without `spec`
/// every top-level field but apiVersion, kind, metadata and status (as [`content_hash`] reads it).
fn content_text(obj: &ObjectView<'_>) -> Arc<str> {
    let size = match obj.spec {
        Some(spec) => spec.get().len() + 9,
        None => obj.other.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 2,
    };
    let mut out = String::with_capacity(size);
    out.push('{');
    let mut add = |key: &str, raw: &RawValue| {
        if out.len() > 1 {
            out.push(',');
        }
        // A key is written as JSON writes it; one with nothing to escape as it is.
        if key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
            out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        } else {
            out.push('"');
            out.push_str(key);
            out.push('"');
        }
        out.push(':');
        out.push_str(raw.get());
    };
    match obj.spec {
        Some(spec) => add("spec", spec),
        None => obj.other.iter().for_each(|(k, v)| add(k, v)),
    }
    out.push('}');
    Arc::from(out)
}

/// `replicas` of a `Scale`'s spec.
fn scale_replicas(spec: &RawValue) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct ScaleSpec {
        replicas: Option<i64>,
    }
    serde_json::from_str::<ScaleSpec>(spec.get()).ok().and_then(|s| s.replicas)
}

fn remove_path(v: &mut serde_json::Value, path: &[String]) {
    match path {
        [] => *v = serde_json::Value::Null,
        [last] => {
            if let Some(m) = v.as_object_mut() {
                m.remove(last);
            }
        }
        [first, rest @ ..] => {
            if let Some(child) = v.get_mut(first.as_str()) {
                remove_path(child, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_field_manager_is_read_from_the_query_and_decoded() {
        let fm = |uri: &str| field_manager(uri).map(|m| m.into_owned());
        let uri = "/apis/apps/v1/namespaces/shop/deployments/web?fieldManager=kustomize-controller&force=true";
        assert_eq!(fm(uri).as_deref(), Some("kustomize-controller"));
        assert_eq!(
            fm("/api/v1/namespaces/a/configmaps/c?force=true&fieldManager=argocd-controller").as_deref(),
            Some("argocd-controller")
        );
        assert_eq!(fm("/api/v1/x?fieldManager=my%2Dtool+v2").as_deref(), Some("my-tool v2"));
        assert_eq!(fm("/api/v1/x?fieldManagerX=a"), None);
        assert_eq!(fm("/api/v1/x?fieldManager=bad%zz"), None, "a broken escape is no name");
        assert_eq!(fm("/api/v1/namespaces/a/configmaps/fieldManager=x"), None, "only the query");
    }

    #[test]
    fn uuid_keys_are_exact_and_other_uids_hash() {
        assert_eq!(uid_key("00000000-0000-0000-0000-000000000001"), 1);
        assert_eq!(parse_uuid("0000000A-0000-0000-0000-000000000001"), None);
        assert_ne!(uid_key("my-uid"), uid_key("my-uid2"));
        assert_eq!(
            uid_key("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
            0x0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0,
            "every digit in its place"
        );
        // A dash among the digits was always skipped, not refused: the key stays what it was.
        assert_eq!(parse_uuid("00000000-0000-0000-0000-0000000000-1"), Some(1));
    }

    proptest::proptest! {
        /// The digits read by table give the key the digit-by-digit reading gives, whatever
        /// the bytes in a UUID's shape.
        #[test]
        fn a_uuid_read_by_table_is_the_uuid_read_digit_by_digit(
            s in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-fA-F]{4}-[0-9a-f-]{4}-[0-9a-gz-]{12}"
        ) {
            proptest::prop_assert_eq!(parse_uuid(&s), parse_uuid_lenient(s.as_bytes()));
        }
    }

    fn hash_of(json: &str, cfg: &ModelConfig) -> u64 {
        let o: ObjectView = serde_json::from_str(json).unwrap();
        let key = crate::config::kind_key(o.api_version.as_deref().unwrap_or(""), o.kind.as_deref().unwrap_or(""));
        content_hash(&o, cfg.ignored(&key))
    }

    #[test]
    fn content_hash_follows_spec_or_top_level_fields() {
        let cfg = ModelConfig::default();
        let a = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"a","labels":{"x":"1"}},"spec":{"replicas":1},"status":{"replicas":0}}"#;
        let b = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"a","labels":{"x":"2"}},"spec":{"replicas":1},"status":{"replicas":1}}"#;
        let c = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"a"},"spec":{"replicas":2}}"#;
        assert_eq!(hash_of(a, &cfg), hash_of(b, &cfg), "metadata and status do not count");
        assert_ne!(hash_of(a, &cfg), hash_of(c, &cfg));
        let cm1 = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"data":{"k":"1"}}"#;
        let cm2 = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","annotations":{"a":"b"}},"data":{"k":"1"}}"#;
        let cm3 = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"data":{"k":"2"}}"#;
        assert_eq!(hash_of(cm1, &cfg), hash_of(cm2, &cfg));
        assert_ne!(hash_of(cm1, &cfg), hash_of(cm3, &cfg));
    }

    #[test]
    fn a_pod_s_node_is_the_one_its_affinity_pins_else_where_it_is_bound() {
        let node = |spec: serde_json::Value| {
            pod_node(&RawValue::from_string(spec.to_string()).unwrap()).map(|n| n.to_string())
        };
        let pinned = |values: serde_json::Value| {
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": values}]}]}}},
                "containers": [{"name": "a", "image": "a:1"}]})
        };
        assert_eq!(node(pinned(json!(["n1"]))).as_deref(), Some("n1"), "a DaemonSet's pod, not bound yet");
        let mut bound = pinned(json!(["n1"]));
        bound["nodeName"] = json!("n1");
        assert_eq!(node(bound).as_deref(), Some("n1"));
        assert_eq!(node(json!({"nodeName": "n2", "containers": []})).as_deref(), Some("n2"), "bound by the scheduler");
        assert_eq!(node(json!({"containers": []})), None, "not bound yet, tied to no node");
        assert_eq!(node(pinned(json!(["n1", "n2"]))), None, "two nodes: tied to neither");
        assert_eq!(node(json!({"nodeName": ""})), None);
    }

    #[test]
    fn a_content_text_is_json_whatever_its_keys() {
        let text = |json: &str| content_text(&serde_json::from_str::<ObjectView>(json).unwrap()).to_string();
        let d = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{"replicas":1},"status":{}}"#;
        assert_eq!(text(d), r#"{"spec":{"replicas":1}}"#);
        let cm =
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{},"data":{"k":"1"},"we\"ird\\key":2,"tab\tkey":3}"#;
        let v: serde_json::Value = serde_json::from_str(&text(cm)).expect("JSON");
        assert_eq!(v, serde_json::json!({"data": {"k": "1"}, "we\"ird\\key": 2, "tab\tkey": 3}));
    }

    #[test]
    fn ignored_fields_leave_the_hash() {
        let mut cfg = ModelConfig::default();
        cfg.ignore_field("Deployment.apps", "spec.replicas");
        let a = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{"replicas":1,"paused":false}}"#;
        let b = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{"replicas":5,"paused":false}}"#;
        let c = r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{"replicas":5,"paused":true}}"#;
        assert_eq!(hash_of(a, &cfg), hash_of(b, &cfg));
        assert_ne!(hash_of(b, &cfg), hash_of(c, &cfg));
    }
}
