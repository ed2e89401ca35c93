//! `GET /v1/verdict`: the verdict of the live engine, and how current it is.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use serde::Serialize;

use super::params::Params;
use super::{ApiError, Endpoint, QueryState};
use crate::classify::{ChildQuery, ParentRef, Verdict, VerdictError, VerdictQuery};
use crate::decode::time::format_rfc3339_micros;

const PARAMS: &[&str] = &[
    "cluster",
    "parentUid",
    "parentKind",
    "namespace",
    "parentName",
    "user",
    "childKind",
    "childName",
    "childNamespace",
];

/// How current the state behind a verdict is.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Freshness {
    /// Event time (`stageTimestamp`) of the newest write applied for the cluster; `None`
    /// before the first (since the start: a restored snapshot does not say).
    pub newest_event_time: Option<String>,
    /// How long every write waits in the reorder buffer before it is applied.
    pub reorder_lag_seconds: f64,
    /// Now minus `newestEventTime`: a quiet cluster and a stalled stream both show here.
    pub age_seconds: Option<f64>,
}

#[derive(Serialize)]
struct Answer {
    #[serde(flatten)]
    verdict: Verdict,
    freshness: Freshness,
}

pub(super) async fn handle(State(s): State<Arc<QueryState>>, uri: Uri) -> Response {
    let query = uri.query().map(str::to_string);
    s.serve(Endpoint::Verdict, |s| async move {
        let p = Params::parse(query.as_deref(), PARAMS)?;
        let asked = Asked::of(&p, &s.ctx.default_cluster)?;
        s.blocking(move |s| answer(s, &asked)).await
    })
    .await
}

/// The parameters of a verdict, owned (they go to a blocking thread).
struct Asked {
    cluster: String,
    parent_uid: Option<String>,
    parent: Option<(String, String, String)>,
    user: String,
    child: Option<(String, Option<String>, Option<String>)>,
}

impl Asked {
    fn of(p: &Params, default_cluster: &str) -> Result<Asked, ApiError> {
        let user = p.required("user", "the user whose write to a child is asked about")?.to_string();
        let parent_uid = p.get("parentUid").map(str::to_string);
        let named = (p.get("parentKind"), p.get("parentName"));
        let parent = match (&parent_uid, named) {
            (Some(_), (None, None)) => None,
            (Some(_), _) => {
                return Err(ApiError::BadRequest(
                    "give parentUid, or parentKind, namespace and parentName, not both".into(),
                ))
            }
            (None, (Some(kind), Some(name))) => {
                Some((kind.to_string(), p.get_raw("namespace").unwrap_or("").to_string(), name.to_string()))
            }
            (None, _) => {
                return Err(ApiError::BadRequest(
                    "a parent is required: parentUid, or parentKind, namespace and parentName".into(),
                ))
            }
        };
        let child = match (p.get("childKind"), p.get("childName")) {
            (Some(kind), name) => {
                Some((kind.to_string(), name.map(str::to_string), p.get_raw("childNamespace").map(str::to_string)))
            }
            (None, Some(_)) => return Err(ApiError::BadRequest("childName needs childKind".into())),
            (None, None) => None,
        };
        Ok(Asked { cluster: p.get("cluster").unwrap_or(default_cluster).to_string(), parent_uid, parent, user, child })
    }
}

fn answer(s: &QueryState, a: &Asked) -> Result<String, ApiError> {
    let parent = match (&a.parent_uid, &a.parent) {
        (Some(uid), _) => ParentRef::Uid(uid),
        (None, Some((kind, namespace, name))) => ParentRef::Named { kind, namespace, name },
        (None, None) => return Err(ApiError::BadRequest("a parent is required".into())),
    };
    let child = a.child.as_ref().map(|(kind, name, namespace)| ChildQuery {
        kind,
        name: name.as_deref(),
        namespace: namespace.as_deref(),
    });
    let now = crate::shell::now_us();
    let q = VerdictQuery { cluster: &a.cluster, parent, user: &a.user, child, now_us: now };
    let verdict = s.ctx.engine.verdict(&q).map_err(|e| match e {
        VerdictError::NotFound(m) => ApiError::NotFound(m),
        VerdictError::Ambiguous { message, candidates } => {
            ApiError::Ambiguous { message, candidates: serde_json::to_value(candidates).unwrap_or_default() }
        }
    })?;
    let freshness = freshness(&s.ctx.freshness, &a.cluster, now);
    serde_json::to_string(&Answer { verdict, freshness }).map_err(|e| ApiError::Internal(e.to_string()))
}

pub(super) fn freshness(f: &crate::order::Freshness, cluster: &str, now: i64) -> Freshness {
    let newest = f.newest_us(cluster);
    Freshness {
        newest_event_time: newest.map(format_rfc3339_micros),
        reorder_lag_seconds: f.window_us() as f64 / 1e6,
        age_seconds: newest.map(|t| (now - t).max(0) as f64 / 1e6),
    }
}
