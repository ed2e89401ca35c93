//! A workload's actions run against the API server, each a step of the ground truth's
//! [`Plan`]: the step starts once the namespace has gone quiet after the one before, the
//! test's own writes are declared with the class they must get (a top-level object's
//! `unowned`, a person's write to an owned object `origin`), and the step waits until the
//! controllers are done with it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetUpdateStrategy, Deployment, ReplicaSet, RollingUpdateDaemonSet, StatefulSet,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, Namespace, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    NodeSpec, Pod, ServiceAccount, Taint, Toleration,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Map, Value};

use super::catalog::{apply_node, Action, Bound, Kind, NodeChange, Removal, Scaler, Workload};
use super::Rng;
use crate::actors::Actor;
use crate::harness::{Scene, WIDGET_CONTROLLER_ROLE};
use crate::truth::{Cause, Plan, Role};
use crate::wait;
use crate::widget::{child_name, StatusStyle, Widget, WidgetController, WidgetSpec};
use crate::workloads::{daemonset, job, rolling_deployment, statefulset};

/// How long the controllers may take with one action.
const STEP_WAIT: Duration = Duration::from_secs(120);
const REVISION: &str = "deployment.kubernetes.io/revision";
/// The label and NoSchedule taint of a workload's own nodes (its namespace as the value).
const DAY_NODE: &str = "kausality.io/day";
/// The NoExecute taint of `node-tainted-noexecute`.
const EVICT: &str = "kausality.io/evict";

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
        on_delete: false,
        deleted: false,
        pdb: false,
        cronjob: None,
        jobs_seen: BTreeSet::new(),
        nodes: Vec::new(),
        node_flags: Vec::new(),
        node_serial: 0,
        steps: Vec::new(),
    };
    let out = r.all(w).await;
    // The workload's own nodes go with it, even when it failed (no write of its namespace).
    let nodes: Api<Node> = Api::all(s.admin.client.clone());
    for n in &r.nodes {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
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
    /// The StatefulSet updates `OnDelete`.
    on_delete: bool,
    /// The Deployment was deleted (and is not yet created again).
    deleted: bool,
    /// The PodDisruptionBudget of the workload's pods exists.
    pdb: bool,
    /// The CronJob's `concurrencyPolicy: Replace` and its history limit.
    cronjob: Option<(bool, i32)>,
    /// The CronJob's Jobs so far, by name.
    jobs_seen: BTreeSet<String>,
    /// A DaemonSet workload's own nodes, oldest first, and their (cordoned, tainted).
    nodes: Vec<String>,
    node_flags: Vec<(bool, bool)>,
    node_serial: u32,
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
            Action::RemovePod { .. } | Action::DrainWithPdb => Cause::Removed,
            Action::PersonScalesReplicaSet { .. } | Action::PersonEditsReplicaSet { .. } | Action::PersonEditsChild => {
                Cause::Changed
            }
            Action::WidgetDrift => Cause::Unprompted,
            Action::Node { .. } => Cause::Node,
            Action::ScaleOrphan { .. } => {
                Cause::Intent(vec![("ReplicaSet".into(), self.orphan.clone().unwrap_or_default())])
            }
            _ => Cause::Intent(vec![(self.top.0.into(), self.top.1.into())]),
        }
    }

    /// The namespace (the scene made it) and, for a Widget, its controller's identity.
    async fn setup(&mut self) -> Result<()> {
        let s = self.s;
        self.plan.step_from("setup", Cause::Setup, s.created.1);
        self.plan.own(&s.created.0, "unowned", Role::Plain, "admin creates the namespace");
        if self.kind == Kind::Widget {
            let sa = ServiceAccount {
                metadata: ObjectMeta { name: Some("widget-controller".into()), ..ObjectMeta::default() },
                ..ServiceAccount::default()
            };
            let what = "admin creates the Widget controller's ServiceAccount";
            let api = self.api::<ServiceAccount>(self.admin());
            act(&mut self.plan, &s.admin, "unowned", Role::Plain, what, api.create(&PostParams::default(), &sa))
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
                    namespace: Some(s.ns.clone()),
                    api_group: None,
                }]),
            };
            let what = "admin binds the Widget controller's role";
            let api = self.api::<RoleBinding>(self.admin());
            act(&mut self.plan, &s.admin, "unowned", Role::Plain, what, api.create(&PostParams::default(), &rb))
                .await?;
            self.widget = Some(WidgetController::start(
                s.service_account("widget-controller").await?,
                &s.ns,
                StatusStyle::Native,
            ));
            self.plan.controller("Widget", &format!("system:serviceaccount:{}:widget-controller", s.ns));
        }
        s.settle().await
    }

    async fn teardown(&mut self) -> Result<()> {
        let s = self.s;
        self.plan.step("teardown", Cause::Teardown);
        let namespaces: Api<Namespace> = Api::all(self.admin());
        act(
            &mut self.plan,
            &s.admin,
            "unowned",
            Role::Plain,
            "admin deletes the namespace",
            namespaces.delete(&s.ns, &DeleteParams::default()),
        )
        .await?;
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
                let d = rolling_deployment(
                    self.top.1,
                    *replicas,
                    &self.next_image(),
                    &[],
                    bound(surge),
                    bound(unavailable),
                );
                let what = format!(
                    "admin creates Deployment {} ({replicas} replicas, surge {surge:?}, unavailable {unavailable:?})",
                    self.top.1
                );
                self.admin_writes(&what, self.api::<Deployment>(self.admin()).create(&PostParams::default(), &d))
                    .await?;
                self.deleted = false;
                Ok(())
            }
            Action::Image | Action::StatefulImageOnDelete | Action::DaemonSetImage => self.image_patch().await,
            Action::Undo => self.undo(1, None).await,
            Action::UndoTo { back } => self.undo(*back as usize, None).await,
            Action::InterruptedRollout => {
                self.image_patch().await?;
                // The deployment controller has seen the first change (its new ReplicaSet is
                // made, its pods on their way): the second one interrupts that rollout.
                self.deployment_observed().await?;
                self.image_patch().await
            }
            Action::StuckRollout { deadline } => self.stuck_rollout(*deadline).await,
            Action::DeleteDeployment { foreground } => self.delete_deployment(*foreground).await,
            Action::DrainWithPdb => self.drain_with_pdb().await,
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
                self.admin_patch(&format!("admin scales back to {replicas}"), json!({"spec": {"replicas": replicas}}))
                    .await
            }
            Action::PersonScalesReplicaSet { replicas } => self.person_changes_replicaset(*replicas, true).await,
            Action::PersonEditsReplicaSet { replicas } => self.person_changes_replicaset(*replicas, false).await,
            Action::RemovePod { how } => self.remove_pod(*how).await,
            Action::OrphanDelete => self.orphan_delete().await,
            Action::ScaleOrphan { replicas } => {
                let rs = self.orphan.clone().context("no orphaned ReplicaSet")?;
                let what = format!("admin scales the orphaned ReplicaSet {rs} to {replicas}");
                let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
                self.admin_writes(&what, self.api::<ReplicaSet>(self.admin()).patch(&rs, &PatchParams::default(), &p))
                    .await
            }
            Action::CreateStatefulSet { replicas, parallel, on_delete } => {
                let mut o = statefulset(self.top.1, *replicas, &self.next_image());
                if let Some(spec) = o.spec.as_mut() {
                    if *parallel {
                        spec.pod_management_policy = Some("Parallel".into());
                    }
                    if *on_delete {
                        spec.update_strategy =
                            Some(StatefulSetUpdateStrategy { type_: Some("OnDelete".into()), rolling_update: None });
                    }
                }
                self.on_delete = *on_delete;
                let what = format!(
                    "admin creates StatefulSet {} ({replicas} replicas, parallel {parallel}, OnDelete {on_delete})",
                    self.top.1
                );
                self.admin_writes(&what, self.api::<StatefulSet>(self.admin()).create(&PostParams::default(), &o)).await
            }
            Action::CreateCronJob { replace, history } => {
                let mut job = job(self.top.1, 1, 1, &self.next_image());
                if *replace {
                    // Pods that never run (no node matches): the Job is still running at the next tick.
                    if let Some(spec) = job.spec.as_mut().and_then(|j| j.template.spec.as_mut()) {
                        spec.node_selector = Some([("kausality.io/nowhere".to_string(), "true".to_string())].into());
                    }
                }
                let o = CronJob {
                    metadata: ObjectMeta { name: Some(self.top.1.into()), ..ObjectMeta::default() },
                    spec: Some(CronJobSpec {
                        schedule: "* * * * *".into(),
                        concurrency_policy: Some(if *replace { "Replace" } else { "Allow" }.into()),
                        successful_jobs_history_limit: Some(*history),
                        failed_jobs_history_limit: Some(1),
                        job_template: JobTemplateSpec {
                            metadata: Some(ObjectMeta {
                                labels: Some([("app".to_string(), self.top.1.to_string())].into()),
                                ..ObjectMeta::default()
                            }),
                            spec: job.spec,
                        },
                        ..CronJobSpec::default()
                    }),
                    ..CronJob::default()
                };
                let policy = if *replace { "Replace" } else { "Allow" };
                let what = format!("admin creates CronJob {} (every minute, concurrencyPolicy {policy}, {history} finished Job(s) kept)", self.top.1);
                self.admin_writes(&what, self.api::<CronJob>(self.admin()).create(&PostParams::default(), &o)).await?;
                self.cronjob = Some((*replace, *history));
                self.cronjob_tick().await
            }
            Action::CronJobTick => self.cronjob_tick().await,
            Action::Node { change } => self.node(*change).await,
            Action::LowerPartition { partition } => {
                self.partition = *partition;
                let p = json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}}});
                self.admin_patch(&format!("admin lowers the partition to {partition}"), p).await
            }
            Action::CreateDaemonSet { surge, unavailable } => {
                let bound = |b: &Bound| match b {
                    Bound::Count(n) => IntOrString::Int(*n),
                    Bound::Percent(p) => IntOrString::String(format!("{p}%")),
                };
                let mut o = daemonset(self.top.1, &self.next_image());
                if let Some(pod) = o.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
                    // The control plane's kwok nodes, and the workload's own (tainted so that
                    // nothing else runs there, and only its own: other days' DaemonSets select
                    // the shared nodes and theirs).
                    let term = |key: &str, value: &str| NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.into(),
                            operator: "In".into(),
                            values: Some(vec![value.into()]),
                        }]),
                        ..NodeSelectorTerm::default()
                    };
                    pod.affinity = Some(Affinity {
                        node_affinity: Some(NodeAffinity {
                            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                                node_selector_terms: vec![term("type", "kwok"), term(DAY_NODE, &self.s.ns)],
                            }),
                            ..NodeAffinity::default()
                        }),
                        ..Affinity::default()
                    });
                    pod.tolerations = Some(vec![Toleration {
                        key: Some(DAY_NODE.into()),
                        operator: Some("Equal".into()),
                        value: Some(self.s.ns.clone()),
                        effect: Some("NoSchedule".into()),
                        ..Toleration::default()
                    }]);
                }
                if let Some(spec) = o.spec.as_mut() {
                    spec.update_strategy = Some(DaemonSetUpdateStrategy {
                        type_: Some("RollingUpdate".into()),
                        rolling_update: Some(RollingUpdateDaemonSet {
                            max_surge: Some(bound(surge)),
                            max_unavailable: Some(bound(unavailable)),
                        }),
                    });
                }
                let what =
                    format!("admin creates DaemonSet {} (surge {surge:?}, unavailable {unavailable:?})", self.top.1);
                self.admin_writes(&what, self.api::<DaemonSet>(self.admin()).create(&PostParams::default(), &o)).await
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
            Action::ScaleStatefulSet { replicas } => {
                self.admin_patch(&format!("admin scales to {replicas}"), json!({"spec": {"replicas": replicas}})).await
            }
            Action::CreateJob { completions, parallelism, delete_mid_run } => {
                self.job(*completions, *parallelism, *delete_mid_run).await
            }
            Action::DeleteJob => {
                let jobs = self.api::<Job>(self.admin());
                self.admin_writes(
                    "admin deletes the finished Job",
                    jobs.delete(self.top.1, &DeleteParams::background()),
                )
                .await?;
                self.job_gone().await
            }
            Action::CreateWidget => {
                let w = Widget::new(self.top.1, WidgetSpec { value: self.widget_value.clone() });
                self.admin_writes(
                    "admin creates Widget w",
                    self.api::<Widget>(self.admin()).create(&PostParams::default(), &w),
                )
                .await?;
                self.widget_generation = 1;
                self.widget_settled().await
            }
            Action::WidgetSpec => {
                self.image += 1;
                self.widget_value = format!("v{}", self.image);
                let p = Patch::Merge(json!({"spec": {"value": self.widget_value}}));
                let what = format!("admin changes Widget w's value to {}", self.widget_value);
                self.admin_writes(
                    &what,
                    self.api::<Widget>(self.admin()).patch(self.top.1, &PatchParams::default(), &p),
                )
                .await?;
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

    async fn admin_writes<T>(
        &mut self,
        what: &str,
        call: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<()> {
        act(&mut self.plan, &self.s.admin, "unowned", Role::Plain, what, call).await.map(|_| ())
    }

    /// A strategic-merge patch of the workload's object by the admin.
    async fn admin_patch(&mut self, what: &str, p: Value) -> Result<()> {
        let pp = PatchParams::default();
        let p = Patch::Strategic(p);
        match self.kind {
            Kind::Deployment => {
                self.admin_writes(what, self.api::<Deployment>(self.admin()).patch(self.top.1, &pp, &p)).await
            }
            Kind::StatefulSet => {
                self.admin_writes(what, self.api::<StatefulSet>(self.admin()).patch(self.top.1, &pp, &p)).await
            }
            Kind::DaemonSet => {
                self.admin_writes(what, self.api::<DaemonSet>(self.admin()).patch(self.top.1, &pp, &p)).await
            }
            other => bail!("no patch of a {other:?} here"),
        }
    }

    async fn image_patch(&mut self) -> Result<()> {
        let image = self.next_image();
        let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
        self.admin_patch(&format!("admin changes the image to {image}"), p).await
    }

    /// `kubectl rollout undo [--to-revision]`: the template (image and annotations) of the
    /// revision `back` revisions before the current one again (the oldest kept when the history
    /// is shorter). Revisions whose pods never run (a stuck rollout's) are not gone back to.
    /// `deadline`: `progressDeadlineSeconds` set in the same patch.
    async fn undo(&mut self, back: usize, deadline: Option<i32>) -> Result<()> {
        let d = self.api::<Deployment>(self.admin()).get(self.top.1).await?;
        let revision = |o: &ObjectMeta| {
            o.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0)
        };
        let current = revision(&d.metadata);
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let sets = self
            .api::<ReplicaSet>(self.admin())
            .list(&ListParams::default().labels(&format!("app={}", self.top.1)))
            .await?;
        let stuck = |rs: &ReplicaSet| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref())
                .is_some_and(|s| s.node_selector.is_some())
        };
        let mut older: Vec<ReplicaSet> = sets
            .items
            .into_iter()
            .filter(|rs| {
                rs.owner_references().iter().any(|o| o.uid == uid) && revision(&rs.metadata) < current && !stuck(rs)
            })
            .collect();
        older.sort_by_key(|rs| std::cmp::Reverse(revision(&rs.metadata)));
        let n = older.len();
        let to = older
            .into_iter()
            .nth(back.clamp(1, n.max(1)) - 1)
            .with_context(|| format!("no revision before {current} to undo to"))?;
        let template = to.spec.and_then(|s| s.template).context("a template")?;
        let had = d.spec.and_then(|s| s.template.metadata).and_then(|m| m.annotations).unwrap_or_default();
        let want = template.metadata.and_then(|m| m.annotations).unwrap_or_default();
        let mut annotations: Map<String, Value> = want.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        for k in had.keys().filter(|k| !want.contains_key(*k)) {
            annotations.insert(k.clone(), Value::Null);
        }
        let image =
            template.spec.and_then(|s| s.containers.into_iter().next()).and_then(|c| c.image).context("an image")?;
        let mut p = json!({"spec": {"template": {"metadata": {"annotations": annotations}, "spec": {"nodeSelector": null, "containers": [{"name": "app", "image": image}]}}}});
        if let Some(s) = deadline {
            p["spec"]["progressDeadlineSeconds"] = json!(s);
        }
        let flag = if back > 1 { format!(" (--to-revision, {back} back)") } else { String::new() };
        self.admin_patch(&format!("admin undoes the rollout to revision {}{flag} ({image})", revision(&to.metadata)), p)
            .await
    }

    /// A rollout whose pods never run: a node selector no node matches. Once the deployment
    /// controller reports `ProgressDeadlineExceeded`, the admin undoes it.
    async fn stuck_rollout(&mut self, deadline: i32) -> Result<()> {
        let image = self.next_image();
        let p = json!({"spec": {"progressDeadlineSeconds": deadline, "template": {"spec": {
            "nodeSelector": {"kausality.io/nowhere": "true"},
            "containers": [{"name": "app", "image": image}],
        }}}});
        let what = format!("admin changes the image to {image} with a node selector no node matches, progressDeadlineSeconds {deadline}");
        self.admin_patch(&what, p).await?;
        let api = self.api::<Deployment>(self.admin());
        wait::until("the rollout to exceed its progress deadline", STEP_WAIT, || async {
            let d = api.get(self.top.1).await?;
            let s = d.status.unwrap_or_default();
            let exceeded = s.conditions.unwrap_or_default().iter().any(|c| {
                c.type_ == "Progressing"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            });
            Ok((s.observed_generation == d.metadata.generation && exceeded).then_some(()))
        })
        .await?;
        self.undo(1, Some(600)).await
    }

    /// A change of one of the workload's own kwok nodes, by the admin (cluster-scoped: not in
    /// the namespace's audit log, so not declared), and the wait for what it does to the
    /// DaemonSet's pod there.
    async fn node(&mut self, change: NodeChange) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.admin());
        let pods = self.api::<Pod>(self.admin());
        let lp = ListParams::default().labels(&format!("app={}", self.top.1));
        let i = apply_node(&mut self.node_flags, change).context("no node for that change")?;
        let own = |ns: &str| Taint {
            key: DAY_NODE.into(),
            value: Some(ns.to_string()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let (name, running) = match change {
            NodeChange::Add => {
                self.node_serial += 1;
                let name = format!("{}-n{}", self.s.ns, self.node_serial);
                let node = Node {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        annotations: Some(
                            [("kwok.x-k8s.io/node", "fake"), ("node.alpha.kubernetes.io/ttl", "0")]
                                .into_iter()
                                .map(|(k, v)| (k.into(), v.into()))
                                .collect(),
                        ),
                        labels: Some(
                            [
                                (DAY_NODE, self.s.ns.as_str()),
                                ("kubernetes.io/hostname", name.as_str()),
                                ("kubernetes.io/os", "linux"),
                            ]
                            .into_iter()
                            .map(|(k, v)| (k.into(), v.into()))
                            .collect(),
                        ),
                        ..ObjectMeta::default()
                    },
                    spec: Some(NodeSpec { taints: Some(vec![own(&self.s.ns)]), ..NodeSpec::default() }),
                    ..Node::default()
                };
                nodes.create(&PostParams::default(), &node).await.with_context(|| format!("admin adds node {name}"))?;
                self.nodes.push(name.clone());
                (name, true)
            }
            NodeChange::Remove => {
                let name = self.nodes.pop().context("no node to remove")?;
                nodes
                    .delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("admin removes node {name}"))?;
                (name, false)
            }
            NodeChange::Cordon => {
                let name = self.nodes[i].clone();
                nodes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
                    .await?;
                // A DaemonSet's pods tolerate a cordoned node: its pod stays.
                (name, !self.node_flags[i].1)
            }
            NodeChange::TaintNoExecute => {
                let name = self.nodes[i].clone();
                let evict = Taint {
                    key: EVICT.into(),
                    value: Some(self.s.ns.clone()),
                    effect: "NoExecute".into(),
                    ..Taint::default()
                };
                let p = json!({"spec": {"taints": [own(&self.s.ns), evict]}});
                nodes.patch(&name, &PatchParams::default(), &Patch::Merge(p)).await?;
                (name, false)
            }
        };
        wait::until(
            &format!("the DaemonSet's pod on node {name} to be {}", if running { "running" } else { "gone" }),
            STEP_WAIT,
            || async {
                let on: Vec<Pod> = pods
                    .list(&lp)
                    .await?
                    .items
                    .into_iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
                    .collect();
                let ok = if running {
                    on.iter().any(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                } else {
                    on.is_empty()
                };
                Ok(ok.then_some(()))
            },
        )
        .await
    }

    /// Waits for the CronJob's next Job, and until its controller is done with it: under
    /// `Replace` the Job before it deleted with its pod; under `Allow` the Job complete and the
    /// finished Jobs beyond the history limit deleted with their pods.
    async fn cronjob_tick(&mut self) -> Result<()> {
        let (replace, history) = self.cronjob.context("no CronJob")?;
        let jobs = self.api::<Job>(self.admin());
        let pods = self.api::<Pod>(self.admin());
        let lp = ListParams::default().labels(&format!("app={}", self.top.1));
        let seen = self.jobs_seen.clone();
        let next = wait::until("the CronJob's next Job", STEP_WAIT, || async {
            Ok(jobs.list(&lp).await?.items.into_iter().map(|j| j.name_any()).find(|n| !seen.contains(n)))
        })
        .await?;
        self.jobs_seen.insert(next.clone());
        wait::until(&format!("the CronJob's controller to be done with Job {next}"), STEP_WAIT, || async {
            let all = jobs.list(&lp).await?.items;
            let live: Vec<&Job> = all.iter().filter(|j| j.metadata.deletion_timestamp.is_none()).collect();
            let pods = pods.list(&lp).await?.items;
            let complete = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
            };
            let done = if replace {
                all.len() == 1 && all[0].name_any() == next && pods.len() == 1
            } else {
                live.iter().any(|j| j.name_any() == next && complete(j))
                    && all.len() <= history as usize
                    && pods.len() == all.len()
            };
            Ok(done.then_some(()))
        })
        .await
    }

    /// `kubectl delete deployment` (background propagation) or `--cascade=foreground`: waits
    /// until the Deployment, its ReplicaSets and their pods are gone.
    async fn delete_deployment(&mut self, foreground: bool) -> Result<()> {
        let deploys = self.api::<Deployment>(self.admin());
        let (dp, how) = if foreground {
            (DeleteParams::foreground(), "foreground")
        } else {
            (DeleteParams::background(), "background")
        };
        self.admin_writes(
            &format!("admin deletes Deployment {} ({how} propagation)", self.top.1),
            deploys.delete(self.top.1, &dp),
        )
        .await?;
        let sets = self.api::<ReplicaSet>(self.admin());
        let pods = self.api::<Pod>(self.admin());
        let lp = ListParams::default().labels(&format!("app={}", self.top.1));
        wait::until("the Deployment, its ReplicaSets and pods to be gone", STEP_WAIT, || async {
            let gone = deploys.get_opt(self.top.1).await?.is_none()
                && sets.list(&lp).await?.items.is_empty()
                && pods.list(&lp).await?.items.is_empty();
            Ok(gone.then_some(()))
        })
        .await?;
        self.deleted = true;
        Ok(())
    }

    /// `kubectl drain` of two pods under a PodDisruptionBudget that allows one unavailable:
    /// the second eviction is refused (429) until the first one's replacement is ready, and
    /// retried every half second, as kubectl does.
    async fn drain_with_pdb(&mut self) -> Result<()> {
        let s = self.s;
        let name = self.top.1;
        let budgets = self.api::<PodDisruptionBudget>(self.admin());
        let selector = LabelSelector {
            match_labels: Some([("app".to_string(), name.to_string())].into()),
            ..LabelSelector::default()
        };
        if !self.pdb {
            let pdb = PodDisruptionBudget {
                metadata: ObjectMeta { name: Some(format!("{name}-pdb")), ..ObjectMeta::default() },
                spec: Some(PodDisruptionBudgetSpec {
                    max_unavailable: Some(IntOrString::Int(1)),
                    selector: Some(selector),
                    ..PodDisruptionBudgetSpec::default()
                }),
                ..PodDisruptionBudget::default()
            };
            let what = format!("admin creates PodDisruptionBudget {name}-pdb (maxUnavailable 1)");
            self.admin_writes(&what, budgets.create(&PostParams::default(), &pdb)).await?;
            self.pdb = true;
        }
        wait::until("the PodDisruptionBudget to allow a disruption", STEP_WAIT, || async {
            let b = budgets.get(&format!("{name}-pdb")).await?;
            let st = b.status.unwrap_or_default();
            Ok((st.observed_generation == b.metadata.generation && st.disruptions_allowed >= 1).then_some(()))
        })
        .await?;
        let pods = self.api::<Pod>(s.alice.client.clone());
        let mut live: Vec<Pod> = pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.sort_by_key(|p| p.name_any());
        if live.len() < 2 {
            bail!("{} live pod(s) of {name}: nothing to drain two of", live.len());
        }
        let first = live.swap_remove((self.rng.next_u64() % live.len() as u64) as usize);
        let second = live.swap_remove((self.rng.next_u64() % live.len() as u64) as usize);
        let mut gone = Vec::new();
        for victim in [first, second] {
            let pod = victim.name_any();
            let t = Instant::now();
            let mut refused = 0;
            let id = loop {
                match s.alice.audited(pods.evict(&pod, &EvictParams::default())).await {
                    Ok((_, id)) => break id,
                    Err(e)
                        if matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(r)) if r.code == 429)
                            && t.elapsed() < STEP_WAIT =>
                    {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(e.context(format!("alice evicts pod {pod}"))),
                }
            };
            // (kube's client retries a 429 itself: the refusals it retried are in the audit log.)
            let what =
                format!("alice evicts pod {pod} under the PodDisruptionBudget ({refused} refusal(s) retried here)");
            self.plan.own(&id, "origin", Role::Removal, &what);
            gone.push((pod, victim.metadata.uid.clone().unwrap_or_default()));
        }
        let admin_pods = self.api::<Pod>(self.admin());
        for (pod, uid) in &gone {
            wait::until(&format!("pod {pod} ({uid}) to be gone"), STEP_WAIT, || async {
                let still =
                    admin_pods.get_opt(pod).await?.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid.as_str()));
                Ok((!still).then_some(()))
            })
            .await?;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    async fn scale(&mut self, replicas: i32, by: Scaler) -> Result<()> {
        let s = self.s;
        let name = self.top.1;
        match by {
            Scaler::Spec => {
                self.admin_patch(&format!("admin scales to {replicas}"), json!({"spec": {"replicas": replicas}})).await
            }
            Scaler::Kubectl => {
                let api = self.api::<Deployment>(s.alice.client.clone());
                let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
                let what = format!("alice scales Deployment {name} to {replicas} through /scale");
                act(
                    &mut self.plan,
                    &s.alice,
                    "unowned",
                    Role::Plain,
                    &what,
                    api.patch_scale(name, &PatchParams::default(), &p),
                )
                .await
                .map(|_| ())
            }
            Scaler::Hpa => {
                // The HPA's role allows get and update of */scale (no patch).
                let api = self.api::<Deployment>(s.hpa.client.clone());
                let mut scale = api.get_scale(name).await?;
                scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
                let what = format!("the HPA scales Deployment {name} to {replicas} through /scale");
                act(
                    &mut self.plan,
                    &s.hpa,
                    "unowned",
                    Role::Plain,
                    &what,
                    api.replace_scale(name, &PostParams::default(), &scale),
                )
                .await
                .map(|_| ())
            }
        }
    }

    /// A person scales (through `/scale`) or edits the Deployment's active ReplicaSet; the
    /// deployment controller puts the count back.
    async fn person_changes_replicaset(&mut self, replicas: i32, through_scale: bool) -> Result<()> {
        let s = self.s;
        let rs_api = self.api::<ReplicaSet>(s.alice.client.clone());
        let spec = self.api::<Deployment>(self.admin()).get(self.top.1).await?.spec.unwrap_or_default();
        let want = spec.replicas.unwrap_or(1);
        let rs = self.active_replicaset().await?;
        let rs_name = rs.metadata.name.clone().context("name")?;
        // A paused Deployment's controller scales back only its one active ReplicaSet: with that
        // one at 0 it would scale the newest ReplicaSet instead, another object. So a paused
        // Deployment's ReplicaSet is edited to 1 at least.
        let replicas = if spec.paused == Some(true) { replicas.max(1) } else { replicas };
        let replicas = if replicas == want { want + 1 } else { replicas };
        let p = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        let rv = if through_scale {
            let what = format!("alice scales ReplicaSet {rs_name} to {replicas} through /scale");
            act(
                &mut self.plan,
                &s.alice,
                "origin",
                Role::Change,
                &what,
                rs_api.patch_scale(&rs_name, &PatchParams::default(), &p),
            )
            .await?
            .metadata
            .resource_version
        } else {
            let what = format!("alice edits ReplicaSet {rs_name}'s replicas to {replicas}");
            act(
                &mut self.plan,
                &s.alice,
                "origin",
                Role::Change,
                &what,
                rs_api.patch(&rs_name, &PatchParams::default(), &p),
            )
            .await?
            .metadata
            .resource_version
        };
        let after: u64 = rv.as_deref().context("resourceVersion")?.parse()?;
        wait::until(
            &format!("the deployment controller to scale ReplicaSet {rs_name} back to {want}"),
            STEP_WAIT,
            || async {
                let rs = rs_api.get(&rs_name).await?;
                let rv: u64 = rs.metadata.resource_version.as_deref().unwrap_or("0").parse().unwrap_or(0);
                Ok((rv > after && rs.spec.as_ref().and_then(|s| s.replicas) == Some(want)).then_some(()))
            },
        )
        .await
    }

    /// The ReplicaSet of the Deployment with pods wanted, else the newest.
    async fn active_replicaset(&self) -> Result<ReplicaSet> {
        let sets = self
            .api::<ReplicaSet>(self.admin())
            .list(&ListParams::default().labels(&format!("app={}", self.top.1)))
            .await?;
        let revision =
            |rs: &ReplicaSet| rs.annotations().get(REVISION).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0);
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
                act(
                    &mut self.plan,
                    &s.alice,
                    "origin",
                    Role::Removal,
                    &format!("alice deletes pod {name}"),
                    pods.delete(&name, &DeleteParams::default()),
                )
                .await?;
            }
            Removal::GracePeriodZero => {
                let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
                act(
                    &mut self.plan,
                    &s.alice,
                    "origin",
                    Role::Removal,
                    &format!("alice deletes pod {name} with grace period 0"),
                    pods.delete(&name, &dp),
                )
                .await?;
            }
            Removal::Evict => {
                act(
                    &mut self.plan,
                    &s.alice,
                    "origin",
                    Role::Removal,
                    &format!("alice evicts pod {name}"),
                    pods.evict(&name, &EvictParams::default()),
                )
                .await?;
            }
        }
        let admin_pods = self.api::<Pod>(self.admin());
        wait::until(&format!("pod {name} ({uid}) to be gone"), STEP_WAIT, || async {
            let still =
                admin_pods.get_opt(&name).await?.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid.as_str()));
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
        self.admin_writes(
            "admin deletes Deployment app with --cascade=orphan",
            deploys.delete(self.top.1, &DeleteParams::orphan()),
        )
        .await?;
        wait::until("Deployment app to be gone", STEP_WAIT, || async {
            Ok(deploys.get_opt(self.top.1).await?.is_none().then_some(()))
        })
        .await?;
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
        wait::until("the Job's first pod", STEP_WAIT, || async {
            Ok((!pods.list(&lp).await?.items.is_empty()).then_some(()))
        })
        .await?;
        self.admin_writes("admin deletes the running Job", jobs.delete(self.top.1, &DeleteParams::background()))
            .await?;
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
        if self.deleted {
            return Ok(());
        }
        match (self.kind, &self.orphan) {
            (Kind::Deployment, None) => self.deployment_stable().await,
            (Kind::Deployment, Some(rs)) => {
                let api = self.api::<ReplicaSet>(self.admin());
                wait::until(&format!("ReplicaSet {rs} to be stable"), STEP_WAIT, || async {
                    let o = api.get(rs).await?;
                    let want = o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let s = o.status.unwrap_or_default();
                    let done = s.observed_generation == o.metadata.generation
                        && s.replicas == want
                        && s.ready_replicas.unwrap_or(0) == want;
                    Ok(done.then_some(()))
                })
                .await
            }
            (Kind::StatefulSet, _) => self.statefulset_stable().await,
            (Kind::DaemonSet, _) => {
                let api = self.api::<DaemonSet>(self.admin());
                wait::until("the DaemonSet to be stable", STEP_WAIT, || async {
                    let o = api.get(self.top.1).await?;
                    let s = o.status.clone().unwrap_or_default();
                    let n = s.desired_number_scheduled;
                    let done = s.observed_generation == o.metadata.generation
                        && n > 0
                        && s.current_number_scheduled == n
                        && s.updated_number_scheduled == Some(n)
                        && s.number_available == Some(n)
                        && s.number_ready == n;
                    Ok(done.then_some(()))
                })
                .await
            }
            (Kind::Job | Kind::Widget | Kind::CronJob, _) => Ok(()),
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
            // OnDelete moves no pod: a pod is updated only when someone deletes it.
            let rolled = if self.on_delete {
                true
            } else if s.current_revision == s.update_revision {
                updated == want
            } else {
                updated == want - partition.min(want) && partition > 0
            };
            let done = s.observed_generation == o.metadata.generation
                && s.replicas == want
                && s.ready_replicas.unwrap_or(0) == want
                && rolled;
            Ok(done.then_some(()))
        })
        .await
    }
}
