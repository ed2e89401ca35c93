//! Routing: where an audit event goes on a keyed topic, so that the process judging a write
//! holds the state its judgement needs (docs/kafka.md, "Partitioning for scale-out").
//!
//! A child's write is judged against its controller's state, so it is keyed by the
//! **controller-owner UID** (the `ownerReferences` entry with `controller: true`), or by the
//! object's own UID when it has no controller: the *judged* copy. Every object with a UID may
//! be a parent (Deployments own ReplicaSets, Services own EndpointSlices, Nodes own mirror
//! Pods, and every operator's custom resources own what they make: no closed list of owner
//! kinds would hold), so a write of an object that has a controller is produced a second time,
//! keyed by its own UID, where its children are judged: the *state-only* copy, which the
//! classifying process applies to state without emitting anything for it.
//!
//! Writes whose answer names no UID are keyed by what the event itself tells:
//! - a delete answered with a `Status`: the UID in the Status' `details`, else the objectRef's:
//!   keyed by the object's own UID (its controller is not named in the event);
//! - an eviction: the pod UID of the request's `deleteOptions.preconditions`, else the pod's
//!   namespace and name ([`Key::Name`]);
//! - a deletecollection: judged with its first item's key; a state-only copy goes to every
//!   other item's controller and own UID, so the deletions reach every partition holding
//!   those objects;
//! - a `scale` write: the object's own UID (a `Scale` carries no ownerReferences).
//!
//! An applier's parent (DESIGN §1.9: a Kustomization, an Application, a ClusterProfile) goes
//! to every partition too ([`everywhere`]): its members carry no ownerReference, only markers
//! naming it, and a write of a member (a `scale` answered with a `Scale` included, which shows
//! no markers) is judged at the member's own UID, wherever that is; each partition must hold
//! the parents' intent. Appliers' parents are few and write their status once a sync.
//!
//! A Namespace's writes go to **every** partition ([`everywhere`]): its judged copy as any
//! object's, and a state-only copy to each other partition, so that every partition knows
//! a namespace being deleted and judges the writes in it as its teardown (DESIGN §1.4).
//! Namespaces are few and rarely written; a partition count of copies each costs little.
//!
//! What each of these costs (the judgement lacks the controller's state when the key is not
//! the controller's) is in docs/scale-out.md, "Ingest tier". The function here is pure: the
//! ingest tier ([`producer`], configured by a `kafka_route` section: [`config`]), the tests and
//! the classify tier's tests share it. Kafka's partitioner is [`crate::partition`], a leaf the
//! model imports too.

mod body;
#[cfg(feature = "kafka")]
pub mod producer;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

pub use crate::partition::{murmur2, partition_of};
/// The ingest tier's pipeline section, `[[sinks]] type = "kafka_route"` ([`crate::sinks::kafka_route`]).
pub use crate::sinks::kafka_route as config;
pub use body::{route_body, Copy, Message, Routed};
pub use config::KafkaRouteConfig;

// The keyed topic's headers: the route's producer writes them, the Kafka source reads them,
// and the classify tier's trace messages carry one (`kafka`, below both).
pub use crate::kafka::{COPY_HEADER, COPY_STATE, COPY_TRACE, JUDGED_PARTITION_HEADER};

use crate::config::appliers::Appliers;
use crate::decode::{AuditEvent, ObjectRef, ObjectView};
use crate::filter::{admit, Ignored, Subresource, Verb};
use crate::write::status_details_uid;

/// What the ingest tier's webhook needs of the producer of the keyed topic (the
/// `kafka_route` sink), so that the webhook does not depend on Kafka.
pub trait Producer: Send + Sync {
    /// The topic's partition count; 0 while it is not known (bodies are then refused with 503).
    fn partitions(&self) -> i32;
    /// Produces `messages` (ranges of `body`) and resolves once the broker has acknowledged
    /// every one, or with what went wrong.
    fn send<'a>(&'a self, cluster: Option<&'a str>, body: &'a [u8], messages: &'a [Message]) -> SendFuture<'a>;
}

/// What [`Producer::send`] returns.
pub type SendFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// Where one audit event goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route<'a> {
    /// The key of the copy that is judged (classified and emitted).
    pub judged: Key<'a>,
    /// Keys of the state-only copies: each differs from `judged` and from the others.
    pub state: Vec<Key<'a>>,
}

/// A message key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key<'a> {
    /// An object's UID: the controller owner's, or the object's own.
    Uid(Cow<'a, str>),
    /// No UID can be told (an eviction without a precondition UID): the object by resource,
    /// namespace and name. Its partition is in general not its controller's.
    Name {
        /// The resource (`pods`).
        resource: Cow<'a, str>,
        /// The namespace, empty for a cluster-scoped object.
        namespace: Cow<'a, str>,
        /// The object's name.
        name: Cow<'a, str>,
    },
}

impl Key<'_> {
    /// The key's bytes on the topic: the UID as it is, or `resource/namespace/name` (a `/`
    /// never occurs in a UID the API server makes, so the two never meet).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Key::Uid(u) => Cow::Borrowed(u.as_ref()),
            Key::Name { resource, namespace, name } => Cow::Owned(format!("{resource}/{namespace}/{name}")),
        }
    }

    /// The same key, owning its text.
    pub fn into_owned(self) -> Key<'static> {
        match self {
            Key::Uid(u) => Key::Uid(Cow::Owned(u.into_owned())),
            Key::Name { resource, namespace, name } => Key::Name {
                resource: Cow::Owned(resource.into_owned()),
                namespace: Cow::Owned(namespace.into_owned()),
                name: Cow::Owned(name.into_owned()),
            },
        }
    }
}

/// Why an event is not produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// Not a completed, successful, persisted write (the filter's reason): the classify tier
    /// would ignore it too, so it does not cost broker bytes.
    Ignored(Ignored),
    /// A write that names no object the classify tier could key state by.
    Unroutable(Unroutable),
}

/// The label of `kausality_route_unroutable_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unroutable {
    /// No UID in the answer, the objectRef or a precondition, and no name to key an eviction
    /// by (an audit level below RequestResponse; an empty deletecollection). The classify
    /// tier would ignore it as `no_object`.
    NoObject,
}

impl Unroutable {
    /// Every reason: the closed set of the `reason` label.
    pub const ALL: [Unroutable; 1] = [Unroutable::NoObject];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Unroutable::NoObject => "no_object",
        }
    }
}

/// Where `ev` goes: its judged key and its state-only keys, or why it goes nowhere.
pub fn route<'a>(ev: &'a AuditEvent<'a>) -> Result<Route<'a>, Skip> {
    let adm = admit(ev).map_err(Skip::Ignored)?;
    let oref = ev.object_ref.as_ref();
    let oref_uid = || oref.and_then(|o| nonempty(o.uid.as_deref()));
    let no_object = Skip::Unroutable(Unroutable::NoObject);
    let own = |uid: &'a str| Route { judged: Key::Uid(Cow::Borrowed(uid)), state: Vec::new() };
    match (adm.subresource, ev.response_object.as_ref()) {
        (Subresource::Eviction, _) => eviction(ev, oref).ok_or(no_object),
        (Subresource::Scale, Some(obj)) => {
            nonempty(obj.metadata.uid.as_deref()).or_else(oref_uid).map(own).ok_or(no_object)
        }
        (_, Some(obj)) if obj.is_list() => list(obj).ok_or(no_object),
        (_, Some(obj)) if obj.is_status() || nonempty(obj.metadata.uid.as_deref()).is_none() => match adm.verb {
            Verb::Delete => match status_details_uid(obj).filter(|u| !u.is_empty()) {
                Some(uid) => Ok(Route { judged: Key::Uid(Cow::Owned(uid)), state: Vec::new() }),
                None => oref_uid().map(own).ok_or(no_object),
            },
            _ => Err(no_object),
        },
        (_, Some(obj)) => Ok(object(obj)),
        (_, None) => match adm.verb {
            Verb::Delete => oref_uid().map(own).ok_or(no_object),
            _ => Err(no_object),
        },
    }
}

/// Whether `ev`'s write goes to every partition: a write of a Namespace (the core group's
/// `namespaces`, any subresource: `status`, `finalize`). The namespace controller deletes a
/// namespace's contents kind by kind, children before their parents, so a child's parent does
/// not show the teardown; the namespace's own state does, and each partition must hold it.
/// An applier's parent (`appliers`' profiles) goes everywhere too, for the same reason: its
/// members are judged wherever their own UIDs put them.
pub fn everywhere(ev: &AuditEvent<'_>, appliers: &Appliers) -> bool {
    let Some(o) = ev.object_ref.as_ref() else { return false };
    let group = o.api_group.as_deref().unwrap_or("");
    if o.resource.as_deref() == Some("namespaces") && group.is_empty() {
        return true;
    }
    !group.is_empty()
        && !appliers.profiles.is_empty()
        && o.resource.as_deref().is_some_and(|r| is_applier_parent(r, group, appliers))
}

/// Whether `resource` of `group` holds an applier profile's parents: its kind key's group is
/// `group` and its kind, lowercased, plus `s` is `resource` (`kustomizations`,
/// `applications`, `clusterprofiles`, `helmreleases`; a pipeline's own kinds follow the same
/// rule as the API server's default plural).
fn is_applier_parent(resource: &str, group: &str, appliers: &Appliers) -> bool {
    appliers.profiles.iter().any(|p| {
        p.parent_kind.split_once('.').is_some_and(|(kind, g)| {
            g == group
                && resource.len() == kind.len() + 1
                && resource.ends_with('s')
                && resource[..kind.len()].eq_ignore_ascii_case(kind)
        })
    })
}

/// A full object with a UID: judged at its controller, state-only at itself when it has one.
fn object<'a>(obj: &'a ObjectView<'a>) -> Route<'a> {
    let (judged, own) = keys(obj).expect("called with an object that has a UID");
    let state = if judged == own { Vec::new() } else { vec![own] };
    Route { judged, state }
}

/// The judged key and the own-UID key of an object; `None` without a UID.
fn keys<'a>(obj: &'a ObjectView<'a>) -> Option<(Key<'a>, Key<'a>)> {
    let own = nonempty(obj.metadata.uid.as_deref())?;
    let judged = obj.metadata.controller_ref().and_then(|r| nonempty(r.uid.as_deref())).unwrap_or(own);
    Some((Key::Uid(Cow::Borrowed(judged)), Key::Uid(Cow::Borrowed(own))))
}

/// A deletecollection's list: judged with its first item; every other key its items have
/// gets a state-only copy.
fn list<'a>(obj: &'a ObjectView<'a>) -> Option<Route<'a>> {
    let raw = obj.field("items")?;
    let items: Vec<ObjectView<'a>> = serde_json::from_str(raw.get()).ok()?;
    let mut all: Vec<Key<'a>> = Vec::new();
    for item in &items {
        let Some((judged, own)) = item_keys(item) else { continue };
        for k in [judged, own] {
            if !all.contains(&k) {
                all.push(k);
            }
        }
    }
    let mut all = all.into_iter();
    let judged = all.next()?;
    Some(Route { judged, state: all.collect() })
}

/// [`keys`] of a list item, owned (the items are read into a vector local to [`list`]).
fn item_keys(item: &ObjectView<'_>) -> Option<(Key<'static>, Key<'static>)> {
    let own = nonempty(item.metadata.uid.as_deref())?;
    let judged = item.metadata.controller_ref().and_then(|r| nonempty(r.uid.as_deref())).unwrap_or(own);
    Some((Key::Uid(Cow::Owned(judged.to_string())), Key::Uid(Cow::Owned(own.to_string()))))
}

/// An eviction: the pod's UID when the request states it as a precondition, else the pod's
/// namespace and name.
fn eviction<'a>(ev: &'a AuditEvent<'a>, oref: Option<&'a ObjectRef<'a>>) -> Option<Route<'a>> {
    if let Some(uid) = ev.request_object.and_then(|raw| precondition_uid(raw.get())) {
        return Some(Route { judged: Key::Uid(Cow::Owned(uid)), state: Vec::new() });
    }
    let name = oref.and_then(|o| nonempty(o.name.as_deref()))?;
    let namespace = oref.and_then(|o| o.namespace.as_deref()).unwrap_or("");
    Some(Route {
        judged: Key::Name {
            resource: Cow::Borrowed("pods"),
            namespace: Cow::Borrowed(namespace),
            name: Cow::Borrowed(name),
        },
        state: Vec::new(),
    })
}

/// `deleteOptions.preconditions.uid` of an `Eviction` request body.
fn precondition_uid(request: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Eviction {
        #[serde(default)]
        delete_options: Option<Options>,
    }
    #[derive(serde::Deserialize)]
    struct Options {
        #[serde(default)]
        preconditions: Option<Preconditions>,
    }
    #[derive(serde::Deserialize)]
    struct Preconditions {
        #[serde(default)]
        uid: Option<String>,
    }
    serde_json::from_str::<Eviction>(request).ok()?.delete_options?.preconditions?.uid.filter(|u| !u.is_empty())
}

fn nonempty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}
