//! The query API (docs/query-api.md, docs/query-api.openapi.json): its own listener, loopback by
//! default, with the webhook's TLS, client-certificate and bearer-token options.
//!
//! - `GET /v1/verdict`: what a write by a user to a child of a parent would be now, from the
//!   live engine ([`crate::classify::Engine::verdict`]), with how current the state is.
//! - `GET /v1/objects`, `GET /v1/drift`, `GET /v1/why` (an object's story,
//!   `history::story`): from the history store, read on blocking threads.
//!
//! Every answer is JSON; an error is `{"error": "..."}`: 400 malformed parameters, 401 without
//! the bearer token (checked first, before anything else of the request), 404 unknown object or
//! route, 405 another method than GET, 409 ambiguous name (with `candidates`), 410 a time
//! before the history, 414 a request target over [`MAX_TARGET_BYTES`], 500 a failed read, 503
//! no history store.

mod config;
mod history;
mod params;
mod verdict;
mod why;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::{watch, Semaphore};

pub use config::QueryConfig;
pub use params::{DEFAULT_LIMIT, MAX_LIMIT};

use crate::classify::Engine;
pub use crate::listen::Running;
use crate::listen::{self, Limits};
use crate::metrics::{Listener, Metrics};
use crate::order::Freshness;

/// Why the query API could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its listener could not start, or its bearer token file cannot be read.
    #[error(transparent)]
    Listen(#[from] listen::Error),
}

/// What the query API reads: the live engine and how current it is, and the history store.
pub struct Context {
    /// The live engine the verdict asks.
    pub engine: Arc<Engine>,
    /// How current the engine's state is, per cluster.
    pub freshness: Arc<Freshness>,
    /// Where requests are counted.
    pub metrics: Arc<Metrics>,
    /// The cluster of a request that names none (the pipeline's `cluster`).
    pub default_cluster: String,
    /// The history store, when there is one.
    pub history: Option<PathBuf>,
}

/// The longest request target (path and query) the API reads; a longer one is answered 414.
/// A question takes a few hundred bytes. (A request line over 64 KiB never reaches the API:
/// the HTTP layer refuses it before the request is read, with an empty 414.)
pub const MAX_TARGET_BYTES: usize = 8192;

/// The endpoints of the query API, as the `route` label of `kausality_query_requests_total`
/// names them (not to be confused with [`crate::route::Route`], where an audit event goes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/verdict`.
    Verdict,
    /// `/v1/objects`.
    Objects,
    /// `/v1/drift`.
    Drift,
    /// `/v1/why`.
    Why,
    /// Any other path.
    Other,
}

impl Endpoint {
    /// Every endpoint: the closed set of the `route` label.
    pub const ALL: [Endpoint; 5] =
        [Endpoint::Verdict, Endpoint::Objects, Endpoint::Drift, Endpoint::Why, Endpoint::Other];

    /// The route of a request's path, as [`router`] routes it.
    fn of(path: &str) -> Endpoint {
        match path {
            "/v1/verdict" => Endpoint::Verdict,
            "/v1/objects" => Endpoint::Objects,
            "/v1/drift" => Endpoint::Drift,
            "/v1/why" => Endpoint::Why,
            _ => Endpoint::Other,
        }
    }

    /// The `route` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Verdict => "verdict",
            Endpoint::Objects => "objects",
            Endpoint::Drift => "drift",
            Endpoint::Why => "why",
            Endpoint::Other => "other",
        }
    }
}

/// An answer other than 200.
#[derive(Debug)]
pub enum ApiError {
    /// 400: what is wrong with the request.
    BadRequest(String),
    /// 401: no bearer token, or the wrong one.
    Unauthorized,
    /// 404: what was not found.
    NotFound(String),
    /// A route asked with another method than GET (or HEAD).
    MethodNotAllowed(String),
    /// A request target over [`MAX_TARGET_BYTES`].
    UriTooLong(String),
    /// Several objects answer to the name; they are listed.
    Ambiguous {
        /// What was asked and how to name one.
        message: String,
        /// The objects that answer to the name.
        candidates: serde_json::Value,
    },
    /// The time asked for is older than the history store reaches.
    Gone(String),
    /// No history store to read.
    Unavailable(String),
    /// 500: what failed inside.
    Internal(String),
}

impl ApiError {
    fn code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            ApiError::Ambiguous { .. } => StatusCode::CONFLICT,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> serde_json::Value {
        match self {
            ApiError::Unauthorized => serde_json::json!({"error": "missing or wrong bearer token"}),
            ApiError::Ambiguous { message, candidates } => {
                serde_json::json!({"error": message, "candidates": candidates})
            }
            ApiError::BadRequest(m)
            | ApiError::NotFound(m)
            | ApiError::MethodNotAllowed(m)
            | ApiError::UriTooLong(m)
            | ApiError::Gone(m)
            | ApiError::Unavailable(m)
            | ApiError::Internal(m) => serde_json::json!({"error": m}),
        }
    }
}

/// What every request shares.
pub struct QueryState {
    ctx: Context,
    token: Option<String>,
    /// Requests being answered at once (each holds a blocking thread while it reads).
    reads: Semaphore,
    history: Option<history::Store>,
}

impl QueryState {
    /// What the requests of `ctx` share: the bearer `token` they must carry, if any, and at
    /// most `max_concurrent_reads` of them reading at once (at least one).
    pub fn new(ctx: Context, token: Option<String>, max_concurrent_reads: usize) -> Arc<QueryState> {
        let history = ctx.history.clone().map(history::Store::new);
        ctx.metrics
            .query_series(Endpoint::ALL.map(Endpoint::as_str), [Endpoint::Drift, Endpoint::Why].map(Endpoint::as_str));
        Arc::new(QueryState { ctx, token, reads: Semaphore::new(max_concurrent_reads.max(1)), history })
    }

    /// Answers one request that [`gate`] let through: `answer` with a permit to read.
    async fn serve<F, Fut>(self: &Arc<Self>, route: Endpoint, answer: F) -> Response
    where
        F: FnOnce(Arc<QueryState>) -> Fut,
        Fut: std::future::Future<Output = Result<String, ApiError>>,
    {
        let result = match self.reads.acquire().await {
            Ok(_permit) => answer(self.clone()).await,
            Err(_) => Err(ApiError::Unavailable("shutting down".into())),
        };
        self.respond(route, result)
    }

    /// The answer as JSON, counted by route and code.
    fn respond(&self, route: Endpoint, result: Result<String, ApiError>) -> Response {
        let (code, body) = match result {
            Ok(body) => (StatusCode::OK, body),
            Err(e) => (e.code(), e.body().to_string()),
        };
        self.ctx.metrics.query_answered(route.as_str(), code.as_str());
        let mut r = (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        match code {
            StatusCode::UNAUTHORIZED => {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::METHOD_NOT_ALLOWED => {
                r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            _ => {}
        }
        r
    }

    /// Runs `f` on a blocking thread (SQLite reads, scans of the live state).
    async fn blocking<T: Send + 'static>(
        self: Arc<Self>,
        f: impl FnOnce(&QueryState) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        tokio::task::spawn_blocking(move || f(&self))
            .await
            .map_err(|e| ApiError::Internal(format!("the request failed inside kausality-stream: {e}")))?
    }

    fn history(&self) -> Result<&history::Store, ApiError> {
        self.history.as_ref().ok_or_else(|| {
            ApiError::Unavailable("this service keeps no history store: add a `history` sink to the pipeline, or set [query] history = PATH".into())
        })
    }
}

/// The routes, for serving and for in-process tests.
pub fn router(state: Arc<QueryState>) -> Router {
    Router::new()
        .route("/v1/verdict", get(verdict::handle))
        .route("/v1/objects", get(history::objects))
        .route("/v1/drift", get(history::drift))
        .route("/v1/why", get(why::handle))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state)
}

/// What every request passes before its route answers, in this order: the bearer token (so
/// that a client without it learns nothing of the API, not even its routes' methods), then
/// the method, then the size of the request target.
async fn gate(State(s): State<Arc<QueryState>>, req: Request, next: Next) -> Response {
    let route = Endpoint::of(req.uri().path());
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    let refused = match &s.token {
        Some(token) if !listen::bearer_matches(req.headers(), token) => Some(ApiError::Unauthorized),
        _ if route != Endpoint::Other && !matches!(*req.method(), Method::GET | Method::HEAD) => {
            Some(ApiError::MethodNotAllowed(format!("{} {}: the API answers only GET (and HEAD)", req.method(), req.uri().path())))
        }
        _ if target > MAX_TARGET_BYTES => {
            Some(ApiError::UriTooLong(format!("the request target is {target} bytes; the API reads at most {MAX_TARGET_BYTES} bytes: ask a narrower question")))
        }
        _ => None,
    };
    match refused {
        Some(e) => s.respond(route, Err(e)),
        None => next.run(req).await,
    }
}

async fn not_found(State(s): State<Arc<QueryState>>, uri: Uri) -> Response {
    let path = uri.path().to_string();
    s.serve(Endpoint::Other, |_| async move {
        Err(ApiError::NotFound(format!(
            "no route {path}; the API serves GET /v1/verdict, /v1/objects, /v1/drift, /v1/why"
        )))
    })
    .await
}

/// Binds the listener and serves until `shutdown`.
pub async fn start(
    cfg: &QueryConfig,
    ctx: Context,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> Result<Running, Error> {
    let mut opened =
        listen::open(cfg.listen, cfg.tls.as_ref(), cfg.bearer_token_file.as_deref(), "query.bearer_token_file").await?;
    let metrics = ctx.metrics.clone();
    let history = ctx.history.as_ref().map(|p| p.display().to_string());
    let state = QueryState::new(ctx, opened.token.take(), cfg.max_concurrent_reads);
    let limits = Limits {
        name: Listener::Query,
        max_connections: cfg.max_connections,
        header_read_timeout: cfg.header_read_timeout.0,
        idle_timeout: cfg.idle_timeout.0,
        max_connections_per_client: Some(cfg.max_connections_per_client),
    };
    tracing::info!(addr = %opened.local_addr, https = opened.tls.is_some(), bearer_token = cfg.bearer_token_file.is_some(), history = ?history, "query API listening");
    Ok(opened.serve(router(state), shutdown, grace, limits, metrics))
}
