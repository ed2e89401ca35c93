//! An object written thousands of times is told in pages: the newest writes, how many earlier
//! ones were left out, and the cursor that tells them; by the library, by `/v1/why` and by
//! `why`, the pages together holding every write once, in order.

mod common;
mod serve_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kausality_stream::history::story::{self, StoryQuery};
use kausality_stream::history::{self, Mode, Retention, Store};
use kausality_stream::sim::*;
use serde_json::{json, Value};

const WRITES: usize = 2_500;

/// A config map a person edits `WRITES - 1` times after creating it; the auditIDs in order.
fn store(dir: &Path) -> (std::path::PathBuf, Vec<String>) {
    let path = dir.join("h.db");
    let mut api = ApiServer::new();
    let (cm, first) = api.create("alice@example.com", configmap("shop", "busy", &[("n", "0")], None));
    let mut events = vec![first];
    for i in 1..WRITES {
        events.push(api.update("alice@example.com", &cm, |c| c["data"]["n"] = json!(i.to_string())));
    }
    let ids = events.iter().map(|e| common::audit_id(e)).collect();
    let out = common::run(&events);
    assert_eq!(out.len(), WRITES);
    let mut s = Store::open(&path, Retention { max_age: Duration::ZERO, max_bytes: 0 }).unwrap();
    s.write(&[out.as_slice()]).unwrap();
    (path, ids)
}

fn ids_of(writes: &[Value]) -> Vec<String> {
    writes.iter().map(|w| w["event"]["auditID"].as_str().unwrap().to_string()).collect()
}

#[test]
fn the_library_tells_the_newest_writes_and_pages_back_to_the_first() {
    let dir = serve_support::temp_dir("why-pages");
    let (path, ids) = store(&dir);
    let conn = history::open(&path, Mode::Read).unwrap();
    let mut q = StoryQuery {
        kind: "ConfigMap".into(),
        namespace: Some("shop".into()),
        name: Some("busy".into()),
        limit: Some(1000),
        ..StoryQuery::default()
    };
    let mut pages = Vec::new();
    loop {
        let s = story::build(&conn, &q).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        pages.push(ids_of(v["writes"].as_array().unwrap()));
        match s.earlier {
            Some(e) => {
                assert_eq!(
                    e.writes as usize,
                    WRITES - pages.iter().map(Vec::len).sum::<usize>(),
                    "what is left, exactly"
                );
                q.before = Some(e.before);
            }
            None => break,
        }
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [1000, 1000, 500]);
    assert_eq!(pages[0].last(), ids.last(), "the first page ends with the newest write");
    let all: Vec<String> = pages.into_iter().rev().flatten().collect();
    assert_eq!(all, ids, "every write once, oldest first");
    // Without a limit: the whole story, and no `earlier`.
    let whole = story::build(&conn, &StoryQuery { limit: None, before: None, ..q.clone() }).unwrap();
    assert_eq!((whole.writes.len(), whole.earlier.is_none()), (WRITES, true));
    // A limit above the count: no `earlier` either.
    let all = story::build(&conn, &StoryQuery { limit: Some(5000), before: None, ..q.clone() }).unwrap();
    assert!(all.earlier.is_none() && serde_json::to_value(&all).unwrap().get("earlier").is_none());
    let bad = story::build(&conn, &StoryQuery { before: Some("12".into()), ..q }).unwrap_err();
    assert!(bad.to_string().contains("is not a cursor"), "{bad}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_api_and_why_page_an_object_s_story() {
    let dir = serve_support::temp_dir("why-pages-api");
    let (path, ids) = store(&dir);
    let running = serve_support::start(
        &serve_support::Pipeline::webhook().query(&format!("history = \"{}\"", path.display())).toml(),
    )
    .await;
    let base = format!("http://{}/v1/why?kind=ConfigMap&namespace=shop&name=busy", running.query_addr.unwrap());
    let get = |url: String| async move {
        let r = reqwest::get(url).await.unwrap();
        (r.status().as_u16(), serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).unwrap())
    };
    let (code, v) = get(base.clone()).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["writes"].as_array().unwrap().len(), story::DEFAULT_WRITES, "the default page");
    assert_eq!(v["earlier"]["writes"], (WRITES - story::DEFAULT_WRITES) as u64);
    let before = v["earlier"]["before"].as_str().unwrap().to_string();
    let (code, v) = get(format!("{base}&limit=2000&before={before}")).await;
    assert_eq!(code, 200, "{v}");
    let older = ids_of(v["writes"].as_array().unwrap());
    assert_eq!(older, ids[..WRITES - story::DEFAULT_WRITES], "the rest, oldest first");
    assert!(v.get("earlier").is_none(), "nothing before the first write: {}", v["earlier"]);
    for bad in ["limit=0", "limit=10001", "limit=x", "before=nope"] {
        let (code, v) = get(format!("{base}&{bad}")).await;
        assert_eq!(code, 400, "{bad}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    running.shutdown().await;

    // `why`: the newest page, what it left out, and the command that tells it.
    let why = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
            .arg("why")
            .args(args)
            .arg("--history")
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = why(&["configmap/busy", "-n", "shop", "--limit", "100"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("earlier writes not shown"))
        .unwrap_or_else(|| panic!("says what it left out:\n{text}"));
    assert!(line.starts_with(&format!("{} earlier writes not shown (the newest 100 are)", WRITES - 100)), "{line}");
    assert!(text.contains(ids.last().unwrap()) && !text.contains(&ids[WRITES - 101]), "the newest 100 only");
    let cursor = line.rsplit(' ').next().unwrap();
    let out = why(&["configmap/busy", "-n", "shop", "--limit", "100", "--before", cursor, "--output", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids_of(v["writes"].as_array().unwrap()), ids[WRITES - 200..WRITES - 100]);
    let out = why(&["configmap/busy", "-n", "shop", "--limit", "0"]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("from 1 to 10000"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
