//! What a connection is doing, for its timeouts: the bytes it reads (an IO wrapper) and the
//! requests being served (a wrapper of the service), so that a watchdog can tell a client
//! slow to send its headers from a kept-alive connection waiting for its next request, and
//! leave alone a request whose answer is still being worked on.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// No request's headers have begun since the last request ended.
const NONE: u64 = u64::MAX;

/// The state of one connection, in milliseconds since it was set up.
pub(super) struct Activity {
    start: Instant,
    /// Requests handed to the service and not answered yet.
    in_flight: AtomicUsize,
    /// When the last request was answered (or the connection set up).
    idle_since: AtomicU64,
    /// When the first byte of the next request came, or [`NONE`]. Starts at 0: the first
    /// request's headers are due from the accept (a client that sends nothing is slow too).
    headers_since: AtomicU64,
    /// Since when an answer waits for the client to take its bytes (the socket's buffer is
    /// full), or [`NONE`]: a client that never reads must not hold a connection for ever.
    write_blocked_since: AtomicU64,
}

/// Why the watchdog closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expired {
    Headers,
    Idle,
    /// An answer made no progress: the client does not read it.
    Write,
}

impl Expired {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Expired::Headers => "headers",
            Expired::Idle => "idle",
            Expired::Write => "write",
        }
    }
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            headers_since: AtomicU64::new(0),
            write_blocked_since: AtomicU64::new(NONE),
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.headers_since.compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A write went through (`true`) or found the socket's buffer full (`false`).
    fn wrote(&self, progressed: bool) {
        if progressed {
            self.write_blocked_since.store(NONE, Ordering::Release);
        } else {
            let _ = self.write_blocked_since.compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Whether the connection has waited too long: for the client to take an answer's bytes
    /// (`write`, whether or not a request is being served), for the headers it began to
    /// receive, or for a next request (never while a request is being served).
    pub(super) fn expired(&self, headers: Duration, idle: Duration, write: Duration) -> Option<Expired> {
        let now = self.now();
        match self.write_blocked_since.load(Ordering::Acquire) {
            NONE => {}
            since if now.saturating_sub(since) > write.as_millis() as u64 => return Some(Expired::Write),
            _ => {}
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        match self.headers_since.load(Ordering::Acquire) {
            NONE => (now.saturating_sub(self.idle_since.load(Ordering::Acquire)) > idle.as_millis() as u64)
                .then_some(Expired::Idle),
            since => (now.saturating_sub(since) > headers.as_millis() as u64).then_some(Expired::Headers),
        }
    }
}

/// A request being served, from the call of the service until its answer.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: Arc<Activity>) -> Busy {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        a.headers_since.store(NONE, Ordering::Release);
        Busy(a)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since.store(a.now(), Ordering::Release);
        a.headers_since.store(NONE, Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `app` as a hyper service that marks each request busy while it is served.
pub(super) fn counted(
    app: Router,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<axum::response::Response, Infallible>> + Send,
> {
    let svc = TowerToHyperService::new(app);
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::new(activity.clone());
        let answer = hyper::service::Service::call(&svc, req);
        async move {
            let r = answer.await;
            drop(busy);
            r
        }
    })
}

/// An IO stream that tells its [`Activity`] when bytes come in.
pub(super) struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I> Watched<I> {
    pub(super) fn new(inner: I, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.wrote(r.is_ready());
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.wrote(r.is_ready());
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a TLS handshake failed: the `reason` label of `kausality_tls_handshake_failures_total`
/// (a closed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within the header read timeout.
    Timeout,
    /// Client certificates are required and the client sent none.
    NoClientCertificate,
    /// The client's certificate does not chain to `client_ca`, has expired, ...
    BadClientCertificate,
    /// The client refused ours (an alert: unknown CA, bad certificate, ...).
    PeerAlert,
    /// Not TLS, or TLS we do not speak (plain HTTP to an HTTPS port, old versions, ciphers).
    Protocol,
    /// The connection closed or broke during the handshake.
    Closed,
}

impl HandshakeFailure {
    /// Every reason: the closed set of the `reason` label.
    pub const ALL: [HandshakeFailure; 6] = [
        HandshakeFailure::Timeout,
        HandshakeFailure::NoClientCertificate,
        HandshakeFailure::BadClientCertificate,
        HandshakeFailure::PeerAlert,
        HandshakeFailure::Protocol,
        HandshakeFailure::Closed,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::NoClientCertificate => "no_client_certificate",
            HandshakeFailure::BadClientCertificate => "bad_client_certificate",
            HandshakeFailure::PeerAlert => "peer_alert",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::Closed => "closed",
        }
    }

    /// The reason of a failed `accept` (tokio-rustls wraps rustls' error in the `io::Error`).
    pub fn of(e: &std::io::Error) -> HandshakeFailure {
        use tokio_rustls::rustls::Error as Tls;
        match e.get_ref().and_then(|inner| inner.downcast_ref::<Tls>()) {
            Some(Tls::NoCertificatesPresented) => HandshakeFailure::NoClientCertificate,
            Some(Tls::InvalidCertificate(_)) => HandshakeFailure::BadClientCertificate,
            Some(Tls::AlertReceived(_)) => HandshakeFailure::PeerAlert,
            Some(_) => HandshakeFailure::Protocol,
            None => HandshakeFailure::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_timed_from_their_first_byte_and_idleness_from_the_last_answer() {
        let a = Arc::new(Activity::new());
        let (h, i) = (Duration::from_millis(40), Duration::from_millis(80));
        let expired = |a: &Activity| a.expired(h, i, Duration::from_secs(60));
        assert_eq!(expired(&a), None);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(expired(&a), Some(Expired::Headers), "nothing sent since the accept");
        let busy = Busy::new(a.clone());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(expired(&a), None, "a request being answered is never cut");
        drop(busy);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(expired(&a), None, "idle for less than the idle timeout");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(expired(&a), Some(Expired::Idle));
        a.read();
        assert_eq!(expired(&a), None, "the next request has begun");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(expired(&a), Some(Expired::Headers));
    }

    #[test]
    fn an_answer_the_client_does_not_read_expires_even_while_it_is_served() {
        let a = Arc::new(Activity::new());
        let (h, i, w) = (Duration::from_secs(60), Duration::from_secs(60), Duration::from_millis(40));
        let _busy = Busy::new(a.clone());
        a.wrote(false);
        std::thread::sleep(Duration::from_millis(20));
        a.wrote(false);
        assert_eq!(a.expired(h, i, w), None, "blocked for less than the write timeout");
        a.wrote(true);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(a.expired(h, i, w), None, "the client took bytes: the stall starts again");
        a.wrote(false);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(a.expired(h, i, w), Some(Expired::Write), "no progress for longer than the write timeout");
    }

    /// A writer whose buffer is full: every write waits.
    struct Full;

    impl AsyncWrite for Full {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<std::io::Result<usize>> {
            Poll::Pending
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn a_watched_writer_reports_a_full_socket() {
        let a = Arc::new(Activity::new());
        let mut w = Watched::new(Full, a.clone());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut w).poll_write(&mut cx, b"answer").is_pending());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            a.expired(Duration::from_secs(60), Duration::from_secs(60), Duration::from_millis(10)),
            Some(Expired::Write)
        );
    }

    #[test]
    fn handshake_failures_are_told_apart_by_rustls_error() {
        use tokio_rustls::rustls::{CertificateError, Error as Tls};
        let io = |e: Tls| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        assert_eq!(HandshakeFailure::of(&io(Tls::NoCertificatesPresented)), HandshakeFailure::NoClientCertificate);
        assert_eq!(
            HandshakeFailure::of(&io(Tls::InvalidCertificate(CertificateError::UnknownIssuer))),
            HandshakeFailure::BadClientCertificate
        );
        assert_eq!(HandshakeFailure::of(&io(Tls::HandshakeNotComplete)), HandshakeFailure::Protocol);
        assert_eq!(
            HandshakeFailure::of(&std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
            HandshakeFailure::Closed
        );
    }
}
