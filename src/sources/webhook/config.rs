//! `[[sources]] type = "webhook"`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::shell::{check_credentials, Errors, Span};

/// The audit webhook: the API server POSTs `audit.k8s.io/v1` EventLists here.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Address to listen on. Default: `"127.0.0.1:8080"`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Largest request body, in bytes; a larger one is answered 413. Keep it at or above the
    /// API server's `--audit-webhook-truncate-max-batch-size`. Default: 16777216 (16 MiB).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Most audit events in one request; more is answered 413. Keep it at or above
    /// `--audit-webhook-batch-max-size`. Default: 2000.
    #[serde(default = "default_max_events")]
    pub max_events_per_request: usize,
    /// HTTPS. Required unless `plain_http = true`. Default: none.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// File holding a bearer token that requests must carry (`Authorization: Bearer ...`,
    /// the kubeconfig's `token`). Default: none.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// Serve plain HTTP without TLS: audit events carry full object bodies, so this must be
    /// asked for explicitly (local trials, a TLS-terminating sidecar). Default: `false`.
    #[serde(default)]
    pub plain_http: bool,
    /// Longest a client may take to send a request's headers (from their first byte; a TLS
    /// handshake has as long). Past it the connection is closed. Default: `"10s"`.
    #[serde(default = "default_header_read_timeout")]
    pub header_read_timeout: Span,
    /// Longest a client may take to send a whole body, once its headers are in; past it the
    /// answer is 408 + `Retry-After` and the connection is closed. At the default, a 16 MiB
    /// body needs 280 KiB/s. Default: `"60s"`.
    #[serde(default = "default_body_read_timeout")]
    pub body_read_timeout: Span,
    /// How long a kept-alive connection may wait for its next request before it is closed.
    /// Above Go's client default (90 s), so that the API server closes first. Default: `"120s"`.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Span,
    /// Most connections open at once; one more is accepted and closed at once (counted in
    /// `kausality_connections_refused_total{listener="webhook"}`). Default: 256.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Most bytes of request bodies being read at once, over all connections (memory); a body
    /// that does not fit is answered 503 + `Retry-After`. At least `max_body_bytes`.
    /// Default: 268435456 (256 MiB: 16 bodies of the largest size).
    #[serde(default = "default_max_body_bytes_in_flight")]
    pub max_body_bytes_in_flight: usize,
}

pub use crate::listen::TlsConfig;

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_max_body_bytes() -> usize {
    16 << 20
}

fn default_max_events() -> usize {
    2000
}

fn default_header_read_timeout() -> Span {
    Span::secs(10)
}

fn default_body_read_timeout() -> Span {
    Span::secs(60)
}

fn default_idle_timeout() -> Span {
    Span::secs(120)
}

fn default_max_connections() -> usize {
    256
}

fn default_max_body_bytes_in_flight() -> usize {
    256 << 20
}

impl WebhookConfig {
    /// A plain-HTTP webhook on `listen` with default limits (tests, the embedded default).
    pub fn plain(listen: SocketAddr) -> Self {
        WebhookConfig {
            listen,
            max_body_bytes: default_max_body_bytes(),
            max_events_per_request: default_max_events(),
            tls: None,
            bearer_token_file: None,
            plain_http: true,
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections: default_max_connections(),
            max_body_bytes_in_flight: default_max_body_bytes_in_flight(),
        }
    }

    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        match (&self.tls, self.plain_http) {
            (None, false) => errors.push(
                key,
                None,
                format!("no [sources.tls] for the webhook on {}: add cert and key, or set plain_http = true to accept unencrypted events", self.listen),
            ),
            (Some(_), true) => errors.push(format!("{key}.plain_http"), None, "plain_http = true and [sources.tls] contradict each other: remove one"),
            _ => {}
        }
        check_credentials(errors, key, self.tls.as_ref(), self.bearer_token_file.as_deref());
        if self.max_body_bytes == 0 {
            errors.push(format!("{key}.max_body_bytes"), None, "must be at least 1");
        }
        // Reservations of the in-flight budget are counted in u32 (tokio's semaphore).
        if self.max_body_bytes > u32::MAX as usize {
            errors.push(format!("{key}.max_body_bytes"), None, format!("must be at most {} (4 GiB)", u32::MAX));
        }
        if self.max_body_bytes_in_flight < self.max_body_bytes {
            errors.push(
                format!("{key}.max_body_bytes_in_flight"),
                None,
                format!(
                    "{} is below max_body_bytes ({}): a body of the largest size could never be read",
                    self.max_body_bytes_in_flight, self.max_body_bytes
                ),
            );
        }
        if self.max_connections == 0 {
            errors.push(format!("{key}.max_connections"), None, "must be at least 1");
        }
        for (name, span) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if span.0.is_zero() {
                errors.push(format!("{key}.{name}"), None, "must be above 0");
            }
        }
        if self.max_events_per_request == 0 {
            errors.push(format!("{key}.max_events_per_request"), None, "must be at least 1");
        }
    }
}
