//! `[query]`: the query API's listener and what it reads.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::listen::TlsConfig;
use crate::shell::{check_credentials, Errors, Span};

/// The query API (docs/query-api.md): the verdict from the live state, objects, the drift feed
/// and an object's story from the history store. On when the section is present.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Address to listen on. Default: `"127.0.0.1:9091"`.
    pub listen: SocketAddr,
    /// HTTPS, with the same keys as the webhook's `[sources.tls]` (`cert`, `key`, `client_ca`
    /// for client certificates). Default: none (plain HTTP, loopback only unless `plain_http`).
    pub tls: Option<TlsConfig>,
    /// File holding a bearer token that requests must carry (`Authorization: Bearer ...`);
    /// without it they are answered 401. Default: none.
    pub bearer_token_file: Option<PathBuf>,
    /// Serve plain HTTP on an address that is not loopback: answers name users and objects,
    /// so this must be asked for explicitly. Default: `false`.
    pub plain_http: bool,
    /// The history store read by `/v1/objects`, `/v1/drift` and `/v1/why`. Default: the path
    /// of the pipeline's `history` sink, if it has one.
    pub history: Option<PathBuf>,
    /// Most connections open at once; one more is accepted and closed at once. Default: 64.
    pub max_connections: usize,
    /// Most connections open at once from one client (IP address), so that one client that
    /// opens connections and never reads cannot shut the others out (the token is sent
    /// inside a connection: no connection cap can come after it). Default: 16.
    pub max_connections_per_client: usize,
    /// Most requests being answered at once (each reads on a blocking thread); more wait.
    /// Default: 4.
    pub max_concurrent_reads: usize,
    /// Longest a client may take to send a request's headers. Default: `"10s"`.
    pub header_read_timeout: Span,
    /// How long a kept-alive connection may wait for its next request. Default: `"120s"`.
    pub idle_timeout: Span,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9091)),
            tls: None,
            bearer_token_file: None,
            plain_http: false,
            history: None,
            max_connections: 64,
            max_connections_per_client: 16,
            max_concurrent_reads: 4,
            header_read_timeout: Span::secs(10),
            idle_timeout: Span::secs(120),
        }
    }
}

impl QueryConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        match (&self.tls, self.plain_http) {
            (None, false) if !self.listen.ip().is_loopback() => errors.push(
                format!("{key}.listen"),
                None,
                format!("{} is not a loopback address and [{key}.tls] is missing: add cert and key, or set plain_http = true", self.listen),
            ),
            (Some(_), true) => errors.push(format!("{key}.plain_http"), None, format!("plain_http = true and [{key}.tls] contradict each other: remove one")),
            _ => {}
        }
        check_credentials(errors, key, self.tls.as_ref(), self.bearer_token_file.as_deref());
        for (name, n) in [
            ("max_connections", self.max_connections),
            ("max_connections_per_client", self.max_connections_per_client),
            ("max_concurrent_reads", self.max_concurrent_reads),
        ] {
            if n == 0 {
                errors.push(format!("{key}.{name}"), None, "must be at least 1");
            }
        }
        for (name, span) in [("header_read_timeout", self.header_read_timeout), ("idle_timeout", self.idle_timeout)] {
            if span.0.is_zero() {
                errors.push(format!("{key}.{name}"), None, "must be above 0");
            }
        }
    }
}
