//! The metrics listener: `/metrics` (Prometheus text format), `/healthz` (the process is up)
//! and `/readyz` (state restored and sources listening; false again once shutdown begins, so
//! the Service stops routing audit batches here before intake closes, and while a sink cannot
//! write; ready but `degraded` while snapshots fail: see [`crate::status`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use prometheus::core::Collector;

use crate::metrics::Metrics;
use crate::status::{Readiness, Status};

pub struct Health {
    pub metrics: Arc<Metrics>,
    /// Started and not stopping.
    pub ready: AtomicBool,
    /// What the parts report while running.
    pub status: Arc<Status>,
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new().route("/metrics", get(metrics)).route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state(health)
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], render_all(&h.metrics))
}

/// The metrics text, with every family listed even before its first series: the Prometheus
/// encoder leaves out a labelled family without series (e.g. no freeze violation yet), and
/// dashboards and rules are written against all the names of `deploy/metrics.txt`. Such a
/// family appears as its `# HELP` and `# TYPE` lines, without made-up samples.
pub fn render_all(m: &Metrics) -> String {
    let mut text = m.render();
    let families: [(&dyn Collector, &str); 32] = [
        (&m.events_received, "counter"),
        (&m.events_ignored, "counter"),
        (&m.events_invalid, "counter"),
        (&m.mutations, "counter"),
        (&m.drift, "counter"),
        (&m.person_reverts, "counter"),
        (&m.fights, "counter"),
        (&m.applier_hand_edits, "counter"),
        (&m.freeze_violations, "counter"),
        (&m.late_events, "counter"),
        (&m.dedup_hits, "counter"),
        (&m.reorder_buffer_events, "gauge"),
        (&m.tracked_objects, "gauge"),
        (&m.state_evictions, "counter"),
        (&m.processing_lag, "histogram"),
        (&m.sink_events, "counter"),
        (&m.sink_errors, "counter"),
        (&m.kafka_consumer_lag, "gauge"),
        (&m.kafka_rewinds, "counter"),
        (&m.trace_messages, "counter"),
        (&m.webhook_requests, "counter"),
        (&m.drift_reports, "counter"),
        (&m.snapshot_failures, "counter"),
        (&m.snapshot_partitions, "counter"),
        (&m.connections_refused, "counter"),
        (&m.tls_handshake_failures, "counter"),
        (&m.connection_timeouts, "counter"),
        (&m.route_messages, "counter"),
        (&m.route_errors, "counter"),
        (&m.route_unroutable, "counter"),
        (&m.query_requests, "counter"),
        (&m.history_unreadable_rows, "counter"),
    ];
    for (collector, kind) in families {
        for d in collector.desc() {
            if !text.contains(&format!("# TYPE {} ", d.fq_name)) {
                text.push_str(&format!("# HELP {} {}\n# TYPE {} {kind}\n", d.fq_name, d.help, d.fq_name));
            }
        }
    }
    text
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if !h.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_string());
    }
    match h.status.readiness() {
        Readiness::Ready => (StatusCode::OK, "ready\n".to_string()),
        Readiness::Degraded(why) => (StatusCode::OK, format!("ready (degraded: {why})\n")),
        Readiness::NotReady(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}
