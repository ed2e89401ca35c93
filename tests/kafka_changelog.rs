//! The classify tier on a real broker (docs/scale-out.md): three `serve` processes in one
//! consumer group over a keyed audit topic, each partition's state in a compacted changelog
//! topic. The recorded control-plane streams are keyed as the ingest tier keys them
//! (`route`: the judged copy by the controller-owner UID, a state-only copy by the object's own
//! UID; in the three-process test by two ingest processes, else produced so), and every class
//! written must be `replay`'s on the same stream, through a SIGKILL of one process, the
//! rebalances that follow, and a restart of every process from the changelog alone.
//! Skipped (with `SKIPPED: ...`) only when `KAUSALITY_KAFKA_TESTS=0`.
#![cfg(feature = "kafka")]

mod kafka_support;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kafka_support::*;
use serde_json::Value;

/// The recorded streams of one cluster each (the `dual-*` ones hold two clusters' events in
/// one file and are left out): fixture name → lines.
fn fixtures() -> Vec<(String, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/controlplane");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".jsonl").map(String::from))
        .filter(|n| !n.starts_with("dual-"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            (
                n.clone(),
                std::fs::read_to_string(dir.join(format!("{n}.jsonl"))).unwrap().lines().map(String::from).collect(),
            )
        })
        .collect()
}

/// (cluster, auditID) → class of `replay` of each fixture, as its own cluster.
fn replayed(dir: &Path, fixtures: &[(String, Vec<String>)]) -> HashMap<(String, String), String> {
    let mut all = HashMap::new();
    for (name, lines) in fixtures {
        let file = dir.join(format!("{name}.jsonl"));
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let o = Command::new(BIN)
            .args(["replay", "--cluster", name, "--reorder-window", "2s", "--quiet", "--no-progress"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "replay of {name}: {}", String::from_utf8_lossy(&o.stderr));
        for l in String::from_utf8(o.stdout).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            all.insert((name.clone(), output_key(&v)), v["class"].as_str().unwrap().to_string());
        }
    }
    all
}

/// An output's auditID and object UID (a deletecollection writes one output per item, under
/// the list's auditID).
fn output_key(v: &Value) -> String {
    format!("{}/{}", v["auditID"].as_str().unwrap(), v["object"]["uid"].as_str().unwrap_or(""))
}

/// The keys of one event, as the ingest tier routes it ([`kausality_stream::route`]): the
/// judged copy's, then each state-only copy's (`true`). An event that goes nowhere (not a
/// completed write) has none.
fn routed(line: &str) -> Vec<(String, bool)> {
    let ev: kausality_stream::decode::AuditEvent = serde_json::from_str(line).unwrap();
    match kausality_stream::route::route(&ev) {
        Ok(r) => std::iter::once((r.judged.text().into_owned(), false))
            .chain(r.state.iter().map(|k| (k.text().into_owned(), true)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The messages of `lines` (fixture name, line), keyed, with their cluster and the
/// state-only header.
fn messages<'a>(lines: impl IntoIterator<Item = (&'a String, &'a String)>) -> Vec<Message> {
    let mut out = Vec::new();
    for (name, l) in lines {
        for (key, state_only) in routed(l) {
            out.push(Message { key, value: l.clone(), cluster: name.clone(), state_only });
        }
    }
    out
}

/// Every fixture's lines, one fixture after the other.
fn in_turn(fixtures: &[(String, Vec<String>)]) -> Vec<(&String, &String)> {
    fixtures.iter().flat_map(|(name, lines)| lines.iter().map(move |l| (name, l))).collect()
}

/// Every fixture's lines, each fixture in its order, the fixtures interleaved so that each is
/// spread over the whole stream (its i-th of n lines at i/n of it): any part of the stream
/// holds a share of every cluster, so every cluster's state matters after a partition moves.
/// The clusters' states are apart, so `replay` of each fixture still gives its classes.
fn spread(fixtures: &[(String, Vec<String>)]) -> Vec<(&String, &String)> {
    let mut ranked: Vec<(f64, usize, usize)> = fixtures
        .iter()
        .enumerate()
        .flat_map(|(f, (_, lines))| (0..lines.len()).map(move |i| ((i as f64 + 0.5) / lines.len() as f64, f, i)))
        .collect();
    ranked.sort_by(|a, b| a.partial_cmp(b).unwrap());
    ranked.into_iter().map(|(_, f, i)| (&fixtures[f].0, &fixtures[f].1[i])).collect()
}

/// The writes the routing rule cannot judge where `replay` does, (cluster, auditID or
/// object UID): a deletecollection (judged on its first item's partition, its other items'
/// parents are elsewhere) and every later write of its items (marked being deleted where their
/// state is not), an eviction (its answer names no pod: keyed by the pod's name, on no
/// partition of its state) and every later write of the evicted pod, a delete answered with a
/// `Status` (it names no owner: keyed by the object's own UID), and a `scale` write and
/// every later write of the scaled object (a `Scale` names no owner: keyed by the object's own
/// UID, the partition of its controller never sees the new replicas).
/// docs/scale-out.md says what each costs.
fn routing_limits(fixtures: &[(String, Vec<String>)]) -> HashSet<(String, String)> {
    let mut out = HashSet::new();
    for (name, lines) in fixtures {
        let mut uids: HashMap<(String, String), String> = HashMap::new();
        for l in lines {
            let v: Value = serde_json::from_str(l).unwrap();
            let (ns, n) = (
                v["objectRef"]["namespace"].as_str().unwrap_or("").to_string(),
                v["objectRef"]["name"].as_str().unwrap_or("").to_string(),
            );
            if let Some(uid) = v["responseObject"]["metadata"]["uid"].as_str() {
                uids.insert((ns.clone(), n.clone()), uid.to_string());
            }
            let eviction = v["objectRef"]["subresource"] == "eviction";
            let scale = v["objectRef"]["subresource"] == "scale";
            let status = v["verb"] == "delete" && v["responseObject"]["kind"] == "Status";
            if eviction || scale || status || v["verb"] == "deletecollection" {
                out.insert((name.clone(), v["auditID"].as_str().unwrap().to_string()));
            }
            for item in v["responseObject"]["items"].as_array().into_iter().flatten() {
                if let Some(uid) = item["metadata"]["uid"].as_str() {
                    out.insert((name.clone(), uid.to_string()));
                }
            }
            if eviction || scale {
                if let Some(uid) = uids.get(&(ns, n)) {
                    out.insert((name.clone(), uid.clone()));
                }
            }
        }
    }
    out
}

struct Message {
    key: String,
    value: String,
    cluster: String,
    state_only: bool,
}

const PARTITIONS: i32 = 6;

fn produce(kafka: &Kafka, topic: &str, msgs: &[Message]) {
    kafka.produce_with_headers(
        topic,
        &msgs
            .iter()
            .map(|m| {
                let mut headers = vec![("cluster".to_string(), m.cluster.clone())];
                if m.state_only {
                    headers.push((
                        kausality_stream::route::COPY_HEADER.to_string(),
                        kausality_stream::route::COPY_STATE.to_string(),
                    ));
                }
                (Some(m.key.clone()), m.value.clone().into_bytes(), headers)
            })
            .collect::<Vec<_>>(),
    );
}

/// How the classify processes run.
#[derive(Clone, Copy, Debug)]
struct Mode {
    /// Else at-least-once: the changelog written every `transaction_interval`, after the
    /// outputs.
    exactly_once: bool,
    /// The cooperative assignor: a rebalance moves only the partitions that change owner
    /// (revoked and restored one by one); else librdkafka's default (eager: every rebalance
    /// revokes and restores every partition).
    cooperative: bool,
}

const EXACTLY_ONCE: Mode = Mode { exactly_once: true, cooperative: false };

/// The classify tier's pipeline of one process.
fn classify_pipeline(dir: &Path, kafka: &Kafka, topics: &Topics, member: &str, mode: Mode) -> PathBuf {
    let path = dir.join(format!("classify-{member}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"cluster = "test"
[options]
reorder_window = "2s"
[[sources]]
type = "kafka"
brokers = "{brokers}"
topics = ["{input}"]
group_id = "{group}"
lag_interval = "1s"
exactly_once = {exactly_once}
transactional_id = "{group}-{member}"
transaction_interval = "300ms"
revoke_timeout = "20s"
[sources.changelog]
topic = "{changelog}"
[sources.properties]
"session.timeout.ms" = 6000
"heartbeat.interval.ms" = 1000
{assignor}
[[sinks]]
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
[sinks.properties]
"transaction.timeout.ms" = 10000
[metrics]
listen = "127.0.0.1:0"
"#,
            brokers = kafka.brokers,
            input = topics.input,
            group = topics.group,
            changelog = topics.changelog,
            output = topics.output,
            exactly_once = mode.exactly_once,
            assignor = if mode.cooperative { r#""partition.assignment.strategy" = "cooperative-sticky""# } else { "" },
        ),
    )
    .unwrap();
    path
}

struct Topics {
    input: String,
    output: String,
    changelog: String,
    group: String,
}

/// The classes written for each (cluster, auditID/uid), in order.
fn written(out: &[Out]) -> HashMap<(String, String), Vec<String>> {
    let mut seen: HashMap<(String, String), Vec<String>> = HashMap::new();
    for o in out {
        let cluster = o.value["cluster"].as_str().unwrap().to_string();
        seen.entry((cluster, output_key(&o.value))).or_default().push(o.value["class"].as_str().unwrap().to_string());
    }
    seen
}

fn all_committed(kafka: &Kafka, t: &Topics) -> bool {
    let ends = kafka.end_offsets(&t.input, PARTITIONS);
    kafka.committed(&t.group, &t.input, PARTITIONS).iter().zip(&ends).all(|(c, e)| *c == Some(*e))
}

/// What a test needs: its broker, its topics, the stream keyed as the ingest tier keys it,
/// and `replay`'s class of every output but those the routing cannot judge as `replay` does.
struct Case {
    kafka: Kafka,
    dir: PathBuf,
    t: Topics,
    /// The stream's events, (cluster, line), in order.
    lines: Vec<(String, String)>,
    /// The same keyed as the ingest tier keys them, for the tests that produce them directly.
    msgs: Vec<Message>,
    limits: HashSet<(String, String)>,
    expected: HashMap<(String, String), String>,
}

impl Case {
    /// `spread`: the fixtures interleaved ([`spread`]), else one after the other.
    fn new(name: &str, spread: bool) -> Case {
        let kafka = Kafka::get();
        let dir = temp_dir(name);
        let t = Topics {
            input: kafka.unique("audit"),
            output: kafka.unique("enriched"),
            changelog: kafka.unique("state"),
            group: kafka.unique("classify"),
        };
        kafka.create_topic(&t.input, PARTITIONS);
        kafka.create_topic(&t.output, PARTITIONS);
        let fixtures = fixtures();
        let limits = routing_limits(&fixtures);
        let order = if spread { self::spread(&fixtures) } else { in_turn(&fixtures) };
        let lines = order.iter().map(|(c, l)| ((*c).clone(), (*l).clone())).collect();
        let mut case = Case { kafka, dir, t, lines, msgs: messages(order), limits, expected: HashMap::new() };
        case.expected = replayed(&case.dir, &fixtures).into_iter().filter(|(k, _)| !case.limited(k)).collect();
        case
    }

    /// An output the routing rule cannot judge where `replay` does ([`routing_limits`]).
    fn limited(&self, k: &(String, String)) -> bool {
        let (id, uid) = k.1.split_once('/').unwrap_or((&k.1, ""));
        self.limits.contains(&(k.0.clone(), id.to_string())) || self.limits.contains(&(k.0.clone(), uid.to_string()))
    }

    /// The stream in `n` parts of (about) equal size, in order.
    fn parts(&self, n: usize) -> Vec<&[Message]> {
        let size = self.msgs.len().div_ceil(n);
        self.msgs.chunks(size).collect()
    }

    fn pipeline(&self, dir: &Path, member: &str, mode: Mode) -> PathBuf {
        classify_pipeline(dir, &self.kafka, &self.t, member, mode)
    }

    /// Reads the output topic and asserts it against `replay`: none missing, every class
    /// `replay`'s; with `exactly_once` none written twice, else every repeat's class too. A
    /// failure shows the outputs that differ, whole, and what `explain` tells of the processes.
    /// Returns how many outputs were read.
    fn assert_as_replay(&self, test: &str, exactly_once: bool, explain: &dyn Fn() -> String) -> usize {
        let out = self.kafka.read_until(&self.t.output, Duration::from_secs(5), |_| false);
        let all = written(&out);
        // Exactly-once holds for every output, those the routing limits too.
        let twice: Vec<_> = all.iter().filter(|(_, c)| c.len() > 1).map(|(k, _)| k).collect();
        if exactly_once {
            assert!(twice.is_empty(), "exactly-once: outputs written twice, e.g. {:?}", &twice[..twice.len().min(5)]);
        }
        let seen: HashMap<_, _> =
            all.iter().filter(|(k, _)| !self.limited(k)).map(|(k, c)| (k.clone(), c.clone())).collect();
        let missing_all: Vec<_> = self.expected.iter().filter(|(k, _)| !seen.contains_key(*k)).collect();
        let mut by_class: HashMap<&str, usize> = HashMap::new();
        missing_all.iter().for_each(|(_, c)| *by_class.entry(c.as_str()).or_default() += 1);
        // Every write of an output is compared (at-least-once, a repeat is judged again).
        let wrong_all: Vec<_> = seen
            .iter()
            .flat_map(|(k, cs)| cs.iter().map(move |c| (k, c)))
            .filter(|(k, c)| self.expected.get(*k) != Some(*c))
            .map(|(k, c)| (k.clone(), c.clone(), self.expected.get(k).cloned()))
            .collect();
        let mut wrong_by: HashMap<(String, String), usize> = HashMap::new();
        for (_, c, e) in &wrong_all {
            *wrong_by.entry((e.clone().unwrap_or_else(|| "(none)".into()), c.clone())).or_default() += 1;
        }
        println!(
            "{test}: missing {} by replay's class {by_class:?}; differing (replay's, written): {wrong_by:?}",
            missing_all.len()
        );
        println!(
            "{test}: {} outputs, {} compared with replay's, {} written more than once",
            out.len(),
            self.expected.len(),
            twice.len()
        );
        let missing: Vec<_> = missing_all.iter().map(|(k, _)| k).take(5).collect();
        assert!(missing.is_empty(), "classified by replay, missing downstream, e.g. {missing:?}\n{}", explain());
        if !wrong_all.is_empty() {
            let shown: HashSet<(String, String)> = wrong_all.iter().take(5).map(|(k, _, _)| k.clone()).collect();
            let whole: String = out
                .iter()
                .filter(|o| {
                    shown.contains(&(o.value["cluster"].as_str().unwrap_or("").to_string(), output_key(&o.value)))
                })
                .map(|o| format!("  at {:?} ms: {}\n", o.timestamp_ms, o.value))
                .collect();
            panic!(
                "classes that differ from replay's (key, class, replay's): {:?}\nthose outputs:\n{whole}{}",
                &wrong_all[..wrong_all.len().min(10)],
                explain()
            );
        }
        out.len()
    }

    fn done(self, dirs: &[&Path]) {
        self.kafka.delete_topics(&[&self.t.input, &self.t.output, &self.t.changelog]);
        std::fs::remove_dir_all(&self.dir).unwrap();
        for d in dirs {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}

/// The stream through two ingest processes (webhook → `kafka_route`, the batches in turn) to
/// three classify processes; one killed mid-stream (its partitions move to the others with
/// their state); then every process stopped and two new ones started, with nothing but the
/// changelog: every class equals `replay`'s, none is missing, none is written twice.
#[test]
fn three_processes_classify_as_replay_through_a_kill_and_a_restart_from_the_changelog() {
    if !enabled("three_processes_classify_as_replay_through_a_kill_and_a_restart_from_the_changelog") {
        return;
    }
    let case = Case::new("changelog", false);
    let (kafka, t) = (&case.kafka, &case.t);
    let ingest = Ingest::start(&case.dir, 2, &kafka.brokers, &t.input);
    let lines: Vec<(&String, &String)> = case.lines.iter().map(|(c, l)| (c, l)).collect();
    let (first, rest) = lines.split_at(lines.len() / 2);
    let (second, third) = rest.split_at(rest.len() / 2);
    ingest.post(first);

    let mut members: Vec<Serve> =
        ["a", "b", "c"].iter().map(|m| Serve::start(&case.pipeline(&case.dir, m, EXACTLY_ONCE))).collect();
    let delivered = |s: &Serve| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.metric("kausality_sink_events_total", &["sink=\"kafka\""])
        }))
        .unwrap_or(0.0)
    };
    wait_or_explain(
        "outputs of the first part",
        120,
        || members.iter().map(delivered).sum::<f64>() > 100.0,
        || members.iter().map(Serve::explain).collect(),
    );
    // SIGKILL: its open transaction (outputs, changelog records, offsets) is aborted; the
    // others take its partitions and restore their state from the changelog.
    members.remove(0).kill();
    ingest.post(second);
    wait_or_explain(
        "every message of two parts committed after the kill",
        180,
        || all_committed(kafka, t),
        || members.iter().map(Serve::explain).collect(),
    );
    for s in members.drain(..) {
        let (code, _) = s.terminate();
        assert_eq!(code, 0, "a clean stop");
    }
    // Everything again from the changelog alone: two fresh processes, no snapshot files.
    let fresh = temp_dir("changelog-fresh");
    ingest.post(third);
    let members: Vec<Serve> =
        ["d", "e"].iter().map(|m| Serve::start(&case.pipeline(&fresh, m, EXACTLY_ONCE))).collect();
    wait_or_explain(
        "every message committed after the restart",
        180,
        || all_committed(kafka, t),
        || members.iter().map(Serve::explain).collect(),
    );
    let restored: usize = members
        .iter()
        .flat_map(|s| s.logs())
        .filter(|v| v["fields"]["message"] == RESTORED)
        .map(|v| v["fields"]["records"].as_u64().unwrap_or(0) as usize)
        .sum();
    assert!(restored > 0, "the fresh processes restored state from the changelog");

    case.assert_as_replay("changelog", true, &|| members.iter().map(Serve::explain).collect());
    println!("changelog: {restored} records restored by the fresh processes");
    for s in members {
        let (code, _) = s.terminate();
        assert_eq!(code, 0);
    }
    drop(ingest);
    case.done(&[&fresh]);
}

const RESTORED: &str = "kafka source: partition state restored from the changelog";

/// The processor's line when a transaction was aborted and it went back to the last commit.
const REWOUND: &str = "kafka transaction aborted; state and positions back at the last commit, reading on from there";

/// One process of the group, and every log line it wrote so far (a [`Serve`] hands each line
/// out once).
struct Member {
    name: &'static str,
    serve: Serve,
    seen: RefCell<Vec<Value>>,
}

impl Member {
    fn start(case: &Case, name: &'static str, mode: Mode) -> Member {
        Member { name, serve: Serve::start(&case.pipeline(&case.dir, name, mode)), seen: RefCell::new(Vec::new()) }
    }

    /// Every line so far.
    fn lines(&self) -> std::cell::Ref<'_, Vec<Value>> {
        self.seen.borrow_mut().extend(self.serve.logs());
        self.seen.borrow()
    }

    /// The partitions it holds, as its log says: each assignment adds, each revoke takes away.
    fn holds(&self) -> BTreeSet<i32> {
        let mut held = BTreeSet::new();
        for v in self.lines().iter() {
            match v["fields"]["message"].as_str() {
                Some("kafka source: partitions assigned") => held.extend(numbers(&v["fields"]["partitions"])),
                Some("kafka source: partitions revoked") => {
                    numbers(&v["fields"]["partitions"]).iter().for_each(|p| _ = held.remove(p))
                }
                _ => {}
            }
        }
        held
    }

    /// (partition, records) of each restore from the changelog, from its `from`-th line on.
    fn restores(&self, from: usize) -> Vec<(i32, u64)> {
        let lines = self.lines();
        lines[from.min(lines.len())..]
            .iter()
            .filter(|v| v["fields"]["message"] == RESTORED)
            .map(|v| (v["fields"]["partition"].as_i64().unwrap() as i32, v["fields"]["records"].as_u64().unwrap()))
            .collect()
    }

    /// How many times it went back to the last commit after an aborted transaction.
    fn rewinds(&self) -> usize {
        self.rewound().len()
    }

    /// Why it went back, each time.
    fn rewound(&self) -> Vec<String> {
        self.lines()
            .iter()
            .filter(|v| v["fields"]["message"] == REWOUND)
            .map(|v| v["fields"]["reason"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// SIGTERM; asserts a clean exit. Returns every line it wrote.
    fn stop(self) -> Vec<Value> {
        let Member { name, serve, seen } = self;
        let (code, last) = serve.terminate();
        let mut seen = seen.into_inner();
        seen.extend(last);
        assert_eq!(code, 0, "{name}: a clean stop");
        seen
    }

    /// What a failed wait prints of this process (its lines are taken by [`Member::lines`],
    /// so [`Serve::explain`] would not see them): its last warnings and errors, its Kafka
    /// source's last lines, and its counters.
    fn explain(&self) -> String {
        let mut out = format!("--- process {} (holds {:?})\n", self.name, self.holds());
        let lines = self.lines();
        let show = |out: &mut String, title: &str, keep: &dyn Fn(&Value) -> bool, n: usize| {
            out.push_str(title);
            let kept: Vec<_> = lines.iter().filter(|v| keep(v)).collect();
            for v in &kept[kept.len().saturating_sub(n)..] {
                out.push_str(&format!(
                    "  {} {} {}\n",
                    v["timestamp"].as_str().unwrap_or(""),
                    v["level"].as_str().unwrap_or(""),
                    v["fields"]
                ));
            }
        };
        show(
            &mut out,
            "its warnings and errors (the last 30):\n",
            &|v| matches!(v["level"].as_str(), Some("WARN" | "ERROR")),
            30,
        );
        show(
            &mut out,
            "its Kafka source's lines (the last 30):\n",
            &|v| v["fields"]["message"].as_str().is_some_and(|m| m.starts_with("kafka source")),
            30,
        );
        drop(lines);
        out + &self.serve.explain()
    }
}

/// A process's moves, each with its time: its Kafka source's lines (assignments, revokes,
/// restores), its transactions aborted and rewound, its warnings and errors. What a failed
/// comparison with `replay` prints of each process.
fn timeline(name: &str, lines: &[Value]) -> String {
    let mut out = format!("--- process {name}: its moves\n");
    for v in lines {
        let f = &v["fields"];
        let m = f["message"].as_str().unwrap_or("");
        if m.starts_with("kafka source") || m == REWOUND || matches!(v["level"].as_str(), Some("WARN" | "ERROR")) {
            out.push_str(&format!(
                "  {} {} {f}\n",
                v["timestamp"].as_str().unwrap_or(""),
                v["level"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

/// The partition numbers of a `topic[0],topic[3]` list.
fn numbers(list: &Value) -> Vec<i32> {
    list.as_str()
        .unwrap_or("")
        .split(',')
        .filter_map(|p| p.rsplit_once('[')?.1.strip_suffix(']')?.parse().ok())
        .collect()
}

/// Every partition held by exactly one of `members`: the group is stable.
fn stable(members: &[&Member]) -> bool {
    let held: Vec<i32> = members.iter().flat_map(|m| m.holds()).collect();
    held.len() == PARTITIONS as usize && held.iter().collect::<BTreeSet<_>>().len() == PARTITIONS as usize
}

/// Two processes; mid-stream a third joins (partitions move to it, their state restored from
/// the changelog); later one of the first two stops cleanly (it commits and leaves, its
/// partitions move to the others with their state); the rest of the stream follows. Each
/// part is produced while the group rebalances, so a move meets messages in flight.
fn a_process_joins_and_one_leaves(test: &str, mode: Mode) {
    if !enabled(test) {
        return;
    }
    let case = Case::new(test, true);
    let started = std::time::Instant::now();
    let (kafka, t) = (&case.kafka, &case.t);
    let parts = case.parts(4);
    produce(kafka, &t.input, parts[0]);
    let a = Member::start(&case, "a", mode);
    let b = Member::start(&case, "b", mode);
    let explain = |ms: &[&Member]| ms.iter().map(|m| m.explain()).collect::<String>();
    wait_or_explain(
        "the first part committed by two processes",
        240,
        || all_committed(kafka, t),
        || explain(&[&a, &b]),
    );

    // A third joins while the second part arrives.
    let c = Member::start(&case, "c", mode);
    produce(kafka, &t.input, parts[1]);
    wait_or_explain(
        "the third process holding partitions, and the second part committed",
        240,
        || stable(&[&a, &b, &c]) && !c.holds().is_empty() && all_committed(kafka, t),
        || explain(&[&a, &b, &c]),
    );
    let joined = c.restores(0);
    assert!(
        joined.iter().map(|(_, r)| r).sum::<u64>() > 0,
        "the joining process restored its partitions' state from the changelog: {joined:?}\n{}",
        c.explain()
    );

    // One of the first two stops cleanly while the third part arrives.
    let (leaving, staying) = if a.holds().is_empty() { (b, a) } else { (a, b) };
    let left = leaving.holds();
    assert!(!left.is_empty(), "the stopping process holds partitions\n{}", leaving.explain());
    let marks = [staying.lines().len(), c.lines().len()];
    produce(kafka, &t.input, parts[2]);
    let name = leaving.name;
    // A clean stop (exit code 0): its last transaction committed. (With the cooperative
    // assignor, librdkafka may close without a last revoke.)
    let left_lines = leaving.stop();
    produce(kafka, &t.input, parts[3]);
    wait_or_explain(
        "the stopped process's partitions taken over, and every message committed",
        240,
        || stable(&[&staying, &c]) && all_committed(kafka, t),
        || explain(&[&staying, &c]),
    );
    // Its partitions restored by the others, with their state.
    let taken: Vec<(i32, u64)> =
        staying.restores(marks[0]).into_iter().chain(c.restores(marks[1])).filter(|(p, _)| left.contains(p)).collect();
    let moved: BTreeSet<i32> = taken.iter().map(|(p, _)| *p).collect();
    assert_eq!(moved, left, "every partition of {name} restored by another process: {taken:?}");
    assert!(taken.iter().map(|(_, r)| r).sum::<u64>() > 0, "{name}'s partitions came with state: {taken:?}");
    if mode.cooperative {
        // Only the stopped process's partitions moved: the others kept theirs, with their state.
        for (m, from) in [(&staying, marks[0]), (&c, marks[1])] {
            let revoked: Vec<_> = m.lines()[from..]
                .iter()
                .filter(|v| v["fields"]["message"] == "kafka source: partitions revoked")
                .cloned()
                .collect();
            assert!(revoked.is_empty(), "cooperative: {} gave partitions up when {name} left: {revoked:?}", m.name);
        }
    }

    // How many of the outputs compared are of writes that came after a move.
    let later = |from: usize| {
        let ids: HashSet<(String, String)> = parts[from..]
            .iter()
            .flat_map(|p| p.iter())
            .map(|m| {
                (
                    m.cluster.clone(),
                    serde_json::from_str::<Value>(&m.value).unwrap()["auditID"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        case.expected
            .keys()
            .filter(|(c, k)| ids.contains(&(c.clone(), k.split_once('/').map_or(k.as_str(), |(id, _)| id).to_string())))
            .count()
    };
    let (after_join, after_stop) = (later(1), later(2));
    let rewinds: Vec<String> = staying.rewound().into_iter().chain(c.rewound()).collect();
    // What the rebalances cost the processes that stayed: every restore of theirs, the test
    // through.
    let restored: Vec<(i32, u64)> = staying.restores(0).into_iter().chain(c.restores(0)).collect();
    let outputs = case.assert_as_replay(test, mode.exactly_once, &|| {
        timeline(name, &left_lines) + &[&staying, &c].iter().map(|m| timeline(m.name, &m.lines())).collect::<String>()
    });
    println!(
        "{test}: {} records restored by the joining process, {} with {name}'s partitions {left:?}; {outputs} outputs, of the compared {after_join} written after the join, {after_stop} after the stop; {} transactions aborted and rewound by the processes that stayed {rewinds:?}; those restored {} partitions, {} records, the test through; {:.0} s",
        joined.iter().map(|(_, r)| r).sum::<u64>(),
        taken.iter().map(|(_, r)| r).sum::<u64>(),
        rewinds.len(),
        restored.len(),
        restored.iter().map(|(_, r)| r).sum::<u64>(),
        started.elapsed().as_secs_f64()
    );
    for m in [staying, c] {
        m.stop();
    }
    case.done(&[]);
}

/// Two processes, exactly-once with the cooperative assignor. One is paused (SIGSTOP) while
/// a part of the stream arrives, until the group has moved on without it (its session
/// expired: the other holds every partition, their state restored from the changelog, read
/// from the last commit). Resumed (SIGCONT), it holds messages of a transaction the group has
/// left behind: its commit is refused or its partitions are lost, so it must abort, go back
/// to the last commit (state from the changelog, positions to the committed offsets) and go
/// on, not stop. The pause is shorter than `transaction.timeout.ms` (10 s), so the transaction
/// is still open when it resumes. No output written twice, none missing, every class
/// `replay`'s; the paused process went back at least once and stops cleanly.
#[test]
fn a_process_paused_past_its_session_goes_back_to_the_last_commit_exactly_once_classes_as_replay() {
    let test = "a_process_paused_past_its_session_goes_back_to_the_last_commit_exactly_once_classes_as_replay";
    if !enabled(test) {
        return;
    }
    let mode = Mode { exactly_once: true, cooperative: true };
    let case = Case::new(test, true);
    let (kafka, t) = (&case.kafka, &case.t);
    let parts = case.parts(3);
    produce(kafka, &t.input, parts[0]);
    let a = Member::start(&case, "a", mode);
    let b = Member::start(&case, "b", mode);
    let explain = |ms: &[&Member]| ms.iter().map(|m| m.explain()).collect::<String>();
    wait_or_explain(
        "both processes holding partitions, and the first part committed",
        240,
        || stable(&[&a, &b]) && !a.holds().is_empty() && !b.holds().is_empty() && all_committed(kafka, t),
        || explain(&[&a, &b]),
    );
    let (paused, other) = (a, b);
    let mark = other.lines().len();
    paused.serve.signal("STOP");
    produce(kafka, &t.input, parts[1]);
    // The group moves on once the session (6 s) expires: the other takes every partition.
    let moved_on = std::time::Instant::now();
    while other.holds().len() < PARTITIONS as usize && moved_on.elapsed() < Duration::from_secs(9) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let taken_over = other.holds().len() == PARTITIONS as usize;
    paused.serve.signal("CONT");
    assert!(taken_over, "the group moved on without the paused process within 9 s\n{}", explain(&[&paused, &other]));
    assert!(!other.restores(mark).is_empty(), "the other process restored the paused one's partitions");
    produce(kafka, &t.input, parts[2]);
    wait_or_explain(
        "the paused process back at the last commit, both holding partitions again, and every message committed",
        240,
        || paused.rewinds() > 0 && stable(&[&paused, &other]) && !paused.holds().is_empty() && all_committed(kafka, t),
        || explain(&[&paused, &other]),
    );
    let counted = paused.serve.metric("kausality_kafka_transaction_rewinds_total", &[]);
    assert_eq!(counted as usize, paused.rewinds(), "each rewind counted in the metric and logged");
    let outputs =
        case.assert_as_replay(test, true, &|| [&paused, &other].iter().map(|m| timeline(m.name, &m.lines())).collect());
    println!(
        "{test}: {outputs} outputs; the paused process went back {:?}, the other {:?}",
        paused.rewound(),
        other.rewound()
    );
    for m in [paused, other] {
        m.stop();
    }
    case.done(&[]);
}

/// [`a_process_joins_and_one_leaves`], exactly-once: nothing written twice.
#[test]
fn a_process_joins_and_one_leaves_exactly_once_classes_as_replay() {
    a_process_joins_and_one_leaves("a_process_joins_and_one_leaves_exactly_once_classes_as_replay", EXACTLY_ONCE);
}

/// [`a_process_joins_and_one_leaves`], exactly-once with the cooperative assignor: the
/// processes keep the partitions that stay theirs, with their state, through each move. A
/// member keeps reading and committing while the group rebalances, so a transaction may carry
/// the group generation the rebalance just replaced and be refused (`ILLEGAL_GENERATION`):
/// the member aborts it and goes back to the last commit (docs/scale-out.md, "Restore"),
/// and nothing is lost or written twice.
#[test]
fn a_process_joins_and_one_leaves_cooperative_exactly_once_classes_as_replay() {
    a_process_joins_and_one_leaves(
        "a_process_joins_and_one_leaves_cooperative_exactly_once_classes_as_replay",
        Mode { exactly_once: true, cooperative: true },
    );
}

/// [`a_process_joins_and_one_leaves`], at-least-once: nothing lost, and an output written
/// again is classified as `replay` classifies it.
#[test]
fn a_process_joins_and_one_leaves_at_least_once_classes_as_replay() {
    a_process_joins_and_one_leaves(
        "a_process_joins_and_one_leaves_at_least_once_classes_as_replay",
        Mode { exactly_once: false, cooperative: false },
    );
}

#[path = "kafka_changelog/snapshot.rs"]
mod snapshot;
