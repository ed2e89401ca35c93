//! The history store: every classified mutation, every deleted object's tombstone and each
//! object's identity, kept on disk in an embedded SQLite database (docs/history.md), so an
//! object's story can be told after the fact (`why`, the query API).
//!
//! This module owns the schema and how the database is opened; the `history` sink writes it,
//! `replay --history` fills it from a log, and the readers query it in SQL.

pub mod batch;
pub mod pack;
pub mod retention;
pub mod schema;
pub mod story;
pub mod writer;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

pub use retention::{Retained, Retention};
pub use schema::SCHEMA_VERSION;
pub use writer::{Store, Written};

/// Why the store could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite failed on the store at `path`.
    #[error("history store {path}: {source}")]
    Sqlite {
        /// The store's file.
        path: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The store's schema is one this build does not read (`found`): an earlier one, which
    /// the writer converts, or a later one.
    #[error(
        "history store {path}: schema version {found}, this build reads {SCHEMA_VERSION}; a store of 1 to 5 (an earlier build's) is converted when \
         the writer opens it (start `serve` with its history sink, or run `kausality-stream replay --history {path} LOG` once); \
         of another version: move the file aside or use a matching build"
    )]
    Version {
        /// The store's file.
        path: String,
        /// Its `meta.schema_version` (`none`: no schema).
        found: String,
    },
    /// A reader was pointed at a store that is not there.
    #[error("history store {path} does not exist (start `serve` with a history sink, or fill one with `replay --history {path}`)")]
    Missing {
        /// The file looked for.
        path: String,
    },
    /// SQLite's check found the store damaged.
    #[error(
        "history store {path} is damaged ({detail}): move it aside (`mv {path} {path}.damaged`; a new store is made at the next start), \
         or recover its rows with `sqlite3 {path} .recover | sqlite3 {path}.recovered` and move that in its place; \
         `on_damaged = \"replace\"` in the history sink moves it aside by itself"
    )]
    Damaged {
        /// The store's file.
        path: String,
        /// What is damaged.
        detail: String,
    },
}

/// What the writer does with a store that fails SQLite's check at start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDamaged {
    /// Refuse to start, saying what to do ([`Error::Damaged`]).
    #[default]
    Refuse,
    /// Move the damaged files aside (`PATH.damaged-UNIXTIME`, with their WAL) and start a new
    /// store; a warning names where they went.
    Replace,
}

/// Whether the store at `path` passes SQLite's `quick_check` (every page read, the b-trees'
/// structure checked; not the indexes against their tables). `Err` says what is damaged; a
/// store that cannot be opened for another reason (permissions, a lock) passes here and
/// fails where it is opened, with SQLite's own message.
pub fn check_sound(path: &Path) -> std::result::Result<(), String> {
    if !path.exists() {
        return Ok(());
    }
    let damaged = |e: &rusqlite::Error| {
        matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase))
    };
    let conn =
        match Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX) {
            Ok(c) => c,
            Err(e) if damaged(&e) => return Err(e.to_string()),
            Err(_) => return Ok(()),
        };
    let _ = conn.busy_timeout(Duration::from_secs(5));
    let mut first = String::new();
    let checked = conn.prepare("PRAGMA quick_check(3)").and_then(|mut s| {
        let rows: Vec<String> = s.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<_>>()?;
        first = rows.join("; ");
        Ok(())
    });
    match checked {
        Ok(()) if first == "ok" => Ok(()),
        Ok(()) => Err(format!("SQLite's quick_check: {first}")),
        Err(e) if damaged(&e) => Err(e.to_string()),
        Err(_) => Ok(()),
    }
}

/// Moves a damaged store's files aside; returns where the database went.
pub fn move_aside(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let with = |p: &Path, suffix: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        std::path::PathBuf::from(s)
    };
    let aside = with(path, &format!(".damaged-{stamp}"));
    std::fs::rename(path, &aside)?;
    for extra in ["-wal", "-shm"] {
        let from = with(path, extra);
        if from.exists() {
            std::fs::rename(&from, with(&aside, extra))?;
        }
    }
    Ok(aside)
}

/// A result of the history store's functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Bytes per page of a store the writer creates. A mutation's row holds its event's JSON (about
/// 1.1 KB): a 4 KiB page (SQLite's default) takes three of them, so the table and its
/// indexes split a page every few rows; 16 KiB pages split less often and are written in
/// fewer, larger WAL frames (docs/performance.md §6).
pub const PAGE_SIZE: u32 = 16384;

/// How a connection is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The writer: creates the file and the schema when missing.
    Write,
    /// A reader (`why`, the query API): never creates, never writes.
    Read,
}

/// Opens the store at `path`: WAL journal (readers never block the writer, and a kill -9
/// loses at most the transaction in flight, never the file), the schema created or checked.
pub fn open(path: &Path, mode: Mode) -> Result<Connection> {
    let shown = path.display().to_string();
    let err = |source| Error::Sqlite { path: shown.clone(), source };
    if mode == Mode::Read && !path.exists() {
        return Err(Error::Missing { path: shown });
    }
    let flags = match mode {
        Mode::Write => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Mode::Read => OpenFlags::SQLITE_OPEN_READ_ONLY,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(err)?;
    // A reader waits for a checkpoint rather than failing with SQLITE_BUSY.
    conn.busy_timeout(Duration::from_secs(5)).map_err(err)?;
    if mode == Mode::Write {
        // Before any table exists: the page size of a new file (an existing one keeps its
        // own), and incremental vacuum, which lets retention give pages back to the file
        // system (docs/history.md "Retention").
        conn.execute_batch(&format!(
            "PRAGMA page_size = {PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
        ))
        .map_err(err)?;
    }
    let has_meta: bool = conn
        .query_row("SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'", [], |r| r.get(0))
        .map_err(err)?;
    let found: Option<String> = if has_meta {
        conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0))
            .optional()
            .map_err(err)?
    } else {
        None
    };
    match (mode, found) {
        (_, Some(v)) if v == SCHEMA_VERSION => {
            if mode == Mode::Write {
                schema::create(&conn).map_err(err)?;
            }
            Ok(conn)
        }
        // A new file (or one whose writer had not created the schema yet).
        (Mode::Write, None) => {
            schema::create(&conn).map_err(err)?;
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?1)", [SCHEMA_VERSION])
                .map_err(err)?;
            Ok(conn)
        }
        (Mode::Write, Some(v)) if schema::CONVERTS.contains(&v.as_str()) => {
            convert(&conn).map_err(err)?;
            tracing::info!(path = %shown, from = %v, to = SCHEMA_VERSION, "history store converted (its rows kept with their ids; events already stored are read as they were)");
            Ok(conn)
        }
        (Mode::Read, None) => Err(Error::Version { path: shown, found: "none".into() }),
        (_, Some(v)) => Err(Error::Version { path: shown, found: v }),
    }
}

/// Converts a store of schema 1 to 5 to [`SCHEMA_VERSION`] in one transaction. From 1 or 2:
/// its rows copied into the tables of [`schema::SQL`] with their ids, names interned, events
/// kept as they were (TEXT or one compressed event each); the old tables dropped and their
/// pages given back to the file system. From 3: the objects' rows copied without their times
/// and tombstones, which come from their mutations now (kept in `object_past` where these say
/// otherwise); its blocks are read as they are (their events whole, [`pack::restore`]). From 4:
/// the objects' and the mutations' rows copied with their ids (each time as its distance from
/// the store's epoch), the indexes of whole UIDs and auditIDs made anew on their last bytes.
/// From 5: nothing but its version (its blocks read as they are).
pub fn convert(conn: &Connection) -> rusqlite::Result<()> {
    let from: String = conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0))?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = (|| {
        let (before, after) = match from.as_str() {
            "3" => (schema::BEFORE_CONVERT, schema::CONVERT_3),
            "4" => (schema::BEFORE_CONVERT, schema::CONVERT_4),
            "5" => ("", ""),
            _ => {
                conn.execute_batch(
                    "ALTER TABLE objects RENAME TO objects_old;
                     ALTER TABLE mutations RENAME TO mutations_old;
                     ALTER TABLE reverts RENAME TO reverts_old;",
                )?;
                (schema::DROPPED, schema::CONVERT)
            }
        };
        conn.execute_batch(before)?;
        schema::create(conn)?;
        conn.execute_batch(after)?;
        conn.execute("UPDATE meta SET value = ?1 WHERE key = 'schema_version'", [SCHEMA_VERSION])?;
        conn.execute_batch("COMMIT")
    })();
    if let Err(e) = done {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(e);
    }
    let mut vacuum = conn.prepare("PRAGMA incremental_vacuum")?;
    let mut pages = vacuum.query([])?;
    while pages.next()?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_creates_the_schema_and_read_checks_it() {
        let dir = std::env::temp_dir().join(format!("kausality-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.db");
        let _ = std::fs::remove_file(&path);
        assert!(matches!(open(&path, Mode::Read), Err(Error::Missing { .. })));
        let w = open(&path, Mode::Write).unwrap();
        let mode: String = w.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let r = open(&path, Mode::Read).unwrap();
        let n: i64 = r.query_row("SELECT count(*) FROM mutations", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0);
        w.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'", []).unwrap();
        let e = open(&path, Mode::Read).unwrap_err().to_string();
        assert!(e.contains("schema version 999"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_store_has_its_page_size_and_an_older_one_keeps_its_own() {
        let dir = std::env::temp_dir().join(format!("kausality-history-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page_size = |c: &Connection| c.query_row("PRAGMA page_size", [], |r| r.get::<_, u32>(0)).unwrap();
        let new = dir.join("new.db");
        let _ = std::fs::remove_file(&new);
        assert_eq!(page_size(&open(&new, Mode::Write).unwrap()), PAGE_SIZE);
        // A store of an older build: SQLite's default 4 KiB pages, a mutation in it.
        let old = dir.join("old.db");
        let _ = std::fs::remove_file(&old);
        {
            let c = Connection::open(&old).unwrap();
            c.execute_batch("PRAGMA page_size = 4096; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;")
                .unwrap();
            schema::create(&c).unwrap();
            c.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?1)", [SCHEMA_VERSION]).unwrap();
            c.execute(
                "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES ('c', 'u', 'v1', 'Pod', 'ns', 'p', 1, 1)",
                [],
            )
            .unwrap();
        }
        let w = open(&old, Mode::Write).unwrap();
        assert_eq!(page_size(&w), 4096);
        w.execute("INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, 2, 'a', 'update', 'u', 'drift', '{}')", [])
            .unwrap();
        let r = open(&old, Mode::Read).unwrap();
        assert_eq!(page_size(&r), 4096);
        let n: i64 = r
            .query_row(
                "SELECT count(*) FROM mutations JOIN objects ON objects.id = object_id WHERE name = 'p'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        drop((w, r));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
