//! An object's children's drift: its children (the rows whose owner it is), theirs,
//! down to three levels, only the subtrees that hold drift, with each one's count of drift
//! mutations and its newest.

use std::collections::HashSet;

use rusqlite::{params, Connection};

use super::{Child, LastDrift, StoryError};
use crate::decode::time::format_rfc3339_micros;

/// Children, grandchildren and great-grandchildren: a Deployment's ReplicaSets' Pods are two
/// levels down, a composite's managed resources' own children three.
pub(super) const MAX_DEPTH: usize = 3;

/// The children of one object in a cluster that existed by `at`: the rows that name it as their
/// owner (its UID as rows keep it, `?1`, or as text, `?4`: a row of an earlier schema).
const CHILDREN: &str = "
SELECT id, api_version, kind, name, uid, deleted_us
FROM objects
WHERE id IN (SELECT o.id FROM owners w JOIN object_rows o ON o.owner = w.id
             WHERE w.cluster = (SELECT id FROM strings WHERE text = ?2) AND substr(w.uid, -4) IN (substr(?1, -4), substr(?4, -4)) AND w.uid IN (?1, ?4))
  AND (?3 IS NULL OR first_us <= ?3)
ORDER BY kind, name, first_us";

/// One object's drift mutations up to `at`, newest first. `+class`: on the object's index, not
/// on `mutations_drift_seq` (the drift feed's), which SQLite would otherwise pick and read every
/// drift of the store for each child.
const DRIFTS: &str = "
SELECT time_us, user, audit_id, resolution
FROM mutations
WHERE object_id = ?1 AND +class = 'drift' AND (?2 IS NULL OR time_us <= ?2)
ORDER BY time_us DESC, id DESC";

/// The drift tree under the object `uid` of `cluster`.
pub(super) fn children(
    conn: &Connection,
    cluster: &str,
    uid: &str,
    at_us: Option<i64>,
) -> Result<Vec<Child>, StoryError> {
    // An ownership cycle (possible in a store written by hand) must not loop.
    let mut seen = HashSet::from([uid.to_string()]);
    level(conn, cluster, uid, at_us, 1, &mut seen)
}

fn level(
    conn: &Connection,
    cluster: &str,
    uid: &str,
    at_us: Option<i64>,
    depth: usize,
    seen: &mut HashSet<String>,
) -> Result<Vec<Child>, StoryError> {
    struct Row {
        id: i64,
        api_version: String,
        kind: String,
        name: String,
        uid: String,
        deleted_us: Option<i64>,
    }
    let rows: Vec<Row> = conn
        .prepare_cached(CHILDREN)?
        .query_map(params![crate::history::schema::id_value(uid), cluster, at_us, uid], |r| {
            Ok(Row {
                id: r.get(0)?,
                api_version: r.get(1)?,
                kind: r.get(2)?,
                name: r.get(3)?,
                uid: r.get(4)?,
                deleted_us: r.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for row in rows {
        if !seen.insert(row.uid.clone()) {
            continue;
        }
        let (drift, last_drift) = drifts(conn, row.id, at_us)?;
        let children =
            if depth < MAX_DEPTH { level(conn, cluster, &row.uid, at_us, depth + 1, seen)? } else { Vec::new() };
        if drift == 0 && children.is_empty() {
            continue;
        }
        out.push(Child {
            api_version: row.api_version,
            kind: row.kind,
            name: row.name,
            uid: row.uid,
            deleted: row.deleted_us.is_some_and(|d| at_us.is_none_or(|at| d <= at)),
            drift,
            last_drift,
            children,
        });
    }
    Ok(out)
}

fn drifts(conn: &Connection, object_id: i64, at_us: Option<i64>) -> Result<(u64, Option<LastDrift>), StoryError> {
    let mut stmt = conn.prepare_cached(DRIFTS)?;
    let mut rows = stmt.query(params![object_id, at_us])?;
    let mut count = 0;
    let mut last = None;
    while let Some(r) = rows.next()? {
        if count == 0 {
            last = Some(LastDrift {
                time: format_rfc3339_micros(r.get(0)?),
                user: r.get(1)?,
                audit_id: r.get(2)?,
                resolution: r.get(3)?,
            });
        }
        count += 1;
    }
    Ok((count, last))
}
