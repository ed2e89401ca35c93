//! Serving an axum router on a TCP listener, plain or TLS, with a graceful stop: on shutdown
//! the listener closes, open connections finish their current request (hyper's graceful
//! shutdown), and whatever is still open after the grace period is cut.

pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source} (is another process using the port?)")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("TLS file {path}: {message}")]
    Tls { path: String, message: String },
}

/// Binds `addr` (port 0 picks a free port; see `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })
}

/// Resolves once `rx` turns true (or its sender is gone). Holds no borrow of the value across
/// an await, so the futures that use it stay `Send`.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// How long a client may take to send request headers, or the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` until `shutdown` turns true, then drains open connections for up to `grace`.
pub async fn serve(listener: TcpListener, app: Router, tls: Option<Arc<ServerConfig>>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
    let acceptor = tls.map(TlsAcceptor::from);
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        // Reap finished connections so the set does not grow with the connection count.
        while conns.try_join_next().is_some() {}
        let app = app.clone();
        let acceptor = acceptor.clone();
        let shutdown = shutdown.clone();
        conns.spawn(async move {
            let _ = stream.set_nodelay(true);
            match acceptor {
                None => serve_conn(TokioIo::new(stream), app, shutdown).await,
                Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => serve_conn(TokioIo::new(tls), app, shutdown).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                },
            }
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = conns.len(), "connections still open after the grace period; closing them");
        conns.abort_all();
    }
}

async fn serve_conn<I>(io: TokioIo<I>, app: Router, mut shutdown: watch::Receiver<bool>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = http1::Builder::new().timer(TokioTimer::new()).header_read_timeout(HANDSHAKE_TIMEOUT).serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
