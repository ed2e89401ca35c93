//! Appliers as parents (DESIGN §1.9): objects that a GitOps tool or an add-on manager applies
//! carry its markers instead of a controller ownerReference. Audit streams written from each
//! tool's documented behaviour (Flux' kustomize-controller applies with server-side apply
//! PATCHes as `fieldManager=kustomize-controller`, then reports the revision in the
//! Kustomization's status; Argo CD keeps its sync state in the Application; Sveltos marks what
//! it deploys with owner annotations); each test asserts the class of specific events.

mod common;

use common::{audit_id, class_of, feed, find};
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::Enriched;
use kausality_stream::process::Processor;
use kausality_stream::sim::*;
use serde_json::{json, Value};

const KUSTOMIZE: &str = "system:serviceaccount:flux-system:kustomize-controller";
const ARGOCD: &str = "system:serviceaccount:argocd:argocd-application-controller";
const SVELTOS: &str = "system:serviceaccount:projectsveltos:addon-controller";
const ALICE: &str = "alice@example.com";

fn run(events: &[String]) -> (Processor, Vec<Enriched>) {
    let mut p = common::processor(ModelConfig::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    (p, out)
}

/// A server-side apply: a PATCH with the applier's field manager (`force` as Flux does).
fn ssa(ev: String, manager: &str) -> String {
    let mut v: Value = serde_json::from_str(&ev).unwrap();
    let uri = v["requestURI"].as_str().unwrap().to_string();
    v["requestURI"] = json!(format!("{uri}?fieldManager={manager}&force=true"));
    v["verb"] = json!("patch");
    v.to_string()
}

/// A write of the whole object that changes its status (a kind without a status subresource,
/// as Argo CD's Application): the event names no subresource.
fn main_resource(ev: String) -> String {
    let mut v: Value = serde_json::from_str(&ev).unwrap();
    v["objectRef"].as_object_mut().unwrap().remove("subresource");
    let uri = v["requestURI"].as_str().unwrap().trim_end_matches("/status").to_string();
    v["requestURI"] = json!(uri);
    v.to_string()
}

fn flux_labels(mut obj: Value, kustomization: &str) -> Value {
    obj["metadata"]["labels"] = json!({
        "kustomize.toolkit.fluxcd.io/name": kustomization,
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    });
    obj
}

fn kustomization(name: &str) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": "flux-system"},
        "spec": {"interval": "10m", "path": "./apps", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}
    })
}

/// A Flux-style control plane: a Kustomization whose kustomize-controller applies the shop's
/// Deployment and ConfigMap.
struct Flux {
    api: ApiServer,
    events: Vec<String>,
    ks: ObjRef,
    deploy: ObjRef,
    config: ObjRef,
    /// The first apply's two writes.
    first: Vec<String>,
}

/// kustomize-controller starts a reconcile: it reports the revision it attempts (Flux writes
/// `lastAttemptedRevision` and the Reconciling condition before it applies).
fn attempt(api: &mut ApiServer, ks: &ObjRef, revision: &str) -> String {
    api.update_status(KUSTOMIZE, ks, |st| {
        st.insert("lastAttemptedRevision".into(), json!(revision));
        st.insert("conditions".into(), json!([{"type": "Reconciling", "status": "True", "reason": "Progressing"}, {"type": "Ready", "status": "Unknown"}]));
    })
}

/// kustomize-controller finishes: the revision applied, the generation (and a requested
/// reconcile) handled, ready.
fn applied(api: &mut ApiServer, ks: &ObjRef, revision: &str) -> String {
    let generation = api.get(ks).unwrap()["metadata"]["generation"].clone();
    let requested = api.get(ks).unwrap()["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"].clone();
    api.update_status(KUSTOMIZE, ks, |st| {
        st.insert("lastAttemptedRevision".into(), json!(revision));
        st.insert("lastAppliedRevision".into(), json!(revision));
        st.insert("observedGeneration".into(), generation);
        if !requested.is_null() {
            st.insert("lastHandledReconcileAt".into(), requested);
        }
        st.insert(
            "conditions".into(),
            json!([{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}]),
        );
    })
}

impl Flux {
    fn attempt(&mut self, revision: &str) {
        let e = attempt(&mut self.api, &self.ks, revision);
        self.events.push(e);
    }

    fn applied(&mut self, revision: &str) {
        let e = applied(&mut self.api, &self.ks, revision);
        self.events.push(e);
    }

    fn apply(&mut self, r: &ObjRef, f: impl FnOnce(&mut Value)) -> String {
        let e = ssa(self.api.patch(KUSTOMIZE, r, f), "kustomize-controller");
        self.events.push(e.clone());
        e
    }
}

fn flux() -> Flux {
    let mut api = ApiServer::new();
    let (ks, e) = api.create(ADMIN, kustomization("apps"));
    let mut events = vec![e, attempt(&mut api, &ks, "main@sha1:1111")];
    let (deploy, e) = api.create(KUSTOMIZE, flux_labels(deployment("shop", "web", 2, "web:1"), "apps"));
    let mut first = vec![ssa(e, "kustomize-controller")];
    let (config, e) =
        api.create(KUSTOMIZE, flux_labels(configmap("shop", "web-config", &[("mode", "normal")], None), "apps"));
    first.push(ssa(e, "kustomize-controller"));
    events.extend(first.iter().cloned());
    events.push(applied(&mut api, &ks, "main@sha1:1111"));
    Flux { api, events, ks, deploy, config, first }
}

#[test]
fn flux_puts_back_a_persons_scale_and_edit_at_the_same_revision() {
    let mut f = flux();
    // A person scales the Deployment and edits the ConfigMap.
    let scale = f.api.scale(ALICE, &f.deploy, 5);
    f.events.push(scale.clone());
    let edit = f.api.update(ALICE, &f.config, |o| o["data"]["mode"] = json!("debug"));
    f.events.push(edit.clone());
    // The next sync, at the same revision, puts both back.
    f.attempt("main@sha1:1111");
    let deploy = f.deploy.clone();
    let put_back_scale = f.apply(&deploy, |o| o["spec"]["replicas"] = json!(2));
    let config = f.config.clone();
    let put_back_edit = f.apply(&config, |o| o["data"]["mode"] = json!("normal"));
    f.applied("main@sha1:1111");
    // A new revision is applied.
    f.attempt("main@sha1:2222");
    let new_revision = f.apply(&deploy, |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    f.applied("main@sha1:2222");

    let (_, out) = run(&f.events);
    let seven = [&f.first[0], &f.first[1], &scale, &edit, &put_back_scale, &put_back_edit, &new_revision];
    let got: Vec<Class> = seven.iter().map(|e| class_of(&out, e)).collect();
    use Class::*;
    assert_eq!(
        got,
        [Expected, Expected, Origin, Origin, Drift, Drift, Expected],
        "{:#?}",
        seven.iter().map(|e| &find(&out, e).unwrap().reason).collect::<Vec<_>>()
    );
    for (drift, origin, path, before, after) in [
        (&put_back_scale, &scale, "spec.replicas", "2", "5"),
        (&put_back_edit, &edit, "data.mode", "\"normal\"", "\"debug\""),
    ] {
        let e = find(&out, drift).unwrap();
        let reverts = e.reverts.as_deref().unwrap();
        assert_eq!(reverts.len(), 1, "{reverts:?}");
        assert_eq!((&*reverts[0].user, &*reverts[0].audit_id, reverts[0].person), (ALICE, &*audit_id(origin), true));
        let fields = reverts[0].fields.as_ref().expect("the fields are known");
        assert_eq!(fields.len(), 1);
        assert_eq!(
            (
                &*fields[0].path,
                fields[0].before.as_ref().map(|v| v.get()),
                fields[0].after.as_ref().map(|v| v.get()),
                fields[0].restored
            ),
            (path, Some(before), Some(after), true)
        );
        let parent = e.parent.as_ref().unwrap();
        assert_eq!((&*parent.kind, &*parent.name), ("Kustomization", "apps"));
        let applier = parent.applier.as_deref().expect("an applier's parent");
        assert_eq!((&*applier.name, applier.revision.as_deref()), ("flux-kustomize", Some("main@sha1:1111")));
    }
    let e = find(&out, &new_revision).unwrap();
    assert_eq!(e.parent.as_ref().unwrap().applier.as_ref().unwrap().target_revision.as_deref(), Some("main@sha1:2222"));
    assert!(
        find(&out, &scale).unwrap().reason.contains("not the parent's applier"),
        "{}",
        find(&out, &scale).unwrap().reason
    );
}

/// Flux' multi-tenancy: a Kustomization with `spec.serviceAccountName` is applied by
/// kustomize-controller impersonating that account, so the audit events name the tenant's
/// account as the user. The request still names `fieldManager=kustomize-controller`: that is
/// the applier, whoever it acts as.
#[test]
fn an_applier_impersonating_a_tenant_is_known_by_its_field_manager() {
    let tenant = "system:serviceaccount:shop:shop-reconciler";
    let as_tenant = || Actor { user: KUSTOMIZE.to_string(), impersonate: Some(tenant.to_string()) };
    let mut api = ApiServer::new();
    let mut ks_obj = kustomization("shop");
    ks_obj["spec"]["serviceAccountName"] = json!("shop-reconciler");
    let (ks, e) = api.create(ADMIN, ks_obj);
    let mut events = vec![e, attempt(&mut api, &ks, "main@sha1:1111")];
    let (deploy, e) = api.create(as_tenant(), flux_labels(deployment("shop", "web", 2, "web:1"), "shop"));
    let first = ssa(e, "kustomize-controller");
    events.push(first.clone());
    events.push(applied(&mut api, &ks, "main@sha1:1111"));
    let scale = api.scale(ALICE, &deploy, 5);
    events.push(scale.clone());
    events.push(attempt(&mut api, &ks, "main@sha1:1111"));
    let put_back = ssa(api.patch(as_tenant(), &deploy, |o| o["spec"]["replicas"] = json!(2)), "kustomize-controller");
    events.push(put_back.clone());
    events.push(applied(&mut api, &ks, "main@sha1:1111"));
    // The tenant's account by hand (no applier's field manager): a person's write.
    let by_hand = api.patch(tenant, &deploy, |o| o["spec"]["replicas"] = json!(3));
    events.push(by_hand.clone());

    let (_, out) = run(&events);
    let got: Vec<Class> = [&first, &scale, &put_back, &by_hand].iter().map(|e| class_of(&out, e)).collect();
    assert_eq!(
        got,
        [Class::Expected, Class::Origin, Class::Drift, Class::Origin],
        "{:#?}",
        [&first, &scale, &put_back, &by_hand].iter().map(|e| &find(&out, e).unwrap().reason).collect::<Vec<_>>()
    );
    let e = find(&out, &put_back).unwrap();
    assert_eq!(&*e.user, tenant, "the effective user stays the tenant's account");
    let reverts = e.reverts.as_deref().expect("the put-back names what it reverts");
    assert_eq!((&*reverts[0].user, &*reverts[0].audit_id), (ALICE, &*audit_id(&scale)));
}

#[test]
fn without_markers_or_before_this_model_the_writes_are_the_top_of_a_tree() {
    // The same writes without Flux' labels: nothing to belong to.
    let mut api = ApiServer::new();
    let (d, create) = api.create(KUSTOMIZE, deployment("shop", "web", 2, "web:1"));
    let scale = api.scale(ALICE, &d, 5);
    let back = ssa(api.patch(KUSTOMIZE, &d, |o| o["spec"]["replicas"] = json!(2)), "kustomize-controller");
    let (_, out) = run(&[create.clone(), scale.clone(), back.clone()]);
    for e in [&create, &scale, &back] {
        assert_eq!(class_of(&out, e), Class::Unowned);
    }
}

#[test]
fn a_requested_reconcile_or_a_spec_change_is_an_intent() {
    let mut f = flux();
    let edit = f.api.update(ALICE, &f.config, |o| o["data"]["mode"] = json!("debug"));
    f.events.push(edit.clone());
    // `flux reconcile`: a person's request on the Kustomization.
    let request = f.api.update(ALICE, &f.ks, |o| {
        o["metadata"]["annotations"] = json!({"reconcile.fluxcd.io/requestedAt": "2026-11-26T10:00:00Z"})
    });
    f.events.push(request);
    f.attempt("main@sha1:1111");
    let config = f.config.clone();
    let asked = f.apply(&config, |o| o["data"]["mode"] = json!("normal"));
    f.applied("main@sha1:1111");
    let (_, out) = run(&f.events);
    assert_eq!(class_of(&out, &edit), Class::Origin);
    assert_eq!(class_of(&out, &asked), Class::Expected, "{}", find(&out, &asked).unwrap().reason);
}

#[test]
fn a_suspended_kustomization_leaves_a_persons_edit_standing() {
    let mut f = flux();
    let suspend = f.api.update(ALICE, &f.ks, |o| o["spec"]["suspend"] = json!(true));
    f.events.push(suspend.clone());
    let edit = f.api.update(ALICE, &f.config, |o| o["data"]["mode"] = json!("debug"));
    f.events.push(edit.clone());
    let scale = f.api.scale(ALICE, &f.deploy, 3);
    f.events.push(scale.clone());
    let (_, out) = run(&f.events);
    assert_eq!(class_of(&out, &suspend), Class::Unowned, "the Kustomization is the top of its tree");
    assert_eq!((class_of(&out, &edit), class_of(&out, &scale)), (Class::Origin, Class::Origin));
    assert!(
        out.iter().all(|e| e.class != Class::Drift && e.reverts.as_deref().is_none_or(<[_]>::is_empty)),
        "nothing puts it back"
    );
}

#[test]
fn a_prune_at_a_new_revision_is_expected_and_at_the_same_a_drift() {
    let mut f = flux();
    f.attempt("main@sha1:3333");
    let prune = f.api.delete(KUSTOMIZE, &f.config, &[]);
    f.events.push(prune.clone());
    f.applied("main@sha1:3333");
    // A deletion at the revision already applied has no intent behind it.
    let delete_again = f.api.delete(KUSTOMIZE, &f.deploy, &[]);
    f.events.push(delete_again.clone());
    let (_, out) = run(&f.events);
    assert_eq!(class_of(&out, &prune), Class::Expected, "{}", find(&out, &prune).unwrap().reason);
    assert_eq!(class_of(&out, &delete_again), Class::Drift);
}

#[test]
fn a_kustomization_never_seen_leaves_its_members_with_an_unknown_parent() {
    let mut api = ApiServer::new();
    let (_, create) = api.create(KUSTOMIZE, flux_labels(configmap("shop", "c", &[("a", "1")], None), "elsewhere"));
    let (_, out) = run(std::slice::from_ref(&create));
    assert_eq!(class_of(&out, &create), Class::UnknownParent);
}

#[test]
fn a_controller_owner_reference_wins_over_markers() {
    let mut f = flux();
    let deploy = f.deploy.clone();
    let (rs, e) = f.api.create(DEPLOYMENT_CONTROLLER, flux_labels(replicaset(&deploy, "5d4f", 2, "web:1"), "apps"));
    f.events.push(e.clone());
    let (_, out) = run(&f.events);
    let ev = find(&out, &e).unwrap();
    assert_eq!(&*ev.parent.as_ref().unwrap().kind, "Deployment", "{rs:?}");
    assert!(ev.parent.as_ref().unwrap().applier.is_none());
}

fn application(name: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"project": "default", "source": {"repoURL": "https://git.example.com/shop.git", "path": "deploy", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"},
                 "syncPolicy": {"automated": {"selfHeal": true, "prune": true}}}
    })
}

fn tracked(mut obj: Value, id: &str) -> Value {
    obj["metadata"]["annotations"] = json!({"argocd.argoproj.io/tracking-id": id});
    obj
}

/// Argo CD's status as its application controller writes it (through the main resource).
fn argo_status(
    api: &mut ApiServer,
    app: &ObjRef,
    sync_revision: &str,
    synced: Option<&str>,
    phase: &str,
    by: Value,
) -> String {
    main_resource(api.update_status(ARGOCD, app, |st| {
        st.insert("sync".into(), json!({"status": if Some(sync_revision) == synced { "Synced" } else { "OutOfSync" }, "revision": sync_revision}));
        let mut op = json!({"phase": phase, "operation": {"initiatedBy": by, "sync": {"revision": sync_revision}}});
        if let Some(r) = synced {
            op["syncResult"] = json!({"revision": r});
        }
        st.insert("operationState".into(), op);
    }))
}

#[test]
fn argo_cd_self_heal_at_the_same_revision_is_drift_and_a_persons_sync_an_intent() {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (app, e) = api.create(ADMIN, application("shop"));
    events.push(e);
    let auto = json!({"automated": true});
    events.push(argo_status(&mut api, &app, "aaaa", None, "Running", auto.clone()));
    let (d, first) =
        api.create(ARGOCD, tracked(deployment("shop", "web", 2, "web:1"), "shop:apps/Deployment:shop/web"));
    events.push(first.clone());
    events.push(argo_status(&mut api, &app, "aaaa", Some("aaaa"), "Succeeded", auto.clone()));
    let scale = api.scale(ALICE, &d, 4);
    events.push(scale.clone());
    // Self-heal: an automated sync at the revision already synced.
    events.push(argo_status(&mut api, &app, "aaaa", Some("aaaa"), "Running", auto.clone()));
    let heal = api.patch(ARGOCD, &d, |o| o["spec"]["replicas"] = json!(2));
    events.push(heal.clone());
    events.push(argo_status(&mut api, &app, "aaaa", Some("aaaa"), "Succeeded", auto.clone()));
    // A person's sync (`argocd app sync`): an operation initiated by a username.
    let sync = api.update(ALICE, &app, |o| {
        o["operation"] = json!({"initiatedBy": {"username": ALICE}, "sync": {"revision": "aaaa"}})
    });
    events.push(sync);
    let by_person = api.patch(ARGOCD, &d, |o| o["spec"]["paused"] = json!(false));
    events.push(by_person.clone());
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Expected, "{}", find(&out, &first).unwrap().reason);
    assert_eq!(class_of(&out, &scale), Class::Origin);
    assert_eq!(class_of(&out, &heal), Class::Drift);
    let reverts = find(&out, &heal).unwrap().reverts.clone().unwrap();
    assert_eq!((reverts.len(), &*reverts[0].audit_id), (1, &*audit_id(&scale)));
    assert_eq!(class_of(&out, &by_person), Class::Expected, "{}", find(&out, &by_person).unwrap().reason);
    let parent = find(&out, &heal).unwrap().parent.clone().unwrap();
    assert_eq!((&*parent.kind, &*parent.name, &*parent.applier.unwrap().name), ("Application", "shop", "argocd"));
}

#[test]
fn an_argo_tracking_id_that_names_another_object_is_no_membership() {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (app, e) = api.create(ADMIN, application("shop"));
    events.push(e);
    events.push(argo_status(&mut api, &app, "aaaa", Some("aaaa"), "Succeeded", json!({"automated": true})));
    // Copied from the Deployment by some tool: it names `web`, it sits on `web-copy`.
    let (_, copied) =
        api.create(ALICE, tracked(deployment("shop", "web-copy", 1, "web:1"), "shop:apps/Deployment:shop/web"));
    events.push(copied.clone());
    let (_, real) = api.create(ALICE, tracked(deployment("shop", "web", 1, "web:1"), "shop:apps/Deployment:shop/web"));
    events.push(real.clone());
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &copied), Class::Unowned);
    assert_eq!(class_of(&out, &real), Class::Origin, "a person's write to a member");
}

#[test]
fn an_instance_label_alone_makes_a_member_only_of_an_application_seen() {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let mut helm_chart = deployment("shop", "web", 1, "web:1");
    helm_chart["metadata"]["labels"] = json!({"app.kubernetes.io/instance": "shop"});
    let (_, before) = api.create(ALICE, helm_chart.clone());
    events.push(before.clone());
    let (_, e) = api.create(ADMIN, application("shop"));
    events.push(e);
    helm_chart["metadata"]["name"] = json!("web-2");
    let (_, after) = api.create(ALICE, helm_chart);
    events.push(after.clone());
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &before), Class::Unowned, "no Application of that name: a Helm release's label");
    assert_eq!(class_of(&out, &after), Class::Origin);
}

#[test]
fn sveltos_reapplies_at_the_same_generation_as_drift() {
    let mut api = ApiServer::new();
    let (cp, e) = api.create(
        ADMIN,
        json!({
            "apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile", "metadata": {"name": "addons"},
            "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}}, "helmCharts": []}
        }),
    );
    let out = sveltos_put_back(api, vec![e], &cp);
    assert_eq!(out.parent_kind, "ClusterProfile");
}

/// What a Sveltos parent (`parent`, created by `events`) applies, edited by a person and put
/// back by Sveltos: the apply `expected`, the edit `origin`, the put-back `drift` naming the
/// edit. The enriched put-back, and its parent's kind and UID.
fn sveltos_put_back(mut api: ApiServer, mut events: Vec<String>, parent: &ObjRef) -> PutBack {
    let mut cm = configmap("kube-system", "addon-config", &[("level", "info")], None);
    cm["metadata"]["annotations"] =
        json!({"projectsveltos.io/owner-kind": parent.kind, "projectsveltos.io/owner-name": parent.name});
    let (cm, first) = api.create(SVELTOS, cm);
    events.push(first.clone());
    events.push(api.update_status(SVELTOS, parent, |st| {
        st.insert("matchingClusterRefs".into(), json!([{"kind": "Cluster", "name": "prod-1"}]));
    }));
    let edit = api.update(ALICE, &cm, |o| o["data"]["level"] = json!("debug"));
    events.push(edit.clone());
    let back = api.update(SVELTOS, &cm, |o| o["data"]["level"] = json!("info"));
    events.push(back.clone());
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Expected, "{}", find(&out, &first).unwrap().reason);
    assert_eq!(class_of(&out, &edit), Class::Origin);
    assert_eq!(class_of(&out, &back), Class::Drift, "{}", find(&out, &back).unwrap().reason);
    let back = find(&out, &back).unwrap();
    assert_eq!(&*back.reverts.as_ref().unwrap()[0].audit_id, &*audit_id(&edit));
    let parent = back.parent.clone().unwrap();
    PutBack { parent_kind: parent.kind.to_string(), parent_uid: parent.uid.to_string() }
}

/// The parent a put-back was judged under.
struct PutBack {
    parent_kind: String,
    parent_uid: String,
}

#[test]
fn an_hpa_and_an_applier_fighting_over_replicas_are_counted() {
    let mut f = flux();
    let deploy = f.deploy.clone();
    let mut hpa = Vec::new();
    let mut backs = Vec::new();
    for _ in 0..3 {
        let e = f.api.scale(HPA, &deploy, 5);
        f.events.push(e.clone());
        hpa.push(e);
        f.attempt("main@sha1:1111");
        backs.push(f.apply(&deploy, |o| o["spec"]["replicas"] = json!(2)));
        f.applied("main@sha1:1111");
    }
    let (p, out) = run(&f.events);
    let fights = p.metrics().fight_count("Deployment", "spec.replicas");
    // The applier's first put-back undoes the HPA's first scale: a revert, no fight yet. From
    // then on each side puts back what the other put back.
    assert_eq!(class_of(&out, &backs[0]), Class::Drift);
    assert!(!find(&out, &backs[0]).unwrap().reverts.as_ref().unwrap()[0].fight);
    assert_eq!(class_of(&out, &hpa[1]), Class::Origin);
    let hpa_reverts =
        find(&out, &hpa[1]).unwrap().reverts.clone().expect("the HPA's scale puts back the applier's put-back");
    assert_eq!(
        (&*hpa_reverts[0].user, hpa_reverts[0].fight, &*hpa_reverts[0].audit_id),
        (KUSTOMIZE, true, &*audit_id(&backs[0]))
    );
    assert!(find(&out, &backs[1]).unwrap().reverts.as_ref().unwrap()[0].fight);
    assert_eq!(fights, 4, "HPA, applier, HPA, applier after the first revert");
    assert_eq!(p.metrics().hand_edit_count("flux-kustomize"), 0, "an HPA is no person");
}

#[test]
fn a_persons_edit_of_an_applied_object_is_counted() {
    let mut f = flux();
    let edit = f.api.update(ALICE, &f.config, |o| o["data"]["mode"] = json!("debug"));
    f.events.push(edit);
    let (p, _) = run(&f.events);
    assert_eq!(p.metrics().hand_edit_count("flux-kustomize"), 1);
}

#[test]
fn a_write_that_puts_back_anothers_on_a_top_level_object_names_it() {
    // Nothing owns or applies this ConfigMap: two people edit it, the second puts the first's
    // change back.
    let mut api = ApiServer::new();
    let (cm, create) = api.create(ADMIN, configmap("shop", "flags", &[("beta", "off")], None));
    let on = api.update(ALICE, &cm, |o| o["data"]["beta"] = json!("on"));
    let off = api.update("bob@example.com", &cm, |o| o["data"]["beta"] = json!("off"));
    let again = api.update(ALICE, &cm, |o| o["data"]["beta"] = json!("on"));
    let (_, out) = run(&[create, on.clone(), off.clone(), again.clone()]);
    assert_eq!(class_of(&out, &off), Class::Unowned);
    assert!(find(&out, &on).unwrap().reverts.is_none(), "puts nothing back");
    let r = find(&out, &off).unwrap().reverts.clone().expect("bob put alice's change back");
    assert_eq!((r.len(), &*r[0].user, &*r[0].audit_id, r[0].fight), (1, ALICE, &*audit_id(&on), false));
    let fields = r[0].fields.as_ref().unwrap();
    assert_eq!((&*fields[0].path, fields[0].restored), ("data.beta", true));
    let r = find(&out, &again).unwrap().reverts.clone().unwrap();
    assert_eq!((&*r[0].user, r[0].fight), ("bob@example.com", true), "alice puts back bob's put-back: a fight");
}

#[test]
fn a_secrets_values_are_never_kept_for_reverts() {
    let mut api = ApiServer::new();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"}, "data": {"password": "czNjcjN0"}});
    let (s, create) = api.create(ADMIN, secret);
    let edit = api.update(ALICE, &s, |o| o["data"]["password"] = json!("aHVudGVyMg=="));
    let back = api.update("bob@example.com", &s, |o| o["data"]["password"] = json!("czNjcjN0"));
    let (_, out) = run(&[create, edit, back.clone()]);
    let text = serde_json::to_string(&find(&out, &back).unwrap().reverts).unwrap();
    assert!(!text.contains("czNjcjN0") && !text.contains("aHVudGVyMg=="), "{text}");
}

#[test]
fn the_replay_summary_names_the_applier_and_revision_of_a_put_back() {
    let mut f = flux();
    let scale = f.api.scale(ALICE, &f.deploy, 5);
    f.events.push(scale.clone());
    f.attempt("main@sha1:1111");
    let deploy = f.deploy.clone();
    f.apply(&deploy, |o| o["spec"]["replicas"] = json!(2));
    f.applied("main@sha1:1111");
    let text = common::replay_summary("appliers", &f.events);
    let when = serde_json::from_str::<Value>(&scale).unwrap()["stageTimestamp"].as_str().unwrap().to_string();
    let line = format!(
        "{when} {ALICE} update Deployment shop/web spec.replicas 2→5 · undone by {KUSTOMIZE} (patch of Deployment shop/web) · applier flux-kustomize of Kustomization apps at revision main@sha1:1111"
    );
    assert!(text.contains("reverted changes: 1 (1 by persons)"), "{text}");
    assert!(text.contains(&line), "{text}");
}

#[test]
fn an_object_one_user_keeps_writing_keeps_one_write_of_it() {
    let mut api = ApiServer::new();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "node-1", "namespace": "kube-node-lease"},
                       "spec": {"holderIdentity": "node-1", "renewTime": "2026-11-26T10:00:00.000000Z"}});
    let (l, create) = api.create(KUBELET, lease);
    let mut events = vec![create];
    for i in 1..=6 {
        events.push(
            api.update(KUBELET, &l, |o| o["spec"]["renewTime"] = json!(format!("2026-11-26T10:00:{i:02}.000000Z"))),
        );
    }
    let (p, out) = run(&events);
    assert!(out.iter().all(|e| e.class == Class::Unowned && e.reverts.is_none()));
    let uid = kausality_stream::write::uid_key(&l.uid);
    let kept = p
        .engine()
        .read_state(&kausality_stream::state::ObjKey::new(p.engine().interner().intern("default"), uid), |s| {
            s.origin_writes().len()
        });
    assert_eq!(kept, Some(1));
}

#[test]
fn why_on_a_member_tells_who_changed_it_and_which_revision_put_it_back() {
    let mut f = flux();
    let scale = f.api.scale(ALICE, &f.deploy, 5);
    f.events.push(scale.clone());
    f.attempt("main@sha1:1111");
    let deploy = f.deploy.clone();
    let back = f.apply(&deploy, |o| o["spec"]["replicas"] = json!(2));
    f.applied("main@sha1:1111");
    let dir = std::env::temp_dir().join(format!("kausality-appliers-why-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("audit.jsonl"), f.events.join("\n")).unwrap();
    let bin = env!("CARGO_BIN_EXE_kausality-stream");
    let replay = std::process::Command::new(bin)
        .current_dir(&dir)
        .args(["replay", "--no-progress", "--quiet", "--history", "history.db", "audit.jsonl"])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let why = std::process::Command::new(bin)
        .current_dir(&dir)
        .args(["why", "deployment/web", "-n", "shop", "--history", "history.db"])
        .env_remove("KAUSALITY_QUERY_TOKEN")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(why.status.success(), "{}", String::from_utf8_lossy(&why.stderr));
    let text = String::from_utf8(why.stdout).unwrap();
    let has = |parts: &[&str]| text.lines().any(|l| parts.iter().all(|p| l.contains(p)));
    assert!(has(&["origin", ALICE]), "{text}");
    assert!(has(&["drift", KUSTOMIZE]), "{text}");
    assert!(has(&["parent", "Kustomization/apps", "applied by flux-kustomize at revision main@sha1:1111"]), "{text}");
    assert!(has(&["reverts", ALICE, &audit_id(&scale)]), "{text}");
    assert!(has(&["undone", KUSTOMIZE, &audit_id(&back)]), "{text}");
}

#[test]
fn a_helm_release_is_a_trace_label_not_a_parent() {
    let mut api = ApiServer::new();
    let mut d = deployment("shop", "web", 1, "web:1");
    d["metadata"]["annotations"] =
        json!({"meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": "shop"});
    let (_, create) = api.create(ALICE, d);
    let (_, out) = run(std::slice::from_ref(&create));
    let e = find(&out, &create).unwrap();
    assert_eq!(e.class, Class::Unowned, "a person's helm upgrade: the top of a tree");
    assert_eq!(e.trace[0].labels.get("helm-release"), Some(&json!("shop/shop")));
}

const HELM: &str = "system:serviceaccount:flux-system:helm-controller";

/// helm-controller (Flux' `v2` API) reports an attempt: the chart version and the values'
/// digest, before it installs or upgrades.
fn helm_attempt(api: &mut ApiServer, hr: &ObjRef, chart: &str, values: &str) -> String {
    api.update_status(HELM, hr, |st| {
        st.insert("lastAttemptedRevision".into(), json!(chart));
        st.insert("lastAttemptedConfigDigest".into(), json!(values));
        st.insert(
            "conditions".into(),
            json!([{"type": "Reconciling", "status": "True"}, {"type": "Ready", "status": "Unknown"}]),
        );
    })
}

/// helm-controller finishes a release: the newest first in `history`, the older superseded
/// (it writes no `lastAppliedRevision` in `v2`).
fn helm_released(api: &mut ApiServer, hr: &ObjRef, chart: &str, values: &str) -> String {
    let generation = api.get(hr).unwrap()["metadata"]["generation"].clone();
    let mut history: Vec<Value> = api.get(hr).unwrap()["status"]["history"].as_array().cloned().unwrap_or_default();
    for h in &mut history {
        h["status"] = json!("superseded");
    }
    let version = history.len() + 1;
    history.insert(
        0,
        json!({"version": version, "status": "deployed", "name": "web", "namespace": "shop", "chartName": "web",
               "chartVersion": chart, "configDigest": values, "digest": format!("sha256:{version}"),
               "firstDeployed": "2026-11-28T00:00:00Z", "lastDeployed": "2026-11-28T00:00:00Z"}),
    );
    api.update_status(HELM, hr, |st| {
        st.insert("observedGeneration".into(), generation.clone());
        st.insert("lastAttemptedGeneration".into(), generation);
        st.insert("history".into(), json!(history));
        st.insert("conditions".into(), json!([{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded"}]));
    })
}

/// A `v2` HelmRelease with drift correction on, installed by helm-controller: its first
/// attempt, the Deployment it made (`replicas` of `image`, with helm-controller's labels and
/// Helm's annotations) and the release in its status. The events (create, attempt, the
/// Deployment's create, the release), the HelmRelease and the Deployment.
fn helm_installed(chart: &str, values: &str, replicas: i64, image: &str) -> (ApiServer, Vec<String>, ObjRef, ObjRef) {
    let mut api = ApiServer::new();
    let (hr, e) = api.create(
        ADMIN,
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "web", "namespace": "flux-system"},
               "spec": {"interval": "10m", "releaseName": "web", "targetNamespace": "shop",
                        "chart": {"spec": {"chart": "web", "version": "1.x", "sourceRef": {"kind": "HelmRepository", "name": "charts"}}},
                        "driftDetection": {"mode": "enabled"}, "valuesFrom": [{"kind": "ConfigMap", "name": "web-values"}]}}),
    );
    let mut events = vec![e, helm_attempt(&mut api, &hr, chart, values)];
    let mut d = deployment("shop", "web", replicas, image);
    d["metadata"]["labels"] =
        json!({"helm.toolkit.fluxcd.io/name": "web", "helm.toolkit.fluxcd.io/namespace": "flux-system"});
    d["metadata"]["annotations"] =
        json!({"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "shop"});
    let (deploy, e) = api.create(HELM, d);
    events.push(e);
    events.push(helm_released(&mut api, &hr, chart, values));
    (api, events, hr, deploy)
}

/// helm-controller's drift correction (`spec.driftDetection.mode: enabled`) puts a person's
/// change back at the release it made; a new chart version and new values (from `valuesFrom`,
/// no new generation) are intents.
#[test]
fn helm_controller_v2_puts_back_a_persons_scale_at_the_release_it_made() {
    let (mut api, mut events, hr, deploy) = helm_installed("1.0.0", "sha256:aaa", 2, "web:1");
    let install = events[2].clone();
    // A person scales; the drift correction puts it back at the same release.
    let scale = api.scale(ALICE, &deploy, 5);
    events.push(scale.clone());
    let correction = ssa(api.patch(HELM, &deploy, |o| o["spec"]["replicas"] = json!(2)), "helm-controller");
    events.push(correction.clone());
    // A new chart version: an upgrade.
    events.push(helm_attempt(&mut api, &hr, "1.1.0", "sha256:aaa"));
    let upgrade =
        api.patch(HELM, &deploy, |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(upgrade.clone());
    events.push(helm_released(&mut api, &hr, "1.1.0", "sha256:aaa"));
    // New values from the ConfigMap `valuesFrom` names: the same chart, no new generation.
    events.push(helm_attempt(&mut api, &hr, "1.1.0", "sha256:bbb"));
    let new_values = api.patch(HELM, &deploy, |o| o["spec"]["replicas"] = json!(3));
    events.push(new_values.clone());
    events.push(helm_released(&mut api, &hr, "1.1.0", "sha256:bbb"));
    // A person's edit put back at that release.
    let edit =
        api.patch(ALICE, &deploy, |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:debug"));
    events.push(edit.clone());
    let correction2 = ssa(
        api.patch(HELM, &deploy, |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")),
        "helm-controller",
    );
    events.push(correction2.clone());

    let (_, out) = run(&events);
    let writes = [&install, &scale, &correction, &upgrade, &new_values, &edit, &correction2];
    let got: Vec<Class> = writes.iter().map(|e| class_of(&out, e)).collect();
    use Class::*;
    assert_eq!(
        got,
        [Expected, Origin, Drift, Expected, Expected, Origin, Drift],
        "{:#?}",
        writes.iter().map(|e| &find(&out, e).unwrap().reason).collect::<Vec<_>>()
    );
    for (drift, origin, release) in [(&correction, &scale, "1.0.0"), (&correction2, &edit, "1.1.0")] {
        let e = find(&out, drift).unwrap();
        let reverts = e.reverts.as_deref().unwrap();
        assert_eq!((reverts.len(), &*reverts[0].user, &*reverts[0].audit_id), (1, ALICE, &*audit_id(origin)));
        let parent = e.parent.as_ref().unwrap();
        assert_eq!((&*parent.kind, &*parent.name), ("HelmRelease", "web"));
        let applier = parent.applier.as_deref().expect("an applier's parent");
        assert_eq!((&*applier.name, applier.revision.as_deref()), ("flux-helm", Some(release)));
    }
}

#[test]
fn deleting_a_kustomization_takes_its_members_down_as_teardown() {
    let mut f = flux();
    let gone = f.api.delete(ADMIN, &f.ks, &["finalizers.fluxcd.io"]);
    f.events.push(gone.clone());
    let config = f.config.clone();
    let prune = f.api.delete(KUSTOMIZE, &config, &[]);
    f.events.push(prune.clone());
    let (_, out) = run(&f.events);
    assert_eq!(class_of(&out, &gone), Class::Unowned);
    assert_eq!(class_of(&out, &prune), Class::Deleting);
}

#[test]
fn after_a_restore_members_find_their_parent_and_its_intent() {
    let mut f = flux();
    let scale = f.api.scale(ALICE, &f.deploy, 5);
    f.events.push(scale);
    let mut first = common::processor(ModelConfig::default(), 0);
    let mut sink = Vec::new();
    feed(&mut first, &f.events, &mut sink);
    first.flush(0, &mut sink);
    let mut snapshot = Vec::new();
    first.snapshot(&mut snapshot).unwrap();
    let mut restored = common::processor(ModelConfig::default(), 0);
    restored.restore(&mut snapshot.as_slice()).unwrap();
    // The put-back alone: the parent, its intent and its applier come from the snapshot.
    let deploy = f.deploy.clone();
    let back = f.apply(&deploy, |o| o["spec"]["replicas"] = json!(2));
    let mut out = Vec::new();
    feed(&mut restored, std::slice::from_ref(&back), &mut out);
    restored.flush(0, &mut out);
    let e = find(&out, &back).unwrap();
    assert_eq!(e.class, Class::Drift, "{}", e.reason);
    assert_eq!(e.parent.as_ref().unwrap().applier.as_ref().unwrap().revision.as_deref(), Some("main@sha1:1111"));
}

/// Runs events of several clusters, each as its webhook path names it, in one instance.
fn run_clusters(events: &[(&str, String)]) -> Vec<Enriched> {
    let mut p = common::processor(ModelConfig::default(), 500_000);
    let mut out = Vec::new();
    for (i, (cluster, ev)) in events.iter().enumerate() {
        p.ingest_document(
            Some(cluster),
            ev.as_bytes(),
            kausality_stream::decode::Location::Line(i + 1),
            "test",
            0,
            &mut out,
        );
    }
    p.flush(0, &mut out);
    out
}

/// Two API servers' clocks kept together, as real clusters' are (the one behind catches up),
/// and two seconds on: steps of a day, each past the reorder window.
fn together(a: &mut ApiServer, b: &mut ApiServer) {
    a.advance_ms(2_000);
    b.advance_ms(2_000);
    let (ta, tb) = (a.now_us(), b.now_us());
    if ta > tb {
        b.advance_ms((ta - tb) / 1000 + 1);
    } else if tb > ta {
        a.advance_ms((tb - ta) / 1000 + 1);
    }
}

const ARGO_REMOTE: &str = "system:serviceaccount:kube-system:argocd-manager";
const SVELTOS_REMOTE: &str = "system:serviceaccount:projectsveltos:projectsveltos-sa";

#[test]
fn an_application_in_a_management_cluster_is_the_parent_of_its_members_in_the_cluster_it_names() {
    // Two API servers: the management cluster's (Argo CD, its Application) and prod-1's (the
    // members, written by Argo CD's `argocd-manager` there). UIDs kept apart as real ones are.
    let (mut mgmt, mut prod) = (ApiServer::new(), ApiServer::new());
    for i in 0..10 {
        mgmt.create(ADMIN, configmap("argocd", &format!("pad-{i}"), &[], None));
    }
    let mut events: Vec<(&str, String)> = Vec::new();
    let mut app_obj = application("shop");
    app_obj["spec"]["destination"] = json!({"name": "prod-1", "namespace": "shop"});
    let (app, e) = mgmt.create(ADMIN, app_obj);
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", e));
    let auto = json!({"automated": true});
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", argo_status(&mut mgmt, &app, "aaaa", None, "Running", auto.clone())));
    let (d, first) =
        prod.create(ARGO_REMOTE, tracked(deployment("shop", "web", 2, "web:1"), "shop:apps/Deployment:shop/web"));
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", first.clone()));
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", argo_status(&mut mgmt, &app, "aaaa", Some("aaaa"), "Succeeded", auto.clone())));
    let scale = prod.scale(ALICE, &d, 4);
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", scale.clone()));
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", argo_status(&mut mgmt, &app, "aaaa", Some("aaaa"), "Running", auto.clone())));
    let heal = prod.patch(ARGO_REMOTE, &d, |o| o["spec"]["replicas"] = json!(2));
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", heal.clone()));
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", argo_status(&mut mgmt, &app, "bbbb", Some("aaaa"), "Running", auto.clone())));
    let next =
        prod.patch(ARGO_REMOTE, &d, |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", next.clone()));
    // The same object in a cluster the Application does not name: no member of it.
    let mut staging = ApiServer::new();
    for i in 0..50 {
        staging.create(ADMIN, configmap("default", &format!("pad-{i}"), &[], None));
    }
    together(&mut staging, &mut prod);
    let (_, elsewhere) =
        staging.create(ARGO_REMOTE, tracked(deployment("shop", "web", 2, "web:1"), "shop:apps/Deployment:shop/web"));
    together(&mut mgmt, &mut prod);
    events.push(("staging", elsewhere.clone()));
    let out = run_clusters(&events);
    assert_eq!(class_of(&out, &first), Class::Expected, "{}", find(&out, &first).unwrap().reason);
    assert_eq!(class_of(&out, &scale), Class::Origin);
    assert_eq!(class_of(&out, &heal), Class::Drift, "{}", find(&out, &heal).unwrap().reason);
    let reverts = find(&out, &heal).unwrap().reverts.clone().unwrap();
    assert_eq!((reverts.len(), &*reverts[0].audit_id), (1, &*audit_id(&scale)));
    assert_eq!(class_of(&out, &next), Class::Expected, "a new revision: {}", find(&out, &next).unwrap().reason);
    let parent = find(&out, &heal).unwrap().parent.clone().unwrap();
    assert_eq!((&*parent.kind, &*parent.name, &*parent.applier.unwrap().name), ("Application", "shop", "argocd"));
    assert_eq!(
        class_of(&out, &elsewhere),
        Class::UnknownParent,
        "staging has no Application shop, and the one in mgmt names prod-1: {:?}",
        find(&out, &elsewhere)
    );
}

#[test]
fn a_cluster_profile_applies_to_any_cluster_that_lacks_it() {
    let (mut mgmt, mut prod) = (ApiServer::new(), ApiServer::new());
    for i in 0..10 {
        mgmt.create(ADMIN, configmap("default", &format!("pad-{i}"), &[], None));
    }
    let mut events: Vec<(&str, String)> = Vec::new();
    let (cp, e) = mgmt.create(
        ADMIN,
        json!({
            "apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile", "metadata": {"name": "addons"},
            "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}}, "helmCharts": []}
        }),
    );
    together(&mut mgmt, &mut prod);
    events.push(("mgmt", e));
    let mut cm = configmap("kube-system", "addon-config", &[("level", "info")], None);
    cm["metadata"]["annotations"] =
        json!({"projectsveltos.io/owner-kind": "ClusterProfile", "projectsveltos.io/owner-name": "addons"});
    let (cm, first) = prod.create(SVELTOS_REMOTE, cm);
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", first.clone()));
    together(&mut mgmt, &mut prod);
    events.push((
        "mgmt",
        mgmt.update_status(SVELTOS, &cp, |st| {
            st.insert("matchingClusterRefs".into(), json!([{"kind": "SveltosCluster", "name": "prod-1"}]));
        }),
    ));
    let edit = prod.update(ALICE, &cm, |o| o["data"]["level"] = json!("debug"));
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", edit.clone()));
    let back = prod.update(SVELTOS_REMOTE, &cm, |o| o["data"]["level"] = json!("info"));
    together(&mut mgmt, &mut prod);
    events.push(("prod-1", back.clone()));
    let out = run_clusters(&events);
    assert_eq!(class_of(&out, &first), Class::Expected, "{}", find(&out, &first).unwrap().reason);
    assert_eq!(class_of(&out, &edit), Class::Origin);
    assert_eq!(class_of(&out, &back), Class::Drift, "{}", find(&out, &back).unwrap().reason);
    assert_eq!(&*find(&out, &back).unwrap().reverts.as_ref().unwrap()[0].audit_id, &*audit_id(&edit));
}

#[test]
fn a_namespaced_sveltos_profile_is_found_by_name_and_kind() {
    let mut api = ApiServer::new();
    // A ClusterProfile of the same name: a member marked `owner-kind: Profile` is not its.
    let (_, cluster_profile) = api.create(
        ADMIN,
        json!({
            "apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile", "metadata": {"name": "addons"},
            "spec": {"clusterSelector": {"matchLabels": {"env": "dev"}}, "helmCharts": []}
        }),
    );
    let (profile, e) = api.create(
        ADMIN,
        json!({
            "apiVersion": "config.projectsveltos.io/v1beta1", "kind": "Profile",
            "metadata": {"name": "addons", "namespace": "team-a"},
            "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}}, "helmCharts": []}
        }),
    );
    // What it applies lands in another namespace than its own (kube-system), and names none.
    let out = sveltos_put_back(api, vec![cluster_profile, e], &profile);
    assert_eq!(
        (out.parent_kind.as_str(), out.parent_uid.as_str()),
        ("Profile", profile.uid.as_str()),
        "the Profile in team-a, not the ClusterProfile of the same name"
    );
}

/// The second person of the drawn days.
const BOB: &str = "bob@example.com";

/// The person a drawn step names: 0 alice, else bob.
fn person(p: u8) -> &'static str {
    if p == 0 {
        ALICE
    } else {
        BOB
    }
}

/// The truth of an applier's write, from what the test did before it.
enum ApplierTruth {
    /// A new revision or generation, or a person's request since the last one: an intent.
    Expected,
    /// Nothing asked since the last: a drift putting back these persons' writes.
    PutsBack(Vec<String>),
}

/// What a drawn day did: the persons' writes and the applier's writes with their truth (the
/// events themselves go to the day's own list, in the order they were done).
#[derive(Default)]
struct Drawn {
    persons: Vec<String>,
    applier: Vec<(String, ApplierTruth)>,
}

impl Drawn {
    /// A person's write `e` to a member; `touched`: the persons' writes to that member since
    /// its applier last wrote it.
    fn person(&mut self, events: &mut Vec<String>, touched: &mut Vec<String>, e: String) {
        touched.push(audit_id(&e).to_string());
        self.persons.push(e.clone());
        events.push(e);
    }

    /// The applier's write `e` to such a member: an intent's (`intent`), or a put-back of the
    /// persons' writes in `touched`, which it leaves empty.
    fn applier(&mut self, events: &mut Vec<String>, touched: &mut Vec<String>, e: String, intent: bool) {
        let by = std::mem::take(touched);
        let truth = if intent { ApplierTruth::Expected } else { ApplierTruth::PutsBack(by) };
        self.applier.push((e.clone(), truth));
        events.push(e);
    }

    /// Each write of the day checked against what the service says of `events`: a person's
    /// write an origin; an applier's expected, or a drift naming only persons' writes it puts
    /// back, and at least one.
    fn check(&self, events: &[String]) -> Result<(), proptest::test_runner::TestCaseError> {
        let (_, out) = run(events);
        for e in &self.persons {
            proptest::prop_assert_eq!(class_of(&out, e), Class::Origin, "{}", find(&out, e).unwrap().reason);
        }
        for (e, truth) in &self.applier {
            let got = find(&out, e).expect("the applier's write is classified");
            match truth {
                ApplierTruth::Expected => {
                    proptest::prop_assert_eq!(got.class, Class::Expected, "{}", got.reason);
                }
                ApplierTruth::PutsBack(by) => {
                    proptest::prop_assert_eq!(got.class, Class::Drift, "{}", got.reason);
                    let reverts = got.reverts.as_deref().unwrap_or_default();
                    proptest::prop_assert!(!reverts.is_empty(), "a put-back names what it reverts: {}", got.reason);
                    for r in reverts {
                        proptest::prop_assert!(r.person, "{:?}", r);
                        proptest::prop_assert!(by.iter().any(|a| **a == *r.audit_id), "{:?} not among {:?}", r, by);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A person's `/scale` of the Deployment `d` to 3 + `n` replicas (one more when it has that
/// many: a write that changes it).
fn scale_by_hand(api: &mut ApiServer, d: &ObjRef, p: u8, n: i64) -> String {
    let now = api.get(d).unwrap()["spec"]["replicas"].as_i64().unwrap();
    api.scale(person(p), d, if 3 + n == now { 4 + n } else { 3 + n })
}

/// A person's image for the Deployment `d`, one it does not run (`web:hand-<step>`).
fn image_by_hand(api: &mut ApiServer, d: &ObjRef, p: u8, step: usize) -> String {
    api.update(person(p), d, |o| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(format!("web:hand-{step}"))
    })
}

/// Whether the Deployment `d` differs from what a revision applies: `replicas` of `image`.
fn differs(api: &ApiServer, d: &ObjRef, replicas: i64, image: &str) -> bool {
    let spec = &api.get(d).unwrap()["spec"];
    spec["replicas"] != json!(replicas) || spec["template"]["spec"]["containers"][0]["image"] != json!(image)
}

/// What a revision applies to the Deployment: `replicas` of `image`.
fn revision_spec(o: &mut Value, replicas: i64, image: &str) {
    o["spec"]["replicas"] = json!(replicas);
    o["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
}

/// One step of a Flux day drawn at random: a person's change to a member, a new commit, a
/// person's `flux reconcile`, or a sync of the Kustomization at its current revision.
#[derive(Clone, Debug)]
enum FluxStep {
    /// A person (0: alice, 1: bob) scales the Deployment to 3 + n replicas (`/scale`).
    Scale(u8, i64),
    /// A person edits the ConfigMap's `mode` (to a value it does not hold).
    EditConfig(u8),
    /// A person sets the Deployment's image (to one it does not run).
    EditImage(u8),
    /// A new commit: the next revision changes the image and the mode.
    Commit,
    /// A person asks for a reconcile (`reconcile.fluxcd.io/requestedAt`).
    Request,
    /// A person suspends the Kustomization (`spec.suspend`), or resumes it: a spec change.
    Suspend(bool),
    /// kustomize-controller reconciles at the current revision: it applies each member whose
    /// applied fields differ from the revision's (Flux diffs with a server-side dry run first).
    Sync,
}

fn flux_step() -> impl proptest::strategy::Strategy<Value = FluxStep> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..2, 0i64..4).prop_map(|(p, n)| FluxStep::Scale(p, n)),
        (0u8..2).prop_map(FluxStep::EditConfig),
        (0u8..2).prop_map(FluxStep::EditImage),
        Just(FluxStep::Commit),
        Just(FluxStep::Request),
        proptest::bool::ANY.prop_map(FluxStep::Suspend),
        Just(FluxStep::Sync),
        Just(FluxStep::Sync),
    ]
}

/// Plays `steps` after the first revision: the events, and what they did.
fn flux_day(steps: &[FluxStep]) -> (Vec<String>, Drawn) {
    let mut f = flux();
    let (deploy, config, ks) = (f.deploy.clone(), f.config.clone(), f.ks.clone());
    let mode = |rev: u32| if rev == 1 { "normal".to_string() } else { format!("v{rev}") };
    // The first revision is flux()'s.
    let revision = |rev: u32| if rev == 1 { "main@sha1:1111".to_string() } else { format!("main@sha1:{rev:04}") };
    let (mut rev, mut applied_rev, mut requested) = (1u32, 1u32, false);
    // A spec change of the Kustomization not yet reconciled, and whether it is suspended.
    let (mut spec_changed, mut suspended) = (false, false);
    let (mut touched_deploy, mut touched_config) = (Vec::new(), Vec::new());
    let mut drawn = Drawn::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            FluxStep::Scale(p, n) => {
                let e = scale_by_hand(&mut f.api, &deploy, *p, *n);
                drawn.person(&mut f.events, &mut touched_deploy, e);
            }
            FluxStep::EditImage(p) => {
                let e = image_by_hand(&mut f.api, &deploy, *p, i);
                drawn.person(&mut f.events, &mut touched_deploy, e);
            }
            FluxStep::EditConfig(p) => {
                let e = f.api.update(person(*p), &config, |o| o["data"]["mode"] = json!(format!("hand-{i}")));
                drawn.person(&mut f.events, &mut touched_config, e);
            }
            FluxStep::Commit => rev += 1,
            FluxStep::Request => {
                let at = format!("2026-11-26T10:{:02}:00Z", i % 60);
                let e = f.api.update(ALICE, &ks, |o| {
                    o["metadata"]["annotations"] = json!({"reconcile.fluxcd.io/requestedAt": at})
                });
                f.events.push(e);
                requested = true;
            }
            FluxStep::Suspend(suspend) => {
                let generation = |api: &ApiServer| api.get(&ks).unwrap()["metadata"]["generation"].clone();
                let before = generation(&f.api);
                let e = f.api.update(ALICE, &ks, |o| o["spec"]["suspend"] = json!(*suspend));
                f.events.push(e);
                // A spec change is one the API server counts: `suspend: false` written where
                // the field was absent is one too.
                spec_changed |= generation(&f.api) != before;
                suspended = *suspend;
            }
            // Flux does not reconcile a suspended Kustomization: a person's edit stands.
            FluxStep::Sync if suspended => {}
            FluxStep::Sync => {
                f.attempt(&revision(rev));
                let (image, mode) = (format!("web:{rev}"), mode(rev));
                let intent = rev != applied_rev || requested || spec_changed;
                if differs(&f.api, &deploy, 2, &image) {
                    let e =
                        ssa(f.api.patch(KUSTOMIZE, &deploy, |o| revision_spec(o, 2, &image)), "kustomize-controller");
                    drawn.applier(&mut f.events, &mut touched_deploy, e, intent);
                }
                if f.api.get(&config).unwrap()["data"]["mode"] != json!(mode) {
                    let e = ssa(
                        f.api.patch(KUSTOMIZE, &config, |o| o["data"]["mode"] = json!(mode)),
                        "kustomize-controller",
                    );
                    drawn.applier(&mut f.events, &mut touched_config, e, intent);
                }
                f.applied(&revision(rev));
                (applied_rev, requested, spec_changed) = (rev, false, false);
            }
        }
    }
    (f.events, drawn)
}

/// One step of an Argo CD day drawn at random.
#[derive(Clone, Debug)]
enum ArgoStep {
    /// A person (0: alice, 1: bob) scales the tracked Deployment to 3 + n replicas.
    Scale(u8, i64),
    /// A person sets the Deployment's image (to one it does not run).
    EditImage(u8),
    /// A new commit: the next revision changes the image.
    Commit,
    /// A person's sync (`argocd app sync`): an operation initiated by a username.
    PersonSync,
    /// The application controller syncs (self-heal when nothing else asked): the Deployment is
    /// patched when it differs from the revision's.
    Sync,
}

fn argo_step() -> impl proptest::strategy::Strategy<Value = ArgoStep> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..2, 0i64..4).prop_map(|(p, n)| ArgoStep::Scale(p, n)),
        (0u8..2).prop_map(ArgoStep::EditImage),
        Just(ArgoStep::Commit),
        Just(ArgoStep::PersonSync),
        Just(ArgoStep::Sync),
        Just(ArgoStep::Sync),
    ]
}

/// Plays an Argo CD day after the first sync: the events, and what they did.
fn argo_day(steps: &[ArgoStep]) -> (Vec<String>, Drawn) {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (app, e) = api.create(ADMIN, application("shop"));
    events.push(e);
    let auto = json!({"automated": true});
    let revision = |rev: u32| format!("{rev:040x}");
    events.push(argo_status(&mut api, &app, &revision(1), None, "Running", auto.clone()));
    let (d, first) =
        api.create(ARGOCD, tracked(deployment("shop", "web", 2, "web:1"), "shop:apps/Deployment:shop/web"));
    events.push(first);
    events.push(argo_status(&mut api, &app, &revision(1), Some(&revision(1)), "Succeeded", auto.clone()));
    let (mut rev, mut synced, mut person_sync) = (1u32, 1u32, false);
    let mut touched = Vec::new();
    let mut drawn = Drawn::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            ArgoStep::Scale(p, n) => {
                let e = scale_by_hand(&mut api, &d, *p, *n);
                drawn.person(&mut events, &mut touched, e);
            }
            ArgoStep::EditImage(p) => {
                let e = image_by_hand(&mut api, &d, *p, i);
                drawn.person(&mut events, &mut touched, e);
            }
            ArgoStep::Commit => rev += 1,
            ArgoStep::PersonSync => {
                let r = revision(rev);
                let e = api.update(ALICE, &app, |o| {
                    o["operation"] = json!({"initiatedBy": {"username": ALICE}, "sync": {"revision": r}})
                });
                events.push(e);
                person_sync = true;
            }
            ArgoStep::Sync => {
                let by = if person_sync { json!({"username": ALICE}) } else { auto.clone() };
                let r = revision(rev);
                events.push(argo_status(&mut api, &app, &r, Some(&revision(synced)), "Running", by.clone()));
                let image = format!("web:{rev}");
                if differs(&api, &d, 2, &image) {
                    let e = api.patch(ARGOCD, &d, |o| revision_spec(o, 2, &image));
                    drawn.applier(&mut events, &mut touched, e, rev != synced || person_sync);
                }
                // The operation completes: Argo CD writes its state and clears a person's
                // `operation` in one patch (`setOperationState` in its application
                // controller): the status is set first, and the one event sent is the patch
                // that also clears the operation.
                let done = argo_status(&mut api, &app, &r, Some(&r), "Succeeded", by);
                let done = match person_sync {
                    true => api.patch(ARGOCD, &app, |o| {
                        o.as_object_mut().unwrap().remove("operation");
                    }),
                    false => done,
                };
                events.push(done);
                (synced, person_sync) = (rev, false);
            }
        }
    }
    (events, drawn)
}

/// One step of a Sveltos day drawn at random.
#[derive(Clone, Debug)]
enum SveltosStep {
    /// A person (0: alice, 1: bob) edits the add-on's ConfigMap (to a level it does not hold).
    Edit(u8),
    /// The platform team changes the ClusterProfile's spec: a new generation, a new level.
    ProfileChange,
    /// Sveltos' addon-controller deploys: it writes the ConfigMap when it differs from what the
    /// profile's generation asks, then the profile's status (which observes that generation),
    /// recording the generation deployed (`true`) or as it was (`false`: after a spec change,
    /// a status write that changes nothing, answered with the object's resourceVersion).
    Sync(bool),
}

fn sveltos_step() -> impl proptest::strategy::Strategy<Value = SveltosStep> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..2).prop_map(SveltosStep::Edit),
        Just(SveltosStep::ProfileChange),
        proptest::bool::ANY.prop_map(SveltosStep::Sync),
        proptest::bool::ANY.prop_map(SveltosStep::Sync),
    ]
}

/// Plays a Sveltos day after its first deployment: the events, and what they did (intent: a
/// generation of the profile not yet observed).
fn sveltos_day(steps: &[SveltosStep]) -> (Vec<String>, Drawn) {
    let mut api = ApiServer::new();
    let profile = |generation: i64| {
        json!({"clusterSelector": {"matchLabels": {"env": "prod"}}, "helmCharts": [],
               "level": format!("l{generation}")})
    };
    let (cp, e) = api.create(
        ADMIN,
        json!({"apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile",
               "metadata": {"name": "addons"}, "spec": profile(1)}),
    );
    let mut events = vec![e];
    let generation = |api: &ApiServer| api.get(&cp).unwrap()["metadata"]["generation"].as_i64().unwrap_or(1);
    let mut cm = configmap("kube-system", "addon-config", &[("level", "l1")], None);
    cm["metadata"]["annotations"] =
        json!({"projectsveltos.io/owner-kind": "ClusterProfile", "projectsveltos.io/owner-name": "addons"});
    let (cm, first) = api.create(SVELTOS, cm);
    events.push(first);
    // The status records, in a field of this test's own, the generation deployed when asked
    // to; otherwise it is written as it was (a write that stores nothing, answered with the
    // resourceVersion the profile already had).
    let status = |api: &mut ApiServer, record: bool| {
        let generation = api.get(&cp).unwrap()["metadata"]["generation"].clone();
        api.update_status(SVELTOS, &cp, |st| {
            st.insert("matchingClusterRefs".into(), json!([{"kind": "Cluster", "name": "prod-1"}]));
            if record {
                st.insert("deployedGeneration".into(), generation);
            }
        })
    };
    events.push(status(&mut api, true));
    let mut observed = generation(&api);
    let mut touched = Vec::new();
    let mut drawn = Drawn::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            SveltosStep::Edit(p) => {
                let e = api.update(person(*p), &cm, |o| o["data"]["level"] = json!(format!("hand-{i}")));
                drawn.person(&mut events, &mut touched, e);
            }
            SveltosStep::ProfileChange => {
                let next = generation(&api) + 1;
                events.push(api.update(ADMIN, &cp, |o| o["spec"] = profile(next)));
            }
            SveltosStep::Sync(record) => {
                let wanted = api.get(&cp).unwrap()["spec"]["level"].clone();
                if api.get(&cm).unwrap()["data"]["level"] != wanted {
                    let e = api.update(SVELTOS, &cm, |o| o["data"]["level"] = wanted);
                    drawn.applier(&mut events, &mut touched, e, generation(&api) != observed);
                }
                events.push(status(&mut api, *record));
                observed = generation(&api);
            }
        }
    }
    (events, drawn)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Days nobody scripted: any order of persons' changes, commits, requests, suspensions
    /// and syncs. An applier's write at a new revision, after a request or after a change of
    /// the Kustomization's spec is expected; at the revision it had applied, a drift.
    #[test]
    fn any_flux_day_reads_as_what_was_done(steps in proptest::collection::vec(flux_step(), 1..14)) {
        let (events, drawn) = flux_day(&steps);
        drawn.check(&events)?;
    }

    /// Days nobody scripted, under Argo CD: a sync at a new revision or one a person started
    /// is expected; a self-heal at the revision synced is a drift naming persons' writes.
    #[test]
    fn any_argo_cd_day_reads_as_what_was_done(steps in proptest::collection::vec(argo_step(), 1..14)) {
        let (events, drawn) = argo_day(&steps);
        drawn.check(&events)?;
    }

    /// Days nobody scripted, under Sveltos: a deployment for a generation of the profile not
    /// yet observed is expected; one at the generation observed is a drift naming persons'
    /// writes.
    #[test]
    fn any_sveltos_day_reads_as_what_was_done(steps in proptest::collection::vec(sveltos_step(), 1..14)) {
        let (events, drawn) = sveltos_day(&steps);
        drawn.check(&events)?;
    }

    /// Days nobody scripted, under Flux' helm-controller (`v2` API, drift correction on): a
    /// release of a new chart or new values is expected; a correction at the release made is a
    /// drift naming persons' writes.
    #[test]
    fn any_helm_controller_day_reads_as_what_was_done(steps in proptest::collection::vec(helm_step(), 1..14)) {
        let (events, drawn) = helm_day(&steps);
        drawn.check(&events)?;
    }
}

/// One step of a helm-controller day drawn at random.
#[derive(Clone, Debug)]
enum HelmStep {
    /// A person (0: alice, 1: bob) scales the Deployment to 3 + n replicas (`/scale`).
    Scale(u8, i64),
    /// A person sets the Deployment's image (to one it does not run).
    EditImage(u8),
    /// A new chart version in the repository (its image changes).
    NewChart,
    /// New values in the ConfigMap `valuesFrom` names (the replicas change; no new generation).
    NewValues,
    /// helm-controller reconciles: a release when the chart or the values are new (an attempt
    /// in the status, the Deployment written, the release in `history`); else, drift
    /// correction: the Deployment put back when it differs from the release, then the status
    /// written as it was.
    Reconcile,
}

fn helm_step() -> impl proptest::strategy::Strategy<Value = HelmStep> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..2, 0i64..3).prop_map(|(p, n)| HelmStep::Scale(p, n)),
        (0u8..2).prop_map(HelmStep::EditImage),
        Just(HelmStep::NewChart),
        Just(HelmStep::NewValues),
        Just(HelmStep::Reconcile),
        Just(HelmStep::Reconcile),
    ]
}

/// Plays a helm-controller day after its first release: the events, and what they did.
fn helm_day(steps: &[HelmStep]) -> (Vec<String>, Drawn) {
    // What the repository and the values hold now, and what the last release made.
    let (mut chart, mut values) = (0u32, 0u32);
    let chart_version = |c: u32| format!("1.{c}.0");
    let digest = |v: u32| format!("sha256:{v:04}");
    let wanted = |c: u32, v: u32| (2 + (v % 2) as i64, format!("web:{c}"));
    let (replicas, image) = wanted(0, 0);
    let (mut api, mut events, hr, deploy) = helm_installed(&chart_version(0), &digest(0), replicas, &image);
    let mut released = (0u32, 0u32);
    let mut touched = Vec::new();
    let mut drawn = Drawn::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            HelmStep::Scale(p, n) => {
                let e = scale_by_hand(&mut api, &deploy, *p, *n);
                drawn.person(&mut events, &mut touched, e);
            }
            HelmStep::EditImage(p) => {
                let e = image_by_hand(&mut api, &deploy, *p, i);
                drawn.person(&mut events, &mut touched, e);
            }
            HelmStep::NewChart => chart += 1,
            HelmStep::NewValues => values += 1,
            HelmStep::Reconcile => {
                let want = wanted(chart, values);
                let release = (chart, values) != released;
                if release {
                    events.push(helm_attempt(&mut api, &hr, &chart_version(chart), &digest(values)));
                }
                if differs(&api, &deploy, want.0, &want.1) {
                    let e = ssa(api.patch(HELM, &deploy, |o| revision_spec(o, want.0, &want.1)), "helm-controller");
                    drawn.applier(&mut events, &mut touched, e, release);
                }
                if release {
                    events.push(helm_released(&mut api, &hr, &chart_version(chart), &digest(values)));
                    released = (chart, values);
                } else {
                    // Its status after a correction, as it was: a write that stores nothing.
                    events.push(api.update_status(HELM, &hr, |_| {}));
                }
            }
        }
    }
    (events, drawn)
}
