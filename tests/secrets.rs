//! Nothing secret is ever stored or served. A controller-owned Secret whose `data` a person
//! changes and the controller writes back is a drift that names the person and the field it
//! put back, `restored`, and no output holds either value: not the enriched event (JSON lines,
//! `replay`), not the history store's file, not `why` (text and JSON), not the query API's
//! `/v1/drift` and `/v1/why`, not the drift report.

mod common;
mod serve_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kausality_stream::classify::Class;
use kausality_stream::sim::*;
use serde_json::{json, Value};
use serve_support::{start, temp_dir, Collector, Pipeline};

const OPERATOR: &str = "system:serviceaccount:db:db-operator";
const PERSON: &str = "alice@example.com";
/// `hunter2`, the value the operator keeps writing.
const KEPT: &str = "aHVudGVyMg==";
/// `correct-horse`, the person's value.
const CHANGED: &str = "Y29ycmVjdC1ob3JzZQ==";
/// A password in a `stringData`, and a token in a custom kind's spec.
const PLAIN: &str = "plain-text-passphrase";
const TOKEN: &str = "tok-8c1f-secret";

/// The story: a Database and the Secret its operator owns; the operator reports the Database
/// ready; a person changes the password; the operator writes its own back. Returns the events
/// and the auditIDs of the person's write and of the operator's write back.
fn story() -> (Vec<String>, String, String) {
    let mut api = ApiServer::new();
    let (db, e1) = api.create(
        PERSON,
        json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": "shop"},
               "spec": {"size": 1, "auth": {"token": TOKEN}}}),
    );
    let (secret, e2) = api.create(
        OPERATOR,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "orders-creds", "namespace": "shop", "ownerReferences": owner_ref(&db)},
               "data": {"password": KEPT, "user": "b3JkZXJz"}, "stringData": {"note": PLAIN}}),
    );
    let e3 = api.report(OPERATOR, &db, &[("Ready", "True")]);
    let e4 = api.update(PERSON, &secret, |s| s["data"]["password"] = json!(CHANGED));
    let e5 = api.update(OPERATOR, &secret, |s| s["data"]["password"] = json!(KEPT));
    let (person, back) = (common::audit_id(&e4), common::audit_id(&e5));
    (vec![e1, e2, e3, e4, e5], person, back)
}

/// Every form of every secret value: as written, decoded, and quoted.
fn secrets() -> Vec<&'static str> {
    vec![KEPT, CHANGED, "hunter2", "correct-horse", PLAIN, TOKEN, "aHVudGVy", "Y29ycmVjdC1ob3Jz"]
}

fn assert_no_secret(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for s in secrets() {
        assert!(!text.contains(s), "{what} holds the secret value {s:?}:\n{}", &text[..text.len().min(4000)]);
    }
}

/// The one revert of the drift `e`, checked: it names the person's write and the password put
/// back, by digest.
fn check_revert(e: &Value, person: &str) {
    assert_eq!(e["class"], "drift", "{e}");
    let reverts = e["reverts"].as_array().expect("reverts");
    assert_eq!(reverts.len(), 1, "{e}");
    let r = &reverts[0];
    assert_eq!(
        (r["user"].as_str(), r["auditID"].as_str(), r["person"].as_bool()),
        (Some(PERSON), Some(person), Some(true)),
        "{r}"
    );
    let fields = r["fields"].as_array().expect("fields known");
    assert_eq!(fields.len(), 1, "{r}");
    let f = &fields[0];
    assert_eq!((f["path"].as_str(), f["restored"].as_bool()), (Some("data.password"), Some(true)), "{f}");
    for side in ["before", "after"] {
        let v = f[side].as_str().unwrap_or_else(|| panic!("{side} is a digest string: {f}"));
        assert!(v.starts_with("(redacted: ") && v.contains("sha256:"), "{side}: {v}");
    }
    assert_ne!(f["before"], f["after"], "different values, different digests");
}

#[test]
fn the_enriched_event_names_the_revert_by_digest_only() {
    let (events, person, back) = story();
    let out = common::run(&events);
    let drift = common::find(&out, &events[4]).expect("classified");
    assert_eq!(drift.class, Class::Drift, "{}", drift.reason);
    assert_eq!(common::class_of(&out, &events[3]), Class::Origin);
    let mut bytes = Vec::new();
    for e in &out {
        e.write_json(&mut bytes);
        bytes.push(b'\n');
    }
    assert_no_secret("the enriched events", &bytes);
    let drift: Value = serde_json::from_slice(
        bytes.split(|b| *b == b'\n').find(|l| l.windows(back.len()).any(|w| w == back.as_bytes())).unwrap(),
    )
    .unwrap();
    check_revert(&drift, &person);
}

/// An EventList of events as JSON texts.
fn event_list_raw(events: &[String]) -> Vec<u8> {
    let items: Vec<Value> = events.iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    serde_json::to_vec(&json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items}))
        .unwrap()
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
}

/// Every file of the store: the database and what SQLite keeps beside it.
fn store_bytes(db: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        if let Ok(b) = std::fs::read(format!("{}{suffix}", db.display())) {
            all.extend(b);
        }
    }
    all
}

#[test]
fn replay_the_history_store_and_why_hold_no_secret_value() {
    let dir = temp_dir("secrets-replay");
    let (events, person, _) = story();
    let log = dir.join("audit.jsonl");
    std::fs::write(&log, events.join("\n") + "\n").unwrap();

    let out = bin().args(["replay", "--no-progress", "--reorder-window", "0"]).arg(&log).output().expect("replay");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_secret("replay's output", &out.stdout);
    assert_no_secret("replay's summary", &out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    check_revert(lines.iter().find(|e| e["class"] == "drift").expect("a drift"), &person);

    let db = dir.join("history.db");
    let out = bin()
        .args(["replay", "--no-progress", "--quiet", "--reorder-window", "0", "--history"])
        .arg(&db)
        .arg(&log)
        .output()
        .expect("replay --history");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = store_bytes(&db);
    // The person's write is there: its auditID as a row keeps a UUID, 16 bytes.
    let stored = kausality_stream::history::schema::uuid_bytes(&person).expect("a UUID auditID");
    assert!(bytes.windows(stored.len()).any(|w| w == stored), "the store holds the story");
    assert_no_secret("the history store's files", &bytes);

    for args in [
        &["why", "secret/orders-creds", "-n", "shop"][..],
        &["why", "secret/orders-creds", "-n", "shop", "--output", "json"][..],
    ] {
        let out = bin().args(args).arg("--history").arg(&db).output().expect("why");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&person), "{args:?} tells the person's write");
        assert_no_secret(&format!("{args:?}"), &out.stdout);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

async fn get(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("request");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_s_sinks_and_query_api_hold_no_secret_value() {
    let dir = temp_dir("secrets-serve");
    let (out, db) = (dir.join("out.jsonl"), dir.join("history.db"));
    let receiver = Collector::start(true).await;
    let pipeline = Pipeline::webhook()
        .options(r#"reorder_window = "0""#)
        .jsonl(&out)
        .sink("history", &format!("path = \"{}\"", db.display()));
    let running =
        start(&pipeline.sink("drift_report", &format!("urls = [\"{}\"]", receiver.url())).query("").toml()).await;
    let (events, person, _) = story();
    let r = reqwest::Client::new()
        .post(format!("http://{}/audit", running.webhook_addrs[0]))
        .body(event_list_raw(&events))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let query = format!("http://{}", running.query_addr.expect("the query API listens"));

    let deadline = Instant::now() + Duration::from_secs(20);
    let drift = loop {
        let (code, body) = get(&format!("{query}/v1/drift")).await;
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if let Some(d) = v["events"].as_array().and_then(|i| i.first()) {
            assert_no_secret("/v1/drift", body.as_bytes());
            break d.clone();
        }
        assert!(Instant::now() < deadline, "no drift served: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    check_revert(&drift, &person);
    let (code, body) = get(&format!("{query}/v1/why?kind=Secret&namespace=shop&name=orders-creds")).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&person), "the story has the person's write: {body}");
    assert_no_secret("/v1/why", body.as_bytes());

    let reports = receiver.wait_for(|r| !r.is_empty()).await;
    assert!(!reports.is_empty(), "a drift report was sent");
    assert_no_secret("the drift report", serde_json::to_string(&reports).unwrap().as_bytes());

    running.stop();
    let _ = running.shutdown().await;
    receiver.stop();
    assert_no_secret("the JSON lines sink", &std::fs::read(&out).unwrap());
    assert_no_secret("the history store's files", &store_bytes(&db));
    let _ = std::fs::remove_dir_all(&dir);
}
