//! `POST /audit` and `POST /audit/{cluster}`: one request, one body of audit events.
//!
//! Answers, and why (the API server's webhook backend retries a batch only on 429, 500, 504,
//! a response with `Retry-After`, or a reset connection; anything else is dropped):
//! - 200: the processor has taken the body in. Items that were not audit events are counted
//!   (`kausality_events_invalid_total`) and listed in the answer, but the good ones are kept:
//!   answering 400 would make the API server drop the whole batch, good events included.
//! - 400: nothing in the body was an audit event (not JSON, another kind, an empty body);
//!   retrying would not help.
//! - 401: the bearer token is missing or wrong.
//! - 413: the body or its event count is over the configured limit.
//! - 429 + `Retry-After: 1`: the processor's queue is full. Never accept-and-drop.
//! - 503 + `Retry-After: 1`: shutting down.

use std::sync::Arc;

use axum::body::{Body, HttpBody};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::Metrics;
use crate::pipeline::processor::now_us;
use crate::process::{Decoded, Decoder, IngestReport};
use crate::sources::{self, Batch};

/// What every request of one webhook shares.
pub struct WebhookState {
    pub queue: mpsc::Sender<Batch>,
    /// Bodies are decoded on the blocking pool (in parallel with the processor, which only
    /// classifies), and the event limit is checked on the decoded count.
    pub decoder: Decoder,
    pub metrics: Arc<Metrics>,
    pub max_body_bytes: usize,
    pub max_events: usize,
    /// The expected `Authorization: Bearer` token, if one is configured.
    pub token: Option<String>,
    /// True once shutdown has begun: new bodies are refused with 503 + Retry-After.
    pub closing: watch::Receiver<bool>,
}

pub async fn audit_default(State(s): State<Arc<WebhookState>>, headers: HeaderMap, body: Body) -> Response {
    s.handle(None, &headers, body).await
}

pub async fn audit_cluster(State(s): State<Arc<WebhookState>>, Path(cluster): Path<String>, headers: HeaderMap, body: Body) -> Response {
    if !valid_cluster_name(&cluster) {
        let msg = format!("cluster name {cluster:?} in the path must be 1-253 characters of a-z, A-Z, 0-9, '-', '_', '.'");
        return s.answer(StatusCode::BAD_REQUEST, error_body(&msg));
    }
    s.handle(Some(cluster), &headers, body).await
}

pub async fn not_found(State(s): State<Arc<WebhookState>>) -> Response {
    s.answer(StatusCode::NOT_FOUND, error_body("POST audit events to /audit or /audit/{cluster}"))
}

/// Cluster names are interned for the life of the process: keep them bounded and printable.
fn valid_cluster_name(c: &str) -> bool {
    (1..=253).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl WebhookState {
    async fn handle(&self, cluster: Option<String>, headers: &HeaderMap, body: Body) -> Response {
        if let Some(token) = &self.token {
            if !bearer_matches(headers, token) {
                let mut r = self.answer(StatusCode::UNAUTHORIZED, error_body("missing or wrong bearer token"));
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return r;
            }
        }
        if *self.closing.borrow() {
            return self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "shutting down; retry against the next instance");
        }
        let bytes = match read_body(body, self.max_body_bytes).await {
            Ok(b) => b,
            Err(BodyError::TooLarge(size)) => return self.too_large(size),
            Err(BodyError::Read(e)) => return self.answer(StatusCode::BAD_REQUEST, error_body(&format!("reading the body failed: {e}"))),
        };
        let received_us = now_us();
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return self.answer(StatusCode::BAD_REQUEST, error_body("empty body: expected an audit.k8s.io/v1 EventList or Event"));
        }
        let decoder = self.decoder.clone();
        let label = cluster.clone();
        let decoded = tokio::task::spawn_blocking(move || {
            let mut decoded = Decoded::default();
            decoder.decode(label.as_deref(), &bytes, decoder.unwrap(), "webhook", &mut decoded);
            decoded
        })
        .await;
        let Ok(decoded) = decoded else {
            return self.answer(StatusCode::INTERNAL_SERVER_ERROR, error_body("decoding the body failed unexpectedly"));
        };
        let items = decoded.report().events + decoded.report().invalid;
        if items > self.max_events {
            let msg = format!(
                "{items} events in one request is over the limit of {}; lower --audit-webhook-batch-max-size or raise max_events_per_request",
                self.max_events
            );
            return self.answer(StatusCode::PAYLOAD_TOO_LARGE, error_body(&msg));
        }
        let (ack, acked) = oneshot::channel();
        let batch = Batch {
            cluster,
            body: sources::Body::Decoded(decoded),
            source: "webhook",
            ack: Some(ack),
            done: None,
            unwrap: None,
            received_us: Some(received_us),
        };
        match self.queue.try_send(batch) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return self.retry_later(StatusCode::TOO_MANY_REQUESTS, "processing queue is full; retry after a second")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "shutting down; retry against the next instance")
            }
        }
        match acked.await {
            Ok(report) => self.report(report),
            Err(_) => self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "the processor stopped before taking the batch"),
        }
    }

    fn report(&self, r: IngestReport) -> Response {
        let code = if r.events == 0 && r.invalid > 0 { StatusCode::BAD_REQUEST } else { StatusCode::OK };
        let errors: Vec<serde_json::Value> =
            r.errors.iter().map(|e| serde_json::json!({"location": e.location.to_string(), "reason": e.reason.as_str(), "message": e.message})).collect();
        let mut body = serde_json::json!({"events": r.events, "invalid": r.invalid});
        if !errors.is_empty() {
            body["errors"] = serde_json::Value::Array(errors);
        }
        if code == StatusCode::BAD_REQUEST {
            body["error"] = "no audit event in the body; expected an audit.k8s.io/v1 EventList or Event".into();
        }
        self.answer(code, body)
    }

    fn too_large(&self, size: u64) -> Response {
        let msg = format!(
            "body of {size} bytes is over the limit of {} bytes; lower --audit-webhook-truncate-max-batch-size or raise max_body_bytes",
            self.max_body_bytes
        );
        self.answer(StatusCode::PAYLOAD_TOO_LARGE, error_body(&msg))
    }

    fn retry_later(&self, code: StatusCode, msg: &str) -> Response {
        let mut r = self.answer(code, error_body(msg));
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }

    pub fn answer(&self, code: StatusCode, body: serde_json::Value) -> Response {
        self.metrics.webhook_requests.with_label_values(&[code.as_str()]).inc();
        (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
    }
}

enum BodyError {
    /// Over the limit; the size read (or declared).
    TooLarge(u64),
    Read(axum::Error),
}

/// Most bytes read and thrown away after the limit is passed, so that the client gets to read
/// the 413 (a client cut off while sending sees a reset connection, which the API server
/// would retry, again and again).
const DRAIN_LIMIT: u64 = 256 << 20;

/// Reads the body up to `max` bytes; past it, drains (up to [`DRAIN_LIMIT`]) and says so.
async fn read_body(body: Body, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = body;
    // The declared length (Content-Length), up to the limit: one allocation instead of a
    // copy at every doubling of a 1 MiB body.
    let declared = usize::try_from(HttpBody::size_hint(&body).lower()).unwrap_or(usize::MAX);
    let mut buf = Vec::with_capacity(declared.min(max));
    let mut seen: u64 = 0;
    let mut over = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len() as u64;
        if over {
            if seen > DRAIN_LIMIT {
                break;
            }
        } else if buf.len() + data.len() > max {
            over = true;
            buf = Vec::new();
        } else {
            buf.extend_from_slice(&data);
        }
    }
    if over {
        Err(BodyError::TooLarge(seen))
    } else {
        Ok(buf)
    }
}

fn error_body(msg: &str) -> serde_json::Value {
    serde_json::json!({ "error": msg })
}

/// Compares the bearer token without an early exit on the first differing byte.
fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_are_bounded_and_printable() {
        assert!(valid_cluster_name("prod-eu.1") && !valid_cluster_name("a/b") && !valid_cluster_name(""));
        assert!(valid_cluster_name(&"a".repeat(253)) && !valid_cluster_name(&"a".repeat(254)));
    }
}
