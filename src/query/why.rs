//! `GET /v1/why`: an object's story from the history store (`history::story::build`), the JSON
//! that `why --output json` prints, with the messages `why` gives for what it cannot tell.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::params::Params;
use super::{ApiError, Endpoint, QueryState};
use crate::history::story::{self, StoryError, StoryQuery};

const PARAMS: &[&str] = &["cluster", "kind", "namespace", "name", "uid", "at", "limit", "before"];

pub(super) async fn handle(State(s): State<Arc<QueryState>>, uri: Uri) -> Response {
    let query = uri.query().map(str::to_string);
    s.serve(Endpoint::Why, |s| async move {
        let p = Params::parse(query.as_deref(), PARAMS)?;
        let q = StoryQuery {
            cluster: p.get("cluster").map(str::to_string),
            kind: p.get("kind").unwrap_or("").to_string(),
            namespace: p.get_raw("namespace").map(str::to_string),
            name: p.get("name").map(str::to_string),
            uid: p.get("uid").map(str::to_string),
            at_us: p.time("at")?,
            limit: Some(writes_limit(&p)?),
            before: p.get("before").map(str::to_string),
        };
        s.blocking(move |s| {
            let story = s.history()?.read(|c| story::build(c, &q).map_err(|e| answer_error(c, &q, e)))?;
            s.ctx.metrics.unreadable_rows(Endpoint::Why.as_str(), story.unreadable);
            serde_json::to_string(&story).map_err(|e| ApiError::Internal(e.to_string()))
        })
        .await
    })
    .await
}

/// `limit`: the writes one answer tells, 1 to [`story::MAX_WRITES`], [`story::DEFAULT_WRITES`]
/// when absent.
fn writes_limit(p: &Params) -> Result<usize, ApiError> {
    match p.get("limit") {
        None => Ok(story::DEFAULT_WRITES),
        Some(l) => l.parse::<usize>().ok().filter(|n| (1..=story::MAX_WRITES).contains(n)).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "limit={l:?} must be a whole number from 1 to {}: the most writes one answer tells",
                story::MAX_WRITES
            ))
        }),
    }
}

/// What the store could not tell, as `why` says it.
fn answer_error(c: &rusqlite::Connection, q: &StoryQuery, e: StoryError) -> ApiError {
    let message = story::explain(c, q, &e);
    match e {
        StoryError::NotFound => ApiError::NotFound(message),
        StoryError::Ambiguous(candidates) => {
            ApiError::Ambiguous { message, candidates: serde_json::to_value(candidates).unwrap_or_default() }
        }
        StoryError::BeforeHistory { .. } => ApiError::Gone(message),
        StoryError::Invalid(_) => ApiError::BadRequest(message),
        StoryError::Store(_) => ApiError::Internal(message),
    }
}
