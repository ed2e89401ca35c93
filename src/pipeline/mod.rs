//! A pipeline: sources → processor task → sinks, joined by bounded queues, plus the metrics
//! listener, the state snapshot and a graceful, bounded shutdown.
//!
//! ```text
//!  webhook ─┐                       ┌─▶ jsonl
//!  file ────┼─▶ intake ─▶ processor ┼─▶ http          (one bounded queue per sink)
//!           │   (bounded)  (thread) └─▶ drift_report
//!  fetch ───┘ (fetched parents)  │
//!      ▲                         └─ snapshot (periodic, on stop)
//!      └──── unknown-parent events
//! ```
//!
//! - [`config`]: the pipeline file's structs; [`load`]: reading it with every error at once.
//! - [`processor`]: the task that classifies; [`snapshot`]: the state file.
//! - [`health`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`start`] wires it all and returns a [`Running`] pipeline; [`Running::shutdown`] stops it:
//!   readiness off, intake closed (the webhook answers 503 + Retry-After), queued bodies
//!   drained, reorder buffer flushed, sinks flushed, snapshot written, all within
//!   `options.shutdown_timeout`.

pub mod config;
pub mod health;
pub mod load;
pub mod processor;
pub mod snapshot;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub use config::PipelineConfig;
pub use load::{load_file, load_policies, load_str, model_policies};

use crate::classify::{Engine, EngineOptions};
use crate::config::progress::{Comparison, ConditionReason};
use crate::config::ModelConfig;
use crate::decode::DecodeOptions;
use crate::metrics::Metrics;
use crate::process::{Clock, Processor, ProcessorOptions};
use crate::scope::{LabelSelector, Scope};
use crate::shell::{ConfigErrors, Observed};
use crate::sinks::{self, SinkConfig, SinkContext, SinkHandle};
use crate::sources::{self, SourceConfig};
use crate::status::Status;
use health::Health;
use processor::{ProcessorTask, Summary};

/// The embedded default pipeline (`pipelines/default.toml`): webhook on 127.0.0.1:8080 (plain
/// HTTP), JSON lines on stdout, metrics on 127.0.0.1:9090, the history store and a snapshot in
/// the working directory.
pub const DEFAULT_PIPELINE: &str = include_str!("../../pipelines/default.toml");

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    #[error(transparent)]
    Listen(#[from] crate::listen::Error),
    #[error(transparent)]
    Webhook(#[from] sources::webhook::Error),
    #[error(transparent)]
    Sink(#[from] sinks::Error),
    #[error(transparent)]
    Query(#[from] crate::query::Error),
    #[cfg(feature = "fetch")]
    #[error(transparent)]
    Fetch(#[from] crate::fetch::Error),
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    KafkaSource(#[from] sources::kafka::consumer::Error),
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Changelog(#[from] sources::kafka::changelog::Error),
    #[error("cannot start the processor thread: {0}")]
    Thread(std::io::Error),
}

/// Longest a Kafka transaction call (send offsets, commit, abort) may block.
#[cfg(feature = "kafka")]
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

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
    pub metrics_addr: SocketAddr,
    /// Bound address of the query API, when `[query]` is present.
    pub query_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
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

    pub async fn shutdown(self) -> Outcome {
        self.stop();
        self.wait().await
    }
}

fn model_config(cfg: &PipelineConfig) -> ModelConfig {
    let mut model = ModelConfig::default();
    for ig in &cfg.ignore {
        for p in &ig.paths {
            model.ignore_field(&ig.kind, p);
        }
    }
    model.untracked_field_kinds = cfg.options.revert_untracked_kinds.clone();
    // Checked by `load`.
    if let Err(e) = load::model_policies(&cfg.policies, &mut model) {
        tracing::error!(error = %e, "platform policies left out");
    }
    for lc in &cfg.lifecycle {
        model.lifecycle.insert(lc.kind.clone(), lc.signals.clone());
    }
    // Checked by `load`: what does not parse was refused there.
    for ip in &cfg.in_progress {
        let conditions = ip.conditions.iter().filter_map(|c| ConditionReason::parse(c).ok()).collect();
        let fields = ip.fields.iter().filter_map(|f| Comparison::parse(f).ok()).collect();
        model.add_progress(&ip.kind, conditions, fields, ip.builtin);
    }
    model
}

fn scope(cfg: &PipelineConfig) -> Option<Arc<Scope>> {
    let s = &cfg.scope;
    let set = |v: &Vec<String>| v.iter().map(|g| if g.is_empty() { "core".to_string() } else { g.clone() }).collect();
    let scope = Scope {
        include_groups: set(&s.include_groups),
        exclude_groups: set(&s.exclude_groups),
        include_resources: s.include_resources.iter().cloned().collect(),
        exclude_resources: s.exclude_resources.iter().cloned().collect(),
        include_namespaces: s.include_namespaces.iter().cloned().collect(),
        exclude_namespaces: s.exclude_namespaces.iter().cloned().collect(),
        // Checked by `load`.
        labels: s.label_selector.as_deref().and_then(|l| LabelSelector::parse(l).ok()).unwrap_or_default(),
    };
    (!scope.is_everything()).then(|| Arc::new(scope))
}

/// The ingest tier's producer and what it routes with, when the pipeline has a `kafka_route`
/// sink (its only sink, behind webhooks only: checked by `load`).
fn route_intake(cfg: &PipelineConfig, metrics: &Arc<Metrics>) -> Result<Option<sources::webhook::RouteIntake>, Error> {
    let Some(rc) = cfg.sinks.iter().find_map(|s| match s {
        SinkConfig::KafkaRoute(r) => Some(r),
        _ => None,
    }) else {
        return Ok(None);
    };
    #[cfg(feature = "kafka")]
    {
        let producer = sinks::kafka_route::producer::RouteProducer::new(rc, metrics.clone())?;
        let decode = DecodeOptions { max_record_bytes: cfg.options.max_record_bytes, ..DecodeOptions::default() };
        Ok(Some(sources::webhook::RouteIntake { producer, decode, scope: scope(cfg) }))
    }
    #[cfg(not(feature = "kafka"))]
    {
        let _ = (rc, metrics);
        Err(sinks::Error::Kafka("this binary was built without the `kafka` feature".into()).into())
    }
}

/// Starts every part of the pipeline; returns once sources listen and state is restored.
pub async fn start(cfg: PipelineConfig) -> Result<Running, Error> {
    // Kinds the pipeline names are written as themselves in metric labels; others as `other`.
    let named = cfg.ignore.iter().map(|i| &i.kind).chain(cfg.lifecycle.iter().map(|l| &l.kind)).chain(cfg.in_progress.iter().map(|p| &p.kind));
    let named = named.chain(&cfg.metrics.kinds);
    let metrics = Arc::new(Metrics::with_kinds(named));
    // Series that exist from the start, at zero, so that rates work from the first scrape.
    for phase in ["detected", "resolved"] {
        metrics.drift_reports.with_label_values(&[phase]);
    }
    metrics.connections_refused.with_label_values(&["metrics"]);
    metrics.snapshot_failures.inc_by(0);
    for s in &cfg.sources {
        metrics.events_received.with_label_values(&[s.kind()]);
        if matches!(s, SourceConfig::Webhook(_)) {
            metrics.webhook_requests.with_label_values(&["200"]);
        }
    }
    let o = &cfg.options;
    let engine_options = EngineOptions {
        max_objects: o.max_objects,
        tombstone_ttl_us: o.tombstone_ttl.as_micros_i64(),
        max_trace_hops: o.max_trace_hops,
        revert_horizon_us: o.revert_horizon.as_micros_i64(),
        contents_max_entries: o.revert_contents_max_entries,
        contents_max_bytes: o.revert_contents_max_bytes,
    };
    let engine = Arc::new(Engine::new(model_config(&cfg), engine_options));
    let popts = ProcessorOptions {
        default_cluster: cfg.cluster.clone(),
        reorder_window_us: o.reorder_window.as_micros_i64(),
        reorder_max_held: o.reorder_max_held,
        max_clusters: o.max_clusters,
        dedupe_capacity: o.dedupe_capacity,
        decode: DecodeOptions { max_record_bytes: o.max_record_bytes, ..DecodeOptions::default() },
        clock: Clock::Arrival,
        scope: scope(&cfg),
    };
    let mut processor = Processor::new(engine.clone(), metrics.clone(), popts);
    // A Kafka source with a changelog keeps the state per partition, in the changelog.
    #[cfg(feature = "kafka")]
    let changelog = start_changelog(&cfg, &engine).await?;
    #[cfg(feature = "kafka")]
    if let Some(c) = &changelog {
        processor.keep_partitions(c.partitions.clone());
    }
    #[cfg(feature = "kafka")]
    let with_changelog = changelog.is_some();
    #[cfg(not(feature = "kafka"))]
    let with_changelog = false;
    let snapshot_path = cfg.state.snapshot.as_ref().filter(|_| !with_changelog);
    if with_changelog && cfg.state.snapshot.is_some() {
        tracing::warn!("[state] snapshot is neither read nor written with a state changelog: each partition's state comes from the changelog");
    }
    // Exactly-once Kafka: the positions the restored state covers.
    #[cfg_attr(not(feature = "kafka"), allow(unused_mut, unused_variables))]
    let mut resume: std::collections::HashMap<(String, i32), i64> = std::collections::HashMap::new();
    if let Some(path) = snapshot_path {
        for stale in snapshot::remove_stale_temporaries(path) {
            tracing::info!(path = %stale.display(), "removed the temporary snapshot file of a process that was killed while writing it");
        }
        match snapshot::restore(path, &mut processor)? {
            Some(r) => {
                tracing::info!(
                    path = %path.display(),
                    bytes = r.stats.bytes,
                    objects = r.stats.content.objects,
                    dedupe_ids = r.stats.content.dedupe_ids,
                    kafka_positions = r.positions.len(),
                    millis = r.stats.millis as u64,
                    "state restored from snapshot"
                );
                resume.extend(r.positions.into_iter().map(|p| ((p.topic, p.partition), p.next)));
            }
            None => tracing::info!(path = %path.display(), "no snapshot yet: starting with empty state"),
        }
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let timeout = cfg.options.shutdown_timeout.0;
    let grace = (timeout / 3).min(Duration::from_secs(5));

    // Kafka sources commit offsets only for delivered outputs (checkpoints); with
    // `exactly_once`, the source and the Kafka sink share one transaction.
    let track = cfg.sources.iter().any(|s| matches!(s, SourceConfig::Kafka(_)));
    #[cfg(feature = "kafka")]
    let transaction = cfg.sources.iter().find_map(|s| match s {
        SourceConfig::Kafka(k) if k.exactly_once => {
            Some((Arc::new(crate::kafka::Transaction::new(k.transactional_id(), TRANSACTION_TIMEOUT)), k.transaction_interval.0))
        }
        _ => None,
    });
    let status = Arc::new(Status::default());
    let ctx = SinkContext {
        metrics: metrics.clone(),
        status: status.clone(),
        engine: engine.clone(),
        queue_capacity: o.sink_queue_capacity,
        #[cfg(feature = "kafka")]
        transaction: transaction.as_ref().map(|(t, _)| t.clone()),
    };
    let mut sink_handles: Vec<SinkHandle> = Vec::new();
    // The ingest tier's sink is fed by the webhook itself.
    let route = route_intake(&cfg, &metrics)?;
    for s in cfg.sinks.iter().filter(|s| !matches!(s, SinkConfig::KafkaRoute(_))) {
        match sinks::spawn(s, &ctx) {
            Ok(h) => sink_handles.push(h),
            Err(e) => {
                drop(sink_handles);
                return Err(e.into());
            }
        }
    }

    let (intake_tx, intake_rx) = mpsc::channel(o.queue_capacity);
    #[cfg_attr(not(feature = "kafka"), allow(unused_variables))]
    let (barrier_tx, barrier_rx) = mpsc::channel(4);
    let fetcher = start_fetch(&cfg, &engine, &metrics, stop_rx.clone()).await?;
    // Sources decode on their own threads, in parallel with classification.
    let decoder = processor.decoder();
    let freshness = processor.freshness().clone();
    let queues = sink_handles.iter().map(|h| (h.kind, h.queue.clone())).collect();
    let mut task = ProcessorTask::new(processor, intake_rx, queues, o.tick_interval.0, stop_rx.clone(), status.clone());
    if let Some((unknown_parents, observe)) = fetcher {
        task = task.fetcher(unknown_parents, observe);
    }
    if let Some(path) = snapshot_path {
        task = task.snapshot(path.clone(), cfg.state.snapshot_interval.0);
    }
    if track {
        task = task.checkpoints(barrier_rx, (timeout / 2).max(Duration::from_secs(1)));
    }
    // Exactly-once: the positions of the last commit go into each snapshot (taken right
    // after a commit), for the silent re-read after a restart.
    #[cfg(feature = "kafka")]
    if let Some((t, every)) = &transaction {
        let committer = t.clone();
        let commit: processor::Committer = Box::new(move || committer.commit().map(|c| c.is_some()).map_err(|e| e.to_string()));
        let t = t.clone();
        let positions: processor::Positions = Box::new(move || {
            t.committed_positions().into_iter().map(|(topic, partition, next)| snapshot::Position { topic: topic.to_string(), partition, next }).collect()
        });
        task = task.transaction(commit, *every, positions);
    }
    #[cfg(feature = "kafka")]
    if let Some((write, every)) = changelog_writer(&cfg, changelog.as_ref(), transaction.as_ref().map(|(t, _)| t.clone())) {
        task = task.changelog(write, every);
    }
    let sink_tasks: Vec<(&'static str, JoinHandle<()>)> = sink_handles.into_iter().map(|h| (h.kind, h.task)).collect();
    let (processor_done_tx, processor_done) = oneshot::channel();
    let rt = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("processor".into())
        .spawn(move || {
            let summary = rt.block_on(task.run());
            let _ = processor_done_tx.send(summary);
        })
        .map_err(Error::Thread)?;

    // From here on, a failure must stop what already runs.
    let fail = |e: Error| {
        stop_tx.send_replace(true);
        e
    };
    let health = Arc::new(Health { metrics: metrics.clone(), ready: Default::default(), status: status.clone() });
    let (health_stop_tx, health_stop_rx) = watch::channel(false);
    let metrics_listener = crate::listen::bind(cfg.metrics.listen).await.map_err(|e| fail(e.into()))?;
    let metrics_addr = metrics_listener.local_addr().unwrap_or(cfg.metrics.listen);
    tracing::info!(addr = %metrics_addr, "metrics listening");
    let health_task = tokio::spawn(crate::listen::serve(
        metrics_listener,
        health::router(health.clone()),
        None,
        health_stop_rx,
        grace,
        crate::listen::Limits::metrics(),
        Some(metrics.clone()),
    ));

    let mut webhook_addrs = Vec::new();
    let mut source_tasks: Vec<JoinHandle<()>> = Vec::new();
    for s in &cfg.sources {
        match s {
            SourceConfig::Webhook(w) => {
                let intake = sources::webhook::Intake { queue: intake_tx.clone(), decoder: decoder.clone(), route: route.clone() };
                let running = sources::webhook::start(w, intake, metrics.clone(), status.clone(), stop_rx.clone(), grace).await.map_err(|e| {
                    health_stop_tx.send_replace(true);
                    fail(e.into())
                })?;
                webhook_addrs.push(running.local_addr);
                source_tasks.push(running.task);
            }
            #[cfg(feature = "kafka")]
            SourceConfig::Kafka(k) => {
                let wiring = sources::kafka::consumer::Wiring {
                    intake: intake_tx.clone(),
                    metrics: metrics.clone(),
                    stop: stop_rx.clone(),
                    barriers: barrier_tx.clone(),
                    transaction: transaction.as_ref().map(|(t, _)| t.clone()),
                    decoder: decoder.clone(),
                    resume: std::mem::take(&mut resume),
                    shutdown_timeout: timeout,
                    changelog: changelog.clone(),
                };
                let t = sources::kafka::consumer::start(k, wiring).map_err(|e| {
                    health_stop_tx.send_replace(true);
                    fail(e.into())
                })?;
                source_tasks.push(tokio::spawn(async move {
                    let _ = t.await;
                }));
            }
            #[cfg(not(feature = "kafka"))]
            SourceConfig::Kafka(_) => unreachable!("refused by the pipeline checks"),
            SourceConfig::File(f) => {
                let t = sources::file::spawn(f.clone(), intake_tx.clone(), metrics.clone());
                source_tasks.push(tokio::spawn(async move {
                    let _ = t.await;
                }));
            }
        }
    }
    let query = match &cfg.query {
        Some(q) => {
            let ctx = crate::query::Context {
                engine: engine.clone(),
                freshness: freshness.clone(),
                metrics: metrics.clone(),
                default_cluster: cfg.cluster.clone(),
                // Default: what the pipeline's history sink writes.
                history: q.history.clone().or_else(|| {
                    cfg.sinks.iter().find_map(|s| match s {
                        sinks::SinkConfig::History(h) => Some(std::path::PathBuf::from(&h.path)),
                        _ => None,
                    })
                }),
            };
            let running = crate::query::start(q, ctx, stop_rx.clone(), grace).await.map_err(|e| {
                health_stop_tx.send_replace(true);
                fail(e.into())
            })?;
            Some(running)
        }
        None => None,
    };
    let query_addr = query.as_ref().map(|q| q.local_addr);
    source_tasks.extend(query.map(|q| q.task));
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(sources = cfg.sources.len(), sinks = cfg.sinks.len(), cluster = %cfg.cluster, "pipeline running");

    let mut stop_wait = stop_rx.clone();
    let stop_all = stop_tx.clone();
    let done = tokio::spawn(async move {
        let mut processor_done = processor_done;
        let early = tokio::select! {
            _ = crate::listen::stopped(&mut stop_wait) => None,
            r = &mut processor_done => Some(r),
        };
        if early.is_some() {
            tracing::error!("the processor task ended on its own; stopping the pipeline");
            stop_all.send_replace(true);
        }
        tracing::info!("shutting down: intake closed, draining");
        health.ready.store(false, Ordering::Relaxed);
        // Keep the pipeline's own intake handle only until now: the file sources may still be
        // feeding, and the processor's queue must not close before stop.
        drop(intake_tx);
        let deadline = tokio::time::Instant::now() + timeout;
        let summary = match early {
            Some(r) => r.ok(),
            None => tokio::time::timeout_at(deadline, processor_done).await.ok().and_then(Result::ok),
        };
        let mut clean = summary.as_ref().is_some_and(|s| !s.failed);
        for (kind, t) in sink_tasks {
            match tokio::time::timeout_at(deadline, t).await {
                Ok(_) => {}
                Err(_) => {
                    clean = false;
                    tracing::error!(sink = kind, "sink did not flush within the shutdown timeout");
                }
            }
        }
        for t in source_tasks {
            if tokio::time::timeout_at(deadline, t).await.is_err() {
                clean = false;
            }
        }
        for sink in status.failing_sinks() {
            clean = false;
            tracing::error!(sink = %sink, "a sink could not write everything it accepted before the stop");
        }
        if let Some(e) = status.snapshot_error() {
            clean = false;
            tracing::error!(error = %e, "the last state snapshot failed: a restart starts from an older one (or none)");
        }
        health_stop_tx.send_replace(true);
        let _ = tokio::time::timeout(grace, health_task).await;
        if let Some(s) = &summary {
            tracing::info!(batches = s.batches, enriched = s.enriched, clean, "pipeline stopped");
        }
        Outcome { clean, processor: summary }
    });
    Ok(Running { webhook_addrs, metrics_addr, query_addr, metrics, engine, freshness, stop: stop_tx, done })
}

/// The state changelog of the pipeline's Kafka source, when it has one on: its topic is
/// created or checked before anything is read.
#[cfg(feature = "kafka")]
async fn start_changelog(cfg: &PipelineConfig, engine: &Arc<Engine>) -> Result<Option<Arc<sources::kafka::changelog::Changelog>>, Error> {
    let Some(k) = cfg.sources.iter().find_map(|s| match s {
        SourceConfig::Kafka(k) if k.changelog_on().is_some() => Some(k),
        _ => None,
    }) else {
        return Ok(None);
    };
    let changelog = sources::kafka::changelog::Changelog::new(k, engine.clone())?;
    changelog.ensure_topic(&k.topics[0]).await?;
    tracing::info!(topic = %changelog.topic, exactly_once = k.exactly_once, "state kept per partition in the changelog");
    Ok(Some(Arc::new(changelog)))
}

/// What the processor calls to write the changelog: into the transaction (exactly-once), or
/// through the changelog's own producer every `transaction_interval`.
#[cfg(feature = "kafka")]
fn changelog_writer(
    cfg: &PipelineConfig,
    changelog: Option<&Arc<sources::kafka::changelog::Changelog>>,
    transaction: Option<Arc<crate::kafka::Transaction>>,
) -> Option<(processor::ChangelogWriter, Duration)> {
    let changelog = changelog?.clone();
    let every = cfg.sources.iter().find_map(|s| match s {
        SourceConfig::Kafka(k) => Some(k.transaction_interval.0),
        _ => None,
    })?;
    let write: processor::ChangelogWriter = Box::new(move || {
        let via = match &transaction {
            // Not ready yet: nothing is committed either; the changes wait for the first commit.
            Some(t) => match t.producer() {
                Some(p) => Some(p.clone()),
                None => return Ok(()),
            },
            None => None,
        };
        let written = changelog.write(via.as_deref())?;
        if written.records + written.tombstones > 0 {
            tracing::debug!(records = written.records, tombstones = written.tombstones, bytes = written.bytes, "state changelog written");
        }
        Ok(())
    });
    Some((write, every))
}

/// With `[unknown_parents] fetch = true`: starts the fetcher; returns where the processor
/// hands it `unknown-parent` events, and where the fetched parents come back.
#[cfg(feature = "fetch")]
async fn start_fetch(cfg: &PipelineConfig, engine: &Arc<Engine>, metrics: &Arc<Metrics>, stop: watch::Receiver<bool>) -> Result<Option<Fetcher>, Error> {
    if !cfg.unknown_parents.fetch {
        return Ok(None);
    }
    let (observe_tx, observe_rx) = mpsc::channel(256);
    let cluster = cfg.unknown_parents.cluster.clone().unwrap_or_else(|| cfg.cluster.clone());
    let unknown_parents = crate::fetch::spawn(&cfg.unknown_parents, cluster, engine.clone(), metrics.clone(), observe_tx, stop).await?;
    Ok(Some((unknown_parents, observe_rx)))
}

#[cfg(not(feature = "fetch"))]
async fn start_fetch(_cfg: &PipelineConfig, _engine: &Arc<Engine>, _metrics: &Arc<Metrics>, _stop: watch::Receiver<bool>) -> Result<Option<Fetcher>, Error> {
    Ok(None)
}

/// The fetcher's ends: where `unknown-parent` events go, where fetched parents come back.
type Fetcher = (mpsc::Sender<Arc<crate::enriched::Enriched>>, mpsc::Receiver<Observed>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::progress::Builtin;

    #[test]
    fn in_progress_entries_reach_the_model() {
        let text = r#"[[sources]]
type = "webhook"
plain_http = true
[[in_progress]]
kind = "Widget.example.com"
conditions = ["Synced=Reconciling"]
[[in_progress]]
kind = "Widget.example.com"
fields = ["status.phase == Updating"]
[[in_progress]]
kind = "Deployment.apps"
builtin = false
[[in_progress]]
kind = "ReplicaSet.apps"
conditions = ["Scaling=Waiting"]
"#;
        let model = model_config(&load::load_str("p.toml", text).unwrap());
        let widget = model.progress("Widget.example.com").expect("signals");
        assert_eq!((widget.builtin, widget.conditions.len(), widget.fields.len()), (None, 1, 1), "entries of one kind add up");
        assert!(model.progress("Deployment.apps").is_none(), "built-ins off, nothing else: finished when observed");
        let rs = model.progress("ReplicaSet.apps").expect("signals");
        assert_eq!((rs.builtin, rs.conditions.len()), (Some(Builtin::ReplicaSet), 1), "added to the built-ins");
        assert_eq!(model.progress("StatefulSet.apps").and_then(|p| p.builtin), Some(Builtin::StatefulSet), "untouched defaults");
    }
}
