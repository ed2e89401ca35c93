//! Writing the history store: batches of enriched events in, one transaction per group of
//! batches out, on a thread of its own (never the processor's, never a tokio worker).
//!
//! Each enriched event becomes: its object's row in `object_rows` (upserted: identity, owner,
//! first/last time, the tombstone of a delete or an eviction), one row in `mutation_rows`, its
//! JSON (as [`Enriched::write_json`] writes it) in the block of `event_blocks` being filled,
//! one row in `revert_rows` per origin write it undoes; names become integers of `strings`,
//! owners of `owners`; `meta.oldest_us`/`newest_us` follow. A transaction is all or nothing: a
//! store that cannot write (a full disk) keeps no part of the batches, which are held and tried
//! again. The same auditID on the same object is written once (looked up on
//! `mutation_rows_by_object`: an audit event keeps its stageTimestamp), so replaying a log
//! twice, or a batch the API server sent again, adds nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{params, params_from_iter, CachedStatement, Connection, OptionalExtension, ToSql};
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

use super::batch::{Batch, Facts, Ident, Part};
use super::pack::{self, Packer, BLOCK_EVENTS};
use super::retention::{self, Retained, Retention};
use super::schema::{self, id_value};
use super::{Error, Mode, Result};
use crate::decode::time::parse_rfc3339_micros;

/// An object's row by its cluster and UID (`?1`, `?2`): found on `object_rows_by_uid`, the
/// UID's last 4 bytes, then compared whole.
const FIND_OBJECT: &str =
    "SELECT id FROM object_rows WHERE substr(uid, -4) = substr(?2, -4) AND uid = ?2 AND cluster = ?1";

/// A new object's row. Its times and tombstone are its mutations' (the view `object_facts`),
/// never written here.
const INSERT_OBJECT: &str = "
INSERT INTO object_rows (cluster, uid, api_version, kind, namespace, name, owner)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// An object's row (`?8`) whose identity or owner changed: it keeps an owner once it had one.
const UPDATE_OBJECT: &str = "
UPDATE object_rows SET api_version = ?3, kind = ?4, namespace = ?5, name = ?6, owner = coalesce(?7, owner)
WHERE id = ?8 AND cluster = ?1 AND uid = ?2";

/// Whether the store has this mutation: the same auditID (`?3`, or its text `?4` in a row of
/// an earlier schema) at the same time on the same object.
const FIND_MUTATION: &str =
    "SELECT count(*) FROM mutation_rows WHERE object_id = ?1 AND time_us = ?2 AND audit_id IN (?3, ?4)";

/// A mutation's row: its time (`?2`) as its distance from the store's epoch (`at_us`).
const INSERT_MUTATION: &str = "INSERT INTO mutation_rows (object_id, at_us, audit_id, act) VALUES (?1, ?2, ?3, ?4)";

/// An act (`acts`): its verb, subresource, user, class, resolution, policy (names as their
/// integers, 0 for none) and whether it reverts a person's write.
type Act = [i64; 7];
const FIND_ACT: &str = "SELECT id FROM acts WHERE verb = ?1 AND subresource = ?2 AND user = ?3 AND class = ?4 \
    AND resolution = ?5 AND policy = ?6 AND reverts_person = ?7";
/// A new act's id: the next multiple of 16, plus its class (`mutation_rows.class` is `act % 16`).
const INSERT_ACT: &str = "INSERT INTO acts (id, verb, subresource, user, class, resolution, policy, reverts_person)
    VALUES ((SELECT coalesce(max(id), 0) / 16 + 1 FROM acts) * 16 + ?4, ?1, ?2, ?3, ?4, ?5, ?6, ?7)";

const INSERT_REVERT: &str = "INSERT INTO revert_rows (mutation_id, origin_audit_id) VALUES (?1, ?2)";

const INSERT_BLOCK: &str =
    "INSERT INTO event_blocks (id, last_id, min_us, max_us, dictionary, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

const FIND_STRING: &str = "SELECT id FROM strings WHERE text = ?1";
const INSERT_STRING: &str = "INSERT INTO strings (text) VALUES (?1)";
/// An owner, found on `owners_by_uid` (its UID's last 4 bytes), then compared whole.
const FIND_OWNER: &str = "SELECT id FROM owners WHERE substr(uid, -4) = substr(?2, -4) AND uid = ?2 AND cluster = ?1 \
    AND api_version = ?3 AND kind = ?4 AND name = ?5";
const INSERT_OWNER: &str = "INSERT INTO owners (cluster, uid, api_version, kind, name) VALUES (?1, ?2, ?3, ?4, ?5)";

/// `meta.oldest_us` is the oldest time written (retention moves it forward), `newest_us` the
/// newest.
const SET_TIMES: &str = "
INSERT INTO meta (key, value) VALUES ('oldest_us', ?1), ('newest_us', ?2)
ON CONFLICT (key) DO UPDATE SET value = CASE key
    WHEN 'oldest_us' THEN CAST(min(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT)
    ELSE CAST(max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT) END";

/// What one transaction wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Enriched events taken (each either written or a duplicate).
    pub events: u64,
    /// Rows added to `mutations` (events minus duplicates).
    pub mutations: u64,
    /// Events already in the store (the same auditID at the same time on the same object).
    pub duplicates: u64,
}

/// An open store and what writing it needs.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    retention: Retention,
    /// The fields an object's and an owner's hashes are taken of, reused.
    keys: Vec<u8>,
    /// One enriched event's JSON, when the batch has to write it, reused.
    event_json: Vec<u8>,
    /// The events of the block being filled ([`Pending`]).
    block: Pending,
    packer: Packer,
    /// Names' ids in `strings`, and owners' in `owners` (by a hash of the owner and its
    /// cluster): emptied when a transaction fails (its rows are gone), the owners also after
    /// retention removed objects.
    strings: HashMap<String, i64>,
    owners: HashMap<u128, i64>,
    /// Acts' ids in `acts`: emptied when a transaction fails.
    acts: HashMap<Act, i64>,
    /// Newest `stageTimestamp` written: the time of an event whose timestamp cannot be read.
    newest_us: i64,
    /// What `mutation_rows.at_us` counts from (`meta.epoch_us`).
    epoch_us: i64,
    /// Objects whose row the writer knows, by (cluster, UID): a write that changes nothing of
    /// its row (its times and tombstone are its mutations') skips the upsert, which rewrites
    /// the row and two index entries. Emptied when a transaction fails (its rows are gone),
    /// after retention removed objects, and when full.
    known: HashMap<u128, Known>,
}

/// What the writer knows of an object's row.
#[derive(Clone, Copy, Debug)]
struct Known {
    id: i64,
    /// Hash of apiVersion, kind, namespace and name as the row holds them.
    identity: u64,
    /// Hash of the controller owner the row holds, if any.
    parent: Option<u64>,
}

/// Most objects the writer keeps in [`Store::known`] (about 64 bytes each with the map's share): past it, the map
/// starts again empty and fills with the objects written next.
const KNOWN_MAX: usize = 1 << 18;

impl Store {
    /// Opens (or creates) the store at `path` for writing; a damaged one is refused
    /// ([`super::Error::Damaged`]).
    pub fn open(path: &Path, retention: Retention) -> Result<Store> {
        Self::open_checked(path, retention, super::OnDamaged::Refuse)
    }

    /// Opens (or creates) the store at `path` for writing, after SQLite's check of an
    /// existing one ([`super::check_sound`]): a damaged store is refused or moved aside.
    pub fn open_checked(path: &Path, retention: Retention, on_damaged: super::OnDamaged) -> Result<Store> {
        if let Err(detail) = super::check_sound(path) {
            let shown = path.display().to_string();
            match on_damaged {
                super::OnDamaged::Refuse => return Err(super::Error::Damaged { path: shown, detail }),
                super::OnDamaged::Replace => {
                    let aside = super::move_aside(path).map_err(|e| super::Error::Damaged {
                        path: shown.clone(),
                        detail: format!("{detail}; moving it aside failed: {e}"),
                    })?;
                    tracing::warn!(path = %shown, moved_to = %aside.display(), damage = %detail, "history store damaged: moved aside, a new one is started");
                }
            }
        }
        let conn = super::open(path, Mode::Write)?;
        let shown = path.display().to_string();
        let err = |source| Error::Sqlite { path: shown.clone(), source };
        // The WAL is cut back to this size at each checkpoint: without it, it keeps the size
        // of its largest transaction (a retention pass) for good.
        // Checkpoints come as often, so that the WAL never grows far past it between passes.
        let wal = retention.wal_bytes();
        // In the file's own pages: a store made by an older build has 4 KiB pages.
        let page_size: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(err)?;
        let pages = (wal / u64::from(page_size.max(512))).max(16);
        conn.execute_batch(&format!(
            "PRAGMA journal_size_limit = {wal}; PRAGMA wal_autocheckpoint = {pages}; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16384;"
        ))
        .map_err(err)?;
        // The writer keeps the references right itself (a mutation's object is the row it has
        // just upserted or inserted, a revert's mutation the row just inserted; retention
        // removes reverts, mutations and objects together): SQLite's check of each reference
        // (a lookup per row written, on by default in this build) is left out.
        conn.execute_batch("PRAGMA foreign_keys = OFF").map_err(err)?;
        conn.set_prepared_statement_cache_capacity(16);
        let newest_us = conn
            .query_row("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'newest_us'", [], |r| r.get(0))
            .optional()
            .map_err(err)?
            .unwrap_or(0);
        let epoch_us = conn
            .query_row("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch_us'", [], |r| r.get(0))
            .map_err(err)?;
        let packer = Packer::load(&conn).map_err(err)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            retention,
            keys: Vec::with_capacity(4096),
            event_json: Vec::with_capacity(4096),
            block: Pending::default(),
            packer,
            strings: HashMap::new(),
            owners: HashMap::new(),
            acts: HashMap::new(),
            newest_us,
            epoch_us,
            known: HashMap::new(),
        })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The writer's connection (for reading in the writer's thread).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    fn err(&self, source: rusqlite::Error) -> Error {
        sqlite_err(&self.path, source)
    }

    /// Writes `batches` in one transaction: all of them, or (on an error) none.
    pub fn write<B: Batch>(&mut self, batches: &[B]) -> Result<Written> {
        if self.packer.ready_to_train() {
            // Its own transaction, before the rows that use it.
            self.packer.train(&self.conn).map_err(|e| sqlite_err(&self.path, e))?;
        }
        let result = self.write_tx(batches);
        if result.is_err() {
            // The rows of the rolled-back transaction, new objects, names and owners among
            // them, are gone.
            self.known.clear();
            self.strings.clear();
            self.owners.clear();
            self.acts.clear();
        }
        self.block.clear();
        result
    }

    fn write_tx<B: Batch>(&mut self, batches: &[B]) -> Result<Written> {
        let mut written = Written::default();
        let mut newest = self.newest_us;
        let path = &self.path;
        let event_json = &mut self.event_json;
        let tx = self.conn.transaction().map_err(|e| sqlite_err(path, e))?;
        let result = (|| -> rusqlite::Result<(i64, i64)> {
            let mut rows = Rows {
                conn: &tx,
                statements: Statements::prepare(&tx)?,
                known: &mut self.known,
                keys: &mut self.keys,
                packer: &mut self.packer,
                block: &mut self.block,
                strings: &mut self.strings,
                owners: &mut self.owners,
                acts: &mut self.acts,
                epoch_us: self.epoch_us,
            };
            let mut oldest = i64::MAX;
            for batch in batches {
                batch.each(0..batch.len(), event_json, &mut |e, json| {
                    let time_us = parse_rfc3339_micros(e.stage_timestamp).unwrap_or(newest);
                    oldest = oldest.min(time_us);
                    newest = newest.max(time_us);
                    written.events += 1;
                    if rows.insert(e, json, time_us)? {
                        written.mutations += 1;
                    } else {
                        written.duplicates += 1;
                    }
                    Ok(())
                })?;
            }
            rows.flush_block()?;
            Ok((oldest, newest))
        })();
        let (oldest, newest) = result.map_err(|e| sqlite_err(path, e))?;
        if written.events > 0 {
            tx.prepare_cached(SET_TIMES)
                .and_then(|mut s| s.execute(params![oldest.to_string(), newest.to_string()]))
                .map_err(|e| sqlite_err(path, e))?;
        }
        tx.commit().map_err(|e| sqlite_err(path, e))?;
        self.newest_us = newest;
        Ok(written)
    }

    /// Applies the retention (age, then size): see [`retention`].
    pub fn retain(&mut self) -> Result<Retained> {
        self.retain_at(crate::shell::now_us(), 0)
    }

    /// [`Store::retain`] as if the wall clock said `now_us`, leaving `headroom` bytes under
    /// the size bound for what comes before the next pass.
    pub fn retain_at(&mut self, now_us: i64, headroom: u64) -> Result<Retained> {
        let retained = retention::retain(&mut self.conn, &self.retention, now_us, headroom);
        if !matches!(retained, Ok(Retained { objects: 0, .. })) {
            // Rows of known objects, and owners, may be gone.
            self.known.clear();
            self.owners.clear();
        }
        retained.map_err(|e| self.err(e))
    }

    /// Bytes of the store on disk: the database and its WAL.
    pub fn disk_bytes(&self) -> u64 {
        disk_bytes(&self.path)
    }

    /// Moves the WAL into the database and cuts it to nothing (at a stop).
    pub fn checkpoint(&self) -> Result<()> {
        self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).map_err(|e| self.err(e))
    }
}

fn sqlite_err(path: &Path, source: rusqlite::Error) -> Error {
    Error::Sqlite { path: path.display().to_string(), source }
}

/// Bytes of the store at `path` on disk: the database and its WAL.
pub fn disk_bytes(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    size(path) + size(Path::new(&wal))
}

/// Fewest characters after its owner's name for a name to be kept as those
/// (`object_rows_by_name` keys on a name's last 6).
const NAME_TAIL: usize = 6;

/// An object's name as its row keeps it: what follows its owner's name, as a BLOB, when it
/// starts with it and [`NAME_TAIL`] characters or more follow (a pod of a ReplicaSet, a
/// ReplicaSet of a Deployment); else the name, as TEXT. The view `objects` shows it whole.
fn stored_name(name: &str, owner: Option<&str>) -> rusqlite::types::Value {
    match owner.filter(|o| !o.is_empty()).and_then(|o| name.strip_prefix(o)) {
        Some(tail) if tail.chars().count() >= NAME_TAIL => rusqlite::types::Value::Blob(tail.as_bytes().to_vec()),
        _ => rusqlite::types::Value::Text(name.to_string()),
    }
}

/// The statements of one transaction's rows, taken from the connection's cache once for all
/// its events: `prepare_cached` hashes and compares the whole SQL text each time it hands a
/// statement out and takes it back (about 3,400 instructions per event, callgrind).
struct Statements<'c> {
    find_object: CachedStatement<'c>,
    insert_object: CachedStatement<'c>,
    update_object: CachedStatement<'c>,
    find_mutation: CachedStatement<'c>,
    insert_mutation: CachedStatement<'c>,
    insert_revert: CachedStatement<'c>,
    insert_block: CachedStatement<'c>,
}

impl<'c> Statements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Statements<'c>> {
        Ok(Statements {
            find_object: conn.prepare_cached(FIND_OBJECT)?,
            insert_object: conn.prepare_cached(INSERT_OBJECT)?,
            update_object: conn.prepare_cached(UPDATE_OBJECT)?,
            find_mutation: conn.prepare_cached(FIND_MUTATION)?,
            insert_mutation: conn.prepare_cached(INSERT_MUTATION)?,
            insert_revert: conn.prepare_cached(INSERT_REVERT)?,
            insert_block: conn.prepare_cached(INSERT_BLOCK)?,
        })
    }
}

/// The events of a block being filled: those of consecutive mutations (`first` to
/// `first + count - 1`), each followed by a newline, and the bounds of their times.
#[derive(Default)]
struct Pending {
    first: i64,
    count: usize,
    min_us: i64,
    max_us: i64,
    events: Vec<u8>,
}

impl Pending {
    fn clear(&mut self) {
        self.count = 0;
        self.events.clear();
    }
}

/// What writing one transaction's rows keeps between events.
struct Rows<'a> {
    /// The transaction's connection (the rowid of the row just inserted).
    conn: &'a Connection,
    /// Held for the whole transaction (see [`Statements`]).
    statements: Statements<'a>,
    known: &'a mut HashMap<u128, Known>,
    /// The fields of an object's and an owner's hashes.
    keys: &'a mut Vec<u8>,
    /// Compresses the blocks.
    packer: &'a mut Packer,
    block: &'a mut Pending,
    strings: &'a mut HashMap<String, i64>,
    owners: &'a mut HashMap<u128, i64>,
    acts: &'a mut HashMap<Act, i64>,
    /// What `mutation_rows.at_us` counts from.
    epoch_us: i64,
}

/// The fields, each followed by a 0 byte, in `buf` (emptied first): what an object's key,
/// identity and owner are hashed from. One pass of xxh3 over a short buffer costs less than
/// feeding the fields to its streaming hasher, whose state is set up for each hash.
fn joined<'b>(buf: &'b mut Vec<u8>, fields: &[&str]) -> &'b [u8] {
    buf.clear();
    for f in fields {
        buf.extend_from_slice(f.as_bytes());
        buf.push(0);
    }
    buf
}

impl Rows<'_> {
    /// One enriched event's rows (its facts `e`, its `json`); false when the mutation was
    /// already in the store.
    fn insert(&mut self, e: &Facts<'_>, json: &[u8], time_us: i64) -> rusqlite::Result<bool> {
        let (object_id, new) = self.object(e)?;
        let audit_id = id_value(e.audit_id);
        // An object whose row was just made has no mutation yet: nothing to look up.
        if !new
            && self
                .statements
                .find_mutation
                .query_row(params![object_id, time_us, audit_id, e.audit_id], |r| r.get::<_, i64>(0))?
                > 0
        {
            return Ok(false);
        }
        let verb = self.string(e.verb)?;
        let subresource = e.subresource.map(|s| self.string(s)).transpose()?.unwrap_or(0);
        let user = self.string(e.user)?;
        let resolution = e.resolution.map(|r| self.string(r)).transpose()?.unwrap_or(0);
        let policy = e.policy.map(|p| self.string(p)).transpose()?.unwrap_or(0);
        let class = schema::class_id(e.class.as_str()).expect("every class has its id");
        let act = self.act([verb, subresource, user, class, resolution, policy, i64::from(e.reverts_person)])?;
        self.statements.insert_mutation.execute(params![
            object_id,
            time_us.saturating_sub(self.epoch_us),
            audit_id,
            act
        ])?;
        let mutation_id = self.conn.last_insert_rowid();
        for origin in e.reverts.audit_ids() {
            self.statements.insert_revert.execute(params![mutation_id, id_value(origin)])?;
        }
        // The event into the block: after the one before it, or a new block.
        if self.block.count > 0 && mutation_id != self.block.first + self.block.count as i64 {
            self.flush_block()?;
        }
        if self.block.count == 0 {
            self.block.first = mutation_id;
            (self.block.min_us, self.block.max_us) = (time_us, time_us);
        }
        self.block.min_us = self.block.min_us.min(time_us);
        self.block.max_us = self.block.max_us.max(time_us);
        // Without the auditID and the object's UID, which the rows hold, and the trace's last
        // hop when it is the write itself (pack::restore puts them back).
        let start = self.block.events.len();
        pack::strip_into(&mut self.block.events, json, e.audit_id, e.object.uid);
        self.packer.sample(&self.block.events[start..]);
        self.block.events.push(b'\n');
        self.block.count += 1;
        if self.block.count >= BLOCK_EVENTS {
            self.flush_block()?;
        }
        Ok(true)
    }

    /// The block being filled, compressed into `event_blocks`.
    fn flush_block(&mut self) -> rusqlite::Result<()> {
        if self.block.count == 0 {
            return Ok(());
        }
        let last = self.block.first + self.block.count as i64 - 1;
        let dictionary = self.packer.dictionary();
        let data = self.packer.pack_block(&self.block.events)?;
        self.statements.insert_block.execute(params![
            self.block.first,
            last,
            self.block.min_us,
            self.block.max_us,
            dictionary,
            data
        ])?;
        self.block.clear();
        Ok(())
    }

    /// The id of a name in `strings`, added when new.
    fn string(&mut self, text: &str) -> rusqlite::Result<i64> {
        if let Some(&id) = self.strings.get(text) {
            return Ok(id);
        }
        let found: Option<i64> = self.conn.prepare_cached(FIND_STRING)?.query_row([text], |r| r.get(0)).optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.conn.prepare_cached(INSERT_STRING)?.execute([text])?;
                self.conn.last_insert_rowid()
            }
        };
        if self.strings.len() >= KNOWN_MAX {
            self.strings.clear();
        }
        self.strings.insert(text.to_string(), id);
        Ok(id)
    }

    /// The id of an act in `acts`, added when new.
    fn act(&mut self, act: Act) -> rusqlite::Result<i64> {
        if let Some(&id) = self.acts.get(&act) {
            return Ok(id);
        }
        let found: Option<i64> =
            self.conn.prepare_cached(FIND_ACT)?.query_row(params_from_iter(act), |r| r.get(0)).optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.conn.prepare_cached(INSERT_ACT)?.execute(params_from_iter(act))?;
                self.conn.last_insert_rowid()
            }
        };
        if self.acts.len() >= KNOWN_MAX {
            self.acts.clear();
        }
        self.acts.insert(act, id);
        Ok(id)
    }

    /// The id of an owner in `owners`, added when new.
    fn owner(&mut self, cluster: i64, p: &Ident<'_>) -> rusqlite::Result<i64> {
        let key = xxh3_128(joined(self.keys, &[&cluster.to_string(), p.uid, p.api_version, p.kind, p.name]));
        if let Some(&id) = self.owners.get(&key) {
            return Ok(id);
        }
        let api_version = self.string(p.api_version)?;
        let kind = self.string(p.kind)?;
        let row = params![cluster, id_value(p.uid), api_version, kind, p.name];
        let found: Option<i64> = self.conn.prepare_cached(FIND_OWNER)?.query_row(row, |r| r.get(0)).optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.conn.prepare_cached(INSERT_OWNER)?.execute(row)?;
                self.conn.last_insert_rowid()
            }
        };
        if self.owners.len() >= KNOWN_MAX {
            self.owners.clear();
        }
        self.owners.insert(key, id);
        Ok(id)
    }

    /// The id of the event's object's row: a known object's whose identity and owner are what
    /// the row holds, as it is; else the row inserted (a new object) or upserted. True when
    /// the row was inserted now.
    fn object(&mut self, e: &Facts<'_>) -> rusqlite::Result<(i64, bool)> {
        let o = &e.object;
        let p = e.parent.as_ref();
        // An object without a UID (an API server that left it out) is known by its name.
        let named_uid;
        let uid: &str = if o.uid.is_empty() {
            named_uid = format!("name:{}/{}/{}/{}", o.api_version, o.kind, o.namespace, o.name);
            &named_uid
        } else {
            o.uid
        };
        let buf = &mut *self.keys;
        let key = xxh3_128(joined(buf, &[e.cluster, uid]));
        let identity = xxh3_64(joined(buf, &[o.api_version, o.kind, o.namespace, o.name]));
        let parent = p.map(|p| xxh3_64(joined(buf, &[p.uid, p.api_version, p.kind, p.name])));
        let known = self.known.get(&key).copied();
        if let Some(Known { id, identity: known_identity, parent: known_parent }) = known {
            if known_identity == identity && (parent.is_none() || parent == known_parent) {
                return Ok((id, false));
            }
        }
        // The row's identity and owner: INSERT_OBJECT's parameters, UPDATE_OBJECT's.
        let cluster = self.string(e.cluster)?;
        let api_version = self.string(o.api_version)?;
        let kind = self.string(o.kind)?;
        let namespace = self.string(o.namespace)?;
        let owner = p.map(|p| self.owner(cluster, p)).transpose()?;
        let uid_value = id_value(uid);
        let name = stored_name(o.name, p.map(|p| p.name));
        let update = |statements: &mut Statements, id: i64| -> rusqlite::Result<bool> {
            let row: [&dyn ToSql; 8] = [&cluster, &uid_value, &api_version, &kind, &namespace, &name, &owner, &id];
            Ok(statements.update_object.execute(&row[..])? == 1)
        };
        // A known object's row by its id; else looked up (a store opened again, an object
        // forgotten), and inserted when it is not there: most often a new object.
        let id = match known {
            Some(k) if update(&mut self.statements, k.id)? => k.id,
            _ => match self
                .statements
                .find_object
                .query_row(params![cluster, uid_value], |r| r.get::<_, i64>(0))
                .optional()?
            {
                Some(id) => {
                    update(&mut self.statements, id)?;
                    id
                }
                None => {
                    let row: [&dyn ToSql; 7] = [&cluster, &uid_value, &api_version, &kind, &namespace, &name, &owner];
                    self.statements.insert_object.execute(&row[..])?;
                    let id = self.conn.last_insert_rowid();
                    self.remember(key, Known { id, identity, parent });
                    return Ok((id, true));
                }
            },
        };
        // The row keeps an owner once it had one (coalesce): so does what is known of it.
        let parent = parent.or_else(|| known.and_then(|k| k.parent));
        self.remember(key, Known { id, identity, parent });
        Ok((id, false))
    }

    fn remember(&mut self, key: u128, known: Known) {
        if self.known.len() >= KNOWN_MAX {
            self.known.clear();
        }
        self.known.insert(key, known);
    }
}

/// Where the writer thread takes batches from: the sink's tokio queue, or replay's channel.
pub trait Queue<B>: Send {
    /// The next batch, waiting for it; `None` once the queue is closed and empty.
    fn next(&mut self) -> Option<B>;
    /// A batch already waiting, if any.
    fn waiting(&mut self) -> Option<B>;
    /// No batch will come any more (what is waiting may still be taken).
    fn is_closed(&self) -> bool;
}

impl<B: Send> Queue<B> for tokio::sync::mpsc::Receiver<B> {
    fn next(&mut self) -> Option<B> {
        self.blocking_recv()
    }
    fn waiting(&mut self) -> Option<B> {
        self.try_recv().ok()
    }
    fn is_closed(&self) -> bool {
        tokio::sync::mpsc::Receiver::is_closed(self)
    }
}

impl<B: Send> Queue<B> for std::sync::mpsc::Receiver<B> {
    fn next(&mut self) -> Option<B> {
        self.recv().ok()
    }
    fn waiting(&mut self) -> Option<B> {
        self.try_recv().ok()
    }
    fn is_closed(&self) -> bool {
        false
    }
}

/// What the writer thread tells whoever started it.
#[derive(Debug)]
pub enum Report {
    /// A transaction was committed; `bytes`: the store's size on disk after it.
    Written {
        /// What it wrote.
        written: Written,
        /// The store's bytes on disk, the WAL included.
        bytes: u64,
    },
    /// A transaction failed (rolled back): its batches are held and tried again.
    Failing(String),
    /// Writing works again after [`Report::Failing`].
    Recovered,
    /// A retention pass removed something.
    Retained(Retained),
    /// The thread ends with events it could not write.
    Lost {
        /// How many events were not written.
        events: u64,
        /// The last failure.
        error: String,
    },
}

/// How the writer thread runs.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Most events in one transaction (queued batches are grouped up to it).
    pub max_events_per_transaction: usize,
    /// Retention runs after this many transactions, or this long after the last pass.
    pub retention_every_transactions: u32,
    /// Retention runs when this long passed since the last pass.
    pub retention_every: Duration,
    /// How long a failing transaction is tried again: forever while the queue is open
    /// (`serve`: the queue fills and holds intake back), this long once it is closed. With
    /// `give_up_at_once` (`replay`), the first failure ends the thread.
    pub retry_after_stop: Duration,
    /// End the thread at the first failure (`replay`), reporting what is lost.
    pub give_up_at_once: bool,
    /// Once the queue is closed, run passes until one removes nothing (`replay`: nothing is
    /// waiting to be written); else one pass, as long as any (a stop).
    pub retain_to_the_end: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            max_events_per_transaction: 20_000,
            retention_every_transactions: 64,
            retention_every: Duration::from_secs(10),
            retry_after_stop: Duration::from_secs(5),
            give_up_at_once: false,
            retain_to_the_end: false,
        }
    }
}

/// Keeps a size-bounded store within its bound while it is written fast (docs/history.md,
/// "Retention"): a transaction adds about [`SizePace::SHARE`] of the bound at most, and a pass
/// is due as soon as the next transaction, as large as the last ones, would take the store past
/// its bound.
struct SizePace {
    max_bytes: u64,
    /// Bytes on disk one event adds, as measured on the transactions so far.
    per_event: u64,
    /// Bytes on disk one transaction may add (database and WAL): the largest recent growth,
    /// slowly forgotten.
    growth: u64,
}

impl SizePace {
    /// One transaction's share of the bound: 1/20 (5 %).
    const SHARE: u64 = 20;
    /// What an event is taken to cost before any is measured: an enriched event's JSON and
    /// its index entries.
    const FIRST_GUESS: u64 = 2048;

    /// The first guess of a transaction's growth: its most events at [`Self::FIRST_GUESS`]
    /// each, within its share of the bound (a pass at start leaves that much room: 41 MB of a
    /// 10 GiB bound, not its twentieth).
    fn new(max_bytes: u64, max_events: usize) -> SizePace {
        let growth = (max_bytes / Self::SHARE).min(Self::FIRST_GUESS.saturating_mul(max_events as u64));
        SizePace { max_bytes, per_event: Self::FIRST_GUESS, growth }
    }

    fn bounded(&self) -> bool {
        self.max_bytes > 0
    }

    /// Most events the next transaction may take.
    fn most_events(&self, most: usize) -> usize {
        if !self.bounded() {
            return most;
        }
        let budget = self.max_bytes / Self::SHARE;
        usize::try_from(budget / self.per_event.max(1)).unwrap_or(usize::MAX).clamp(16, most.max(16))
    }

    /// A transaction of `events` took the store from `before` to `after` bytes on disk;
    /// whether a pass is due. The cost per event follows what was measured (the WAL only
    /// grows between checkpoints, so a growth is a fair measure; a shrink tells nothing).
    fn wrote(&mut self, events: usize, before: u64, after: u64) -> bool {
        if !self.bounded() {
            return false;
        }
        if events > 0 && after > before {
            let measured = (after - before) / events as u64;
            self.per_event = (self.per_event + measured.max(64)) / 2;
            // The largest of the recent growths: a WAL grows in bursts (a transaction that
            // touches many index pages), and the bound must hold for those too.
            self.growth = (self.growth - self.growth / 8).max(after - before);
        }
        after.saturating_add(self.growth) >= self.max_bytes
    }
}

const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Starts the writer thread: it takes batches from `queue` until it is closed, writes each
/// group of waiting batches in one transaction, runs the retention now and then, and calls
/// `report` after each step. Ends with retention and a checkpoint once the queue is closed and
/// drained.
pub fn spawn<B, Q, R>(
    mut store: Store,
    mut queue: Q,
    opts: WriterOptions,
    mut report: R,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    B: Batch + Send + 'static,
    Q: Queue<B> + 'static,
    R: FnMut(Report) + Send + 'static,
{
    std::thread::Builder::new().name("history-writer".into()).spawn(move || {
        let mut held: Vec<B> = Vec::new();
        let mut due = Due {
            since: 0,
            last: Instant::now(),
            pace: SizePace::new(store.retention.max_bytes, opts.max_events_per_transaction),
        };
        while let Some(first) = queue.next() {
            let mut events = first.len();
            held.push(first);
            let most = due.pace.most_events(opts.max_events_per_transaction);
            while events < most {
                let Some(more) = queue.waiting() else { break };
                events += more.len();
                held.push(more);
            }
            if events <= most {
                let before = store.disk_bytes();
                if !write_held(&mut store, &mut queue, &mut held, &opts, &mut report) {
                    return;
                }
                due.wrote(&mut store, events, before, &opts, &mut report);
                continue;
            }
            // A size-bounded store and batches larger than one transaction's share of the
            // bound: written in slices, each its own transaction, so that the store never goes
            // past its bound by more than one slice (each batch is still written whole or
            // retried, in order, before the next is taken).
            let batches = std::mem::take(&mut held);
            let mut rest = batches.iter().map(Batch::len).sum::<usize>();
            for slice in slices(&batches, most) {
                let n: usize = slice.iter().map(|s| s.len()).sum();
                let before = store.disk_bytes();
                let mut slice = slice;
                if !write_held(&mut store, &mut queue, &mut slice, &opts, &mut report) {
                    // What was lost of this slice is reported; the slices after it too.
                    report(Report::Lost {
                        events: (rest - n) as u64,
                        error: "the transactions before them failed".to_string(),
                    });
                    return;
                }
                rest -= n;
                due.wrote(&mut store, n, before, &opts, &mut report);
            }
        }
        // A last pass once the queue is closed: a short `replay` (fewer transactions than a
        // pass waits for) leaves the store as its age and size say too, and so does a stop.
        // A pass stops after 250 ms once the bound holds; `replay` goes on to the end.
        while retention_pass(&mut store, 0, &mut report) && opts.retain_to_the_end {}
        if let Err(e) = store.checkpoint() {
            tracing::debug!(error = %e, "history store: final checkpoint");
        }
    })
}

/// When the next retention pass is due: every so many transactions, every so long, and, with a
/// size bound, as soon as the store nears it ([`SizePace`]).
struct Due {
    since: u32,
    last: Instant,
    pace: SizePace,
}

impl Due {
    /// A transaction of `events` took the store from `before` bytes on disk: runs a pass when
    /// one is due.
    fn wrote<R: FnMut(Report)>(
        &mut self,
        store: &mut Store,
        events: usize,
        before: u64,
        opts: &WriterOptions,
        report: &mut R,
    ) {
        self.since += 1;
        // With a size bound the disk is looked at after every transaction: a stream faster than
        // the passes would take the store far past its bound between two.
        let near_bound = self.pace.bounded() && self.pace.wrote(events, before, store.disk_bytes());
        if near_bound || self.since >= opts.retention_every_transactions || self.last.elapsed() >= opts.retention_every
        {
            self.since = 0;
            self.last = Instant::now();
            // Room for the next transaction, as large as the last ones (the WAL included).
            let headroom = if self.pace.bounded() { self.pace.growth } else { 0 };
            retention_pass(store, headroom, report);
        }
    }
}

/// One retention pass leaving `headroom` bytes under the bound, reported when it removed
/// something; whether it did. A failure is logged: writing goes on, the next pass tries again.
fn retention_pass<R: FnMut(Report)>(store: &mut Store, headroom: u64, report: &mut R) -> bool {
    match store.retain_at(crate::shell::now_us(), headroom) {
        Ok(r) if r.mutations > 0 || r.objects > 0 => {
            report(Report::Retained(r));
            true
        }
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(error = %e, "history store: retention failed");
            false
        }
    }
}

/// The events of `batches` in slices of at most `most` (a batch may be cut in two).
fn slices<B: Batch>(batches: &[B], most: usize) -> Vec<Vec<Part<'_, B>>> {
    let mut out = vec![Vec::new()];
    let mut room = most;
    for batch in batches {
        let mut at = 0;
        while at < batch.len() {
            if room == 0 {
                out.push(Vec::new());
                room = most;
            }
            let n = (batch.len() - at).min(room);
            out.last_mut().expect("one slice at least").push(Part { batch, range: at..at + n });
            room -= n;
            at += n;
        }
    }
    out
}

/// Writes the held batches, trying again until it works (see [`WriterOptions`]). False when
/// it gave up (what was held and queued is reported lost).
fn write_held<H, B, Q, R>(
    store: &mut Store,
    queue: &mut Q,
    held: &mut Vec<H>,
    opts: &WriterOptions,
    report: &mut R,
) -> bool
where
    H: Batch,
    B: Batch,
    Q: Queue<B>,
    R: FnMut(Report),
{
    let mut wait = RETRY_FIRST;
    let mut failing = false;
    let mut closed_since: Option<Instant> = None;
    loop {
        let error = match store.write(held) {
            Ok(written) => {
                held.clear();
                if failing {
                    report(Report::Recovered);
                }
                report(Report::Written { written, bytes: store.disk_bytes() });
                return true;
            }
            Err(e) => e.to_string(),
        };
        failing = true;
        report(Report::Failing(error.clone()));
        let closed = queue.is_closed();
        let since = closed.then(|| *closed_since.get_or_insert_with(Instant::now));
        if opts.give_up_at_once || since.is_some_and(|s| s.elapsed() >= opts.retry_after_stop) {
            let mut lost: u64 = held.iter().map(|b| b.len() as u64).sum();
            if !opts.give_up_at_once {
                while let Some(rest) = queue.waiting() {
                    lost += rest.len() as u64;
                }
            }
            report(Report::Lost { events: lost, error });
            return false;
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(RETRY_MAX);
    }
}
