//! Serving an axum router on a TCP listener, plain or TLS, with a graceful stop: on shutdown
//! the listener closes, open connections finish their current request (hyper's graceful
//! shutdown), and whatever is still open after the grace period is cut.
//!
//! Every listener is bounded ([`Limits`]), so that slow or idle clients cannot hold the
//! process's file descriptors: at most `max_connections` open (one more is accepted and closed
//! at once, counted), the headers of each request (and the TLS handshake) within
//! `header_read_timeout` of their first byte, and a kept-alive connection closed after
//! `idle_timeout` without a request. The body's own time limit is the handler's (it answers).
//! Each listener has its own accept loop and bounds, so a flood of the webhook does not reach
//! `/metrics`.

pub mod tls;
mod watch_io;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::metrics::{Listener, Metrics};
pub use tls::TlsConfig;
pub use watch_io::HandshakeFailure;
use watch_io::{Activity, Expired, Watched};

/// Why a listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source} (is another process using the port?)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A TLS file cannot be read or used.
    #[error("TLS file {path}: {message}")]
    Tls {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The bearer token file cannot be read.
    #[error("{key} {path}: {source}")]
    Token {
        /// The pipeline key that names the file (`bearer_token_file`).
        key: &'static str,
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Binds `addr` (port 0 picks a free port; see `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })
}

/// Reads a bearer token file (surrounding whitespace is not part of the token).
pub fn read_token(path: &std::path::Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}

/// Whether the request carries `Authorization: Bearer <token>`; compared without an early exit
/// on the first differing byte.
pub fn bearer_matches(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Resolves once `rx` turns true (or its sender is gone). Holds no borrow of the value across
/// an await, so the futures that use it stay `Send`.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A listener that is serving.
pub struct Running {
    /// The address bound (with the port picked, for port 0).
    pub local_addr: SocketAddr,
    /// The accept loop: it ends once the listener has stopped and drained.
    pub task: JoinHandle<()>,
}

/// A listener of the service (the webhook, the query API), bound, with its TLS configuration
/// and bearer token read: what [`Opened::serve`] serves on.
pub struct Opened {
    listener: TcpListener,
    /// The address bound (with the port picked, for port 0).
    pub local_addr: SocketAddr,
    /// The TLS configuration, when the listener serves HTTPS.
    pub tls: Option<Arc<ServerConfig>>,
    /// The bearer token requests must carry, if any.
    pub token: Option<String>,
}

/// Reads the bearer token file, then the TLS files, then binds `addr`. A token file that
/// cannot be read is an [`Error::Token`] named by `token_key`, the key each listener reads it
/// from.
pub async fn open(
    addr: SocketAddr,
    tls: Option<&TlsConfig>,
    token_file: Option<&std::path::Path>,
    token_key: &'static str,
) -> Result<Opened, Error> {
    let token = match token_file {
        Some(p) => Some(read_token(p).map_err(|source| Error::Token {
            key: token_key,
            path: p.display().to_string(),
            source,
        })?),
        None => None,
    };
    let tls = match tls {
        Some(t) => Some(t.server_config()?),
        None => None,
    };
    let listener = bind(addr).await?;
    let local_addr = listener.local_addr().unwrap_or(addr);
    Ok(Opened { listener, local_addr, tls, token })
}

impl Opened {
    /// Serves `app` in a task of its own ([`serve`]), counted in `metrics`: the refused
    /// connections of the listener (and its failed handshakes, with TLS) show at zero at once,
    /// so that alerts on a rate see them.
    pub fn serve(
        self,
        app: Router,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> Running {
        let reasons = if self.tls.is_some() { &HandshakeFailure::ALL[..] } else { &[] };
        metrics.listener_series(limits.name, [], reasons.iter().map(|r| r.as_str()));
        let task = tokio::spawn(serve(self.listener, app, self.tls, shutdown, grace, limits, Some(metrics)));
        Running { local_addr: self.local_addr, task }
    }
}

/// What bounds one listener's connections.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The `listener` label of the connection metrics, and the listener's name in logs.
    pub name: Listener,
    /// Most connections open at once; one more is accepted and closed at once.
    pub max_connections: usize,
    /// Longest from the first byte of a request (or from the accept) to its last header
    /// byte; also the TLS handshake's limit.
    pub header_read_timeout: Duration,
    /// Longest a connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Most connections open at once from one client (IP address); one more from it is
    /// accepted and closed at once, so that one client cannot take every connection of
    /// `max_connections` from the others. `None`: no such cap.
    pub max_connections_per_client: Option<usize>,
}

/// How many header read timeouts an answer may wait for its client to take any of its bytes:
/// a client that stops reading (or never reads) is cut then, instead of holding one of the
/// listener's connections until its idle timeout.
const WRITE_STALL_HEADER_TIMEOUTS: u32 = 3;

impl Limits {
    /// The metrics listener's: scrapes and probes are small and few. Idle connections are kept
    /// longer than a slow scrape interval, so that a scraper's kept-alive connection is not
    /// closed just as it is used again.
    pub fn metrics() -> Limits {
        Limits {
            name: Listener::Metrics,
            max_connections: 64,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections_per_client: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            name: Listener::Http,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections_per_client: None,
        }
    }
}

/// Serves `app` until `shutdown` turns true, then drains open connections for up to `grace`.
/// Refused connections, failed handshakes and timeouts are counted in `metrics`, if given.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let limits = Arc::new(limits);
    let refused = metrics.as_ref().map(|m| m.refused_counter(limits.name));
    if let Some(m) = &metrics {
        // Series that exist from the start, at zero: their label sets are closed, and a rate
        // (or an alert) over them works from the first scrape.
        let phases =
            [watch_io::Expired::Headers, watch_io::Expired::Idle, watch_io::Expired::Write].map(Expired::as_str);
        m.listener_series(limits.name, phases, watch_io::HandshakeFailure::ALL.map(HandshakeFailure::as_str));
    }
    let mut conns = JoinSet::new();
    let per_client = Arc::new(PerClient::default());
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, listener = limits.name.as_str(), "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        // Reap finished connections so the set does not grow with the connection count.
        while conns.try_join_next().is_some() {}
        if conns.len() >= limits.max_connections {
            drop(stream);
            if let Some(r) = &refused {
                r.inc();
            }
            tracing::debug!(%peer, listener = limits.name.as_str(), open = conns.len(), "connection refused: max_connections open");
            continue;
        }
        let Some(slot) = PerClient::take(&per_client, peer.ip(), limits.max_connections_per_client) else {
            drop(stream);
            if let Some(r) = &refused {
                r.inc();
            }
            tracing::debug!(%peer, listener = limits.name.as_str(), "connection refused: max_connections_per_client open from this client");
            continue;
        };
        let app = app.clone();
        let acceptor = acceptor.clone();
        let shutdown = shutdown.clone();
        let limits = limits.clone();
        let metrics = metrics.clone();
        conns.spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            match acceptor {
                None => serve_conn(stream, app, shutdown, &limits, metrics.as_deref()).await,
                Some(acceptor) => match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)).await
                {
                    Ok(Ok(tls)) => serve_conn(tls, app, shutdown, &limits, metrics.as_deref()).await,
                    Ok(Err(e)) => handshake_failed(&peer, HandshakeFailure::of(&e), metrics.as_deref(), &e),
                    Err(_) => handshake_failed(&peer, HandshakeFailure::Timeout, metrics.as_deref(), &"timed out"),
                },
            }
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            open = conns.len(),
            listener = limits.name.as_str(),
            "connections still open after the grace period; closing them"
        );
        conns.abort_all();
    }
}

/// Connections open per client, for [`Limits::max_connections_per_client`].
#[derive(Default)]
struct PerClient(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One open connection of a client: given back when dropped.
struct ClientSlot(Option<(Arc<PerClient>, std::net::IpAddr)>);

impl PerClient {
    /// A slot for a new connection from `ip`, unless it has `most` open already.
    fn take(this: &Arc<PerClient>, ip: std::net::IpAddr, most: Option<usize>) -> Option<ClientSlot> {
        let Some(most) = most else { return Some(ClientSlot(None)) };
        let mut open = this.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(ClientSlot(Some((this.clone(), ip))))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((clients, ip)) = self.0.take() {
            let mut open = clients.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = open.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

fn handshake_failed(
    peer: &SocketAddr,
    reason: HandshakeFailure,
    metrics: Option<&Metrics>,
    error: &dyn std::fmt::Display,
) {
    if let Some(m) = metrics {
        m.handshake_failed(reason.as_str());
    }
    tracing::debug!(%peer, reason = reason.as_str(), error = %error, "TLS handshake failed");
}

async fn serve_conn<I>(
    io: I,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    limits: &Limits,
    metrics: Option<&Metrics>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched::new(io, activity.clone()));
    let service = watch_io::counted(app, activity.clone());
    // hyper's own header timer also runs while a kept-alive connection waits, which would make
    // it the idle timeout too: the watchdog below keeps the two apart.
    let conn = http1::Builder::new().timer(TokioTimer::new()).header_read_timeout(None).serve_connection(io, service);
    tokio::pin!(conn);
    let every = (limits.header_read_timeout.min(limits.idle_timeout) / 4)
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut check = tokio::time::interval(every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stopped(&mut shutdown) => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
                return;
            }
            _ = check.tick() => {
                let write_timeout = limits.header_read_timeout * WRITE_STALL_HEADER_TIMEOUTS;
                if let Some(expired) = activity.expired(limits.header_read_timeout, limits.idle_timeout, write_timeout) {
                    if let Some(m) = metrics {
                        m.connection_timed_out(limits.name, expired.as_str());
                    }
                    match expired {
                        Expired::Headers => tracing::debug!(listener = limits.name.as_str(), "connection closed: headers not received in time"),
                        Expired::Write => tracing::debug!(listener = limits.name.as_str(), "connection closed: the client did not read its answer"),
                        Expired::Idle => {}
                    }
                    return;
                }
            }
        }
    }
}
