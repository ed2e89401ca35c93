//! The `kausality-stream serve` process under test: the real binary of the workspace, a
//! pipeline file written for the test (webhook on a free loopback port, plain HTTP; JSON lines
//! to a file; metrics on another free port), stopped with SIGTERM like in production.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{repo_root, CLUSTER};

/// The `kausality-stream` binary: `$KAUSALITY_STREAM_BIN`, else `<target>/debug/kausality-stream`
/// (`$CARGO_TARGET_DIR` or `<repo>/target`). A test binary cannot run `cargo build` itself
/// (cargo holds the build lock while tests run), so scripts/e2e.sh builds it first.
pub fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KAUSALITY_STREAM_BIN") {
        return Ok(PathBuf::from(p));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    let bin = target.join("debug").join("kausality-stream");
    if !bin.is_file() {
        bail!(
            "{} does not exist: build it first with `cargo build -p kausality-stream` (scripts/e2e.sh does)",
            bin.display()
        );
    }
    Ok(bin)
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// The HTTP status of `GET path` on `addr`, or `None` if nothing answers.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

pub struct Serve {
    child: Option<Child>,
    /// Where the API servers POST audit batches.
    pub webhook: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`.
    pub metrics: SocketAddr,
    /// The JSON-lines sink: one enriched event per line.
    pub events: PathBuf,
    /// The process' stderr.
    pub log: PathBuf,
}

impl Serve {
    /// Starts `serve` with its files in `dir` and waits until it is ready.
    ///
    /// `reorder_window` must exceed the API server's `--audit-webhook-batch-max-wait` (1 s
    /// here) when several API servers send batches: a child's write from one server may
    /// otherwise be applied before its parent's write, still in the other server's batch.
    pub fn start(dir: &Path, reorder_window: &str) -> Result<Serve> {
        fs::create_dir_all(dir)?;
        let (webhook, metrics) = (free_port()?, free_port()?);
        let events = dir.join("enriched.jsonl");
        let log = dir.join("serve.log");
        let pipeline = dir.join("pipeline.toml");
        fs::write(
            &pipeline,
            format!(
                r#"# Written by the e2e harness (e2e/src/serve.rs).
cluster = "unnamed"

[options]
reorder_window = "{reorder_window}"

[scope]
exclude_resources = ["leases", "events"]

[[sources]]
type = "webhook"
listen = "{webhook}"
plain_http = true

[[sinks]]
type = "jsonl"
path = "{events}"

[metrics]
listen = "{metrics}"
"#,
                events = events.display()
            ),
        )?;
        let bin = binary()?;
        let child = Command::new(&bin)
            .arg("serve")
            .arg("--pipeline")
            .arg(&pipeline)
            .env("RUST_LOG", std::env::var("KAUSALITY_E2E_SERVE_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        fs::write(dir.join("serve.pid"), child.id().to_string())?;
        let mut serve = Serve { child: Some(child), webhook, metrics, events, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_status(metrics, "/readyz") != Some(200) {
            if let Some(status) = serve.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("kausality-stream serve exited ({status}) before it was ready:\n{}", serve.log_tail(30));
            }
            if Instant::now() > deadline {
                bail!("kausality-stream serve not ready after 30 s:\n{}", serve.log_tail(30));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(serve)
    }

    /// How the service answered the API servers and what it applied late, from its
    /// `/metrics`: a batch refused is sent again seconds later, and its writes may then come
    /// after the writes they preceded.
    pub fn intake(&self) -> String {
        let text = (|| -> Option<String> {
            let mut s = TcpStream::connect_timeout(&self.metrics, Duration::from_secs(1)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            write!(s, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.metrics).ok()?;
            let mut all = String::new();
            s.read_to_string(&mut all).ok()?;
            Some(all)
        })()
        .unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("kausality_webhook_requests_total") || l.starts_with("kausality_late_events_total")
            })
            .collect();
        if lines.is_empty() {
            "the service's /metrics did not answer".to_string()
        } else {
            lines.join("; ")
        }
    }

    /// What the API servers' audit webhook kubeconfig points at.
    pub fn webhook_url(&self) -> String {
        format!("http://{}/audit/{CLUSTER}", self.webhook)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM (a graceful stop: drain, flush the sinks), SIGKILL after 30 s.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("kausality-stream serve exited with {status}:\n{}", self.log_tail(20));
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("kausality-stream serve did not stop within 30 s of SIGTERM: killed");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("e2e: {e:#}");
        }
    }
}
