//! The history store's writer: the rows each event makes (identity, owner, tombstones,
//! reverts), no duplicates when a log is written twice, retention by age and by size on an
//! endless stream, and a `serve` killed with SIGKILL while it writes.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{audit_id, class_of, feed, find, processor};
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{self, CorpusOptions};
use kausality_stream::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use kausality_stream::enriched::Enriched;
use kausality_stream::history::pack::Unpacker;
use kausality_stream::history::{self, Mode, Retention, Store};
use kausality_stream::sim::*;
use rusqlite::{Connection, OptionalExtension};
use serde_json::json;

fn temp_store(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ks-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.db");
    (dir, path)
}

fn keep_all() -> Retention {
    Retention { max_age: Duration::ZERO, max_bytes: 0 }
}

fn run(events: &[String]) -> Vec<Enriched> {
    let mut p = processor(ModelConfig::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    out
}

fn time_of(event: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(event).unwrap();
    parse_rfc3339_micros(v["stageTimestamp"].as_str().unwrap()).unwrap()
}

/// The tombstone of the object with this UID: (deleted_us, deleted_by, deleted_audit_id).
fn tombstone(conn: &Connection, uid: &str) -> Option<(i64, String, String)> {
    conn.query_row(
        "SELECT deleted_us, deleted_by, deleted_audit_id FROM objects WHERE uid = ?1 AND deleted_us IS NOT NULL",
        [uid],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .optional()
    .unwrap()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Deployment → ReplicaSet → pods a, b, stable.
fn tree(api: &mut ApiServer, events: &mut Vec<String>) -> (ObjRef, ObjRef, Vec<ObjRef>) {
    common::web_tree(api, events)
}

/// The writes of [`put_back`].
struct PutBack {
    rs: ObjRef,
    by_hand: String,
    back: String,
    del: String,
    replacement: String,
}

/// [`tree`], then the ReplicaSet's (`rs`) replicas set by hand (`by_hand`) and put back by the
/// deployment-controller (`back`); the ReplicaSet reports its generation done; then a pod
/// deleted by a person (`del`) and replaced by the ReplicaSet's controller (`replacement`):
/// the replacement reverts the delete. Their events go to `events`.
fn put_back(api: &mut ApiServer, events: &mut Vec<String>) -> PutBack {
    let (_, rs, pods) = tree(api, events);
    let by_hand = api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5));
    let back = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3));
    let done = api.report(REPLICASET_CONTROLLER, &rs, &[]);
    let del = api.delete("carol@example.com", &pods[1], &[]);
    let (_, replacement) = api.create(REPLICASET_CONTROLLER, pod(&rs, "d", "web:1"));
    events.extend([by_hand.clone(), back.clone(), done, del.clone(), replacement.clone()]);
    PutBack { rs, by_hand, back, del, replacement }
}

#[test]
fn each_object_is_one_row_with_its_identity_owner_and_times() {
    let (dir, path) = temp_store("objects");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (deploy, rs, pods) = tree(&mut api, &mut events);
    api.advance_ms(5_000);
    let edit = api.update("alice@example.com", &pods[0], |p| p["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(edit.clone());
    let out = run(&events);
    let mut store = Store::open(&path, keep_all()).unwrap();
    let w = store.write(&[out.as_slice()]).unwrap();
    assert_eq!((w.events, w.mutations, w.duplicates), (out.len() as u64, out.len() as u64, 0));
    let conn = history::open(&path, Mode::Read).unwrap();
    let row = conn
        .query_row(
            "SELECT cluster, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name, first_us, last_us, deleted_us
             FROM objects WHERE uid = ?1",
            [&pods[0].uid],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, Option<String>>(7)?,
                    r.get::<_, Option<String>>(8)?,
                    r.get::<_, i64>(9)?,
                    r.get::<_, i64>(10)?,
                    r.get::<_, Option<i64>>(11)?,
                ))
            },
        )
        .unwrap();
    // events[3]: pod a's create.
    let created = &events[3];
    assert_eq!(
        row,
        (
            "default".into(),
            "v1".into(),
            "Pod".into(),
            "shop".into(),
            "web-5d4f-a".into(),
            Some(rs.uid.clone()),
            Some("apps/v1".into()),
            Some("ReplicaSet".into()),
            Some("web-5d4f".into()),
            time_of(created),
            time_of(&edit),
            None
        )
    );
    // The Deployment has no owner; one row per object.
    let top: Option<String> =
        conn.query_row("SELECT parent_uid FROM objects WHERE uid = ?1", [&deploy.uid], |r| r.get(0)).unwrap();
    assert_eq!(top, None);
    assert_eq!(count(&conn, "SELECT count(*) FROM objects"), 4);
    // One mutation per enriched event, with its facts and its JSON (compressed, read back).
    let unpacker = Unpacker::new(&conn);
    let (class, user, verb, event): (String, String, String, Vec<u8>) = conn
        .query_row("SELECT class, user, verb, event FROM mutations WHERE audit_id = ?1", [audit_id(&edit)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, unpacker.json(r.get_ref(3)?).expect("a stored event")))
        })
        .unwrap();
    assert_eq!(
        (class.as_str(), user.as_str(), verb.as_str()),
        (class_of(&out, &edit).as_str(), "alice@example.com", "update")
    );
    let mut json = Vec::new();
    find(&out, &edit).unwrap().write_json(&mut json);
    assert_eq!(event, json);
    let (oldest, newest): (String, String) = conn
        .query_row(
            "SELECT (SELECT value FROM meta WHERE key = 'oldest_us'), (SELECT value FROM meta WHERE key = 'newest_us')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((oldest.parse::<i64>().unwrap(), newest.parse::<i64>().unwrap()), (time_of(&events[0]), time_of(&edit)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_delete_an_eviction_and_a_deletecollection_tombstone_their_objects_with_who_and_when() {
    let (dir, path) = temp_store("tombstones");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, rs, pods) = tree(&mut api, &mut events);
    let (other, e) = api.create(ADMIN, configmap("shop", "settings", &[("a", "1")], None));
    events.push(e);
    let (third, e) = api.create(ADMIN, configmap("shop", "flags", &[("b", "2")], None));
    events.push(e);
    // a: deleted by alice with its grace period; b: evicted by a drain.
    let alice = api.delete_graceful("alice@example.com", &pods[0]);
    let drain = api.evict("bob@example.com", &pods[1]);
    // Two config maps in one request.
    let collection = api.delete_collection(ADMIN, &[other.clone(), third.clone()], false);
    events.extend([alice.clone(), drain.clone(), collection.clone()]);
    let out = run(&events);
    let mut store = Store::open(&path, keep_all()).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(tombstone(&conn, &pods[0].uid), Some((time_of(&alice), "alice@example.com".into(), audit_id(&alice))));
    assert_eq!(tombstone(&conn, &pods[1].uid), Some((time_of(&drain), "bob@example.com".into(), audit_id(&drain))));
    assert_eq!(tombstone(&conn, &rs.uid), None);
    // A later delete of the same object (a kubelet's final one) keeps the first tombstone;
    // one that comes later but happened earlier (out of order) takes its place.
    let first = find(&out, &alice).unwrap().clone();
    let mut later = first.clone();
    later.audit_id = "kubelet-final".into();
    later.user = KUBELET.into();
    later.stage_timestamp = format_rfc3339_micros(time_of(&alice) + 30_000_000).into();
    let mut earlier = first.clone();
    earlier.audit_id = "earlier-delete".into();
    earlier.user = "dave@example.com".into();
    earlier.stage_timestamp = format_rfc3339_micros(time_of(&alice) - 1_000).into();
    store.write(&[[later].as_slice()]).unwrap();
    assert_eq!(
        tombstone(&conn, &pods[0].uid),
        Some((time_of(&alice), "alice@example.com".into(), audit_id(&alice))),
        "the first delete is kept"
    );
    store.write(&[[earlier].as_slice()]).unwrap();
    assert_eq!(
        tombstone(&conn, &pods[0].uid),
        Some((time_of(&alice) - 1_000, "dave@example.com".into(), "earlier-delete".into()))
    );
    for cm in [&other, &third] {
        assert_eq!(tombstone(&conn, &cm.uid), Some((time_of(&collection), ADMIN.into(), audit_id(&collection))));
    }
    // One auditID, one mutation per object it deleted.
    assert_eq!(
        count(&conn, &format!("SELECT count(*) FROM mutations WHERE audit_id = '{}'", audit_id(&collection))),
        2
    );
    let evicted: (String, Option<String>) = conn
        .query_row("SELECT verb, subresource FROM mutations WHERE audit_id = ?1", [audit_id(&drain)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(evicted, ("create".into(), Some("eviction".into())));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_drift_s_reverts_rows_name_the_origin_writes_it_undoes() {
    let (dir, path) = temp_store("reverts");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let PutBack { by_hand, back, del, replacement, .. } = put_back(&mut api, &mut events);
    let out = run(&events);
    assert_eq!(class_of(&out, &back), Class::Drift);
    assert_eq!(class_of(&out, &replacement), Class::Drift);
    let mut store = Store::open(&path, keep_all()).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    let conn = history::open(&path, Mode::Read).unwrap();
    let reverted = |drift: &str| -> Vec<(String, String, i64)> {
        let mut s = conn
            .prepare(
                "SELECT r.origin_audit_id, o.user, d.reverts_person FROM reverts r
                 JOIN mutations d ON d.id = r.mutation_id
                 JOIN mutations o ON o.audit_id = r.origin_audit_id
                 WHERE d.audit_id = ?1",
            )
            .unwrap();
        s.query_map([drift], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(reverted(&audit_id(&back)), vec![(audit_id(&by_hand), "alice@example.com".to_string(), 1)]);
    assert_eq!(reverted(&audit_id(&replacement)), vec![(audit_id(&del), "carol@example.com".to_string(), 1)]);
    assert_eq!(count(&conn, "SELECT count(*) FROM reverts"), 2, "only drift carries reverts");
    let (class, resolution): (String, Option<String>) = conn
        .query_row("SELECT class, resolution FROM mutations WHERE audit_id = ?1", [audit_id(&back)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((class.as_str(), resolution.as_deref()), ("drift", Some("unresolved")));
    assert_eq!(
        count(&conn, &format!("SELECT reverts_person FROM mutations WHERE audit_id = '{}'", audit_id(&by_hand))),
        0
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writing_the_same_events_again_adds_nothing() {
    let (dir, path) = temp_store("again");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, rs, pods) = tree(&mut api, &mut events);
    events.push(api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5)));
    events.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3)));
    events.push(api.delete("carol@example.com", &pods[1], &[]));
    let out = run(&events);
    let n = out.len() as u64;
    let rows = |conn: &Connection| {
        ["objects", "mutations", "reverts"].map(|t| count(conn, &format!("SELECT count(*) FROM {t}"))).to_vec()
    };
    {
        let mut store = Store::open(&path, keep_all()).unwrap();
        store.write(&[out.as_slice()]).unwrap();
    }
    let first = rows(&history::open(&path, Mode::Read).unwrap());
    assert_eq!(first[1], n as i64);
    // The same log again, through a new writer and split differently; and once more within
    // one transaction.
    let mut store = Store::open(&path, keep_all()).unwrap();
    let (a, b) = out.split_at(3);
    let w = store.write(&[b, a]).unwrap();
    assert_eq!((w.events, w.mutations, w.duplicates), (n, 0, n));
    let w = store.write(&[out.as_slice(), out.as_slice()]).unwrap();
    assert_eq!((w.mutations, w.duplicates), (0, 2 * n));
    assert_eq!(rows(&history::open(&path, Mode::Read).unwrap()), first);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn retention_by_age_removes_old_mutations_their_reverts_and_objects_left_without_any() {
    let (dir, path) = temp_store("age");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, rs, pods) = tree(&mut api, &mut events);
    events.push(api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5)));
    let old_drift = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3));
    events.push(old_drift.clone());
    let gone = api.delete("carol@example.com", &pods[1], &[]);
    events.push(gone.clone());
    // Two days later: pod a is written again.
    api.advance_ms(2 * 86_400_000);
    let recent = api.update("alice@example.com", &pods[0], |p| p["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(recent.clone());
    let out = run(&events);
    let mut store = Store::open(&path, Retention { max_age: Duration::from_secs(86_400), max_bytes: 0 }).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    let r = store.retain().unwrap();
    assert_eq!(r.mutations, out.len() as u64 - 1, "everything but the recent write is older than a day before it");
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations"), 1);
    assert_eq!(count(&conn, "SELECT count(*) FROM reverts"), 0, "the old drift's reverts went with it");
    // Only pod a keeps a mutation, so only its row stays (the deleted pod b and the others go).
    let uids: Vec<String> = conn
        .prepare("SELECT uid FROM objects")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(uids, vec![pods[0].uid.clone()]);
    let oldest: String = conn.query_row("SELECT value FROM meta WHERE key = 'oldest_us'", [], |r| r.get(0)).unwrap();
    assert_eq!(oldest.parse::<i64>().unwrap(), time_of(&recent));
    assert_eq!(r.oldest_us, Some(time_of(&recent)));
    // A second pass has nothing to do.
    assert_eq!(store.retain().unwrap().mutations, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Audit events of the corpus generator, from `seed`, as JSON lines.
fn corpus_lines(seed: u64, events: usize) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let opts = CorpusOptions { seed, namespaces: 4, deployments_per_namespace: 4, events, ..CorpusOptions::default() };
    corpus::generate(&opts, &mut buf).unwrap();
    buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect()
}

/// The same writes to new objects, `round` hours later (new auditIDs, UIDs and times): one
/// round of an endless stream of new history.
fn again(round_one: &[Enriched], round: i64) -> Vec<Enriched> {
    round_one
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.audit_id = format!("{}-{round}", e.audit_id).into();
            e.object.uid = format!("{}-{round}", e.object.uid).into();
            e.stage_timestamp =
                format_rfc3339_micros(parse_rfc3339_micros(&e.stage_timestamp).unwrap() + round * 3_600_000_000).into();
            e
        })
        .collect()
}

#[test]
fn retention_by_size_keeps_the_file_bounded_on_an_endless_stream() {
    let (dir, path) = temp_store("size");
    const MAX: u64 = 4 << 20;
    let mut store = Store::open(&path, Retention { max_age: Duration::ZERO, max_bytes: MAX }).unwrap();
    // One round of the generator, classified once; each round after it is the same writes to
    // new objects, an hour later (new auditIDs, UIDs and times): an endless stream of new
    // history, 24x the bound in JSON (a mutation takes a fifth of its JSON on disk: at 12x the
    // bound would hold a quarter of it).
    let mut p = processor(ModelConfig::default(), 0);
    let mut round_one = Vec::new();
    feed(&mut p, &corpus_lines(1, 3_000), &mut round_one);
    p.flush(0, &mut round_one);
    let mut written = 0u64;
    let mut peak = 0u64;
    let mut json_bytes = 0u64;
    let mut round = 0i64;
    while json_bytes < 24 * MAX {
        round += 1;
        let out = again(&round_one, round);
        for chunk in out.chunks(500) {
            let w = store.write(&[chunk]).unwrap();
            written += w.mutations;
            let mut j = Vec::new();
            chunk.iter().for_each(|e| e.write_json(&mut j));
            json_bytes += j.len() as u64;
            peak = peak.max(store.disk_bytes());
        }
        store.retain().unwrap();
        peak = peak.max(store.disk_bytes());
        assert!(store.disk_bytes() <= MAX, "after a pass: {} bytes on disk, over {MAX}", store.disk_bytes());
    }
    // Between passes the store grows by what was written since the last one (here one round): bounded too.
    assert!(peak <= MAX + (6 << 20), "peak {peak}");
    let conn = history::open(&path, Mode::Read).unwrap();
    let kept = count(&conn, "SELECT count(*) FROM mutations") as u64;
    assert!(kept > 0 && kept < written / 4, "kept {kept} of {written}");
    let (oldest, min): (i64, i64) = conn
        .query_row("SELECT CAST((SELECT value FROM meta WHERE key = 'oldest_us') AS INTEGER), (SELECT min(time_us) FROM mutations)", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(oldest, min, "meta.oldest_us is the oldest mutation kept");
    let orphans = count(
        &conn,
        "SELECT count(*) FROM objects o WHERE NOT EXISTS (SELECT 1 FROM mutations m WHERE m.object_id = o.id)",
    );
    assert_eq!(orphans, 0);
    let dangling = count(
        &conn,
        "SELECT count(*) FROM reverts r WHERE NOT EXISTS (SELECT 1 FROM mutations m WHERE m.id = r.mutation_id)",
    );
    assert_eq!(dangling, 0);
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(ok, "ok");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Under load (a queue that is never empty, so every transaction is as large as the writer
/// allows), a size-bounded store stays within 10 % of its bound on disk, and ends under it.
#[test]
fn size_retention_holds_its_bound_under_load() {
    use kausality_stream::history::writer::{self, Report, WriterOptions};
    let (dir, path) = temp_store("size-load");
    const MAX: u64 = 4 << 20;
    let store = Store::open(&path, Retention { max_age: Duration::ZERO, max_bytes: MAX }).unwrap();
    let mut p = processor(ModelConfig::default(), 0);
    let mut round_one = Vec::new();
    feed(&mut p, &corpus_lines(2, 3_000), &mut round_one);
    p.flush(0, &mut round_one);
    // 20 rounds of new objects, an hour apart, in batches of 400 (an EventList of the webhook),
    // all queued before the writer starts: it is never waiting for input.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Enriched>>(100_000);
    let mut json_bytes = 0u64;
    for round in 1..=20i64 {
        let out = again(&round_one, round);
        for chunk in out.chunks(400) {
            let mut j = Vec::new();
            chunk.iter().for_each(|e| e.write_json(&mut j));
            json_bytes += j.len() as u64;
            tx.send(chunk.to_vec()).unwrap();
        }
    }
    drop(tx);
    assert!(json_bytes > 8 * MAX, "the stream is {json_bytes} bytes of JSON");
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (seen, at) = (peak.clone(), path.clone());
    let t = writer::spawn(store, rx, WriterOptions::default(), move |r| {
        if matches!(r, Report::Written { .. } | Report::Retained(_)) {
            seen.fetch_max(writer::disk_bytes(&at), std::sync::atomic::Ordering::Relaxed);
        }
    })
    .unwrap();
    t.join().unwrap();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let end = writer::disk_bytes(&path);
    assert!(peak <= MAX + MAX / 10, "peak {peak} bytes on disk, more than 10 % over the bound of {MAX}");
    assert!(end <= MAX, "at rest: {end} bytes on disk, over {MAX}");
    let conn = history::open(&path, Mode::Read).unwrap();
    assert!(count(&conn, "SELECT count(*) FROM mutations") > 0, "the newest are kept");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A writer whose queue closes before a pass was due (a short `replay`: fewer transactions
/// than a pass waits for) still leaves the store as its age says.
#[test]
fn the_writer_runs_a_last_pass_when_its_queue_closes() {
    use kausality_stream::history::writer::{self, Report, WriterOptions};
    let (dir, path) = temp_store("last-pass");
    let mut p = processor(ModelConfig::default(), 0);
    let mut out = Vec::new();
    feed(&mut p, &corpus_lines(3, 3_000), &mut out);
    p.flush(0, &mut out);
    let times: Vec<i64> = out.iter().map(|e| parse_rfc3339_micros(&e.stage_timestamp).unwrap()).collect();
    let (oldest, newest) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
    assert!(newest - oldest > 2_000_000, "the stream spans {} µs", newest - oldest);
    let max_age = Duration::from_micros(((newest - oldest) / 2) as u64);
    let cutoff = newest - (newest - oldest) / 2;
    let older = times.iter().filter(|t| **t < cutoff).count();
    assert!(older > 0 && older < times.len());
    let store = Store::open(&path, Retention { max_age, max_bytes: 0 }).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Enriched>>(4);
    tx.send(out.clone()).unwrap();
    drop(tx);
    let removed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = removed.clone();
    writer::spawn(store, rx, WriterOptions::default(), move |r| {
        if let Report::Retained(r) = r {
            seen.fetch_add(r.mutations, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .unwrap()
    .join()
    .unwrap();
    let conn = history::open(&path, Mode::Read).unwrap();
    // One transaction, no pass due: the last one removed every mutation older than the
    // cutoff (but the row stored last, which stays whatever its time).
    let left_older = count(
        &conn,
        &format!("SELECT count(*) FROM mutations WHERE time_us < {cutoff} AND id < (SELECT max(id) FROM mutations)"),
    );
    assert_eq!(left_older, 0);
    let kept_last = count(&conn, &format!("SELECT count(*) FROM mutations WHERE time_us < {cutoff}"));
    assert_eq!(removed.load(std::sync::atomic::Ordering::Relaxed), (older as i64 - kept_last) as u64);
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations"), (times.len() - older) as i64 + kept_last);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_writer_thread_groups_queued_batches_and_reports_each_transaction() {
    use kausality_stream::history::writer::{self, Report, WriterOptions};
    let (dir, path) = temp_store("thread");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    tree(&mut api, &mut events);
    let out = Arc::new(run(&events));
    let store = Store::open(&path, keep_all()).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Enriched>>(64);
    // Queued before the thread starts: taken in one transaction.
    for e in out.iter() {
        tx.send(vec![e.clone()]).unwrap();
    }
    drop(tx);
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = reports.clone();
    let t = writer::spawn(store, rx, WriterOptions::default(), move |r| seen.lock().unwrap().push(r)).unwrap();
    t.join().unwrap();
    let reports = reports.lock().unwrap();
    let written: Vec<u64> = reports
        .iter()
        .filter_map(|r| if let Report::Written { written, .. } = r { Some(written.mutations) } else { None })
        .collect();
    assert_eq!(written, vec![out.len() as u64]);
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations"), out.len() as i64);
    // The final checkpoint leaves no WAL behind.
    assert_eq!(std::fs::metadata(dir.join("h.db-wal")).map_or(0, |m| m.len()), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `replay --history` sends its writer packed batches (each event's facts and JSON in one
/// buffer) instead of the enriched events: written by the writer thread in transactions that
/// cut the batches in two, they must leave every row and every event as the enriched events
/// written in one transaction do.
#[test]
fn packed_batches_leave_the_rows_the_enriched_events_leave() {
    use kausality_stream::history::batch::{Batch, Packed};
    use kausality_stream::history::writer::{self, WriterOptions};
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    put_back(&mut api, &mut events);
    let mut out = run(&events);
    let lines: Vec<String> =
        corpus_lines(7, 6_000).into_iter().map(|l| String::from_utf8(l).expect("a JSON line")).collect();
    out.extend(run(&lines));
    let drift_of_a_person =
        |e: &Enriched| e.class == Class::Drift && e.reverts.as_ref().is_some_and(|r| r.iter().any(|r| r.person));
    assert!(out.iter().any(drift_of_a_person), "a drift reverting a person");
    assert!(out.iter().any(|e| e.parent.is_none()), "an unowned write");
    assert!(out.iter().any(|e| e.subresource.is_some()), "a write through a subresource");
    assert!(out.len() > 2_000, "{} events: past the dictionary's samples", out.len());

    let (dir, path) = temp_store("batches-ref");
    let written = Store::open(&path, keep_all()).unwrap().write(&[out.as_slice()]).unwrap();

    let (dir2, path2) = temp_store("batches");
    let store = Store::open(&path2, keep_all()).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Packed>(64);
    for chunk in out.chunks(700) {
        let mut packed = Packed::with_capacity(chunk.len());
        for e in chunk {
            packed.push(e);
        }
        assert_eq!(packed.len(), chunk.len());
        tx.send(packed).unwrap();
    }
    drop(tx);
    let opts = WriterOptions { max_events_per_transaction: 500, ..WriterOptions::default() };
    let transactions = Arc::new(std::sync::Mutex::new(0));
    let counted = transactions.clone();
    writer::spawn(store, rx, opts, move |r| {
        if let writer::Report::Written { .. } = r {
            *counted.lock().unwrap() += 1;
        }
    })
    .unwrap()
    .join()
    .unwrap();
    assert!(*transactions.lock().unwrap() >= out.len() / 500, "batches cut into transactions of 500");

    let want = all_rows(&history::open(&path, Mode::Read).unwrap());
    let got = all_rows(&history::open(&path2, Mode::Read).unwrap());
    assert_eq!(want.1.len() as u64, written.mutations);
    assert!(!want.2.is_empty(), "reverts rows");
    assert_eq!(got.0, want.0, "objects");
    assert_eq!(got.1, want.1, "mutations and their events");
    assert_eq!(got.2, want.2, "reverts");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}

#[test]
fn a_store_that_cannot_write_keeps_no_part_of_the_batch() {
    let (dir, path) = temp_store("readonly");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    tree(&mut api, &mut events);
    let out = run(&events);
    let mut store = Store::open(&path, keep_all()).unwrap();
    store.write(&[&out[..2]]).unwrap();
    // Another connection holds the write lock: the transaction fails after its first rows.
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    store.connection().busy_timeout(Duration::from_millis(50)).unwrap();
    assert!(store.write(&[&out[2..]]).is_err());
    other.execute_batch("ROLLBACK").unwrap();
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations"), 2);
    // Tried again, it is written once.
    let w = store.write(&[&out[2..]]).unwrap();
    assert_eq!(w.mutations, out.len() as u64 - 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `objects` table, every column but the row id, in a fixed order.
fn objects_table(path: &std::path::Path) -> Vec<Vec<rusqlite::types::Value>> {
    let conn = history::open(path, Mode::Read).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT cluster, uid, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name,
                    first_us, last_us, deleted_us, deleted_by, deleted_audit_id FROM objects ORDER BY cluster, uid",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| (0..15).map(|i| r.get::<_, rusqlite::types::Value>(i)).collect::<Result<Vec<_>, _>>())
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// What the `objects` table must hold after `events` were written in this order, worked out
/// from the events alone: the identity the last write gave, the owner the last write that had
/// one named, the oldest and newest times, and the earliest removal (a delete or an eviction)
/// with who and which request.
fn objects_model(events: &[Enriched]) -> Vec<Vec<rusqlite::types::Value>> {
    use rusqlite::types::Value;
    use std::collections::BTreeMap;
    let text = |s: &str| Value::Text(s.to_string());
    let mut rows: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for e in events {
        let o = &e.object;
        let t = parse_rfc3339_micros(&e.stage_timestamp).unwrap();
        let row = rows.entry((e.cluster.to_string(), o.uid.to_string())).or_insert_with(|| {
            let mut r = vec![Value::Null; 15];
            r[0] = text(&e.cluster);
            r[1] = text(&o.uid);
            r[10] = Value::Integer(t);
            r[11] = Value::Integer(t);
            r
        });
        row[2] = text(&o.api_version);
        row[3] = text(&o.kind);
        row[4] = text(&o.namespace);
        row[5] = text(o.name.as_str());
        if let Some(p) = &e.parent {
            row[6] = text(&p.uid);
            row[7] = text(&p.api_version);
            row[8] = text(&p.kind);
            row[9] = text(p.name.as_str());
        }
        let (Value::Integer(first), Value::Integer(last)) = (row[10].clone(), row[11].clone()) else { unreachable!() };
        row[10] = Value::Integer(first.min(t));
        row[11] = Value::Integer(last.max(t));
        let removed = matches!(e.verb.as_str(), "delete" | "deletecollection") || e.subresource == Some("eviction");
        let earlier = match row[12] {
            Value::Integer(d) => t < d,
            _ => true,
        };
        if removed && earlier {
            row[12] = Value::Integer(t);
            row[13] = text(&e.user);
            row[14] = text(&e.audit_id);
        }
    }
    rows.into_values().collect()
}

/// The writer skips the upsert of an object it has written before when only the times move:
/// one event per transaction, in odd orders (an owner learned late, a rename, writes after a
/// delete, older writes after newer ones), with a failing transaction in the middle and a
/// retention pass, must leave the same `objects` rows as all events in one transaction.
#[test]
fn objects_rows_do_not_depend_on_how_events_are_split_into_transactions() {
    let (dir, path) = temp_store("split-ref");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (deploy, rs, pods) = tree(&mut api, &mut events);
    events.push(api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5)));
    events.push(api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3)));
    events.push(api.update("alice@example.com", &pods[0], |p| p["spec"]["containers"][0]["image"] = json!("web:2")));
    events.push(api.delete_graceful("alice@example.com", &pods[0]));
    events.push(api.update(REPLICASET_CONTROLLER, &pods[1], |p| p["metadata"]["labels"]["x"] = json!("1")));
    events.push(api.evict("bob@example.com", &pods[1]));
    events.push(api.update(DEPLOYMENT_CONTROLLER, &deploy, |d| d["metadata"]["labels"]["y"] = json!("2")));
    let out = run(&events);
    assert!(out.len() >= 9, "{} enriched events", out.len());
    // Variants the classifier does not make, but a store must take: the same pod without its
    // owner, under another name and kind version, and a write older than its creation.
    let pod = find(&out, &events[3]).unwrap().clone();
    let mut orphan = pod.clone();
    orphan.audit_id = "no-owner".into();
    orphan.parent = None;
    orphan.stage_timestamp = format_rfc3339_micros(time_of(&events[3]) + 1).into();
    let mut renamed = pod.clone();
    renamed.audit_id = "renamed".into();
    renamed.object.name = "web-5d4f-a-renamed".into();
    renamed.object.api_version = "v1beta".into();
    renamed.stage_timestamp = format_rfc3339_micros(time_of(&events[3]) + 2).into();
    let mut older = pod.clone();
    older.audit_id = "older".into();
    older.stage_timestamp = format_rfc3339_micros(time_of(&events[0]) - 5_000_000).into();
    // Another pod, first written without its owner, then with it.
    let mut late_owner = find(&out, &events[4]).unwrap().clone();
    late_owner.object.uid = "late-owner".into();
    late_owner.audit_id = "late-owner-1".into();
    let mut without = late_owner.clone();
    without.parent = None;
    without.audit_id = "late-owner-0".into();
    let mut all = out.clone();
    // The rename is the pod's last write.
    all.extend([orphan, older, without, late_owner, renamed]);
    {
        let mut store = Store::open(&path, keep_all()).unwrap();
        store.write(&[all.as_slice()]).unwrap();
    }
    let reference = objects_table(&path);
    assert_eq!(reference.len(), 5);
    assert_eq!(reference, objects_model(&all), "one transaction");

    // One event per transaction, forwards and backwards (backwards, the row keeps the name
    // that came last).
    for (name, order) in [("split-fwd", all.clone()), ("split-rev", all.iter().rev().cloned().collect::<Vec<_>>())] {
        let (dir_each, path_each) = temp_store(name);
        let mut store = Store::open(&path_each, keep_all()).unwrap();
        for e in &order {
            store.write(&[std::slice::from_ref(e)]).unwrap();
        }
        drop(store);
        assert_eq!(objects_table(&path_each), objects_model(&order), "{name}");
        std::fs::remove_dir_all(&dir_each).unwrap();
    }

    // A transaction that fails after its first rows (new objects among them), then a retention
    // pass that removes nothing, then the rest one by one.
    let (dir2, path2) = temp_store("split-fail");
    let mut store = Store::open(&path2, keep_all()).unwrap();
    store.write(&[&all[..1]]).unwrap();
    let other = Connection::open(&path2).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    store.connection().busy_timeout(Duration::from_millis(50)).unwrap();
    assert!(store.write(&[&all[1..6]]).is_err());
    other.execute_batch("ROLLBACK").unwrap();
    store.retain().unwrap();
    for e in &all[1..] {
        store.write(&[std::slice::from_ref(e)]).unwrap();
    }
    drop(store);
    assert_eq!(objects_table(&path2), reference);
    std::fs::remove_dir_all(&dir2).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Retention removes an object the writer knows; a later write of it makes its row again.
#[test]
fn an_object_removed_by_retention_is_written_again_when_it_comes_back() {
    let (dir, path) = temp_store("known-retained");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, rs, _) = tree(&mut api, &mut events);
    let out = run(&events);
    let rs_create = find(&out, &events[1]).unwrap().clone();
    let mut store = Store::open(&path, Retention { max_age: Duration::from_secs(3600), max_bytes: 0 }).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    // A day later, something else: every mutation above is past the age.
    let mut late = rs_create.clone();
    late.audit_id = "a-day-later".into();
    late.object.uid = "another-object".into();
    late.stage_timestamp = format_rfc3339_micros(time_of(&events[0]) + 86_400_000_000).into();
    store.write(&[[late.clone()].as_slice()]).unwrap();
    let r = store.retain().unwrap();
    assert_eq!(r.mutations, out.len() as u64);
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(count(&conn, &format!("SELECT count(*) FROM objects WHERE uid = '{}'", rs.uid)), 0);
    // The ReplicaSet written again, later still: its row is back, with its owner and times.
    let mut again = rs_create.clone();
    again.audit_id = "rs-again".into();
    again.stage_timestamp = format_rfc3339_micros(time_of(&events[0]) + 86_400_000_001).into();
    store.write(&[[again.clone()].as_slice()]).unwrap();
    let (parent, first, last): (Option<String>, i64, i64) = conn
        .query_row("SELECT parent_uid, first_us, last_us FROM objects WHERE uid = ?1", [&rs.uid], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    let t = time_of(&events[0]) + 86_400_000_001;
    assert_eq!((parent, first, last), (rs_create.parent.as_ref().map(|p| p.uid.to_string()), t, t));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each event as the jsonl sink writes it, by (auditID, object UID).
fn json_by_key(events: &[Enriched]) -> std::collections::HashMap<(String, String), Vec<u8>> {
    events
        .iter()
        .map(|e| {
            let mut json = Vec::new();
            e.write_json(&mut json);
            ((e.audit_id.to_string(), e.object.uid.to_string()), json)
        })
        .collect()
}

#[test]
fn events_are_stored_compressed_and_read_back_byte_for_byte() {
    let (dir, path) = temp_store("packed");
    let lines = corpus_lines(7, 8000);
    let mut p = processor(ModelConfig::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, &lines, &mut out);
    p.flush(0, &mut out);
    assert!(out.len() > 3000, "{} enriched events", out.len());
    // In transactions of 500: the first ones are the dictionary's samples.
    let mut store = Store::open(&path, keep_all()).unwrap();
    for chunk in out.chunks(500) {
        store.write(&[chunk]).unwrap();
    }
    drop(store);
    let want = json_by_key(&out);
    let conn = history::open(&path, Mode::Read).unwrap();
    assert_eq!(count(&conn, "SELECT count(*) FROM dictionaries"), 1);
    // Every event is in a block: the rows hold none, the view names each by its row's id.
    assert_eq!(count(&conn, "SELECT count(*) FROM mutation_rows WHERE event IS NOT NULL"), 0);
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations WHERE event IS NOT id"), 0);
    let blocks = count(&conn, "SELECT count(*) FROM event_blocks");
    assert!(
        blocks >= (out.len() / history::pack::BLOCK_EVENTS) as i64 && blocks < out.len() as i64 / 8,
        "{blocks} blocks"
    );
    let events = Unpacker::new(&conn);
    let mut s = conn
        .prepare(
            "SELECT m.audit_id, o.uid, m.event, b.dictionary, b.id FROM mutations m JOIN objects o ON o.id = m.object_id
             JOIN event_blocks b ON m.id BETWEEN b.id AND b.last_id ORDER BY m.id",
        )
        .unwrap();
    let mut rows = s.query([]).unwrap();
    let (mut n, mut json) = (0usize, 0usize);
    let mut with_dictionary = std::collections::HashSet::new();
    while let Some(r) = rows.next().unwrap() {
        let key: (String, String) = (r.get(0).unwrap(), r.get(1).unwrap());
        let back = events.json(r.get_ref(2).unwrap()).expect("a stored event reads back");
        assert_eq!(std::str::from_utf8(&back).unwrap(), std::str::from_utf8(&want[&key]).unwrap(), "{key:?}");
        // Written after the dictionary was trained (the first events are its samples).
        if r.get::<_, i64>(3).unwrap() != 0 {
            json += back.len();
            with_dictionary.insert(r.get::<_, i64>(4).unwrap());
        }
        n += 1;
    }
    assert_eq!(n, out.len());
    // Compressed with the dictionary, in blocks, the events take a small fraction of their JSON.
    let stored: i64 = with_dictionary
        .iter()
        .map(|b| count(&conn, &format!("SELECT length(data) FROM event_blocks WHERE id = {b}")))
        .sum();
    assert!(json > 0 && stored * 15 < json as i64, "{stored} bytes stored for {json} bytes of JSON");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_store_of_schema_1_is_converted_by_the_writer_and_reads_as_before() {
    let (dir, path) = temp_store("schema-1");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, rs, _) = tree(&mut api, &mut events);
    events.push(api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5)));
    let out = run(&events);
    let (old, new) = out.split_at(out.len() - 1);
    // The store as a build of schema 1 wrote it: no dictionaries, each event's JSON as TEXT.
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        c.execute_batch(history::schema::SQL_2).unwrap();
        c.execute_batch("DROP TABLE dictionaries; INSERT INTO meta (key, value) VALUES ('schema_version', '1');")
            .unwrap();
        for e in old {
            let mut json = Vec::new();
            e.write_json(&mut json);
            c.execute(
                "INSERT OR IGNORE INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 0)",
                rusqlite::params![&*e.cluster, &*e.object.uid, &*e.object.api_version, &*e.object.kind, &*e.object.namespace, e.object.name.as_str()],
            )
            .unwrap();
            let object_id: i64 =
                c.query_row("SELECT id FROM objects WHERE uid = ?1", [&*e.object.uid], |r| r.get(0)).unwrap();
            c.execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, user, class, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    object_id,
                    parse_rfc3339_micros(&e.stage_timestamp).unwrap(),
                    &*e.audit_id,
                    e.verb.as_str(),
                    &*e.user,
                    e.class.as_str(),
                    String::from_utf8(json).unwrap()
                ],
            )
            .unwrap();
        }
    }
    let rs_query = history::story::StoryQuery {
        kind: "ReplicaSet".into(),
        namespace: Some(rs.namespace.clone()),
        name: Some(rs.name.clone()),
        ..Default::default()
    };
    let want = json_by_key(&out);
    let told = |conn: &Connection| -> Vec<String> {
        let story = history::story::build(conn, &rs_query).unwrap();
        story.writes.iter().map(|w| w.event.get().to_string()).collect()
    };
    // A reader of this build asks for the conversion.
    let e = history::open(&path, Mode::Read).expect_err("refused").to_string();
    assert!(e.contains("schema version 1") && e.contains("converted when the writer opens it"), "{e}");
    // The writer converts it: schema 3, its rows kept as they were (their events as TEXT); the
    // new rows' events in blocks.
    drop(Store::open(&path, keep_all()).unwrap());
    let before = told(&history::open(&path, Mode::Read).unwrap());
    let rs_old: Vec<&[u8]> = old
        .iter()
        .filter(|e| *e.object.uid == *rs.uid)
        .map(|e| want[&(e.audit_id.to_string(), e.object.uid.to_string())].as_slice())
        .collect();
    assert_eq!(
        before.iter().map(|s| s.as_bytes()).collect::<Vec<_>>(),
        rs_old,
        "the ReplicaSet's writes, byte for byte"
    );
    let mut store = Store::open(&path, keep_all()).unwrap();
    store.write(&[new]).unwrap();
    drop(store);
    let conn = history::open(&path, Mode::Read).unwrap();
    let version: String =
        conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).unwrap();
    assert_eq!(version, history::SCHEMA_VERSION);
    assert_eq!(count(&conn, "SELECT count(*) FROM mutations WHERE typeof(event) = 'text'"), old.len() as i64);
    assert_eq!(count(&conn, "SELECT count(*) FROM mutation_rows WHERE event IS NULL"), 1);
    assert_eq!(count(&conn, "SELECT count(*) FROM event_blocks"), 1);
    let after = told(&conn);
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after[..before.len()], before[..]);
    let last = &new[0];
    assert_eq!(
        after.last().unwrap().as_bytes(),
        want[&(last.audit_id.to_string(), last.object.uid.to_string())].as_slice()
    );
    // A store of a later schema is refused, saying so.
    drop(conn);
    Connection::open(&path).unwrap().execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'", []).unwrap();
    let e = Store::open(&path, keep_all()).err().expect("refused").to_string();
    assert!(e.contains("schema version 7") && e.contains("move the file aside"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rows of `objects`, of `mutations` and of `reverts`.
type AllRows = (Vec<Vec<rusqlite::types::Value>>, Vec<Vec<rusqlite::types::Value>>, Vec<(i64, String)>);

/// Every row of a store's `objects`, `mutations` (the event as its JSON) and `reverts`, in
/// the columns of schema 2, by id.
fn all_rows(conn: &Connection) -> AllRows {
    use rusqlite::types::Value;
    let events = Unpacker::new(conn);
    let objects = conn
        .prepare(
            "SELECT id, cluster, uid, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name,
                    first_us, last_us, deleted_us, deleted_by, deleted_audit_id FROM objects ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| (0..16).map(|i| r.get::<_, Value>(i)).collect::<Result<Vec<_>, _>>())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mutations = conn
        .prepare(
            "SELECT id, object_id, time_us, audit_id, verb, subresource, user, class, resolution, policy, reverts_person, event
             FROM mutations ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| {
            let mut row = (0..11).map(|i| r.get::<_, Value>(i)).collect::<Result<Vec<_>, _>>()?;
            row.push(Value::Blob(events.json(r.get_ref(11)?).expect("a stored event")));
            Ok(row)
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let reverts = conn
        .prepare("SELECT mutation_id, origin_audit_id FROM reverts ORDER BY mutation_id, origin_audit_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (objects, mutations, reverts)
}

#[test]
fn a_store_of_schema_2_is_converted_by_the_writer_with_every_row_as_it_was() {
    let (dir, path) = temp_store("schema-2");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let PutBack { rs, back, .. } = put_back(&mut api, &mut events);
    let out = run(&events);
    assert_eq!(class_of(&out, &back), Class::Drift);
    // The store as a build of schema 2 wrote it: each event one zstd frame (no dictionary),
    // after a byte 1 and the dictionary's id 0; the objects' rows with their owners, times and
    // tombstones; the drifts' reverts.
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        c.execute_batch(history::schema::SQL_2).unwrap();
        c.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')", []).unwrap();
        for e in &out {
            let t = parse_rfc3339_micros(&e.stage_timestamp).unwrap();
            let p = e.parent.as_ref();
            let gone = e.verb.is_delete();
            c.execute(
                "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name,
                                      first_us, last_us, deleted_us, deleted_by, deleted_audit_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14)
                 ON CONFLICT (cluster, uid) DO UPDATE SET parent_uid = coalesce(excluded.parent_uid, parent_uid),
                     parent_api_version = coalesce(excluded.parent_api_version, parent_api_version),
                     parent_kind = coalesce(excluded.parent_kind, parent_kind), parent_name = coalesce(excluded.parent_name, parent_name),
                     first_us = min(first_us, excluded.first_us), last_us = max(last_us, excluded.last_us),
                     deleted_us = coalesce(deleted_us, excluded.deleted_us), deleted_by = coalesce(deleted_by, excluded.deleted_by),
                     deleted_audit_id = coalesce(deleted_audit_id, excluded.deleted_audit_id)",
                rusqlite::params![
                    &*e.cluster,
                    &*e.object.uid,
                    &*e.object.api_version,
                    &*e.object.kind,
                    &*e.object.namespace,
                    e.object.name.as_str(),
                    p.map(|p| &*p.uid),
                    p.map(|p| &*p.api_version),
                    p.map(|p| &*p.kind),
                    p.map(|p| p.name.as_str()),
                    t,
                    gone.then_some(t),
                    gone.then_some(&*e.user),
                    gone.then_some(&*e.audit_id),
                ],
            )
            .unwrap();
            let object_id: i64 =
                c.query_row("SELECT id FROM objects WHERE uid = ?1", [&*e.object.uid], |r| r.get(0)).unwrap();
            let mut json = Vec::new();
            e.write_json(&mut json);
            let mut packed = vec![1u8, 0, 0, 0, 0];
            packed.extend(zstd::bulk::compress(&json, 3).unwrap());
            let reverts = e.reverts.as_deref().unwrap_or_default();
            c.execute(
                "INSERT INTO mutations (object_id, time_us, audit_id, verb, subresource, user, class, resolution, policy, reverts_person, event)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                rusqlite::params![
                    object_id,
                    t,
                    &*e.audit_id,
                    e.verb.as_str(),
                    e.subresource,
                    &*e.user,
                    e.class.as_str(),
                    e.resolution.map(|r| r.as_str()),
                    e.policy.as_deref(),
                    reverts.iter().any(|r| r.person),
                    packed,
                ],
            )
            .unwrap();
            let id = c.last_insert_rowid();
            for r in reverts {
                c.execute(
                    "INSERT INTO reverts (mutation_id, origin_audit_id) VALUES (?1, ?2)",
                    rusqlite::params![id, &*r.audit_id],
                )
                .unwrap();
            }
        }
        let (first, last) = (
            parse_rfc3339_micros(&out[0].stage_timestamp).unwrap(),
            parse_rfc3339_micros(&out[out.len() - 1].stage_timestamp).unwrap(),
        );
        c.execute(
            "INSERT INTO meta (key, value) VALUES ('oldest_us', ?1), ('newest_us', ?2)",
            [first.to_string(), last.to_string()],
        )
        .unwrap();
    }
    let rows_before = all_rows(&Connection::open(&path).unwrap());
    assert_eq!(rows_before.1.len(), out.len());
    assert!(rows_before.0.iter().any(|o| o[13] != rusqlite::types::Value::Null), "a tombstone");
    assert!(!rows_before.2.is_empty(), "a revert");
    let rs_query = history::story::StoryQuery {
        kind: "ReplicaSet".into(),
        namespace: Some(rs.namespace.clone()),
        name: Some(rs.name.clone()),
        ..Default::default()
    };
    let (mut store, conn) = converted(&path, "2");
    // Every row as it was, with its id (the drift feed's cursors stay valid).
    assert_eq!(all_rows(&conn), rows_before);
    for old in ["objects_old", "mutations_old", "reverts_old"] {
        assert_eq!(
            count(&conn, &format!("SELECT count(*) FROM sqlite_schema WHERE name = '{old}'")),
            0,
            "{old} dropped"
        );
    }
    // The story of the ReplicaSet: its writes byte for byte, and the drift that undid the person's.
    let story = history::story::build(&conn, &rs_query).unwrap();
    let want = json_by_key(&out);
    let rs_events: Vec<&[u8]> = out
        .iter()
        .filter(|e| *e.object.uid == *rs.uid)
        .map(|e| want[&(e.audit_id.to_string(), e.object.uid.to_string())].as_slice())
        .collect();
    assert_eq!(story.writes.iter().map(|w| w.event.get().as_bytes()).collect::<Vec<_>>(), rs_events);
    assert_eq!(story.writes.iter().filter(|w| !w.reverted_by.is_empty()).count(), 1);
    // The same events written again add nothing (their rows of schema 2 are found).
    let w = store.write(&[out.as_slice()]).unwrap();
    assert_eq!((w.mutations, w.duplicates), (0, out.len() as u64));
    assert_eq!(all_rows(&conn), rows_before);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the conversion tests write: a person's scale of a ReplicaSet put back by its
/// controller (a drift, with its revert), a pod deleted and replaced by another.
struct Converting {
    rs: ObjRef,
    out: Vec<Enriched>,
    /// Each event's JSON as the jsonl sink writes it.
    want: std::collections::HashMap<(String, String), Vec<u8>>,
}

impl Converting {
    fn new() -> Converting {
        let mut api = ApiServer::new();
        let mut events = Vec::new();
        let (_, rs, pods) = tree(&mut api, &mut events);
        let by_hand = api.update("alice@example.com", &rs, |r| r["spec"]["replicas"] = json!(5));
        let back = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(3));
        let del = api.delete("carol@example.com", &pods[1], &[]);
        let (_, replacement) = api.create(REPLICASET_CONTROLLER, pod(&rs, "d", "web:1"));
        events.extend([by_hand, back.clone(), del, replacement]);
        let out = run(&events);
        assert_eq!(class_of(&out, &back), Class::Drift);
        let want = json_by_key(&out);
        Converting { rs, out, want }
    }

    /// The JSON of the ReplicaSet's events among `events`.
    fn rs_events(&self, events: &[Enriched]) -> Vec<Vec<u8>> {
        events
            .iter()
            .filter(|e| *e.object.uid == *self.rs.uid)
            .map(|e| self.want[&(e.audit_id.to_string(), e.object.uid.to_string())].clone())
            .collect()
    }

    /// The ReplicaSet's story in the store: its writes' events, and how many were reverted.
    fn rs_story(&self, conn: &Connection) -> (Vec<Vec<u8>>, usize) {
        let q = history::story::StoryQuery {
            kind: "ReplicaSet".into(),
            namespace: Some(self.rs.namespace.clone()),
            name: Some(self.rs.name.clone()),
            ..Default::default()
        };
        let s = history::story::build(conn, &q).unwrap();
        (
            s.writes.iter().map(|w| w.event.get().as_bytes().to_vec()).collect(),
            s.writes.iter().filter(|w| !w.reverted_by.is_empty()).count(),
        )
    }
}

#[test]
fn a_store_of_schema_3_is_converted_by_the_writer_with_every_row_as_it_was() {
    let (dir, path) = temp_store("schema-3");
    let c = Converting::new();
    let (rs, want) = (&c.rs, &c.want);
    let (old, new) = c.out.split_at(c.out.len() - 1);
    // Written by this build, then made a store of schema 3: the objects' rows held their times
    // and tombstone, the mutations' rows their names; the blocks each event whole, as the
    // jsonl sink writes it.
    let written = Store::open(&path, keep_all()).unwrap().write(&[old]).unwrap();
    assert_eq!(written.mutations, old.len() as u64);
    let mut rows_before = all_rows(&Connection::open(&path).unwrap());
    {
        let c = Connection::open(&path).unwrap();
        let blocks: Vec<(i64, Vec<u8>)> = c
            .prepare("SELECT b.id, m.audit_id, o.uid FROM event_blocks b JOIN mutations m ON m.id BETWEEN b.id AND b.last_id JOIN objects o ON o.id = m.object_id ORDER BY m.id")
            .unwrap()
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, (r.get::<_, String>(1)?, r.get::<_, String>(2)?))))
            .unwrap()
            .map(Result::unwrap)
            .fold(Vec::new(), |mut blocks: Vec<(i64, Vec<u8>)>, (block, key)| {
                if blocks.last().is_none_or(|b| b.0 != block) {
                    blocks.push((block, Vec::new()));
                }
                let data = &mut blocks.last_mut().unwrap().1;
                data.extend_from_slice(&want[&key]);
                data.push(b'\n');
                blocks
            });
        assert!(!blocks.is_empty());
        for (id, data) in blocks {
            let frame = zstd::bulk::compress(&data, 9).unwrap();
            c.execute("UPDATE event_blocks SET dictionary = 0, data = ?2 WHERE id = ?1", rusqlite::params![id, frame])
                .unwrap();
        }
        c.execute_batch(SCHEMA_3_ROWS).unwrap();
        // Retention had removed an older write of the ReplicaSet: its row says it was first
        // seen before its oldest mutation left.
        let rs_id: i64 = c.query_row("SELECT id FROM object_rows WHERE name = ?1", [&*rs.name], |r| r.get(0)).unwrap();
        c.execute("UPDATE object_rows SET first_us = first_us - 1000000 WHERE id = ?1", [rs_id]).unwrap();
        for o in rows_before.0.iter_mut().filter(|o| o[0] == rusqlite::types::Value::Integer(rs_id)) {
            let rusqlite::types::Value::Integer(first) = o[11] else { panic!("first_us {:?}", o[11]) };
            o[11] = rusqlite::types::Value::Integer(first - 1_000_000);
        }
        c.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'", []).unwrap();
    }
    assert_eq!(rows_before.1.len(), old.len());
    assert!(rows_before.0.iter().any(|o| o[13] != rusqlite::types::Value::Null), "a tombstone");
    assert!(!rows_before.2.is_empty(), "a revert");
    let (mut store, conn) = converted(&path, "3");
    // Every row as it was, with its id; every event byte for byte as schema 3 kept it.
    assert_eq!(all_rows(&conn), rows_before);
    assert_eq!(c.rs_story(&conn), (c.rs_events(old), 1));
    // The same events again add nothing; a new one goes into a block of this schema (its
    // auditID, its object's UID and its own last hop left out) and reads back byte for byte
    // after the old ones.
    let w = store.write(&[old]).unwrap();
    assert_eq!((w.mutations, w.duplicates), (0, old.len() as u64));
    assert_eq!(all_rows(&conn), rows_before);
    store.write(&[new]).unwrap();
    drop(store);
    // The new event's block (the store has no dictionary yet: too few events) holds it
    // without its auditID, its object's UID and the last hop of its trace (itself).
    let frame: Vec<u8> = conn
        .query_row(
            "SELECT data FROM event_blocks WHERE id = (SELECT max(id) FROM mutation_rows) AND dictionary = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let raw = zstd::bulk::decompress(&frame, 1 << 20).unwrap();
    assert_eq!(
        raw[0],
        history::pack::LEFT_OUT_AUDIT_ID | history::pack::LEFT_OUT_UID | history::pack::LEFT_OUT_LAST_HOP
    );
    for id in [&*new[0].audit_id, &*new[0].object.uid] {
        assert!(!raw.windows(id.len()).any(|w| w == id.as_bytes()), "{id} left out");
    }
    let after = all_rows(&conn);
    assert_eq!(after.1.len(), old.len() + 1);
    assert_eq!(after.1[..old.len()], rows_before.1[..]);
    let last = after.1.last().unwrap();
    assert_eq!(
        last[11],
        rusqlite::types::Value::Blob(want[&(new[0].audit_id.to_string(), new[0].object.uid.to_string())].clone())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store of this build made one of schema 3: its `object_rows` with their times and
/// tombstone, its `mutation_rows` with their names, as that schema kept them (and views over
/// them, which the conversion replaces).
const SCHEMA_3_ROWS: &str = "
CREATE TABLE o3 AS SELECT o.id, o.cluster, o.uid, o.api_version, o.kind, o.namespace, v.name, o.owner, f.first_us, f.last_us,
    f.deleted_us, f.deleted_by, f.deleted_audit_id FROM object_rows o JOIN object_facts f ON f.id = o.id JOIN objects v ON v.id = o.id;
CREATE TABLE m3 AS SELECT m.id, m.object_id, m.time_us, m.audit_id, a.verb, nullif(a.subresource, 0) AS subresource, a.user,
    a.class, nullif(a.resolution, 0) AS resolution, nullif(a.policy, 0) AS policy, a.reverts_person, m.event
    FROM mutation_rows m JOIN acts a ON a.id = m.act;
DROP VIEW objects; DROP VIEW mutations; DROP VIEW object_facts;
DROP TABLE object_rows; DROP TABLE object_past; DROP TABLE mutation_rows; DROP TABLE acts;
CREATE TABLE object_rows (
    id INTEGER PRIMARY KEY, cluster INTEGER NOT NULL, uid BLOB NOT NULL, api_version INTEGER NOT NULL, kind INTEGER NOT NULL,
    namespace INTEGER NOT NULL, name TEXT NOT NULL, owner INTEGER, first_us INTEGER NOT NULL, last_us INTEGER NOT NULL,
    deleted_us INTEGER, deleted_by INTEGER, deleted_audit_id BLOB, UNIQUE (cluster, uid)
);
CREATE INDEX object_rows_by_name ON object_rows (kind, substr(name, -8));
CREATE INDEX object_rows_by_owner ON object_rows (owner) WHERE owner IS NOT NULL;
CREATE TABLE mutation_rows (
    id INTEGER PRIMARY KEY, object_id INTEGER NOT NULL, time_us INTEGER NOT NULL, audit_id BLOB NOT NULL, verb INTEGER NOT NULL,
    subresource INTEGER, user INTEGER NOT NULL, class INTEGER NOT NULL, resolution INTEGER, policy INTEGER,
    reverts_person INTEGER NOT NULL DEFAULT 0, event BLOB
);
CREATE INDEX mutation_rows_by_object ON mutation_rows (object_id, time_us);
CREATE INDEX mutation_rows_by_time ON mutation_rows (time_us) WHERE event IS NOT NULL;
CREATE INDEX mutations_drift_seq ON mutation_rows (id, time_us) WHERE class = 1;
INSERT INTO object_rows SELECT * FROM o3;
INSERT INTO mutation_rows SELECT * FROM m3;
DROP TABLE o3; DROP TABLE m3;
CREATE VIEW objects AS SELECT o.id AS id, o.name AS name, o.first_us AS first_us FROM object_rows o;
CREATE VIEW mutations AS SELECT m.id AS id, m.time_us AS time_us FROM mutation_rows m;
";

#[test]
fn a_store_of_schema_4_is_converted_by_the_writer_with_every_row_as_it_was() {
    let (dir, path) = temp_store("schema-4");
    let c = Converting::new();
    let want = &c.want;
    let (old, new) = c.out.split_at(c.out.len() - 1);
    // Written by this build, then made a store of schema 4: whole times in the mutations'
    // rows, the objects' (cluster, uid) unique, UIDs and auditIDs indexed whole.
    let written = Store::open(&path, keep_all()).unwrap().write(&[old]).unwrap();
    assert_eq!(written.mutations, old.len() as u64);
    let rows_before = all_rows(&Connection::open(&path).unwrap());
    Connection::open(&path).unwrap().execute_batch(SCHEMA_4_ROWS).unwrap();
    {
        // The store of schema 4 reads as before through its views (SQL by hand).
        let c = Connection::open(&path).unwrap();
        assert_eq!(all_rows(&c), rows_before);
        assert_eq!(count(&c, "SELECT count(*) FROM pragma_table_info('mutation_rows') WHERE name = 'at_us'"), 0);
    }
    assert!(!rows_before.2.is_empty(), "a revert");
    let (mut store, conn) = converted(&path, "4");
    assert_eq!(all_rows(&conn), rows_before);
    // Each time kept as its distance from the store's epoch, which is when it was converted.
    let epoch: i64 =
        conn.query_row("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch_us'", [], |r| r.get(0)).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    assert!((now - epoch).abs() < 600_000_000, "epoch {epoch}, now {now}");
    assert_eq!(count(&conn, &format!("SELECT count(*) FROM mutation_rows WHERE at_us + {epoch} != time_us")), 0);
    assert_eq!(c.rs_story(&conn), (c.rs_events(old), 1));
    // The same events again add nothing, not even an object's row (looked up by its UID's last
    // bytes); a new one reads back byte for byte after them.
    let w = store.write(&[old]).unwrap();
    assert_eq!((w.mutations, w.duplicates), (0, old.len() as u64));
    assert_eq!(all_rows(&conn), rows_before);
    store.write(&[new]).unwrap();
    drop(store);
    let after = all_rows(&conn);
    assert_eq!(after.1.len(), old.len() + 1);
    assert_eq!(after.1[..old.len()], rows_before.1[..]);
    assert_eq!(
        after.1.last().unwrap()[11],
        rusqlite::types::Value::Blob(want[&(new[0].audit_id.to_string(), new[0].object.uid.to_string())].clone())
    );
    assert_eq!(
        count(&conn, "SELECT count(*) FROM (SELECT 1 FROM object_rows GROUP BY cluster, uid HAVING count(*) > 1)"),
        0
    );
    // An object written again by hand through `objects` is refused, as the unique index of
    // schema 4 refused it.
    let e = Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, first_us, last_us) VALUES (?1, ?2, 'v1', 'Pod', 'ns', 'x', 1, 2)",
            rusqlite::params![&*new[0].cluster, &*new[0].object.uid],
        )
        .expect_err("a second row of one object")
        .to_string();
    assert!(e.contains("UNIQUE constraint failed"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The events of every block as the block holds them (a first byte below `{`: what was left
/// out of it), by block id.
fn block_events(conn: &Connection) -> Vec<(i64, Vec<Vec<u8>>)> {
    let dictionaries: std::collections::HashMap<i64, Vec<u8>> = conn
        .prepare("SELECT id, dictionary FROM dictionaries")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    conn.prepare("SELECT id, dictionary, data FROM event_blocks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .map(|(id, dictionary, data)| {
            let mut d = match dictionaries.get(&dictionary) {
                Some(dict) => zstd::bulk::Decompressor::with_dictionary(dict).unwrap(),
                None => zstd::bulk::Decompressor::new().unwrap(),
            };
            let events = d.decompress(&data, 64 << 20).unwrap();
            (id, events.split(|&b| b == b'\n').filter(|e| !e.is_empty()).map(<[u8]>::to_vec).collect())
        })
        .collect()
}

/// Every block written again with its events whole, as an earlier build may have written them
/// (schema 3 kept them so; 4 and 5 read such a block as it is).
fn whole_blocks(path: &std::path::Path) {
    let conn = Connection::open(path).unwrap();
    let events = Unpacker::new(&conn);
    let blocks: Vec<(i64, i64, i64)> = conn
        .prepare("SELECT id, last_id, dictionary FROM event_blocks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (first, last, dictionary) in blocks {
        let mut whole = Vec::new();
        for id in first..=last {
            whole.extend(events.json(rusqlite::types::ValueRef::Integer(id)).expect("an event"));
            whole.push(b'\n');
        }
        let dict: Option<Vec<u8>> = conn
            .query_row("SELECT dictionary FROM dictionaries WHERE id = ?1", [dictionary], |r| r.get(0))
            .optional()
            .unwrap();
        let data = match dict {
            Some(d) => zstd::bulk::Compressor::with_dictionary(9, &d).unwrap().compress(&whole).unwrap(),
            None => zstd::bulk::compress(&whole, 9).unwrap(),
        };
        conn.execute("UPDATE event_blocks SET data = ?1 WHERE id = ?2", rusqlite::params![data, first]).unwrap();
    }
}

/// A store of schema 5 is taken as it is: its blocks, whose events hold their trace's last
/// hop, read as before, and new events after them leave the hop out.
#[test]
fn a_store_of_schema_5_is_taken_as_it_is_with_its_blocks_read_as_before() {
    use kausality_stream::history::pack::LEFT_OUT_LAST_HOP;
    let (dir, path) = temp_store("schema-5");
    let c = Converting::new();
    let (old, new) = c.out.split_at(c.out.len() - 1);
    Store::open(&path, keep_all()).unwrap().write(&[old]).unwrap();
    let rows_before = all_rows(&Connection::open(&path).unwrap());
    let hop_left_out = |conn: &Connection| {
        block_events(conn)
            .into_iter()
            .flat_map(|(_, e)| e)
            .filter(|e| e[0] < b'{' && e[0] & LEFT_OUT_LAST_HOP != 0)
            .count()
    };
    assert!(hop_left_out(&Connection::open(&path).unwrap()) > 0, "events without their own last hop");
    whole_blocks(&path);
    Connection::open(&path).unwrap().execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'", []).unwrap();
    {
        let c = Connection::open(&path).unwrap();
        assert!(block_events(&c).iter().all(|(_, e)| e.iter().all(|e| e[0] == b'{')), "whole events");
    }
    let (mut store, conn) = converted(&path, "5");
    assert_eq!(all_rows(&conn), rows_before);
    assert_eq!(c.rs_story(&conn), (c.rs_events(old), 1));
    store.write(&[new]).unwrap();
    drop(store);
    let after = all_rows(&conn);
    assert_eq!(after.1[..old.len()], rows_before.1[..]);
    assert_eq!(
        after.1.last().unwrap()[11],
        rusqlite::types::Value::Blob(c.want[&(new[0].audit_id.to_string(), new[0].object.uid.to_string())].clone())
    );
    assert_eq!(hop_left_out(&conn), 1, "the new event, without its own last hop");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store of this build made one of schema 4: the mutations' rows with their whole times, the
/// objects' with `UNIQUE (cluster, uid)`, the indexes of whole UIDs and auditIDs, no epoch (the
/// views, the same text in both schemas, stay).
const SCHEMA_4_ROWS: &str = "
CREATE TABLE o4 AS SELECT id, cluster, uid, api_version, kind, namespace, name, owner FROM object_rows;
CREATE TABLE m4 AS SELECT id, object_id, time_us, audit_id, act, event FROM mutation_rows;
DROP TABLE object_rows; DROP TABLE mutation_rows;
CREATE TABLE object_rows (
    id INTEGER PRIMARY KEY, cluster INTEGER NOT NULL, uid BLOB NOT NULL, api_version INTEGER NOT NULL, kind INTEGER NOT NULL,
    namespace INTEGER NOT NULL, name TEXT NOT NULL, owner INTEGER, UNIQUE (cluster, uid)
);
CREATE INDEX object_rows_by_name ON object_rows (kind, substr(CAST(name AS TEXT), -6));
CREATE INDEX object_rows_by_owner ON object_rows (owner) WHERE owner IS NOT NULL;
CREATE TABLE mutation_rows (
    id INTEGER PRIMARY KEY, object_id INTEGER NOT NULL, time_us INTEGER NOT NULL, audit_id BLOB NOT NULL, act INTEGER NOT NULL,
    event BLOB, class INTEGER GENERATED ALWAYS AS (act % 16) VIRTUAL
);
CREATE INDEX mutation_rows_by_object ON mutation_rows (object_id, time_us);
CREATE INDEX mutation_rows_by_time ON mutation_rows (time_us) WHERE event IS NOT NULL;
CREATE INDEX mutations_drift_seq ON mutation_rows (class) WHERE class = 1;
CREATE INDEX mutations_origin_seq ON mutation_rows (class) WHERE class = 3;
CREATE INDEX mutations_undetermined_seq ON mutation_rows (class) WHERE class = 7;
CREATE INDEX mutations_unknown_parent_seq ON mutation_rows (class) WHERE class = 8;
INSERT INTO object_rows SELECT * FROM o4;
INSERT INTO mutation_rows (id, object_id, time_us, audit_id, act, event) SELECT * FROM m4;
DROP TABLE o4; DROP TABLE m4;
DROP INDEX owners_by_uid; CREATE INDEX owners_by_uid ON owners (uid);
DROP INDEX revert_rows_by_origin; CREATE INDEX revert_rows_by_origin ON revert_rows (origin_audit_id);
DELETE FROM meta WHERE key = 'epoch_us';
UPDATE meta SET value = '4' WHERE key = 'schema_version';
";

/// An object's row tells its times and its tombstone from its mutations; retention that
/// removes its oldest writes (its creation, the delete that tombstoned it) must not change
/// what its row says while some of its writes are left.
#[test]
fn retention_keeps_an_object_s_first_time_and_tombstone_when_its_oldest_writes_go() {
    let (dir, path) = temp_store("facts");
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (_, _, pods) = tree(&mut api, &mut events);
    let created = events
        .iter()
        .find(|e| {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            v["verb"] == "create" && v["objectRef"]["name"] == pods[0].name.as_str()
        })
        .expect("pod a's creation")
        .clone();
    let terminating = api.delete_graceful("carol@example.com", &pods[0]);
    events.push(terminating.clone());
    // Two days later, pod a (terminating) is written again.
    api.advance_ms(2 * 86_400_000);
    let last = api.update("alice@example.com", &pods[0], |p| p["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(last.clone());
    let out = run(&events);
    let mut store = Store::open(&path, Retention { max_age: Duration::from_secs(86_400), max_bytes: 0 }).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    let conn = history::open(&path, Mode::Read).unwrap();
    let row = |conn: &Connection| -> (i64, i64, Option<i64>, Option<String>, Option<String>, i64) {
        conn.query_row(
            "SELECT first_us, last_us, deleted_us, deleted_by, deleted_audit_id,
                    (SELECT count(*) FROM mutations m WHERE m.object_id = o.id)
             FROM objects o WHERE uid = ?1",
            [&*pods[0].uid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
        )
        .unwrap()
    };
    let want = (
        time_of(&created),
        time_of(&last),
        Some(time_of(&terminating)),
        Some("carol@example.com".to_string()),
        Some(audit_id(&terminating)),
    );
    let before = row(&conn);
    assert_eq!((before.0, before.1, before.2, before.3.clone(), before.4.clone()), want);
    assert_eq!(before.5, 3, "created, terminating, written again");
    let r = store.retain().unwrap();
    assert!(r.mutations >= 2, "{r:?}");
    let after = row(&conn);
    assert_eq!(after.5, 1, "only the write of two days later is left");
    assert_eq!((after.0, after.1, after.2, after.3, after.4), want, "the row says what it said before");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The store at `path`, of schema version `from`, converted: a reader refuses it first and says
/// how to convert it; the writer converts it when it opens it, to this build's schema.
fn converted(path: &std::path::Path, from: &str) -> (Store, rusqlite::Connection) {
    let e = history::open(path, Mode::Read).expect_err("refused").to_string();
    assert!(e.contains(&format!("schema version {from}")) && e.contains("converted when the writer opens it"), "{e}");
    let store = Store::open(path, keep_all()).unwrap();
    let conn = history::open(path, Mode::Read).unwrap();
    let version: String =
        conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).unwrap();
    assert_eq!(version, history::SCHEMA_VERSION);
    (store, conn)
}
