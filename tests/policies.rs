//! Platform policies (DESIGN §1.7) on writes as kube-apiserver writes them: which policy
//! resolves which drift, each criterion, and the precedence of the parent's annotations.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{class_of, feed, find};
use kausality_stream::classify::policy::Resolution;
use kausality_stream::classify::{Class, Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::Enriched;
use kausality_stream::metrics::Metrics;
use kausality_stream::pipeline::{load_policies, model_policies};
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::sim::*;
use serde_json::{json, Value};

/// Numbers the directories [`model`] writes in: tests run in parallel, each in its own.
static DIRS: AtomicUsize = AtomicUsize::new(0);

/// Policies as a pipeline file writes them.
fn model(toml: &str) -> ModelConfig {
    let dir = std::env::temp_dir().join(format!(
        "kausality-policies-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policies.toml");
    std::fs::write(&file, toml).unwrap();
    let policies = load_policies(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut model = ModelConfig::default();
    model_policies(&policies, &mut model).unwrap();
    model
}

fn run(model: ModelConfig, events: &[String]) -> Vec<Enriched> {
    let engine = Arc::new(Engine::new(model, EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: 500_000, clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    out
}

/// (resolution, policy) of the drift made by `event`.
fn resolved(out: &[Enriched], event: &str) -> (Resolution, Option<String>) {
    let e = find(out, event).expect("classified");
    assert_eq!(e.class, Class::Drift, "{}", e.reason);
    (e.resolution.expect("a drift is resolved one way or another"), e.policy.as_deref().map(str::to_string))
}

/// A stable Deployment → ReplicaSet → Pods tree in namespace `ns`, the Deployment labelled
/// `team`, the parents annotated with `annotations`; then alice deletes a pod and the
/// ReplicaSet controller replaces it, alice scales the ReplicaSet and the Deployment controller
/// scales it back, and the ReplicaSet controller deletes a pod on its own.
struct Day {
    events: Vec<String>,
    replacement: String,
    scale_back: String,
    own_delete: String,
}

fn day(ns: &str, team: &str, rs_annotations: Value) -> Day {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let mut d = deployment(ns, "web", 2, "web:1");
    d["metadata"]["labels"]["team"] = json!(team);
    let (deploy, e) = api.create(ADMIN, d);
    events.push(e);
    let mut rs = replicaset(&deploy, "5d4f", 2, "web:1");
    rs["metadata"]["labels"]["team"] = json!(team);
    rs["metadata"]["annotations"] = rs_annotations;
    let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, rs);
    events.push(e);
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "True")]));
    let mut pods = Vec::new();
    for s in ["a", "b", "c"] {
        let (p, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1"));
        pods.push(p);
        events.push(e);
    }
    events.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    events.push(api.delete("alice", &pods[0], &[]));
    let (_, replacement) = api.create(REPLICASET_CONTROLLER, pod(&rs, "d", "web:1"));
    events.push(replacement.clone());
    events.push(api.update("alice", &rs, |r| r["spec"]["replicas"] = json!(5)));
    let scale_back = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| r["spec"]["replicas"] = json!(2));
    events.push(scale_back.clone());
    events.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    let own_delete = api.delete(REPLICASET_CONTROLLER, &pods[1], &[]);
    events.push(own_delete.clone());
    Day { events, replacement, scale_back, own_delete }
}

const SELF_HEALING: &str = r#"
[[policy]]
name = "native-self-healing"
action = "approve"
parent_kinds = ["ReplicaSet.apps", "StatefulSet.apps", "DaemonSet.apps", "Job.batch"]
child_kinds = ["Pod"]
controllers = ["system:serviceaccount:kube-system:replicaset-controller"]
"#;

#[test]
fn self_healing_is_approved_by_name_and_a_scale_back_stays_unresolved() {
    let d = day("shop", "web", json!({}));
    let out = run(model(SELF_HEALING), &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Approved, Some("native-self-healing".into())));
    assert_eq!(resolved(&out, &d.own_delete), (Resolution::Approved, Some("native-self-healing".into())));
    assert_eq!(resolved(&out, &d.scale_back), (Resolution::Unresolved, None), "a Deployment's ReplicaSet: no policy");
    let plain = run(ModelConfig::default(), &d.events);
    assert_eq!(resolved(&plain, &d.replacement), (Resolution::Unresolved, None), "without policies");
}

#[test]
fn the_shipped_self_healing_pipeline_approves_the_replacement() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/self-healing.toml");
    let mut m = ModelConfig::default();
    model_policies(&load_policies(std::path::Path::new(file)).unwrap(), &mut m).unwrap();
    let d = day("shop", "web", json!({}));
    let out = run(m, &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Approved, Some("native-self-healing".into())));
    assert_eq!(resolved(&out, &d.scale_back), (Resolution::Unresolved, None));
}

#[test]
fn each_criterion_selects_its_drift() {
    let d = day("shop", "payments", json!({}));
    let cases = [
        ("parent_kinds = [\"Deployment.apps\"]", [false, true, false]),
        ("child_kinds = [\"ReplicaSet.apps\"]", [false, true, false]),
        ("controllers = [\"system:serviceaccount:kube-system:deployment-controller\"]", [false, true, false]),
        ("namespaces = [\"shop\"]", [true, true, true]),
        ("namespaces = [\"other\"]", [false, false, false]),
        ("parent_labels = \"team=payments\"", [true, true, true]),
        ("parent_labels = \"team=payments,!canary\"", [true, true, true]),
        ("parent_labels = \"team=web\"", [false, false, false]),
        ("reverts_person = true", [true, true, false]),
        ("reverts_person = false", [false, false, true]),
    ];
    for (criterion, want) in cases {
        let out = run(model(&format!("[[policy]]\nname = \"p\"\naction = \"reject\"\n{criterion}\n")), &d.events);
        let got: Vec<bool> = [&d.replacement, &d.scale_back, &d.own_delete]
            .iter()
            .map(|e| resolved(&out, e).0 == Resolution::Rejected)
            .collect();
        assert_eq!(got, want, "{criterion}: replacement, scale-back, own delete");
    }
}

#[test]
fn parent_labels_are_read_from_the_parent_s_latest_write() {
    let d = day("shop", "payments", json!({}));
    let mut events = d.events.clone();
    // A later write of the ReplicaSet relabels it: the policy follows the labels.
    let relabel = {
        let v: Value = serde_json::from_str(&d.events[d.events.len() - 2]).unwrap();
        let mut v = v;
        v["auditID"] = json!("relabel-1");
        v["responseObject"]["metadata"]["labels"]["team"] = json!("web");
        let rv: u64 = v["responseObject"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        v["responseObject"]["metadata"]["resourceVersion"] = json!((rv + 100).to_string());
        v.to_string()
    };
    let own_delete = events.pop().unwrap();
    events.push(relabel);
    let mut later: Value = serde_json::from_str(&own_delete).unwrap();
    later["responseObject"]["metadata"]["resourceVersion"] = json!("999999");
    events.push(later.to_string());
    let out = run(
        model("[[policy]]\nname = \"payments\"\naction = \"approve\"\nparent_labels = \"team=payments\"\n"),
        &events,
    );
    assert_eq!(resolved(&out, &d.replacement).1.as_deref(), Some("payments"));
    assert_eq!(resolved(&out, &own_delete), (Resolution::Unresolved, None), "the ReplicaSet is team=web now");
}

#[test]
fn a_rejection_beats_an_approval_and_the_first_of_an_action_names_it() {
    let d = day("shop", "web", json!({}));
    let policies = format!(
        "{SELF_HEALING}\n[[policy]]\nname = \"also-pods\"\naction = \"approve\"\nchild_kinds = [\"Pod\"]\n[[policy]]\nname = \"no-person-reverts\"\naction = \"reject\"\nreverts_person = true\n"
    );
    let out = run(model(&policies), &d.events);
    assert_eq!(
        resolved(&out, &d.replacement),
        (Resolution::Rejected, Some("no-person-reverts".into())),
        "a later rejection wins"
    );
    assert_eq!(
        resolved(&out, &d.own_delete),
        (Resolution::Approved, Some("native-self-healing".into())),
        "the first approval names it"
    );
}

#[test]
fn the_parent_s_annotations_win_over_platform_policies() {
    let reject_all = "[[policy]]\nname = \"reject-all\"\naction = \"reject\"\n";
    // An approval on the parent beats a platform rejection; it names the annotation.
    let approvals = json!({"kausality.io/approvals": "[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"*\",\"mode\":\"always\"}]"});
    let d = day("shop", "web", approvals);
    let out = run(model(reject_all), &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Approved, Some("kausality.io/approvals".into())));
    // A rejection on the parent beats a platform approval.
    let rejections = json!({"kausality.io/rejections": "[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"*\"}]"});
    let d = day("shop", "web", rejections);
    let out = run(model(SELF_HEALING), &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Rejected, Some("kausality.io/rejections".into())));
    // A frozen parent: no platform approval, the freeze is reported.
    let d = day("shop", "web", json!({"kausality.io/freeze": "{\"user\":\"ops\",\"message\":\"incident\"}"}));
    let out = run(model(SELF_HEALING), &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Unresolved, None));
    assert!(find(&out, &d.replacement).unwrap().freeze_violation);
    // Annotations that leave the drift unresolved (a trace label, an approval of another
    // child) leave it to the platform.
    let d = day(
        "shop",
        "web",
        json!({"kausality.io/trace-team": "web", "kausality.io/approvals": "[{\"kind\":\"ConfigMap\",\"mode\":\"always\"}]"}),
    );
    let out = run(model(SELF_HEALING), &d.events);
    assert_eq!(resolved(&out, &d.replacement), (Resolution::Approved, Some("native-self-healing".into())));
}

#[test]
fn only_drift_is_resolved_by_a_policy() {
    let d = day("shop", "web", json!({}));
    let out = run(model("[[policy]]\nname = \"all\"\naction = \"approve\"\n"), &d.events);
    for e in &out {
        assert_eq!(e.policy.is_some(), e.class == Class::Drift, "{} {}", e.class.as_str(), e.reason);
    }
    let alice_scale =
        out.iter().find(|e| &*e.user == "alice" && e.verb == kausality_stream::filter::Verb::Update).unwrap();
    assert_eq!((alice_scale.class, alice_scale.resolution), (Class::Origin, None));
    assert_eq!(class_of(&out, &d.scale_back), Class::Drift);
}

#[test]
fn the_replay_summary_counts_drift_by_the_policy_that_resolved_it() {
    let d = day("shop", "web", json!({}));
    let dir = std::env::temp_dir().join(format!("kausality-policies-summary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("audit.jsonl");
    std::fs::write(&input, d.events.join("\n")).unwrap();
    let opts = kausality_stream::replay::ReplayOptions {
        inputs: vec![input],
        progress: false,
        model: model(SELF_HEALING),
        ..Default::default()
    };
    let outcome = kausality_stream::replay::run(&opts, &mut std::io::sink()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let text = outcome.render();
    assert!(text.contains("  drift resolved by: native-self-healing (approved) 2\n"), "{text}");
}
