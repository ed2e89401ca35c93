//! The audit webhook source: the API server's webhook backend POSTs EventLists; each body goes
//! to the processor's queue as it is, and the answer waits until the processor has taken it.
//! See [`handler`] for what each status code means to the API server.

mod config;
pub mod handler;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use tokio::sync::{mpsc, watch, Semaphore};

pub use config::{TlsConfig, WebhookConfig};
pub use handler::RouteIntake;
use handler::WebhookState;

pub use crate::listen::Running;
use crate::listen::{self, Limits};
use crate::metrics::{Listener, Metrics};
use crate::process::Decoder;
use crate::sources::Batch;
use crate::status::Status;

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its listener could not start, or its bearer token file cannot be read.
    #[error(transparent)]
    Listen(#[from] listen::Error),
}

/// The routes, for serving and for in-process tests.
pub fn router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/audit", post(handler::audit_default))
        .route("/audit/{cluster}", post(handler::audit_cluster))
        .fallback(handler::not_found)
        .with_state(state)
}

/// Where the webhook's bodies go: the processor's queue (decoded here first), or with `route`
/// (the ingest tier) the keyed topic.
pub struct Intake {
    /// The processor's queue.
    pub queue: mpsc::Sender<Batch>,
    /// What decodes bodies for the processor.
    pub decoder: Decoder,
    /// The ingest tier's producer and what it routes with, instead of the processor.
    pub route: Option<RouteIntake>,
}

/// Binds the listener and serves until `shutdown`; bodies go to `intake`.
pub async fn start(
    cfg: &WebhookConfig,
    intake: Intake,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> Result<Running, Error> {
    let mut opened =
        listen::open(cfg.listen, cfg.tls.as_ref(), cfg.bearer_token_file.as_deref(), "bearer_token_file").await?;
    let Intake { queue, decoder, route } = intake;
    let state = Arc::new(WebhookState {
        queue,
        decoder,
        metrics: metrics.clone(),
        status,
        max_body_bytes: cfg.max_body_bytes,
        max_events: cfg.max_events_per_request,
        body_read_timeout: cfg.body_read_timeout.0,
        in_flight: Arc::new(Semaphore::new(cfg.max_body_bytes_in_flight.min(Semaphore::MAX_PERMITS))),
        token: opened.token.take(),
        closing: shutdown.clone(),
        route,
    });
    // API servers are few clients, each with as many connections as it batches at once.
    let limits = Limits {
        name: Listener::Webhook,
        max_connections: cfg.max_connections,
        header_read_timeout: cfg.header_read_timeout.0,
        idle_timeout: cfg.idle_timeout.0,
        max_connections_per_client: None,
    };
    let https = opened.tls.is_some();
    let mtls = cfg.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    tracing::info!(addr = %opened.local_addr, https, client_certs = mtls, bearer_token = cfg.bearer_token_file.is_some(), "webhook listening");
    Ok(opened.serve(router(state), shutdown, grace, limits, metrics))
}
