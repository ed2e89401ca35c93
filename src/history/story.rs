//! The story of one object, read from the history store: who wrote it and what each write was
//! (oldest first), what reverted each write, and which of its children drifted. `why` renders
//! it in the terminal; the query API serves it as JSON at `GET /v1/why` (docs/why.md shows the
//! JSON). All the SQL of the story is in this module and its parts:
//! - `find`: which object the question names (by UID, or by kind, namespace and name);
//! - `tree`: its children's drift, by the `parent_uid` of their rows;
//! - `message`: what to tell a person when the question has no single answer.

mod find;
mod message;
mod tree;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::decode::time::format_rfc3339_micros;
use crate::history::pack::Unpacker;

pub use find::{kind_matches, object_at};
pub use message::{ambiguous_message, before_history_message, explain, not_found_message};

/// Which object's story, and up to when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoryQuery {
    /// Only this cluster; any cluster when `None`.
    pub cluster: Option<String>,
    /// The kind as a person types it: `ReplicaSet`, `replicaset`, `replicasets`,
    /// `Deployment.apps`, `widgets.example.com`; empty with `uid` (any kind).
    pub kind: String,
    /// Only this namespace (`""`: a cluster-scoped object); any namespace when `None`.
    pub namespace: Option<String>,
    /// The object's name; with `kind`, or `uid` alone.
    pub name: Option<String>,
    /// The object's UID (`metadata.uid`); alone, or to pick one of several of a name.
    pub uid: Option<String>,
    /// Writes (and drift counts, and reverts) up to this time, µs since the epoch.
    pub at_us: Option<i64>,
    /// Most writes told: the newest ones (up to `at`, before `before`); all when `None`.
    /// `why` and `/v1/why` ask for [`DEFAULT_WRITES`] by default, so that an object written
    /// 100,000 times is told in pages, never held whole.
    pub limit: Option<usize>,
    /// Only the writes before this cursor (the `before` of a story's [`Earlier`]).
    pub before: Option<String>,
}

/// Writes told by default in one answer of `why` and `/v1/why`.
pub const DEFAULT_WRITES: usize = 1000;
/// Most writes one answer may tell.
pub const MAX_WRITES: usize = 10_000;

/// The writes of the object a story leaves out, older than those it tells.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Earlier {
    /// How many.
    pub writes: u64,
    /// Ask again with this as `before` (`--before` of `why`) for the page before.
    pub before: String,
}

/// A position in an object's writes: (time, row id) of the oldest write a page told.
fn cursor(time_us: i64, id: i64) -> String {
    format!("w{time_us}.{id}")
}

/// The (time, row id) of a cursor; `Err` names what is wrong with it.
pub fn parse_cursor(s: &str) -> Result<(i64, i64), String> {
    s.strip_prefix('w')
        .and_then(|rest| rest.split_once('.'))
        .and_then(|(t, id)| Some((t.parse().ok()?, id.parse().ok()?)))
        .ok_or_else(|| format!("before={s:?} is not a cursor a story gave (its `earlier.before`)"))
}

/// The object a story is about, as the store knows it; also each candidate of an ambiguous
/// question, and an object of the query API's `/v1/objects`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// The cluster its events came from.
    pub cluster: String,
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// `""` for a cluster-scoped object.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`.
    pub uid: String,
    /// Its controller owner; `null` when it has none.
    pub parent: Option<OwnerRef>,
    /// Its first and newest mutation kept (RFC 3339).
    pub first_seen: String,
    /// Its newest mutation kept (RFC 3339).
    pub last_seen: String,
    /// The tombstone: `null` while the object lives (as far as the store knows).
    pub deleted: Option<Tombstone>,
}

/// An object's controller owner, as its events named it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// Who deleted (or evicted) an object, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// When (RFC 3339).
    pub time: String,
    /// By whom.
    pub user: String,
    /// The auditID of the write that removed it.
    #[serde(rename = "auditID")]
    pub audit_id: String,
}

/// The answer: the object, its writes oldest first, its children's drift.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Story {
    /// The object.
    pub object: ObjectRef,
    /// How far back the store reaches (`meta.oldest_us`): nothing older was kept, or
    /// retention removed it; `null` for an empty store.
    pub history_from: Option<String>,
    /// The `at` bound of the question, when it had one.
    pub at: Option<String>,
    /// Its writes, oldest first (the newest `limit` of them).
    pub writes: Vec<Write>,
    /// The object's writes left out: older than `writes` (a limit was given, and reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier: Option<Earlier>,
    /// Its children (and theirs) with drift.
    pub children: Vec<Child>,
    /// Writes whose stored event could not be read (told from their columns instead); not
    /// part of the JSON, counted by the query API.
    #[serde(skip)]
    pub unreadable: u64,
}

/// One classified mutation of the object.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// The enriched event, byte for byte as the `history` sink stored it
    /// (docs/enriched-events.md).
    pub event: Box<RawValue>,
    /// The drifts that undid this write (those that name it in their `reverts`), oldest first.
    pub reverted_by: Vec<RevertedBy>,
}

/// A drift that undid a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevertedBy {
    /// The drift's auditID.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// Its time (RFC 3339).
    pub time: String,
    /// Who wrote it.
    pub user: String,
    /// Its class.
    pub class: String,
    /// The object the drift wrote: the same one, or a replacement of a removed object.
    pub object: WrittenObject,
}

/// The object a drift wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// A child (grandchild, ...) with drift in its subtree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Deleted by the `at` bound (or at all, without one).
    pub deleted: bool,
    /// Its own drift mutations up to `at`.
    pub drift: u64,
    /// The newest of them.
    pub last_drift: Option<LastDrift>,
    /// Its own children with drift in their subtree.
    pub children: Vec<Child>,
}

/// A child's newest drift.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastDrift {
    /// When (RFC 3339).
    pub time: String,
    /// Who wrote it.
    pub user: String,
    /// Its auditID.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// approved, rejected or unresolved.
    pub resolution: Option<String>,
}

/// Why a story could not be told.
#[derive(Debug, thiserror::Error)]
pub enum StoryError {
    /// No object in the store matches the question.
    #[error("no such object in the history store")]
    NotFound,
    /// Several objects match: in different clusters or namespaces, or several objects that
    /// had the same name one after the other (each with its own UID).
    #[error("{} objects match", .0.len())]
    Ambiguous(Vec<ObjectRef>),
    /// `at` is older than anything the store keeps.
    #[error("the history store reaches back to {history_from} only")]
    BeforeHistory {
        /// How far back it reaches (RFC 3339).
        history_from: String,
    },
    /// The question names no object: neither a UID nor a kind and a name.
    #[error("{0}")]
    Invalid(String),
    /// Reading the store failed.
    #[error("history store: {0}")]
    Store(#[from] rusqlite::Error),
}

/// A row of `objects`, with the key its mutations and children are found by.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) id: i64,
    pub(crate) object: ObjectRef,
}

/// The story of the object `q` names.
pub fn build(conn: &Connection, q: &StoryQuery) -> Result<Story, StoryError> {
    let oldest_us = oldest_us(conn)?;
    if let (Some(at), Some(oldest)) = (q.at_us, oldest_us) {
        if at < oldest {
            return Err(StoryError::BeforeHistory { history_from: format_rfc3339_micros(oldest) });
        }
    }
    let before = q.before.as_deref().map(parse_cursor).transpose().map_err(StoryError::Invalid)?;
    let found = find::one(conn, q)?;
    let (writes, earlier) = writes(conn, &found, q.at_us, before, q.limit)?;
    let unreadable = writes.iter().filter(|w| !w.readable).count() as u64;
    let writes = writes.into_iter().map(|w| w.write).collect();
    let children = tree::children(conn, &found.object.cluster, &found.object.uid, q.at_us)?;
    Ok(Story {
        object: found.object,
        history_from: oldest_us.map(format_rfc3339_micros),
        at: q.at_us.map(format_rfc3339_micros),
        writes,
        earlier,
        children,
        unreadable,
    })
}

/// How far back the store reaches (`meta.oldest_us`), µs; `None` for an empty store.
pub fn oldest_us(conn: &Connection) -> Result<Option<i64>, StoryError> {
    let v: Option<String> =
        conn.query_row("SELECT value FROM meta WHERE key = 'oldest_us'", [], |r| r.get(0)).optional()?;
    Ok(v.and_then(|v| v.trim().parse().ok()))
}

/// The newest `?5` writes up to `?2`, before the cursor (`?3`, `?4`), newest first.
const WRITES: &str = "
SELECT id, time_us, audit_id, verb, subresource, user, class, resolution, policy, event
FROM mutations
WHERE object_id = ?1 AND (?2 IS NULL OR time_us <= ?2) AND (?3 IS NULL OR time_us < ?3 OR (time_us = ?3 AND id < ?4))
ORDER BY time_us DESC, id DESC
LIMIT ?5";

/// How many writes up to `?2` come before the cursor (`?3`, `?4`).
const EARLIER: &str = "
SELECT count(*) FROM mutations
WHERE object_id = ?1 AND (?2 IS NULL OR time_us <= ?2) AND (time_us < ?3 OR (time_us = ?3 AND id < ?4))";

/// The drifts that name an origin write in their `reverts`, in the object's cluster.
/// The origin's auditID as rows keep it (`?1`, [`crate::history::schema::id_value`]) or as text
/// (`?4`, a row of an earlier schema).
const REVERTED_BY: &str = "
SELECT DISTINCT m.id, m.audit_id, m.time_us, m.user, m.class, o.kind, o.name, o.uid, m.event
FROM revert_rows r
JOIN mutations m ON m.id = r.mutation_id
JOIN objects o ON o.id = m.object_id
WHERE substr(r.origin_audit_id, -4) IN (substr(?1, -4), substr(?4, -4)) AND r.origin_audit_id IN (?1, ?4) AND o.cluster = ?2 AND (?3 IS NULL OR m.time_us <= ?3)
ORDER BY m.time_us, m.id";

/// The event column of row `r` at `index`, when it holds a JSON object: `None` for one
/// written by hand or damaged (not UTF-8, not JSON, not an object), which a reader leaves out
/// or tells from the row's other columns, never failing the whole answer for it.
pub fn stored_event(r: &Row<'_>, index: usize, events: &Unpacker<'_>) -> rusqlite::Result<Option<Box<RawValue>>> {
    let Some(bytes) = events.json(r.get_ref(index)?) else { return Ok(None) };
    let Ok(text) = String::from_utf8(bytes) else { return Ok(None) };
    if !text.trim_start().starts_with('{') {
        return Ok(None);
    }
    Ok(RawValue::from_string(text).ok())
}

/// A write, and whether its stored event could be read.
struct Told {
    write: Write,
    readable: bool,
}

/// The writes a story tells (oldest first) and those it leaves out.
fn writes(
    conn: &Connection,
    found: &Found,
    at_us: Option<i64>,
    before: Option<(i64, i64)>,
    limit: Option<usize>,
) -> Result<(Vec<Told>, Option<Earlier>), StoryError> {
    let events = Unpacker::new(conn);
    let mut stmt = conn.prepare(WRITES)?;
    let (before_us, before_id) = (before.map(|b| b.0), before.map(|b| b.1));
    let most = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let mut oldest = None;
    let rows = stmt.query_map(params![found.id, at_us, before_us, before_id, most], |r| {
        oldest = Some((r.get::<_, i64>(1)?, r.get::<_, i64>(0)?));
        let audit_id: String = r.get(2)?;
        let stored = stored_event(r, 9, &events)?;
        let readable = stored.is_some();
        let event = stored.unwrap_or_else(|| {
            // A row whose event cannot be read (written by hand, or damaged) still tells what
            // its columns hold.
            let columns = serde_json::json!({
                "auditID": audit_id,
                "stageTimestamp": format_rfc3339_micros(r.get::<_, i64>(1).unwrap_or(0)),
                "verb": r.get::<_, String>(3).unwrap_or_default(),
                "subresource": r.get::<_, Option<String>>(4).unwrap_or_default(),
                "user": r.get::<_, String>(5).unwrap_or_default(),
                "class": r.get::<_, String>(6).unwrap_or_default(),
                "resolution": r.get::<_, Option<String>>(7).unwrap_or_default(),
                "policy": r.get::<_, Option<String>>(8).unwrap_or_default(),
                "unreadable": true,
            });
            RawValue::from_string(columns.to_string()).expect("JSON made by serde_json")
        });
        Ok((audit_id, event, readable))
    })?;
    let mut writes = Vec::new();
    for row in rows {
        let (audit_id, event, readable) = row?;
        let reverted_by = reverted_by(conn, &events, &found.object, &audit_id, at_us)?;
        writes.push(Told { write: Write { event, reverted_by }, readable });
    }
    drop(stmt);
    writes.reverse();
    let earlier = match (limit, oldest) {
        (Some(l), Some((t, id))) if writes.len() >= l => {
            let n: i64 = conn.query_row(EARLIER, params![found.id, at_us, t, id], |r| r.get(0))?;
            (n > 0).then(|| Earlier { writes: n as u64, before: cursor(t, id) })
        }
        _ => None,
    };
    Ok((writes, earlier))
}

/// What a drift's `reverts` names: an origin write and the object it touched.
#[derive(Deserialize)]
struct Reverts<'a> {
    #[serde(borrow, default)]
    reverts: Vec<RevertEntry<'a>>,
}

#[derive(Deserialize)]
struct RevertEntry<'a> {
    #[serde(rename = "auditID", borrow)]
    audit_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: RevertEntryObject<'a>,
}

#[derive(Deserialize)]
struct RevertEntryObject<'a> {
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
}

/// The drifts that undid the write `audit_id` of `object`. One audit event can write several
/// objects (a deletecollection): a drift counts when its `reverts` names this write of this
/// object (by kind and name), not another object's item of the same request.
fn reverted_by(
    conn: &Connection,
    events: &Unpacker<'_>,
    object: &ObjectRef,
    audit_id: &str,
    at_us: Option<i64>,
) -> Result<Vec<RevertedBy>, StoryError> {
    let mut stmt = conn.prepare_cached(REVERTED_BY)?;
    let rows =
        stmt.query_map(params![crate::history::schema::id_value(audit_id), object.cluster, at_us, audit_id], |r| {
            let event = stored_event(r, 8, events)?;
            let names_it = match event.as_deref().map(|e| serde_json::from_str::<Reverts<'_>>(e.get())) {
                Some(Ok(rv)) => rv
                    .reverts
                    .iter()
                    .any(|e| e.audit_id == audit_id && e.object.kind == object.kind && e.object.name == object.name),
                // The reverts table says so; an unreadable event cannot say otherwise.
                Some(Err(_)) | None => true,
            };
            let by = RevertedBy {
                audit_id: r.get(1)?,
                time: format_rfc3339_micros(r.get(2)?),
                user: r.get(3)?,
                class: r.get(4)?,
                object: WrittenObject { kind: r.get(5)?, name: r.get(6)?, uid: r.get(7)? },
            };
            Ok(names_it.then_some(by))
        })?;
    let mut out = Vec::new();
    for row in rows {
        out.extend(row?);
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
