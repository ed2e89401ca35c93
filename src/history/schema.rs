//! The history store's schema (docs/history.md documents every column). Times are integers,
//! µs since the Unix epoch, of the API server's `stageTimestamp`; SQL shows them with
//! `datetime(time_us / 1e6, 'unixepoch')`.

/// Bumped on any change a reader of an older store could not take. 2: events compressed
/// (`dictionaries`, [`super::pack`]).
pub const SCHEMA_VERSION: &str = "2";

/// The versions this build reads: a store of version 1 (events as TEXT) reads as it is, and the
/// writer converts it to 2 when it opens it (it adds `dictionaries`; the rows stay as they are).
pub const READS: [&str; 2] = ["1", "2"];

/// Indexes of earlier builds that [`SQL`] replaced: dropped by the writer when it opens a store
/// (readers do not depend on them).
pub const DROPPED: &str = "DROP INDEX IF EXISTS mutations_by_audit; DROP INDEX IF EXISTS mutations_by_time; DROP INDEX IF EXISTS mutations_by_class; \
DROP INDEX IF EXISTS mutations_drift; DROP INDEX IF EXISTS mutations_origin; DROP INDEX IF EXISTS mutations_unowned; \
DROP INDEX IF EXISTS mutations_undetermined; DROP INDEX IF EXISTS mutations_unknown_parent;";

/// The classes with an index of their own ([`SQL`]: `mutations_<class>_seq`): the signal, rare
/// next to the `expected`, `initializing` and `deleting` writes of every rollout, which the
/// drift feed finds in the table itself. A query uses one only when it names the class as a
/// literal (`class = 'drift'`), as the partial index's own condition does.
pub const INDEXED_CLASSES: [&str; 5] = ["drift", "origin", "unowned", "undetermined", "unknown-parent"];

/// Created when missing, by the writer only.
pub const SQL: &str = r#"
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- meta keys: schema_version; oldest_us (the history reaches back to this time: nothing older
-- was kept, or retention removed it); newest_us (the newest mutation written).

-- One row per object ever written, live or deleted: its identity and its controller owner.
CREATE TABLE IF NOT EXISTS objects (
    id                 INTEGER PRIMARY KEY,
    cluster            TEXT NOT NULL,
    uid                TEXT NOT NULL,
    api_version        TEXT NOT NULL,
    kind               TEXT NOT NULL,
    namespace          TEXT NOT NULL,          -- '' for cluster-scoped objects
    name               TEXT NOT NULL,
    parent_uid         TEXT,                   -- the controller owner, when it has one
    parent_api_version TEXT,
    parent_kind        TEXT,
    parent_name        TEXT,
    first_us           INTEGER NOT NULL,       -- first mutation kept
    last_us            INTEGER NOT NULL,       -- newest mutation kept
    deleted_us         INTEGER,                -- the tombstone: when it was deleted (or evicted)
    deleted_by         TEXT,                   -- by whom
    deleted_audit_id   TEXT,
    UNIQUE (cluster, uid)
);
CREATE INDEX IF NOT EXISTS objects_by_name ON objects (kind, name, namespace, cluster);
CREATE INDEX IF NOT EXISTS objects_by_parent ON objects (parent_uid, cluster);

-- One row per classified mutation, in the order the service classified them: the id only
-- grows (retention never removes the row of the highest id, so that SQLite never gives an id
-- again), and the drift feed's cursor is an id.
CREATE TABLE IF NOT EXISTS mutations (
    id             INTEGER PRIMARY KEY,
    object_id      INTEGER NOT NULL REFERENCES objects (id),
    time_us        INTEGER NOT NULL,
    audit_id       TEXT NOT NULL,
    verb           TEXT NOT NULL,              -- as the enriched event's `verb`
    subresource    TEXT,                       -- scale, eviction, ...
    user           TEXT NOT NULL,
    class          TEXT NOT NULL,              -- drift, expected, origin, ...
    resolution     TEXT,                       -- drift only: approved, rejected, unresolved
    policy         TEXT,                       -- drift only: what resolved it
    reverts_person INTEGER NOT NULL DEFAULT 0, -- 1: a drift that undoes a person's write
    event          TEXT NOT NULL               -- the enriched event, as the jsonl sink writes it: a
                                               -- BLOB compressed with zstd (docs/history.md), or TEXT
);
CREATE INDEX IF NOT EXISTS mutations_by_object ON mutations (object_id, time_us);
-- Mutations by time (retention by age and by size), and each written once:
-- a log replayed again, or a batch the API server sent again, adds nothing (the same audit
-- event has the same stageTimestamp; one auditID may name several objects, a
-- deletecollection). Led by the time, new rows go to the end of the index, where an index led
-- by the random auditID would dirty a page of its own per row.
CREATE UNIQUE INDEX IF NOT EXISTS mutations_by_time_audit ON mutations (time_us, audit_id, object_id);
-- The drift feed by class, in storage order (the row id: a row stored later has a higher one,
-- whatever its event time), with the time for since/until: the signal classes only, each in an
-- index of its own (rows of other classes cost no index write; the feed reads them from the
-- table, which is in storage order too).
CREATE INDEX IF NOT EXISTS mutations_drift_seq ON mutations (id, time_us) WHERE class = 'drift';
CREATE INDEX IF NOT EXISTS mutations_origin_seq ON mutations (id, time_us) WHERE class = 'origin';
CREATE INDEX IF NOT EXISTS mutations_unowned_seq ON mutations (id, time_us) WHERE class = 'unowned';
CREATE INDEX IF NOT EXISTS mutations_undetermined_seq ON mutations (id, time_us) WHERE class = 'undetermined';
CREATE INDEX IF NOT EXISTS mutations_unknown_parent_seq ON mutations (id, time_us) WHERE class = 'unknown-parent';

-- Which origin writes each drift undoes (the enriched event's `reverts`), to find from an
-- origin write what reverted it.
CREATE TABLE IF NOT EXISTS reverts (
    mutation_id     INTEGER NOT NULL REFERENCES mutations (id),
    origin_audit_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reverts_by_origin ON reverts (origin_audit_id);
CREATE INDEX IF NOT EXISTS reverts_by_mutation ON reverts (mutation_id);

-- The zstd dictionaries the events are compressed with (trained on the store's first events);
-- an event names its own (src/history/pack.rs). Never removed: one per store, 64 KiB.
CREATE TABLE IF NOT EXISTS dictionaries (
    id         INTEGER PRIMARY KEY,
    dictionary BLOB NOT NULL
);
"#;
