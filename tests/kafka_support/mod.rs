//! Shared by the Kafka tests: a real Apache Kafka broker (`scripts/kafka.sh`, KRaft, on its
//! own loopback ports and state directory so it never meets a developer's broker), topics with
//! unique names, producing and reading messages, and the `kausality-stream` binary as an
//! operator runs it (`serve --pipeline`).
//!
//! The broker is started by the first test that needs it and stopped when the test process
//! exits (an `atexit` hook), so every run leaves nothing behind. The tests take turns (one
//! broker, two cores, and one test restarts the broker): [`Kafka::get`] holds a lock for the
//! duration of a test.
//!
//! `KAUSALITY_KAFKA_TESTS=0` skips them (each prints `SKIPPED: ...`); by default they run.
//! `KAUSALITY_TEST_KAFKA_PORT` (default 19192; the controller gets the next port) and
//! `KAUSALITY_TEST_KAFKA_STATE` (default: `kafka` under cargo's target tmp dir) move the
//! broker.
// Each test crate uses the helpers its tests need: the others go unused in it.
#![allow(dead_code)]

#[path = "../common/pipeline.rs"]
mod pipeline_toml;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use pipeline_toml::Pipeline;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientConfig;
use serde_json::Value;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_kausality-stream");

/// True when the Kafka tests should run; prints why not otherwise.
pub(crate) fn enabled(test: &str) -> bool {
    if std::env::var("KAUSALITY_KAFKA_TESTS").is_ok_and(|v| v == "0") {
        // Straight to the terminal: the test harness captures print! and eprint!.
        let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: KAUSALITY_KAFKA_TESTS=0 (these tests start a local Apache Kafka broker; unset it to run them)");
        return false;
    }
    true
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn port() -> u16 {
    std::env::var("KAUSALITY_TEST_KAFKA_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(19192)
}

fn state_dir() -> PathBuf {
    std::env::var_os("KAUSALITY_TEST_KAFKA_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("kafka"))
}

/// Runs `scripts/kafka.sh ARGS` against the test broker; panics with its output on failure.
pub(crate) fn script(args: &[&str]) {
    let o = Command::new("bash")
        .arg(repo().join("scripts/kafka.sh"))
        .args(args)
        .env("KAFKA_PORT", port().to_string())
        .env("KAFKA_CONTROLLER_PORT", (port() + 1).to_string())
        .env("KAFKA_STATE_DIR", state_dir())
        .output()
        .expect("run scripts/kafka.sh");
    assert!(
        o.status.success(),
        "scripts/kafka.sh {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

extern "C" {
    fn atexit(cb: extern "C" fn()) -> i32;
}

extern "C" fn stop_broker() {
    let _ = Command::new("bash")
        .arg(repo().join("scripts/kafka.sh"))
        .arg("stop")
        .env("KAFKA_PORT", port().to_string())
        .env("KAFKA_CONTROLLER_PORT", (port() + 1).to_string())
        .env("KAFKA_STATE_DIR", state_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

static TURN: Mutex<()> = Mutex::new(());
static STARTED: OnceLock<()> = OnceLock::new();
static TOPICS: AtomicU32 = AtomicU32::new(0);

/// The test broker, for the duration of one test.
pub(crate) struct Kafka {
    pub brokers: String,
    _turn: MutexGuard<'static, ()>,
}

impl Kafka {
    pub(crate) fn get() -> Kafka {
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        STARTED.get_or_init(|| {
            script(&["start"]);
            // SAFETY: registering a plain `extern "C" fn` with the C runtime.
            unsafe { atexit(stop_broker) };
        });
        Kafka { brokers: format!("127.0.0.1:{}", port()), _turn: turn }
    }

    /// A topic name no other test (or earlier run) uses.
    pub(crate) fn unique(&self, name: &str) -> String {
        let n = TOPICS.fetch_add(1, Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000;
        format!("{name}-{}-{nanos}-{n}", std::process::id())
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new().set("bootstrap.servers", &self.brokers).create().expect("admin client")
    }

    pub(crate) fn create_topic(&self, name: &str, partitions: i32) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let admin = self.admin();
        let r = rt
            .block_on(
                admin.create_topics(
                    &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
                    &AdminOptions::new(),
                ),
            )
            .expect("create topic");
        for t in r {
            t.unwrap_or_else(|(n, e)| panic!("create topic {n}: {e}"));
        }
    }

    /// Deletes the test's topics (and, with them, what the test left in the broker).
    pub(crate) fn delete_topics(&self, names: &[&str]) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let admin = self.admin();
        let _ = rt.block_on(admin.delete_topics(names, &AdminOptions::new()));
    }

    /// Produces each (key, value, cluster header) and waits until all are delivered.
    pub(crate) fn produce(&self, topic: &str, messages: &[(Option<String>, Vec<u8>, Option<String>)]) {
        // Idempotent: a send retried across a broker restart is written once, so the topic
        // holds exactly these messages (a duplicate would shift every offset the tests wait for).
        let p: ThreadedProducer<Delivery> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("linger.ms", "5")
            .set("message.max.bytes", "10000000")
            .set("enable.idempotence", "true")
            .create_with_context(Delivery::default())
            .expect("producer");
        for (key, value, cluster) in messages {
            let mut r: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic).payload(value.as_slice());
            if let Some(k) = key {
                r = r.key(k.as_str());
            }
            if let Some(c) = cluster {
                r = r.headers(OwnedHeaders::new().insert(Header { key: "cluster", value: Some(c.as_str()) }));
            }
            let mut r = r;
            loop {
                match p.send(r) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        r = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        }
        p.flush(Duration::from_secs(60)).expect("every test message delivered");
        let failed = p.context().failed.lock().unwrap();
        assert!(
            failed.is_empty(),
            "{} test messages not delivered to {topic}, e.g. {:?}",
            failed.len(),
            failed.first()
        );
    }

    /// Produces each (key, value, headers) and waits until all are delivered.
    pub(crate) fn produce_with_headers(&self, topic: &str, messages: &[Keyed]) {
        let p: ThreadedProducer<Delivery> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            // A key's partition as the ingest tier and the classify tier's trace messages pick
            // it (`route::partition_of`: the Java client's murmur2), not librdkafka's default
            // (CRC32): a message keyed by an object's UID lands where its trace messages go.
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            .set("enable.idempotence", "true")
            .create_with_context(Delivery::default())
            .expect("producer");
        for (key, value, headers) in messages {
            let h = headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (k, v)| h.insert(Header { key: k, value: Some(v.as_str()) }));
            let mut r: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic).payload(value.as_slice()).headers(h);
            if let Some(k) = key {
                r = r.key(k.as_str());
            }
            while let Err((_, back)) = p.send(r) {
                r = back;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        p.flush(Duration::from_secs(60)).expect("every test message delivered");
        assert!(p.context().failed.lock().unwrap().is_empty(), "test messages not delivered to {topic}");
    }

    /// Reads `topic` from the start (committed data only) until `done` says so or nothing new
    /// came for `idle`; returns the messages as (value JSON, class header).
    pub(crate) fn read_until(&self, topic: &str, idle: Duration, done: impl Fn(&[Out]) -> bool) -> Vec<Out> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", self.unique("reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("reader");
        c.subscribe(&[topic]).unwrap();
        let mut out = Vec::new();
        let mut last = Instant::now();
        while last.elapsed() < idle && !done(&out) {
            match c.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let header = |k: &str| {
                        m.headers().and_then(|h| {
                            h.iter()
                                .find(|h| h.key == k)
                                .and_then(|h| h.value)
                                .map(|v| String::from_utf8_lossy(v).to_string())
                        })
                    };
                    out.push(Out {
                        value: serde_json::from_slice(m.payload().unwrap_or_default()).expect("output is JSON"),
                        key: m.key().map(|k| String::from_utf8_lossy(k).to_string()),
                        class: header("class"),
                        cluster: header("cluster"),
                        timestamp_ms: m.timestamp().to_millis(),
                    });
                    last = Instant::now();
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {}
            }
        }
        out
    }

    /// The group's committed offset of each partition of `topic` (None: nothing committed, or
    /// the group coordinator cannot answer yet, e.g. just after a broker restart: callers
    /// poll).
    pub(crate) fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", group)
            .create()
            .expect("offsets reader");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = match c.committed_offsets(tpl, Duration::from_secs(10)) {
            Ok(got) => got,
            Err(e) => {
                eprintln!("committed offsets of {group}: {e} (asked again)");
                return vec![None; partitions as usize];
            }
        };
        (0..partitions)
            .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// End offset (high watermark) of each partition.
    pub(crate) fn end_offsets(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let c: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).create().expect("watermarks reader");
        (0..partitions).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1).collect()
    }
}

/// A message with a key and headers: (key, value, (header, value)s).
pub(crate) type Keyed = (Option<String>, Vec<u8>, Vec<(String, String)>);

/// The test producer's delivery reports: every failure is kept, so that a message lost on its
/// way into a topic fails the test where it happened.
#[derive(Default)]
pub(crate) struct Delivery {
    failed: Mutex<Vec<String>>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.lock().unwrap().push(e.to_string());
        }
    }
}

/// One output message.
#[derive(Clone, Debug)]
pub(crate) struct Out {
    pub value: Value,
    pub key: Option<String>,
    pub class: Option<String>,
    pub cluster: Option<String>,
    /// The message's timestamp (ms since the epoch), when it has one.
    pub timestamp_ms: Option<i64>,
}

impl Out {
    pub(crate) fn audit_id(&self) -> &str {
        self.value["auditID"].as_str().expect("auditID")
    }
}

/// auditID → how many times it was written.
pub(crate) fn counts(out: &[Out]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for o in out {
        *m.entry(o.audit_id().to_string()).or_default() += 1;
    }
    m
}

/// A recorded-format audit stream from the corpus generator: one JSON event per line.
pub(crate) fn corpus(events: usize, seed: u64) -> Vec<String> {
    corpus_of(events, seed, 4)
}

pub(crate) fn corpus_of(events: usize, seed: u64, namespaces: usize) -> Vec<String> {
    let opts = kausality_stream::corpus::CorpusOptions {
        seed,
        events,
        namespaces,
        deployments_per_namespace: 6,
        ..Default::default()
    };
    let mut buf = Vec::new();
    kausality_stream::corpus::generate(&opts, &mut buf).unwrap();
    String::from_utf8(buf).unwrap().lines().map(String::from).collect()
}

/// auditID → class that `kausality-stream replay` gives the stream (the binary, on a file).
pub(crate) fn replay_classes(dir: &Path, lines: &[String]) -> HashMap<String, String> {
    let file = dir.join("replay-input.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let o = Command::new(BIN).args(["replay", "--quiet", "--no-progress"]).arg(&file).output().unwrap();
    assert!(o.status.success(), "replay failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["auditID"].as_str().unwrap().to_string(), v["class"].as_str().unwrap().to_string())
        })
        .collect()
}

/// A fresh directory under cargo's target tmp dir, removed by the caller.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "kafka-{name}-{}-{}",
        std::process::id(),
        TOPICS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `kausality-stream serve --pipeline FILE`, the real binary; killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub metrics: SocketAddr,
    log: mpsc::Receiver<Value>,
}

impl Serve {
    pub(crate) fn start(pipeline: &Path) -> Serve {
        Serve::start_logging(pipeline, "info")
    }

    /// [`Serve::start`] with this `RUST_LOG` (e.g. the Kafka clients' debug logs).
    pub(crate) fn start_logging(pipeline: &Path, rust_log: &str) -> Serve {
        let mut child = Command::new(BIN)
            .args(["--log-format", "json", "serve", "--pipeline"])
            .arg(pipeline)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kausality-stream");
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("serve: {line}"),
                }
            }
        });
        // Built first, so that a failed start still kills the child (Drop).
        let mut serve = Serve { child, metrics: "0.0.0.0:0".parse().unwrap(), log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = serve
                .log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("serve logs its metrics address");
            if v["fields"]["message"] == "metrics listening" {
                serve.metrics = v["fields"]["addr"].as_str().unwrap().parse().unwrap();
                return serve;
            }
        }
    }

    /// SIGKILL: no drain, no final commit, no final snapshot.
    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends a signal (`"STOP"`, `"CONT"`, ...) and goes on.
    pub(crate) fn signal(&self, name: &str) {
        assert!(Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }

    /// SIGTERM; the exit code and the log lines since the last look.
    pub(crate) fn terminate(mut self) -> (i32, Vec<Value>) {
        assert!(Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                return (st.code().unwrap_or(-1), self.log.try_iter().collect());
            }
            assert!(Instant::now() < deadline, "serve did not stop within 40 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The service's last warnings and errors and its last lines about Kafka at any level
    /// (a run of the same line once, with its count; with their time), and its Kafka and
    /// pipeline counters: what a failed wait prints.
    pub(crate) fn explain(&self) -> String {
        let logs = self.logs();
        let folded = |keep: &dyn Fn(&Value) -> bool| {
            // (time of the first, line, count)
            let mut lines: Vec<(String, String, usize)> = Vec::new();
            for v in logs.iter().filter(|v| keep(v)) {
                let f = &v["fields"];
                let line = format!(
                    "{} {} {}",
                    v["level"].as_str().unwrap_or(""),
                    f["message"].as_str().unwrap_or(""),
                    f["error"].as_str().unwrap_or("")
                );
                match lines.last_mut() {
                    Some((_, last, n)) if *last == line => *n += 1,
                    _ => lines.push((v["timestamp"].as_str().unwrap_or("").to_string(), line, 1)),
                }
            }
            lines
                .into_iter()
                .map(|(at, l, n)| format!("  {at} {l}{}\n", if n > 1 { format!(" (x{n})") } else { String::new() }))
                .collect::<Vec<_>>()
        };
        let mut out = String::from("service warnings and errors (the last 40):\n");
        let warnings = folded(&|v| matches!(v["level"].as_str(), Some("WARN" | "ERROR")));
        out.extend(warnings[warnings.len().saturating_sub(40)..].iter().cloned());
        out.push_str("service lines about Kafka, any level (the last 80):\n");
        let kafka = folded(&|v| {
            let m = v["fields"]["message"].as_str().unwrap_or("");
            m.starts_with("librdkafka") || m.starts_with("kafka")
        });
        out.extend(kafka[kafka.len().saturating_sub(80)..].iter().cloned());
        out.push_str("service counters:\n");
        let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.metrics()))
            .unwrap_or_else(|_| "(metrics unreachable)".into());
        for l in text.lines().filter(|l| {
            !l.starts_with('#')
                && !l.ends_with(" 0")
                && (l.contains("kafka") || l.starts_with("kausality_events") || l.starts_with("kausality_sink"))
        }) {
            out.push_str(&format!("  {l}\n"));
        }
        out
    }

    /// Log lines so far (each line is returned once).
    pub(crate) fn logs(&self) -> Vec<Value> {
        self.log.try_iter().collect()
    }

    /// `/metrics` as text.
    pub(crate) fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    /// Sum of the samples of `name` whose labels contain every `k="v"` of `labels`.
    pub(crate) fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric(&self.metrics(), name, labels)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        .filter(|l| labels.iter().all(|kv| l.contains(kv)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `f` holds (polling), or panics with `what` after `secs`.
pub(crate) fn wait_for(what: &str, secs: u64, f: impl FnMut() -> bool) {
    wait_or_explain(what, secs, f, String::new);
}

/// [`wait_for`], and on timeout the panic message also holds what `explain` says (the
/// service's warnings, its counters) so that a failure on a machine far away can be read.
pub(crate) fn wait_or_explain(what: &str, secs: u64, mut f: impl FnMut() -> bool, explain: impl FnOnce() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() >= deadline {
            panic!("timed out after {secs} s waiting for {what}\n{}", explain());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `group`'s committed offset of the one partition of `topic` is `end` (the
/// offset after the last message); on timeout the panic shows the offset last seen and what
/// `serve` says (its warnings, its counters).
pub(crate) fn wait_committed(
    kafka: &Kafka,
    group: &str,
    topic: &str,
    end: usize,
    secs: u64,
    what: &str,
    serve: &Serve,
) {
    let last = std::cell::RefCell::new(vec![]);
    wait_or_explain(
        what,
        secs,
        || {
            *last.borrow_mut() = kafka.committed(group, topic, 1);
            *last.borrow() == vec![Some(end as i64)]
        },
        || format!("committed offset last seen: {:?} of {end}\n{}", last.borrow(), serve.explain()),
    );
}

/// A pipeline file: a Kafka source on `input`, a Kafka sink to `output`, metrics on an
/// ephemeral port, a snapshot in `dir`. `extra_source` is appended to the source table.
/// The reorder window runs on arrival time: two messages more than a window apart in arrival
/// are applied in arrival order (the later one flagged late if its resourceVersion is lower),
/// where `replay` orders them by event time. 2 s is longer than any stall of a loaded 2-core
/// machine between two fetched batches, so the classes never depend on scheduling.
pub(crate) fn pipeline(
    dir: &Path,
    brokers: &str,
    input: &str,
    output: &str,
    group: &str,
    extra_source: &str,
) -> PathBuf {
    let path = dir.join("pipeline.toml");
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
{extra_source}
[[sinks]]
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
[metrics]
listen = "127.0.0.1:0"
[state]
snapshot = "{}"
snapshot_interval = "2s"
"#,
            dir.join("state.snapshot").display()
        ),
    )
    .unwrap();
    path
}

// ---------------------------------------------------------------- the ingest tier

/// An ingest pipeline: a webhook on an ephemeral port, and the `kafka_route` sink to `topic`.
pub(crate) fn ingest_pipeline(dir: &Path, name: &str, brokers: &str, topic: &str, delivery_timeout: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let route = format!("brokers = \"{brokers}\"\ntopic = \"{topic}\"\ndelivery_timeout = \"{delivery_timeout}\"\nmetadata_refresh = \"1s\"");
    std::fs::write(&path, Pipeline::webhook().sink("kafka_route", &route).toml()).unwrap();
    path
}

/// The webhook address a started `serve` logs.
pub(crate) fn webhook_addr(serve: &Serve) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = serve.logs().into_iter().find(|v| v["fields"]["message"] == "webhook listening") {
            return v["fields"]["addr"].as_str().unwrap().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "serve logs its webhook address");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// POSTs `body` and returns the status code and the `Retry-After` header.
pub(crate) fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, Option<String>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let retry = answer
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: ").or_else(|| l.strip_prefix("Retry-After: ")))
        .map(str::to_string);
    (code, retry)
}

pub(crate) fn event_list(lines: &[String]) -> Vec<u8> {
    format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}]}}"#, lines.join(",")).into_bytes()
}

/// POSTs until answered 200 (a 503 or 429 is retried, as the API server does).
pub(crate) fn post_until_taken(addr: SocketAddr, path: &str, body: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match post(addr, path, body) {
            (200, _) => return,
            (503 | 429, Some(_)) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("POST {path}: {other:?}"),
        }
    }
}

/// Ingest processes (`serve` with a webhook and the `kafka_route` sink) on one keyed topic,
/// taking the batches in turn, as replicas behind one Service do.
pub(crate) struct Ingest {
    pub processes: Vec<Serve>,
    addrs: Vec<SocketAddr>,
    turn: std::cell::Cell<usize>,
}

impl Ingest {
    pub(crate) fn start(dir: &Path, n: usize, brokers: &str, topic: &str) -> Ingest {
        let processes: Vec<Serve> = (0..n)
            .map(|i| Serve::start(&ingest_pipeline(dir, &format!("ingest-{i}"), brokers, topic, "10s")))
            .collect();
        let addrs = processes.iter().map(webhook_addr).collect();
        Ingest { processes, addrs, turn: std::cell::Cell::new(0) }
    }

    /// Posts (cluster, line) pairs in their order: each run of one cluster's lines as
    /// EventLists of at most 25 events to `/audit/{cluster}`, the processes in turn; returns
    /// once every batch was answered 200 (the broker has its messages).
    pub(crate) fn post(&self, lines: &[(&String, &String)]) {
        let mut i = 0;
        while i < lines.len() {
            let cluster = lines[i].0;
            let run = lines[i..].iter().take(25).take_while(|(c, _)| *c == cluster).count();
            let batch: Vec<String> = lines[i..i + run].iter().map(|(_, l)| (*l).clone()).collect();
            let turn = self.turn.get();
            post_until_taken(self.addrs[turn % self.addrs.len()], &format!("/audit/{cluster}"), &event_list(&batch));
            self.turn.set(turn + 1);
            i += run;
        }
    }
}
