//! `Widget` (`e2e.kausality.io/v1`): a custom resource whose tiny controller, written with
//! kube-runtime's `Controller`, keeps one child ConfigMap (`<name>-child`) in line with the
//! Widget's spec, and reports back in one of three styles (DESIGN §1.3):
//!
//! - native: `status.observedGeneration` ([`StatusStyle::Native`]);
//! - conditions ([`StatusStyle::Conditions`]): Crossplane style, `Synced`/`Ready` conditions with
//!   `observedGeneration`, nothing else;
//! - synthetic ([`StatusStyle::Synthetic`]): neither: a `Ready` condition without a generation, so
//!   kausality-stream must use the generation at the controller's latest status write.
//!
//! The child also carries a test knob: changing it makes the controller change the child with
//! no change of the Widget's spec, like a controller reacting to external state (drift).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::wait;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "e2e.kausality.io", version = "v1", kind = "Widget", namespaced, status = "WidgetStatus")]
pub struct WidgetSpec {
    /// Copied into the child ConfigMap.
    pub value: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WidgetCondition>,
    /// The value the controller applied last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub reason: String,
}

/// How the controller reports what it has observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusStyle {
    Native,
    Conditions,
    Synthetic,
}

impl StatusStyle {
    /// The `observedGenerationSource` kausality-stream reports for this style.
    pub fn observed_source(self) -> &'static str {
        match self {
            StatusStyle::Native => "status",
            StatusStyle::Conditions => "syncedCondition",
            StatusStyle::Synthetic => "synthetic",
        }
    }

    fn status(self, generation: i64, value: &str) -> WidgetStatus {
        let cond = |t: &str, g: Option<i64>| WidgetCondition {
            type_: t.into(),
            status: "True".into(),
            observed_generation: g,
            reason: "Reconciled".into(),
        };
        match self {
            StatusStyle::Native => WidgetStatus {
                observed_generation: Some(generation),
                conditions: vec![cond("Ready", None)],
                applied: Some(value.into()),
            },
            StatusStyle::Conditions => WidgetStatus {
                observed_generation: None,
                conditions: vec![cond("Synced", Some(generation)), cond("Ready", Some(generation))],
                applied: None,
            },
            StatusStyle::Synthetic => WidgetStatus {
                observed_generation: None,
                conditions: vec![cond("Ready", None)],
                applied: Some(value.into()),
            },
        }
    }
}

pub fn child_name(widget: &str) -> String {
    format!("{widget}-child")
}

/// Creates the Widget CRD (cluster-scoped) and waits until it is served.
pub async fn install_crd(admin: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let crd = Widget::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    if crds.get_opt(&name).await?.is_none() {
        crds.create(&PostParams::default(), &crd).await?;
    }
    wait::until("the Widget CRD to be Established", Duration::from_secs(30), || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let c = crds.get(&name).await?;
            let established = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await?;
    // Served: a list through the new API answers.
    let widgets: Api<Widget> = Api::all(admin.clone());
    wait::until("the Widget API to be served", Duration::from_secs(30), || {
        let widgets = widgets.clone();
        async move { Ok(widgets.list(&Default::default()).await.is_ok().then_some(())) }
    })
    .await
}

struct Ctx {
    client: Client,
    style: StatusStyle,
    knob: Mutex<String>,
    /// Highest Widget generation whose status write succeeded.
    reconciled: AtomicI64,
    errors: Mutex<Vec<String>>,
}

/// The controller of the Widgets of one namespace, running as the client's (impersonated) user.
pub struct WidgetController {
    ctx: Arc<Ctx>,
    task: JoinHandle<()>,
}

impl WidgetController {
    pub fn start(client: Client, namespace: &str, style: StatusStyle) -> WidgetController {
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            style,
            knob: Mutex::new("0".into()),
            reconciled: AtomicI64::new(0),
            errors: Mutex::new(Vec::new()),
        });
        let widgets: Api<Widget> = Api::namespaced(client.clone(), namespace);
        let children: Api<ConfigMap> = Api::namespaced(client, namespace);
        let stream = Controller::new(widgets, watcher::Config::default())
            .owns(children, watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone());
        let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
        WidgetController { ctx, task }
    }

    /// Changes what the controller writes into the child, with no change of the Widget.
    pub fn set_knob(&self, v: &str) {
        *self.ctx.knob.lock().expect("knob") = v.to_string();
    }

    /// Waits until the controller has reconciled `generation` (child written, then status).
    pub async fn wait_reconciled(&self, generation: i64) -> Result<()> {
        wait::until(
            &format!("the Widget controller to reconcile generation {generation}"),
            Duration::from_secs(30),
            || {
                let done = self.ctx.reconciled.load(Ordering::SeqCst) >= generation;
                let errors = self.ctx.errors.lock().expect("errors").clone();
                async move {
                    match (done, errors.last()) {
                        (true, _) => Ok(Some(())),
                        (false, Some(e)) => Err(anyhow::anyhow!("reconcile error: {e}")),
                        (false, None) => Ok(None),
                    }
                }
            },
        )
        .await
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    if w.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = w.namespace().unwrap_or_default();
    let name = w.name_any();
    let generation = w.metadata.generation.unwrap_or(0);
    let children: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let child = child_name(&name);
    let knob = ctx.knob.lock().expect("knob").clone();
    let data: BTreeMap<String, String> =
        [("value".to_string(), w.spec.value.clone()), ("knob".to_string(), knob)].into();
    match children.get_opt(&child).await? {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(child.clone()),
                    owner_references: w.controller_owner_ref(&()).map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            children.create(&PostParams::default(), &cm).await?;
        }
        Some(cm) if cm.data.as_ref() != Some(&data) => {
            children.patch(&child, &PatchParams::default(), &Patch::Merge(json!({ "data": data }))).await?;
        }
        Some(_) => {}
    }
    if ctx.reconciled.load(Ordering::SeqCst) < generation {
        let widgets: Api<Widget> = Api::namespaced(ctx.client.clone(), &namespace);
        let status = ctx.style.status(generation, &w.spec.value);
        widgets.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await?;
        ctx.reconciled.fetch_max(generation, Ordering::SeqCst);
    }
    // Look again soon: the knob is "external state" no watch tells about.
    Ok(Action::requeue(Duration::from_millis(300)))
}

fn error_policy(_w: Arc<Widget>, e: &kube::Error, ctx: Arc<Ctx>) -> Action {
    ctx.errors.lock().expect("errors").push(e.to_string());
    Action::requeue(Duration::from_millis(500))
}
