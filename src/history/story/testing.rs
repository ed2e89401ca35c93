//! A history store written row by row in SQL, as the schema's comments say the `history` sink
//! writes it, for the tests of the story and of its rendering.

use rusqlite::{params, Connection};
use serde_json::{json, Value};

use crate::decode::time::format_rfc3339_micros;
use crate::history::schema;

/// An in-memory store.
pub(crate) struct Store {
    pub(crate) conn: Connection,
}

/// An object's identity.
#[derive(Clone)]
pub(crate) struct Obj {
    pub(crate) cluster: &'static str,
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) namespace: &'static str,
    pub(crate) name: &'static str,
    pub(crate) uid: &'static str,
    /// The controller owner: its uid (the other fields follow from `owner`).
    pub(crate) owner: Option<Owner>,
}

/// An owner as a child's row names it.
#[derive(Clone)]
pub(crate) struct Owner {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) name: &'static str,
    pub(crate) uid: &'static str,
}

pub(crate) fn obj(kind: &'static str, namespace: &'static str, name: &'static str, uid: &'static str) -> Obj {
    let api_version = match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => "apps/v1",
        "Widget" => "example.com/v1",
        _ => "v1",
    };
    Obj { cluster: "default", api_version, kind, namespace, name, uid, owner: None }
}

impl Obj {
    pub(crate) fn owned_by(mut self, o: &Obj) -> Obj {
        self.owner = Some(Owner { api_version: o.api_version, kind: o.kind, name: o.name, uid: o.uid });
        self
    }
    pub(crate) fn in_cluster(mut self, c: &'static str) -> Obj {
        self.cluster = c;
        self
    }
}

/// One classified write.
#[derive(Clone)]
pub(crate) struct W {
    pub(crate) time_us: i64,
    pub(crate) audit_id: &'static str,
    pub(crate) verb: &'static str,
    pub(crate) subresource: Option<&'static str>,
    pub(crate) user: &'static str,
    pub(crate) class: &'static str,
    pub(crate) resolution: Option<&'static str>,
    pub(crate) policy: Option<&'static str>,
    /// Origin writes this drift undoes.
    pub(crate) reverts: Vec<Reverted>,
    /// The trace's hops: (kind, name, generation, user, time).
    pub(crate) trace: Vec<(&'static str, &'static str, i64, &'static str, i64)>,
    /// The parent's state: (generation, observed, finished, phase).
    pub(crate) parent_state: Option<(i64, i64, bool, &'static str)>,
}

/// An origin write a drift undoes: (auditID, user, kind, name, fields as (path, before, after)).
pub(crate) type Reverted = (&'static str, &'static str, &'static str, &'static str, Vec<(&'static str, Value, Value)>);

pub(crate) fn w(
    time_us: i64,
    audit_id: &'static str,
    verb: &'static str,
    user: &'static str,
    class: &'static str,
) -> W {
    W {
        time_us,
        audit_id,
        verb,
        subresource: None,
        user,
        class,
        resolution: (class == "drift").then_some("unresolved"),
        policy: None,
        reverts: Vec::new(),
        trace: Vec::new(),
        parent_state: None,
    }
}

fn is_person(user: &str) -> bool {
    !user.starts_with("system:")
}

impl Store {
    pub(crate) fn new() -> Store {
        let conn = Connection::open_in_memory().expect("in-memory SQLite");
        schema::create(&conn).expect("schema");
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?1)", [schema::SCHEMA_VERSION])
            .expect("meta");
        Store { conn }
    }

    /// The object's row (its times follow its writes).
    pub(crate) fn object(&self, o: &Obj) -> i64 {
        let p = o.owner.as_ref();
        self.conn
            .execute(
                "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name, first_us, last_us)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 9223372036854775807, 0)",
                params![o.cluster, o.uid, o.api_version, o.kind, o.namespace, o.name, p.map(|p| p.uid), p.map(|p| p.api_version), p.map(|p| p.kind), p.map(|p| p.name)],
            )
            .expect("insert object");
        // The view's trigger wrote it: its row id, by its UID.
        self.conn
            .query_row("SELECT id FROM objects WHERE cluster = ?1 AND uid = ?2", params![o.cluster, o.uid], |r| {
                r.get(0)
            })
            .expect("object id")
    }

    /// The write's rows: `mutations`, `reverts`, the object's times and tombstone, `meta`.
    pub(crate) fn write(&self, object_id: i64, o: &Obj, w: &W) -> i64 {
        // What each reverted write was, as the store holds it.
        let origins: Vec<(String, i64)> = w
            .reverts
            .iter()
            .map(|r| {
                self.conn
                    .query_row("SELECT verb, time_us FROM mutations WHERE audit_id = ?1", [r.0], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .unwrap_or(("patch".to_string(), w.time_us - 1_000_000))
            })
            .collect();
        let event = event(o, w, &origins);
        let reverts_person = w.class == "drift" && w.reverts.iter().any(|r| is_person(r.1));
        self.conn
            .execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, subresource, user, class, resolution, policy, reverts_person, event)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![object_id, w.time_us, w.audit_id, w.verb, w.subresource, w.user, w.class, w.resolution, w.policy, reverts_person, event.to_string()],
            )
            .expect("insert mutation");
        let id: i64 = self.conn.query_row("SELECT max(id) FROM mutation_rows", [], |r| r.get(0)).expect("mutation id");
        for r in &w.reverts {
            self.conn
                .execute("INSERT INTO reverts (mutation_id, origin_audit_id) VALUES (?1, ?2)", params![id, r.0])
                .expect("insert revert");
        }
        self.conn
            .execute(
                "UPDATE objects SET first_us = min(first_us, ?2), last_us = max(last_us, ?2) WHERE id = ?1",
                params![object_id, w.time_us],
            )
            .expect("times");
        if w.verb.starts_with("delete") || w.subresource == Some("eviction") {
            self.conn
                .execute(
                    "UPDATE objects SET deleted_us = ?2, deleted_by = ?3, deleted_audit_id = ?4 WHERE id = ?1 AND deleted_us IS NULL",
                    params![object_id, w.time_us, w.user, w.audit_id],
                )
                .expect("tombstone");
        }
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES ('oldest_us', ?1), ('newest_us', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = CASE key
                   WHEN 'oldest_us' THEN CAST(min(CAST(value AS INTEGER), ?1) AS TEXT)
                   ELSE CAST(max(CAST(value AS INTEGER), ?1) AS TEXT) END",
                params![w.time_us.to_string()],
            )
            .expect("meta times");
        id
    }

    /// What retention does: forgets everything before `us`.
    pub(crate) fn keep_from(&self, us: i64) {
        self.conn
            .execute("DELETE FROM reverts WHERE mutation_id IN (SELECT id FROM mutations WHERE time_us < ?1)", [us])
            .expect("reverts");
        self.conn.execute("DELETE FROM mutations WHERE time_us < ?1", [us]).expect("mutations");
        self.conn
            .execute("DELETE FROM objects WHERE id NOT IN (SELECT object_id FROM mutations)", [])
            .expect("objects");
        self.conn.execute("UPDATE meta SET value = ?1 WHERE key = 'oldest_us'", [us.to_string()]).expect("oldest");
    }
}

/// The enriched event of a write, in the shape `Enriched::write_json` gives.
/// `origins`: the verb and time of each write `w` reverts.
pub(crate) fn event(o: &Obj, w: &W, origins: &[(String, i64)]) -> Value {
    let mut e = json!({
        "auditID": w.audit_id,
        "cluster": o.cluster,
        "stageTimestamp": format_rfc3339_micros(w.time_us),
        "verb": w.verb,
        "user": w.user,
        "userHash": "00000",
        "object": {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid, "generation": 1},
        "class": w.class,
        "reason": format!("a {} write", w.class),
        "actor": {"isController": w.user.starts_with("system:"), "controllers": []},
        "freezeViolation": false,
        "snoozed": false,
        "trace": w.trace.iter().map(|(kind, name, generation, user, t)| json!({
            "apiVersion": "v1", "kind": kind, "name": name, "generation": generation, "user": user,
            "timestamp": format_rfc3339_micros(*t),
        })).collect::<Vec<_>>(),
        "late": false,
    });
    if !o.namespace.is_empty() {
        e["object"]["namespace"] = json!(o.namespace);
    }
    if let Some(s) = w.subresource {
        e["subresource"] = json!(s);
    }
    if let (Some(p), Some((generation, observed, finished, phase))) = (&o.owner, w.parent_state) {
        e["parent"] = json!({
            "apiVersion": p.api_version, "kind": p.kind, "name": p.name, "uid": p.uid,
            "generation": generation, "observedGeneration": observed, "observedGenerationSource": "status",
            "finished": finished, "phase": phase,
        });
    }
    if let Some(r) = w.resolution {
        e["resolution"] = json!(r);
    }
    if let Some(p) = w.policy {
        e["policy"] = json!(p);
    }
    if w.class == "drift" {
        e["reverts"] = w
            .reverts
            .iter()
            .zip(origins)
            .map(|((audit_id, user, kind, name, fields), (verb, time_us))| {
                json!({
                    "user": user, "person": is_person(user), "auditID": audit_id, "time": format_rfc3339_micros(*time_us),
                    "verb": verb, "object": {"apiVersion": "v1", "kind": kind, "name": name},
                    "fields": fields.iter().map(|(path, before, after)| json!({"path": path, "before": before, "after": after, "restored": true})).collect::<Vec<_>>(),
                })
            })
            .collect();
    }
    e
}
