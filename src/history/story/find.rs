//! Which object a question names: by UID, or by kind and name (namespace and cluster when
//! given). A kind is matched the way people type it (`ReplicaSet`, `replicaset`, `replicasets`,
//! `Deployment.apps`): the store's kinds are listed first (an index seek per distinct kind, not
//! a scan of the objects), then the objects are looked up by exact kind and name on the index.
//! The rows are read through the view `objects` (the names as text), found in `object_rows`.

use rusqlite::{params, Connection, Row};

use super::{Found, ObjectRef, OwnerRef, StoryError, StoryQuery, Tombstone};
use crate::decode::time::format_rfc3339_micros;

const COLUMNS: &str =
    "id, cluster, api_version, kind, namespace, name, uid, parent_api_version, parent_kind, parent_name, parent_uid,
                       first_us, last_us, deleted_us, deleted_by, deleted_audit_id";

/// The store's kinds ([`crate::history::schema::KINDS`]), each named by its text.
fn kind_names() -> String {
    format!("SELECT s.text FROM ({}) k JOIN strings s ON s.id = k.v", crate::history::schema::KINDS)
}

/// The one object `q` names.
pub(super) fn one(conn: &Connection, q: &StoryQuery) -> Result<Found, StoryError> {
    let mut found = all(conn, q)?;
    match found.len() {
        0 => Err(StoryError::NotFound),
        1 => Ok(found.pop().expect("one")),
        _ => {
            found.sort_by(|a, b| {
                let key = |f: &Found| {
                    (
                        f.object.cluster.clone(),
                        f.object.namespace.clone(),
                        f.object.first_seen.clone(),
                        f.object.uid.clone(),
                    )
                };
                key(a).cmp(&key(b))
            });
            Err(StoryError::Ambiguous(found.into_iter().map(|f| f.object).collect()))
        }
    }
}

/// Every object `q` names.
fn all(conn: &Connection, q: &StoryQuery) -> Result<Vec<Found>, StoryError> {
    if let Some(uid) = q.uid.as_deref().filter(|u| !u.is_empty()) {
        // A UID is looked up on `object_rows_by_uid` (its last 4 bytes), in every cluster or
        // the one asked for. The UID as rows keep it (16 bytes for a UUID), or as text (a row of
        // an earlier schema).
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM objects WHERE id IN
             (SELECT id FROM object_rows WHERE substr(uid, -4) IN (substr(?2, -4), substr(?3, -4)) AND uid IN (?2, ?3)
                AND (?1 IS NULL OR cluster = (SELECT id FROM strings WHERE text = ?1)))"
        ))?;
        let rows = stmt
            .query_map(params![q.cluster, crate::history::schema::id_value(uid), uid], row)?
            .collect::<Result<Vec<_>, _>>()?;
        // Whatever else the question says must hold too.
        return Ok(rows
            .into_iter()
            .filter(|f| {
                let o = &f.object;
                (q.kind.is_empty() || kind_matches(&q.kind, &o.kind, &o.api_version))
                    && q.namespace.as_ref().is_none_or(|n| *n == o.namespace)
                    && q.name.as_ref().is_none_or(|n| *n == o.name)
            })
            .collect());
    }
    let name = match q.name.as_deref() {
        Some(n) if !n.is_empty() && !q.kind.is_empty() => n,
        _ => return Err(StoryError::Invalid("name an object: a kind and a name (KIND/NAME), or a UID".into())),
    };
    let kinds: Vec<String> = conn.prepare(&kind_names())?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    // On `object_rows_by_name`: the kind's id and the name's last 6 characters, then the name
    // whole (a row may keep only what follows its owner's name).
    let sql = format!(
        "SELECT {COLUMNS} FROM objects WHERE id IN
         (SELECT id FROM object_rows WHERE kind = (SELECT id FROM strings WHERE text = ?1) AND substr(CAST(name AS TEXT), -6) = substr(?2, -6))
         AND name = ?2 AND (?3 IS NULL OR namespace = ?3) AND (?4 IS NULL OR cluster = ?4)"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut out = Vec::new();
    for kind in kinds.iter().filter(|k| kind_name_matches(&q.kind, k)) {
        for f in stmt.query_map(params![kind, name, q.namespace, q.cluster], row)? {
            let f = f?;
            if kind_matches(&q.kind, &f.object.kind, &f.object.api_version) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

fn row(r: &Row<'_>) -> rusqlite::Result<Found> {
    Ok(Found { id: r.get(0)?, object: object_at(r, 1)? })
}

/// The object of a row of the `objects` view whose columns, from `at` on, are `cluster,
/// api_version, kind, namespace, name, uid, parent_api_version, parent_kind, parent_name,
/// parent_uid, first_us, last_us, deleted_us, deleted_by, deleted_audit_id`.
pub fn object_at(r: &Row<'_>, at: usize) -> rusqlite::Result<ObjectRef> {
    let text = |i: usize| r.get::<_, Option<String>>(at + i).map(Option::unwrap_or_default);
    let parent_uid: Option<String> = r.get(at + 9)?;
    let deleted_us: Option<i64> = r.get(at + 12)?;
    Ok(ObjectRef {
        cluster: r.get(at)?,
        api_version: r.get(at + 1)?,
        kind: r.get(at + 2)?,
        namespace: r.get(at + 3)?,
        name: r.get(at + 4)?,
        uid: r.get(at + 5)?,
        parent: match parent_uid {
            Some(uid) => Some(OwnerRef { uid, api_version: text(6)?, kind: text(7)?, name: text(8)? }),
            None => None,
        },
        first_seen: format_rfc3339_micros(r.get(at + 10)?),
        last_seen: format_rfc3339_micros(r.get(at + 11)?),
        deleted: match deleted_us {
            Some(us) => Some(Tombstone { time: format_rfc3339_micros(us), user: text(13)?, audit_id: text(14)? }),
            None => None,
        },
    })
}

/// Whether `asked` (as a person types a kind) names `kind` of `api_version`: the kind in any
/// case, singular or plural (`replicasets`, `ingresses`, `networkpolicies`), optionally
/// followed by `.GROUP` (`Deployment.apps`; `core` or nothing for the core group's `v1`).
pub fn kind_matches(asked: &str, kind: &str, api_version: &str) -> bool {
    if !kind_name_matches(asked, kind) {
        return false;
    }
    match asked.split_once('.') {
        None => true,
        Some((_, group)) => {
            let have = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            group.eq_ignore_ascii_case(have) || (have.is_empty() && group.eq_ignore_ascii_case("core"))
        }
    }
}

/// The kind part of `asked` (before any `.GROUP`) against a kind, in any case, singular or
/// plural.
fn kind_name_matches(asked: &str, kind: &str) -> bool {
    let asked = asked.split_once('.').map_or(asked, |(k, _)| k);
    if asked.eq_ignore_ascii_case(kind) {
        return true;
    }
    let (a, k) = (asked.to_ascii_lowercase(), kind.to_ascii_lowercase());
    let plural = |suffix: &str, stem: &str| a.strip_suffix(suffix) == Some(stem);
    plural("s", &k) || plural("es", &k) || k.strip_suffix('y').is_some_and(|stem| plural("ies", stem))
}
