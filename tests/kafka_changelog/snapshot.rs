//! The state snapshot as a fast-start cache of the changelog (docs/scale-out.md, "Snapshots"):
//! a process restarted with its snapshot loads each partition's state from it and reads only
//! the changelog records after the snapshot's positions; a position the changelog no longer
//! has is refused for its partition (counted), which is then restored from the changelog's
//! start. Every class as `replay`'s, nothing written twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kausality_stream::state::{read_partitioned, ChangelogMark, Interner};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientConfig;
use serde_json::Value;

use super::*;

/// A classify process's pipeline with a snapshot in `dir`, written every `every`.
fn with_snapshot(case: &Case, dir: &Path, member: &str, every: &str) -> PathBuf {
    let path = case.pipeline(dir, member, EXACTLY_ONCE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!(
        "[state]\nsnapshot = \"{}\"\nsnapshot_interval = \"{every}\"\n",
        dir.join("state.snapshot").display()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// The changelog mark of the snapshot in `dir`, read by the library.
fn mark(dir: &Path) -> ChangelogMark {
    let mut file = std::fs::File::open(dir.join("state.snapshot")).expect("a snapshot was written");
    read_partitioned(&Interner::new(), &mut file).unwrap().mark.expect("the snapshot has changelog positions")
}

/// A changelog record: key, value (none: a tombstone).
type Record = (Vec<u8>, Option<Vec<u8>>);

/// The committed records of `partition` of `topic` from offset `from` to its end.
fn records(kafka: &Kafka, topic: &str, partition: i32, from: i64) -> Vec<Record> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        .set("group.id", kafka.unique("counter"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let (_, end) = c.fetch_watermarks(topic, partition, Duration::from_secs(10)).unwrap();
    let mut out = Vec::new();
    if end <= from {
        return out;
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from)).unwrap();
    c.assign(&tpl).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "reading {topic}[{partition}] to its end");
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((m.key().unwrap_or_default().to_vec(), m.payload().map(<[u8]>::to_vec))),
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic}[{partition}]: {e}"),
            None => {}
        }
    }
}

/// Each restore a process logged: partition → (records + tombstones read, states loaded from
/// the snapshot, offset the reading started at).
fn restores(lines: &[Value]) -> HashMap<i32, (u64, u64, i64)> {
    lines
        .iter()
        .filter(|v| v["fields"]["message"] == RESTORED)
        .map(|v| {
            let f = &v["fields"];
            let n = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"));
            (
                f["partition"].as_i64().unwrap() as i32,
                (n("records") + n("tombstones"), n("from_snapshot"), f["from_offset"].as_i64().unwrap()),
            )
        })
        .collect()
}

/// What the snapshot's results counted: `result` → partitions.
fn snapshot_results(serve: &Serve) -> HashMap<String, f64> {
    ["loaded", "not_held", "other_changelog", "past_end", "before_start", "too_old"]
        .iter()
        .map(|r| (r.to_string(), serve.metric("kausality_snapshot_partitions_total", &[&format!("result=\"{r}\"")])))
        .collect()
}

/// Asserts that `restarted` loaded every partition from the snapshot `mark` and read exactly
/// the changelog records after its positions, as the test counts them in the topic (`tail`);
/// returns how many records that was, of how many the changelog holds.
fn assert_read_only_the_tail(
    case: &Case,
    mark: &ChangelogMark,
    tail: &HashMap<i32, usize>,
    restarted: &HashMap<i32, (u64, u64, i64)>,
) -> (usize, usize) {
    assert_eq!(mark.positions.len(), PARTITIONS as usize, "the snapshot holds every partition: {mark:?}");
    let mut read = 0;
    for &(p, position) in &mark.positions {
        let (records, loaded, from) =
            restarted.get(&p).copied().unwrap_or_else(|| panic!("partition {p} restored: {restarted:?}"));
        assert_eq!(from, position, "partition {p}: read from the snapshot's position");
        assert!(loaded > 0, "partition {p}: states loaded from the snapshot");
        assert_eq!(
            records as usize, tail[&p],
            "partition {p}: the records after the snapshot's position {position}, and no others"
        );
        read += tail[&p];
    }
    let total: usize = (0..PARTITIONS).map(|p| records(&case.kafka, &case.t.changelog, p, 0).len()).sum();
    assert!(read > 0 && read < total, "a tail of the changelog was read: {read} of {total} records");
    (read, total)
}

/// The committed records after each position of `mark`, counted in the topic.
fn tail(case: &Case, mark: &ChangelogMark) -> HashMap<i32, usize> {
    mark.positions
        .iter()
        .map(|&(p, position)| (p, records(&case.kafka, &case.t.changelog, p, position).len()))
        .collect()
}

/// Starts a process on `pipeline` and waits until it has committed everything produced so far
/// (`what`, said with its log if it times out); returns it with the log lines it wrote meanwhile.
fn start_until_committed(case: &Case, pipeline: &Path, what: &str) -> (Serve, Vec<Value>) {
    let serve = Serve::start(pipeline);
    let mut lines = Vec::new();
    wait_or_explain(
        what,
        240,
        || {
            lines.extend(serve.logs());
            all_committed(&case.kafka, &case.t)
        },
        || serve.explain(),
    );
    (serve, lines)
}

/// Stops `serve` with SIGTERM: it exits cleanly.
fn stop(serve: Serve) {
    let (code, _) = serve.terminate();
    assert_eq!(code, 0);
}

/// A process on `pipeline` commits everything produced so far (`what`), then stops.
fn run_until_committed(case: &Case, pipeline: &Path, what: &str) {
    let serve = Serve::start(pipeline);
    wait_or_explain(what, 240, || all_committed(&case.kafka, &case.t), || serve.explain());
    stop(serve);
}

/// One process with a snapshot classifies a first part and stops; a second process (no
/// snapshot) takes the second part, writing changelog records after the snapshot's positions;
/// the first restarts with its snapshot for the third part: it reads exactly those records.
#[test]
fn a_restart_with_the_snapshot_reads_only_the_changelog_after_its_positions_classes_as_replay() {
    let test = "a_restart_with_the_snapshot_reads_only_the_changelog_after_its_positions_classes_as_replay";
    if !enabled(test) {
        return;
    }
    let case = Case::new(test, true);
    let (kafka, t) = (&case.kafka, &case.t);
    let parts = case.parts(3);
    let (dir_a, dir_b) = (temp_dir("snapshot-a"), temp_dir("snapshot-b"));
    produce(kafka, &t.input, parts[0]);
    run_until_committed(&case, &with_snapshot(&case, &dir_a, "a", "60s"), "the first part committed");
    let snapshot = mark(&dir_a);

    produce(kafka, &t.input, parts[1]);
    run_until_committed(&case, &case.pipeline(&dir_b, "b", EXACTLY_ONCE), "the second part committed");
    let tail = tail(&case, &snapshot);

    produce(kafka, &t.input, parts[2]);
    let (a, lines) = start_until_committed(
        &case,
        &with_snapshot(&case, &dir_a, "a", "60s"),
        "the third part committed after the restart",
    );
    let results = snapshot_results(&a);
    assert_eq!(
        (results["loaded"], results.values().sum::<f64>()),
        (PARTITIONS as f64, PARTITIONS as f64),
        "every partition loaded: {results:?}"
    );
    let (read, total) = assert_read_only_the_tail(&case, &snapshot, &tail, &restores(&lines));
    let outputs = case.assert_as_replay(test, true, &|| timeline("a", &lines));
    println!("{test}: {read} of {total} changelog records read after the restart; {outputs} outputs");
    stop(a);
    case.done(&[&dir_a, &dir_b]);
}

/// A process writes snapshots while it classifies; after one, more input comes, and it is
/// killed (SIGKILL) mid-stream: its open transaction is aborted. Restarted with that
/// snapshot it reads the records committed after its positions: nothing lost, nothing twice.
#[test]
fn a_kill_after_a_snapshot_then_a_restart_from_it_loses_nothing_and_writes_nothing_twice() {
    let test = "a_kill_after_a_snapshot_then_a_restart_from_it_loses_nothing_and_writes_nothing_twice";
    if !enabled(test) {
        return;
    }
    let case = Case::new(test, true);
    let (kafka, t) = (&case.kafka, &case.t);
    let parts = case.parts(3);
    let dir = temp_dir("snapshot-kill");
    produce(kafka, &t.input, parts[0]);
    let (a, mut lines) =
        start_until_committed(&case, &with_snapshot(&case, &dir, "a", "1s"), "the first part committed");
    let delivered = |s: &Serve| s.metric("kausality_sink_events_total", &["sink=\"kafka\""]);
    let before = delivered(&a);
    produce(kafka, &t.input, parts[1]);
    // A snapshot follows a commit only: one is written while the second part is classified.
    wait_or_explain(
        "outputs of the second part, and a snapshot written",
        120,
        || {
            lines.extend(a.logs());
            delivered(&a) > before + 50.0 && lines.iter().any(|v| v["fields"]["message"] == "state snapshot written")
        },
        || a.explain(),
    );
    a.kill();
    let snapshot = mark(&dir);
    let tail = tail(&case, &snapshot);

    produce(kafka, &t.input, parts[2]);
    let (a, lines) =
        start_until_committed(&case, &with_snapshot(&case, &dir, "a", "1s"), "every part committed after the restart");
    assert_eq!(snapshot_results(&a)["loaded"], PARTITIONS as f64);
    let restarted = restores(&lines);
    let mut read = 0;
    for &(p, position) in &snapshot.positions {
        let (records, _, from) = restarted[&p];
        assert_eq!(
            (from, records as usize),
            (position, tail[&p]),
            "partition {p}: the committed records after the snapshot's position"
        );
        read += records;
    }
    let outputs = case.assert_as_replay(test, true, &|| timeline("a", &lines));
    println!("{test}: {read} changelog records read after the snapshot's positions; {outputs} outputs");
    stop(a);
    case.done(&[&dir]);
}

fn admin(kafka: &Kafka) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", &kafka.brokers).create().unwrap()
}

/// Deletes the changelog topic and creates it again (compacted) with `records` in each
/// partition, produced without a transaction: the same states, at lower offsets (no
/// transaction markers between them).
fn recreate_changelog(kafka: &Kafka, topic: &str, records: &HashMap<i32, Vec<Record>>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let admin = admin(kafka);
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in rt.block_on(admin.delete_topics(&[topic], &options)).unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("delete {t}: {e}"));
    }
    // Deleting takes a moment: the name is free once the creation is accepted.
    let new = || NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    wait_for("the changelog topic created again", 60, || {
        rt.block_on(admin.create_topics(&[new()], &options)).unwrap().into_iter().all(|r| r.is_ok())
    });
    let p: ThreadedProducer<Delivery> = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        .set("enable.idempotence", "true")
        .create_with_context(Delivery::default())
        .unwrap();
    for (&partition, rs) in records {
        for (key, value) in rs {
            let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(partition).key(key.as_slice());
            if let Some(v) = value {
                r = r.payload(v.as_slice());
            }
            while let Err((e, back)) = p.send(r) {
                assert!(matches!(e, KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)), "{e}");
                r = back;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    p.flush(Duration::from_secs(60)).unwrap();
}

/// The changelog topic is deleted and created again, its records copied over without the
/// transaction markers between them: each partition's end falls below the snapshot's
/// position. The restarted process refuses the snapshot for those partitions (counted),
/// restores them from the changelog's start, and classifies as `replay`.
#[test]
fn a_snapshot_past_the_end_of_a_changelog_created_again_is_refused_and_the_classes_stay_replays() {
    let test = "a_snapshot_past_the_end_of_a_changelog_created_again_is_refused_and_the_classes_stay_replays";
    if !enabled(test) {
        return;
    }
    let case = Case::new(test, true);
    let (kafka, t) = (&case.kafka, &case.t);
    let parts = case.parts(2);
    let dir = temp_dir("snapshot-recreated");
    produce(kafka, &t.input, parts[0]);
    run_until_committed(&case, &with_snapshot(&case, &dir, "a", "60s"), "the first part committed");
    let snapshot = mark(&dir);

    let copied: HashMap<i32, Vec<Record>> = (0..PARTITIONS).map(|p| (p, records(kafka, &t.changelog, p, 0))).collect();
    recreate_changelog(kafka, &t.changelog, &copied);
    let past: Vec<i32> =
        snapshot.positions.iter().filter(|(p, position)| *position > copied[p].len() as i64).map(|(p, _)| *p).collect();
    assert!(
        !past.is_empty(),
        "positions past the new ends: {snapshot:?}, records {:?}",
        copied.iter().map(|(p, r)| (p, r.len())).collect::<Vec<_>>()
    );

    produce(kafka, &t.input, parts[1]);
    let (a, lines) = start_until_committed(
        &case,
        &with_snapshot(&case, &dir, "a", "60s"),
        "the second part committed after the restart",
    );
    let results = snapshot_results(&a);
    assert_eq!(results["past_end"], past.len() as f64, "{results:?}");
    assert_eq!(results["loaded"], (PARTITIONS as usize - past.len()) as f64, "{results:?}");
    let restarted = restores(&lines);
    for p in &past {
        let (records, loaded, from) = restarted[p];
        assert_eq!(
            (records as usize, loaded, from),
            (copied[p].len(), 0, 0),
            "partition {p}: the whole changelog, nothing of the snapshot"
        );
    }
    let said = lines
        .iter()
        .filter(|v| {
            v["fields"]["message"].as_str().is_some_and(|m| m.contains("partition not loaded"))
                && v["fields"]["reason"] == "past_end"
        })
        .count();
    assert_eq!(said, past.len(), "one warning per refused partition");
    let outputs = case.assert_as_replay(test, true, &|| timeline("a", &lines));
    println!(
        "{test}: {} of {PARTITIONS} partitions refused (past the end), restored from the start; {outputs} outputs",
        past.len()
    );
    stop(a);
    case.done(&[&dir]);
}
