//! `[unknown_parents] fetch = true` against a stand-in API server on 127.0.0.1:0 that serves
//! discovery for apps/v1 and one Deployment. Built only with `--features fetch`.
#![cfg(feature = "fetch")]

mod serve_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use serve_support::*;

fn as_json(v: Value) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/json")], v.to_string())
}

async fn fake_apiserver(gets: Arc<AtomicUsize>) -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/apis/apps/v1",
            get(|| async {
                as_json(json!({
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                    "resources": [{"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": ["get", "list"]}],
                }))
            }),
        )
        .route(
            "/apis/apps/v1/namespaces/shop/deployments/web",
            get(|State(gets): State<Arc<AtomicUsize>>| async move {
                gets.fetch_add(1, Ordering::SeqCst);
                as_json(deployment(1, 1003, 1, Some(available_status(1))))
            }),
        )
        .with_state(gets);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_never_seen_is_fetched_and_its_children_are_judged() {
    let dir = temp_dir("fetch");
    let gets = Arc::new(AtomicUsize::new(0));
    let api = fake_apiserver(gets.clone()).await;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{api}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let out = dir.join("out.jsonl");
    let fetch = format!("fetch = true\nkubeconfig = \"{}\"\nrate = 50", kubeconfig.display());
    let running = start(
        &Pipeline::webhook().options(r#"reorder_window = "0""#).jsonl(&out).section("unknown_parents", &fetch).toml(),
    )
    .await;
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let client = reqwest::Client::new();
    // The service starts after the Deployment's last write: the stream shows only its ReplicaSet.
    let story = deployment_story("f");
    let create_rs = &story[1];
    let r = client.post(&url).body(event_list(std::slice::from_ref(create_rs))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let lines = wait_lines(&out, 1).await;
    assert_eq!(class_of(&lines, "f-create-rs"), "unknown-parent");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gets.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gets.load(Ordering::SeqCst), 1, "the parent was fetched");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The controller changes its child while the fetched parent is stable: drift, not unknown.
    let scale = Ev {
        audit_id: "f-ctrl-scales".into(),
        verb: "update",
        user: DEPLOY_CTRL.into(),
        resource: "replicasets",
        api_group: "apps",
        subresource: None,
        object: replicaset(2, 1005, 2, None),
        code: 200,
        second: 5,
    };
    let r = client.post(&url).body(event_list(&[scale])).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let lines: Vec<Value> = wait_lines(&out, 2).await;
    assert_eq!(class_of(&lines, "f-ctrl-scales"), "drift", "{lines:#?}");
    assert_eq!(gets.load(Ordering::SeqCst), 1, "fetched once");
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}
