//! The ingest tier against a real Apache Kafka broker (`scripts/kafka.sh`): two `serve`
//! processes with a webhook and a `kafka_route` sink take the recorded control-plane streams,
//! every event lands on the keyed topic once per copy it should have (keys computed here from
//! the fixture), a classify process on that topic gives every write `replay`'s class, and a
//! broker outage is answered 503 without losing anything accepted. Skipped (with
//! `SKIPPED: ...`) only when `KAUSALITY_KAFKA_TESTS=0`.
#![cfg(feature = "kafka")]

mod kafka_support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_support::*;
use kausality_stream::route::partition_of;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;

/// One message of the keyed topic.
#[derive(Debug)]
struct Routed {
    partition: i32,
    key: String,
    payload: String,
    headers: BTreeMap<String, String>,
}

/// Every message on `topic` when called: each partition read from its start (assigned, no
/// group to join) up to the high watermark it had then. A 200 from the ingest tier means the
/// broker has the messages, so this sees them however slowly the machine runs; panics if the
/// broker does not hand them over within a minute.
fn read_topic(brokers: &str, topic: &str) -> Vec<Routed> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("reader-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let meta = c.fetch_metadata(Some(topic), Duration::from_secs(30)).expect("topic metadata");
    let partitions = meta.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len() as i32);
    assert!(partitions > 0, "{topic} has no partitions");
    let mut end: HashMap<i32, i64> = HashMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = c.fetch_watermarks(topic, p, Duration::from_secs(30)).expect("watermarks");
        end.insert(p, high);
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut next: HashMap<i32, i64> = (0..partitions).map(|p| (p, 0)).collect();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..partitions).any(|p| next[&p] < end[&p]) {
        assert!(Instant::now() < deadline, "{topic}: read up to {next:?} of {end:?} within a minute");
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                next.insert(m.partition(), m.offset() + 1);
                if m.offset() >= end[&m.partition()] {
                    continue;
                }
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).to_string())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Routed {
                    partition: m.partition(),
                    key: String::from_utf8_lossy(m.key().unwrap_or_default()).to_string(),
                    payload: String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string(),
                    headers,
                });
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// An ingest pipeline: a plain-HTTP webhook on an ephemeral loopback port, the route sink.
/// A classify pipeline on the keyed topic: the cluster from the header, a reorder window
/// longer than reading the whole backlog takes, so that partitions read in any interleaving
/// are put back in resourceVersion order, as `replay` with a window over the whole fixture.
fn classify_pipeline(dir: &Path, brokers: &str, input: &str, output: &str) -> PathBuf {
    let path = dir.join("classify.toml");
    let text = format!(
        r#"cluster = "default"
[options]
reorder_window = "15s"
[[sources]]
type = "kafka"
brokers = "{brokers}"
topics = ["{input}"]
group_id = "classify-{input}"
cluster_header = "cluster"
[[sinks]]
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
[metrics]
listen = "127.0.0.1:0"
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// What the test expects of one event: its judged key and its own UID when it is a state
/// copy's key, worked out here from the event's JSON (not by the service's code). `None`:
/// not produced (not a completed, successful, persisted write, or no object to key by).
fn expected_keys(ev: &Value) -> Option<(String, Vec<String>)> {
    let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let verb = ev["verb"].as_str()?;
    let code = ev["responseStatus"]["code"].as_i64().unwrap_or(0);
    if ev["stage"] != "ResponseComplete"
        || !(200..300).contains(&code)
        || !["create", "update", "patch", "delete", "deletecollection"].contains(&verb)
    {
        return None;
    }
    if ev["requestURI"].as_str().unwrap_or("").contains("dryRun=") {
        return None;
    }
    let oref = &ev["objectRef"];
    let resp = &ev["responseObject"];
    let judged_of = |o: &Value| -> Option<(String, String)> {
        let own = s(&o["metadata"]["uid"])?;
        let controller = o["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["controller"] == true).and_then(|r| s(&r["uid"])));
        Some((controller.unwrap_or_else(|| own.clone()), own))
    };
    let subresource = oref["subresource"].as_str().unwrap_or("");
    if !subresource.is_empty() && verb.starts_with("delete") {
        return None;
    }
    match subresource {
        "" | "status" => {}
        "scale" if resp.is_object() => {
            return s(&resp["metadata"]["uid"]).or_else(|| s(&oref["uid"])).map(|u| (u, vec![]))
        }
        "scale" => return None,
        "eviction" if verb == "create" => {
            let uid = s(&ev["requestObject"]["deleteOptions"]["preconditions"]["uid"]);
            return Some((
                uid.unwrap_or(format!("pods/{}/{}", oref["namespace"].as_str().unwrap_or(""), s(&oref["name"])?)),
                vec![],
            ));
        }
        _ => return None,
    }
    if resp["kind"].as_str().is_some_and(|k| k.ends_with("List")) && resp["items"].is_array() {
        let mut keys: Vec<String> = Vec::new();
        for (judged, own) in resp["items"].as_array().unwrap().iter().filter_map(judged_of) {
            for k in [judged, own] {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        let judged = keys.first()?.clone();
        return Some((judged, keys[1..].to_vec()));
    }
    if resp["kind"] == "Status" || (resp.is_object() && s(&resp["metadata"]["uid"]).is_none()) || resp.is_null() {
        if verb != "delete" {
            return None;
        }
        return s(&resp["details"]["uid"]).or_else(|| s(&oref["uid"])).map(|u| (u, vec![]));
    }
    let (judged, own) = judged_of(resp)?;
    Some(if judged == own { (judged, vec![]) } else { (judged, vec![own]) })
}

/// A write of a Namespace (the core group's `namespaces`): routed to every partition.
fn is_namespace(ev: &Value) -> bool {
    ev["objectRef"]["resource"] == "namespaces" && ev["objectRef"]["apiGroup"].as_str().unwrap_or("").is_empty()
}

fn fixtures() -> Vec<(String, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/controlplane");
    let mut v: Vec<(String, Vec<String>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let lines = std::fs::read_to_string(&p)
                .unwrap()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(String::from)
                .collect();
            (name, lines)
        })
        .collect();
    v.sort();
    v
}

/// `replay` of one fixture as cluster `name`: (auditID, or auditID/uid for each object of a
/// deletecollection) → class. Its reorder window holds the whole fixture, as the classify
/// process's holds the whole backlog: both apply each cluster's writes in resourceVersion
/// order (a keyed topic keeps no order across partitions; the classes of some deletes depend
/// on the order, e.g. a deletecollection and the kubelet's deletes of the same pods).
fn replay(dir: &Path, name: &str, lines: &[String]) -> HashMap<String, String> {
    let file = dir.join(format!("{name}.jsonl"));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let o = std::process::Command::new(BIN)
        .args(["replay", "--quiet", "--no-progress", "--reorder-window", "24h", "--cluster", name])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "replay failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(|l| class_key(&serde_json::from_str(l).unwrap())).collect()
}

fn class_key(e: &Value) -> (String, String) {
    let id = e["auditID"].as_str().unwrap();
    let key = if e["verb"] == "deletecollection" {
        format!("{id}/{}", e["object"]["uid"].as_str().unwrap_or(""))
    } else {
        id.to_string()
    };
    (key, e["class"].as_str().unwrap().to_string())
}

fn config_errors(text: &str) -> Vec<(String, String)> {
    match kausality_stream::pipeline::load_str("t.toml", text) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| (e.key.clone(), e.message.clone())).collect(),
    }
}

const INGEST: &str = r#"
[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true
[[sinks]]
type = "kafka_route"
brokers = "127.0.0.1:9092"
topic = "audit"
"#;

/// No broker needed: what a pipeline with a `kafka_route` sink may hold.
#[test]
fn an_ingest_pipeline_is_webhooks_and_this_one_sink() {
    assert_eq!(config_errors(INGEST), Vec::<(String, String)>::new());
    let more = format!("{INGEST}[[sinks]]\ntype = \"jsonl\"\npath = \"-\"\n[state]\nsnapshot = \"s.snap\"\n[query]\nlisten = \"127.0.0.1:0\"\n");
    let keys: Vec<String> = config_errors(&more).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["sinks[1]", "state.snapshot", "query"]);
    let kafka_in = INGEST.replace(
        "type = \"webhook\"\nlisten = \"127.0.0.1:0\"\nplain_http = true",
        "type = \"file\"\npath = \"Cargo.toml\"",
    );
    let e = config_errors(&kafka_in);
    assert!(e.iter().any(|(k, m)| k == "sources[0]" && m.contains("webhook sources only")), "{e:?}");
    let bad =
        format!("{INGEST}delivery_timeout = \"0s\"\ncluster_header = \"\"\n[sinks.properties]\n\"acks\" = \"1\"\n");
    let keys: Vec<String> = config_errors(&bad).into_iter().map(|(k, _)| k).collect();
    for k in ["sinks[0].cluster_header", "sinks[0].delivery_timeout"] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
    assert!(keys.iter().any(|x| x.contains("acks")), "acks is the sink's own: {keys:?}");
}

const PARTITIONS: i32 = 4;

/// One copy of an event on the keyed topic: (auditID, "judged" or "state", key, partition).
type Copy = (String, &'static str, String, i32);

#[test]
fn two_ingest_processes_route_every_fixture_event_and_classify_equals_replay() {
    if !enabled("two_ingest_processes_route_every_fixture_event_and_classify_equals_replay") {
        return;
    }
    let kafka = Kafka::get();
    let dir = temp_dir("ingest");
    let (topic, output) = (kafka.unique("audit-keyed"), kafka.unique("enriched"));
    kafka.create_topic(&topic, PARTITIONS);
    kafka.create_topic(&output, 1);
    let ingest = [
        Serve::start(&ingest_pipeline(&dir, "ingest-a", &kafka.brokers, &topic, "10s")),
        Serve::start(&ingest_pipeline(&dir, "ingest-b", &kafka.brokers, &topic, "10s")),
    ];
    let addrs = [webhook_addr(&ingest[0]), webhook_addr(&ingest[1])];

    // Every fixture as its own cluster, in batches of 25 taken by the two processes in turn.
    // (auditID, copy, key, partition) → (partition of the judged copy, the event's line,
    // cluster). A Namespace's write has a state copy on every other partition, keyed like
    // its judged copy.
    let mut expected: BTreeMap<Copy, (i32, String, String)> = BTreeMap::new();
    let mut replayed: HashMap<String, String> = HashMap::new();
    let mut turn = 0;
    let mut namespace_writes = 0;
    for (name, lines) in fixtures() {
        replayed.extend(replay(&dir, &name, &lines));
        for line in &lines {
            let ev: Value = serde_json::from_str(line).unwrap();
            let Some((judged, state)) = expected_keys(&ev) else { continue };
            let id = ev["auditID"].as_str().unwrap().to_string();
            let jp = partition_of(judged.as_bytes(), PARTITIONS);
            let value = (jp, line.clone(), name.clone());
            assert!(
                expected.insert((id.clone(), "judged", judged.clone(), jp), value.clone()).is_none(),
                "auditIDs are unique"
            );
            for k in state {
                let p = partition_of(k.as_bytes(), PARTITIONS);
                if p != jp {
                    expected.insert((id.clone(), "state", k, p), value.clone());
                }
            }
            if is_namespace(&ev) {
                namespace_writes += 1;
                for p in (0..PARTITIONS).filter(|&p| p != jp) {
                    expected.entry((id.clone(), "state", judged.clone(), p)).or_insert_with(|| value.clone());
                }
            }
        }
        for batch in lines.chunks(25) {
            post_until_taken(addrs[turn % 2], &format!("/audit/{name}"), &event_list(batch));
            turn += 1;
        }
    }
    let state_copies = expected.keys().filter(|k| k.1 == "state").count();
    assert!(state_copies > 300, "the fixtures' trees give state copies: {state_copies}");
    assert!(namespace_writes >= 6, "the fixtures write namespaces: {namespace_writes}");

    // Each message is the event's line, unchanged, with its key, partition and headers.
    let got = read_topic(&kafka.brokers, &topic);
    let mut seen: BTreeMap<Copy, usize> = BTreeMap::new();
    for m in &got {
        let ev: Value = serde_json::from_str(&m.payload).expect("the event's JSON");
        let copy =
            if m.headers.get("kausality-copy").map(String::as_str) == Some("state") { "state" } else { "judged" };
        // The partition is part of the key: each message on the partition its key gives,
        // but a Namespace's state copies on every other one.
        let key = (ev["auditID"].as_str().unwrap().to_string(), copy, m.key.clone(), m.partition);
        let Some((jp, line, cluster)) = expected.get(&key) else { panic!("a message that should not be: {key:?}") };
        assert_eq!(&m.payload, line, "the event unchanged");
        assert_eq!(m.headers.get("cluster"), Some(cluster));
        let judged_header = m.headers.get("kausality-judged-partition").cloned();
        assert_eq!(judged_header, (copy == "state").then(|| jp.to_string()), "{key:?}");
        *seen.entry(key).or_default() += 1;
    }
    let missing: Vec<_> = expected.keys().filter(|k| !seen.contains_key(*k)).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} copies missing, e.g. {missing:?}",
        expected.len() - seen.len(),
        expected.len()
    );
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "copies written twice: {twice:?}");
    assert_eq!(got.len(), expected.len());
    let routed = |copy: &str| {
        ingest.iter().map(|s| s.metric("kausality_route_messages_total", &[&format!("copy=\"{copy}\"")])).sum::<f64>()
            as usize
    };
    assert_eq!((routed("judged"), routed("state")), (expected.len() - state_copies, state_copies));

    // One classify process on the keyed topic: every class as `replay` gives it.
    let classify = Serve::start(&classify_pipeline(&dir, &kafka.brokers, &topic, &output));
    let out = kafka.read_until(&output, Duration::from_secs(60), |o| o.len() >= replayed.len());
    let classes: HashMap<String, String> = out.iter().map(|o| class_key(&o.value)).collect();
    assert_eq!(out.len(), replayed.len(), "one output per classified mutation\n{}", classify.explain());
    let differ: Vec<_> =
        replayed.iter().filter(|(id, c)| classes.get(*id) != Some(c)).map(|(id, c)| (id, c, classes.get(id))).collect();
    let extra: Vec<_> = classes.iter().filter(|(id, _)| !replayed.contains_key(*id)).take(5).collect();
    let line_of = |id: &str| {
        expected
            .iter()
            .find(|(k, _)| k.0 == id.split('/').next().unwrap())
            .map(|(_, (_, l, c))| (c.clone(), l.chars().take(400).collect::<String>()))
    };
    assert!(
        differ.is_empty(),
        "{} classes differ from replay, e.g. {:?}\nthe first: {:?}\noutputs not in replay: {extra:?}",
        differ.len(),
        &differ[..differ.len().min(10)],
        differ.first().and_then(|d| line_of(d.0))
    );
    // State copies were read by the same process as their judged copies: left out, counted.
    let received = classify.metric("kausality_events_received_total", &["source=\"kafka\""]) as usize;
    assert_eq!(received, expected.len());
    kafka.delete_topics(&[&topic, &output]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_webhook_answers_503_while_the_broker_is_down_and_loses_nothing_it_took() {
    if !enabled("the_webhook_answers_503_while_the_broker_is_down_and_loses_nothing_it_took") {
        return;
    }
    let kafka = Kafka::get();
    let dir = temp_dir("ingest-outage");
    let topic = kafka.unique("audit-keyed");
    kafka.create_topic(&topic, 2);
    let ingest = Serve::start(&ingest_pipeline(&dir, "ingest", &kafka.brokers, &topic, "3s"));
    let addr = webhook_addr(&ingest);
    let (_, lines) = fixtures().into_iter().find(|(n, _)| n == "rollout").unwrap();
    let writes =
        |batch: &[String]| batch.iter().filter(|l| expected_keys(&serde_json::from_str(l).unwrap()).is_some()).count();
    let (first, second) = lines.split_at(lines.len() / 2);

    // A 200 means the broker has the messages: they are readable at once.
    post_until_taken(addr, "/audit", &event_list(first));
    let ids = |msgs: &[Routed]| {
        msgs.iter()
            .filter(|m| !m.headers.contains_key("kausality-copy"))
            .map(|m| serde_json::from_str::<Value>(&m.payload).unwrap()["auditID"].as_str().unwrap().to_string())
            .collect::<std::collections::HashSet<_>>()
    };
    let now = read_topic(&kafka.brokers, &topic);
    assert_eq!(ids(&now).len(), writes(first), "every write of the first batch is on the topic when it is answered");

    script(&["stop", "--keep-data"]);
    let started = Instant::now();
    let (code, retry) = post(addr, "/audit", &event_list(second));
    assert_eq!((code, retry.as_deref()), (503, Some("1")), "the broker is down: retry later");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered within the delivery timeout: {:?}",
        started.elapsed()
    );
    assert!(ingest.metric("kausality_route_errors_total", &[]) >= 1.0);
    script(&["start", "--keep-data"]);
    // The API server sends the batch again until it is taken.
    post_until_taken(addr, "/audit", &event_list(second));

    let all = read_topic(&kafka.brokers, &topic);
    let got = ids(&all);
    let want: std::collections::HashSet<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| expected_keys(v).is_some())
        .map(|v| v["auditID"].as_str().unwrap().to_string())
        .collect();
    let lost: Vec<_> = want.difference(&got).take(5).collect();
    assert!(lost.is_empty(), "writes taken but not on the topic: {lost:?}\n{}", ingest.explain());
    kafka.delete_topics(&[&topic]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A namespace's deletion reaches every partition: the namespace controller empties it kind by
/// kind, and each child's delete is judged on its controller's partition, in the state kept
/// for that partition (a changelog: one state per partition), which knows the namespace only
/// through the Namespace's copies the ingest tier sends to every partition. The truth is the
/// stream's own: every delete the namespace controller makes after the namespace's deletion is
/// its teardown (`deleting`); a person's delete in another namespace stays `origin`.
#[test]
fn a_namespace_teardown_is_known_on_every_partition() {
    use kausality_stream::sim::*;
    if !enabled("a_namespace_teardown_is_known_on_every_partition") {
        return;
    }
    let kafka = Kafka::get();
    let dir = temp_dir("ingest-namespace");
    let (topic, output, changelog) = (kafka.unique("audit-keyed"), kafka.unique("enriched"), kafka.unique("state"));
    kafka.create_topic(&topic, PARTITIONS);
    kafka.create_topic(&output, 1);
    let ingest = Serve::start(&ingest_pipeline(&dir, "ingest", &kafka.brokers, &topic, "10s"));

    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let ns = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}});
    let (team, ev) = api.create(ADMIN, ns("team"));
    events.push(ev);
    // Trees in the namespace until their ReplicaSets (where their pods are judged) and their
    // Deployments (where the ReplicaSets are) fall on partitions other than the Namespace's.
    let mut trees = Vec::new();
    let apart = |trees: &[(ObjRef, ObjRef, Vec<ObjRef>)], at: fn(&(ObjRef, ObjRef, Vec<ObjRef>)) -> &ObjRef| {
        trees
            .iter()
            .filter(|t| partition_of(at(t).uid.as_bytes(), PARTITIONS) != partition_of(team.uid.as_bytes(), PARTITIONS))
            .count()
    };
    let mut other = None;
    while trees.len() < 12 && (apart(&trees, |t| &t.1) < 2 || apart(&trees, |t| &t.0) < 2) {
        let name = format!("web{}", trees.len());
        let (deploy, ev) = api.create(ADMIN, deployment("team", &name, 2, "web:1"));
        events.push(ev);
        let (rs, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
        events.push(ev);
        let mut pods = Vec::new();
        for s in ["a", "b"] {
            let (p, ev) = api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1"));
            pods.push(p);
            events.push(ev);
        }
        events.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
        events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "True")]));
        if other.is_none() {
            // The same in another namespace, for a person's delete that is no teardown.
            let (d, ev) = api.create(ADMIN, deployment("shop", "api", 1, "api:1"));
            events.push(ev);
            let (r, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&d, "77aa", 1, "api:1"));
            events.push(ev);
            let (p, ev) = api.create(REPLICASET_CONTROLLER, pod(&r, "a", "api:1"));
            events.push(ev);
            events.push(api.report(REPLICASET_CONTROLLER, &r, &[]));
            events.push(api.report(DEPLOYMENT_CONTROLLER, &d, &[("Available", "True")]));
            other = Some(p);
        }
        trees.push((deploy, rs, pods));
    }
    assert!(
        apart(&trees, |t| &t.1) >= 2 && apart(&trees, |t| &t.0) >= 2,
        "trees on other partitions than the Namespace's"
    );
    // The person deletes the namespace; the namespace controller deletes the pods (one tree's
    // with a deletecollection, the others one by one), then the ReplicaSets, then the
    // Deployments; the person deletes a pod in another namespace.
    events.push(api.delete(ADMIN, &team, &["kubernetes"]));
    let mut teardown = Vec::new();
    teardown.push(api.delete_collection(NAMESPACE_CONTROLLER, &trees[0].2, true));
    for t in &trees[1..] {
        for p in &t.2 {
            teardown.push(api.delete_graceful(NAMESPACE_CONTROLLER, p));
        }
    }
    for t in &trees {
        teardown.push(api.delete(NAMESPACE_CONTROLLER, &t.1, &[]));
    }
    events.extend(teardown.iter().cloned());
    // A Deployment is the top of its tree: its delete has no parent to be judged by.
    let tops: Vec<String> = trees.iter().map(|t| api.delete(NAMESPACE_CONTROLLER, &t.0, &[])).collect();
    events.extend(tops.iter().cloned());
    let person = api.delete_graceful(ADMIN, other.as_ref().unwrap());
    events.push(person.clone());
    post_until_taken(webhook_addr(&ingest), "/audit/c1", &event_list(&events));

    let pipeline = dir.join("classify-changelog.toml");
    std::fs::write(
        &pipeline,
        format!(
            r#"cluster = "default"
[options]
reorder_window = "5s"
[[sources]]
type = "kafka"
brokers = "{brokers}"
topics = ["{topic}"]
group_id = "classify-{topic}"
cluster_header = "cluster"
[sources.changelog]
topic = "{changelog}"
[[sinks]]
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
[metrics]
listen = "127.0.0.1:0"
"#,
            brokers = kafka.brokers
        ),
    )
    .unwrap();
    let classify = Serve::start(&pipeline);
    let id = |line: &str| serde_json::from_str::<Value>(line).unwrap()["auditID"].as_str().unwrap().to_string();
    // Every write's output: each partition is ordered on its own, so the person's delete
    // (the last written) may come out before writes of other partitions.
    let awaited: HashSet<String> = teardown.iter().chain(&tops).chain([&person]).map(|l| id(l)).collect();
    let out = kafka.read_until(&output, Duration::from_secs(60), |o| {
        let seen: HashSet<&str> = o.iter().filter_map(|o| o.value["auditID"].as_str()).collect();
        awaited.iter().all(|a| seen.contains(a.as_str()))
    });
    let classes: Vec<(String, String, String)> = out
        .iter()
        .map(|o| {
            (
                o.value["auditID"].as_str().unwrap().to_string(),
                o.value["class"].as_str().unwrap().to_string(),
                o.value["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let class_of =
        |line: &str| classes.iter().filter(|c| c.0 == id(line)).map(|c| (c.1.clone(), c.2.clone())).collect::<Vec<_>>();
    assert_eq!(class_of(&person), [("origin".to_string(), class_of(&person)[0].1.clone())], "{}", classify.explain());
    let mut judged = 0;
    for line in &teardown {
        let got = class_of(line);
        assert!(!got.is_empty(), "the namespace controller's write was classified: {}", &line[..300.min(line.len())]);
        for (class, reason) in got {
            assert_eq!(class, "deleting", "{reason}: {}", &line[..300.min(line.len())]);
            judged += 1;
        }
    }
    assert_eq!(judged, teardown.len() + 1, "the deletecollection's two pods, one event each");
    for line in &tops {
        assert_eq!(class_of(line).into_iter().map(|c| c.0).collect::<Vec<_>>(), ["unowned"]);
    }
    kafka.delete_topics(&[&topic, &output, &changelog]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A classify pipeline with a state changelog, `exactly_once` or not.
fn changelog_pipeline(
    dir: &Path,
    name: &str,
    brokers: &str,
    input: &str,
    changelog: &str,
    output: &str,
    exactly_once: bool,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"cluster = "default"
[options]
reorder_window = "1s"
[[sources]]
type = "kafka"
brokers = "{brokers}"
topics = ["{input}"]
group_id = "classify-{input}"
cluster_header = "cluster"
exactly_once = {exactly_once}
transactional_id = "classify-{input}-{name}"
properties = {{ "partition.assignment.strategy" = "cooperative-sticky" }}
[sources.changelog]
topic = "{changelog}"
[[sinks]]
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
[metrics]
listen = "127.0.0.1:0"
"#
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_pods_trace_runs_from_the_person_across_partitions() {
    use kausality_stream::sim::*;
    if !enabled("a_pods_trace_runs_from_the_person_across_partitions") {
        return;
    }
    let kafka = Kafka::get();
    for exactly_once in [true, false] {
        let dir = temp_dir(&format!("ingest-trace-{exactly_once}"));
        let (topic, output, changelog) = (kafka.unique("audit-keyed"), kafka.unique("enriched"), kafka.unique("state"));
        kafka.create_topic(&topic, PARTITIONS);
        kafka.create_topic(&output, 1);
        let ingest = Serve::start(&ingest_pipeline(&dir, "ingest", &kafka.brokers, &topic, "10s"));
        let webhook = webhook_addr(&ingest);

        // First, trees whose Pods (judged on their ReplicaSet's partition, state-only copies
        // on their own) reach every partition: each process then knows that ReplicaSets own
        // something, which a ReplicaSet's trace is sent for.
        let mut api = ApiServer::new();
        let (mut warm, mut reached) = (Vec::new(), std::collections::HashSet::new());
        while reached.len() < PARTITIONS as usize {
            let name = format!("warm{}", warm.len());
            let (deploy, ev) = api.create(ADMIN, deployment("tools", &name, 1, "warm:1"));
            warm.push(ev);
            let (rs, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "0a0a", 1, "warm:1"));
            warm.push(ev);
            let (p, ev) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "warm:1"));
            warm.push(ev);
            reached.insert(partition_of(rs.uid.as_bytes(), PARTITIONS));
            reached.insert(partition_of(p.uid.as_bytes(), PARTITIONS));
        }
        post_until_taken(webhook, "/audit/default", &event_list(&warm));
        // Started once the ingest tier has written the topic (a changelog needs its metadata).
        let classify: Vec<Serve> = ["a", "b"]
            .iter()
            .map(|name| {
                Serve::start(&changelog_pipeline(&dir, name, &kafka.brokers, &topic, &changelog, &output, exactly_once))
            })
            .collect();
        let last_warm =
            serde_json::from_str::<Value>(warm.last().unwrap()).unwrap()["auditID"].as_str().unwrap().to_string();
        kafka.read_until(&output, Duration::from_secs(60), |o| o.iter().any(|o| o.audit_id() == last_warm));

        // Trees until two ReplicaSets are judged (on their Deployment's partition) away from
        // their own partition, where their pods are judged. Each ReplicaSet's first pod is
        // written with it; its second once the ReplicaSet's trace reached its own partition.
        let (mut first, mut trees) = (Vec::new(), Vec::new());
        let apart = |trees: &[(ObjRef, ObjRef)]| {
            trees
                .iter()
                .filter(|(d, r)| {
                    partition_of(d.uid.as_bytes(), PARTITIONS) != partition_of(r.uid.as_bytes(), PARTITIONS)
                })
                .count()
        };
        while apart(&trees) < 2 {
            let name = format!("web{}", trees.len());
            let (deploy, ev) = api.create(ADMIN, deployment("shop", &name, 2, "web:1"));
            first.push(ev);
            let (rs, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
            first.push(ev);
            first.push(api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1")).1);
            trees.push((deploy, rs));
        }
        let expected = apart(&trees) as f64;
        let before = |result: &str| {
            classify
                .iter()
                .map(|c| c.metric("kausality_trace_messages_total", &[&format!("result=\"{result}\"")]))
                .sum::<f64>()
        };
        // The warm-up's own trace messages (ReplicaSets judged once the kind was known) all
        // sent and taken in, twice in a row a commit apart: what follows is the trees'.
        let settled = || {
            let taken: f64 = ["applied", "already", "stale", "unknown", "leaf"].iter().map(|r| before(r)).sum();
            (before("sent"), taken)
        };
        let last = std::cell::Cell::new((-1.0, -1.0));
        wait_or_explain(
            "the warm-up's trace messages taken in",
            60,
            || {
                std::thread::sleep(Duration::from_millis(1500));
                let now = settled();
                let done = now.0 == now.1 && now == last.get();
                last.set(now);
                done
            },
            || format!("(sent, taken in): {:?}", last.get()),
        );
        let (applied_before, sent_before) = (before("applied"), before("sent"));
        post_until_taken(webhook, "/audit/default", &event_list(&first));
        let applied = || before("applied") - applied_before;
        wait_or_explain(
            "the ReplicaSets' trace messages applied on their own partitions",
            90,
            || applied() >= expected,
            || format!("applied {} of {expected}\n{}\n{}", applied(), classify[0].explain(), classify[1].explain()),
        );
        let sent = before("sent") - sent_before;
        assert!(sent >= expected, "sent {sent}, expected at least {expected}");
        // Only ReplicaSets: a Pod's trace is not sent (its kind owns nothing), so none
        // arrives where its kind owns nothing.
        assert_eq!(before("leaf"), 0.0, "no Pod's trace message");

        let second: Vec<(String, &ObjRef, &ObjRef)> = trees
            .iter()
            .map(|(d, r)| {
                let (_, ev) = api.create(REPLICASET_CONTROLLER, pod(r, "b", "web:1"));
                (ev, d, r)
            })
            .collect();
        let lines: Vec<String> = second.iter().map(|(ev, _, _)| ev.clone()).collect();
        post_until_taken(webhook, "/audit/default", &event_list(&lines));
        let ids: Vec<String> = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["auditID"].as_str().unwrap().to_string())
            .collect();
        let out = kafka.read_until(&output, Duration::from_secs(60), |o| {
            ids.iter().all(|id| o.iter().any(|o| o.audit_id() == id))
        });
        for ((_, deploy, rs), id) in second.iter().zip(&ids) {
            let got: Vec<&Out> = out.iter().filter(|o| o.audit_id() == id).collect();
            assert_eq!(got.len(), 1, "one output for the pod's create (exactly_once {exactly_once})");
            let hops: Vec<(String, String, String)> = got[0].value["trace"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h["kind"].as_str().unwrap().to_string(),
                        h["name"].as_str().unwrap().to_string(),
                        h["user"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let pod_name = got[0].value["object"]["name"].as_str().unwrap().to_string();
            assert_eq!(
                hops,
                vec![
                    ("Deployment".to_string(), deploy.name.clone(), ADMIN.to_string()),
                    ("ReplicaSet".to_string(), rs.name.clone(), DEPLOYMENT_CONTROLLER.to_string()),
                    ("Pod".to_string(), pod_name, REPLICASET_CONTROLLER.to_string()),
                ],
                "the pod's trace runs from the person who created the Deployment (exactly_once {exactly_once}, ReplicaSet {} apart: {})",
                rs.name,
                partition_of(deploy.uid.as_bytes(), PARTITIONS) != partition_of(rs.uid.as_bytes(), PARTITIONS)
            );
        }
        drop(classify);
        drop(ingest);
        kafka.delete_topics(&[&topic, &output, &changelog]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
