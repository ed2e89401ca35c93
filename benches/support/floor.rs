//! The parse floor of the benches: typed `serde_json` parsing of an audit event into a struct
//! with the fields the model reads, plain `#[derive(Deserialize)]`, borrowed where possible.
//! Bench 1 parses each line with it; the webhook bench's parse-only server each EventList.
// Each bench uses the parts it measures: the others go unused in it.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// One audit event, as the floor reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Floor<'a> {
    #[serde(borrow, rename = "auditID")]
    audit_id: Cow<'a, str>,
    #[serde(borrow)]
    stage: Cow<'a, str>,
    #[serde(borrow, rename = "requestURI")]
    request_uri: Cow<'a, str>,
    #[serde(borrow)]
    verb: Cow<'a, str>,
    #[serde(borrow)]
    user: FloorUser<'a>,
    #[serde(borrow, default)]
    impersonated_user: Option<FloorUser<'a>>,
    #[serde(borrow)]
    object_ref: HashMap<Cow<'a, str>, Cow<'a, str>>,
    response_status: FloorStatus,
    #[serde(borrow)]
    response_object: Option<FloorObject<'a>>,
    #[serde(borrow)]
    stage_timestamp: Cow<'a, str>,
}

#[derive(Deserialize)]
struct FloorUser<'a> {
    #[serde(borrow)]
    username: Cow<'a, str>,
}

#[derive(Deserialize)]
struct FloorStatus {
    code: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FloorObject<'a> {
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    metadata: FloorMeta<'a>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FloorMeta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(borrow, default)]
    owner_references: Vec<HashMap<Cow<'a, str>, serde_json::Value>>,
    #[serde(borrow, default)]
    annotations: HashMap<Cow<'a, str>, Cow<'a, str>>,
}

/// A webhook body: an `EventList` of events read as [`Floor`]s.
#[derive(Deserialize)]
pub(crate) struct FloorList<'a> {
    #[serde(borrow)]
    pub items: Vec<Floor<'a>>,
}

/// Events in an EventList body, parsed as the floor parses them; `None` when it does not parse.
pub(crate) fn parse_list(body: &[u8]) -> Option<usize> {
    serde_json::from_slice::<FloorList>(body).ok().map(|l| l.items.len())
}
