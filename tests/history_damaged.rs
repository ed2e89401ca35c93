//! A history store with damaged pages is refused at start with a message that says what to do,
//! or, with `on_damaged = "replace"`, moved aside for a new one: it never starts "ready" and
//! then fails every write.

mod common;
mod serve_support;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use kausality_stream::config::ModelConfig;
use kausality_stream::history::{self, Error, Mode, OnDamaged, Retention, Store};
use kausality_stream::sim::*;

/// A store of 200 config maps' creates, then its pages past the first overwritten with junk.
fn damaged_store(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("h.db");
    let mut api = ApiServer::new();
    let events: Vec<String> = (0..200)
        .map(|i| api.create("alice@example.com", configmap("shop", &format!("cm-{i}"), &[("k", "v")], None)).1)
        .collect();
    let out = common::run_with(ModelConfig::default(), &events);
    let mut store = Store::open(&path, Retention { max_age: Duration::ZERO, max_bytes: 0 }).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    store.checkpoint().unwrap();
    drop(store);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 64 << 10, "a store of several pages: {len}");
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // Page 1 (the schema) stays; the pages after it are junk.
    f.seek(SeekFrom::Start(16384)).unwrap();
    f.write_all(&vec![0xA5; (len - 16384) as usize]).unwrap();
    path
}

#[test]
fn a_damaged_store_is_refused_with_what_to_do_or_moved_aside() {
    let dir = serve_support::temp_dir("damaged");
    let path = damaged_store(&dir);
    let e = match Store::open(&path, Retention::default()) {
        Err(e) => e,
        Ok(_) => panic!("a damaged store was opened for writing"),
    };
    assert!(matches!(e, Error::Damaged { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("is damaged") && msg.contains(".recover") && msg.contains("on_damaged = \"replace\""),
        "{msg}"
    );
    assert!(path.exists(), "refused: left where it is");

    let mut store = Store::open_checked(&path, Retention::default(), OnDamaged::Replace).unwrap();
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("h.db.damaged-"))
        .collect();
    assert_eq!(aside.len(), 1, "moved aside: {aside:?}");
    let mut api = ApiServer::new();
    let out = common::run(&[api.create("bob", configmap("shop", "after", &[], None)).1]);
    assert_eq!(store.write(&[out.as_slice()]).unwrap().mutations, 1, "the new store writes");
    let n: i64 = history::open(&path, Mode::Read)
        .unwrap()
        .query_row("SELECT count(*) FROM mutations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_does_not_start_on_a_damaged_store() {
    let dir = serve_support::temp_dir("damaged-serve");
    let path = damaged_store(&dir);
    let toml = serve_support::Pipeline::webhook().sink("history", &format!("path = \"{}\"", path.display())).toml();
    let cfg = kausality_stream::pipeline::load_str("p.toml", &toml).unwrap();
    let msg = match kausality_stream::pipeline::start(cfg).await {
        Err(e) => e.to_string(),
        Ok(running) => {
            running.shutdown().await;
            panic!("serve started on a damaged store");
        }
    };
    assert!(msg.contains("is damaged") && msg.contains(&path.display().to_string()), "{msg}");
    // With `on_damaged = "replace"` it starts, on a new store.
    let cfg = kausality_stream::pipeline::load_str(
        "p.toml",
        &toml.replace("[metrics]", "on_damaged = \"replace\"\n[metrics]"),
    )
    .unwrap();
    let running = kausality_stream::pipeline::start(cfg).await.expect("starts on a new store");
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
