//! `[[sinks]] type = "http"`: enriched events as JSON arrays POSTed to a URL, in batches of up
//! to `batch_size` (or whatever came within `flush_interval`). A failed POST is retried with
//! exponential backoff; while it is retried the sink reads no further batches, so the
//! processor (and then the webhook, with 429) slows down rather than losing events. A batch is
//! dropped, and counted as errors, only once its retries are used up or the endpoint refuses
//! it for good (a 4xx other than 408 and 429).

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Error, Events};
use crate::metrics::{Metrics, Sink};
use crate::shell::{Errors, Span};

/// `[[sinks]] type = "http"`: JSON arrays POSTed to an endpoint, with retries.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Endpoint, `http://` or `https://` (system CA roots). Required.
    pub url: String,
    /// Most events in one POST. Default: 500.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Retries of a failed POST (so `max_retries + 1` tries in all). Default: 5.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Time limit of one POST. Default: `"10s"`.
    #[serde(default = "default_timeout")]
    pub timeout: Span,
    /// Longest an event waits for its batch to fill up. Default: `"1s"`.
    #[serde(default = "default_flush_interval")]
    pub flush_interval: Span,
}

fn default_batch_size() -> usize {
    500
}
fn default_max_retries() -> u32 {
    5
}
fn default_timeout() -> Span {
    Span::secs(10)
}
fn default_flush_interval() -> Span {
    Span::secs(1)
}

impl HttpConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        check_url(errors, &format!("{key}.url"), &self.url);
        if self.batch_size == 0 {
            errors.push(format!("{key}.batch_size"), None, "must be at least 1");
        }
        if self.timeout.0.is_zero() {
            errors.push(format!("{key}.timeout"), None, "must be more than 0");
        }
    }
}

/// Records in `errors`, under `key`, what keeps `url` from being an http:// or https:// URL.
pub fn check_url(errors: &mut Errors<'_>, key: &str, url: &str) {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        Ok(_) => errors.push(key, None, format!("{url:?} must be an http:// or https:// URL with a host")),
        Err(e) => errors.push(key, None, format!("{url:?} is not a URL: {e}")),
    }
}

/// The HTTP client of the sinks: rustls (ring) with the system's CA roots.
pub fn client(timeout: Duration, sink: &'static str) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .user_agent(concat!("kausality-stream/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|source| Error::Client { sink, source })
}

/// First wait between tries; doubled after each failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// POSTs a JSON body, retrying transient failures; returns the last response body on success
/// or why it failed for good.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    max_retries: u32,
) -> Result<Vec<u8>, String> {
    let body = bytes_of(body);
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0;
    loop {
        let result =
            client.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.clone()).send().await;
        let (retry, why) = match result {
            Ok(resp) if resp.status().is_success() => {
                return Ok(resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default())
            }
            Ok(resp) => {
                let status = resp.status();
                let retry = status.is_server_error()
                    || status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::REQUEST_TIMEOUT;
                let text = resp.text().await.unwrap_or_default();
                (retry, format!("{url} answered {status}: {}", text.chars().take(200).collect::<String>()))
            }
            Err(e) => (true, format!("{url}: {e}")),
        };
        if !retry || attempt >= max_retries {
            return Err(why);
        }
        tracing::debug!(%url, attempt, error = %why, "POST failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        attempt += 1;
    }
}

fn bytes_of(v: Vec<u8>) -> axum::body::Bytes {
    axum::body::Bytes::from(v)
}

/// Starts the sink: POSTs the events of `rx` in batches, counted in `metrics`.
pub fn spawn(cfg: HttpConfig, mut rx: mpsc::Receiver<Events>, metrics: Arc<Metrics>) -> Result<JoinHandle<()>, Error> {
    let client = client(cfg.timeout.0, "http")?;
    let (delivered, failed) = metrics.sink_counters(Sink::Http);
    Ok(tokio::spawn(async move {
        let mut batch = JsonArray::default();
        let mut first_at: Option<Instant> = None;
        loop {
            let deadline = first_at.map(|t| t + cfg.flush_interval.0);
            let flush_due = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = rx.recv() => match m {
                    Some(events) => {
                        for e in events.iter() {
                            batch.push(e);
                            first_at.get_or_insert_with(Instant::now);
                            if batch.len == cfg.batch_size {
                                send(&client, &cfg, &mut batch, &delivered, &failed).await;
                                first_at = None;
                            }
                        }
                        if batch.len > 0 {
                            // Acknowledged (Kafka offsets) only once its POST is over.
                            batch.held.push(events);
                        }
                    }
                    None => break,
                },
                _ = flush_due => {
                    send(&client, &cfg, &mut batch, &delivered, &failed).await;
                    first_at = None;
                }
            }
        }
        send(&client, &cfg, &mut batch, &delivered, &failed).await;
    }))
}

async fn send(
    client: &reqwest::Client,
    cfg: &HttpConfig,
    batch: &mut JsonArray,
    delivered: &prometheus::IntCounter,
    failed: &prometheus::IntCounter,
) {
    if batch.len == 0 {
        return;
    }
    let n = batch.len as u64;
    let _held = std::mem::take(&mut batch.held);
    match post_json(client, &cfg.url, batch.take(), cfg.max_retries).await {
        Ok(_) => delivered.inc_by(n),
        Err(why) => {
            failed.inc_by(n);
            tracing::warn!(events = n, error = %why, "http sink dropped a batch after its retries");
        }
    }
}

/// A JSON array built one serialized event at a time.
#[derive(Default)]
struct JsonArray {
    buf: Vec<u8>,
    len: usize,
    /// The batches whose events are in `buf`, dropped once the POST is over.
    held: Vec<Events>,
}

impl JsonArray {
    fn push(&mut self, e: &crate::enriched::Enriched) {
        self.buf.push(if self.len == 0 { b'[' } else { b',' });
        e.write_json(&mut self.buf);
        self.len += 1;
    }

    fn take(&mut self) -> Vec<u8> {
        self.buf.push(b']');
        self.len = 0;
        std::mem::take(&mut self.buf)
    }
}
