//! Scenario 8: real Flux (kustomize-controller, `scripts/flux.sh`) applying a Deployment, a
//! ConfigMap and a Service from a GitRepository, every write judged against the ground truth
//! of what the test did (its actor and its intent), never against kausality-stream's output.
//!
//! The test plays source-controller: it packs each "commit" into a tarball, serves it on
//! 127.0.0.1 and writes the GitRepository's `status.artifact` (e2e/src/flux.rs). Steps:
//! the first revision applied; alice scales the Deployment and edits the ConfigMap, Flux's
//! drift correction puts both back (drift, reverting alice); a new commit (expected); alice
//! edits the ConfigMap and asks for a reconcile (`reconcile.fluxcd.io/requestedAt`: the apply
//! that follows is expected); the Kustomization suspended while alice edits (no revert), then
//! resumed (a spec change: expected); the Service removed from the source (an expected prune).
//!
//! The truth: the shared rules of [`kausality_e2e::truth`] label every write of the namespace
//! (the Deployment's ReplicaSets and pods, the test's own writes); kustomize-controller's
//! writes to the objects it applies, which those rules call `unowned` (no controller
//! ownerReference), are then labelled by the step's cause: `expected` after a new revision, a
//! person's reconcile request or a spec change of the Kustomization, `drift` reverting the
//! person's write to the same object in a step where only a person changed something.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::json;

use kausality_e2e::audit::{self, AuditLine};
use kausality_e2e::flux::{self, Artifact, ArtifactServer, KustomizeController};
use kausality_e2e::harness::{Cluster, Scene, REORDER_WINDOW};
use kausality_e2e::truth::{self, Cause, Judgement, Label, Plan, Reverts, Role};
use kausality_e2e::wait;
use kausality_e2e::workloads::wait_rolled_out;

const ABOUT: &str = "real Flux kustomize-controller applying a Deployment, a ConfigMap and a Service from a GitRepository (source-controller played by the test): alice scales and edits, Flux puts both back (drift reverting alice); a new commit (expected); alice edits and requests a reconcile (expected); the Kustomization suspended while alice edits (no revert), resumed (expected); the Service removed from the source (an expected prune); expectations from what the test did";

const NAME: &str = "shop";
const CONFIG: &str = "shop-config";
/// The Kustomization's interval: how soon Flux's drift correction runs on its own.
const INTERVAL_S: u64 = 10;

/// What a step caused, for kustomize-controller's writes to the objects it applies.
#[derive(Clone, Debug)]
enum FluxCause {
    /// A new revision, a person's reconcile request, a spec change of the Kustomization: its
    /// applies carry that intent out.
    Apply,
    /// Only a person changed members (object → the person's write): an apply that changes one
    /// of them puts the person's change back.
    PersonChanged(BTreeMap<String, String>),
    /// Flux must not write to its members (before any Kustomization, or suspended); also the
    /// placeholder of a step until the person's writes of [`FluxCause::PersonChanged`] are known.
    Quiet,
}

fn gvk(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC) of now.
fn rfc3339_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The "Git" tree of a commit: the Deployment always, the ConfigMap's greeting, the
/// Service's port (no Service when `None`).
fn tree(greeting: &str, service_port: Option<i64>) -> Vec<(&'static str, String)> {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "labels": {"app": NAME}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{"name": "app", "image": "example/shop:1"}]}
            }
        }
    });
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG}, "data": {"greeting": greeting, "color": "blue"}});
    let mut files = vec![("shop/deployment.yaml", deployment.to_string()), ("shop/configmap.yaml", config.to_string())];
    if let Some(port) = service_port {
        // No selector: no EndpointSlice controller writes under it.
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME}, "spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080}]}});
        files.push(("shop/service.yaml", service.to_string()));
    }
    files
}

/// A fake commit id: 40 hex digits from the step number.
fn revision(n: u32) -> String {
    format!("main@sha1:{:040x}", 0xc0ffee_u64 * 1000 + u64::from(n))
}

/// The scenario's objects and clients.
struct Shop<'a> {
    s: Scene<'a>,
    plan: Plan,
    flux: Vec<(String, FluxCause)>,
    repos: Api<DynamicObject>,
    kustomizations: Api<DynamicObject>,
    alice_kustomizations: Api<DynamicObject>,
    server: ArtifactServer,
}

impl<'a> Shop<'a> {
    /// The scene's namespace with the test's GitRepository and Kustomization APIs, and the
    /// server of its artifacts in `dir`.
    fn new(s: Scene<'a>, dir: &std::path::Path) -> Result<Shop<'a>> {
        let ns = s.ns.clone();
        let repo_res = gvk("source.toolkit.fluxcd.io", "v1", "GitRepository", "gitrepositories");
        let ks_res = gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations");
        let mut plan = Plan::new();
        plan.step_from("setup", Cause::Setup, s.created.1);
        plan.own(&s.created.0, "unowned", Role::Plain, "admin creates the namespace");
        Ok(Shop {
            repos: Api::namespaced_with(s.admin.client.clone(), &ns, &repo_res),
            kustomizations: Api::namespaced_with(s.admin.client.clone(), &ns, &ks_res),
            alice_kustomizations: Api::namespaced_with(s.alice.client.clone(), &ns, &ks_res),
            server: ArtifactServer::start(&dir.join("artifacts"))?,
            s,
            plan,
            flux: vec![("setup".into(), FluxCause::Quiet)],
        })
    }

    /// The GitRepository and a Kustomization of it (applying as `service_account` when
    /// given); waits until Flux applied the first revision and the Deployment rolled out.
    async fn first_revision(&mut self, service_account: Option<&str>) -> Result<()> {
        let (ns, pp) = (self.s.ns.clone(), PostParams::default());
        self.step("the first revision", Cause::Intent(vec![("Deployment".into(), NAME.into())]), FluxCause::Apply);
        let repo: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": NAME, "namespace": ns},
            "spec": {"url": "https://git.example.invalid/shop.git", "interval": "1h", "ref": {"branch": "main"}}
        }))?;
        let repos = self.repos.clone();
        self.own("unowned", "admin creates the GitRepository", false, repos.create(&pp, &repo)).await?;
        let first = self.publish(1, &tree("hello", Some(80))).await?;
        let mut ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": NAME, "namespace": ns},
            "spec": {
                "interval": format!("{INTERVAL_S}s"), "retryInterval": "5s", "timeout": "1m",
                "path": "./shop", "prune": true, "targetNamespace": ns,
                "sourceRef": {"kind": "GitRepository", "name": NAME}
            }
        });
        let what = match service_account {
            Some(sa) => {
                ks["spec"]["serviceAccountName"] = json!(sa);
                "admin creates the tenant's Kustomization"
            }
            None => "admin creates the Kustomization",
        };
        let ks: DynamicObject = serde_json::from_value(ks)?;
        let kss = self.kustomizations.clone();
        self.own("unowned", what, false, kss.create(&pp, &ks)).await?;
        self.applied(&first.revision, None).await?;
        wait_rolled_out(&Api::<Deployment>::namespaced(self.s.admin.client.clone(), &ns), NAME).await?;
        self.s.settle().await
    }

    /// alice scales the Deployment and edits the ConfigMap; Flux's next reconcile (at most an
    /// interval later) puts both back.
    async fn alice_changes_and_flux_puts_back(&mut self) -> Result<()> {
        let ns = self.s.ns.clone();
        let deploys: Api<Deployment> = Api::namespaced(self.s.admin.client.clone(), &ns);
        let configs: Api<ConfigMap> = Api::namespaced(self.s.admin.client.clone(), &ns);
        let alice_deploys: Api<Deployment> = Api::namespaced(self.s.alice.client.clone(), &ns);
        let mut changed = BTreeMap::new();
        self.step(
            "alice scales and edits, Flux corrects the drift",
            Cause::Intent(vec![("Deployment".into(), NAME.into())]),
            FluxCause::Quiet,
        );
        let scale = json!({"spec": {"replicas": 4}});
        let id = self
            .own(
                "origin",
                "alice scales the Deployment to 4",
                true,
                alice_deploys.patch_scale(NAME, &PatchParams::default(), &Patch::Merge(scale)),
            )
            .await?;
        changed.insert(format!("Deployment/{NAME}"), id);
        let id = self.alice_edits_config("alice edits the ConfigMap", json!({"greeting": "hi from alice"})).await?;
        changed.insert(format!("ConfigMap/{CONFIG}"), id);
        self.flux.last_mut().expect("a step").1 = FluxCause::PersonChanged(changed);
        wait::until("Flux to put the scale and the edit back", Duration::from_secs(4 * INTERVAL_S + 30), || {
            let (deploys, configs) = (deploys.clone(), configs.clone());
            async move {
                let d = deploys.get(NAME).await?;
                let c = configs.get(CONFIG).await?;
                let back = d.spec.and_then(|s| s.replicas) == Some(2)
                    && c.data.and_then(|d| d.get("greeting").cloned()).as_deref() == Some("hello");
                Ok(back.then_some(()))
            }
        })
        .await?;
        wait_rolled_out(&deploys, NAME).await?;
        self.s.settle().await
    }

    /// alice merges `data` into the ConfigMap: a write of hers the truth labels `origin`.
    async fn alice_edits_config(&mut self, what: &str, data: serde_json::Value) -> Result<String> {
        let alice_configs: Api<ConfigMap> = Api::namespaced(self.s.alice.client.clone(), &self.s.ns);
        let edit = json!({ "data": data });
        self.own("origin", what, true, alice_configs.patch(CONFIG, &PatchParams::default(), &Patch::Merge(edit))).await
    }

    /// The ConfigMap's `key`, as it is now.
    async fn config_value(&self, key: &str) -> Result<Option<String>> {
        let configs: Api<ConfigMap> = Api::namespaced(self.s.admin.client.clone(), &self.s.ns);
        Ok(configs.get(CONFIG).await?.data.and_then(|d| d.get(key).cloned()))
    }

    /// Waits until the ConfigMap's `key` is `value` (Flux put it back).
    async fn wait_config(&self, what: &str, key: &str, value: &str) -> Result<()> {
        wait::until(what, Duration::from_secs(60), || async move {
            Ok((self.config_value(key).await?.as_deref() == Some(value)).then_some(()))
        })
        .await
    }

    fn step(&mut self, name: &str, cause: Cause, flux: FluxCause) {
        self.plan.step(name, cause);
        self.flux.push((name.to_string(), flux));
    }

    /// Writes the GitRepository's status as source-controller does when it stored a new
    /// artifact (a status write: no class).
    async fn publish(&mut self, n: u32, files: &[(&str, String)]) -> Result<Artifact> {
        let a = self.server.publish(&revision(n), files)?;
        let now = rfc3339_now();
        let status = json!({"status": {
            "observedGeneration": 1,
            "artifact": {"path": a.path, "url": a.url, "revision": a.revision, "digest": a.digest, "lastUpdateTime": now, "size": a.size},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": format!("stored artifact for revision '{}'", a.revision), "lastTransitionTime": now, "observedGeneration": 1}]
        }});
        self.s.admin.audited(self.repos.patch_status(NAME, &PatchParams::default(), &Patch::Merge(status))).await?;
        Ok(a)
    }

    /// Waits until the Kustomization shows `revision` applied, ready, its generation observed
    /// and (if given) the reconcile request handled.
    async fn applied(&self, revision: &str, requested: Option<&str>) -> Result<()> {
        let api = self.kustomizations.clone();
        wait::until(&format!("the Kustomization to apply {revision}"), Duration::from_secs(90), || {
            let api = api.clone();
            async move {
                let k = api.get(NAME).await?;
                let st = &k.data["status"];
                let ready = st["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                let ok = st["lastAppliedRevision"] == revision
                    && ready
                    && st["observedGeneration"].as_i64() == k.metadata.generation
                    && requested.is_none_or(|r| st["lastHandledReconcileAt"] == r);
                Ok(ok.then_some(()))
            }
        })
        .await
    }

    /// A write of the test, kept in the plan with the class the truth gives it.
    async fn own<T>(
        &mut self,
        class: &'static str,
        what: &str,
        alice: bool,
        call: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<String> {
        let actor = if alice { &self.s.alice } else { &self.s.admin };
        let (_, id) = actor.audited(call).await.with_context(|| what.to_string())?;
        self.plan.own(&id, class, Role::Plain, what);
        Ok(id)
    }
}

pub async fn flux(cluster: &Cluster) -> Result<()> {
    let kc =
        KustomizeController::start(&cluster.controlplane, &cluster.setup.client, &cluster.dir.join("flux")).await?;
    let shop = Shop::new(Scene::new(cluster, "flux", ABOUT).await?, &cluster.dir.join("flux"))?;
    stopped(kc, |version| run(shop, version)).await
}

/// Runs a scenario (given kustomize-controller's version) and stops kustomize-controller; a
/// failure carries the controller's last log lines.
async fn stopped<F: std::future::Future<Output = Result<()>>>(
    mut kc: KustomizeController,
    scenario: impl FnOnce(String) -> F,
) -> Result<()> {
    let run = scenario(kc.version.clone()).await;
    let tail = kc.log_tail(30);
    kc.stop();
    run.with_context(|| format!("kustomize-controller {} log (last lines):\n{tail}", kc.version))
}

const ABOUT_TENANT: &str = "real Flux kustomize-controller applying as a tenant's service account (the Kustomization's spec.serviceAccountName: Flux impersonates it, so the audit events name the tenant as the user, and the requests name fieldManager=kustomize-controller): the first revision (expected); alice scales and edits, Flux puts both back (drift reverting alice); expectations from what the test did";
/// The tenant's service account that Flux applies as.
const TENANT: &str = "shop-reconciler";

/// Scenario 8b: Flux's multi-tenancy. The Kustomization names a service account of the
/// namespace; kustomize-controller impersonates it for every apply, as Flux's multi-tenant
/// setups do. The truth takes kustomize-controller's requests by who sent them (the audit
/// event's authenticated user), whoever they acted as.
pub async fn flux_tenant(cluster: &Cluster) -> Result<()> {
    let dir = cluster.dir.join("flux-tenant");
    let kc = KustomizeController::start(&cluster.controlplane, &cluster.setup.client, &dir).await?;
    let shop = Shop::new(Scene::new(cluster, "flux-tenant", ABOUT_TENANT).await?, &dir)?;
    stopped(kc, |version| run_tenant(shop, version)).await
}

async fn run_tenant(mut shop: Shop<'_>, version: String) -> Result<()> {
    let ns = &shop.s.ns.clone();
    let pp = PostParams::default();

    // 1. The tenant: a service account allowed to manage the namespace.
    shop.step("the tenant's service account", Cause::Intent(Vec::new()), FluxCause::Quiet);
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(TENANT.into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(shop.s.admin.client.clone(), ns);
    shop.own("unowned", "admin creates the tenant's service account", false, sas.create(&pp, &sa)).await?;
    let rb = RoleBinding {
        metadata: ObjectMeta { name: Some(TENANT.into()), ..ObjectMeta::default() },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: TENANT.into(),
            namespace: Some(ns.into()),
            api_group: None,
        }]),
    };
    let rbs: Api<RoleBinding> = Api::namespaced(shop.s.admin.client.clone(), ns);
    shop.own("unowned", "admin lets the tenant manage the namespace", false, rbs.create(&pp, &rb)).await?;

    // 2. The source and the Kustomization that applies as the tenant.
    shop.first_revision(Some(TENANT)).await?;

    // 3. alice scales and edits; Flux, as the tenant, puts both back.
    shop.alice_changes_and_flux_puts_back().await?;
    // The applies went out as the tenant: else this scenario tests nothing new.
    let lines = writes(shop.s.cluster.audit.namespace(ns)?);
    let tenant = format!("system:serviceaccount:{ns}:{TENANT}");
    ensure!(
        lines.iter().any(|l| l.user() == tenant && l.str("/user/username") == Some(flux::USER)),
        "no write of kustomize-controller impersonating {tenant}"
    );
    finish(shop, &version).await
}

async fn run(mut shop: Shop<'_>, version: String) -> Result<()> {
    let ns = &shop.s.ns.clone();
    let services: Api<Service> = Api::namespaced(shop.s.admin.client.clone(), ns);

    // 1. The source and the Kustomization; Flux applies the first revision.
    shop.first_revision(None).await?;

    // 2. alice scales the Deployment and edits the ConfigMap; Flux puts both back.
    shop.alice_changes_and_flux_puts_back().await?;

    // 3. A new commit: the ConfigMap's greeting and the Service's port change.
    shop.step("a new commit", Cause::Intent(Vec::new()), FluxCause::Apply);
    let second = shop.publish(2, &tree("hello again", Some(81))).await?;
    shop.applied(&second.revision, None).await?;
    shop.s.settle().await?;

    // 4. alice edits the ConfigMap and, at once, asks Flux to reconcile: the apply that
    // follows her request carries it out (one that came before it would be a drift).
    let mut changed = BTreeMap::new();
    shop.step("alice edits the ConfigMap", Cause::Intent(Vec::new()), FluxCause::Quiet);
    let id = shop.alice_edits_config("alice edits the ConfigMap", json!({"greeting": "alice again"})).await?;
    changed.insert(format!("ConfigMap/{CONFIG}"), id);
    shop.flux.last_mut().expect("a step").1 = FluxCause::PersonChanged(changed);
    shop.step("alice requests a reconcile", Cause::Intent(Vec::new()), FluxCause::Apply);
    let requested = rfc3339_now();
    let annotate = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": requested}}});
    // A metadata-only write of a top-level object: no class (the shared rules).
    shop.s
        .alice
        .audited(shop.alice_kustomizations.patch(NAME, &PatchParams::default(), &Patch::Merge(annotate)))
        .await?;
    shop.applied(&second.revision, Some(&requested)).await?;
    shop.wait_config("Flux to put the greeting back", "greeting", "hello again").await?;
    shop.s.settle().await?;

    // 5. Suspended: alice's edit stays, whatever the interval.
    shop.step("the Kustomization suspended, alice edits", Cause::Intent(Vec::new()), FluxCause::Quiet);
    let alice_ks = shop.alice_kustomizations.clone();
    shop.own(
        "unowned",
        "alice suspends the Kustomization",
        true,
        alice_ks.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))),
    )
    .await?;
    // A reconcile that started before the suspend was seen ends within a second or so.
    tokio::time::sleep(Duration::from_secs(2)).await;
    shop.alice_edits_config("alice edits the ConfigMap while suspended", json!({"color": "red"})).await?;
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL_S + 2)).await;
    let color = shop.config_value("color").await?;
    ensure!(color.as_deref() == Some("red"), "Flux changed the ConfigMap while suspended: color {color:?}");
    shop.s.settle().await?;

    // 6. Resumed: a spec change of the Kustomization, its apply is expected.
    shop.step("alice resumes the Kustomization", Cause::Intent(Vec::new()), FluxCause::Apply);
    shop.own(
        "unowned",
        "alice resumes the Kustomization",
        true,
        alice_ks.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))),
    )
    .await?;
    shop.wait_config("Flux to put the color back", "color", "blue").await?;
    shop.applied(&second.revision, None).await?;
    shop.s.settle().await?;

    // 7. The Service removed from the source: Flux prunes it.
    shop.step("the Service removed from the source", Cause::Intent(Vec::new()), FluxCause::Apply);
    let third = shop.publish(3, &tree("hello again", None)).await?;
    shop.applied(&third.revision, None).await?;
    wait::until("Flux to prune the Service", Duration::from_secs(60), || {
        let services = services.clone();
        async move { Ok(services.get_opt(NAME).await?.is_none().then_some(())) }
    })
    .await?;
    shop.s.settle().await?;

    finish(shop, &version).await
}

/// The audit lines of the namespace that are writes: a dry run (Flux computes its diff with
/// server-side dry-run applies) changes nothing and is no write of anyone.
fn writes(lines: Vec<AuditLine>) -> Vec<AuditLine> {
    lines.into_iter().filter(|l| !l.str("/requestURI").is_some_and(|u| u.contains("dryRun=All"))).collect()
}

/// The truth: the shared labels, with kustomize-controller's writes to the objects it applies
/// labelled by the step's cause.
fn flux_labels(mut labels: Vec<Label>, steps: &[(String, FluxCause)], lines: &[AuditLine]) -> Result<Vec<Label>> {
    // kustomize-controller's requests by who sent them: acting as a tenant (impersonation),
    // the event's user is the tenant's account.
    let sent: HashSet<&str> =
        lines.iter().filter(|l| l.str("/user/username") == Some(flux::USER)).map(AuditLine::audit_id).collect();
    let mut unexplained = Vec::new();
    for l in &mut labels {
        let by_flux = l.user == flux::USER || sent.contains(l.key.split('/').next().unwrap_or_default());
        if !by_flux || l.class != "unowned" {
            continue;
        }
        let at = format!("{} {} {} [{}]", l.key, l.verb, l.object, l.step);
        match steps.iter().find(|(n, _)| *n == l.step).map(|(_, c)| c) {
            Some(FluxCause::Apply) => {
                l.class = "expected".into();
                l.why = "kustomize-controller carries out a new revision, a person's request or a spec change of its Kustomization".into();
            }
            Some(FluxCause::PersonChanged(by)) => match by.get(&l.object) {
                Some(id) => {
                    l.class = "drift".into();
                    l.reverts = Some(Reverts::AnyOf(vec![id.clone()]));
                    l.why = "kustomize-controller puts back a person's change at the revision it had applied".into();
                }
                None => unexplained.push(format!("{at}: Flux changed an object nobody else changed in this step")),
            },
            Some(FluxCause::Quiet) => {
                unexplained.push(format!("{at}: Flux wrote where the test expects no write of it"))
            }
            None => unexplained.push(format!("{at}: in no step of the test")),
        }
    }
    if !unexplained.is_empty() {
        bail!(
            "{} write(s) of kustomize-controller the truth cannot explain:\n  {}",
            unexplained.len(),
            unexplained.join("\n  ")
        );
    }
    Ok(labels)
}

/// The replay check, the judgement against the truth, the fixture (tests/fixtures/flux/ with
/// `KAUSALITY_E2E_RECORD=1`): as [`Scene::finish_judged`], with the Flux labels.
async fn finish(shop: Shop<'_>, version: &str) -> Result<()> {
    let Shop { s, plan, flux, .. } = shop;
    let c = s.cluster;
    let scenarios = c.dir.join("scenarios");
    std::fs::create_dir_all(&scenarios)?;
    std::fs::write(scenarios.join(format!("{}.plan.json", s.ns)), serde_json::to_string_pretty(&plan)?)?;
    let check = audit::check_replay(&c.audit, &c.live, &s.ns, &scenarios, REORDER_WINDOW).await?;
    let lines = writes(c.audit.namespace(&s.ns)?);
    let labels = flux_labels(truth::label(&lines, &plan)?, &flux, &lines)?;
    let judged = Judgement::new(&labels, &check.events);
    println!(
        "    {}: {} audit events, {} writes labelled, {} classified (live == replay):",
        s.name,
        check.lines.len(),
        labels.len(),
        check.events.len()
    );
    for line in judged.report().lines() {
        println!("      {line}");
    }
    let (p, r, ..) = judged.precision_recall("expected");
    println!("      expected: precision {p:.2}, recall {r:.2}");
    let dir = if c.record {
        kausality_e2e::repo_root().join("tests").join("fixtures").join("flux")
    } else {
        c.dir.join("fixtures")
    };
    audit::write_fixture(&dir, &s.name, ABOUT, REORDER_WINDOW, &check, &[], Some(Judgement::expectations(&labels)))?;
    // Which Flux: the shared fixture header names the control plane only.
    let path = dir.join(format!("{}.expected.json", s.name));
    let mut expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let with = format!(
        "{}; Flux kustomize-controller {version} (scripts/flux.sh), source-controller played by the test",
        expected["recordedWith"].as_str().unwrap_or("")
    );
    expected["recordedWith"] = json!(with);
    std::fs::write(&path, serde_json::to_string_pretty(&expected)? + "\n")?;
    if !judged.mismatches.is_empty() {
        bail!(
            "{} of {} writes differ from the truth:\n  {}\n{}",
            judged.mismatches.len(),
            judged.writes,
            judged.mismatches.join("\n  "),
            judged.report()
        );
    }
    for class in ["drift", "origin", "expected"] {
        let (_, _, _, _, truly) = judged.precision_recall(class);
        ensure!(truly > 0, "the scenario made no {class} write");
    }
    Ok(())
}
