//! Spawning a built pipeline, in the order the data flows backwards, so that each part finds
//! what it feeds already running: the sinks, the fetcher, the processor thread, then the
//! metrics listener, the sources and the query API. Once the processor runs, a part that
//! cannot start stops those already started.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::build::Parts;
use super::classify_loop::{ClassifyLoop, Summary};
use super::config::PipelineConfig;
use super::durability::Durability;
use super::error::Error;
use super::health::{self, Health};
use crate::classify::Engine;
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::order::Freshness;
use crate::process::Decoder;
use crate::shell::Observed;
use crate::sinks::{self, SinkConfig, SinkContext, SinkHandle};
use crate::sources::{self, Batch, SourceConfig};
use crate::status::Status;

/// The stop every part watches, and how long stopping may take.
pub(super) struct Stop {
    pub tx: Arc<watch::Sender<bool>>,
    pub rx: watch::Receiver<bool>,
    /// `options.shutdown_timeout`: the whole drain, flush and final snapshot.
    pub timeout: Duration,
    /// How long a listener drains its open connections.
    pub grace: Duration,
}

impl Stop {
    pub(super) fn new(cfg: &PipelineConfig) -> Stop {
        let (tx, rx) = watch::channel(false);
        let timeout = cfg.options.shutdown_timeout.0;
        Stop { tx: Arc::new(tx), rx, timeout, grace: (timeout / 3).min(Duration::from_secs(5)) }
    }

    /// Stops what already runs; passes `e` on.
    fn fail(&self, e: Error) -> Error {
        self.tx.send_replace(true);
        e
    }
}

/// A pipeline whose parts all run.
pub(super) struct Spawned {
    /// Bound addresses of the webhook sources, in configuration order.
    pub webhook_addrs: Vec<SocketAddr>,
    pub metrics_addr: SocketAddr,
    pub query_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    pub freshness: Arc<Freshness>,
    pub tasks: Tasks,
}

/// What runs, for [`super::supervise`] to wait for and stop in order.
pub(super) struct Tasks {
    /// The processor's summary, sent when its thread ends.
    pub processor: oneshot::Receiver<Summary>,
    pub sinks: Vec<(&'static str, JoinHandle<()>)>,
    /// The sources' tasks and the query API's.
    pub sources: Vec<JoinHandle<()>>,
    pub health: Arc<Health>,
    pub health_task: JoinHandle<()>,
    pub health_stop: watch::Sender<bool>,
    /// The pipeline's own intake handle, kept until the stop: the file sources may still be
    /// feeding, and the processor's queue must not close before.
    pub intake: mpsc::Sender<Batch>,
    pub status: Arc<Status>,
}

/// Starts every part of a built pipeline; returns once the sources listen.
pub(super) async fn spawn(cfg: &PipelineConfig, parts: Parts, stop: &Stop) -> Result<Spawned, Error> {
    let Parts {
        metrics,
        engine,
        processor,
        status,
        resume,
        #[cfg(feature = "kafka")]
        transaction,
        #[cfg(feature = "kafka")]
        changelog,
    } = parts;
    let ctx = SinkContext {
        metrics: metrics.clone(),
        status: status.clone(),
        engine: engine.clone(),
        queue_capacity: cfg.options.sink_queue_capacity,
        #[cfg(feature = "kafka")]
        transaction: transaction.as_ref().map(|(t, _)| t.clone()),
    };
    // The ingest tier's sink is fed by the webhook itself.
    let route = route_intake(cfg, &metrics, &status)?;
    let sinks = spawn_sinks(cfg, &ctx)?;
    let (intake_tx, intake_rx) = mpsc::channel(cfg.options.queue_capacity);
    #[cfg_attr(not(feature = "kafka"), allow(unused_variables))]
    let (barrier_tx, barrier_rx) = mpsc::channel(4);
    let fetcher = start_fetch(cfg, &engine, &metrics, stop.rx.clone()).await?;
    // Sources decode on their own threads, in parallel with classification.
    let decoder = processor.decoder();
    let freshness = processor.freshness().clone();
    let queues = sinks.iter().map(|h| (h.kind, h.queue.clone())).collect();
    let durability = Durability::for_pipeline(
        cfg,
        barrier_rx,
        stop.timeout,
        status.clone(),
        #[cfg(feature = "kafka")]
        transaction.as_ref(),
        #[cfg(feature = "kafka")]
        changelog.as_ref(),
    );
    let mut task =
        ClassifyLoop::new(processor, intake_rx, queues, cfg.options.tick_interval.0, stop.rx.clone(), durability);
    if let Some((unknown_parents, observe)) = fetcher {
        task = task.fetcher(unknown_parents, observe);
    }
    let processor = spawn_processor(task)?;
    let sinks = sinks.into_iter().map(|h| (h.kind, h.task)).collect();

    // From here on, a failure must stop what already runs.
    let health = Arc::new(Health { metrics: metrics.clone(), ready: Default::default(), status: status.clone() });
    let (health_stop, health_stop_rx) = watch::channel(false);
    let (metrics_addr, health_task) =
        serve_health(cfg, &health, health_stop_rx, stop.grace).await.map_err(|e| stop.fail(e))?;
    let fail = |e: Error| {
        health_stop.send_replace(true);
        stop.fail(e)
    };
    let wiring = SourceWiring {
        intake: &intake_tx,
        decoder: &decoder,
        route,
        metrics: &metrics,
        status: &status,
        stop,
        resume,
        #[cfg(feature = "kafka")]
        barriers: &barrier_tx,
        #[cfg(feature = "kafka")]
        transaction: transaction.as_ref().map(|(t, _)| t.clone()),
        #[cfg(feature = "kafka")]
        changelog,
    };
    let (webhook_addrs, mut sources) = start_sources(cfg, wiring).await.map_err(fail)?;
    let query = start_query(cfg, &engine, &freshness, &metrics, stop).await.map_err(fail)?;
    let query_addr = query.as_ref().map(|q| q.local_addr);
    sources.extend(query.map(|q| q.task));
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(sources = cfg.sources.len(), sinks = cfg.sinks.len(), cluster = %cfg.cluster, "pipeline running");
    let tasks = Tasks { processor, sinks, sources, health, health_task, health_stop, intake: intake_tx, status };
    Ok(Spawned { webhook_addrs, metrics_addr, query_addr, metrics, engine, freshness, tasks })
}

/// Spawns the sinks but the ingest tier's (see [`route_intake`]); on an error, those spawned
/// so far are dropped: their queues close and they end.
fn spawn_sinks(cfg: &PipelineConfig, ctx: &SinkContext) -> Result<Vec<SinkHandle>, Error> {
    cfg.sinks
        .iter()
        .filter(|s| !matches!(s, SinkConfig::KafkaRoute(_)))
        .map(|s| sinks::spawn(s, ctx).map_err(Error::from))
        .collect()
}

/// The ingest tier's producer and what it routes with, when the pipeline has a `kafka_route`
/// sink (its only sink, behind webhooks only: checked by `load`).
fn route_intake(
    cfg: &PipelineConfig,
    metrics: &Arc<Metrics>,
    status: &Arc<Status>,
) -> Result<Option<sources::webhook::RouteIntake>, Error> {
    let Some(rc) = cfg.sinks.iter().find_map(|s| match s {
        SinkConfig::KafkaRoute(r) => Some(r),
        _ => None,
    }) else {
        return Ok(None);
    };
    #[cfg(feature = "kafka")]
    {
        let producer = crate::route::producer::RouteProducer::new(rc, metrics.clone(), status.clone())?;
        let decode = crate::decode::DecodeOptions {
            max_record_bytes: cfg.options.max_record_bytes,
            ..crate::decode::DecodeOptions::default()
        };
        let mut model = crate::config::ModelConfig::default();
        super::load::model_appliers(&cfg.appliers, &mut model);
        Ok(Some(sources::webhook::RouteIntake {
            producer,
            decode,
            scope: super::build::scope(cfg),
            appliers: Arc::new(model.appliers),
        }))
    }
    #[cfg(not(feature = "kafka"))]
    {
        let _ = (rc, metrics, status);
        Err(sinks::Error::Kafka("this binary was built without the `kafka` feature".into()).into())
    }
}

/// Runs the processor task on a thread of its own: classifying is CPU work that must not
/// stall the runtime's workers. Its summary comes on the returned channel when it ends.
fn spawn_processor(task: ClassifyLoop) -> Result<oneshot::Receiver<Summary>, Error> {
    let (done_tx, done) = oneshot::channel();
    let rt = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("processor".into())
        .spawn(move || {
            let summary = rt.block_on(task.run());
            let _ = done_tx.send(summary);
        })
        .map_err(Error::Thread)?;
    Ok(done)
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `health_stop`.
async fn serve_health(
    cfg: &PipelineConfig,
    health: &Arc<Health>,
    health_stop: watch::Receiver<bool>,
    grace: Duration,
) -> Result<(SocketAddr, JoinHandle<()>), Error> {
    let listener = crate::listen::bind(cfg.metrics.listen).await?;
    let addr = listener.local_addr().unwrap_or(cfg.metrics.listen);
    tracing::info!(addr = %addr, "metrics listening");
    let task = tokio::spawn(crate::listen::serve(
        listener,
        health::router(health.clone()),
        None,
        health_stop,
        grace,
        crate::listen::Limits::metrics(),
        Some(health.metrics.clone()),
    ));
    Ok((addr, task))
}

/// What the sources are given.
struct SourceWiring<'a> {
    intake: &'a mpsc::Sender<Batch>,
    decoder: &'a Decoder,
    /// The ingest tier: where the webhook produces instead of queueing.
    route: Option<sources::webhook::RouteIntake>,
    metrics: &'a Arc<Metrics>,
    status: &'a Arc<Status>,
    stop: &'a Stop,
    /// Exactly-once Kafka: the positions the restored state covers (for the Kafka source).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    resume: HashMap<(String, i32), i64>,
    #[cfg(feature = "kafka")]
    barriers: &'a mpsc::Sender<crate::shell::Barrier>,
    #[cfg(feature = "kafka")]
    transaction: Option<Arc<crate::kafka::Transaction>>,
    #[cfg(feature = "kafka")]
    changelog: Option<Arc<crate::changelog::Changelog>>,
}

/// Starts the sources in configuration order; returns the webhooks' addresses and every
/// source's task.
#[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
async fn start_sources(
    cfg: &PipelineConfig,
    mut w: SourceWiring<'_>,
) -> Result<(Vec<SocketAddr>, Vec<JoinHandle<()>>), Error> {
    let mut webhook_addrs = Vec::new();
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    for s in &cfg.sources {
        match s {
            SourceConfig::Webhook(wh) => {
                let intake = sources::webhook::Intake {
                    queue: w.intake.clone(),
                    decoder: w.decoder.clone(),
                    route: w.route.clone(),
                };
                let running = sources::webhook::start(
                    wh,
                    intake,
                    w.metrics.clone(),
                    w.status.clone(),
                    w.stop.rx.clone(),
                    w.stop.grace,
                )
                .await?;
                webhook_addrs.push(running.local_addr);
                tasks.push(running.task);
            }
            #[cfg(feature = "kafka")]
            SourceConfig::Kafka(k) => {
                let wiring = sources::kafka::consumer::Wiring {
                    intake: w.intake.clone(),
                    metrics: w.metrics.clone(),
                    stop: w.stop.rx.clone(),
                    barriers: w.barriers.clone(),
                    transaction: w.transaction.clone(),
                    decoder: w.decoder.clone(),
                    resume: std::mem::take(&mut w.resume),
                    shutdown_timeout: w.stop.timeout,
                    changelog: w.changelog.clone(),
                };
                let t = sources::kafka::consumer::start(k, wiring)?;
                tasks.push(tokio::spawn(async move {
                    let _ = t.await;
                }));
            }
            #[cfg(not(feature = "kafka"))]
            SourceConfig::Kafka(_) => unreachable!("refused by the pipeline checks"),
            SourceConfig::File(f) => {
                let t = sources::file::spawn(f.clone(), w.intake.clone(), w.metrics.clone());
                tasks.push(tokio::spawn(async move {
                    let _ = t.await;
                }));
            }
        }
    }
    Ok((webhook_addrs, tasks))
}

/// Starts the query API, when `[query]` is present.
async fn start_query(
    cfg: &PipelineConfig,
    engine: &Arc<Engine>,
    freshness: &Arc<Freshness>,
    metrics: &Arc<Metrics>,
    stop: &Stop,
) -> Result<Option<crate::query::Running>, Error> {
    let Some(q) = &cfg.query else { return Ok(None) };
    let ctx = crate::query::Context {
        engine: engine.clone(),
        freshness: freshness.clone(),
        metrics: metrics.clone(),
        default_cluster: cfg.cluster.clone(),
        // Default: what the pipeline's history sink writes.
        history: q.history.clone().or_else(|| {
            cfg.sinks.iter().find_map(|s| match s {
                sinks::SinkConfig::History(h) => Some(PathBuf::from(&h.path)),
                _ => None,
            })
        }),
    };
    Ok(Some(crate::query::start(q, ctx, stop.rx.clone(), stop.grace).await?))
}

/// With `[unknown_parents] fetch = true`: starts the fetcher; returns where the processor
/// hands it `unknown-parent` events, and where the fetched parents come back.
#[cfg(feature = "fetch")]
async fn start_fetch(
    cfg: &PipelineConfig,
    engine: &Arc<Engine>,
    metrics: &Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> Result<Option<Fetcher>, Error> {
    if !cfg.unknown_parents.fetch {
        return Ok(None);
    }
    let (observe_tx, observe_rx) = mpsc::channel(256);
    let cluster = cfg.unknown_parents.cluster.clone().unwrap_or_else(|| cfg.cluster.clone());
    let unknown_parents =
        crate::fetch::spawn(&cfg.unknown_parents, cluster, engine.clone(), metrics.clone(), observe_tx, stop).await?;
    Ok(Some((unknown_parents, observe_rx)))
}

#[cfg(not(feature = "fetch"))]
async fn start_fetch(
    _cfg: &PipelineConfig,
    _engine: &Arc<Engine>,
    _metrics: &Arc<Metrics>,
    _stop: watch::Receiver<bool>,
) -> Result<Option<Fetcher>, Error> {
    Ok(None)
}

/// The fetcher's ends: where `unknown-parent` events go, where fetched parents come back.
type Fetcher = (mpsc::Sender<Arc<Enriched>>, mpsc::Receiver<Observed>);
