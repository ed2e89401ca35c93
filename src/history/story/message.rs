//! What to tell a person whose question has no single story: the object is not in the store,
//! several objects match (and which flag picks one), or the time asked for is older than
//! anything the store keeps. `why` prints these; the query API sends them as its `error`.

use rusqlite::Connection;

use super::{oldest_us, ObjectRef, StoryError, StoryQuery};
use crate::decode::time::format_rfc3339_micros;

/// The message for an error of [`super::build`].
pub fn explain(conn: &Connection, q: &StoryQuery, e: &StoryError) -> String {
    match e {
        StoryError::NotFound => {
            let from = oldest_us(conn).ok().flatten().map(format_rfc3339_micros);
            not_found_message(q, from.as_deref())
        }
        StoryError::Ambiguous(candidates) => ambiguous_message(q, candidates),
        StoryError::BeforeHistory { history_from } => before_history_message(q, history_from),
        StoryError::Invalid(m) => m.clone(),
        StoryError::Store(e) => format!("reading the history store: {e}"),
    }
}

/// "ReplicaSet shop/web-7d9f", "ReplicaSet web-7d9f in any namespace", "object with UID …", with the cluster when the question names one.
fn describe(q: &StoryQuery) -> String {
    let mut s = match (&q.name, &q.uid) {
        (Some(name), _) if !q.kind.is_empty() => match q.namespace.as_deref() {
            Some("") => format!("{} {name} (cluster-scoped)", q.kind),
            Some(ns) => format!("{} {ns}/{name}", q.kind),
            None => format!("{} {name} in any namespace", q.kind),
        },
        (_, Some(uid)) => format!("object with UID {uid}"),
        _ => "such an object".to_string(),
    };
    if let (Some(uid), Some(_), false) = (&q.uid, &q.name, q.kind.is_empty()) {
        s.push_str(&format!(" with UID {uid}"));
    }
    if let Some(c) = &q.cluster {
        s.push_str(&format!(" in cluster {c}"));
    }
    s
}

/// Unknown object: "no ReplicaSet shop/web-7d9f in the history store (it keeps from …)".
pub fn not_found_message(q: &StoryQuery, history_from: Option<&str>) -> String {
    let keeps = match history_from {
        Some(t) => format!("it keeps from {t}"),
        None => "it is empty".to_string(),
    };
    format!("no {} in the history store ({keeps})", describe(q))
}

/// Several objects match: each candidate, and the flag that picks one.
pub fn ambiguous_message(q: &StoryQuery, candidates: &[ObjectRef]) -> String {
    let differ = |f: fn(&ObjectRef) -> &str| candidates.iter().any(|c| f(c) != f(&candidates[0]));
    let mut flags = Vec::new();
    if differ(|c| &c.cluster) {
        flags.push("--cluster CLUSTER");
    }
    if differ(|c| &c.namespace) {
        flags.push("-n NAMESPACE");
    }
    let pick = if flags.is_empty() {
        // The same name in the same place: objects that had the name one after the other.
        "pick one with --uid UID".to_string()
    } else if q.uid.is_some() {
        format!("pick one with {}", flags.join(" and "))
    } else {
        format!("pick one with {} (or --uid UID)", flags.join(" and "))
    };
    let mut s = format!("{} objects match {}; {pick}:", candidates.len(), describe(q));
    for c in candidates {
        let ns =
            if c.namespace.is_empty() { "(cluster-scoped)".to_string() } else { format!("namespace {}", c.namespace) };
        s.push_str(&format!(
            "\n  cluster {}  {ns}  {} {}  uid {}  seen {} .. {}",
            c.cluster, c.kind, c.name, c.uid, c.first_seen, c.last_seen
        ));
        if let Some(d) = &c.deleted {
            s.push_str(&format!("  deleted {} by {}", d.time, d.user));
        }
    }
    s
}

/// `at` older than the store: how far back it reaches.
pub fn before_history_message(q: &StoryQuery, history_from: &str) -> String {
    let at = q.at_us.map(format_rfc3339_micros).unwrap_or_else(|| "the time asked for".into());
    format!(
        "the history store reaches back to {history_from} only: nothing older is kept (or retention removed it), so it cannot tell the story of {} at {at}",
        describe(q)
    )
}
