//! Every real audit sample in `../shared/audit-samples` is decoded or rejected with a reason,
//! never a panic, and the good events around bad ones survive.

use std::path::{Path, PathBuf};

use kausality_stream::classify::Class;
use kausality_stream::decode::{InvalidReason, Unwrap};
use kausality_stream::filter::Ignored;
use kausality_stream::replay::{run, Outcome, ReplayOptions};

fn samples() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/audit-samples");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: {} not found (the shared samples sit beside the repository)", dir.display());
        None
    }
}

fn replay(files: &[PathBuf], unwrap: Unwrap) -> (Outcome, Vec<serde_json::Value>) {
    let mut opts = ReplayOptions { inputs: files.to_vec(), progress: false, ..ReplayOptions::default() };
    opts.processor.decode.unwrap = unwrap;
    let mut out = Vec::new();
    let outcome = run(&opts, &mut out).expect("replay runs");
    let events = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("enriched JSON"))
        .collect();
    (outcome, events)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "SOURCE_COMMIT"))
        .collect();
    v.sort();
    v
}

fn invalid(o: &Outcome, r: InvalidReason) -> u64 {
    o.metrics.invalid_count(r)
}

#[test]
fn every_sample_file_is_decoded_or_explained() {
    let Some(root) = samples() else { return };
    for dir in ["falco/k8s_audit", "khi", "aks-audit-log", "audit2rbac", "kubeprovenance"] {
        for f in files(&root.join(dir)) {
            for unwrap in [Unwrap::None, Unwrap::Aks] {
                let (o, _) = replay(std::slice::from_ref(&f), unwrap);
                let bad: u64 = InvalidReason::ALL.iter().map(|&r| invalid(&o, r)).sum();
                assert!(o.summary.events > 0 || bad > 0, "{}: neither decoded nor explained", f.display());
                assert_eq!(o.summary.unreadable.len(), 0, "{}", f.display());
                if bad > 0 {
                    assert!(!o.summary.invalid_examples.is_empty(), "{}: rejections carry a message", f.display());
                }
            }
        }
    }
}

#[test]
fn falco_traces_classify_creates_and_deletes() {
    let Some(root) = samples() else { return };
    let (o, events) = replay(&files(&root.join("falco/k8s_audit")), Unwrap::None);
    assert_eq!(o.summary.events, 51);
    assert_eq!(o.metrics.duplicates(), 2, "two files reuse an auditID");
    assert_eq!(o.metrics.ignored_count(Ignored::Stage), 2, "exec/attach ResponseStarted");
    let pods: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["object"]["kind"] == "Pod" && e["verb"] == "create").collect();
    assert!(pods.len() >= 9);
    for p in &pods {
        assert_eq!(p["class"], Class::UnknownParent.as_str(), "ReplicaSets never appear in these traces");
        assert_eq!(p["parent"]["kind"], "ReplicaSet");
        assert_eq!(p["user"], "system:serviceaccount:kube-system:replicaset-controller");
    }
    let aggregator =
        events.iter().find(|e| e["object"]["name"] == "system:kube-aggregator").expect("the Status-answered delete");
    assert_eq!(aggregator["class"], "unowned");
    assert_eq!(aggregator["object"]["kind"], "ClusterRole");
    assert_eq!(aggregator["object"]["apiVersion"], "rbac.authorization.k8s.io/v1");
}

#[test]
fn aks_envelopes_are_rejected_or_unwrapped() {
    let Some(root) = samples() else { return };
    let all = files(&root.join("aks-audit-log"));
    let (o, events) = replay(&all, Unwrap::None);
    assert_eq!(o.summary.events, 1, "sample_KubeAuditLog_event.json is a plain (pretty-printed, BOM) event");
    assert_eq!(invalid(&o, InvalidReason::Wrapper), 2, "the records envelope and the single Event Hubs record");
    assert_eq!(events.len(), 1);
    let (o, events) = replay(&all, Unwrap::Aks);
    assert!(o.summary.events >= 20, "{}", o.summary.events);
    assert_eq!(invalid(&o, InvalidReason::Wrapper), 0);
    let rev =
        events.iter().find(|e| e["object"]["kind"] == "ControllerRevision").expect("the daemon-set-controller update");
    assert_eq!(rev["user"], "system:serviceaccount:kube-system:daemon-set-controller");
    assert_eq!(rev["class"], "unknown-parent");
    assert_eq!(rev["parent"]["kind"], "DaemonSet");
}

#[test]
fn metadata_level_and_v1beta1_logs_are_read_and_ignored_with_reasons() {
    let Some(root) = samples() else { return };
    let (o, events) = replay(&[root.join("audit2rbac/demo.log")], Unwrap::None);
    assert!(o.summary.events >= 30);
    assert!(events.is_empty());
    assert_eq!(
        o.metrics.ignored_count(Ignored::ReadVerb)
            + o.metrics.ignored_count(Ignored::StatusCode)
            + o.metrics.ignored_count(Ignored::NoObject),
        o.summary.events
    );
    let (o, _) = replay(&[root.join("kubeprovenance/minikube-sample-audit.log")], Unwrap::None);
    assert!(o.summary.events > 0);
    assert_eq!(InvalidReason::ALL.iter().map(|&r| invalid(&o, r)).sum::<u64>(), 0, "v1beta1 events decode");
    assert_eq!(o.metrics.ignored_count(Ignored::NoObject), o.summary.events, "Request level has no responseObject");
}

#[test]
fn yaml_is_explained_not_decoded() {
    let Some(root) = samples() else { return };
    let (o, _) = replay(&[root.join("khi/test-log.yaml")], Unwrap::None);
    assert_eq!(o.summary.events, 0);
    assert!(invalid(&o, InvalidReason::Json) > 0);
    assert!(o.nothing_read());
}

#[test]
fn good_lines_around_bad_ones_survive() {
    let Some(root) = samples() else { return };
    let good = std::fs::read_to_string(root.join("falco/k8s_audit/create_nginx_pod_privileged.json")).unwrap();
    let good2 = std::fs::read_to_string(root.join("falco/k8s_audit/create_configmap.json")).unwrap();
    let dir = std::env::temp_dir().join(format!("kausality-mixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mixed.log");
    let body = format!(
        "\u{feff}{}\n{{\"kind\":\"Event\",\"auditID\":\n\nnot json\n{{\"kind\":\"Pod\",\"apiVersion\":\"v1\"}}\n{}\n{}\n",
        good.trim(),
        &good2.trim()[..good2.trim().len() / 2],
        good2.trim()
    );
    std::fs::write(&path, body).unwrap();
    let (o, events) = replay(&[path], Unwrap::None);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(o.summary.events, 2);
    assert_eq!(events.len(), 2);
    assert_eq!(invalid(&o, InvalidReason::Truncated), 2);
    assert_eq!(invalid(&o, InvalidReason::Json), 1);
    assert_eq!(invalid(&o, InvalidReason::NotAuditEvent), 1);
}
