//! Retention: the history store keeps mutations for `max_age` and within `max_bytes` on disk.
//!
//! A pass (the writer runs one every so many transactions or seconds):
//! 1. by age: mutations older than `max_age` before the newest one written (event time, so
//!    that a replayed log of last month is not thrown away as it is written), the newest
//!    being the newest that is not ahead of the wall clock: one event stamped in 2099 must not
//!    make every other row "older than 30 days";
//! 2. by size: while the pages in use are over the database's share of `max_bytes`, the
//!    oldest mutations, in chunks sized from the average row, down to 90% of that share (so
//!    that the next pass does not start at once);
//!
//! each chunk a transaction of its own, with the chunk's `reverts` rows, the event blocks and
//! owners no longer used, and the objects left without any mutation (tombstoned or not: an object is written with each of its mutations,
//! so one without any has no history left in the store); then `meta.oldest_us` moves to the
//! oldest mutation left, `PRAGMA incremental_vacuum` gives the free pages back and a WAL
//! checkpoint (TRUNCATE) makes the file shrink on disk.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

/// How much the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Mutations older than this (before the newest one written) are removed; zero keeps
    /// them whatever their age.
    pub max_age: Duration,
    /// The store's database and WAL are kept under this many bytes; zero: no limit.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { max_age: Duration::from_secs(30 * 86_400), max_bytes: 10 << 30 }
    }
}

impl Retention {
    /// The WAL's share of `max_bytes`: it is checkpointed and cut back to this size.
    pub fn wal_bytes(&self) -> u64 {
        match self.max_bytes {
            0 => 64 << 20,
            m => (m / 16).clamp(256 << 10, 64 << 20),
        }
    }

    /// The database file's share of `max_bytes` (zero: no limit).
    fn database_bytes(&self) -> u64 {
        match self.max_bytes {
            0 => 0,
            m => m.saturating_sub(self.wal_bytes()).max(m / 2),
        }
    }
}

/// What a pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retained {
    /// Mutations removed.
    pub mutations: u64,
    /// Objects removed (left without a mutation).
    pub objects: u64,
    /// `meta.oldest_us` after the pass, when it moved.
    pub oldest_us: Option<i64>,
}

/// Most mutations removed in one transaction.
const CHUNK_MAX: i64 = 20_000;
const CHUNK_MIN: i64 = 64;

/// How long a pass goes on once what it must do is done: the store back within its bound.
/// A pass runs on the writer's thread, which writes nothing meanwhile; removing a mutation
/// costs about twice writing it (31-37 µs on the 10-million-mutation store of
/// docs/performance.md), so cutting a 10 GiB store to 90 % at once would stop the writer for
/// minutes. Past this, the age pass leaves its next chunks to the next pass, and the size pass
/// stops once within the bound instead of cutting to 90 % of it.
const PASS_TIME: std::time::Duration = std::time::Duration::from_millis(250);

/// How much one pass does: past `time`, only what keeps the bound; `chunk_max` mutations a
/// transaction at most.
#[derive(Clone, Copy)]
struct Pace {
    time: std::time::Duration,
    chunk_max: i64,
}

/// One pass at wall-clock time `now_us`, leaving `headroom` bytes under `max_bytes` free for
/// what is written until the next pass (the database's share shrinks to leave it).
pub(crate) fn retain(conn: &mut Connection, r: &Retention, now_us: i64, headroom: u64) -> rusqlite::Result<Retained> {
    paced(conn, r, now_us, headroom, Pace { time: PASS_TIME, chunk_max: CHUNK_MAX })
}

fn paced(conn: &mut Connection, r: &Retention, now_us: i64, headroom: u64, pace: Pace) -> rusqlite::Result<Retained> {
    let started_at = std::time::Instant::now();
    let late = || started_at.elapsed() >= pace.time;
    let mut done = Retained::default();
    let mut newest_removed: Option<i64> = None;
    if !r.max_age.is_zero() {
        let newest: Option<i64> = conn.query_row(NEWEST, [now_us], |r| r.get(0))?;
        if let Some(newest) = newest {
            let cutoff = newest.saturating_sub(i64::try_from(r.max_age.as_micros()).unwrap_or(i64::MAX));
            loop {
                let n = remove_chunk(conn, Some(cutoff), pace.chunk_max, &mut done, &mut newest_removed)?;
                if n < pace.chunk_max as u64 || late() {
                    break;
                }
            }
        }
    }
    let budget = match r.database_bytes() {
        0 => 0,
        share => share.min(r.max_bytes.saturating_sub(headroom)).max(r.max_bytes / 4),
    };
    if budget > 0 {
        let target = budget / 10 * 9;
        let mut started = false;
        loop {
            let used = used_bytes(conn)?;
            if used <= if started { target } else { budget } {
                break;
            }
            // Within the bound and past the pass's time: the cut toward the target goes on
            // at the next pass.
            if started && used <= budget && late() {
                break;
            }
            started = true;
            let (count, per_row) = rows_and_size(conn, used)?;
            if count == 0 {
                break;
            }
            let excess = used.saturating_sub(target);
            let n = (excess / per_row.max(1) + 1).clamp(CHUNK_MIN as u64, pace.chunk_max.max(CHUNK_MIN) as u64) as i64;
            if remove_chunk(conn, None, n, &mut done, &mut newest_removed)? == 0 {
                break;
            }
        }
    }
    if done.mutations > 0 {
        let oldest: Option<i64> = conn.query_row(OLDEST, [], |r| r.get(0))?;
        let oldest = oldest.or(newest_removed).unwrap_or(0);
        conn.execute("INSERT INTO meta (key, value) VALUES ('oldest_us', ?1) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [oldest.to_string()])?;
        done.oldest_us = Some(oldest);
        // Each step of the pragma frees one page: run it to the end.
        let mut vacuum = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut pages = vacuum.query([])?;
        while pages.next()?.is_some() {}
    }
    // Also without removals: the WAL of the writes since the last pass goes into the file.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(done)
}

/// Bytes of the database's pages in use (the file, less its free pages).
fn used_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(((pages - free).max(0) * size) as u64)
}

/// About how many mutations the store holds (from their ids: no scan) and the bytes each
/// takes with its share of objects, reverts and indexes.
fn rows_and_size(conn: &Connection, used: u64) -> rusqlite::Result<(u64, u64)> {
    let (lo, hi): (Option<i64>, Option<i64>) =
        conn.query_row("SELECT min(id), max(id) FROM mutation_rows", [], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let count = match (lo, hi) {
        (Some(lo), Some(hi)) => (hi - lo + 1).max(1) as u64,
        _ => 0,
    };
    Ok((count, used / count.max(1)))
}

/// The newest mutation not after `?1`: in the blocks that end by then, in those that straddle
/// it (a row stamped ahead of the clock: rare), and among the rows that hold their own event.
const NEWEST: &str = "
SELECT max(t) FROM (
    SELECT max(max_us) AS t FROM event_blocks WHERE max_us <= ?1
    UNION ALL
    SELECT (SELECT max(m.time_us) FROM mutation_rows m WHERE m.id BETWEEN b.id AND b.last_id AND m.time_us <= ?1)
    FROM event_blocks b WHERE b.max_us > ?1 AND b.min_us <= ?1
    UNION ALL
    SELECT max(time_us) FROM mutation_rows WHERE event IS NOT NULL AND time_us <= ?1
)";

/// The oldest mutation left.
const OLDEST: &str = "
SELECT min(t) FROM (SELECT min(min_us) AS t FROM event_blocks UNION ALL SELECT min(time_us) FROM mutation_rows WHERE event IS NOT NULL)";

/// The next block in time order (by its oldest row, then its id) after (`?1`, `?2`), older
/// than `?3`.
const NEXT_BLOCK: &str = "
SELECT id, last_id, min_us FROM event_blocks WHERE (min_us, id) > (?1, ?2) AND min_us < ?3 ORDER BY min_us, id LIMIT 1";

/// Removes up to `n` of the oldest mutations (older than `before`, when given), their
/// `reverts` rows, the objects left without a mutation, the blocks and owners no longer used,
/// in one transaction. Returns how many mutations went. The row stored last (the highest id)
/// stays, whatever its time: SQLite gives a new row the highest id plus one, so without it a
/// later row would get an id given before, and a drift feed cursor past that id
/// (docs/query-api.md) would miss it.
///
/// The oldest are found without an index of every row's time: the rows that hold their own
/// event by `mutation_rows_by_time`, the others block by block in the order of their blocks'
/// oldest rows, until the next block starts after the `n`-th oldest row found so far.
fn remove_chunk(
    conn: &mut Connection,
    before: Option<i64>,
    n: i64,
    done: &mut Retained,
    newest_removed: &mut Option<i64>,
) -> rusqlite::Result<u64> {
    let before = before.unwrap_or(i64::MAX);
    let tx = conn.transaction()?;
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS candidate (id INTEGER PRIMARY KEY, object_id INTEGER NOT NULL, time_us INTEGER NOT NULL);
         CREATE INDEX IF NOT EXISTS temp.candidate_by_time ON candidate (time_us);
         CREATE TEMP TABLE IF NOT EXISTS retire (id INTEGER PRIMARY KEY, object_id INTEGER NOT NULL, time_us INTEGER NOT NULL);
         DELETE FROM candidate; DELETE FROM retire;",
    )?;
    let last: Option<i64> = tx.query_row("SELECT max(id) FROM mutation_rows", [], |r| r.get(0))?;
    let last = last.unwrap_or(0);
    let mut found = tx
        .prepare_cached(
            "INSERT INTO candidate (id, object_id, time_us)
             SELECT id, object_id, time_us FROM mutation_rows WHERE event IS NOT NULL AND time_us < ?1 AND id < ?2 ORDER BY time_us LIMIT ?3",
        )?
        .execute(params![before, last, n])? as i64;
    {
        let mut next = tx.prepare_cached(NEXT_BLOCK)?;
        let mut rows_of = tx.prepare_cached(
            "INSERT INTO candidate (id, object_id, time_us)
             SELECT id, object_id, time_us FROM mutation_rows WHERE id BETWEEN ?1 AND ?2 AND time_us < ?3 AND event IS NULL",
        )?;
        let mut nth = tx.prepare_cached("SELECT time_us FROM candidate ORDER BY time_us LIMIT 1 OFFSET ?1")?;
        let mut at = (i64::MIN, i64::MIN);
        while let Some((first, last_id, min_us)) = next
            .query_row(params![at.0, at.1, before], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            })
            .optional()?
        {
            if found >= n {
                let nth: Option<i64> = nth.query_row([n - 1], |r| r.get(0)).optional()?;
                if nth.is_some_and(|t| min_us >= t) {
                    break;
                }
            }
            // One upper bound: with two, SQLite may take the other and read to the table's end.
            found += rows_of.execute(params![first, last_id.min(last - 1), before])? as i64;
            at = (min_us, first);
        }
    }
    let picked = tx
        .prepare_cached("INSERT INTO retire (id, object_id, time_us) SELECT id, object_id, time_us FROM candidate ORDER BY time_us LIMIT ?1")?
        .execute([n])? as u64;
    if picked == 0 {
        return Ok(0);
    }
    let newest: Option<i64> = tx.query_row("SELECT max(time_us) FROM retire", [], |r| r.get(0)).optional()?.flatten();
    *newest_removed = (*newest_removed).max(newest);
    // An object that keeps some of its mutations keeps what the others said of it: its oldest
    // time, its tombstone (its story must not change when its oldest writes go).
    tx.execute(
        "INSERT OR REPLACE INTO object_past (object_id, first_us, last_us, deleted_us, deleted_by, deleted_audit_id)
         SELECT f.id, f.first_us, f.last_us, f.deleted_us, f.deleted_by, f.deleted_audit_id FROM object_facts f
         WHERE f.id IN (SELECT DISTINCT r.object_id FROM retire r WHERE EXISTS (
             SELECT 1 FROM mutation_rows m WHERE m.object_id = r.object_id AND m.id NOT IN (SELECT id FROM retire)))",
        [],
    )?;
    tx.execute("DELETE FROM revert_rows WHERE mutation_id IN (SELECT id FROM retire)", [])?;
    tx.execute("DELETE FROM mutation_rows WHERE id IN (SELECT id FROM retire)", [])?;
    // The owners of the objects that may go, looked at once those are gone.
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS owned (id INTEGER PRIMARY KEY); DELETE FROM owned;
         INSERT OR IGNORE INTO owned (id) SELECT owner FROM object_rows WHERE id IN (SELECT DISTINCT object_id FROM retire) AND owner IS NOT NULL;",
    )?;
    let objects = tx.execute(
        "DELETE FROM object_rows WHERE id IN (SELECT DISTINCT object_id FROM retire)
           AND NOT EXISTS (SELECT 1 FROM mutation_rows m WHERE m.object_id = object_rows.id)",
        [],
    )? as u64;
    tx.execute(
        "DELETE FROM object_past WHERE object_id IN (SELECT DISTINCT object_id FROM retire)
           AND NOT EXISTS (SELECT 1 FROM object_rows o WHERE o.id = object_past.object_id)",
        [],
    )?;
    // The blocks that held the removed mutations' events: gone once none of theirs is left,
    // else their times narrowed to the rows left.
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS touched (id INTEGER PRIMARY KEY); DELETE FROM touched;
         INSERT OR IGNORE INTO touched (id)
             SELECT block FROM (SELECT (SELECT max(b.id) FROM event_blocks b WHERE b.id <= r.id) AS block FROM retire r) WHERE block IS NOT NULL;
         DELETE FROM event_blocks WHERE id IN (SELECT id FROM touched)
           AND NOT EXISTS (SELECT 1 FROM mutation_rows m WHERE m.id BETWEEN event_blocks.id AND event_blocks.last_id);
         UPDATE event_blocks SET
             min_us = (SELECT min(m.time_us) FROM mutation_rows m WHERE m.id BETWEEN event_blocks.id AND event_blocks.last_id),
             max_us = (SELECT max(m.time_us) FROM mutation_rows m WHERE m.id BETWEEN event_blocks.id AND event_blocks.last_id)
         WHERE id IN (SELECT id FROM touched);",
    )?;
    if objects > 0 {
        tx.execute("DELETE FROM owners WHERE id IN (SELECT id FROM owned) AND NOT EXISTS (SELECT 1 FROM object_rows o WHERE o.owner = owners.id)", [])?;
    }
    tx.commit()?;
    done.mutations += picked;
    done.objects += objects;
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row stored after newer ones but stamped long before (a late write, a replayed log):
    /// retention by age removes older rows, but not the one of the highest id, so the next row
    /// stored gets an id no row had.
    #[test]
    fn the_row_stored_last_stays_so_that_ids_are_never_given_twice() {
        let mut c = Connection::open_in_memory().unwrap();
        crate::history::schema::create(&c).unwrap();
        c.execute(
            "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES ('c', 'u', 'v1', 'Pod', 'ns', 'p', 1, 2)",
            [],
        )
        .unwrap();
        let insert = |c: &Connection, time_s: i64, audit_id: &str| {
            c.execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, ?1, ?2, 'update', 'u', 'drift', '{}')",
                params![time_s * 1_000_000, audit_id],
            )
            .unwrap();
            // The view's trigger wrote it: its row id, by its auditID.
            c.query_row("SELECT id FROM mutations WHERE audit_id = ?1", [audit_id], |r| r.get::<_, i64>(0)).unwrap()
        };
        let ids = [insert(&c, 100, "a"), insert(&c, 200, "b"), insert(&c, 50, "late")];
        let by_age = Retention { max_age: Duration::from_secs(60), max_bytes: 0 };
        let now_us = 1_000 * 1_000_000;
        let done = retain(&mut c, &by_age, now_us, 0).unwrap();
        assert_eq!(done.mutations, 1, "the row of 100 s goes; the late row of 50 s, stored last, stays");
        let left: Vec<i64> = c
            .prepare("SELECT id FROM mutations ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(left, [ids[1], ids[2]]);
        assert_eq!(insert(&c, 210, "next"), ids[2] + 1);
        // Once a row is stored after it, it goes as any other.
        assert_eq!(retain(&mut c, &by_age, now_us, 0).unwrap().mutations, 1);
        assert_eq!(insert(&c, 220, "after"), ids[2] + 2);
    }

    /// A pass past its time does what keeps the bound and leaves the rest (the cut toward 90 %
    /// of it, the age pass's further chunks) to the next: the writer is never stopped for long.
    #[test]
    fn a_pass_past_its_time_keeps_the_bound_and_leaves_the_rest_to_the_next() {
        let store = |rows: i64| {
            let c = Connection::open_in_memory().unwrap();
            crate::history::schema::create(&c).unwrap();
            c.execute(
                "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES ('c', 'u', 'v1', 'Pod', 'ns', 'p', 1, 2)",
                [],
            )
            .unwrap();
            c.execute("INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (1, 0, 'a0', 'update', 'u', 'drift', '{}')", []).unwrap();
            // Rows of 1 s apart, each with its own 400-byte event.
            c.execute(
                "INSERT INTO mutation_rows (object_id, at_us, audit_id, act, event)
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 SELECT 1, i * 1000000 - (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch_us'), 'a' || i,
                        (SELECT act FROM mutation_rows WHERE id = 1), printf('%.400c', 'x') FROM n",
                [rows],
            )
            .unwrap();
            c
        };
        let count =
            |c: &Connection| c.query_row("SELECT count(*) FROM mutation_rows", [], |r| r.get::<_, i64>(0)).unwrap();
        let (slow, quick) = (
            Pace { time: std::time::Duration::from_secs(600), chunk_max: 100 },
            Pace { time: std::time::Duration::ZERO, chunk_max: 100 },
        );
        // By age: 1,000 rows older than the cutoff; a quick pass removes one chunk.
        let by_age = Retention { max_age: Duration::from_secs(1_000), max_bytes: 0 };
        let mut c = store(2_000);
        assert_eq!(paced(&mut c, &by_age, i64::MAX, 0, quick).unwrap().mutations, 100);
        assert_eq!(paced(&mut c, &by_age, i64::MAX, 0, quick).unwrap().mutations, 100);
        assert_eq!(paced(&mut c, &by_age, i64::MAX, 0, slow).unwrap().mutations, 800, "the rest, at once");
        // By size: a bound a little under the store. A quick pass stops once within it; an
        // unhurried one cuts to 90 % of it.
        let sized = || {
            let c = store(4_000);
            let used = used_bytes(&c).unwrap();
            let mut r = Retention { max_age: Duration::ZERO, max_bytes: used };
            let wal = used - r.database_bytes();
            r.max_bytes = used - used / 50 + wal;
            let budget = r.database_bytes();
            assert!(used > budget && used - budget <= used / 40, "used {used}, budget {budget}");
            (c, r, budget)
        };
        let (mut c, r, budget) = sized();
        let quick_done = paced(&mut c, &r, i64::MAX, 0, quick).unwrap().mutations;
        let left = used_bytes(&c).unwrap();
        assert!(
            left <= budget && left > budget / 10 * 9,
            "within the bound, not cut to 90 % of it: {left} of {budget}"
        );
        let (mut c, r, budget) = sized();
        let slow_done = paced(&mut c, &r, i64::MAX, 0, slow).unwrap().mutations;
        let left = used_bytes(&c).unwrap();
        assert!(left <= budget / 10 * 9, "cut to 90 %: {left} of {budget}");
        assert!(slow_done > 2 * quick_done, "quick {quick_done}, unhurried {slow_done}");
        assert_eq!(count(&c), 4_001 - slow_done as i64);
    }
}
