//! Scenario 7: a day in a namespace, every write judged against the ground truth of what the
//! test did (e2e/src/truth.rs), never against kausality-stream's own output.
//!
//! Deployments of 10 and more replicas with three rolling-update settings, a StatefulSet and a
//! DaemonSet, created and then rolled out; a person deleting a pod; a person scaling a
//! ReplicaSet (the deployment controller scales it back); the Widget controller drifting on its
//! own; a person editing the Widget's child (the controller puts it back); a person scaling a
//! Deployment through `/scale` (`kubectl scale`); a person draining a node (cordon, then an
//! eviction of every pod on it but the DaemonSet's, as `kubectl drain` does); a Job; and the
//! namespace deleted at the end.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use kausality_e2e::actors::Actor;
use kausality_e2e::harness::{Cluster, Scene, WIDGET_CONTROLLER_ROLE};
use kausality_e2e::truth::{Cause, Plan, Role};
use kausality_e2e::wait;
use kausality_e2e::widget::{child_name, StatusStyle, Widget, WidgetController, WidgetSpec};
use kausality_e2e::workloads::{
    current_replicaset, daemonset, job, live_pods, rolling_deployment, statefulset, wait_daemonset_rolled_out,
    wait_job_complete, wait_rolled_out, wait_statefulset_rolled_out,
};

/// The Deployments: name, replicas, maxSurge, maxUnavailable.
fn deployments() -> [(&'static str, i32, IntOrString, IntOrString); 3] {
    let pct = |s: &str| IntOrString::String(s.into());
    [
        ("api", 10, pct("25%"), pct("25%")),
        ("web", 12, IntOrString::Int(0), IntOrString::Int(3)),
        ("worker", 10, IntOrString::Int(3), IntOrString::Int(0)),
    ]
}
const STATEFULSET: &str = "db";
const DAEMONSET: &str = "agent";
const WIDGET: &str = "w";
const JOB: &str = "batch";
/// The node the person drains.
const DRAINED: &str = "kwok-node-0";

fn tops(names: &[(&str, &str)]) -> Cause {
    Cause::Intent(names.iter().map(|(k, n)| (k.to_string(), n.to_string())).collect())
}

/// A write of `actor`, kept in the plan with the class the truth gives it.
async fn act<T>(
    plan: &mut Plan,
    actor: &Actor,
    class: &'static str,
    role: Role,
    what: &str,
    call: impl std::future::Future<Output = kube::Result<T>>,
) -> Result<T> {
    let (out, id) = actor.audited(call).await.with_context(|| what.to_string())?;
    plan.own(&id, class, role, what);
    Ok(out)
}

/// Every workload of the day rolled out (the Job aside).
async fn all_rolled_out(s: &Scene<'_>) -> Result<()> {
    let c = &s.admin.client;
    for (name, ..) in deployments() {
        wait_rolled_out(&Api::<Deployment>::namespaced(c.clone(), &s.ns), name).await?;
    }
    wait_statefulset_rolled_out(&Api::<StatefulSet>::namespaced(c.clone(), &s.ns), STATEFULSET).await?;
    wait_daemonset_rolled_out(&Api::<DaemonSet>::namespaced(c.clone(), &s.ns), DAEMONSET).await?;
    Ok(())
}

/// Waits until the Widget's child holds `value` and `knob`.
async fn child_holds(cms: &Api<ConfigMap>, value: &str, knob: &str) -> Result<()> {
    wait::until(&format!("the Widget's child to hold value {value}, knob {knob}"), Duration::from_secs(30), || async {
        let cm = cms.get(&child_name(WIDGET)).await?;
        let data = cm.data.unwrap_or_default();
        Ok((data.get("value").map(String::as_str) == Some(value) && data.get("knob").map(String::as_str) == Some(knob))
            .then_some(()))
    })
    .await
}

pub async fn cluster_day(cluster: &Cluster) -> Result<()> {
    let s = Scene::new(
        cluster,
        "cluster-day",
        "a day in a namespace: Deployments (10-12 replicas, three rolling-update settings), a StatefulSet and a DaemonSet created and rolled out, a person deleting a pod, scaling a ReplicaSet, editing a Widget's child, the Widget controller drifting, kubectl scale, a drain with evictions, a Job, namespace teardown; expectations from what the test did",
    )
    .await?;
    let mut plan = Plan::new();
    let admin = s.admin.client.clone();
    let ns = s.ns.clone();
    let deploys: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    let daemons: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let widgets: Api<Widget> = Api::namespaced(admin.clone(), &ns);

    // Setup: the namespace (the scene made it), the Widget controller's identity, and the
    // controller running from then on.
    plan.step_from("setup", Cause::Setup, s.created.1);
    plan.own(&s.created.0, "unowned", Role::Plain, "admin creates the namespace");
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin creates the Widget controller's ServiceAccount",
        Api::<ServiceAccount>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &sa),
    )
    .await?;
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
            namespace: Some(ns.clone()),
            api_group: None,
        }]),
    };
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin binds the Widget controller's role",
        Api::<RoleBinding>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &rb),
    )
    .await?;
    let ctl = WidgetController::start(s.service_account("widget-controller").await?, &ns, StatusStyle::Native);
    plan.controller("Widget", &format!("system:serviceaccount:{ns}:widget-controller"));
    s.settle().await?;

    // Morning: everything is created and rolls out for the first time.
    let mut created: Vec<(&str, &str)> = deployments().iter().map(|(n, ..)| ("Deployment", *n)).collect();
    created.extend([("StatefulSet", STATEFULSET), ("DaemonSet", DAEMONSET), ("Widget", WIDGET)]);
    plan.step("create", tops(&created));
    for (name, replicas, surge, unavailable) in deployments() {
        let d = rolling_deployment(name, replicas, "example/app:1", &[], surge, unavailable);
        act(
            &mut plan,
            &s.admin,
            "unowned",
            Role::Plain,
            &format!("admin creates Deployment {name}"),
            deploys.create(&PostParams::default(), &d),
        )
        .await?;
    }
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin creates StatefulSet db",
        sets.create(&PostParams::default(), &statefulset(STATEFULSET, 3, "example/db:1")),
    )
    .await?;
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin creates DaemonSet agent",
        daemons.create(&PostParams::default(), &daemonset(DAEMONSET, "example/agent:1")),
    )
    .await?;
    let w = Widget::new(WIDGET, WidgetSpec { value: "a".into() });
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin creates Widget w",
        widgets.create(&PostParams::default(), &w),
    )
    .await?;
    all_rolled_out(&s).await?;
    ctl.wait_reconciled(1).await?;
    s.settle().await?;

    // The image of every workload changes.
    created.pop();
    plan.step("rollout", tops(&created));
    let image = |img: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": img}]}}}});
    for (name, ..) in deployments() {
        act(
            &mut plan,
            &s.admin,
            "unowned",
            Role::Plain,
            &format!("admin changes the image of Deployment {name}"),
            deploys.patch(name, &PatchParams::default(), &Patch::Strategic(image("example/app:2"))),
        )
        .await?;
    }
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin changes the image of StatefulSet db",
        sets.patch(STATEFULSET, &PatchParams::default(), &Patch::Strategic(image("example/db:2"))),
    )
    .await?;
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin changes the image of DaemonSet agent",
        daemons.patch(DAEMONSET, &PatchParams::default(), &Patch::Strategic(image("example/agent:2"))),
    )
    .await?;
    all_rolled_out(&s).await?;
    s.settle().await?;

    // A person deletes a pod; its ReplicaSet replaces it.
    plan.step("a person deletes a pod", Cause::Removed);
    let pods: Api<Pod> = Api::namespaced(s.alice.client.clone(), &ns);
    let victim =
        live_pods(&pods, "api").await?.into_iter().next().context("a pod of api")?.metadata.name.context("name")?;
    act(
        &mut plan,
        &s.alice,
        "origin",
        Role::Removal,
        &format!("alice deletes pod {victim}"),
        pods.delete(&victim, &DeleteParams::default()),
    )
    .await?;
    wait::until("api to have 10 live pods again", Duration::from_secs(60), || async {
        let live = live_pods(&pods, "api").await?;
        Ok((live.len() == 10 && live.iter().all(|p| p.metadata.name.as_deref() != Some(victim.as_str()))).then_some(()))
    })
    .await?;
    wait_rolled_out(&deploys, "api").await?;
    s.settle().await?;

    // A person scales the current ReplicaSet of web; the deployment controller scales it back.
    plan.step("a person scales a ReplicaSet", Cause::Changed);
    let rs_api: Api<ReplicaSet> = Api::namespaced(s.alice.client.clone(), &ns);
    let rs = current_replicaset(&rs_api, "web").await?;
    let rs_name = rs.metadata.name.clone().context("name")?;
    let scaled = act(
        &mut plan,
        &s.alice,
        "origin",
        Role::Change,
        &format!("alice scales ReplicaSet {rs_name} to 14 through /scale"),
        rs_api.patch_scale(&rs_name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 14}}))),
    )
    .await?;
    let after: i64 = scaled.metadata.resource_version.as_deref().context("resourceVersion")?.parse()?;
    wait::until("the deployment controller to scale web's ReplicaSet back to 12", Duration::from_secs(60), || async {
        let rs = rs_api.get(&rs_name).await?;
        let rv: i64 = rs.metadata.resource_version.as_deref().unwrap_or("0").parse().unwrap_or(0);
        let st = rs.status.clone().unwrap_or_default();
        let back = rv > after
            && rs.spec.as_ref().and_then(|s| s.replicas) == Some(12)
            && st.replicas == 12
            && st.observed_generation == rs.metadata.generation;
        Ok(back.then_some(()))
    })
    .await?;
    wait_rolled_out(&deploys, "web").await?;
    s.settle().await?;

    // The Widget controller changes its child with nothing asked (external state).
    plan.step("the Widget controller drifts", Cause::Unprompted);
    let cms: Api<ConfigMap> = Api::namespaced(s.alice.client.clone(), &ns);
    ctl.set_knob("1");
    child_holds(&cms, "a", "1").await?;
    s.settle().await?;

    // A person edits the Widget's child; the controller puts it back.
    plan.step("a person edits the Widget's child", Cause::Changed);
    act(
        &mut plan,
        &s.alice,
        "origin",
        Role::Change,
        "alice edits the Widget's child",
        cms.patch(&child_name(WIDGET), &PatchParams::default(), &Patch::Merge(json!({"data": {"value": "by-hand"}}))),
    )
    .await?;
    child_holds(&cms, "a", "1").await?;
    s.settle().await?;

    // kubectl scale of a Deployment.
    plan.step("kubectl scale", tops(&[("Deployment", "worker")]));
    let alice_deploys: Api<Deployment> = Api::namespaced(s.alice.client.clone(), &ns);
    act(
        &mut plan,
        &s.alice,
        "unowned",
        Role::Plain,
        "alice scales Deployment worker to 13 through /scale",
        alice_deploys.patch_scale("worker", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 13}}))),
    )
    .await?;
    wait::until("worker to have 13 live pods", Duration::from_secs(60), || async {
        Ok((live_pods(&pods, "worker").await?.len() == 13).then_some(()))
    })
    .await?;
    wait_rolled_out(&deploys, "worker").await?;
    s.settle().await?;

    // A person drains a node: cordon, then evict every pod on it but the DaemonSet's.
    plan.step("a person drains a node", Cause::Removed);
    let nodes: Api<Node> = Api::all(s.alice.client.clone());
    nodes.patch(DRAINED, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await?;
    let on_node = pods.list(&ListParams::default().fields(&format!("spec.nodeName={DRAINED}"))).await?;
    let mut evicted = 0;
    for p in on_node.items {
        let by_daemonset = p.owner_references().iter().any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
        if by_daemonset || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = p.metadata.name.clone().context("name")?;
        act(
            &mut plan,
            &s.alice,
            "origin",
            Role::Removal,
            &format!("alice evicts pod {name} from {DRAINED}"),
            pods.evict(&name, &EvictParams::default()),
        )
        .await?;
        evicted += 1;
    }
    anyhow::ensure!(evicted >= 5, "the drain evicted only {evicted} pods from {DRAINED}");
    wait::until(&format!("no pod but the DaemonSet's left on {DRAINED}"), Duration::from_secs(60), || async {
        let left = pods.list(&ListParams::default().fields(&format!("spec.nodeName={DRAINED}"))).await?;
        Ok(left.items.iter().all(|p| p.owner_references().iter().any(|o| o.kind == "DaemonSet")).then_some(()))
    })
    .await?;
    all_rolled_out(&s).await?;
    Api::<Node>::all(admin.clone())
        .patch(DRAINED, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": null}})))
        .await?;
    s.settle().await?;

    // A Job runs to completion.
    plan.step("a Job", tops(&[("Job", JOB)]));
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin creates Job batch",
        jobs.create(&PostParams::default(), &job(JOB, 4, 2, "example/batch:1")),
    )
    .await?;
    wait_job_complete(&jobs, JOB).await?;
    s.settle().await?;

    // Evening: the namespace is deleted.
    plan.step("teardown", Cause::Teardown);
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    act(
        &mut plan,
        &s.admin,
        "unowned",
        Role::Plain,
        "admin deletes the namespace",
        namespaces.delete(&ns, &DeleteParams::default()),
    )
    .await?;
    wait::until(&format!("namespace {ns} to be gone"), Duration::from_secs(120), || async {
        Ok(namespaces.get_opt(&ns).await?.is_none().then_some(()))
    })
    .await?;
    ctl.stop();
    s.finish_judged(&plan).await
}
