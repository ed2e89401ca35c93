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

use crate::metrics::Metrics;
use crate::status::{Readiness, Status};

/// What the metrics listener answers from.
pub struct Health {
    /// The metrics `/metrics` renders.
    pub metrics: Arc<Metrics>,
    /// Started and not stopping.
    pub ready: AtomicBool,
    /// What the parts report while running.
    pub status: Arc<Status>,
}

/// The routes: `/metrics`, `/healthz`, `/readyz`.
pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], h.metrics.render_all())
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
