//! Unknown parents (`[unknown_parents] fetch = true`, cargo feature `fetch`): when a child's
//! controller owner was never seen in the stream (the service started after the parent's last
//! write, or the parent's kind is outside the audit policy), get the parent once from the API
//! server and teach it to the model with `Engine::observe`, so that its children's next writes
//! are judged instead of reported as `unknown-parent`.
//!
//! Off the hot path: the processor hands `unknown-parent` events over without waiting (a full
//! queue drops the hint; a later child will give it again), fetches are rate-limited, and
//! results, found or not, are remembered in an LRU so a parent is asked for at most once
//! (a miss again after `retry_after`). The fetched object goes back through the processor's
//! queue, so only the processor task ever writes to the model.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::Client;
use lru::LruCache;
use tokio::sync::{mpsc, watch};

use crate::classify::Engine;
use crate::decode::ObjectView;
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::shell::{Observed, UnknownParentsConfig};

/// Why the fetcher could not be set up (at start, from the `[unknown_parents]` section).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configured kubeconfig file could not be read or used.
    #[error("unknown_parents: cannot read the kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The kubeconfig's path, as configured.
        path: String,
        /// What the kube client said.
        message: String,
    },
    /// No kubeconfig configured, and none found (`$KUBECONFIG`, `~/.kube/config`, the in-cluster
    /// service account): the kube client's message.
    #[error("unknown_parents: no API server configuration (in-cluster service account or $KUBECONFIG): {0}")]
    Client(String),
}

/// What is remembered of one parent.
#[derive(Clone, Copy)]
enum Known {
    /// Fetched and given to the model.
    Found,
    /// Not found, forbidden, or of an unknown kind, at this time.
    Missing(Instant),
}

/// Starts the fetcher; returns the queue the processor hands `unknown-parent` events to.
pub async fn spawn(
    cfg: &UnknownParentsConfig,
    cluster: String,
    engine: Arc<Engine>,
    _metrics: Arc<Metrics>,
    observe: mpsc::Sender<Observed>,
    mut stop: watch::Receiver<bool>,
) -> Result<mpsc::Sender<Arc<Enriched>>, Error> {
    let client = match &cfg.kubeconfig {
        Some(path) => {
            let err = |m: String| Error::Kubeconfig { path: path.display().to_string(), message: m };
            let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
            let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?;
            Client::try_from(config).map_err(|e| err(e.to_string()))?
        }
        None => Client::try_default().await.map_err(|e| Error::Client(e.to_string()))?,
    };
    let (tx, mut rx) = mpsc::channel::<Arc<Enriched>>(1024);
    let every = Duration::from_secs_f64(1.0 / cfg.rate);
    let retry_after = cfg.retry_after.0;
    let mut known: LruCache<Arc<str>, Known> =
        LruCache::new(NonZeroUsize::new(cfg.cache_size.max(1)).expect("non-zero"));
    tracing::info!(cluster = %cluster, rate = cfg.rate, "fetching unknown parents from the API server");
    tokio::spawn(async move {
        let mut fetcher = Fetcher { client, kinds: HashMap::new() };
        let mut pace = tokio::time::interval(every);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let e = tokio::select! {
                m = rx.recv() => match m { Some(e) => e, None => break },
                _ = crate::listen::stopped(&mut stop) => break,
            };
            let Some(p) = e.parent.as_ref() else { continue };
            if *e.cluster != *cluster {
                continue;
            }
            match known.get(&p.uid) {
                Some(Known::Found) => continue,
                Some(Known::Missing(at)) if at.elapsed() < retry_after => continue,
                _ => {}
            }
            pace.tick().await;
            let outcome = fetcher.get(&p.api_version, &p.kind, &e.object.namespace, &p.name).await;
            let pin = engine.interner().pin();
            let facts = match outcome {
                Ok(Some(obj)) => {
                    let json = serde_json::to_string(&obj).unwrap_or_default();
                    let view: Option<ObjectView<'_>> = serde_json::from_str(&json).ok();
                    let extractor = engine.extractor();
                    view.and_then(|v| extractor.facts(&v)).filter(|f| *f.uid_text == *p.uid)
                }
                Ok(None) => None,
                Err(why) => {
                    tracing::debug!(kind = %p.kind, name = %p.name, error = %why, "parent fetch failed");
                    None
                }
            };
            match facts {
                Some(facts) => {
                    tracing::debug!(kind = %p.kind, name = %p.name, "unknown parent fetched");
                    known.put(p.uid.clone(), Known::Found);
                    if observe.send(Observed { cluster: cluster.clone(), facts, pin }).await.is_err() {
                        break;
                    }
                }
                // Gone, replaced by another object of the same name, or not readable.
                None => {
                    known.put(p.uid.clone(), Known::Missing(Instant::now()));
                }
            }
        }
    });
    Ok(tx)
}

struct Fetcher {
    client: Client,
    /// Discovery results by apiVersion/kind (`None`: the API server does not serve it).
    kinds: HashMap<(String, String), Option<(ApiResource, ApiCapabilities)>>,
}

impl Fetcher {
    async fn get(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, String> {
        let key = (api_version.to_string(), kind.to_string());
        if !self.kinds.contains_key(&key) {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let found = kube::discovery::pinned_kind(&self.client, &gvk).await.ok();
            self.kinds.insert(key.clone(), found);
        }
        let Some((ar, caps)) = self.kinds.get(&key).cloned().flatten() else {
            return Err(format!("{kind}.{api_version} is not served by the API server"));
        };
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(self.client.clone(), namespace, &ar),
            Scope::Cluster => Api::all_with(self.client.clone(), &ar),
        };
        api.get_opt(name).await.map_err(|e| e.to_string())
    }
}
