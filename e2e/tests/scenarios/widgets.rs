//! Scenario 5: a custom resource parent (`Widget`) with its own controller, in the three ways a
//! controller may report what it observed.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::check;
use kausality_e2e::enriched::Event;
use kausality_e2e::harness::{Cluster, Scene, WIDGET_CONTROLLER_ROLE};
use kausality_e2e::users::ADMIN;
use kausality_e2e::widget::{child_name, StatusStyle, Widget, WidgetController, WidgetSpec};

/// The service account the Widget controller runs as (impersonated), with its RoleBinding.
pub async fn controller_identity(s: &Scene<'_>) -> Result<String> {
    let admin = s.cluster.setup.client.clone();
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), &s.ns).create(&PostParams::default(), &sa).await?;
    let rb = RoleBinding {
        metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: WIDGET_CONTROLLER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "widget-controller".into(),
            namespace: Some(s.ns.clone()),
            api_group: None,
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &s.ns).create(&PostParams::default(), &rb).await?;
    Ok(format!("system:serviceaccount:{}:widget-controller", s.ns))
}

/// Creates Widget `w` (value `a`) as the admin, with the controller running; waits until its
/// child exists and its status is written. Returns the controller, its user, the child create.
pub async fn stable_widget(s: &mut Scene<'_>, style: StatusStyle) -> Result<(WidgetController, String, Event)> {
    let user = controller_identity(s).await?;
    let ctl = WidgetController::start(s.service_account("widget-controller").await?, &s.ns, style);
    let widgets: Api<Widget> = Api::namespaced(s.admin.client.clone(), &s.ns);
    let (_, id) = s
        .admin
        .audited(widgets.create(&PostParams::default(), &Widget::new("w", WidgetSpec { value: "a".into() })))
        .await?;
    let created = s.event("the Widget create", &id).await?;
    s.expect("admin creates Widget w", &created, "unowned")?;
    ctl.wait_reconciled(1).await?;
    let u = user.clone();
    let child = s
        .wait_event("the child create", move |e| e.verb == "create" && e.object.kind == "ConfigMap" && e.user == u)
        .await?;
    s.expect("the Widget controller creates the child ConfigMap (no status yet)", &child, "initializing")?;
    Ok((ctl, user, child))
}

/// The controller's next write of the child after `after`.
pub async fn next_child_write(s: &Scene<'_>, user: &str, after: &Event) -> Result<Event> {
    let (u, child) = (user.to_string(), child_name("w"));
    s.wait_after("the controller's next child write", after, move |e| {
        e.user == u && e.object.name == child && e.verb == "patch"
    })
    .await
}

pub async fn widget(cluster: &Cluster, scenario: &str, style: StatusStyle) -> Result<()> {
    let about = format!("a Widget custom resource whose kube-runtime controller reports {:?} ({}): the child update after a spec change is expected, an unprompted one while stable is drift", style, style.observed_source());
    let mut s = Scene::new(cluster, scenario, &about).await?;
    let (ctl, user, child) = stable_widget(&mut s, style).await?;
    let widgets: Api<Widget> = Api::namespaced(s.admin.client.clone(), &s.ns);

    // A spec change: the controller catches up.
    let (_, id) = s
        .admin
        .audited(widgets.patch("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"value": "b"}}))))
        .await?;
    let change = s.event("the spec change", &id).await?;
    s.expect("admin changes the Widget's spec (generation 2)", &change, "unowned")?;
    let update = next_child_write(&s, &user, &child).await?;
    s.expect("the controller updates the child for generation 2", &update, "expected")?;
    check("trace of the child update", &update, update.trace_users(), vec![ADMIN.to_string(), user.clone()])?;
    let p = update.parent.clone().context("parent")?;
    check(
        "parent as seen at the child update",
        &update,
        (p.generation, p.observed_generation, p.observed_generation_source.as_deref()),
        (Some(2), Some(1), Some(style.observed_source())),
    )?;
    ctl.wait_reconciled(2).await?;

    // Nothing asked for this one.
    ctl.set_knob("1");
    let drift = next_child_write(&s, &user, &update).await?;
    s.expect("the controller changes the child unprompted while the Widget is stable", &drift, "drift")?;
    check("resolution", &drift, drift.resolution.as_deref(), Some("unresolved"))?;
    let p = drift.parent.clone().context("parent")?;
    check(
        "parent as seen at the drift",
        &drift,
        (p.generation, p.observed_generation, p.observed_generation_source.as_deref()),
        (Some(2), Some(2), Some(style.observed_source())),
    )?;
    ctl.stop();
    s.finish().await
}
