//! The fields of an `audit.k8s.io` `Event` that classification needs, borrowed from the input
//! bytes. Everything is optional at this level so that a missing field becomes a precise,
//! counted error in [`super::validate`] rather than an opaque serde message.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::object::{opt_str, ObjectView};

/// One audit event (`audit.k8s.io/v1` or `v1beta1`), as far as classification is concerned.
/// Unknown fields are ignored: the API server adds fields over time.
pub type AuditEvent<'a> = Event<'a, NoItems>;

/// A document read in one pass: an event, or an EventList whose `items` are events. An item's
/// own `items` is skipped unread, so a list of lists of lists is never recursed into.
pub type EventOrList<'a> = Event<'a, Vec<AuditEvent<'a>>>;

/// An audit event whose `items` (set when the document is an EventList) are read as `L`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "L: Deserialize<'de>"))]
pub struct Event<'a, L = NoItems> {
    /// `Event` for an event, `EventList` for a list; checked when present.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub kind: Option<Cow<'a, str>>,
    /// `audit.k8s.io/v1` (or `v1beta1`); checked when present.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub api_version: Option<Cow<'a, str>>,
    /// Unique per request; the same ID at several stages, or twice after a retried delivery.
    #[serde(borrow, default, deserialize_with = "opt_str", rename = "auditID")]
    pub audit_id: Option<Cow<'a, str>>,
    /// `RequestReceived`, `ResponseStarted`, `ResponseComplete` or `Panic`.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub stage: Option<Cow<'a, str>>,
    /// Carries `dryRun=All` for dry runs, which persist nothing.
    #[serde(borrow, default, deserialize_with = "opt_str", rename = "requestURI")]
    pub request_uri: Option<Cow<'a, str>>,
    /// The request's verb (`create`, `update`, `patch`, `delete`, ...).
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub verb: Option<Cow<'a, str>>,
    /// Who made the request.
    #[serde(borrow, default)]
    pub user: Option<UserInfo<'a>>,
    /// When set, the request was made on behalf of this user: the effective actor.
    #[serde(borrow, default)]
    pub impersonated_user: Option<UserInfo<'a>>,
    /// The object the request was about, as the API server named it.
    #[serde(borrow, default)]
    pub object_ref: Option<ObjectRef<'a>>,
    /// How the API server answered.
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    /// The request's body, kept raw: read only for an eviction, whose dry run is said there.
    #[serde(borrow, default)]
    pub request_object: Option<&'a RawValue>,
    /// The persisted object as the API server returned it (RequestResponse level only).
    #[serde(borrow, default)]
    pub response_object: Option<ObjectView<'a>>,
    /// When the stage was reached (`v1`): the event's time.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub stage_timestamp: Option<Cow<'a, str>>,
    /// When the API server received the request.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub request_received_timestamp: Option<Cow<'a, str>>,
    /// Legacy (`v1beta1`) event time.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub timestamp: Option<Cow<'a, str>>,
    /// Set when the document is an `EventList` (the webhook backend's body), read in the same
    /// pass as a single event would be.
    #[serde(default)]
    pub items: Option<L>,
    /// Shippers' envelopes, noticed in the same pass: Azure's `records` list, a single Azure
    /// record's `properties`, a Cloud Logging entry's `protoPayload`.
    #[serde(borrow, default)]
    pub records: Option<&'a RawValue>,
    /// A single Azure record's `properties` (its event is in `log`).
    #[serde(borrow, default)]
    pub properties: Option<&'a RawValue>,
    /// A Cloud Logging entry's payload: such an entry is refused, not read.
    #[serde(borrow, default)]
    pub proto_payload: Option<&'a RawValue>,
}

/// The `items` of an event that is not read as a list: skipped, whatever they hold.
#[derive(Debug, Default)]
pub struct NoItems;

impl<'de> Deserialize<'de> for NoItems {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| NoItems)
    }
}

impl<'a, L> Event<'a, L> {
    /// The event without its items, and the items.
    pub fn split_items(self) -> (AuditEvent<'a>, Option<L>) {
        // Another type parameter, so no `..self`: each field is moved over by name, once.
        let ev = Event {
            kind: self.kind,
            api_version: self.api_version,
            audit_id: self.audit_id,
            stage: self.stage,
            request_uri: self.request_uri,
            verb: self.verb,
            user: self.user,
            impersonated_user: self.impersonated_user,
            object_ref: self.object_ref,
            response_status: self.response_status,
            request_object: self.request_object,
            response_object: self.response_object,
            stage_timestamp: self.stage_timestamp,
            request_received_timestamp: self.request_received_timestamp,
            timestamp: self.timestamp,
            items: None,
            records: self.records,
            properties: self.properties,
            proto_payload: self.proto_payload,
        };
        (ev, self.items)
    }
}

/// A user of a request: who made it, or on whose behalf.
#[derive(Debug, Default, Deserialize)]
pub struct UserInfo<'a> {
    /// The user's name (`system:serviceaccount:<ns>:<name>` for a service account).
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub username: Option<Cow<'a, str>>,
    /// The user's UID, when the authenticator gives one.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub uid: Option<Cow<'a, str>>,
}

impl UserInfo<'_> {
    /// The name that identifies the actor: the username, else the UID.
    pub fn identity(&self) -> Option<&str> {
        self.username.as_deref().filter(|s| !s.is_empty()).or(self.uid.as_deref().filter(|s| !s.is_empty()))
    }
}

/// The object a request was about: `objectRef`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef<'a> {
    /// The resource, plural and lower case (`deployments`).
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub resource: Option<Cow<'a, str>>,
    /// Its namespace; absent for a cluster-scoped object.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub namespace: Option<Cow<'a, str>>,
    /// Its name; absent for a create named by `generateName` or a list.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub name: Option<Cow<'a, str>>,
    /// Its UID, when the API server knew it (deletes, updates).
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub uid: Option<Cow<'a, str>>,
    /// Its API group; empty for the core group.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub api_group: Option<Cow<'a, str>>,
    /// Its API version (`v1`), without the group.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub api_version: Option<Cow<'a, str>>,
    /// The subresource written (`status`, `scale`, `eviction`), if any.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    pub subresource: Option<Cow<'a, str>>,
}

/// How the API server answered a request.
#[derive(Debug, Default, Deserialize)]
pub struct ResponseStatus {
    /// The HTTP status code (201, 200, 409, 429, ...).
    #[serde(default)]
    pub code: Option<i64>,
}

impl<L> Event<'_, L> {
    /// The effective actor: the impersonated user when present, else the authenticated user.
    pub fn effective_user(&self) -> Option<&str> {
        self.impersonated_user
            .as_ref()
            .and_then(UserInfo::identity)
            .or_else(|| self.user.as_ref().and_then(UserInfo::identity))
    }

    /// The event time used for ordering windows: `stageTimestamp`, else the legacy fields.
    pub fn event_time(&self) -> Option<&str> {
        self.stage_timestamp.as_deref().or(self.timestamp.as_deref()).or(self.request_received_timestamp.as_deref())
    }
}
