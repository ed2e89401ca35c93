//! A workload's actions run against the API server, each a step of the ground truth's
//! [`Plan`]: the step starts once the namespace has gone quiet after the one before, the
//! test's own writes are declared with the class they must get (a top-level object's
//! `unowned`, a person's write to an owned object `origin`), and the step waits until the
//! controllers are done with it.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Map, Value};

use super::catalog::{Action, Bound, Kind, Removal, Scaler, Workload};
use super::Rng;
use crate::actors::Actor;
use crate::harness::{Scene, WIDGET_CONTROLLER_ROLE};
use crate::truth::{Cause, Plan, Role};
use crate::wait;
use crate::widget::{child_name, StatusStyle, Widget, WidgetController, WidgetSpec};
use crate::workloads::{job, rolling_deployment, statefulset};

/// How long the controllers may take with one action.
const STEP_WAIT: Duration = Duration::from_secs(120);
const REVISION: &str = "deployment.kubernetes.io/revision";

/// What a workload's run leaves: the plan to label its namespace with, and each step's time.
pub struct Ran {
    pub plan: Plan,
    /// (step, seconds from its start until the namespace went quiet after it).
    pub steps: Vec<(String, f64)>,
}

/// Runs the workload's actions in the scene's namespace, then deletes the namespace.
pub async fn run(s: &Scene<'_>, w: &Workload, seed: u64) -> Result<Ran> {
    let (kind, name) = w.kind.object();
    let mut r = Run {
        s,
        plan: Plan::new(),
        kind: w.kind,
        top: (kind, name),
        rng: Rng::new(seed),
        image: 0,
        widget: None,
        widget_generation: 0,
        widget_value: "a".into(),
        knob: 0,
        orphan: None,
        partition: 0,
        steps: Vec::new(),
    };
    let out = r.all(w).await;
    if let Some(ctl) = r.widget.take() {
        ctl.stop();
    }
    out.map(|()| Ran { plan: r.plan, steps: r.steps })
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

struct Run<'s, 'c> {
    s: &'s Scene<'c>,
    plan: Plan,
    kind: Kind,
    /// The workload's object: (kind, name).
    top: (&'static str, &'static str),
    /// Picks the pod a person removes.
    rng: Rng,
    image: u32,
    widget: Option<WidgetController>,
    widget_generation: i64,
    widget_value: String,
    knob: u32,
    /// The ReplicaSet left on its own by `delete --cascade=orphan`.
    orphan: Option<String>,
    partition: i32,
    steps: Vec<(String, f64)>,
}

impl Run<'_, '_> {
    async fn all(&mut self, w: &Workload) -> Result<()> {
        let t = Instant::now();
        self.setup().await?;
        self.steps.push(("setup".into(), t.elapsed().as_secs_f64()));
        for (i, a) in w.actions.iter().enumerate() {
            let t = Instant::now();
            let name = format!("{} {}", i + 1, a.tag());
            self.plan.step(&name, self.cause(a));
            self.perform(a).await.with_context(|| format!("step {name} ({a:?})"))?;
            self.stable().await.with_context(|| format!("after step {name} ({a:?})"))?;
            self.s.settle().await?;
            self.steps.push((name, t.elapsed().as_secs_f64()));
        }
        let t = Instant::now();
        self.teardown().await?;
        self.steps.push(("teardown".into(), t.elapsed().as_secs_f64()));
        Ok(())
    }

    fn admin(&self) -> kube::Client {
        self.s.admin.client.clone()
    }

    fn api<K>(&self, client: kube::Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(client, &self.s.ns)
    }

    fn cause(&self, a: &Action) -> Cause {
        match a {
            Action::RemovePod { .. } => Cause::Removed,
            Action::PersonScalesReplicaSet { .. } | Action::PersonEditsReplicaSet { .. } | Action::PersonEditsChild => Cause::Changed,
            Action::WidgetDrift => Cause::Unprompted,
            Action::ScaleOrphan { .. } => Cause::Intent(vec![("ReplicaSet".into(), self.orphan.clone().unwrap_or_default())]),
            _ => Cause::Intent(vec![(self.top.0.into(), self.top.1.into())]),
        }
    }

    /// The namespace (the scene made it) and, for a Widget, its controller's identity.
    async fn setup(&mut self) -> Result<()> {
        let s = self.s;
        self.plan.step_from("setup", Cause::Setup, s.created.1);
        self.plan.own(&s.created.0, "unowned", Role::Plain, "admin creates the namespace");
        if self.kind == Kind::Widget {
            let sa = ServiceAccount { metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() }, ..ServiceAccount::default() };
            let what = "admin creates the Widget controller's ServiceAccount";
            let api = self.api::<ServiceAccount>(self.admin());
            act(&mut self.plan, &s.admin, "unowned", Role::Plain, what, api.create(&PostParams::default(), &sa)).await?;
            let rb = RoleBinding {
                metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() },
                role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "ClusterRole".into(), name: WIDGET_CONTROLLER_ROLE.into() },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "widget-controller".into(),
                    namespace: Some(s.ns.clone()),
                    api_group: None,
                }]),
            };
            let what = "admin binds the Widget controller's role";
            let api = self.api::<RoleBinding>(self.admin());
            act(&mut self.plan, &s.admin, "unowned", Role::Plain, what, api.create(&PostParams::default(), &rb)).await?;
            self.widget = Some(WidgetController::start(s.service_account("widget-controller").await?, &s.ns, StatusStyle::Native));
            self.plan.controller("Widget", &format!("system:serviceaccount:{}:widget-controller", s.ns));
        }
        s.settle().await
    }

    async fn teardown(&mut self) -> Result<()> {
        let s = self.s;
        self.plan.step("teardown", Cause::Teardown);
        let namespaces: Api<Namespace> = Api::all(self.admin());
        act(&mut self.plan, &s.admin, "unowned", Role::Plain, "admin deletes the namespace", namespaces.delete(&s.ns, &DeleteParams::default())).await?;
        wait::until(&format!("namespace {} to be gone", s.ns), Duration::from_secs(180), || async {
            Ok(namespaces.get_opt(&s.ns).await?.is_none().then_some(()))
        })
        .await
    }

    fn next_image(&mut self) -> String {
        self.image += 1;
        format!("example/{}:{}", self.top.1, self.image)
    }

    async fn perform(&mut self, a: &Action) -> Result<()> {
        match a {
            Action::CreateDeployment { replicas, surge, unavailable } => {
                let bound = |b: &Bound| match b {
                    Bound::Count(n) => IntOrString::Int(*n),
                    Bound::Percent(p) => IntOrString::String(format!("{p}%")),
                };
                let d = rolling_deployment(self.top.1, *replicas, &self.next_image(), &[], bound(surge), bound(unavailable));
                let what = format!("admin creates Deployment {} ({replicas} replicas, surge {surge:?}, unavailable {unavailable:?})", self.top.1);
                self.admin_writes(&what, self.api::<Deployment>(self.admin()).create(&PostParams::default(), &d)).await
            }
            Action::Image => self.image_patch().await,
            Action::Undo => self.undo().await,
            Action::Restart => {
                self.image += 1;
                let p = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": format!("restart-{}", self.image)}}}}});
                self.admin_patch("admin restarts the rollout", p).await
            }
            Action::PauseAndChange => {
                self.admin_patch("admin pauses the rollout", json!({"spec": {"paused": true}})).await?;
                self.deployment_observed().await?;
                self.image_patch().await
            }
            Action::Resume => self.admin_patch("admin resumes the rollout", json!({"spec": {"paused": false}})).await,
            Action::Scale { replicas, by } => self.scale(*replicas, *by).await,
            Action::ScaleToZeroAndBack { replicas } => {
                self.admin_patch("admin scales to 0", json!({"spec": {"replicas": 0}})).await?;
                self.stable().await?;
                self.admin_patch(&format!("admin scales back to {replicas}"), json!({"spec": {"replicas": replicas}})).await
            }
            Action::PersonScalesReplicaSet { replicas } => self.person_changes_replicaset(*replicas, true).await,
            Action::PersonEditsReplicaSet { replicas } => self.person_changes_replicaset(*replicas, false).await,
            Action::RemovePod { how } => self.remove_pod(*how).await,
            Action::OrphanDelete => self.orphan_delete().await,
            Action::ScaleOrphan { replicas } => {
                let rs = self.orphan.clone().context("no orphaned ReplicaSet")?;
                let what = format!("admin scales the orphaned ReplicaSet {rs} to {replicas}");
                let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
                self.admin_writes(&what, self.api::<ReplicaSet>(self.admin()).patch(&rs, &PatchParams::default(), &p)).await
            }
            Action::CreateStatefulSet { replicas } => {
                let o = statefulset(self.top.1, *replicas, &self.next_image());
                let what = format!("admin creates StatefulSet {} ({replicas} replicas)", self.top.1);
                self.admin_writes(&what, self.api::<StatefulSet>(self.admin()).create(&PostParams::default(), &o)).await
            }
            Action::StatefulImage { partition } => {
                self.partition = *partition;
                let image = self.next_image();
                let p = json!({"spec": {
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
                    "template": {"spec": {"containers": [{"name": "app", "image": image}]}},
                }});
                self.admin_patch(&format!("admin changes the image to {image}, partition {partition}"), p).await
            }
            Action::ScaleStatefulSet { replicas } => self.admin_patch(&format!("admin scales to {replicas}"), json!({"spec": {"replicas": replicas}})).await,
            Action::CreateJob { completions, parallelism, delete_mid_run } => self.job(*completions, *parallelism, *delete_mid_run).await,
            Action::DeleteJob => {
                let jobs = self.api::<Job>(self.admin());
                self.admin_writes("admin deletes the finished Job", jobs.delete(self.top.1, &DeleteParams::background())).await?;
                self.job_gone().await
            }
            Action::CreateWidget => {
                let w = Widget::new(self.top.1, WidgetSpec { value: self.widget_value.clone() });
                self.admin_writes("admin creates Widget w", self.api::<Widget>(self.admin()).create(&PostParams::default(), &w)).await?;
                self.widget_generation = 1;
                self.widget_settled().await
            }
            Action::WidgetSpec => {
                self.image += 1;
                self.widget_value = format!("v{}", self.image);
                let p = Patch::Merge(json!({"spec": {"value": self.widget_value}}));
                let what = format!("admin changes Widget w's value to {}", self.widget_value);
                self.admin_writes(&what, self.api::<Widget>(self.admin()).patch(self.top.1, &PatchParams::default(), &p)).await?;
                self.widget_generation += 1;
                self.widget_settled().await
            }
            Action::WidgetDrift => {
                self.knob += 1;
                self.widget.as_ref().context("no Widget controller")?.set_knob(&self.knob.to_string());
                self.widget_settled().await
            }
            Action::PersonEditsChild => {
                let p = Patch::Merge(json!({"data": {"value": "by-hand"}}));
                let cms = self.api::<ConfigMap>(self.s.alice.client.clone());
                act(
                    &mut self.plan,
                    &self.s.alice,
                    "origin",
                    Role::Change,
                    "alice edits the Widget's child",
                    cms.patch(&child_name(self.top.1), &PatchParams::default(), &p),
                )
                .await?;
                self.widget_settled().await
            }
        }
    }

    async fn admin_writes<T>(&mut self, what: &str, call: impl std::future::Future<Output = kube::Result<T>>) -> Result<()> {
        act(&mut self.plan, &self.s.admin, "unowned", Role::Plain, what, call).await.map(|_| ())
    }

    /// A strategic-merge patch of the workload's object by the admin.
    async fn admin_patch(&mut self, what: &str, p: Value) -> Result<()> {
        let pp = PatchParams::default();
        let p = Patch::Strategic(p);
        match self.kind {
            Kind::Deployment => self.admin_writes(what, self.api::<Deployment>(self.admin()).patch(self.top.1, &pp, &p)).await,
            Kind::StatefulSet => self.admin_writes(what, self.api::<StatefulSet>(self.admin()).patch(self.top.1, &pp, &p)).await,
            other => bail!("no patch of a {other:?} here"),
        }
    }

    async fn image_patch(&mut self) -> Result<()> {
        let image = self.next_image();
        let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
        self.admin_patch(&format!("admin changes the image to {image}"), p).await
    }

    /// `kubectl rollout undo`: the previous revision's template (image and annotations) again.
    async fn undo(&mut self) -> Result<()> {
        let d = self.api::<Deployment>(self.admin()).get(self.top.1).await?;
        let revision = |o: &ObjectMeta| o.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0);
        let current = revision(&d.metadata);
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let sets = self.api::<ReplicaSet>(self.admin()).list(&ListParams::default().labels(&format!("app={}", self.top.1))).await?;
        let previous = sets
            .items
            .into_iter()
            .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid) && revision(&rs.metadata) < current)
            .max_by_key(|rs| revision(&rs.metadata))
            .with_context(|| format!("no revision before {current} to undo to"))?;
        let template = previous.spec.and_then(|s| s.template).context("a template")?;
        let had = d.spec.and_then(|s| s.template.metadata).and_then(|m| m.annotations).unwrap_or_default();
        let want = template.metadata.and_then(|m| m.annotations).unwrap_or_default();
        let mut annotations: Map<String, Value> = want.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        for k in had.keys().filter(|k| !want.contains_key(*k)) {
            annotations.insert(k.clone(), Value::Null);
        }
        let image = template.spec.and_then(|s| s.containers.into_iter().next()).and_then(|c| c.image).context("an image")?;
        let p = json!({"spec": {"template": {"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "app", "image": image}]}}}});
        self.admin_patch(&format!("admin undoes the rollout to revision {} ({image})", revision(&previous.metadata)), p).await
    }

    async fn scale(&mut self, replicas: i32, by: Scaler) -> Result<()> {
        let s = self.s;
        let name = self.top.1;
        match by {
            Scaler::Spec => self.admin_patch(&format!("admin scales to {replicas}"), json!({"spec": {"replicas": replicas}})).await,
            Scaler::Kubectl => {
                let api = self.api::<Deployment>(s.alice.client.clone());
                let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
                let what = format!("alice scales Deployment {name} to {replicas} through /scale");
                act(&mut self.plan, &s.alice, "unowned", Role::Plain, &what, api.patch_scale(name, &PatchParams::default(), &p)).await.map(|_| ())
            }
            Scaler::Hpa => {
                // The HPA's role allows get and update of */scale (no patch).
                let api = self.api::<Deployment>(s.hpa.client.clone());
                let mut scale = api.get_scale(name).await?;
                scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
                let what = format!("the HPA scales Deployment {name} to {replicas} through /scale");
                act(&mut self.plan, &s.hpa, "unowned", Role::Plain, &what, api.replace_scale(name, &PostParams::default(), &scale)).await.map(|_| ())
            }
        }
    }

    /// A person scales (through `/scale`) or edits the Deployment's active ReplicaSet; the
    /// deployment controller puts the count back.
    async fn person_changes_replicaset(&mut self, replicas: i32, through_scale: bool) -> Result<()> {
        let s = self.s;
        let rs_api = self.api::<ReplicaSet>(s.alice.client.clone());
        let want = self.api::<Deployment>(self.admin()).get(self.top.1).await?.spec.and_then(|s| s.replicas).unwrap_or(1);
        let rs = self.active_replicaset().await?;
        let rs_name = rs.metadata.name.clone().context("name")?;
        let replicas = if replicas == want { want + 1 } else { replicas };
        let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        let rv = if through_scale {
            let what = format!("alice scales ReplicaSet {rs_name} to {replicas} through /scale");
            act(&mut self.plan, &s.alice, "origin", Role::Change, &what, rs_api.patch_scale(&rs_name, &PatchParams::default(), &p))
                .await?
                .metadata
                .resource_version
        } else {
            let what = format!("alice edits ReplicaSet {rs_name}'s replicas to {replicas}");
            act(&mut self.plan, &s.alice, "origin", Role::Change, &what, rs_api.patch(&rs_name, &PatchParams::default(), &p)).await?.metadata.resource_version
        };
        let after: u64 = rv.as_deref().context("resourceVersion")?.parse()?;
        wait::until(&format!("the deployment controller to scale ReplicaSet {rs_name} back to {want}"), STEP_WAIT, || async {
            let rs = rs_api.get(&rs_name).await?;
            let rv: u64 = rs.metadata.resource_version.as_deref().unwrap_or("0").parse().unwrap_or(0);
            Ok((rv > after && rs.spec.as_ref().and_then(|s| s.replicas) == Some(want)).then_some(()))
        })
        .await
    }

    /// The ReplicaSet of the Deployment with pods wanted, else the newest.
    async fn active_replicaset(&self) -> Result<ReplicaSet> {
        let sets = self.api::<ReplicaSet>(self.admin()).list(&ListParams::default().labels(&format!("app={}", self.top.1))).await?;
        let revision = |rs: &ReplicaSet| rs.annotations().get(REVISION).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0);
        let mut items = sets.items;
        items.sort_by_key(|rs| (rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0, revision(rs)));
        items.pop().with_context(|| format!("no ReplicaSet of {}", self.top.1))
    }

    async fn remove_pod(&mut self, how: Removal) -> Result<()> {
        let s = self.s;
        let pods = self.api::<Pod>(s.alice.client.clone());
        let mut live: Vec<Pod> = pods
            .list(&ListParams::default().labels(&format!("app={}", self.top.1)))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.sort_by_key(|p| p.name_any());
        if live.is_empty() {
            bail!("no live pod of {} to remove", self.top.1);
        }
        let victim = live.swap_remove((self.rng.next_u64() % live.len() as u64) as usize);
        let (name, uid) = (victim.name_any(), victim.metadata.uid.clone().unwrap_or_default());
        match how {
            Removal::Delete => {
                act(&mut self.plan, &s.alice, "origin", Role::Removal, &format!("alice deletes pod {name}"), pods.delete(&name, &DeleteParams::default()))
                    .await?;
            }
            Removal::GracePeriodZero => {
                let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
                act(&mut self.plan, &s.alice, "origin", Role::Removal, &format!("alice deletes pod {name} with grace period 0"), pods.delete(&name, &dp))
                    .await?;
            }
            Removal::Evict => {
                act(&mut self.plan, &s.alice, "origin", Role::Removal, &format!("alice evicts pod {name}"), pods.evict(&name, &EvictParams::default())).await?;
            }
        }
        let admin_pods = self.api::<Pod>(self.admin());
        wait::until(&format!("pod {name} ({uid}) to be gone"), STEP_WAIT, || async {
            let still = admin_pods.get_opt(&name).await?.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid.as_str()));
            Ok((!still).then_some(()))
        })
        .await?;
        // The replacement: the controller has seen the pod go before the counts are read.
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    async fn orphan_delete(&mut self) -> Result<()> {
        let rs = self.active_replicaset().await?.name_any();
        let deploys = self.api::<Deployment>(self.admin());
        self.admin_writes("admin deletes Deployment app with --cascade=orphan", deploys.delete(self.top.1, &DeleteParams::orphan())).await?;
        wait::until("Deployment app to be gone", STEP_WAIT, || async { Ok(deploys.get_opt(self.top.1).await?.is_none().then_some(())) }).await?;
        let sets = self.api::<ReplicaSet>(self.admin());
        wait::until(&format!("ReplicaSet {rs} to lose its owner"), STEP_WAIT, || async {
            Ok(sets.get(&rs).await?.owner_references().is_empty().then_some(()))
        })
        .await?;
        self.orphan = Some(rs);
        Ok(())
    }

    async fn job(&mut self, completions: i32, parallelism: i32, delete_mid_run: bool) -> Result<()> {
        let jobs = self.api::<Job>(self.admin());
        let o = job(self.top.1, completions, parallelism, &self.next_image());
        let what = format!("admin creates Job {} ({completions} completions, {parallelism} at a time)", self.top.1);
        self.admin_writes(&what, jobs.create(&PostParams::default(), &o)).await?;
        if !delete_mid_run {
            return wait::until("the Job to complete", STEP_WAIT, || async {
                let o = jobs.get(self.top.1).await?;
                let conditions = o.status.and_then(|s| s.conditions).unwrap_or_default();
                Ok(conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(()))
            })
            .await;
        }
        let pods = self.api::<Pod>(self.admin());
        let lp = ListParams::default().labels(&format!("app={}", self.top.1));
        wait::until("the Job's first pod", STEP_WAIT, || async { Ok((!pods.list(&lp).await?.items.is_empty()).then_some(())) }).await?;
        self.admin_writes("admin deletes the running Job", jobs.delete(self.top.1, &DeleteParams::background())).await?;
        self.job_gone().await
    }

    async fn job_gone(&self) -> Result<()> {
        let jobs = self.api::<Job>(self.admin());
        let pods = self.api::<Pod>(self.admin());
        let lp = ListParams::default().labels(&format!("app={}", self.top.1));
        wait::until("the Job and its pods to be gone", STEP_WAIT, || async {
            Ok((jobs.get_opt(self.top.1).await?.is_none() && pods.list(&lp).await?.items.is_empty()).then_some(()))
        })
        .await
    }

    async fn widget_settled(&self) -> Result<()> {
        let ctl = self.widget.as_ref().context("no Widget controller")?;
        ctl.wait_reconciled(self.widget_generation).await?;
        let cms = self.api::<ConfigMap>(self.admin());
        let (value, knob) = (self.widget_value.clone(), self.knob.to_string());
        wait::until(&format!("the Widget's child to hold value {value}, knob {knob}"), STEP_WAIT, || async {
            let data = cms.get(&child_name(self.top.1)).await?.data.unwrap_or_default();
            Ok((data.get("value") == Some(&value) && data.get("knob") == Some(&knob)).then_some(()))
        })
        .await
    }

    async fn deployment_observed(&self) -> Result<()> {
        let api = self.api::<Deployment>(self.admin());
        wait::until("the Deployment's generation to be observed", STEP_WAIT, || async {
            let d = api.get(self.top.1).await?;
            Ok((d.status.and_then(|s| s.observed_generation) == d.metadata.generation).then_some(()))
        })
        .await
    }

    /// Waits until the workload's controllers are done with what the step asked.
    async fn stable(&self) -> Result<()> {
        match (self.kind, &self.orphan) {
            (Kind::Deployment, None) => self.deployment_stable().await,
            (Kind::Deployment, Some(rs)) => {
                let api = self.api::<ReplicaSet>(self.admin());
                wait::until(&format!("ReplicaSet {rs} to be stable"), STEP_WAIT, || async {
                    let o = api.get(rs).await?;
                    let want = o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let s = o.status.unwrap_or_default();
                    let done = s.observed_generation == o.metadata.generation && s.replicas == want && s.ready_replicas.unwrap_or(0) == want;
                    Ok(done.then_some(()))
                })
                .await
            }
            (Kind::StatefulSet, _) => self.statefulset_stable().await,
            (Kind::Job | Kind::Widget, _) => Ok(()),
        }
    }

    /// Observed, and every replica updated and available; a paused Deployment only scaled.
    async fn deployment_stable(&self) -> Result<()> {
        let api = self.api::<Deployment>(self.admin());
        wait::until("the Deployment to be stable", STEP_WAIT, || async {
            let d = api.get(self.top.1).await?;
            let spec = d.spec.clone().unwrap_or_default();
            let want = spec.replicas.unwrap_or(1);
            let s = d.status.clone().unwrap_or_default();
            let counts = s.replicas.unwrap_or(0) == want && s.available_replicas.unwrap_or(0) == want;
            let updated = spec.paused == Some(true) || s.updated_replicas.unwrap_or(0) == want;
            Ok((s.observed_generation == d.metadata.generation && counts && updated).then_some(()))
        })
        .await
    }

    /// Observed, every replica ready, and the ordinals at or above the partition updated.
    async fn statefulset_stable(&self) -> Result<()> {
        let api = self.api::<StatefulSet>(self.admin());
        let partition = self.partition;
        wait::until("the StatefulSet to be stable", STEP_WAIT, || async {
            let o = api.get(self.top.1).await?;
            let want = o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let s = o.status.clone().unwrap_or_default();
            let updated = s.updated_replicas.unwrap_or(0);
            let rolled = if s.current_revision == s.update_revision { updated == want } else { updated == want - partition.min(want) && partition > 0 };
            let done = s.observed_generation == o.metadata.generation && s.replicas == want && s.ready_replicas.unwrap_or(0) == want && rolled;
            Ok(done.then_some(()))
        })
        .await
    }
}
