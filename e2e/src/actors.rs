//! Who writes in a scenario. Each actor is a Kubernetes client as the admin (the kubeconfig's
//! client certificate, `kubernetes-admin`, group `system:masters`) or impersonating another user
//! (`Impersonate-User`): audit events then carry `impersonatedUser`, which kausality-stream
//! takes as the effective user (DESIGN §1.2).
//!
//! Every response's `Audit-Id` header is recorded, so a test knows the exact audit event of its
//! own write and finds kausality-stream's verdict on it by auditID.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::util::MapResponseLayer;

pub struct Actor {
    /// The effective user, as audit events and enriched events name it.
    pub user: String,
    pub client: Client,
    /// The `Audit-Id` of the latest response to this client.
    last_audit_id: Arc<Mutex<Option<String>>>,
}

fn record_audit_id<B>(slot: Arc<Mutex<Option<String>>>) -> impl Fn(http::Response<B>) -> http::Response<B> + Clone {
    move |resp| {
        if let Some(id) = resp.headers().get("audit-id").and_then(|v| v.to_str().ok()) {
            *slot.lock().expect("audit id slot") = Some(id.to_string());
        }
        resp
    }
}

impl Actor {
    /// A client from `kubeconfig` (the admin), impersonating `as_user` if given.
    pub async fn connect(kubeconfig: &Path, as_user: Option<&str>) -> Result<Actor> {
        let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        let user = match as_user {
            Some(u) => {
                config.auth_info.impersonate = Some(u.to_string());
                u.to_string()
            }
            None => crate::users::ADMIN.to_string(),
        };
        let slot = Arc::new(Mutex::new(None));
        let client = kube::client::ClientBuilder::try_from(config)?
            .with_layer(&MapResponseLayer::new(record_audit_id(slot.clone())))
            .build();
        Ok(Actor { user, client, last_audit_id: slot })
    }

    /// Runs one API call and returns its result with the call's auditID. The client must not be
    /// used by another task at the same time (each actor belongs to the test's own task).
    pub async fn audited<T>(&self, call: impl Future<Output = kube::Result<T>>) -> Result<(T, String)> {
        *self.last_audit_id.lock().expect("audit id slot") = None;
        let out = call.await.with_context(|| format!("API call as {}", self.user))?;
        let id = self
            .last_audit_id
            .lock()
            .expect("audit id slot")
            .take()
            .context("the API server sent no Audit-Id header")?;
        Ok((out, id))
    }
}
