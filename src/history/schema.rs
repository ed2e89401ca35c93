//! The history store's schema (docs/history.md documents every column). Times are integers,
//! µs since the Unix epoch, of the API server's `stageTimestamp`; SQL shows them with
//! `datetime(time_us / 1e6, 'unixepoch')`.
//!
//! Schema 3 keeps each fact once and small: names in `strings` (a cluster, a kind, a user is
//! one integer in a row), UIDs and auditIDs of the UUID form as 16 bytes, the enriched events
//! of a transaction compressed together in `event_blocks`. The views `objects`, `mutations` and
//! `reverts` show the rows with the columns of earlier schemas, as text (their triggers take
//! rows written by hand the same way); the readers look rows up in the tables themselves.

/// Bumped on any change a reader of an older store could not take. 2: events compressed
/// (`dictionaries`, [`super::pack`]). 3: names interned, events in blocks, the views. 4: the
/// events in blocks without the auditID and the object's UID their rows hold
/// ([`super::pack::LEFT_OUT_AUDIT_ID`]; a reader of schema 3 would give them without). 5: UIDs
/// and auditIDs indexed by their last 4 bytes, an object's UID no longer unique by an index of
/// its own (the writer looks it up first). 6: the events in blocks also without the trace's
/// last hop when it is made of the event's own fields ([`super::pack::LEFT_OUT_LAST_HOP`]; a
/// reader of schema 5 would give them without it); a store of 5 is taken as it is.
pub const SCHEMA_VERSION: &str = "6";

/// The versions the writer converts to [`SCHEMA_VERSION`] when it opens a store
/// ([`super::convert`]); a reader asks for the conversion.
pub const CONVERTS: [&str; 5] = ["1", "2", "3", "4", "5"];

/// The classes, by the integer a row holds (`classes.id`): the order of [`crate::classify::Class::ALL`].
pub const CLASS_IDS: [(i64, &str); 8] = [
    (1, "drift"),
    (2, "expected"),
    (3, "origin"),
    (4, "unowned"),
    (5, "initializing"),
    (6, "deleting"),
    (7, "undetermined"),
    (8, "unknown-parent"),
];

/// Every kind of `object_rows` (`v`, its integer), by a loose index scan of
/// `object_rows_by_name`: one seek per kind, not a read of every row.
pub const KINDS: &str = "WITH RECURSIVE seen(v) AS (
    SELECT (SELECT min(kind) FROM object_rows)
    UNION ALL SELECT (SELECT min(kind) FROM object_rows WHERE kind > seen.v) FROM seen WHERE seen.v IS NOT NULL)
SELECT v FROM seen WHERE v IS NOT NULL";

/// The integer of a class (`classes.id`).
pub fn class_id(class: &str) -> Option<i64> {
    CLASS_IDS.iter().find(|(_, c)| *c == class).map(|(id, _)| *id)
}

/// The classes with an index of their own ([`SQL`]: `mutations_<class>_seq`): the signal, rare
/// next to the `expected`, `initializing`, `deleting` and `unowned` writes (a quarter of the
/// generator's stream is `unowned`), which the drift feed finds in the table itself. A query uses one only when it names the class's
/// integer as a literal (`class = 1`), as the partial index's own condition does.
pub const INDEXED_CLASSES: [&str; 4] = ["drift", "origin", "undetermined", "unknown-parent"];

/// A UID or an auditID as a row keeps it: the 16 bytes of a UUID in its canonical form
/// (lowercase, `8-4-4-4-12`), any other text as it is. The views show both as the text.
pub fn id_value(s: &str) -> rusqlite::types::Value {
    match uuid_bytes(s) {
        Some(b) => rusqlite::types::Value::Blob(b.to_vec()),
        None => rusqlite::types::Value::Text(s.to_string()),
    }
}

/// The 16 bytes of a canonical UUID (what the views turn back into the same text).
pub fn uuid_bytes(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < 36 {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b[i] != b'-' {
                return None;
            }
            i += 1;
            continue;
        }
        let hex = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[n] = (hex(b[i])? << 4) | hex(b[i + 1])?;
        n += 1;
        i += 2;
    }
    Some(out)
}

/// The text of a stored UID or auditID: a 16-byte BLOB as its UUID (lowercase, `8-4-4-4-12`),
/// a TEXT as it is (what the views show); `None` for anything else.
pub fn id_text(v: rusqlite::types::ValueRef<'_>) -> Option<String> {
    use std::fmt::Write as _;
    match v {
        rusqlite::types::ValueRef::Text(t) => String::from_utf8(t.to_vec()).ok(),
        rusqlite::types::ValueRef::Blob(b) if b.len() == 16 => {
            let mut s = String::with_capacity(36);
            for (i, byte) in b.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    s.push('-');
                }
                let _ = write!(s, "{byte:02x}");
            }
            Some(s)
        }
        rusqlite::types::ValueRef::Blob(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    }
}

/// The text of a stored UID or auditID (`x`, a column): a 16-byte BLOB as its UUID, else as it is.
macro_rules! uuid_text {
    ($x:literal) => {
        concat!(
            "CASE WHEN typeof(",
            $x,
            ") = 'blob' AND length(",
            $x,
            ") = 16 THEN lower(substr(hex(",
            $x,
            "), 1, 8) || '-' || substr(hex(",
            $x,
            "), 9, 4) || '-' || substr(hex(",
            $x,
            "), 13, 4) || '-' || substr(hex(",
            $x,
            "), 17, 4) || '-' || substr(hex(",
            $x,
            "), 21, 12)) ELSE ",
            $x,
            " END"
        )
    };
}

/// A UID or an auditID as a row keeps it (`x`, a text): a canonical UUID as its 16 bytes, any
/// other value as it is ([`id_value`] in SQL).
macro_rules! uuid_value {
    ($x:literal) => {
        concat!("CASE WHEN typeof(", $x, ") = 'text' AND ", $x, " GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]' THEN unhex(replace(", $x, ", '-', '')) ELSE ", $x, " END")
    };
}

/// The columns that name an object or an owner (`object_rows`, `owners`): the row's id, its
/// cluster, UID, API version and kind.
macro_rules! identity_columns {
    () => {
        "id               INTEGER PRIMARY KEY,
    cluster          INTEGER NOT NULL,          -- strings.id
    uid              BLOB NOT NULL,             -- 16 bytes for a UUID, else its text
    api_version      INTEGER NOT NULL,          -- strings.id
    kind             INTEGER NOT NULL,          -- strings.id"
    };
}

/// An act's columns (`acts`, but `id`) from a row `r` with the text columns of `mutations`:
/// names as their integers of `strings` (0: none), the class as its integer.
macro_rules! act_columns {
    ($r:literal) => {
        concat!(
            "(SELECT id FROM strings WHERE text = ",
            $r,
            ".verb) AS verb, ",
            "coalesce((SELECT id FROM strings WHERE text = ",
            $r,
            ".subresource), 0) AS subresource, ",
            "(SELECT id FROM strings WHERE text = ",
            $r,
            ".user) AS user, ",
            "(SELECT id FROM classes WHERE name = ",
            $r,
            ".class) AS class, ",
            "coalesce((SELECT id FROM strings WHERE text = ",
            $r,
            ".resolution), 0) AS resolution, ",
            "coalesce((SELECT id FROM strings WHERE text = ",
            $r,
            ".policy), 0) AS policy, ",
            "coalesce(",
            $r,
            ".reverts_person, 0) AS reverts_person"
        )
    };
}

/// The act `a` (a row of `acts`) that holds the columns of `x`.
macro_rules! act_match {
    () => {
        "a.verb = x.verb AND a.subresource = x.subresource AND a.user = x.user AND a.class = x.class \
         AND a.resolution = x.resolution AND a.policy = x.policy AND a.reverts_person = x.reverts_person"
    };
}

/// The store's epoch (`meta.epoch_us`), what `mutation_rows.at_us` counts from, in SQL.
macro_rules! epoch {
    () => {
        "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch_us')"
    };
}

/// A mutation's row from the values of `$r` (`new` in the view's trigger, `x` when a store is
/// converted), its act found among `acts` by the act columns of `x`.
macro_rules! insert_mutation_row {
    ("new") => {
        insert_mutation_row!(@ "new", "new.audit_id")
    };
    ("x") => {
        insert_mutation_row!(@ "x", "x.audit_id")
    };
    (@ $r:literal, $audit_id:literal) => {
        concat!(
            "INSERT INTO mutation_rows (id, object_id, at_us, audit_id, act, event)\n    SELECT ",
            $r,
            ".id, ",
            $r,
            ".object_id, ",
            $r,
            ".time_us - ",
            epoch!(),
            ", ",
            uuid_value!($audit_id),
            ", (SELECT a.id FROM acts a WHERE ",
            act_match!(),
            "), ",
            $r,
            ".event"
        )
    };
}

/// Adds the act of the row `r` (the text columns of `mutations`) to `acts` when it is new: its
/// id the next multiple of 16 plus its class.
macro_rules! intern_act {
    ($r:literal) => {
        concat!(
            "INSERT INTO acts (id, verb, subresource, user, class, resolution, policy, reverts_person) ",
            "SELECT (coalesce((SELECT max(id) FROM acts), 0) / 16 + 1) * 16 + x.class, x.* FROM (SELECT ",
            act_columns!($r),
            ") x WHERE NOT EXISTS (SELECT 1 FROM acts a WHERE ",
            act_match!(),
            ")"
        )
    };
}

/// Indexes of earlier builds' tables, dropped before a store of schema 1 or 2 is converted
/// (their names are taken by the indexes of schema 3).
pub const DROPPED: &str = "DROP INDEX IF EXISTS mutations_by_audit; DROP INDEX IF EXISTS mutations_by_time; DROP INDEX IF EXISTS mutations_by_class; \
DROP INDEX IF EXISTS mutations_drift; DROP INDEX IF EXISTS mutations_origin; DROP INDEX IF EXISTS mutations_unowned; \
DROP INDEX IF EXISTS mutations_undetermined; DROP INDEX IF EXISTS mutations_unknown_parent; \
DROP INDEX IF EXISTS mutations_by_object; DROP INDEX IF EXISTS mutations_by_time_audit; DROP INDEX IF EXISTS mutations_drift_seq; \
DROP INDEX IF EXISTS mutations_origin_seq; DROP INDEX IF EXISTS mutations_unowned_seq; DROP INDEX IF EXISTS mutations_undetermined_seq; \
DROP INDEX IF EXISTS mutations_unknown_parent_seq; DROP INDEX IF EXISTS objects_by_name; DROP INDEX IF EXISTS objects_by_parent; \
DROP INDEX IF EXISTS reverts_by_origin; DROP INDEX IF EXISTS reverts_by_mutation;";

/// Created when missing, by the writer only, through [`create`] (which puts the store's epoch
/// in place of `__EPOCH_US__`).
pub const SQL: &str = concat!(
    r#"
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- meta keys: schema_version; oldest_us (the history reaches back to this time: nothing older
-- was kept, or retention removed it); newest_us (the newest mutation written); epoch_us (what
-- `mutation_rows.at_us` counts from: the wall clock when the store was made).

-- Every name a row refers to by its integer: clusters, API versions, kinds, namespaces,
-- users, verbs, subresources, resolutions, policies. Never removed (a few thousand).
CREATE TABLE IF NOT EXISTS strings (
    id   INTEGER PRIMARY KEY,
    text TEXT NOT NULL UNIQUE
);

-- The classes, by the integer of `mutation_rows.class`.
CREATE TABLE IF NOT EXISTS classes (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
INSERT OR IGNORE INTO classes (id, name) VALUES (1, 'drift'), (2, 'expected'), (3, 'origin'), (4, 'unowned'),
    (5, 'initializing'), (6, 'deleting'), (7, 'undetermined'), (8, 'unknown-parent');

-- The controller owners objects name (an object's `parent`): one row for all its children.
CREATE TABLE IF NOT EXISTS owners (
    "#,
    identity_columns!(),
    r#"
    name             TEXT NOT NULL
);
-- An owner by its UID (one row per cluster, identity and UID: the writer looks it up before it
-- adds one): the UID's last 4 bytes find the few rows to compare whole.
CREATE INDEX IF NOT EXISTS owners_by_uid ON owners (substr(uid, -4));

-- One row per object ever written, live or deleted: its identity and its controller owner.
-- Its times and its tombstone are its mutations' (the view `object_facts`).
CREATE TABLE IF NOT EXISTS object_rows (
    "#,
    identity_columns!(),
    r#"
    namespace        INTEGER NOT NULL,          -- strings.id ('' for cluster-scoped objects)
    name             TEXT NOT NULL,             -- or a BLOB: what follows its owner's name
    owner            INTEGER                    -- owners.id, when it has one
);
-- By UID: its last 4 bytes find the few rows to compare whole (one row per cluster and UID:
-- the writer looks it up before it adds one).
CREATE INDEX IF NOT EXISTS object_rows_by_uid ON object_rows (substr(uid, -4));
-- What an object's mutations no longer show: its oldest and newest time and its tombstone as
-- they were before retention removed some of its mutations (or as written by hand through
-- `objects`, or as a store of schema 1 to 3 held them where its mutations say otherwise).
CREATE TABLE IF NOT EXISTS object_past (
    object_id        INTEGER PRIMARY KEY,       -- object_rows.id
    first_us         INTEGER,
    last_us          INTEGER,
    deleted_us       INTEGER,
    deleted_by       INTEGER,                   -- strings.id
    deleted_audit_id BLOB                       -- 16 bytes for a UUID, else its text
);
-- By kind and name: the name's last 6 characters (those that tell a pod from its siblings)
-- are enough to find the few rows to compare whole. A name that is its owner's name followed
-- by 6 characters or more is kept as those (a BLOB of their bytes; `objects` shows it whole):
-- the pods of a ReplicaSet, the ReplicaSets of a Deployment.
CREATE INDEX IF NOT EXISTS object_rows_by_name ON object_rows (kind, substr(CAST(name AS TEXT), -6));
CREATE INDEX IF NOT EXISTS object_rows_by_owner ON object_rows (owner) WHERE owner IS NOT NULL;

-- One row per classified mutation, in the order the service classified them: the id only
-- grows (retention never removes the row of the highest id, so that SQLite never gives an id
-- again), and the drift feed's cursor is an id.
CREATE TABLE IF NOT EXISTS mutation_rows (
    id             INTEGER PRIMARY KEY,
    object_id      INTEGER NOT NULL,           -- object_rows.id
    at_us          INTEGER NOT NULL,           -- time_us less the store's epoch (meta.epoch_us):
                                               -- 6 bytes within 4.4 years of it, not 8
    audit_id       BLOB NOT NULL,              -- 16 bytes for a UUID, else its text
    act            INTEGER NOT NULL,           -- acts.id: its verb, user, class, ...
    event          BLOB,                       -- NULL: the event is in event_blocks; else a
                                               -- row of an earlier schema: its JSON (TEXT) or
                                               -- one compressed event (BLOB, src/history/pack.rs)
    time_us        INTEGER GENERATED ALWAYS AS (at_us + __EPOCH_US__) VIRTUAL, -- µs since the Unix epoch (not stored)
    class          INTEGER GENERATED ALWAYS AS (act % 16) VIRTUAL -- classes.id (not stored)
);
-- What mutations did and how they were classified, one row for all that share it (a few
-- thousand: each user's verbs and classes): `id` is 16 times a sequence number plus the
-- class, so that a mutation's class is its `act % 16` (`mutation_rows.class`, indexed).
CREATE TABLE IF NOT EXISTS acts (
    id             INTEGER PRIMARY KEY,
    verb           INTEGER NOT NULL,           -- strings.id
    subresource    INTEGER NOT NULL,           -- strings.id: scale, eviction, ...; 0: none
    user           INTEGER NOT NULL,           -- strings.id
    class          INTEGER NOT NULL,           -- classes.id
    resolution     INTEGER NOT NULL,           -- strings.id; drift only: approved, rejected, unresolved; 0: none
    policy         INTEGER NOT NULL,           -- strings.id; drift only: what resolved it; 0: none
    reverts_person INTEGER NOT NULL,           -- 1: a drift that undoes a person's write
    UNIQUE (verb, subresource, user, class, resolution, policy, reverts_person)
);
-- An object's writes in time order; also how a mutation is written once (the writer looks
-- for the same auditID at the same time on the same object: an audit event sent again keeps
-- its stageTimestamp).
CREATE INDEX IF NOT EXISTS mutation_rows_by_object ON mutation_rows (object_id, time_us);
-- By time, for retention: the rows of the writer are found by their blocks' times
-- (event_blocks), those that hold their own event (an earlier schema's, or written by hand)
-- here.
CREATE INDEX IF NOT EXISTS mutation_rows_by_time ON mutation_rows (time_us) WHERE event IS NOT NULL;
-- The drift feed by class, in storage order (the row id: a row stored later has a higher one,
-- whatever its event time): the signal classes only, each in an index of its own whose one key
-- is the class, so that its entries are in row id order (rows of other classes cost no index
-- write; the feed reads them from the table, which is in storage order too).
CREATE INDEX IF NOT EXISTS mutations_drift_seq ON mutation_rows (class) WHERE class = 1;
CREATE INDEX IF NOT EXISTS mutations_origin_seq ON mutation_rows (class) WHERE class = 3;
CREATE INDEX IF NOT EXISTS mutations_undetermined_seq ON mutation_rows (class) WHERE class = 7;
CREATE INDEX IF NOT EXISTS mutations_unknown_parent_seq ON mutation_rows (class) WHERE class = 8;

-- Which origin writes each drift undoes (the enriched event's `reverts`), to find from an
-- origin write what reverted it.
CREATE TABLE IF NOT EXISTS revert_rows (
    mutation_id     INTEGER NOT NULL,          -- mutation_rows.id
    origin_audit_id BLOB NOT NULL              -- 16 bytes for a UUID, else its text
);
-- By the origin's auditID: its last 4 bytes find the few rows to compare whole.
CREATE INDEX IF NOT EXISTS revert_rows_by_origin ON revert_rows (substr(origin_audit_id, -4));
CREATE INDEX IF NOT EXISTS revert_rows_by_mutation ON revert_rows (mutation_id);

-- The zstd dictionaries the events are compressed with (trained on the store's first events);
-- a block (or an event of schema 2) names its own (src/history/pack.rs). Never removed.
CREATE TABLE IF NOT EXISTS dictionaries (
    id         INTEGER PRIMARY KEY,
    dictionary BLOB NOT NULL
);

-- The enriched events, compressed together: the events of the mutations `id` to `last_id`
-- (consecutive rows of one transaction), each as the jsonl sink writes it and followed by a
-- newline, in one zstd frame with the dictionary `dictionary` (0: none). Removed with the
-- last of its mutations; `min_us` and `max_us` bound the times of those left (retention).
CREATE TABLE IF NOT EXISTS event_blocks (
    id         INTEGER PRIMARY KEY,            -- the first mutation's id
    last_id    INTEGER NOT NULL,
    min_us     INTEGER NOT NULL,
    max_us     INTEGER NOT NULL,
    dictionary INTEGER NOT NULL,
    data       BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS event_blocks_by_min ON event_blocks (min_us);
CREATE INDEX IF NOT EXISTS event_blocks_by_max ON event_blocks (max_us);

-- An object's times and tombstone, from its mutations and what `object_past` keeps: the oldest
-- and newest time; the earliest removal (a delete, a deletecollection item, an eviction), by
-- whom, its auditID (of two at the same time, the one stored first).
CREATE VIEW IF NOT EXISTS object_facts AS
SELECT o.id AS id,
       min(coalesce(p.first_us, f.time_us), coalesce(f.time_us, p.first_us)) AS first_us,
       max(coalesce(p.last_us, l.time_us), coalesce(l.time_us, p.last_us)) AS last_us,
       CASE WHEN p.deleted_us IS NOT NULL AND (d.time_us IS NULL OR p.deleted_us <= d.time_us) THEN p.deleted_us ELSE d.time_us END AS deleted_us,
       CASE WHEN p.deleted_us IS NOT NULL AND (d.time_us IS NULL OR p.deleted_us <= d.time_us) THEN p.deleted_by ELSE (SELECT user FROM acts WHERE id = d.act) END AS deleted_by,
       CASE WHEN p.deleted_us IS NOT NULL AND (d.time_us IS NULL OR p.deleted_us <= d.time_us) THEN p.deleted_audit_id ELSE d.audit_id END AS deleted_audit_id
FROM object_rows o
LEFT JOIN object_past p ON p.object_id = o.id
LEFT JOIN mutation_rows f ON f.id = (SELECT id FROM mutation_rows WHERE object_id = o.id ORDER BY time_us, id LIMIT 1)
LEFT JOIN mutation_rows l ON l.id = (SELECT id FROM mutation_rows WHERE object_id = o.id ORDER BY time_us DESC, id DESC LIMIT 1)
LEFT JOIN mutation_rows d ON d.id = (
    SELECT m.id FROM mutation_rows m WHERE m.object_id = o.id
       AND m.act IN (SELECT id FROM acts WHERE verb IN (SELECT id FROM strings WHERE text IN ('delete', 'deletecollection'))
                     OR subresource = (SELECT id FROM strings WHERE text = 'eviction'))
    ORDER BY m.time_us, m.id LIMIT 1);

-- An object's identity as text, without what its mutations tell (its times, its tombstone):
-- what a listing filters and orders by before it reads `objects` for the rows it keeps.
CREATE VIEW IF NOT EXISTS object_names AS
SELECT o.id AS id, c.text AS cluster, "#,
    uuid_text!("o.uid"),
    r#" AS uid, av.text AS api_version, k.text AS kind, ns.text AS namespace,
       CASE WHEN typeof(o.name) = 'blob' THEN w.name || CAST(o.name AS TEXT) ELSE o.name END AS name
FROM object_rows o
JOIN strings c ON c.id = o.cluster
JOIN strings av ON av.id = o.api_version
JOIN strings k ON k.id = o.kind
JOIN strings ns ON ns.id = o.namespace
LEFT JOIN owners w ON w.id = o.owner;

-- The rows as text, with the columns of schemas 1 and 2 (for SQL by hand; docs/history.md).
CREATE VIEW IF NOT EXISTS objects AS
SELECT o.id AS id, c.text AS cluster, "#,
    uuid_text!("o.uid"),
    r#" AS uid, av.text AS api_version, k.text AS kind,
       ns.text AS namespace, CASE WHEN typeof(o.name) = 'blob' THEN w.name || CAST(o.name AS TEXT) ELSE o.name END AS name, "#,
    uuid_text!("w.uid"),
    r#" AS parent_uid, wav.text AS parent_api_version,
       wk.text AS parent_kind, w.name AS parent_name, x.first_us AS first_us, x.last_us AS last_us,
       x.deleted_us AS deleted_us, db.text AS deleted_by, "#,
    uuid_text!("x.deleted_audit_id"),
    r#" AS deleted_audit_id
FROM object_rows o
JOIN object_facts x ON x.id = o.id
JOIN strings c ON c.id = o.cluster
JOIN strings av ON av.id = o.api_version
JOIN strings k ON k.id = o.kind
JOIN strings ns ON ns.id = o.namespace
LEFT JOIN owners w ON w.id = o.owner
LEFT JOIN strings wav ON wav.id = w.api_version
LEFT JOIN strings wk ON wk.id = w.kind
LEFT JOIN strings db ON db.id = x.deleted_by;

-- `event`: the row's own event (schemas 1 and 2), else the mutation's id, which
-- src/history/pack.rs reads in event_blocks.
CREATE VIEW IF NOT EXISTS mutations AS
SELECT m.id AS id, m.object_id AS object_id, m.time_us AS time_us, "#,
    uuid_text!("m.audit_id"),
    r#" AS audit_id, v.text AS verb,
       s.text AS subresource, u.text AS user, c.name AS class, r.text AS resolution, p.text AS policy,
       a.reverts_person AS reverts_person, coalesce(m.event, m.id) AS event
FROM mutation_rows m
JOIN acts a ON a.id = m.act
JOIN strings v ON v.id = a.verb
LEFT JOIN strings s ON s.id = a.subresource
JOIN strings u ON u.id = a.user
JOIN classes c ON c.id = a.class
LEFT JOIN strings r ON r.id = a.resolution
LEFT JOIN strings p ON p.id = a.policy;

CREATE VIEW IF NOT EXISTS reverts AS
SELECT mutation_id, "#,
    uuid_text!("origin_audit_id"),
    r#" AS origin_audit_id FROM revert_rows;

-- Rows written by hand through the views, as the writer would write them.
CREATE TRIGGER IF NOT EXISTS objects_insert INSTEAD OF INSERT ON objects BEGIN
    INSERT OR IGNORE INTO strings (text) SELECT value FROM (
        SELECT new.cluster AS value UNION ALL SELECT new.api_version UNION ALL SELECT new.kind UNION ALL SELECT new.namespace
        UNION ALL SELECT new.deleted_by UNION ALL SELECT coalesce(new.parent_api_version, '') WHERE new.parent_uid IS NOT NULL
        UNION ALL SELECT coalesce(new.parent_kind, '') WHERE new.parent_uid IS NOT NULL) WHERE value IS NOT NULL;
    INSERT INTO owners (cluster, uid, api_version, kind, name)
    SELECT c, "#,
    uuid_value!("new.parent_uid"),
    r#", av, k, coalesce(new.parent_name, '') FROM (
        SELECT (SELECT id FROM strings WHERE text = new.cluster) AS c,
               (SELECT id FROM strings WHERE text = coalesce(new.parent_api_version, '')) AS av,
               (SELECT id FROM strings WHERE text = coalesce(new.parent_kind, '')) AS k)
    WHERE new.parent_uid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM owners w WHERE substr(w.uid, -4) = substr("#,
    uuid_value!("new.parent_uid"),
    r#", -4) AND w.uid = "#,
    uuid_value!("new.parent_uid"),
    r#" AND w.cluster = c
        AND w.api_version = av AND w.kind = k AND w.name = coalesce(new.parent_name, ''));
    SELECT RAISE(ABORT, 'UNIQUE constraint failed: object_rows.cluster, object_rows.uid') WHERE EXISTS (
        SELECT 1 FROM object_rows WHERE cluster = (SELECT id FROM strings WHERE text = new.cluster) AND substr(uid, -4) = substr("#,
    uuid_value!("new.uid"),
    r#", -4) AND uid = "#,
    uuid_value!("new.uid"),
    r#");
    INSERT INTO object_rows (id, cluster, uid, api_version, kind, namespace, name, owner)
    VALUES (new.id, (SELECT id FROM strings WHERE text = new.cluster), "#,
    uuid_value!("new.uid"),
    r#", (SELECT id FROM strings WHERE text = new.api_version),
            (SELECT id FROM strings WHERE text = new.kind), (SELECT id FROM strings WHERE text = new.namespace), new.name,
            (SELECT id FROM owners WHERE cluster = (SELECT id FROM strings WHERE text = new.cluster) AND substr(uid, -4) = substr("#,
    uuid_value!("new.parent_uid"),
    r#", -4) AND uid = "#,
    uuid_value!("new.parent_uid"),
    r#"
                AND api_version = (SELECT id FROM strings WHERE text = coalesce(new.parent_api_version, ''))
                AND kind = (SELECT id FROM strings WHERE text = coalesce(new.parent_kind, '')) AND name = coalesce(new.parent_name, '')));
    INSERT INTO object_past (object_id, first_us, last_us, deleted_us, deleted_by, deleted_audit_id)
    VALUES ((SELECT id FROM object_rows WHERE cluster = (SELECT id FROM strings WHERE text = new.cluster) AND substr(uid, -4) = substr("#,
    uuid_value!("new.uid"),
    r#", -4) AND uid = "#,
    uuid_value!("new.uid"),
    r#"),
            new.first_us, new.last_us, new.deleted_us, (SELECT id FROM strings WHERE text = new.deleted_by), "#,
    uuid_value!("new.deleted_audit_id"),
    r#");
END;
CREATE TRIGGER IF NOT EXISTS objects_update INSTEAD OF UPDATE ON objects BEGIN
    INSERT OR IGNORE INTO strings (text) SELECT new.deleted_by WHERE new.deleted_by IS NOT NULL;
    UPDATE object_rows SET name = new.name WHERE id = old.id;
    INSERT OR REPLACE INTO object_past (object_id, first_us, last_us, deleted_us, deleted_by, deleted_audit_id)
    SELECT old.id, new.first_us, new.last_us, new.deleted_us, (SELECT id FROM strings WHERE text = new.deleted_by),
           CASE WHEN new.deleted_audit_id IS old.deleted_audit_id THEN x.deleted_audit_id ELSE "#,
    uuid_value!("new.deleted_audit_id"),
    r#" END
    FROM object_facts x WHERE x.id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS objects_delete INSTEAD OF DELETE ON objects BEGIN
    DELETE FROM object_past WHERE object_id = old.id;
    DELETE FROM object_rows WHERE id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS mutations_insert INSTEAD OF INSERT ON mutations BEGIN
    INSERT OR IGNORE INTO strings (text) SELECT value FROM (
        SELECT new.verb AS value UNION ALL SELECT new.subresource UNION ALL SELECT new.user
        UNION ALL SELECT new.resolution UNION ALL SELECT new.policy) WHERE value IS NOT NULL;
    "#,
    intern_act!("new"),
    r#";
    "#,
    insert_mutation_row!("new"),
    r#"
    FROM (SELECT "#,
    act_columns!("new"),
    r#") x;
END;
CREATE TRIGGER IF NOT EXISTS mutations_update INSTEAD OF UPDATE ON mutations BEGIN
    INSERT OR IGNORE INTO strings (text) SELECT value FROM (
        SELECT new.user AS value UNION ALL SELECT new.resolution UNION ALL SELECT new.policy) WHERE value IS NOT NULL;
    "#,
    intern_act!("new"),
    r#";
    UPDATE mutation_rows SET at_us = new.time_us - "#,
    epoch!(),
    r#",
        act = (SELECT a.id FROM acts a, (SELECT "#,
    act_columns!("new"),
    r#") x WHERE "#,
    act_match!(),
    r#"),
        event = CASE WHEN new.event IS old.event THEN event ELSE new.event END
    WHERE id = old.id;
    -- Its block's bounds hold its new time too (retention and the feed's `since` go by them).
    UPDATE event_blocks SET min_us = min(min_us, new.time_us), max_us = max(max_us, new.time_us)
    WHERE id = (SELECT max(id) FROM event_blocks WHERE id <= old.id) AND last_id >= old.id;
END;
CREATE TRIGGER IF NOT EXISTS mutations_delete INSTEAD OF DELETE ON mutations BEGIN
    DELETE FROM mutation_rows WHERE id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS reverts_insert INSTEAD OF INSERT ON reverts BEGIN
    INSERT INTO revert_rows (mutation_id, origin_audit_id) VALUES (new.mutation_id, "#,
    uuid_value!("new.origin_audit_id"),
    r#");
END;
CREATE TRIGGER IF NOT EXISTS reverts_delete INSTEAD OF DELETE ON reverts BEGIN
    DELETE FROM revert_rows WHERE rowid IN (SELECT rowid FROM revert_rows WHERE mutation_id = old.mutation_id
        AND "#,
    uuid_text!("origin_audit_id"),
    r#" = old.origin_audit_id LIMIT 1);
END;
"#
);

/// The tables of schema 2 (and 1, without `dictionaries`), as an earlier build made them: the
/// conversion's tests make such stores.
pub const SQL_2: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS objects (
    id INTEGER PRIMARY KEY, cluster TEXT NOT NULL, uid TEXT NOT NULL, api_version TEXT NOT NULL, kind TEXT NOT NULL,
    namespace TEXT NOT NULL, name TEXT NOT NULL, parent_uid TEXT, parent_api_version TEXT, parent_kind TEXT, parent_name TEXT,
    first_us INTEGER NOT NULL, last_us INTEGER NOT NULL, deleted_us INTEGER, deleted_by TEXT, deleted_audit_id TEXT,
    UNIQUE (cluster, uid)
);
CREATE INDEX IF NOT EXISTS objects_by_name ON objects (kind, name, namespace, cluster);
CREATE INDEX IF NOT EXISTS objects_by_parent ON objects (parent_uid, cluster);
CREATE TABLE IF NOT EXISTS mutations (
    id INTEGER PRIMARY KEY, object_id INTEGER NOT NULL REFERENCES objects (id), time_us INTEGER NOT NULL, audit_id TEXT NOT NULL,
    verb TEXT NOT NULL, subresource TEXT, user TEXT NOT NULL, class TEXT NOT NULL, resolution TEXT, policy TEXT,
    reverts_person INTEGER NOT NULL DEFAULT 0, event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS mutations_by_object ON mutations (object_id, time_us);
CREATE UNIQUE INDEX IF NOT EXISTS mutations_by_time_audit ON mutations (time_us, audit_id, object_id);
CREATE INDEX IF NOT EXISTS mutations_drift_seq ON mutations (id, time_us) WHERE class = 'drift';
CREATE TABLE IF NOT EXISTS reverts (mutation_id INTEGER NOT NULL REFERENCES mutations (id), origin_audit_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS reverts_by_origin ON reverts (origin_audit_id);
CREATE INDEX IF NOT EXISTS reverts_by_mutation ON reverts (mutation_id);
CREATE TABLE IF NOT EXISTS dictionaries (id INTEGER PRIMARY KEY, dictionary BLOB NOT NULL);
"#;

/// The end of a conversion: an object's times and tombstone as the store held them
/// (`temp.past_old`) kept in `object_past` where its mutations say otherwise (retention had
/// removed some, or they were written by hand).
macro_rules! keep_past {
    () => {
        "
INSERT INTO object_past (object_id, first_us, last_us, deleted_us, deleted_by, deleted_audit_id)
    SELECT p.id, p.first_us, p.last_us, p.deleted_us, p.deleted_by, p.deleted_audit_id
    FROM temp.past_old p JOIN object_facts f ON f.id = p.id
    WHERE f.first_us IS NOT p.first_us OR f.last_us IS NOT p.last_us OR f.deleted_us IS NOT p.deleted_us
       OR f.deleted_by IS NOT p.deleted_by OR f.deleted_audit_id IS NOT p.deleted_audit_id;
DROP TABLE temp.past_old;
"
    };
}

/// Converts the tables of schema 1 or 2 (renamed `*_old` by the caller, their indexes dropped)
/// into those of [`SQL`], in the caller's transaction: names interned, rows copied with their
/// ids (the drift feed's cursors stay valid), their events kept as they were.
pub const CONVERT: &str = concat!(
    r#"
INSERT OR IGNORE INTO strings (text)
    SELECT cluster FROM objects_old UNION SELECT api_version FROM objects_old UNION SELECT kind FROM objects_old
    UNION SELECT namespace FROM objects_old UNION SELECT deleted_by FROM objects_old WHERE deleted_by IS NOT NULL
    UNION SELECT coalesce(parent_api_version, '') FROM objects_old WHERE parent_uid IS NOT NULL
    UNION SELECT coalesce(parent_kind, '') FROM objects_old WHERE parent_uid IS NOT NULL
    UNION SELECT verb FROM mutations_old UNION SELECT subresource FROM mutations_old WHERE subresource IS NOT NULL
    UNION SELECT user FROM mutations_old UNION SELECT resolution FROM mutations_old WHERE resolution IS NOT NULL
    UNION SELECT policy FROM mutations_old WHERE policy IS NOT NULL;
INSERT INTO owners (cluster, uid, api_version, kind, name)
    SELECT DISTINCT (SELECT id FROM strings WHERE text = cluster), "#,
    uuid_value!("parent_uid"),
    r#", (SELECT id FROM strings WHERE text = coalesce(parent_api_version, '')),
           (SELECT id FROM strings WHERE text = coalesce(parent_kind, '')), coalesce(parent_name, '')
    FROM objects_old WHERE parent_uid IS NOT NULL;
INSERT INTO object_rows (id, cluster, uid, api_version, kind, namespace, name, owner)
    SELECT o.id, (SELECT id FROM strings WHERE text = o.cluster), "#,
    uuid_value!("o.uid"),
    r#", (SELECT id FROM strings WHERE text = o.api_version),
           (SELECT id FROM strings WHERE text = o.kind), (SELECT id FROM strings WHERE text = o.namespace), o.name,
           (SELECT w.id FROM owners w WHERE w.cluster = (SELECT id FROM strings WHERE text = o.cluster) AND substr(w.uid, -4) = substr("#,
    uuid_value!("o.parent_uid"),
    r#", -4) AND w.uid = "#,
    uuid_value!("o.parent_uid"),
    r#"
                AND w.api_version = (SELECT id FROM strings WHERE text = coalesce(o.parent_api_version, ''))
                AND w.kind = (SELECT id FROM strings WHERE text = coalesce(o.parent_kind, '')) AND w.name = coalesce(o.parent_name, ''))
    FROM objects_old o;
CREATE TEMP TABLE past_old AS
    SELECT o.id AS id, o.first_us AS first_us, o.last_us AS last_us, o.deleted_us AS deleted_us,
           (SELECT id FROM strings WHERE text = o.deleted_by) AS deleted_by, "#,
    uuid_value!("o.deleted_audit_id"),
    r#" AS deleted_audit_id
    FROM objects_old o;
INSERT INTO acts (id, verb, subresource, user, class, resolution, policy, reverts_person)
    SELECT ((SELECT coalesce(max(id), 0) / 16 FROM acts) + row_number() OVER ()) * 16 + x.class, x.*
    FROM (SELECT DISTINCT "#,
    act_columns!("m"),
    r#" FROM mutations_old m) x
    WHERE NOT EXISTS (SELECT 1 FROM acts a WHERE "#,
    act_match!(),
    r#");
"#,
    insert_mutation_row!("x"),
    r#"
    FROM (SELECT m.id AS id, m.object_id AS object_id, m.time_us AS time_us, m.audit_id AS audit_id, m.event AS event, "#,
    act_columns!("m"),
    r#" FROM mutations_old m) x;
INSERT INTO revert_rows (mutation_id, origin_audit_id) SELECT mutation_id, "#,
    uuid_value!("origin_audit_id"),
    r#" FROM reverts_old;
DROP TABLE reverts_old;
DROP TABLE mutations_old;
DROP TABLE objects_old;
"#,
    keep_past!()
);

/// Before [`SQL`], when a store of schema 3 or 4 is converted: its objects' and mutations'
/// rows set aside (renamed `*_old`: in 3 the objects' rows held their times and tombstone, in 4
/// their table had an index of the whole UID and the mutations' rows their whole times), the
/// views over them and the indexes whose names or keys [`SQL`] makes anew dropped.
pub const BEFORE_CONVERT: &str = "
DROP VIEW IF EXISTS objects;
DROP VIEW IF EXISTS object_names;
DROP VIEW IF EXISTS mutations;
DROP VIEW IF EXISTS object_facts;
DROP INDEX IF EXISTS object_rows_by_name;
DROP INDEX IF EXISTS object_rows_by_owner;
DROP INDEX IF EXISTS owners_by_uid;
DROP INDEX IF EXISTS revert_rows_by_origin;
DROP INDEX IF EXISTS mutation_rows_by_object;
DROP INDEX IF EXISTS mutation_rows_by_time;
DROP INDEX IF EXISTS mutations_drift_seq;
DROP INDEX IF EXISTS mutations_origin_seq;
DROP INDEX IF EXISTS mutations_undetermined_seq;
DROP INDEX IF EXISTS mutations_unknown_parent_seq;
ALTER TABLE object_rows RENAME TO object_rows_old;
ALTER TABLE mutation_rows RENAME TO mutation_rows_old;";

/// Converts a store of schema 3 (after [`BEFORE_CONVERT`] and [`SQL`]), in the caller's
/// transaction: the objects' rows copied with their ids, their times and tombstones kept in
/// `object_past` where their mutations say otherwise.
pub const CONVERT_3: &str = concat!(
    "
INSERT INTO object_rows (id, cluster, uid, api_version, kind, namespace, name, owner)
    SELECT id, cluster, uid, api_version, kind, namespace, name, owner FROM object_rows_old;
CREATE TEMP TABLE past_old AS
    SELECT id, first_us, last_us, deleted_us, deleted_by, deleted_audit_id FROM object_rows_old;
DROP TABLE object_rows_old;
INSERT INTO acts (id, verb, subresource, user, class, resolution, policy, reverts_person)
    SELECT ((SELECT coalesce(max(id), 0) / 16 FROM acts) + row_number() OVER ()) * 16 + x.class, x.*
    FROM (SELECT DISTINCT verb, coalesce(subresource, 0) AS subresource, user, class, coalesce(resolution, 0) AS resolution,
                 coalesce(policy, 0) AS policy, reverts_person FROM mutation_rows_old) x
    WHERE NOT EXISTS (SELECT 1 FROM acts a WHERE ",
    act_match!(),
    ");
INSERT INTO mutation_rows (id, object_id, at_us, audit_id, act, event)
    SELECT x.id, x.object_id, x.time_us - ",
    epoch!(),
    ", x.audit_id, (SELECT a.id FROM acts a WHERE ",
    act_match!(),
    "), x.event
    FROM (SELECT id, object_id, time_us, audit_id, event, verb, coalesce(subresource, 0) AS subresource, user, class,
                 coalesce(resolution, 0) AS resolution, coalesce(policy, 0) AS policy, reverts_person FROM mutation_rows_old) x;
DROP TABLE mutation_rows_old;",
    keep_past!()
);

/// Converts a store of schema 4 (after [`BEFORE_CONVERT`] and [`SQL`]), in the caller's
/// transaction: the objects' and the mutations' rows copied with their ids, each time as its
/// distance from the store's epoch.
pub const CONVERT_4: &str = concat!(
    "
INSERT INTO object_rows (id, cluster, uid, api_version, kind, namespace, name, owner)
    SELECT id, cluster, uid, api_version, kind, namespace, name, owner FROM object_rows_old;
DROP TABLE object_rows_old;
INSERT INTO mutation_rows (id, object_id, at_us, audit_id, act, event)
    SELECT id, object_id, time_us - ",
    epoch!(),
    ", audit_id, act, event FROM mutation_rows_old;
DROP TABLE mutation_rows_old;"
);

/// Creates what is missing of [`SQL`] on `conn`: a new store's epoch (`meta.epoch_us`, what
/// `mutation_rows.at_us` counts from) is the wall clock when it is made.
pub fn create(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;")?;
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('epoch_us', ?1)",
        [crate::shell::now_us().to_string()],
    )?;
    let epoch: i64 =
        conn.query_row("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch_us'", [], |r| r.get(0))?;
    conn.execute_batch(&SQL.replace("__EPOCH_US__", &epoch.to_string()))
}
