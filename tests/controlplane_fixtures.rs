//! Ground truth recorded from a real control plane (docs/e2e.md): each fixture in
//! `tests/fixtures/controlplane/` is the audit stream of one e2e scenario's namespace, as the
//! API server(s) wrote it (only the request bodies cut out), with the class each write must get
//! (`<scenario>.expected.json`): for most scenarios the class kausality-stream gave it live and
//! the scenario asserted; for `cluster-day` the ground truth of what the test did (its
//! `expectations` say so), with the origin writes each drift must name in `reverts`. Replaying
//! a fixture must give those classes, reverts and key facts (resolution, freeze violation,
//! trace, who a drift reverts), and leave out the writes listed as `ignored` (with the reason
//! they are counted under). No control plane needed; `KAUSALITY_E2E_RECORD=1 scripts/e2e.sh`
//! records them again.

mod common;

use common::{replay_by_key, replay_fixture};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/controlplane");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
        .collect();
    v.sort();
    v
}

/// The auditIDs an event's `reverts` names.
fn reverted(e: &Value) -> Vec<&str> {
    e["reverts"].as_array().into_iter().flatten().filter_map(|r| r["auditID"].as_str()).collect()
}

/// The differences between a fixture's expectations and its replay, in words.
fn check(expected_path: &Path) -> Vec<String> {
    let (expected, events) = replay_fixture(expected_path);
    let name = expected["scenario"].as_str().expect("scenario");
    let mut problems = Vec::new();
    let want = expected["classes"].as_object().expect("classes");
    // Why the truth says what it says (`cluster-day`), for the messages.
    let why = |id: &str| expected["why"][id].as_str().map(|w| format!(" (truth: {w})")).unwrap_or_default();
    let write = |e: &Value| format!("{} {}/{} by {}", e["verb"], e["object"]["kind"], e["object"]["name"], e["user"]);
    for (id, class) in want {
        match events.get(id) {
            None => problems.push(format!("{name}: {id} ({class}) not classified{}", why(id))),
            Some(e) if e["class"] != *class => {
                problems.push(format!("{name}: {id} {}: expected {class}, got {}{}", write(e), e["class"], why(id)))
            }
            Some(_) => {}
        }
    }
    // Writes the model does not classify (e.g. a delete that completes a deletion judged
    // before it, DESIGN §1.5), with the reason they are counted under.
    for (id, reason) in expected.get("ignored").and_then(Value::as_object).into_iter().flatten() {
        if let Some(e) = events.get(id) {
            problems.push(format!("{name}: {id} ({reason}) should not be classified, got {}", e["class"]));
        }
    }
    for (id, e) in &events {
        if !want.contains_key(id) {
            problems.push(format!("{name}: {id} {} classified {} but not expected{}", write(e), e["class"], why(id)));
        }
    }
    // A drift that undoes a person's write names it: at least one of the listed auditIDs (any
    // one of a drain's evictions of a ReplicaSet's pods is undone by any of its replacements);
    // an empty list: a drift whose cause is outside the stream names nobody.
    for (id, list) in expected["reverts"].as_object().into_iter().flatten() {
        let Some(e) = events.get(id).filter(|e| e["class"] == "drift") else { continue };
        let named = reverted(e);
        let listed: Vec<&str> = list.as_array().expect("a list of auditIDs").iter().filter_map(Value::as_str).collect();
        if listed.is_empty() && !named.is_empty() {
            problems.push(format!("{name}: {id}: a drift that undoes nobody names {named:?} in reverts{}", why(id)));
        } else if !listed.is_empty() && !listed.iter().any(|a| named.contains(a)) {
            problems
                .push(format!("{name}: {id}: a drift that undoes {listed:?} names {named:?} in reverts{}", why(id)));
        }
    }
    for fact in expected["facts"].as_array().expect("facts") {
        let what = fact["what"].as_str().unwrap_or("?");
        let Some(e) = events.get(fact["auditID"].as_str().expect("auditID")) else { continue };
        let users: Vec<Value> = e["trace"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| h.get("user").cloned().unwrap_or(Value::String("?".into())))
            .collect();
        let mut compare = |field: &str, got: Value| {
            if let Some(want) = fact.get(field) {
                if *want != got {
                    problems.push(format!("{name}: {what}: {field} expected {want}, got {got}"));
                }
            }
        };
        compare("class", e["class"].clone());
        compare("resolution", e.get("resolution").cloned().unwrap_or(Value::Null));
        compare("freezeViolation", e["freezeViolation"].clone());
        compare("observedGenerationSource", e["parent"]["observedGenerationSource"].clone());
        compare("traceUsers", Value::Array(users));
        compare("traceLabels", e["trace"][0]["labels"].clone());
        // Who the drift reverts (DESIGN §1.8): absent on other classes.
        let reverts =
            e.get("reverts").and_then(Value::as_array).map(|rs| rs.iter().map(|r| r["user"].clone()).collect());
        compare("revertsUsers", reverts.map_or(Value::Null, Value::Array));
    }
    problems
}

/// Whether a fixture's expectations are the ground truth of what its test did (`cluster-day`)
/// rather than the classes kausality-stream gave live.
fn is_truth(expected_path: &Path) -> bool {
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(expected_path).expect("read")).expect("JSON");
    expected.get("expectations").is_some()
}

#[test]
fn recorded_control_plane_streams_replay_to_the_recorded_classes() {
    let all: Vec<PathBuf> = fixtures().into_iter().filter(|p| !is_truth(p)).collect();
    assert!(all.len() >= 8, "expected the recorded scenarios in tests/fixtures/controlplane, found {}", all.len());
    let problems: Vec<String> = all.iter().flat_map(|p| check(p)).collect();
    assert!(problems.is_empty(), "{} difference(s):\n{}", problems.len(), problems.join("\n"));
}

/// The cluster day (docs/e2e.md): every write of the recorded stream has the class the ground
/// truth of what the test did gives it, and every drift that undoes a person's write names it.
#[test]
fn the_cluster_day_replays_to_its_ground_truth() {
    let all: Vec<PathBuf> = fixtures().into_iter().filter(|p| is_truth(p)).collect();
    assert!(!all.is_empty(), "no fixture states the ground truth (cluster-day.expected.json)");
    let problems: Vec<String> = all.iter().flat_map(|p| check(p)).collect();
    assert!(problems.is_empty(), "{} write(s) differ from the truth:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn fixtures_cover_every_class_the_scenarios_meet() {
    let mut seen = BTreeMap::new();
    for p in fixtures() {
        let expected: Value = serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("JSON");
        for class in expected["classes"].as_object().expect("classes").values() {
            *seen.entry(class.as_str().expect("class").to_string()).or_insert(0) += 1;
        }
    }
    for class in ["drift", "expected", "origin", "unowned", "initializing", "deleting"] {
        assert!(seen.contains_key(class), "no recorded write of class {class}: {seen:?}");
    }
}

/// `replay` of a fixture with extra flags: auditID → class.
fn replay_classes(fixture: &str, extra: &[&str]) -> BTreeMap<String, String> {
    let jsonl = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/controlplane/{fixture}.jsonl"));
    let out = Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--cluster", "e2e", "--reorder-window", "2s", "--no-progress", "--quiet"])
        .args(extra)
        .arg(&jsonl)
        .output()
        .expect("run kausality-stream replay");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("an enriched event"))
        .map(|e| (e["auditID"].as_str().unwrap().to_string(), e["class"].as_str().unwrap().to_string()))
        .collect()
}

/// The rollout's last scale-down, made while the Deployment's status showed the rollout under way.
const ROLLOUT_SCALE_DOWN: &str = "b750645b-b94b-4844-8ec3-71a63fb0b899";
/// manual-scale: the deployment controller scales a person's ReplicaSet scale back (drift).
const SCALE_BACK: &str = "e876331a-9d79-4a64-8fa4-4da989754178";

#[test]
fn replay_can_judge_by_the_old_rule_and_take_signals_from_the_command_line() {
    let now = replay_classes("rollout", &[]);
    assert_eq!(now[ROLLOUT_SCALE_DOWN], "expected");
    let old = replay_classes("rollout", &["--observed-is-finished"]);
    assert_eq!(old[ROLLOUT_SCALE_DOWN], "drift", "observed is finished: the old rule");
    let changed: Vec<&String> = now.keys().filter(|id| now[*id] != old[*id]).collect();
    assert_eq!(changed, [ROLLOUT_SCALE_DOWN], "nothing else differs between the rules on this stream");
    // Signals from the command line: one that always holds for these Deployments (their spec has a
    // rolling `strategy`), so their generation never finishes and the scale-back reads expected;
    // a condition reason the Deployment shows once it is done (`NewReplicaSetAvailable`) likewise.
    assert_eq!(replay_classes("manual-scale", &[])[SCALE_BACK], "drift");
    let busy =
        replay_classes("manual-scale", &["--in-progress-field", "Deployment.apps=spec.strategy.type == RollingUpdate"]);
    assert_eq!(busy[SCALE_BACK], "expected");
    let signal = "Deployment.apps=spec.strategy.type == RollingUpdate";
    let held = replay_classes("manual-scale", &["--in-progress-field", signal, "--in-progress-paused", signal]);
    assert_eq!(held[SCALE_BACK], "drift", "a spec that asks for no progress holds every signal back");
    let cond = replay_classes(
        "manual-scale",
        &["--in-progress-condition", "Deployment.apps=Progressing=NewReplicaSetAvailable"],
    );
    assert_eq!(cond[SCALE_BACK], "expected");
    let old = replay_classes(
        "manual-scale",
        &["--observed-is-finished", "--in-progress-condition", "Deployment.apps=Progressing=NewReplicaSetAvailable"],
    );
    assert_eq!(old[SCALE_BACK], "drift", "the old rule reads no signal at all");
    let bad = Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--in-progress-field", "Widget=phase == x", "-"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a field under spec. or status."),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `replay --policies pipelines/self-healing.toml`: on the recorded deletes, the pod the
/// ReplicaSet controller creates after alice's delete is approved by the example policy; the
/// classes stay as recorded.
#[test]
fn the_self_healing_example_approves_the_recorded_replacement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--cluster", "e2e", "--reorder-window", "2s", "--no-progress", "--quiet", "--policies"])
        .arg(root.join("pipelines/self-healing.toml"))
        .arg(root.join("tests/fixtures/controlplane/deletes.jsonl"))
        .output()
        .expect("run kausality-stream replay");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let drift: Vec<&Value> = events.iter().filter(|e| e["class"] == "drift").collect();
    assert_eq!(drift.len(), 1);
    assert_eq!(drift[0]["auditID"], "c42554bc-71b9-460c-b456-d0c963e4e191");
    assert_eq!(
        (&drift[0]["resolution"], &drift[0]["policy"]),
        (&Value::from("approved"), &Value::from("native-self-healing"))
    );
    assert!(events.iter().filter(|e| e["class"] != "drift").all(|e| e.get("policy").is_none()));
    let bad = Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--no-progress", "--quiet", "--policies"])
        .arg(root.join("pipelines/kafka.toml/missing"))
        .arg(root.join("tests/fixtures/controlplane/deletes.jsonl"))
        .output()
        .expect("run kausality-stream replay");
    assert!(!bad.status.success(), "an unreadable policy file is an error");
}

/// Real Flux (docs/e2e.md "Flux"): kustomize-controller applying a Deployment, a ConfigMap and
/// a Service, alice's scale and edits, Flux's drift correction, new commits, a reconcile
/// request, a suspend and a prune. Every write replays to the ground truth of what the test
/// did, and every drift names the person whose write it put back.
#[test]
fn the_flux_scenario_replays_to_its_ground_truth() {
    flux_fixture("flux", "system:serviceaccount:flux-system:kustomize-controller", (2, 3, 4));
}

/// Real Flux applying as a tenant's service account (`spec.serviceAccountName`: Flux
/// impersonates it, and its requests name `fieldManager=kustomize-controller`): the first
/// revision `expected`, the put-backs of alice's scale and edit `drift` naming her, though the
/// events' user is the tenant's account. Before field managers were read, all six read `origin`.
#[test]
fn the_flux_tenant_scenario_replays_to_its_ground_truth() {
    flux_fixture("flux-tenant", "system:serviceaccount:flux-tenant:shop-reconciler", (2, 2, 2));
}

/// A real-Flux fixture replays to its truth with at least (drift, origin, expected) writes,
/// and each drift is a write of `applier_user` that names alice's write.
fn flux_fixture(name: &str, applier_user: &str, (drifts, origins, expected_writes): (usize, usize, usize)) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/flux/{name}.expected.json"));
    let problems = check(&path);
    assert!(problems.is_empty(), "{} write(s) differ from the truth:\n{}", problems.len(), problems.join("\n"));
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    let classes = expected["classes"].as_object().expect("classes");
    let count = |class: &str| classes.values().filter(|c| *c == class).count();
    assert!(
        count("drift") >= drifts && count("origin") >= origins && count("expected") >= expected_writes,
        "the scenario's classes: {classes:?}"
    );
    let events = replay_by_key(
        &path.with_file_name(format!("{name}.jsonl")),
        "e2e",
        expected["replay"]["reorderWindow"].as_str().expect("window"),
    );
    for (id, class) in classes {
        if class != "drift" {
            continue;
        }
        let e = &events[id];
        assert_eq!(e["user"], applier_user, "{id}: a drift of Flux");
        let users: Vec<&str> =
            e["reverts"].as_array().into_iter().flatten().filter_map(|r| r["user"].as_str()).collect();
        assert_eq!(users, ["alice"], "{id}: the drift names the person whose write it put back");
        assert_eq!(e["parent"]["kind"], "Kustomization", "{id}: the member's parent is its Kustomization");
    }
}
