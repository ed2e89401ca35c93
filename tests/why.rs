//! `kausality-stream why` on the recorded control-plane fixtures (docs/e2e.md): each fixture
//! replayed into a history store, then the story of the objects whose story the fixture's
//! truth knows, asserted fact by fact in the rendered text (class, user, auditID), and the
//! story of every object of every fixture against the classes of its `.expected.json`. Every
//! message path of the command: an unknown object, an ambiguous name, a time older than the
//! store, a missing store file, a server that answers.

#[path = "common/pipeline.rs"]
mod pipeline_toml;
#[path = "common/pki.rs"]
mod pki;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kausality_stream::history::story::{self, Story, StoryQuery};
use kausality_stream::history::{self, Mode};
use kausality_stream::why;
use pipeline_toml::Pipeline;
use serde_json::Value;

const RSC: &str = "system:serviceaccount:kube-system:replicaset-controller";
const DC: &str = "system:serviceaccount:kube-system:deployment-controller";

/// The cluster day's facts (cluster-day.expected.json, "a person scales a ReplicaSet" and "a
/// person deletes a pod").
const ALICE_SCALE: &str = "385fa8f2-3225-4b6c-86b8-3560edafb501";
const SCALE_BACK: &str = "ae6c9b20-116e-4225-b209-5a889803d316";
const ALICE_DELETE: &str = "c70d7f4a-c206-455b-9153-7d218578730b";
const REPLACEMENT: &str = "7ddc2275-17c2-466c-9f38-e069f77d6a0f";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/controlplane").join(name)
}

fn expected(scenario: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(&format!("{scenario}.expected.json"))).expect("read"))
        .expect("JSON")
}

/// A directory of its own for each test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kausality-why-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `replay --history` of a scenario into `db`, with the cluster name and reorder window its
/// expectations were recorded with (or another cluster name).
fn fill(db: &Path, scenario: &str, cluster: Option<&str>) {
    let exp = expected(scenario);
    let cluster = cluster.unwrap_or_else(|| exp["replay"]["cluster"].as_str().expect("cluster"));
    let out = Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--no-progress", "--quiet", "--cluster", cluster, "--reorder-window"])
        .arg(exp["replay"]["reorderWindow"].as_str().expect("window"))
        .arg("--history")
        .arg(db)
        .arg(fixture(&format!("{scenario}.jsonl")))
        .output()
        .expect("run replay");
    assert!(out.status.success(), "replay --history of {scenario}: {}", String::from_utf8_lossy(&out.stderr));
}

fn why_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .current_dir(dir)
        .arg("why")
        .args(args)
        .env_remove("KAUSALITY_QUERY_TOKEN")
        .output()
        .expect("run why")
}

fn text(out: &Output) -> String {
    assert!(out.status.success(), "why failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

fn failure(out: &Output) -> String {
    assert!(!out.status.success(), "why should fail, printed: {}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr.clone()).expect("utf-8")
}

/// The lines of `text` that contain all of `parts`.
fn lines_with<'a>(text: &'a str, parts: &[&str]) -> Vec<&'a str> {
    text.lines().filter(|l| parts.iter().all(|p| l.contains(p))).collect()
}

/// The write headings of a rendered story (time, class, verb, user), keyed by the auditID
/// printed under each.
fn writes(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = None;
    for l in text.lines() {
        if l.starts_with("20") {
            heading = Some(l.to_string());
        } else if let (Some(h), Some(id)) = (&heading, l.trim_start().strip_prefix("auditID")) {
            out.push((id.trim().to_string(), h.clone()));
            heading = None;
        }
    }
    out
}

#[test]
fn the_replicaset_a_person_scaled_shows_the_scale_and_the_drift_that_reverted_it() {
    let dir = scratch("scale");
    fill(&dir.join("kausality-history.db"), "cluster-day", None);
    let truth = expected("cluster-day");
    // The default store of the working directory.
    let out = text(&why_in(&dir, &["replicaset/web-79969874f7", "-n", "cluster-day"]));
    assert_eq!(out.lines().next(), Some("ReplicaSet cluster-day/web-79969874f7"), "{out}");
    assert_eq!(lines_with(&out, &["owner", "Deployment/web"]).len(), 1, "{out}");
    let ws: BTreeMap<String, String> = writes(&out).into_iter().collect();
    // Alice's scale: an origin, by alice, through /scale, and what undid it.
    assert_eq!(truth["classes"][ALICE_SCALE], "origin");
    assert!(ws[ALICE_SCALE].contains("  origin  patch scale  by alice"), "{out}");
    assert_eq!(
        lines_with(&out, &["undone", &format!("by {DC}"), "drift", &format!("auditID {SCALE_BACK}")]).len(),
        1,
        "{out}"
    );
    // The deployment controller's scale-back: a drift, unresolved, reverting alice's scale.
    assert_eq!(truth["classes"][SCALE_BACK], "drift");
    assert!(truth["reverts"][SCALE_BACK].as_array().unwrap().iter().any(|a| a == ALICE_SCALE));
    assert!(ws[SCALE_BACK].contains(&format!("  drift  update  by {DC}")), "{out}");
    assert_eq!(lines_with(&out, &["class", "drift, unresolved"]).len(), 1, "{out}");
    assert_eq!(lines_with(&out, &["reverts", "alice's patch", &format!("auditID {ALICE_SCALE}")]).len(), 1, "{out}");
    assert_eq!(lines_with(&out, &["spec.replicas: 12 → 14, put back"]).len(), 1, "{out}");
    // Newest last: the scale, then the scale-back, in the order of the headings.
    let order: Vec<String> =
        writes(&out).into_iter().map(|(id, _)| id).filter(|id| id == ALICE_SCALE || id == SCALE_BACK).collect();
    assert_eq!(order, [ALICE_SCALE, SCALE_BACK]);
    // The rollout that created it: its chain back to the person who changed the Deployment.
    let create = writes(&out).into_iter().find(|(_, h)| h.contains("  create  ")).expect("its create");
    assert!(create.1.contains(&format!("expected  create  by {DC}")), "{out}");
    assert!(!lines_with(&out, &["trace", "Deployment/web gen", "by kubernetes-admin"]).is_empty(), "{out}");
    assert!(
        !lines_with(&out, &["parent", "Deployment/web: generation 2, observed 2 (status), finished, initialized"])
            .is_empty(),
        "{out}"
    );
    // Its children's drift: the pods the ReplicaSet replaced during the drain.
    let tree = out.split("children with drift").nth(1).expect("children with drift");
    assert!(lines_with(tree, &["Pod/web-79969874f7-", "drift 1", RSC]).len() >= 2, "{tree}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pod_a_person_deleted_and_its_replacement_tell_each_other() {
    let dir = scratch("delete");
    let db = dir.join("h.db");
    fill(&db, "cluster-day", None);
    let db = db.to_str().unwrap();
    let out = text(&why_in(&dir, &["pod/api-67fbcbbf8c-2g9sp", "--history", db]));
    assert_eq!(lines_with(&out, &["deleted", "by alice", &format!("auditID {ALICE_DELETE}")]).len(), 1, "{out}");
    let ws: BTreeMap<String, String> = writes(&out).into_iter().collect();
    assert!(ws[ALICE_DELETE].contains("  origin  delete  by alice"), "{out}");
    assert_eq!(
        lines_with(
            &out,
            &["undone", &format!("by {RSC}"), &format!(": drift of Pod/api-67fbcbbf8c-kcdnh  auditID {REPLACEMENT}")]
        )
        .len(),
        1,
        "{out}"
    );
    let out =
        text(&why_in(&dir, &["Pods/api-67fbcbbf8c-kcdnh", "--history", db, "-n", "cluster-day", "--cluster", "e2e"]));
    let ws: BTreeMap<String, String> = writes(&out).into_iter().collect();
    assert!(ws[REPLACEMENT].contains(&format!("  drift  create  by {RSC}")), "{out}");
    assert_eq!(
        lines_with(
            &out,
            &["reverts", "alice's delete of Pod/api-67fbcbbf8c-2g9sp", &format!("auditID {ALICE_DELETE}")]
        )
        .len(),
        1,
        "{out}"
    );
    // The namespace teardown took it down later: a deletecollection item, of kind Pod.
    assert!(
        ws.values()
            .any(|h| h
                .contains("  deleting  deletecollection  by system:serviceaccount:kube-system:namespace-controller")),
        "{out}"
    );
    // The ReplicaSet shows the replacement in its tree.
    let out = text(&why_in(&dir, &["replicasets.apps/api-67fbcbbf8c", "--history", db]));
    let tree = out.split("children with drift").nth(1).expect("children with drift");
    assert_eq!(
        lines_with(tree, &["Pod/api-67fbcbbf8c-kcdnh", "drift 1", RSC, "(unresolved)", "deleted"]).len(),
        1,
        "{tree}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The truth's class of an enriched event of the store (a deletecollection item by
/// auditID/uid).
fn truth_key(e: &Value) -> String {
    let id = e["auditID"].as_str().expect("auditID");
    if e["verb"] == "deletecollection" {
        format!("{id}/{}", e["object"]["uid"].as_str().unwrap_or(""))
    } else {
        id.to_string()
    }
}

/// Every object of every fixture: its story holds each of its writes with the class its
/// expectations give, in time order, and renders each one; every drift the truth says undoes
/// a write shows in that write's `revertedBy`.
#[test]
fn every_objects_story_agrees_with_its_fixture() {
    let dir = scratch("all");
    let mut scenarios: Vec<String> = std::fs::read_dir(fixture(""))
        .unwrap()
        .filter_map(|e| {
            e.unwrap().file_name().to_str().and_then(|n| n.strip_suffix(".expected.json")).map(str::to_string)
        })
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 9, "{scenarios:?}");
    let mut stories = 0;
    for scenario in &scenarios {
        let db = dir.join(format!("{scenario}.db"));
        fill(&db, scenario, None);
        let exp = expected(scenario);
        let conn = history::open(&db, Mode::Read).unwrap();
        let uids: Vec<String> = conn
            .prepare("SELECT uid FROM objects")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!uids.is_empty(), "{scenario}: an empty store");
        // auditID of a drift → the origin writes its story says it undid.
        let mut undone: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut seen = 0;
        for uid in &uids {
            let s: Story =
                story::build(&conn, &StoryQuery { uid: Some(uid.clone()), ..StoryQuery::default() }).unwrap();
            let text = why::render(&s, why::Style { color: false });
            let mut last = String::new();
            for w in &s.writes {
                let e: Value = serde_json::from_str(w.event.get()).unwrap();
                let key = truth_key(&e);
                let class = e["class"].as_str().unwrap();
                assert_eq!(exp["classes"][&key].as_str(), Some(class), "{scenario}: {key} in the story of {uid}");
                let t = e["stageTimestamp"].as_str().unwrap().to_string();
                assert!(t >= last, "{scenario}: {uid}: writes out of order");
                last = t;
                let heading =
                    writes(&text).into_iter().find(|(id, _)| *id == *e["auditID"].as_str().unwrap()).map(|(_, h)| h);
                assert!(
                    heading.is_some_and(|h| h.contains(&format!("  {class}  ")) && h.contains(e["user"].as_str().unwrap())),
                    "{scenario}: {key} not rendered:\n{text}"
                );
                for by in &w.reverted_by {
                    undone.entry(by.audit_id.clone()).or_default().push(e["auditID"].as_str().unwrap().to_string());
                }
                seen += 1;
            }
            stories += 1;
        }
        // Every classified write of the truth is in some story.
        assert_eq!(seen, exp["classes"].as_object().unwrap().len(), "{scenario}: writes in stories vs. the truth");
        for (drift, listed) in exp["reverts"].as_object().into_iter().flatten() {
            let listed: Vec<&str> = listed.as_array().unwrap().iter().filter_map(Value::as_str).collect();
            let shown = undone.get(drift).cloned().unwrap_or_default();
            if listed.is_empty() {
                assert!(shown.is_empty(), "{scenario}: {drift} undoes nobody, shown undoing {shown:?}");
            } else {
                assert!(
                    listed.iter().any(|o| shown.iter().any(|s| s == o)),
                    "{scenario}: {drift} undoes one of {listed:?}, shown undoing {shown:?}"
                );
            }
        }
    }
    assert!(stories >= 200, "{stories} stories");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_output_is_the_story() {
    let dir = scratch("json");
    let db = dir.join("h.db");
    fill(&db, "manual-scale", None);
    let conn = history::open(&db, Mode::Read).unwrap();
    let uid: String =
        conn.query_row("SELECT uid FROM objects WHERE kind = 'ReplicaSet' LIMIT 1", [], |r| r.get(0)).unwrap();
    let out = text(&why_in(&dir, &["--uid", &uid, "--history", db.to_str().unwrap(), "-o", "json"]));
    assert_eq!(out.lines().count(), 1, "one line");
    let got: Value = serde_json::from_str(&out).unwrap();
    let want = serde_json::to_value(
        story::build(&conn, &StoryQuery { uid: Some(uid.clone()), ..StoryQuery::default() }).unwrap(),
    )
    .unwrap();
    assert_eq!(got, want);
    assert_eq!(got["object"]["kind"], "ReplicaSet");
    assert!(got["writes"].as_array().unwrap().iter().any(|w| w["event"]["class"] == "drift"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn messages_for_a_question_without_a_story() {
    let dir = scratch("messages");
    let db = dir.join("h.db");
    // The same scenario in two clusters: the same names twice.
    fill(&db, "manual-scale", Some("east"));
    fill(&db, "manual-scale", Some("west"));
    let db = db.to_str().unwrap();
    let conn = history::open(Path::new(db), Mode::Read).unwrap();
    let (ns, name): (String, String) = conn
        .query_row("SELECT namespace, name FROM objects WHERE kind = 'Deployment' LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let from = story::oldest_us(&conn).unwrap().map(kausality_stream::decode::time::format_rfc3339_micros).unwrap();

    let e = failure(&why_in(&dir, &["deployment/nope", "-n", &ns, "--history", db]));
    assert_eq!(e.trim(), format!("error: no deployment {ns}/nope in the history store (it keeps from {from})"));

    let obj = format!("deployment/{name}");
    let e = failure(&why_in(&dir, &[&obj, "--history", db]));
    assert!(e.starts_with(&format!("error: 2 objects match deployment {name} in any namespace; pick one with --cluster CLUSTER (or --uid UID):")), "{e}");
    assert_eq!(
        lines_with(&e, &["cluster east", &format!("namespace {ns}"), &format!("Deployment {name}"), "uid "]).len(),
        1,
        "{e}"
    );
    assert_eq!(lines_with(&e, &["cluster west"]).len(), 1, "{e}");
    // The flag it names picks one.
    let out = text(&why_in(&dir, &[&obj, "--history", db, "--cluster", "west"]));
    assert!(out.contains("cluster west"), "{out}");

    for at in ["2000-01-01T00:00:00Z", "100000d"] {
        let e = failure(&why_in(&dir, &[&obj, "--cluster", "east", "--history", db, "--at", at]));
        assert!(e.starts_with(&format!("error: the history store reaches back to {from} only")), "{e}");
    }
    // From the oldest time on, the story up to then.
    let out = text(&why_in(&dir, &[&obj, "--cluster", "east", "--history", db, "--at", &from]));
    assert!(out.contains(&format!("as of {from}")), "{out}");

    let e = failure(&why_in(&dir, &["pod/x", "--history", "/nonexistent/h.db"]));
    assert!(e.contains("history store /nonexistent/h.db does not exist") && e.contains("replay --history"), "{e}");
    // Without --history: the default file of the working directory.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = failure(&why_in(&empty, &["pod/x"]));
    assert!(e.contains("history store kausality-history.db does not exist"), "{e}");

    // Arguments the command cannot take.
    for (args, says) in [
        (vec!["pod"], "expected KIND/NAME"),
        (vec!["pod/x", "--at", "yesterday"], "expected an RFC 3339 time"),
        (vec![], "KIND/NAME"),
        (vec!["pod/x", "--history", "a.db", "--server", "http://127.0.0.1:1"], "cannot be used with"),
    ] {
        let out = why_in(&dir, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(says), "{args:?}: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Serves `answers` in turn on loopback, one request each (a stand-in for the query API);
/// hands back the requests' first lines.
fn stand_in(answers: Vec<(u16, String)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, body) in answers {
            let (mut conn, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            seen.push(String::from_utf8_lossy(&req).lines().next().unwrap_or("").to_string());
            let resp = format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            conn.write_all(resp.as_bytes()).unwrap();
        }
        seen
    });
    (url, handle)
}

#[test]
fn a_server_answer_renders_as_the_store_does() {
    let dir = scratch("server");
    let db = dir.join("h.db");
    fill(&db, "cluster-day", None);
    let db = db.to_str().unwrap();
    let local_text = text(&why_in(&dir, &["replicaset/web-79969874f7", "--history", db]));
    let local_json = text(&why_in(&dir, &["replicaset/web-79969874f7", "--history", db, "-o", "json"]));
    let local_not_found = failure(&why_in(&dir, &["pod/nope", "--history", db]));
    let conn = history::open(Path::new(db), Mode::Read).unwrap();
    let candidates: Vec<story::ObjectRef> = ["web-79969874f7", "api-67fbcbbf8c"]
        .iter()
        .map(|n| {
            story::build(
                &conn,
                &StoryQuery { kind: "ReplicaSet".into(), name: Some(n.to_string()), ..StoryQuery::default() },
            )
            .unwrap()
            .object
        })
        .collect();
    let q = StoryQuery { kind: "replicaset".into(), name: Some("web-79969874f7".into()), ..StoryQuery::default() };
    let conflict = serde_json::json!({"error": "ambiguous", "candidates": candidates}).to_string();
    let not_found = serde_json::json!({"error": local_not_found.trim().trim_start_matches("error: ")}).to_string();
    let (url, handle) = stand_in(vec![
        (200, local_json.trim().to_string()),
        (409, conflict),
        (404, not_found),
        (401, r#"{"error":"no credentials"}"#.into()),
    ]);
    let served = text(&why_in(&dir, &["replicaset/web-79969874f7", "--server", &url, "--at", "2026-11-24T16:00:00Z"]));
    assert_eq!(served, local_text);
    let e = failure(&why_in(&dir, &["replicaset/web-79969874f7", "--server", &url]));
    assert_eq!(e.trim(), format!("error: {}", story::ambiguous_message(&q, &candidates)));
    let e = failure(&why_in(&dir, &["pod/nope", "--server", &url]));
    assert_eq!(e, local_not_found, "a 404 says what the store says");
    let e = failure(&why_in(&dir, &["pod/nope", "--server", &url]));
    assert!(e.contains("HTTP 401: no credentials") && e.contains("KAUSALITY_QUERY_TOKEN"), "{e}");
    let requests = handle.join().unwrap();
    assert_eq!(
        requests[0],
        "GET /v1/why?kind=replicaset&name=web-79969874f7&at=2026-11-24T16%3A00%3A00.000000Z HTTP/1.1"
    );
    assert_eq!(requests[2], "GET /v1/why?kind=pod&name=nope HTTP/1.1");
    // Nobody listening.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = failure(&why_in(&dir, &["pod/x", "--server", &format!("http://127.0.0.1:{port}")]));
    assert!(e.contains(&format!("cannot ask http://127.0.0.1:{port}/v1/why")), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_https_query_api_with_client_certificates_is_asked_with_ca_cert_and_key() {
    let dir = scratch("tls");
    let db = dir.join("h.db");
    fill(&db, "cluster-day", None);
    let pki = pki::pki(dir.clone());
    let file = |name: &str| pki.dir.join(name).to_str().unwrap().to_string();
    let tls =
        format!("cert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"", file("tls.crt"), file("tls.key"), file("ca.crt"));
    let toml = Pipeline::webhook().query(&format!("history = \"{}\"", db.display())).section("query.tls", &tls).toml();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let running = rt.block_on(async {
        kausality_stream::pipeline::start(kausality_stream::pipeline::load_str("q.toml", &toml).unwrap()).await.unwrap()
    });
    let url = format!("https://127.0.0.1:{}", running.query_addr.expect("the query API listens").port());
    let rs = "replicaset/web-79969874f7";
    let local = text(&why_in(&dir, &[rs, "--history", db.to_str().unwrap()]));
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));

    let served = text(&why_in(&dir, &[rs, "--server", &url, "--ca", &ca, "--cert", &cert, "--key", &key]));
    assert_eq!(served, local, "the story over HTTPS with a client certificate");
    // No client certificate: refused in the handshake.
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--ca", &ca]));
    assert!(e.contains(&format!("cannot ask {url}/v1/why")), "{e}");
    // The server's certificate is from a CA the system does not know.
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--cert", &cert, "--key", &key]));
    assert!(e.contains(&format!("cannot ask {url}/v1/why")) && e.to_lowercase().contains("certificate"), "{e}");
    // What cannot be used is said before anything is asked.
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--cert", &cert]));
    assert!(e.contains("--key"), "a certificate without its key: {e}");
    let e = failure(&why_in(&dir, &[rs, "--history", db.to_str().unwrap(), "--ca", &ca]));
    assert!(e.contains("'--history <HISTORY>' cannot be used with '--ca <FILE>'"), "--ca is for --server: {e}");
    let e = failure(&why_in(&dir, &[rs, "--ca", &ca]));
    assert!(e.contains("--server"), "--ca is for --server: {e}");
    std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--ca", dir.join("empty.pem").to_str().unwrap()]));
    assert!(e.contains("no PEM certificate"), "{e}");
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--ca", dir.join("missing.pem").to_str().unwrap()]));
    assert!(e.contains("cannot read --ca"), "{e}");
    let e = failure(&why_in(&dir, &[rs, "--server", &url, "--ca", &ca, "--cert", &ca, "--key", &ca]));
    assert!(e.contains("not a PEM certificate and its private key"), "{e}");
    running.stop();
    let _ = rt.block_on(running.shutdown());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An `--at` that no RFC 3339 time can write (thousands of years before year 0) or that names
/// an offset or a day that does not exist is a bad argument, not a question about then; and
/// each message is printed once, not again for every error it wraps.
#[test]
fn absurd_at_values_are_refused_and_each_message_is_printed_once() {
    let dir = scratch("absurd-at");
    let db = dir.join("h.db");
    fill(&db, "manual-scale", None);
    let db = db.to_str().unwrap();
    for (at, says) in [
        ("99999999999d", "\"99999999999d\" is too long ago: --at reaches back to 0000-01-01T00:00:00Z at most"),
        ("1e308d", "expected an RFC 3339 time"),
        ("2024-05-01T10:00:00+25:00", "\"2024-05-01T10:00:00+25:00\" has the UTC offset +25:00, which is no offset"),
        ("2023-02-29T10:00:00Z", "names day 29, but 2023-02 has 28 days"),
    ] {
        let out = why_in(&dir, &["pod/x", "--history", db, "--at", at]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{at}: {e}");
        assert!(e.contains(says), "{at}: {e}");
        assert_eq!(e.matches(says).count(), 1, "{at}: {e}");
    }
    // A file that is not a store: SQLite's words once.
    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "not a database, just some words that are long enough to be a header").unwrap();
    let e = failure(&why_in(&dir, &["pod/x", "--history", foreign.to_str().unwrap()]));
    assert_eq!(e.trim(), format!("error: history store {}: file is not a database", foreign.display()));
    std::fs::remove_dir_all(&dir).unwrap();
}
