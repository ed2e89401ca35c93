//! `POST /audit` and `POST /audit/{cluster}`: one request, one body of audit events.
//!
//! Answers, and why (the API server's webhook backend retries a batch only on 429, 500, 504,
//! a response with `Retry-After`, or a reset connection; anything else is dropped):
//! - 200: the processor has taken the body in. Items that were not audit events are counted
//!   (`kausality_events_invalid_total`) and listed in the answer, but the good ones are kept:
//!   answering 400 would make the API server drop the whole batch, good events included. An
//!   EventList whose framing is sound is answered 200 even when every item in it is bad.
//! - 400: nothing in this body can ever be read (not JSON, another kind, an empty body or
//!   `[]`, a single event that is not usable), or the body's cluster is new past
//!   `options.max_clusters`; retrying would not help.
//! - 401: the bearer token is missing or wrong (checked before anything else).
//! - 408 + `Retry-After: 1`: the body did not arrive within `body_read_timeout`.
//! - 413: the body or its event count is over the configured limit (a declared length over
//!   it is answered from the headers, before an `Expect: 100-continue` is answered).
//! - 429 + `Retry-After: 1`: the processor's queue is full. Never accept-and-drop.
//! - 503 + `Retry-After: 1`: shutting down, a sink cannot write, or the bytes of bodies being
//!   read at once are at `max_body_bytes_in_flight`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::decode::DecodeOptions;
use crate::metrics::{Listener, Metrics};
use crate::process::{Decoded, Decoder, IngestReport};
use crate::route::{self, route_body, Producer};
use crate::scope::Scope;
use crate::shell::now_us;
use crate::sources::{self, Batch};
use crate::status::Status;

/// What every request of one webhook shares.
pub struct WebhookState {
    /// The processor's queue.
    pub queue: mpsc::Sender<Batch>,
    /// Bodies are decoded on the blocking pool (in parallel with the processor, which only
    /// classifies), and the event limit is checked on the decoded count.
    pub decoder: Decoder,
    /// Where requests and events are counted.
    pub metrics: Arc<Metrics>,
    /// A sink that cannot write makes new bodies 503 (nothing more is accepted than held).
    pub status: Arc<Status>,
    /// Largest body taken; a larger one is answered 413.
    pub max_body_bytes: usize,
    /// Most audit events in one body.
    pub max_events: usize,
    /// Longest the body of one request may take to arrive, once its headers are in.
    pub body_read_timeout: Duration,
    /// Bytes of bodies being read and decoded at once: `max_body_bytes_in_flight` permits.
    pub in_flight: Arc<Semaphore>,
    /// The expected `Authorization: Bearer` token, if one is configured.
    pub token: Option<String>,
    /// True once shutdown has begun: new bodies are refused with 503 + Retry-After.
    pub closing: watch::Receiver<bool>,
    /// The ingest tier: bodies go to the keyed topic instead of the processor.
    pub route: Option<RouteIntake>,
}

/// What the ingest tier's webhook routes with.
#[derive(Clone)]
pub struct RouteIntake {
    /// What produces to the keyed topic.
    pub producer: Arc<dyn Producer>,
    /// How bodies are decoded.
    pub decode: DecodeOptions,
    /// The pipeline's scope: what is out of it is not produced.
    pub scope: Option<Arc<Scope>>,
    /// The applier profiles (built-in and the pipeline's): members go where their parent's
    /// state is (DESIGN §1.9).
    pub appliers: Arc<crate::config::appliers::Appliers>,
}

/// `POST /audit`: a body of the pipeline's default cluster.
pub async fn audit_default(State(s): State<Arc<WebhookState>>, headers: HeaderMap, body: Body) -> Response {
    s.handle(None, &headers, body).await
}

/// `POST /audit/{cluster}`: a body of `cluster`.
pub async fn audit_cluster(
    State(s): State<Arc<WebhookState>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    s.handle(Some(cluster), &headers, body).await
}

/// Any other path: 404 (401 first, without the token).
pub async fn not_found(State(s): State<Arc<WebhookState>>, headers: HeaderMap) -> Response {
    if let Some(refused) = s.unauthorized(&headers) {
        return refused;
    }
    s.answer(StatusCode::NOT_FOUND, error_body("POST audit events to /audit or /audit/{cluster}"))
}

/// Cluster names are interned for the life of the process: keep them bounded and printable.
fn valid_cluster_name(c: &str) -> bool {
    (1..=253).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl WebhookState {
    /// The checks in order: the token first (nothing else is answered to a client without
    /// it), then what the headers alone decide, then the body, read within its time limit and
    /// the memory budget.
    async fn handle(&self, cluster: Option<String>, headers: &HeaderMap, body: Body) -> Response {
        if let Some(refused) = self.unauthorized(headers) {
            return refused;
        }
        if let Some(c) = cluster.as_deref().filter(|c| !valid_cluster_name(c)) {
            let msg =
                format!("cluster name {c:?} in the path must be 1-253 characters of a-z, A-Z, 0-9, '-', '_', '.'");
            return self.answer(StatusCode::BAD_REQUEST, error_body(&msg));
        }
        if *self.closing.borrow() {
            return self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "shutting down; retry against the next instance");
        }
        if self.status.sinks_blocked() {
            return self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "a sink cannot write (see /readyz); retry later");
        }
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let mut budget = Budget { semaphore: self.in_flight.clone(), held: None, bytes: 0 };
        match declared {
            // Decided on the headers: a client that asked `Expect: 100-continue` is never
            // invited to send, and one that declares more than the drain limit is not read.
            Some(len) if len > self.max_body_bytes as u64 && (expects_continue(headers) || len > DRAIN_LIMIT) => {
                let mut r = self.too_large(len);
                r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                return r;
            }
            // The declared length is reserved at once: an unfinished body holds its share.
            Some(len) if len <= self.max_body_bytes as u64 && !budget.reserve(len as usize) => {
                // Never invited to send: answered from the headers.
                if expects_continue(headers) {
                    let mut r = self.busy();
                    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return r;
                }
                // Read and thrown away (no memory held), so the client gets to read the 503
                // instead of a reset connection while it is still sending.
                let _ = tokio::time::timeout(self.body_read_timeout, drain(body, len)).await;
                return self.busy();
            }
            _ => {}
        }
        // Received when its body starts to be read; inside until the processor has taken it in
        // (this request's end): the reorder clock holds for it (order::Arrivals).
        let received_us = now_us();
        let inside = self.status.arrivals.enter(received_us);
        let read =
            tokio::time::timeout(self.body_read_timeout, read_body(body, self.max_body_bytes, &mut budget)).await;
        let bytes = match read {
            Ok(Ok(b)) => b,
            Ok(Err(BodyError::TooLarge(size))) => return self.too_large(size),
            Ok(Err(BodyError::Busy)) => return self.busy(),
            Ok(Err(BodyError::Read(e))) => {
                return self.answer(StatusCode::BAD_REQUEST, error_body(&format!("reading the body failed: {e}")))
            }
            Err(_) => {
                self.metrics.connection_timed_out(Listener::Webhook, "body");
                let msg = format!("the body did not arrive within body_read_timeout ({:?})", self.body_read_timeout);
                let mut r = self.retry_later(StatusCode::REQUEST_TIMEOUT, &msg);
                r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                return r;
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return self.answer(
                StatusCode::BAD_REQUEST,
                error_body("empty body: expected an audit.k8s.io/v1 EventList or Event"),
            );
        }
        if let Some(route) = &self.route {
            drop(inside);
            // The body's bytes stay in the budget until the broker has acknowledged them.
            return self.route(route, cluster, bytes).await;
        }
        let decoder = self.decoder.clone();
        let label = cluster.clone();
        let decoded = tokio::task::spawn_blocking(move || {
            let mut decoded = Decoded::default();
            decoder.decode(label.as_deref(), &bytes, decoder.unwrap(), "webhook", &mut decoded);
            decoded
        })
        .await;
        // The body is gone (decoded): its bytes leave the budget.
        drop(budget);
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
                return self
                    .retry_later(StatusCode::TOO_MANY_REQUESTS, "processing queue is full; retry after a second")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return self
                    .retry_later(StatusCode::SERVICE_UNAVAILABLE, "shutting down; retry against the next instance")
            }
        }
        let acked = acked.await;
        drop(inside);
        match acked {
            Ok(report) => self.report(report),
            Err(_) => {
                self.retry_later(StatusCode::SERVICE_UNAVAILABLE, "the processor stopped before taking the batch")
            }
        }
    }

    /// The ingest tier: each event of the body to the keyed topic, answered 200 once the
    /// broker has acknowledged every message, 503 + Retry-After when it has not (the API
    /// server sends the body again; copies delivered before the failure are dropped by
    /// auditID where they are classified).
    async fn route(&self, route: &RouteIntake, cluster: Option<String>, bytes: Vec<u8>) -> Response {
        let partitions = route.producer.partitions();
        if partitions <= 0 {
            return self.retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "the keyed topic's partitions are not known yet (is the broker reachable?); retry later",
            );
        }
        let (decode, scope, appliers) = (route.decode.clone(), route.scope.clone(), route.appliers.clone());
        let routed = tokio::task::spawn_blocking(move || {
            let routed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                route_body(&bytes, &decode, scope.as_deref(), &appliers, partitions)
            }));
            (bytes, routed)
        })
        .await;
        let (bytes, routed) = match routed {
            Ok((bytes, Ok(r))) => (bytes, r),
            _ => {
                tracing::error!("the router failed on a body (a defect; the panic is logged above)");
                return self
                    .answer(StatusCode::INTERNAL_SERVER_ERROR, error_body("routing the body failed unexpectedly"));
            }
        };
        let items = routed.report.events + routed.report.invalid;
        if items > self.max_events {
            let msg = format!(
                "{items} events in one request is over the limit of {}; lower --audit-webhook-batch-max-size or raise max_events_per_request",
                self.max_events
            );
            return self.answer(StatusCode::PAYLOAD_TOO_LARGE, error_body(&msg));
        }
        if !routed.report.unreadable() {
            if let Err(e) = route.producer.send(cluster.as_deref(), &bytes, &routed.messages).await {
                return self.retry_later(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("the keyed topic did not take the body: {e}; retry later"),
                );
            }
        }
        // Counted once taken (a body answered 503 comes again).
        let route::Routed { report, invalid, ignored, unroutable, .. } = routed;
        if report.events > 0 {
            self.metrics.received("webhook", report.events as u64);
        }
        invalid.into_iter().for_each(|r| self.metrics.invalid(r));
        ignored.into_iter().for_each(|r| self.metrics.ignored(r));
        unroutable.into_iter().for_each(|r| self.metrics.unroutable(r.as_str()));
        self.report(report)
    }

    /// 401 unless the request carries the configured bearer token (or none is configured).
    fn unauthorized(&self, headers: &HeaderMap) -> Option<Response> {
        let token = self.token.as_ref()?;
        if crate::listen::bearer_matches(headers, token) {
            return None;
        }
        let mut r = self.answer(StatusCode::UNAUTHORIZED, error_body("missing or wrong bearer token"));
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Some(r)
    }

    fn busy(&self) -> Response {
        self.retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many bodies are being read at once (max_body_bytes_in_flight); retry after a second",
        )
    }

    fn report(&self, r: IngestReport) -> Response {
        let code = if r.unreadable() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
        let errors: Vec<serde_json::Value> = r
            .errors
            .iter()
            .map(|e| serde_json::json!({"location": e.path(), "reason": e.reason.as_str(), "message": e.message}))
            .collect();
        let mut body = serde_json::json!({"events": r.events, "invalid": r.invalid});
        if !errors.is_empty() {
            body["errors"] = serde_json::Value::Array(errors);
        }
        if code == StatusCode::BAD_REQUEST {
            body["error"] = match r.errors.first() {
                Some(e) if e.reason == crate::decode::InvalidReason::Cluster => e.message.clone().into(),
                _ => "no audit event can be read from this body; expected an audit.k8s.io/v1 EventList or Event".into(),
            };
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

    /// An answer of `code` with the JSON `body`, counted.
    pub fn answer(&self, code: StatusCode, body: serde_json::Value) -> Response {
        self.metrics.webhook_answered(code.as_str());
        (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
    }
}

enum BodyError {
    /// Over the limit; the size read (or declared).
    TooLarge(u64),
    /// The bytes of bodies being read at once are at `max_body_bytes_in_flight`.
    Busy,
    Read(axum::Error),
}

/// Most bytes read and thrown away after the limit is passed, so that the client gets to read
/// the 413 (a client cut off while sending sees a reset connection, which the API server
/// would retry, again and again). A body declared larger is answered from its headers.
const DRAIN_LIMIT: u64 = 256 << 20;

/// The share of `max_body_bytes_in_flight` one body holds while it is read and decoded.
struct Budget {
    semaphore: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Budget {
    /// Gives back what this body holds.
    fn release(&mut self) {
        self.held = None;
        self.bytes = 0;
    }

    /// Holds at least `total` bytes, or says there is no room (never waits).
    fn reserve(&mut self, total: usize) -> bool {
        if total <= self.bytes {
            return true;
        }
        let Ok(more) = u32::try_from(total - self.bytes) else { return false };
        let Ok(permit) = self.semaphore.clone().try_acquire_many_owned(more) else { return false };
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        self.bytes = total;
        true
    }
}

/// Reads the body up to `max` bytes, each within `budget`; past `max` or out of budget, drains (up to
/// [`DRAIN_LIMIT`]) and says so.
async fn read_body(body: Body, max: usize, budget: &mut Budget) -> Result<Vec<u8>, BodyError> {
    let mut body = body;
    // The declared length (Content-Length), up to the limit: one allocation instead of a
    // copy at every doubling of a 1 MiB body.
    let declared = usize::try_from(HttpBody::size_hint(&body).lower()).unwrap_or(usize::MAX);
    let mut buf = Vec::with_capacity(declared.min(max).min(budget.bytes));
    let mut seen: u64 = 0;
    // Once refused (too large, or no room in the budget), the rest is read and thrown away
    // (up to [`DRAIN_LIMIT`]) so that the client gets to read the answer.
    let mut refused: Option<BodyError> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len() as u64;
        if refused.is_some() {
            if seen > DRAIN_LIMIT {
                break;
            }
        } else if buf.len() + data.len() > max {
            refused = Some(BodyError::TooLarge(0));
            buf = Vec::new();
        } else if !budget.reserve(buf.len() + data.len()) {
            refused = Some(BodyError::Busy);
            buf = Vec::new();
            budget.release();
        } else {
            buf.extend_from_slice(&data);
        }
    }
    match refused {
        Some(BodyError::TooLarge(_)) => Err(BodyError::TooLarge(seen)),
        Some(e) => Err(e),
        None => Ok(buf),
    }
}

/// Reads up to `limit` bytes of a refused body and throws them away.
async fn drain(body: Body, limit: u64) {
    let mut body = body;
    let mut seen: u64 = 0;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen += data.len() as u64;
            if seen >= limit.min(DRAIN_LIMIT) {
                break;
            }
        }
    }
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

fn error_body(msg: &str) -> serde_json::Value {
    serde_json::json!({ "error": msg })
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
