//! One cluster under test: `kausality-stream serve`, then the control plane with its audit
//! webhook pointed at it, then the cluster-wide setup; and a [`Scene`] per scenario (its own
//! namespace, its actors, its facts, the replay check and the fixture at the end).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

use crate::actors::Actor;
use crate::audit::{self, AuditLogs, Fact};
use crate::controlplane::ControlPlane;
use crate::enriched::{EnrichedLog, Event};
use crate::serve::Serve;
use crate::truth::{self, Judgement, Plan};
use crate::{repo_root, users, widget};

/// The reorder window of the pipeline under test and of the replays: above the API server's
/// webhook batch wait (1 s), so that writes of two API servers are still put in order.
pub const REORDER_WINDOW: &str = "2s";

/// The ClusterRole the Widget controllers' service accounts are bound to in their namespace.
pub const WIDGET_CONTROLLER_ROLE: &str = "e2e-widget-controller";

pub struct Cluster {
    /// `fixture` names are prefixed with it (`dual-` for two API servers).
    pub prefix: &'static str,
    pub dir: PathBuf,
    // Field order is drop order: the control plane stops first (the API servers flush their
    // last audit batches to kausality-stream), then kausality-stream.
    pub controlplane: ControlPlane,
    pub serve: Serve,
    pub live: EnrichedLog,
    pub audit: AuditLogs,
    /// Admin on the first API server: namespaces, RBAC, the CRD.
    pub setup: Actor,
    /// Writes `tests/fixtures/controlplane/` (`KAUSALITY_E2E_RECORD=1`).
    pub record: bool,
}

impl Cluster {
    /// Starts everything for `apiservers` API servers (1 or 2) in `target/e2e/<name>`
    /// (or `$KAUSALITY_E2E_DIR/<name>`).
    pub async fn start(name: &str, apiservers: u8) -> Result<Cluster> {
        let base =
            std::env::var_os("KAUSALITY_E2E_DIR").map_or_else(|| repo_root().join("target").join("e2e"), PathBuf::from);
        let dir = base.join(name);
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("cleaning {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        let serve = Serve::start(&dir.join("serve"), REORDER_WINDOW)?;
        let cp_dir = dir.join("controlplane");
        let controlplane = match ControlPlane::start(&cp_dir, &serve.webhook_url(), apiservers) {
            Ok(cp) => cp,
            // A start can fail for reasons of the machine (a port taken by someone else just
            // then); the script has stopped what it started, so one more try is clean.
            Err(e) => {
                eprintln!("e2e: the control plane did not start, trying once more: {e:#}");
                ControlPlane::start(&cp_dir, &serve.webhook_url(), apiservers)?
            }
        };
        let setup = Actor::connect(&controlplane.kubeconfigs[0], None).await?;
        let cluster = Cluster {
            prefix: if apiservers == 2 { "dual-" } else { "" },
            live: EnrichedLog::new(&serve.events),
            audit: AuditLogs { files: controlplane.audit_logs.clone() },
            dir,
            controlplane,
            serve,
            setup,
            record: std::env::var("KAUSALITY_E2E_RECORD").is_ok_and(|v| v == "1"),
        };
        cluster.cluster_setup().await?;
        Ok(cluster)
    }

    /// What every scenario may use: alice is a cluster-admin (a person with rights), the
    /// Widget CRD, the Widget controller's role.
    async fn cluster_setup(&self) -> Result<()> {
        let c = &self.setup.client;
        let crb = ClusterRoleBinding {
            metadata: ObjectMeta { name: Some("e2e-alice".into()), ..ObjectMeta::default() },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: "cluster-admin".into(),
            },
            subjects: Some(vec![Subject {
                kind: "User".into(),
                name: users::ALICE.into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                namespace: None,
            }]),
        };
        Api::<ClusterRoleBinding>::all(c.clone()).create(&PostParams::default(), &crb).await?;
        let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            ..PolicyRule::default()
        };
        let role = ClusterRole {
            metadata: ObjectMeta { name: Some(WIDGET_CONTROLLER_ROLE.into()), ..ObjectMeta::default() },
            rules: Some(vec![
                rule("e2e.kausality.io", &["widgets"], &["get", "list", "watch"]),
                rule("e2e.kausality.io", &["widgets/status"], &["get", "patch", "update"]),
                rule("", &["configmaps"], &["get", "list", "watch", "create", "update", "patch", "delete"]),
            ]),
            ..ClusterRole::default()
        };
        Api::<ClusterRole>::all(c.clone()).create(&PostParams::default(), &role).await?;
        widget::install_crd(c).await
    }

    /// The kubeconfig the scenarios' actors write through: the last API server (the second one
    /// with two, while the controllers talk to the first).
    pub fn actor_kubeconfig(&self) -> &PathBuf {
        self.controlplane.kubeconfigs.last().expect("one API server at least")
    }

    /// Stops the control plane, then kausality-stream; reports what went wrong.
    pub fn stop(mut self) -> Result<()> {
        let cp = self.controlplane.stop();
        let serve = self.serve.stop();
        cp.and(serve)
    }
}

/// One scenario: its namespace, its actors, the facts it established.
pub struct Scene<'a> {
    pub cluster: &'a Cluster,
    /// Fixture name (`rollout`, `dual-rollout`, ...), also the namespace.
    pub name: String,
    pub ns: String,
    pub admin: Actor,
    /// A person.
    pub alice: Actor,
    /// The horizontal-pod-autoscaler's service account.
    pub hpa: Actor,
    pub facts: Vec<Fact>,
    /// The auditID of the Namespace's create, and when the create was sent (µs since the
    /// epoch): the first write of the scenario.
    pub created: (String, i64),
    about: String,
}

impl<'a> Scene<'a> {
    pub async fn new(cluster: &'a Cluster, scenario: &str, about: &str) -> Result<Scene<'a>> {
        let name = format!("{}{scenario}", cluster.prefix);
        let ns = Namespace {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        let sent = truth::now_us();
        let (_, id) = cluster
            .setup
            .audited(Api::<Namespace>::all(cluster.setup.client.clone()).create(&PostParams::default(), &ns))
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let kc = cluster.actor_kubeconfig();
        Ok(Scene {
            cluster,
            ns: name.clone(),
            name,
            admin: Actor::connect(kc, None).await?,
            alice: Actor::connect(kc, Some(users::ALICE)).await?,
            hpa: Actor::connect(kc, Some(users::HPA)).await?,
            facts: Vec::new(),
            created: (id, sent),
            about: about.to_string(),
        })
    }

    /// A client impersonating a service account of this namespace.
    pub async fn service_account(&self, name: &str) -> Result<Client> {
        Ok(Actor::connect(self.cluster.actor_kubeconfig(), Some(&format!("system:serviceaccount:{}:{name}", self.ns)))
            .await?
            .client)
    }

    /// kausality-stream's event for the write with this auditID.
    pub async fn event(&self, what: &str, audit_id: &str) -> Result<Event> {
        let c = self.cluster;
        c.live.by_audit_id(what, audit_id).await.map_err(|e| anyhow::anyhow!("{e:#} ({})", c.serve.intake()))
    }

    /// The first event of this namespace that satisfies `pred`.
    pub async fn wait_event(&self, what: &str, pred: impl Fn(&Event) -> bool) -> Result<Event> {
        let ns = self.ns.clone();
        self.cluster.live.wait_for(what, Duration::from_secs(60), move |e| e.object.namespace == ns && pred(e)).await
    }

    /// The first event of this namespace that kausality-stream wrote after `after` (so of a
    /// later resourceVersion) and satisfies `pred`.
    pub async fn wait_after(&self, what: &str, after: &Event, pred: impl Fn(&Event) -> bool) -> Result<Event> {
        let index = after.index;
        self.wait_event(what, move |e| e.index > index && pred(e)).await
    }

    /// Every event of this namespace so far.
    pub fn events(&self) -> Result<Vec<Event>> {
        self.cluster.live.in_namespace(&self.ns)
    }

    /// Asserts the class of `ev` and keeps it as a fact of the fixture.
    pub fn expect(&mut self, what: &str, ev: &Event, class: &str) -> Result<()> {
        if ev.class != class {
            bail!("{what}: expected class {class}, got {} — {} (reason: {})", ev.class, ev.describe(), ev.reason);
        }
        self.facts.push(Fact { what: what.to_string(), event: ev.clone() });
        Ok(())
    }

    /// Ends the scenario: the replay check of the audit log, a summary on stdout, the fixture.
    pub async fn finish(self) -> Result<()> {
        let c = self.cluster;
        let check =
            audit::check_replay(&c.audit, &c.live, &self.ns, &c.dir.join("scenarios"), crate::harness::REORDER_WINDOW)
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}\n({})", c.serve.intake()))?;
        println!(
            "    {}: {} audit events, {} classified (live == replay):",
            self.name,
            check.lines.len(),
            check.events.len()
        );
        for e in &check.events {
            println!("      {}", e.describe());
        }
        let dir = if c.record && recorded(&self.name) { audit::fixtures_dir() } else { c.dir.join("fixtures") };
        audit::write_fixture(&dir, &self.name, &self.about, REORDER_WINDOW, &check, &self.facts, None)
    }

    /// Waits until the namespace's audit log has been quiet for 3 s: the controllers are done
    /// with what the test did last, so what it does next causes everything that follows.
    pub async fn settle(&self) -> Result<()> {
        self.cluster.audit.quiet(&self.ns, Duration::from_secs(3)).await.map(|_| ())
    }

    /// Ends a scenario judged against its ground truth ([`truth`]): the replay check, every
    /// write of the namespace labelled from `plan`, the confusion table and the mismatches on
    /// stdout, the fixture with the truth's expectations (written even when kausality-stream
    /// disagrees); fails on any mismatch, listing them all.
    pub async fn finish_judged(self, plan: &Plan) -> Result<()> {
        let c = self.cluster;
        let scenarios = c.dir.join("scenarios");
        std::fs::create_dir_all(&scenarios)?;
        std::fs::write(scenarios.join(format!("{}.plan.json", self.ns)), serde_json::to_string_pretty(plan)?)?;
        let check =
            audit::check_replay(&c.audit, &c.live, &self.ns, &scenarios, crate::harness::REORDER_WINDOW).await?;
        let labels = truth::label(&c.audit.namespace(&self.ns)?, plan)?;
        let judged = Judgement::new(&labels, &check.events);
        println!(
            "    {}: {} audit events, {} writes labelled, {} classified (live == replay):",
            self.name,
            check.lines.len(),
            labels.len(),
            check.events.len()
        );
        for line in judged.report().lines() {
            println!("      {line}");
        }
        let dir = if c.record && recorded(&self.name) { audit::fixtures_dir() } else { c.dir.join("fixtures") };
        audit::write_fixture(
            &dir,
            &self.name,
            &self.about,
            REORDER_WINDOW,
            &check,
            &[],
            Some(Judgement::expectations(&labels)),
        )?;
        if !judged.mismatches.is_empty() {
            bail!(
                "{} of {} writes differ from the truth:\n  {}\n{}",
                judged.mismatches.len(),
                judged.writes,
                judged.mismatches.join("\n  "),
                judged.report()
            );
        }
        Ok(())
    }
}

/// Which scenarios are kept as fixtures: every one-API-server scenario, and of the two-server
/// ones those whose merged stream is most interleaved (the others repeat them).
fn recorded(scenario: &str) -> bool {
    !scenario.starts_with("dual-") || matches!(scenario, "dual-rollout" | "dual-deletes")
}
