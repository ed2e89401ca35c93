//! `[[sources]] type = "webhook"`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::pipeline::load::{check_file, Errors};

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
}

/// `[sources.tls]`: the serving certificate and, for mutual TLS, the client CA.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first. Required.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1). Required.
    pub key: PathBuf,
    /// PEM CA bundle: when set, only clients with a certificate that chains to it are
    /// accepted (the API server's kubeconfig `client-certificate`). Default: none.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_max_body_bytes() -> usize {
    16 << 20
}

fn default_max_events() -> usize {
    2000
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
        }
    }

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
        if let Some(tls) = &self.tls {
            check_file(errors, &format!("{key}.tls.cert"), &tls.cert);
            check_file(errors, &format!("{key}.tls.key"), &tls.key);
            if let Some(ca) = &tls.client_ca {
                check_file(errors, &format!("{key}.tls.client_ca"), ca);
            }
        }
        if let Some(t) = &self.bearer_token_file {
            match std::fs::read_to_string(t) {
                Ok(s) if s.trim().is_empty() => errors.push(format!("{key}.bearer_token_file"), None, format!("{} is empty", t.display())),
                Ok(_) => {}
                Err(e) => errors.push(format!("{key}.bearer_token_file"), None, format!("cannot read {}: {e}", t.display())),
            }
        }
        if self.max_body_bytes == 0 {
            errors.push(format!("{key}.max_body_bytes"), None, "must be at least 1");
        }
        if self.max_events_per_request == 0 {
            errors.push(format!("{key}.max_events_per_request"), None, "must be at least 1");
        }
    }
}
