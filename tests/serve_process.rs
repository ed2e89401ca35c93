//! The `kausality-stream` binary as an operator runs it: `serve` stopped by SIGTERM and
//! started again on its snapshot, and `validate`.

mod serve_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::*;

const BIN: &str = env!("CARGO_BIN_EXE_kausality-stream");

struct Serve {
    child: Child,
    webhook: SocketAddr,
    metrics: SocketAddr,
    log: mpsc::Receiver<Value>,
    /// Log lines up to the point where both listeners were up.
    startup: Vec<Value>,
}

impl Serve {
    /// Starts `serve --pipeline FILE` and reads the bound addresses from its JSON log.
    fn start(pipeline: &Path) -> Serve {
        let mut child = Command::new(BIN)
            .args(["--log-format", "json", "serve", "--pipeline"])
            .arg(pipeline)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kausality-stream");
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                } else {
                    eprintln!("stderr: {line}");
                }
            }
        });
        let mut s = Serve {
            child,
            webhook: "0.0.0.0:0".parse().unwrap(),
            metrics: "0.0.0.0:0".parse().unwrap(),
            log,
            startup: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.webhook.port() == 0 || s.metrics.port() == 0 {
            let v = s
                .log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("serve logs its addresses");
            let addr = v["fields"]["addr"].as_str().map(|a| a.parse().unwrap());
            match v["fields"]["message"].as_str() {
                Some("webhook listening") => s.webhook = addr.unwrap(),
                Some("metrics listening") => s.metrics = addr.unwrap(),
                _ => {}
            }
            s.startup.push(v);
        }
        s
    }

    /// The start-up log line whose message is `msg`.
    fn startup_log(&self, msg: &str) -> Option<&Value> {
        self.startup.iter().find(|v| v["fields"]["message"] == msg)
    }

    /// SIGTERM, then the exit code (within 15 s).
    fn terminate(mut self) -> (i32, Vec<Value>) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                return (st.code().unwrap_or(-1), self.log.try_iter().collect());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("serve did not stop within 15 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pipeline_file(dir: &Path) -> PathBuf {
    let path = dir.join("pipeline.toml");
    std::fs::write(
        &path,
        // Long on purpose: the events are still in the reorder buffer when SIGTERM comes.
        Pipeline::webhook()
            .cluster("restart-test")
            .options(r#"reorder_window = "30s""#)
            .jsonl(dir.join("out.jsonl"))
            .section("state", &format!("snapshot = \"{}\"", dir.join("state.snapshot").display()))
            .toml(),
    )
    .unwrap();
    path
}

fn post(addr: SocketAddr, body: Vec<u8>) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new().post(format!("http://{addr}/audit")).body(body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
    })
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn scale_back_again() -> Ev {
    Ev {
        audit_id: "p-ctrl-scales-again".into(),
        verb: "update",
        user: DEPLOY_CTRL.into(),
        resource: "replicasets",
        api_group: "apps",
        subresource: None,
        object: replicaset(4, 1007, 2, None),
        code: 200,
        second: 7,
    }
}

#[test]
fn sigterm_flushes_then_a_restart_restores_the_snapshot() {
    let dir = temp_dir("sigterm");
    let pipeline = pipeline_file(&dir);
    let out = dir.join("out.jsonl");

    let serve = Serve::start(&pipeline);
    assert!(serve.startup_log("no snapshot yet: starting with empty state").is_some(), "{:#?}", serve.startup);
    let r = post(serve.webhook, event_list(&deployment_story("p")));
    assert_eq!(r["events"], 6);
    assert!(lines(&out).is_empty(), "held in the 30 s reorder window");
    let (code, log) = serve.terminate();
    assert_eq!(code, 0, "a graceful stop exits 0: {log:#?}");
    assert!(log.iter().any(|v| v["fields"]["message"] == "state snapshot written"), "{log:#?}");
    let first = lines(&out);
    assert_eq!(first.len(), 4, "the reorder buffer was flushed on SIGTERM: {first:#?}");
    assert_eq!(class_of(&first, "p-ctrl-scales-back"), "drift");
    assert!(dir.join("state.snapshot").is_file());

    // Start again on the snapshot. The API server retries a batch whose answer it missed: the
    // same auditIDs must not be classified twice.
    let serve = Serve::start(&pipeline);
    let restored = serve.startup_log("state restored from snapshot").expect("restore is logged");
    assert_eq!(restored["fields"]["dedupe_ids"], 6, "{restored}");
    assert_eq!(restored["fields"]["objects"], 2, "the Deployment and its ReplicaSet: {restored}");
    let r = post(serve.webhook, event_list(&deployment_story("p")));
    assert_eq!(r["events"], 6);
    let (code, _) = serve.terminate();
    assert_eq!(code, 0);
    assert_eq!(lines(&out).len(), 4, "redelivered events were deduplicated after the restart");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM, restart on the snapshot, and the next write is judged as if nothing happened: the
/// model (who the controller is, the parent's generations) came back from the file.
#[test]
fn after_a_restart_the_next_event_is_classified_as_without_one() {
    let dir = temp_dir("restart-model");
    let pipeline = pipeline_file(&dir);
    let out = dir.join("out.jsonl");
    let serve = Serve::start(&pipeline);
    post(serve.webhook, event_list(&deployment_story("p")));
    assert_eq!(serve.terminate().0, 0);
    let serve = Serve::start(&pipeline);
    post(serve.webhook, event_list(&[scale_back_again()]));
    assert_eq!(serve.terminate().0, 0);
    let all = lines(&out);
    // Uninterrupted, the controller's second scale of a stable parent's child is drift too.
    assert_eq!(class_of(&all, "p-ctrl-scales-again"), "drift", "{all:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn uninterrupted_run_classifies_the_next_event_as_drift() {
    // The reference for the test above: the same events without a restart.
    let dir = temp_dir("uninterrupted");
    let pipeline = pipeline_file(&dir);
    let out = dir.join("out.jsonl");
    let serve = Serve::start(&pipeline);
    post(serve.webhook, event_list(&deployment_story("p")));
    post(serve.webhook, event_list(&[scale_back_again()]));
    assert_eq!(serve.terminate().0, 0);
    assert_eq!(class_of(&lines(&out), "p-ctrl-scales-again"), "drift");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sink that cannot write at all (/dev/full): the accepted batch is held, and the stop that
/// could not write it exits non-zero, saying why.
#[test]
fn a_stop_that_could_not_write_what_was_accepted_exits_non_zero() {
    let dir = temp_dir("dev-full");
    let pipeline = dir.join("pipeline.toml");
    std::fs::write(&pipeline, Pipeline::webhook().jsonl("/dev/full").toml()).unwrap();
    let serve = Serve::start(&pipeline);
    assert_eq!(post(serve.webhook, event_list(&deployment_story("f")[..1]))["events"], 1);
    let (code, log) = serve.terminate();
    assert_ne!(code, 0, "{log:#?}");
    let said = |msg: &str| log.iter().any(|v| v["fields"]["message"] == msg);
    assert!(
        said("jsonl sink cannot write; holding the batch and trying again (the webhook answers 503 meanwhile)"),
        "{log:#?}"
    );
    assert!(said("a sink could not write everything it accepted before the stop"), "{log:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn validate_reports_every_error_of_a_file_at_once() {
    let dir = temp_dir("validate");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        r#"cluster = "c"
[options]
reorder_window = "soon"
queue_capacity = 0
[[sources]]
type = "webhook"
listen = "127.0.0.1:8080"
[[sources]]
type = "webhook"
listen = "127.0.0.1:8080"
plain_http = true
bearer_token_file = "/nonexistent/token"
[[sinks]]
type = "http"
url = "ftp://example"
[[sinks]]
type = "jsonl"
rotate = 5
[metrics]
listen = "127.0.0.1:8080"
"#,
    )
    .unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "[[sources]]\ntype = \"webhook\"\nplain_http = true\n").unwrap();
    let o = Command::new(BIN).arg("validate").arg(&bad).arg(&good).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success());
    for expected in [
        "bad.toml:3: options.reorder_window: \"soon\" is not a duration",
        "sources[0]: no [sources.tls]",
        "sources[1].bearer_token_file: cannot read /nonexistent/token",
        "sources[1].listen: 127.0.0.1:8080 is already used by",
        "sinks[0].url: \"ftp://example\" must be an http:// or https:// URL",
        "sinks[1]: unknown field `rotate`",
        "options.queue_capacity: must be at least 1",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
    assert!(stdout.contains("good.toml: ok"), "{stdout}");
    let o = Command::new(BIN).arg("validate").arg(&good).output().unwrap();
    assert!(o.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shipped_pipelines_have_only_the_keys_serve_knows() {
    // The deploy files name TLS files and directories of the target machine; everything else
    // must be right here.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "pipelines/default.toml",
        "pipelines/webhook-tls.toml",
        "pipelines/ingest.toml",
        "pipelines/classify.toml",
        "deploy/kubernetes/pipeline.toml",
        "deploy/kubernetes/scale-out/ingest/pipeline.toml",
        "deploy/kubernetes/scale-out/classify/pipeline.toml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        if let Err(e) = kausality_stream::pipeline::load_str(file, &text) {
            let real: Vec<_> =
                e.0.iter()
                    .filter(|e| !e.message.starts_with("cannot read") && !e.message.starts_with("directory"))
                    .collect();
            assert!(real.is_empty(), "{file}: {real:#?}");
        }
    }
}
