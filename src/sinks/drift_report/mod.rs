//! `[[sinks]] type = "drift_report"`: for each drift, a Kausality `DriftReport` (phase
//! `Detected`) POSTed to every URL, and a second one (phase `Resolved`) when it is over. See
//! [`tracker`] for when a report is sent and when it is resolved, and [`report`] for the format.

pub mod report;
pub mod tracker;

use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::http::{check_url, client, post_json};
use super::{Error, Events, SinkContext};
use crate::metrics::Sink;
use crate::shell::{Errors, Span};
use crate::state::policy::ChildRef;
use crate::write::uid_key;
use report::DriftReport;
use tracker::{Open, ParentKey, Tracker};

/// `[[sinks]] type = "drift_report"`: a Kausality `DriftReport` per drift, and its resolution.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftReportConfig {
    /// Endpoints that receive every report (Kausality's drift callback URLs). Required.
    pub urls: Vec<String>,
    /// A drift with the same id is reported once within this time. Default: `"10m"` (as
    /// Kausality's callback tracker).
    #[serde(default = "default_ttl")]
    pub ttl: Span,
    /// Time limit of one POST. Default: `"10s"`.
    #[serde(default = "default_timeout")]
    pub timeout: Span,
    /// Retries of a failed POST. Default: 3.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
}

fn default_ttl() -> Span {
    Span::secs(600)
}
fn default_timeout() -> Span {
    Span::secs(10)
}
fn default_max_retries() -> u32 {
    3
}

/// How often open reports are checked against the model's state.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

impl DriftReportConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        if self.urls.is_empty() {
            errors.push(format!("{key}.urls"), None, "must name at least one URL");
        }
        for (i, u) in self.urls.iter().enumerate() {
            check_url(errors, &format!("{key}.urls[{i}]"), u);
        }
    }
}

/// Starts the sink: reports drift from `rx`, and resolves open reports against the model.
pub fn spawn(
    cfg: DriftReportConfig,
    mut rx: mpsc::Receiver<Events>,
    ctx: SinkContext,
) -> Result<JoinHandle<()>, Error> {
    let client = client(cfg.timeout.0, "drift_report")?;
    Ok(tokio::spawn(async move {
        let mut tracker = Tracker::new(cfg.ttl.0);
        let mut out = Vec::new();
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut held: Option<Events> = None;
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(events) => {
                        let now = Instant::now();
                        for e in events.iter() {
                            tracker.on_event(e, now, |e| parent_namespace(&ctx, e), &mut out);
                        }
                        // Acknowledged (Kafka offsets) once its reports are delivered below.
                        held = Some(events);
                    }
                    None => break,
                },
                _ = sweep.tick() => tracker.sweep(Instant::now(), |k, o| resolved_in_model(&ctx, k, o), &mut out),
            }
            for r in out.drain(..) {
                deliver(&client, &cfg, &ctx, &r).await;
            }
            drop(held.take());
        }
    }))
}

/// The parent's own namespace, from the model (a cluster-scoped parent has none).
fn parent_namespace(ctx: &SinkContext, e: &crate::enriched::Enriched) -> Option<String> {
    let p = e.parent.as_ref()?;
    Some(ctx.engine.namespace_of(&e.cluster, uid_key(&p.uid))?.to_string())
}

/// Is an open report over, judging by the parent's and child's state in the model?
fn resolved_in_model(ctx: &SinkContext, (cluster, parent_uid): &ParentKey, o: &Open) -> bool {
    let child = &o.report.spec.child;
    let child_ref = ChildRef { api_version: &child.api_version, kind: &child.kind, name: &child.name };
    !ctx.engine.drift_open(cluster, parent_uid, &child.uid, child_ref, o.parent_generation)
}

async fn deliver(client: &reqwest::Client, cfg: &DriftReportConfig, ctx: &SinkContext, r: &DriftReport) {
    let (delivered_counter, failed) = ctx.metrics.sink_counters(Sink::DriftReport);
    let body = serde_json::to_vec(r).expect("drift reports serialize");
    let mut delivered = false;
    for url in &cfg.urls {
        match post_json(client, url, body.clone(), cfg.max_retries).await.and_then(|resp| acknowledged(&resp)) {
            Ok(()) => delivered = true,
            Err(why) => {
                failed.inc();
                tracing::warn!(id = %r.spec.id, phase = r.spec.phase.label(), error = %why, "drift report not delivered");
            }
        }
    }
    if delivered {
        delivered_counter.inc();
        ctx.metrics.drift_report_sent(r.spec.phase.label());
    }
}

/// Kausality's receivers answer a `DriftReportResponse`; `acknowledged: false` is a refusal.
/// A body that is not one (or empty) counts as acknowledged, as in Kausality's sender.
fn acknowledged(body: &[u8]) -> Result<(), String> {
    #[derive(Deserialize)]
    struct Response {
        acknowledged: bool,
        #[serde(default)]
        error: String,
    }
    match serde_json::from_slice::<Response>(body) {
        Ok(r) if !r.acknowledged => Err(format!("receiver did not acknowledge: {}", r.error)),
        _ => Ok(()),
    }
}
