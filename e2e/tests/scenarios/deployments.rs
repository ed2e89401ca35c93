//! Scenarios 1–4 on the built-in controllers: the deployment controller, the replicaset
//! controller, the garbage collector, and kwok playing the kubelets.

use std::collections::HashMap;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::check;
use kausality_e2e::audit::AuditLine;
use kausality_e2e::enriched::Event;
use kausality_e2e::harness::{Cluster, Scene};
use kausality_e2e::users::{ADMIN, DEPLOYMENT_CONTROLLER, GARBAGE_COLLECTOR, HPA, KWOK, REPLICASET_CONTROLLER};
use kausality_e2e::workloads::{current_replicaset, deployment, live_pods, wait_gone, wait_rolled_out};

const TICKET: &str = "kausality.io/trace-ticket";

fn label(e: &Event, hop: usize, key: &str) -> Option<String> {
    e.trace.get(hop).and_then(|h| h.labels.get(key)).and_then(Value::as_str).map(str::to_string)
}

fn is(e: &Event, verb: &str, kind: &str, user: &str) -> bool {
    e.verb == verb && e.object.kind == kind && e.user == user
}

fn parent_name(e: &Event) -> &str {
    e.parent.as_ref().map_or("", |p| p.name.as_str())
}

/// Creates Deployment `name` (2 replicas) as the admin and waits until it is rolled out.
async fn stable_deployment(s: &mut Scene<'_>, name: &str, annotations: &[(&str, &str)]) -> Result<Event> {
    let deploys: Api<Deployment> = Api::namespaced(s.admin.client.clone(), &s.ns);
    let (_, id) = s
        .admin
        .audited(deploys.create(&PostParams::default(), &deployment(name, 2, "example/app:1", annotations)))
        .await?;
    let created = s.event(&format!("the create of Deployment {name}"), &id).await?;
    s.expect(&format!("admin creates Deployment {name}"), &created, "unowned")?;
    wait_rolled_out(&deploys, name).await?;
    Ok(created)
}

/// What the model (DESIGN §1.1, §1.3) specifies for the deployment controller's spec-changing
/// ReplicaSet writes after `after_rv`, computed from the audit log alone: `expected` while the
/// Deployment's generation differs from its `status.observedGeneration` as of the write's
/// resourceVersion, or until a status has reported that generation with no rollout under way
/// (finished), `drift` after. Returns (auditID, class, description).
fn deployment_oracle(lines: &[AuditLine], deployment: &str, after_rv: u64) -> Vec<(String, &'static str, String)> {
    let mut ok: Vec<&AuditLine> =
        lines.iter().filter(|l| (200..300).contains(&l.code()) && l.resource_version().is_some()).collect();
    ok.sort_by_key(|l| l.resource_version());
    let (mut generation, mut observed, mut finished) = (0i64, None::<i64>, None::<i64>);
    let mut specs: HashMap<String, Value> = HashMap::new();
    let mut out = Vec::new();
    for l in ok {
        let ro = &l.value["responseObject"];
        let name = ro.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let resource = l.resource();
        if resource.starts_with("deployments") && ro["kind"] == "Deployment" && name == deployment {
            generation = ro.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            observed = ro.pointer("/status/observedGeneration").and_then(Value::as_i64);
            if let Some(o) = observed.filter(|_| !rollout_under_way(ro)) {
                finished = finished.max(Some(o));
            }
        }
        if resource == "replicasets" || resource == "replicasets/status" {
            let spec = ro["spec"].clone();
            let changed = specs.get(&name) != Some(&spec);
            let verb = l.str("/verb").unwrap_or("");
            let rv = l.resource_version().unwrap_or(0);
            if resource == "replicasets"
                && l.user() == DEPLOYMENT_CONTROLLER
                && changed
                && rv > after_rv
                && verb != "delete"
            {
                let class =
                    if observed == Some(generation) && finished >= Some(generation) { "drift" } else { "expected" };
                let replicas = spec["replicas"].as_i64().unwrap_or(-1);
                out.push((
                    l.audit_id().to_string(),
                    class,
                    format!("deployment-controller {verb}s ReplicaSet {name} (replicas {replicas}) at Deployment generation {generation}, observedGeneration {observed:?}"),
                ));
            }
            specs.insert(name, spec);
        }
    }
    out
}

/// DESIGN §1.3's signals of a Deployment still at work, read from its status as written.
fn rollout_under_way(deployment: &Value) -> bool {
    let reason = deployment
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing").and_then(|c| c["reason"].as_str()));
    let desired = deployment.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    let counter_off = ["updatedReplicas", "availableReplicas", "replicas"]
        .iter()
        .any(|f| deployment["status"][*f].as_i64().is_some_and(|n| n != desired));
    matches!(reason, Some("NewReplicaSetCreated" | "FoundNewReplicaSet" | "ReplicaSetUpdated")) || counter_off
}

/// Scenario 1: a Deployment's first rollout, then an image change.
pub async fn rollout(cluster: &Cluster) -> Result<()> {
    let mut s = Scene::new(cluster, "rollout", "Deployment create and first rollout (initializing), then an image change: the deployment controller's writes while the Deployment's observedGeneration lags, and while its status shows the rollout under way after it was observed, are expected").await?;
    let deploys: Api<Deployment> = Api::namespaced(s.admin.client.clone(), &s.ns);
    let created = stable_deployment(&mut s, "web", &[(TICKET, "T-1")]).await?;
    check("trace label of the Deployment create", &created, label(&created, 0, "ticket"), Some("T-1".into()))?;

    // The first rollout: the Deployment is not Available yet, nothing is judged.
    let rs1 =
        s.wait_event("the first ReplicaSet create", |e| is(e, "create", "ReplicaSet", DEPLOYMENT_CONTROLLER)).await?;
    s.expect("deployment-controller creates the first ReplicaSet", &rs1, "initializing")?;
    for i in 0..2 {
        let rs1_name = rs1.object.name.clone();
        let already: Vec<String> = s.facts.iter().map(|f| f.event.audit_id.clone()).collect();
        let pod = s
            .wait_event("a pod create of the first ReplicaSet", move |e| {
                is(e, "create", "Pod", REPLICASET_CONTROLLER)
                    && parent_name(e) == rs1_name
                    && !already.contains(&e.audit_id)
            })
            .await?;
        s.expect(
            &format!("replicaset-controller creates pod {} of the first ReplicaSet", i + 1),
            &pod,
            "initializing",
        )?;
    }

    // The image change.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "example/app:2"}]}}}});
    let (patched, id) =
        s.admin.audited(deploys.patch("web", &PatchParams::default(), &Patch::Strategic(patch))).await?;
    let change = s.event("the image change", &id).await?;
    s.expect("admin changes the image (generation 2)", &change, "unowned")?;
    check("generation after the image change", &change, change.object.generation, Some(2))?;

    let rs2 = s
        .wait_after("the new ReplicaSet create", &change, |e| is(e, "create", "ReplicaSet", DEPLOYMENT_CONTROLLER))
        .await?;
    s.expect("deployment-controller creates the new ReplicaSet", &rs2, "expected")?;
    check(
        "trace of the new ReplicaSet",
        &rs2,
        rs2.trace_users(),
        vec![ADMIN.to_string(), DEPLOYMENT_CONTROLLER.to_string()],
    )?;
    check(
        "first hop of the trace",
        &rs2,
        (rs2.trace[0].kind.as_str(), rs2.trace[0].generation),
        ("Deployment", Some(2)),
    )?;
    check("ticket label on the trace", &rs2, label(&rs2, 0, "ticket"), Some("T-1".into()))?;
    let scale = s
        .wait_after("the first ReplicaSet scale of the rollout", &change, |e| {
            is(e, "update", "ReplicaSet", DEPLOYMENT_CONTROLLER)
        })
        .await?;
    s.expect(
        "deployment-controller scales the old ReplicaSet down in the sync that created the new one",
        &scale,
        "expected",
    )?;
    check("the first scale is of the old ReplicaSet", &scale, scale.object.name.as_str(), rs1.object.name.as_str())?;
    check(
        "trace of the first scale",
        &scale,
        scale.trace_users(),
        vec![ADMIN.to_string(), DEPLOYMENT_CONTROLLER.to_string()],
    )?;
    wait_rolled_out(&deploys, "web").await?;

    // Every later step: what the model specifies given the real order of the controller's
    // status writes (it reports observedGeneration 2 early in the rollout, unless that write
    // lost a 409 race).
    let after_rv: u64 = patched.metadata.resource_version.as_deref().context("resourceVersion")?.parse()?;
    let steps = deployment_oracle(&cluster.audit.namespace(&s.ns)?, "web", after_rv);
    ensure!(
        steps.iter().any(|(id, ..)| *id == rs2.audit_id) && steps.iter().any(|(id, ..)| *id == scale.audit_id),
        "the oracle misses the writes seen above: {steps:?}"
    );
    ensure!(
        steps.len() >= 4,
        "a 2-replica rolling update takes at least 4 spec writes of the deployment controller, saw {steps:?}"
    );
    for (i, (id, class, desc)) in steps.iter().enumerate() {
        let ev = s.event(desc, id).await?;
        if s.facts.iter().any(|f| f.event.audit_id == *id) {
            check(desc, &ev, ev.class.as_str(), class)?; // already a named fact above
        } else {
            s.expect(&format!("rollout step {}: {desc}", i + 1), &ev, class)?;
        }
        if *class == "drift" {
            check("resolution of rollout drift", &ev, ev.resolution.as_deref(), Some("unresolved"))?;
        }
    }
    s.finish().await
}

/// Scenario 2: a person scales the current ReplicaSet by hand; the deployment controller
/// scales it back.
pub async fn manual_scale(cluster: &Cluster) -> Result<()> {
    let mut s = Scene::new(cluster, "manual-scale", "alice scales the current ReplicaSet through /scale (origin); the deployment controller scales it back while the Deployment is stable (drift, unresolved)").await?;
    stable_deployment(&mut s, "web", &[]).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(s.alice.client.clone(), &s.ns);
    let rs = current_replicaset(&rs_api, "web").await?;
    let rs_name = rs.metadata.name.clone().context("name")?;
    let (_, id) = s
        .alice
        .audited(rs_api.patch_scale(&rs_name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))))
        .await?;
    let by_hand = s.event("alice's scale", &id).await?;
    s.expect("alice scales the ReplicaSet to 3 through /scale", &by_hand, "origin")?;
    check("alice's actor verdict", &by_hand, by_hand.trace_users(), vec!["alice".to_string()])?;
    let name = rs_name.clone();
    let back = s
        .wait_after("the deployment controller's scale-back", &by_hand, move |e| {
            is(e, "update", "ReplicaSet", DEPLOYMENT_CONTROLLER) && e.object.name == name
        })
        .await?;
    s.expect("deployment-controller scales the ReplicaSet back to 2", &back, "drift")?;
    check("resolution of the scale-back", &back, back.resolution.as_deref(), Some("unresolved"))?;
    wait_rolled_out(&Api::namespaced(s.admin.client.clone(), &s.ns), "web").await?;
    s.finish().await
}

/// Scenario 3: an HPA scales the Deployment through /scale; the controller follows.
pub async fn hpa_scale(cluster: &Cluster) -> Result<()> {
    let mut s = Scene::new(cluster, "hpa-scale", "the horizontal-pod-autoscaler's service account scales the Deployment through /scale (unowned); the deployment controller's ReplicaSet scale follows it (expected, not drift)").await?;
    stable_deployment(&mut s, "web", &[]).await?;
    let deploys: Api<Deployment> = Api::namespaced(s.hpa.client.clone(), &s.ns);
    // The HPA's role allows get and update of */scale (no patch), as the real HPA does it.
    let mut scale = deploys.get_scale("web").await?;
    scale.spec.get_or_insert_with(Default::default).replicas = Some(3);
    let (_, id) = s.hpa.audited(deploys.replace_scale("web", &PostParams::default(), &scale)).await?;
    let hpa = s.event("the HPA's scale", &id).await?;
    s.expect("horizontal-pod-autoscaler scales the Deployment to 3 through /scale", &hpa, "unowned")?;
    let follow = s
        .wait_after("the deployment controller's ReplicaSet scale", &hpa, |e| {
            is(e, "update", "ReplicaSet", DEPLOYMENT_CONTROLLER)
        })
        .await?;
    s.expect("deployment-controller scales the ReplicaSet to 3", &follow, "expected")?;
    check(
        "trace of the follow-up",
        &follow,
        follow.trace_users(),
        vec![HPA.to_string(), DEPLOYMENT_CONTROLLER.to_string()],
    )?;
    let p = follow.parent.clone().context("parent")?;
    check(
        "parent generations of the follow-up (a scale write advances the known generation)",
        &follow,
        (p.generation, p.observed_generation),
        (Some(2), Some(1)),
    )?;
    wait_rolled_out(&Api::namespaced(s.admin.client.clone(), &s.ns), "web").await?;
    s.finish().await
}

/// The successful deletes of objects named `<prefix>-...` in the audit log, but those in `before`.
fn deletes_of(lines: &[AuditLine], prefix: &str, before: &[String]) -> Vec<AuditLine> {
    lines
        .iter()
        .filter(|l| {
            l.str("/verb") == Some("delete")
                && (200..300).contains(&l.code())
                && !before.iter().any(|b| b == l.audit_id())
        })
        .filter(|l| l.str("/objectRef/name").is_some_and(|n| n.starts_with(&format!("{prefix}-"))))
        .cloned()
        .collect()
}

/// The UID of the object a delete removed or marked: its answer's object, or the `Status`'s
/// details.
fn deleted_uid(l: &AuditLine) -> Option<String> {
    l.str("/responseObject/metadata/uid").or_else(|| l.str("/responseObject/details/uid")).map(str::to_string)
}

/// One line of a delete, for a failure's report.
fn describe_delete(l: &AuditLine) -> String {
    format!(
        "      {} {} by {} rv {:?} received {} done {}",
        l.audit_id(),
        l.str("/objectRef/name").unwrap_or_default(),
        l.user(),
        l.resource_version(),
        l.str("/requestReceivedTimestamp").unwrap_or_default(),
        l.stage_timestamp()
    )
}

/// Scenario 4: a person deletes a pod; then Deployments are deleted with foreground and with
/// background propagation.
pub async fn deletes(cluster: &Cluster) -> Result<()> {
    let mut s = Scene::new(cluster, "deletes", "alice deletes a pod (origin), the replicaset controller replaces it (drift); Deployments deleted with foreground and background propagation: the garbage collector's deletes are deleting").await?;
    stable_deployment(&mut s, "fg", &[]).await?;
    stable_deployment(&mut s, "bg", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(s.admin.client.clone(), &s.ns);
    let rs_api: Api<ReplicaSet> = Api::namespaced(s.admin.client.clone(), &s.ns);
    let deploys: Api<Deployment> = Api::namespaced(s.admin.client.clone(), &s.ns);

    let victim =
        live_pods(&pods, "fg").await?.into_iter().next().context("a pod of fg")?.metadata.name.context("name")?;
    let alice_pods: Api<Pod> = Api::namespaced(s.alice.client.clone(), &s.ns);
    let (_, id) = s.alice.audited(alice_pods.delete(&victim, &DeleteParams::default())).await?;
    let deleted = s.event("alice's pod delete", &id).await?;
    s.expect("alice deletes a pod", &deleted, "origin")?;
    let owner = parent_name(&deleted).to_string();
    let replacement = s
        .wait_after("the replacement pod", &deleted, move |e| {
            is(e, "create", "Pod", REPLICASET_CONTROLLER) && parent_name(e) == owner
        })
        .await?;
    s.expect("replicaset-controller creates a replacement pod", &replacement, "drift")?;
    check("resolution of the replacement", &replacement, replacement.resolution.as_deref(), Some("unresolved"))?;
    // The kubelet (kwok) ends the graceful deletion alice started: that completes a deletion
    // already judged (DESIGN §1.5), so it is not classified again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while alice_pods.get_opt(&victim).await?.is_some() {
        anyhow::ensure!(std::time::Instant::now() < deadline, "pod {victim} was never removed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    wait_rolled_out(&deploys, "fg").await?;
    s.settle().await?;
    let v = victim.clone();
    anyhow::ensure!(
        !s.events()?.iter().any(|e| is(e, "delete", "Pod", KWOK) && e.object.name == v),
        "kwok's final delete of {victim} was classified"
    );

    // A background delete of a Deployment is answered with a `Status`, not the object: its
    // audit event has no resourceVersion, and neither has the garbage collector's background
    // delete of the ReplicaSet. With two API servers they come through different servers and
    // batches; kausality-stream orders them by stageTimestamp against the writes around them
    // (docs/e2e.md, finding 4).
    for (name, params, how) in
        [("fg", DeleteParams::foreground(), "foreground"), ("bg", DeleteParams::background(), "background")]
    {
        // Stage timestamps of concurrent writes do not tell which came first: take the deletes
        // already in the log before this one out by auditID instead.
        let before: Vec<String> =
            deletes_of(&cluster.audit.namespace(&s.ns)?, name, &[]).iter().map(|l| l.audit_id().to_string()).collect();
        let (_, id) = s.admin.audited(deploys.delete(name, &params)).await?;
        let del = s.event(&format!("the {how} delete of {name}"), &id).await?;
        s.expect(&format!("admin deletes Deployment {name} ({how})"), &del, "unowned")?;
        wait_gone(&rs_api, &pods, name).await?;
        let lines = deletes_of(&cluster.audit.namespace(&s.ns)?, name, &before);
        let count = |res: &str, user: &str| lines.iter().filter(|l| l.resource() == res && l.user() == user).count();
        ensure!(count("replicasets", GARBAGE_COLLECTOR) >= 1, "{how}: no ReplicaSet delete by the garbage collector");
        ensure!(count("pods", GARBAGE_COLLECTOR) >= 2, "{how}: fewer than 2 pod deletes by the garbage collector");
        // Each object's first delete starts its deletion; a later one completes it (DESIGN
        // §1.5) and is not classified again: the kubelet's final delete, and the garbage
        // collector's second delete of an object it saw unmarked through a lagging watch (two
        // API servers).
        let mut first: Vec<&AuditLine> = Vec::new();
        let mut ordered: Vec<&AuditLine> = lines.iter().collect();
        ordered.sort_by_key(|l| (l.resource_version().unwrap_or(u64::MAX), l.stage_timestamp().to_string()));
        for l in ordered {
            let uid = deleted_uid(l);
            if uid.is_none() || !first.iter().any(|f| deleted_uid(f) == uid) {
                first.push(l);
            }
        }
        for l in first {
            if l.user() == KWOK {
                continue;
            }
            let ev = match s.event("a teardown delete", l.audit_id()).await {
                Ok(ev) => ev,
                Err(e) => {
                    // What the log and the service hold of that object, to tell a lost event
                    // from a delete taken in another order.
                    let uid = deleted_uid(l);
                    let name = l.str("/objectRef/name").unwrap_or_default().to_string();
                    let log: Vec<String> =
                        lines.iter().filter(|o| deleted_uid(o) == uid).map(describe_delete).collect();
                    let seen: Vec<String> = s
                        .events()?
                        .iter()
                        .filter(|e| e.object.name == name)
                        .map(|e| format!("      {} {}", e.audit_id, e.describe()))
                        .collect();
                    anyhow::bail!(
                        "{e:#}\n    its object's deletes in the log:\n{}\n    the service's events of {name}:\n{}",
                        log.join("\n"),
                        seen.join("\n")
                    );
                }
            };
            let what = format!(
                "{how} teardown: {} deletes {} {}",
                kausality_e2e::enriched::short_user(l.user()),
                ev.object.kind,
                ev.object.name
            );
            s.expect(&what, &ev, "deleting")?;
        }
    }
    s.finish().await
}
