//! Shared by the `serve` black-box tests: audit events built the way kube-apiserver writes
//! them, a pipeline started in-process on 127.0.0.1:0, and a collector standing in for HTTP
//! sinks' endpoints.
// Each test crate uses the helpers its tests need: the others go unused in it.
#![allow(dead_code)]

#[path = "../common/pipeline.rs"]
mod pipeline_toml;
pub(crate) use pipeline_toml::Pipeline;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

use kausality_stream::pipeline::{self, Running};

pub(crate) const DEPLOY_CTRL: &str = "system:serviceaccount:kube-system:deployment-controller";
pub(crate) const RS_CTRL: &str = "system:serviceaccount:kube-system:replicaset-controller";
pub(crate) const DEPLOY_UID: &str = "6f1c2a52-0d0b-4a53-9c8e-3b7f6c1d2e01";
pub(crate) const RS_UID: &str = "8a2d4c11-5b9e-4f0a-a1b2-c3d4e5f60702";

/// Numbers the directories [`temp_dir`] makes: two tests of one run never share one, even
/// with the same name.
static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir, removed by the caller when done.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let d =
        std::env::temp_dir().join(format!("ks-{name}-{}-{}", std::process::id(), DIRS.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ts(second: u32) -> String {
    format!("2024-05-01T10:00:{second:02}.000000Z")
}

/// One audit event as kube-apiserver's webhook backend sends it (audit.k8s.io/v1,
/// RequestResponse level, stage ResponseComplete).
pub(crate) struct Ev {
    pub audit_id: String,
    pub verb: &'static str,
    pub user: String,
    pub resource: &'static str,
    pub api_group: &'static str,
    pub subresource: Option<&'static str>,
    pub object: Value,
    pub code: u16,
    pub second: u32,
}

impl Ev {
    pub(crate) fn json(&self) -> Value {
        let md = &self.object["metadata"];
        let ns = md["namespace"].as_str().unwrap_or("");
        let name = md["name"].as_str().unwrap_or("");
        let prefix =
            if self.api_group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{}/v1", self.api_group) };
        let mut uri = format!("{prefix}/namespaces/{ns}/{}", self.resource);
        if self.verb != "create" {
            uri.push('/');
            uri.push_str(name);
        }
        if let Some(s) = self.subresource {
            uri.push('/');
            uri.push_str(s);
        }
        let mut object_ref = json!({
            "resource": self.resource, "namespace": ns, "name": name, "apiVersion": "v1",
        });
        if !self.api_group.is_empty() {
            object_ref["apiGroup"] = json!(self.api_group);
        }
        if self.verb != "create" {
            object_ref["uid"] = md["uid"].clone();
            object_ref["resourceVersion"] = md["resourceVersion"].clone();
        }
        if let Some(s) = self.subresource {
            object_ref["subresource"] = json!(s);
        }
        let service_account = self.user.starts_with("system:serviceaccount:");
        json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "RequestResponse",
            "auditID": self.audit_id,
            "stage": "ResponseComplete",
            "requestURI": uri,
            "verb": self.verb,
            "user": {
                "username": self.user,
                "uid": format!("uid-{}", self.user),
                "groups": if service_account { json!(["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]) } else { json!(["system:authenticated"]) },
            },
            "sourceIPs": ["172.18.0.2"],
            "userAgent": if service_account { "kube-controller-manager/v1.30.0 (linux/amd64) kubernetes/7c48c2b/system:serviceaccount:kube-system:deployment-controller" } else { "kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b" },
            "objectRef": object_ref,
            "responseStatus": {"metadata": {}, "code": self.code},
            "requestObject": self.object,
            "responseObject": self.object,
            "requestReceivedTimestamp": ts(self.second),
            "stageTimestamp": ts(self.second),
            "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": "RBAC: allowed"},
        })
    }
}

pub(crate) fn event_list(events: &[Ev]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "EventList",
        "apiVersion": "audit.k8s.io/v1",
        "metadata": {},
        "items": events.iter().map(Ev::json).collect::<Vec<_>>(),
    }))
    .unwrap()
}

pub(crate) fn deployment(generation: i64, rv: u64, replicas: i64, status: Option<Value>) -> Value {
    let mut d = json!({
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "web", "namespace": "shop", "uid": DEPLOY_UID, "resourceVersion": rv.to_string(),
            "generation": generation, "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"app": "web"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
        },
        "status": {},
    });
    if let Some(s) = status {
        d["status"] = s;
    }
    d
}

pub(crate) fn available_status(observed: i64) -> Value {
    json!({
        "observedGeneration": observed, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "True", "lastUpdateTime": "2024-05-01T10:00:03Z", "lastTransitionTime": "2024-05-01T10:00:03Z", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "lastUpdateTime": "2024-05-01T10:00:03Z", "lastTransitionTime": "2024-05-01T10:00:01Z", "reason": "NewReplicaSetAvailable", "message": "ReplicaSet \"web-7d4b9c\" has successfully progressed."},
        ],
    })
}

pub(crate) fn replicaset(generation: i64, rv: u64, replicas: i64, status: Option<Value>) -> Value {
    json!({
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": RS_UID, "resourceVersion": rv.to_string(),
            "generation": generation, "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
            "annotations": {"deployment.kubernetes.io/desired-replicas": "1", "deployment.kubernetes.io/max-replicas": "2", "deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": DEPLOY_UID, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d4b9c"}},
            "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "7d4b9c"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}},
        },
        "status": status.unwrap_or_else(|| json!({"replicas": 0})),
    })
}

/// The story of the issue: a Deployment is created (unowned), its ReplicaSet is created before
/// the Deployment is Available (initializing), the Deployment becomes Available, a person
/// scales the ReplicaSet (origin) and the deployment-controller scales it back (drift).
pub(crate) fn deployment_story(prefix: &str) -> Vec<Ev> {
    let id = |n: &str| format!("{prefix}-{n}");
    vec![
        Ev {
            audit_id: id("create-deploy"),
            verb: "create",
            user: "alice@example.com".into(),
            resource: "deployments",
            api_group: "apps",
            subresource: None,
            object: deployment(1, 1000, 1, None),
            code: 201,
            second: 0,
        },
        Ev {
            audit_id: id("create-rs"),
            verb: "create",
            user: DEPLOY_CTRL.into(),
            resource: "replicasets",
            api_group: "apps",
            subresource: None,
            object: replicaset(1, 1001, 1, None),
            code: 201,
            second: 1,
        },
        Ev {
            audit_id: id("rs-status"),
            verb: "update",
            user: RS_CTRL.into(),
            resource: "replicasets",
            api_group: "apps",
            subresource: Some("status"),
            object: replicaset(
                1,
                1002,
                1,
                Some(json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1})),
            ),
            code: 200,
            second: 2,
        },
        Ev {
            audit_id: id("deploy-status"),
            verb: "update",
            user: DEPLOY_CTRL.into(),
            resource: "deployments",
            api_group: "apps",
            subresource: Some("status"),
            object: deployment(1, 1003, 1, Some(available_status(1))),
            code: 200,
            second: 3,
        },
        Ev {
            audit_id: id("bob-scales-rs"),
            verb: "patch",
            user: "bob@example.com".into(),
            resource: "replicasets",
            api_group: "apps",
            subresource: None,
            object: replicaset(2, 1004, 3, None),
            code: 200,
            second: 4,
        },
        Ev {
            audit_id: id("ctrl-scales-back"),
            verb: "update",
            user: DEPLOY_CTRL.into(),
            resource: "replicasets",
            api_group: "apps",
            subresource: None,
            object: replicaset(3, 1005, 1, None),
            code: 200,
            second: 5,
        },
    ]
}

/// Starts a pipeline from TOML text in-process.
pub(crate) async fn start(toml: &str) -> Running {
    let cfg = pipeline::load_str("test.toml", toml).unwrap_or_else(|e| panic!("bad test pipeline:\n{e}"));
    pipeline::start(cfg).await.expect("pipeline starts")
}

/// Waits until `path` holds at least `n` JSON lines; returns them.
pub(crate) async fn wait_lines(path: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let late = Instant::now() > deadline;
        // A line the sink is still writing is not read yet; at the deadline every byte is
        // (a half line left behind then is a defect, and fails here).
        let whole = if late { &text[..] } else { &text[..text.rfind('\n').map_or(0, |i| i + 1)] };
        let lines: Vec<Value> = whole
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("jsonl line is JSON"))
            .collect();
        if lines.len() >= n || late {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn class_of<'a>(lines: &'a [Value], audit_id: &str) -> &'a str {
    lines.iter().find(|l| l["auditID"] == audit_id).and_then(|l| l["class"].as_str()).unwrap_or("<none>")
}

/// An HTTP endpoint that records every JSON body POSTed to it; while its gate is closed it
/// holds requests (to make a sink slow on purpose).
#[derive(Clone)]
pub(crate) struct Collector {
    pub addr: SocketAddr,
    pub bodies: Arc<Mutex<Vec<Value>>>,
    gate: Arc<watch::Sender<bool>>,
    stop: Arc<watch::Sender<bool>>,
}

impl Collector {
    pub(crate) async fn start(open: bool) -> Collector {
        let (gate, _) = watch::channel(open);
        let (stop, mut stop_rx) = watch::channel(false);
        let c = Collector {
            addr: "127.0.0.1:0".parse().unwrap(),
            bodies: Default::default(),
            gate: Arc::new(gate),
            stop: Arc::new(stop),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", post(collect)).with_state(c.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                })
                .await
                .unwrap();
        });
        Collector { addr, ..c }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub(crate) fn open(&self) {
        self.gate.send_replace(true);
    }

    pub(crate) fn received(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    pub(crate) async fn wait_for(&self, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let got = self.received();
            if pred(&got) || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn collect(State(c): State<Collector>, body: axum::body::Bytes) -> &'static str {
    let mut gate = c.gate.subscribe();
    let _ = gate.wait_for(|open| *open).await;
    c.bodies.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    r#"{"apiVersion":"kausality.io/v1alpha1","kind":"DriftReportResponse","acknowledged":true}"#
}

/// Every metric name of the published contract.
pub(crate) fn contract_metrics() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/metrics.txt");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The value of one series on the metrics listener at `addr` (0 when absent): `name` and
/// the `labels` it must carry, each as `key="value"`.
pub(crate) async fn metric(addr: SocketAddr, name: &str, labels: &[&str]) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|lab| l.contains(lab)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Polls [`metric`] until it reaches `at_least` (or 10 s pass); returns the last value.
pub(crate) async fn wait_metric(addr: SocketAddr, name: &str, labels: &[&str], at_least: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(addr, name, labels).await;
        if v >= at_least || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
