//! `[unknown_parents]`: what the runner and the fetcher of parents the stream never showed
//! share: the section's settings, and the fetched object the fetcher hands back to the
//! processor.

use std::path::PathBuf;

use serde::Deserialize;

use super::duration::Span;
use crate::write::ObjectFacts;

/// `[unknown_parents]`: fetch a parent the stream never showed, instead of reporting
/// `unknown-parent` for its children forever.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UnknownParentsConfig {
    /// Fetch parents from the API server (needs the `fetch` cargo feature and `get` RBAC).
    /// Default: `false`.
    pub fetch: bool,
    /// Kubeconfig to reach the API server. Default: none (in-cluster service account, else
    /// `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// Cluster whose parents are fetched (one API server per pipeline). Default: the
    /// pipeline's `cluster`.
    pub cluster: Option<String>,
    /// Most fetches per second. Default: 10.
    pub rate: f64,
    /// Fetch results (hits and misses) remembered, so a parent is fetched at most once per
    /// `retry_after`. Default: 10000.
    pub cache_size: usize,
    /// How long a miss (not found, forbidden, unknown kind) is remembered before a new try.
    /// Default: `"10m"`.
    pub retry_after: Span,
}

impl Default for UnknownParentsConfig {
    fn default() -> Self {
        UnknownParentsConfig {
            fetch: false,
            kubeconfig: None,
            cluster: None,
            rate: 10.0,
            cache_size: 10_000,
            retry_after: Span::secs(600),
        }
    }
}

/// An object fetched from the API server (a parent the stream never showed).
#[derive(Debug)]
pub struct Observed {
    /// The cluster it was fetched from.
    pub cluster: String,
    /// What the model reads of it.
    pub facts: ObjectFacts,
    /// Keeps the strings interned for `facts` from being swept until they are applied.
    pub pin: crate::state::Pin,
}
