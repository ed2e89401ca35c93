//! A pipeline: sources → processor task → sinks, joined by bounded queues, plus the metrics
//! listener, the query API, durability and a graceful, bounded shutdown.
//!
//! ```text
//!  classify tier (one process, or many sharing a Kafka topic's partitions)
//!
//!  webhook ─┐                       ┌─▶ jsonl, http, kafka  (one bounded queue per sink)
//!  file ────┤                       ├─▶ drift_report
//!  kafka ───┼─▶ intake ─▶ processor ┴─▶ history ──▶ query API (/v1/verdict from the live
//!           │   (bounded)  (thread)      (SQLite)    state; objects, drift, why from history)
//!  fetch ───┘ (fetched parents)  │  ▲
//!      ▲                         │  └── durability: snapshot file, Kafka checkpoints and
//!      └──── unknown-parent ─────┤      transactions, the changelog's records
//!                                └──▶ changelog: trace messages to other partitions, on the
//!                                     input topic, read back by the kafka source
//!
//!  ingest tier (any number of processes, nothing kept; pipelines with a `kafka_route` sink)
//!
//!  webhook ─▶ route (judged and state-only keys) ─▶ producer ─▶ keyed audit topic ─▶ kafka
//!             (answers once the broker acknowledged every message)      source of the classify tier
//! ```
//!
//! - [`config`]: the pipeline file's structs; [`load`]: reading it with every error at once.
//! - [`classify_loop`]: the task that classifies; [`durability`]: what survives a restart and
//!   when (snapshots, checkpoints, commits, the changelog); [`snapshot_file`]: the state file.
//! - [`health`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`start`] builds the pipeline (`build`: metrics, model, state restored), spawns its parts
//!   (`spawn`: sinks, fetcher, processor, listeners, sources) and returns a [`Running`]
//!   pipeline, supervised until [`Running::shutdown`] stops it: readiness off, intake closed
//!   (the webhook answers 503 + Retry-After), queued bodies drained, reorder buffer flushed,
//!   sinks flushed, snapshot written, all within `options.shutdown_timeout`.

mod build;
pub mod classify_loop;
pub mod config;
pub mod durability;
mod error;
mod flow;
pub mod health;
pub mod load;
pub mod snapshot_file;
mod spawn;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::PipelineConfig;
pub use error::Error;
pub use load::{load_file, load_policies, load_str, model_appliers, model_policies};

use crate::classify::Engine;
use crate::metrics::Metrics;
use crate::sources::SourceConfig;
use crate::status::Status;
use classify_loop::Summary;
use spawn::{Spawned, Stop, Tasks};

/// The embedded default pipeline (`pipelines/default.toml`): webhook on 127.0.0.1:8080 (plain
/// HTTP), JSON lines on stdout, metrics on 127.0.0.1:9090, the history store and a snapshot in
/// the working directory.
pub const DEFAULT_PIPELINE: &str = include_str!("../../pipelines/default.toml");

/// Command-line overrides of a pipeline file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// Replaces `listen` of the first webhook source.
    pub listen: Option<SocketAddr>,
    /// Replaces `metrics.listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// Replaces `query.listen` (and turns the query API on).
    pub query_listen: Option<SocketAddr>,
}

impl Overrides {
    /// Puts the overrides given into `cfg`.
    pub fn apply(&self, cfg: &mut PipelineConfig) {
        if let Some(addr) = self.listen {
            match cfg.sources.iter_mut().find(|s| matches!(s, SourceConfig::Webhook(_))) {
                Some(SourceConfig::Webhook(w)) => w.listen = addr,
                _ => tracing::warn!(%addr, "--listen ignored: the pipeline has no webhook source"),
            }
        }
        if let Some(addr) = self.metrics_listen {
            cfg.metrics.listen = addr;
        }
        if let Some(addr) = self.query_listen {
            cfg.query.get_or_insert_with(Default::default).listen = addr;
        }
    }
}

/// A started pipeline.
pub struct Running {
    /// Bound addresses of the webhook sources, in configuration order.
    pub webhook_addrs: Vec<SocketAddr>,
    /// Bound address of the metrics listener.
    pub metrics_addr: SocketAddr,
    /// Bound address of the query API, when `[query]` is present.
    pub query_addr: Option<SocketAddr>,
    /// The pipeline's metrics.
    pub metrics: Arc<Metrics>,
    /// The live engine.
    pub engine: Arc<Engine>,
    /// How current the live state is, per cluster.
    pub freshness: Arc<crate::order::Freshness>,
    stop: Arc<watch::Sender<bool>>,
    done: JoinHandle<Outcome>,
}

/// How a pipeline ended.
#[derive(Debug)]
pub struct Outcome {
    /// Everything was drained, flushed and saved within the shutdown timeout.
    pub clean: bool,
    /// What the processor did; `None` when it did not end within the shutdown timeout, or
    /// panicked.
    pub processor: Option<Summary>,
}

impl Running {
    /// Begins the graceful shutdown (idempotent).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until the pipeline has stopped (after [`Running::stop`], or an internal failure).
    pub async fn wait(self) -> Outcome {
        self.done.await.unwrap_or(Outcome { clean: false, processor: None })
    }

    /// Resolves when the pipeline is stopping (asked to, or on its own after a failure).
    pub async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        crate::listen::stopped(&mut rx).await
    }

    /// Stops the pipeline and waits until it has stopped.
    pub async fn shutdown(self) -> Outcome {
        self.stop();
        self.wait().await
    }
}

/// Starts every part of the pipeline; returns once sources listen and state is restored.
pub async fn start(cfg: PipelineConfig) -> Result<Running, Error> {
    let parts = build::build(&cfg).await?;
    let stop = Stop::new(&cfg);
    let Spawned { webhook_addrs, metrics_addr, query_addr, metrics, engine, freshness, tasks } =
        spawn::spawn(&cfg, parts, &stop).await?;
    let stop_all = stop.tx.clone();
    let done = tokio::spawn(supervise(tasks, stop));
    Ok(Running { webhook_addrs, metrics_addr, query_addr, metrics, engine, freshness, stop: stop_all, done })
}

/// Waits for the stop (asked for, or the processor ending on its own), then stops the parts
/// in order.
async fn supervise(tasks: Tasks, stop: Stop) -> Outcome {
    let Tasks { processor: mut processor_done, sinks, sources, health, health_task, health_stop, intake, status } =
        tasks;
    let mut stop_wait = stop.rx.clone();
    let early = tokio::select! {
        biased;
        _ = crate::listen::stopped(&mut stop_wait) => None,
        r = &mut processor_done => Some(r),
    };
    // The processor also ends when it sees the stop: only one that ended before any stop was
    // asked for ended on its own (a graceful stop logged it as an error, half the time).
    if early.is_some() && !*stop.rx.borrow() {
        tracing::error!("the processor task ended on its own; stopping the pipeline");
        stop.tx.send_replace(true);
    }
    tracing::info!("shutting down: intake closed, draining");
    health.ready.store(false, Ordering::Relaxed);
    // Keep the pipeline's own intake handle only until now: the file sources may still be
    // feeding, and the processor's queue must not close before stop.
    drop(intake);
    let deadline = tokio::time::Instant::now() + stop.timeout;
    let summary = match early {
        Some(r) => r.ok(),
        None => tokio::time::timeout_at(deadline, processor_done).await.ok().and_then(Result::ok),
    };
    let mut clean = summary.as_ref().is_some_and(|s| !s.failed);
    clean &= drained(sinks, sources, deadline).await;
    clean &= reported_clean(&status);
    health_stop.send_replace(true);
    let _ = tokio::time::timeout(stop.grace, health_task).await;
    if let Some(s) = &summary {
        tracing::info!(batches = s.batches, enriched = s.enriched, clean, "pipeline stopped");
    }
    Outcome { clean, processor: summary }
}

/// Waits until `deadline` for the sinks to flush and the sources to end; true when all did.
async fn drained(
    sinks: Vec<(&'static str, JoinHandle<()>)>,
    sources: Vec<JoinHandle<()>>,
    deadline: tokio::time::Instant,
) -> bool {
    let mut clean = true;
    for (kind, t) in sinks {
        match tokio::time::timeout_at(deadline, t).await {
            Ok(_) => {}
            Err(_) => {
                clean = false;
                tracing::error!(sink = kind, "sink did not flush within the shutdown timeout");
            }
        }
    }
    for t in sources {
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            clean = false;
        }
    }
    clean
}

/// True when no part reported a failure that outlives the stop: a sink that could not write
/// what it accepted, a last snapshot that failed.
fn reported_clean(status: &Status) -> bool {
    let mut clean = true;
    for sink in status.failing_sinks() {
        clean = false;
        tracing::error!(sink = %sink, "a sink could not write everything it accepted before the stop");
    }
    if let Some(e) = status.snapshot_error() {
        clean = false;
        tracing::error!(error = %e, "the last state snapshot failed: a restart starts from an older one (or none)");
    }
    clean
}
