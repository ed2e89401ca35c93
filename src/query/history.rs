//! `GET /v1/objects` and `GET /v1/drift`: reads of the history store (src/history/schema.rs),
//! on blocking threads, through a few kept read-only connections.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde::Serialize;
use serde_json::value::RawValue;

use super::params::Params;
use super::{ApiError, Endpoint, QueryState};
use crate::classify::Class;
use crate::history::pack::Unpacker;
use crate::history::story::{stored_event, ObjectRef};
use crate::history::{self, Mode};

/// Read-only connections kept between requests.
const KEPT: usize = 4;

/// The history store and the read connections kept open on it.
pub(super) struct Store {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Store {
    pub(super) fn new(path: PathBuf) -> Store {
        Store { path, idle: Mutex::new(Vec::new()) }
    }

    /// Runs `f` on a read connection (call on a blocking thread).
    pub(super) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let kept = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let conn = match kept {
            Some(c) => c,
            None => history::open(&self.path, Mode::Read).map_err(|e| match e {
                history::Error::Sqlite { .. } => ApiError::Internal(e.to_string()),
                history::Error::Missing { .. } | history::Error::Version { .. } | history::Error::Damaged { .. } => {
                    ApiError::Unavailable(e.to_string())
                }
            })?,
        };
        let r = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < KEPT {
            idle.push(conn);
        }
        r
    }
}

fn sql_error(e: rusqlite::Error) -> ApiError {
    ApiError::Internal(format!("reading the history store failed: {e}"))
}

/// A `WHERE` clause built with its parameters.
#[derive(Default)]
struct Filter {
    clauses: Vec<String>,
    args: Vec<Sql>,
    /// The drift feed's `since`: its rows start no earlier than the first that can be this
    /// recent (its clause is among `clauses` too).
    since_us: Option<i64>,
}

impl Filter {
    fn add(&mut self, clause: &str, args: impl IntoIterator<Item = Sql>) {
        self.clauses.push(clause.to_string());
        self.args.extend(args);
    }

    /// `kind` as `Kind` (any group) or `Kind.group`, case-insensitive, on the objects `o`.
    fn kind(&mut self, kind: &str) {
        let (k, group) = match kind.split_once('.') {
            Some((k, g)) => (k, Some(g)),
            None => (kind, None),
        };
        self.add("o.kind = ? COLLATE NOCASE", [Sql::Text(k.to_string())]);
        match group {
            None => {}
            Some("") => self.add("instr(o.api_version, '/') = 0", []),
            Some(g) => self.add(
                "lower(substr(o.api_version, 1, instr(o.api_version, '/') - 1)) = lower(?)",
                [Sql::Text(g.to_string())],
            ),
        }
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }
}

const OBJECT_PARAMS: &[&str] = &["cluster", "kind", "namespace", "name", "uid", "limit"];

pub(super) async fn objects(State(s): State<Arc<QueryState>>, uri: Uri) -> Response {
    let query = uri.query().map(str::to_string);
    s.serve(Endpoint::Objects, |s| async move {
        let p = Params::parse(query.as_deref(), OBJECT_PARAMS)?;
        let limit = p.limit()?;
        let mut f = Filter::default();
        // A UID and a name are looked up on the indexes of `object_rows` first: its UID's last
        // 4 bytes; its kind and its name's last 6 characters (every kind the store has, one
        // seek each, when no kind is asked for). The columns of `object_names` then hold.
        if let Some(uid) = p.get("uid") {
            f.add(
                "o.id IN (SELECT id FROM object_rows WHERE substr(uid, -4) IN (substr(?, -4), substr(?, -4)) AND uid IN (?, ?))",
                [history::schema::id_value(uid), Sql::Text(uid.to_string()), history::schema::id_value(uid), Sql::Text(uid.to_string())],
            );
        }
        if let Some(name) = p.get("name") {
            f.add(
                &format!(
                    "o.id IN (SELECT id FROM object_rows WHERE kind IN ({}) AND substr(CAST(name AS TEXT), -6) = substr(?, -6))",
                    history::schema::KINDS
                ),
                [Sql::Text(name.to_string())],
            );
        }
        for (param, column) in [("cluster", "o.cluster"), ("name", "o.name"), ("uid", "o.uid")] {
            if let Some(v) = p.get(param) {
                f.add(&format!("{column} = ?"), [Sql::Text(v.to_string())]);
            }
        }
        if let Some(ns) = p.get_raw("namespace") {
            f.add("o.namespace = ?", [Sql::Text(ns.to_string())]);
        }
        if let Some(kind) = p.get("kind") {
            f.kind(kind);
        }
        s.blocking(move |s| {
            let (objects, truncated) = s.history()?.read(|c| find_objects(c, &f, limit))?;
            serde_json::to_string(&serde_json::json!({"objects": objects, "truncated": truncated}))
                .map_err(|e| ApiError::Internal(e.to_string()))
        })
        .await
    })
    .await
}

/// The objects matching `f`, at most `limit`, and whether there were more.
fn find_objects(c: &Connection, f: &Filter, limit: usize) -> Result<(Vec<ObjectRef>, bool), ApiError> {
    // Filtered and ordered on the objects' names (`object_names`), then read whole (`objects`,
    // whose times and tombstone come from each object's mutations) for the page's rows only.
    let sql = format!(
        "SELECT o.cluster, o.api_version, o.kind, o.namespace, o.name, o.uid, o.parent_api_version, o.parent_kind, o.parent_name, o.parent_uid, \
         o.first_us, o.last_us, o.deleted_us, o.deleted_by, o.deleted_audit_id FROM objects o \
         WHERE o.id IN (SELECT o.id FROM object_names o{} ORDER BY o.kind, o.namespace, o.name, o.id LIMIT {}) \
         ORDER BY o.kind, o.namespace, o.name, o.id",
        f.sql(),
        limit + 1
    );
    let mut stmt = c.prepare_cached(&sql).map_err(sql_error)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(f.args.iter()), |r| history::story::object_at(r, 0));
    let mut objects = rows.map_err(sql_error)?.collect::<Result<Vec<_>, _>>().map_err(sql_error)?;
    let truncated = objects.len() > limit;
    objects.truncate(limit);
    Ok((objects, truncated))
}

const DRIFT_PARAMS: &[&str] =
    &["cluster", "namespace", "kind", "class", "resolution", "revertsPerson", "since", "until", "limit", "after"];

/// A page of the drift feed.
#[derive(Serialize)]
struct Page {
    events: Vec<Box<RawValue>>,
    /// Pass as `after` for the next page; `None` on the last.
    next: Option<String>,
    /// Where this page ended in storage order: pass as `after` later, and the feed gives only
    /// what was stored since. The same as `next` when there is a next page.
    cursor: String,
    /// Rows of the page left out: their stored event could not be read.
    #[serde(skip)]
    unreadable: u64,
}

pub(super) async fn drift(State(s): State<Arc<QueryState>>, uri: Uri) -> Response {
    let query = uri.query().map(str::to_string);
    s.serve(Endpoint::Drift, |s| async move {
        let p = Params::parse(query.as_deref(), DRIFT_PARAMS)?;
        let (f, after, limit) = drift_filter(&p)?;
        s.blocking(move |s| {
            let page = s.history()?.read(|c| drift_page(c, &f, after, limit))?;
            s.ctx.metrics.unreadable_rows(Endpoint::Drift.as_str(), page.unreadable);
            serde_json::to_string(&page).map_err(|e| ApiError::Internal(e.to_string()))
        })
        .await
    })
    .await
}

fn drift_filter(p: &Params) -> Result<(Filter, Option<After>, usize), ApiError> {
    let limit = p.limit()?;
    let classes: Vec<&str> = Class::ALL.iter().map(|c| c.as_str()).collect();
    let class = p.one_of("class", &classes)?.unwrap_or("drift");
    let resolution = p.one_of("resolution", &["approved", "rejected", "unresolved"])?;
    let (since, until) = (p.time("since")?, p.time("until")?);
    if let (Some(s), Some(u)) = (since, until) {
        if s >= u {
            return Err(ApiError::BadRequest("since must be before until".into()));
        }
    }
    let after = match p.get("after") {
        None => None,
        Some(a) => Some(After::parse(a).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "after={a:?} is not a cursor this API gave (the `next` or `cursor` of a page)"
            ))
        })?),
    };
    let mut f = Filter::default();
    f.add(&class_clause(class), []);
    if let Some(c) = p.get("cluster") {
        f.add("o.cluster = ?", [Sql::Text(c.to_string())]);
    }
    if let Some(ns) = p.get_raw("namespace") {
        f.add("o.namespace = ?", [Sql::Text(ns.to_string())]);
    }
    if let Some(kind) = p.get("kind") {
        f.kind(kind);
    }
    if let Some(r) = resolution {
        f.add("m.resolution = ?", [Sql::Text(r.to_string())]);
    }
    if let Some(person) = p.flag("revertsPerson")? {
        f.add("m.reverts_person = ?", [Sql::Integer(person as i64)]);
    }
    if let Some(t) = since {
        f.add("m.time_us >= ?", [Sql::Integer(t)]);
        f.since_us = Some(t);
    }
    if let Some(t) = until {
        f.add("m.time_us < ?", [Sql::Integer(t)]);
    }
    Ok((f, after, limit))
}

/// `class` (one of [`Class::ALL`], checked by the caller) as its integer, a literal on the
/// table `mutation_rows` (`mr`): a signal class then reads its own partial index
/// (`history::schema::INDEXED_CLASSES`), the others the table in storage order.
fn class_clause(class: &str) -> String {
    match crate::history::schema::class_id(class) {
        Some(id) => format!("mr.class = {id}"),
        None => "0".to_string(),
    }
}

/// Where a page of the drift feed goes on from: after a row in storage order (the
/// `mutations` row id, which only grows: a row stored later, whatever its event time, has a
/// higher one), written `s<id>`; or a cursor of the earlier form `<time>-<id>`, which named
/// the last event of a page in event-time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Stored(i64),
    Legacy { time_us: i64, id: i64 },
}

impl After {
    fn parse(text: &str) -> Option<After> {
        match text.strip_prefix('s') {
            Some(id) => id.parse().ok().filter(|id| *id >= 0).map(After::Stored),
            None => cursor(text).map(|(time_us, id)| After::Legacy { time_us, id }),
        }
    }

    /// The row after which the page starts. For a cursor of the earlier form: before the first
    /// row that the event-time order had not given yet, and at most its row, so that neither
    /// those nor the rows stored after it (late ones included, which that order skipped) are
    /// missed; a few rows may come again.
    fn row(self, c: &Connection) -> Result<i64, ApiError> {
        match self {
            After::Stored(id) => Ok(id),
            After::Legacy { time_us, id } => {
                let first: Option<i64> = c
                    .query_row("SELECT min(id) FROM mutations WHERE (time_us, id) > (?1, ?2)", [time_us, id], |r| {
                        r.get(0)
                    })
                    .map_err(sql_error)?;
                Ok(first.map_or(id, |first| (first - 1).min(id)))
            }
        }
    }
}

/// A cursor of the earlier form: the (time, id) of the last mutation of a page.
fn cursor(text: &str) -> Option<(i64, i64)> {
    let (t, id) = text.split_once('-')?;
    Some((t.parse().ok()?, id.parse().ok()?))
}

/// The first row whose time can be `?1` or later: the first of the blocks whose newest time is
/// (`event_blocks_by_max`), or of the rows that hold their own event (an earlier schema's,
/// or written by hand: `mutation_rows_by_time`). A block's bounds hold its rows' times
/// (retention narrows them; a time changed through the `mutations` view widens them).
/// On the indexes by name: by its id order SQLite would walk each table (the blocks' data,
/// every mutation's row) up to the first match.
const FIRST_SINCE: &str = "SELECT min(x) FROM (
    SELECT min(id) AS x FROM event_blocks INDEXED BY event_blocks_by_max WHERE max_us >= ?1
    UNION ALL SELECT min(id) FROM mutation_rows INDEXED BY mutation_rows_by_time WHERE event IS NOT NULL AND time_us >= ?1)";

/// The page's query: in storage order, after a row (`?`, the last parameter).
fn drift_sql(f: &Filter, limit: usize) -> String {
    let and = if f.clauses.is_empty() { " WHERE" } else { " AND" };
    format!(
        "SELECT m.id, m.event FROM mutation_rows mr JOIN mutations m ON m.id = mr.id JOIN objects o ON o.id = m.object_id{}{and} mr.id > ? ORDER BY mr.id LIMIT {}",
        f.sql(),
        limit + 1
    )
}

/// A page of the drift feed, in the order the rows were stored: a write stored after a page
/// was read comes on a later page, even when its event time is older than that page's (writes
/// of several API servers reach the store out of time order). A row whose event cannot be
/// read is left out (and counted), not an error: else every page that holds it would fail, and
/// a client could never page past it.
fn drift_page(c: &Connection, f: &Filter, after: Option<After>, limit: usize) -> Result<Page, ApiError> {
    // One snapshot for the page and the newest row: nothing is committed between them.
    let tx = c.unchecked_transaction().map_err(sql_error)?;
    let after = match after {
        Some(a) => a.row(&tx)?,
        None => 0,
    };
    let newest = || -> Result<i64, ApiError> {
        let id: Option<i64> = tx.query_row("SELECT max(id) FROM mutations", [], |r| r.get(0)).map_err(sql_error)?;
        Ok(id.unwrap_or(0))
    };
    // With `since`, the rows before the first that can be that recent are not read.
    let after = match f.since_us {
        None => after,
        Some(t) => match tx.query_row(FIRST_SINCE, [t], |r| r.get::<_, Option<i64>>(0)).map_err(sql_error)? {
            Some(first) => after.max(first - 1),
            None => after.max(newest()?),
        },
    };
    let sql = drift_sql(f, limit);
    let mut stmt = tx.prepare_cached(&sql).map_err(sql_error)?;
    let args = f.args.iter().cloned().chain([Sql::Integer(after)]);
    let events = Unpacker::new(&tx);
    let rows =
        stmt.query_map(rusqlite::params_from_iter(args), |r| Ok((r.get::<_, i64>(0)?, stored_event(r, 1, &events)?)));
    let mut rows = rows.map_err(sql_error)?.collect::<Result<Vec<_>, _>>().map_err(sql_error)?;
    drop(stmt);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let last = rows.last().map(|(id, _)| *id);
    let (next, end) = match last {
        Some(id) if more => (Some(id), id),
        // The last page: every row stored up to the newest was looked at, matched or not, and
        // a row stored later has a higher id.
        _ => (None, newest()?.max(after)),
    };
    let read = rows.len();
    let events: Vec<_> = rows.into_iter().filter_map(|(_, event)| event).collect();
    Ok(Page {
        unreadable: (read - events.len()) as u64,
        events,
        next: next.map(|id| format!("s{id}")),
        cursor: format!("s{end}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_pages_give() {
        assert_eq!(cursor("1714557600000000-42"), Some((1_714_557_600_000_000, 42)));
        assert_eq!(cursor("-5-1"), None, "a time before 1970 is no cursor this API gives");
        assert!(cursor("42").is_none() && cursor("a-b").is_none() && cursor("").is_none());
    }

    #[test]
    fn cursors_of_both_forms_are_read() {
        assert_eq!(After::parse("s42"), Some(After::Stored(42)));
        assert_eq!(After::parse("s0"), Some(After::Stored(0)));
        assert_eq!(After::parse("1714557600000000-42"), Some(After::Legacy { time_us: 1_714_557_600_000_000, id: 42 }));
        for bad in ["s", "s-1", "sx", "S42", "42", "", "s4 2"] {
            assert_eq!(After::parse(bad), None, "{bad:?}");
        }
    }

    /// A store in memory that holds one pod (`objects.id` 1) and none of its writes.
    fn one_pod() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        crate::history::schema::create(&c).unwrap();
        c.execute(
            "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES ('c', 'u', 'v1', 'Pod', 'ns', 'p', 1, 2)",
            [],
        )
        .unwrap();
        c
    }

    /// A store whose rows (ids 1, 2, ...) have these times, in µs.
    fn stored(times: &[i64]) -> Connection {
        let c = one_pod();
        for (i, t) in times.iter().enumerate() {
            c.execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, ?1, ?2, 'update', 'u', 'drift', ?3)",
                rusqlite::params![t, format!("a{i}"), format!("{{\"t\":{t}}}")],
            )
            .unwrap();
        }
        c
    }

    fn times(page: &Page) -> Vec<String> {
        page.events.iter().map(|e| e.get().to_string()).collect()
    }

    #[test]
    fn a_cursor_of_the_earlier_form_goes_on_in_storage_order_without_missing_a_row() {
        let mut f = Filter::default();
        f.add(&class_clause("drift"), []);
        // Row 4 is late: stored last, stamped between rows 1 and 2.
        let c = stored(&[10, 20, 40, 15]);
        let page = |after: &str| drift_page(&c, &f, After::parse(after), 10).unwrap();
        // The earlier order had given rows 1 and 2 (times 10, 20): rows 3 and 4 come.
        assert_eq!(times(&page("20-2")), [r#"{"t":40}"#, r#"{"t":15}"#]);
        // It had given all three it knew of: the late row it would have skipped comes.
        let last = page("40-3");
        assert_eq!(times(&last), [r#"{"t":15}"#]);
        assert_eq!((last.next.as_deref(), last.cursor.as_str()), (None, "s4"));
        // Row 1 stamped after row 2: the earlier order gave row 2 first. Row 1 comes, and row
        // 2 again (stored after it).
        let c = stored(&[50, 10]);
        let page = drift_page(&c, &f, After::parse("10-2"), 10).unwrap();
        assert_eq!(times(&page), [r#"{"t":50}"#, r#"{"t":10}"#]);
        // Storage order: a page ends at its last row; the last page at the newest row stored,
        // matched or not.
        let c = stored(&[10, 20, 30]);
        c.execute("UPDATE mutations SET class = 'expected' WHERE id = 3", []).unwrap();
        let first = drift_page(&c, &f, None, 1).unwrap();
        assert_eq!(
            (times(&first), first.next.as_deref(), first.cursor.as_str()),
            (vec![r#"{"t":10}"#.to_string()], Some("s1"), "s1")
        );
        let second = drift_page(&c, &f, After::parse("s1"), 1).unwrap();
        assert_eq!(
            (times(&second), second.next.as_deref(), second.cursor.as_str()),
            (vec![r#"{"t":20}"#.to_string()], None, "s3")
        );
        let empty = stored(&[]);
        let empty = drift_page(&empty, &f, None, 1).unwrap();
        assert_eq!((empty.events.len(), empty.next, empty.cursor), (0, None, "s0".to_string()));
    }

    /// `since` starts the feed at the first row that can be that recent (the blocks' newest
    /// times, the rows that hold their own event): the same pages as reading every row.
    #[test]
    fn since_skips_only_rows_that_cannot_be_that_recent() {
        let c = one_pod();
        // Three blocks of two rows (the fourth row late: stored after 40, stamped 15), then a
        // row that holds its own event.
        let blocks: [&[i64]; 3] = [&[10, 20], &[40, 15], &[50, 60]];
        let mut id = 0;
        for times in blocks {
            let mut data = Vec::new();
            for t in times {
                id += 1;
                c.execute(
                    "INSERT INTO mutations (id, object_id, time_us, audit_id, verb, user, class, event) VALUES (?1, 1, ?2, ?3, 'update', 'u', 'drift', NULL)",
                    rusqlite::params![id, t, format!("a{id}")],
                )
                .unwrap();
                data.extend_from_slice(format!("{{\"t\":{t}}}\n").as_bytes());
            }
            let frame = zstd::bulk::compress(&data, 3).unwrap();
            c.execute(
                "INSERT INTO event_blocks (id, last_id, min_us, max_us, dictionary, data) VALUES (?1, ?2, ?3, ?4, 0, ?5)",
                rusqlite::params![id - 1, id, times.iter().min(), times.iter().max(), frame],
            )
            .unwrap();
        }
        c.execute(
            "INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, 30, 'a7', 'update', 'u', 'drift', '{\"t\":30}')",
            [],
        )
        .unwrap();
        for since in [0, 10, 11, 16, 21, 30, 35, 41, 45, 55, 60, 61, 100] {
            let mut every = Filter::default();
            every.add(&class_clause("drift"), []);
            every.add("m.time_us >= ?", [Sql::Integer(since)]);
            let floor = Filter { since_us: Some(since), clauses: every.clauses.clone(), args: every.args.clone() };
            for limit in [1, 2, 10] {
                let (mut a, mut b) = (None, None);
                loop {
                    let (pa, pb) =
                        (drift_page(&c, &floor, a, limit).unwrap(), drift_page(&c, &every, b, limit).unwrap());
                    assert_eq!((times(&pa), &pa.next), (times(&pb), &pb.next), "since {since}, limit {limit}");
                    assert_eq!(pa.cursor, pb.cursor, "since {since}, limit {limit}");
                    match pa.next {
                        Some(n) => (a, b) = (After::parse(&n), After::parse(&n)),
                        None => break,
                    }
                }
            }
        }
        // A row of the first block given a later time by hand: its block's bounds follow, and
        // a `since` after the block's old newest time still finds it.
        c.execute("UPDATE mutations SET time_us = 70 WHERE id = 2", []).unwrap();
        assert_eq!(
            c.query_row("SELECT min_us, max_us FROM event_blocks WHERE id = 1", [], |r| Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?
            )))
            .unwrap(),
            (10, 70)
        );
        let mut f = Filter::default();
        f.add(&class_clause("drift"), []);
        f.add("m.time_us >= ?", [Sql::Integer(65)]);
        f.since_us = Some(65);
        let page = drift_page(&c, &f, None, 10).unwrap();
        assert_eq!(page.events.len(), 1, "the row moved to 70, in the first block");
        c.execute("UPDATE mutations SET time_us = 20 WHERE id = 2", []).unwrap();
        let mut f = Filter::default();
        f.add(&class_clause("drift"), []);
        f.add("m.time_us >= ?", [Sql::Integer(45)]);
        f.since_us = Some(45);
        let page = drift_page(&c, &f, None, 10).unwrap();
        assert_eq!(
            (times(&page), page.cursor.as_str()),
            (vec![r#"{"t":50}"#.to_string(), r#"{"t":60}"#.to_string()], "s7")
        );
    }

    #[test]
    fn each_class_is_found_and_only_signal_classes_have_an_index() {
        let c = one_pod();
        for (i, class) in Class::ALL.iter().chain(Class::ALL.iter()).enumerate() {
            c.execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, ?1, ?2, 'update', 'u', ?3, ?4)",
                rusqlite::params![i as i64, format!("a{i}"), class.as_str(), format!("{{\"i\":{i}}}")],
            )
            .unwrap();
        }
        let n = Class::ALL.len();
        for (i, class) in Class::ALL.iter().enumerate() {
            let class = class.as_str();
            let mut f = Filter::default();
            f.add(&class_clause(class), []);
            let page = drift_page(&c, &f, None, 10).unwrap();
            let got: Vec<String> = page.events.iter().map(|e| e.get().to_string()).collect();
            assert_eq!(got, [format!("{{\"i\":{i}}}"), format!("{{\"i\":{}}}", i + n)], "{class}");
            let plan: Vec<String> = c
                .prepare(&format!("EXPLAIN QUERY PLAN {}", drift_sql(&f, 10)))
                .unwrap()
                // The row the page starts after.
                .query_map([0], |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let own = format!("mutations_{}", class.replace('-', "_"));
            let indexed = crate::history::schema::INDEXED_CLASSES.contains(&class);
            assert_eq!(plan.iter().any(|p| p.contains(&own)), indexed, "{class}: {plan:?}");
        }
    }

    #[test]
    fn kinds_filter_by_name_and_group() {
        let c = Connection::open_in_memory().unwrap();
        crate::history::schema::create(&c).unwrap();
        for (i, (av, kind)) in
            [("apps/v1", "Deployment"), ("example.com/v1", "Deployment"), ("v1", "Pod")].iter().enumerate()
        {
            c.execute(
                "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES ('c', ?1, ?2, ?3, 'ns', 'web', 1, 2)",
                rusqlite::params![format!("u{i}"), av, kind],
            )
            .unwrap();
        }
        let found = |kind: &str| {
            let mut f = Filter::default();
            f.kind(kind);
            find_objects(&c, &f, 10).unwrap().0.into_iter().map(|o| o.uid).collect::<Vec<_>>()
        };
        assert_eq!(found("deployment").len(), 2);
        assert_eq!(found("Deployment.APPS"), ["u0"]);
        assert_eq!(found("Deployment.example.com"), ["u1"]);
        assert_eq!(found("Pod."), ["u2"]);
        assert!(found("Pod.apps").is_empty());
        let (page, truncated) = find_objects(&c, &Filter::default(), 2).unwrap();
        assert_eq!((page.len(), truncated), (2, true));
    }
}
