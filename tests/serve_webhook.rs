//! The live service, black-box: a pipeline started in-process with its webhook on
//! 127.0.0.1:0, fed real-format EventLists over HTTP(S), judged by what its sinks write.

#[path = "common/pki.rs"]
mod pki;
mod serve_support;

use std::time::Duration;

use pki::{pki, Pki};
use serde_json::{json, Value};
use serve_support::*;

async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> (u16, Value, Option<String>) {
    let r = client.post(url).header("content-type", "application/json").body(body).send().await.expect("request");
    let code = r.status().as_u16();
    let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    let body = serde_json::from_slice(&r.bytes().await.unwrap_or_default()).unwrap_or(Value::Null);
    (code, body, retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_story_is_classified_and_drift_is_reported_then_resolved() {
    let dir = temp_dir("story");
    let out = dir.join("out.jsonl");
    let receiver = Collector::start(true).await;
    let pipeline = Pipeline::webhook().cluster("kind-test").options(r#"reorder_window = "50ms""#).jsonl(&out);
    let running =
        start(&pipeline.sink("drift_report", &format!("urls = [\"{}\"]\nttl = \"10m\"", receiver.url())).toml()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let (code, body, _) = post(&client, &url, event_list(&deployment_story("s"))).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["events"], 6);

    let lines = wait_lines(&out, 4).await;
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(class_of(&lines, "s-create-deploy"), "unowned");
    assert_eq!(class_of(&lines, "s-create-rs"), "initializing");
    assert_eq!(class_of(&lines, "s-bob-scales-rs"), "origin");
    assert_eq!(class_of(&lines, "s-ctrl-scales-back"), "drift");
    assert!(lines.iter().all(|l| l["cluster"] == "kind-test"));
    let drift = lines.iter().find(|l| l["class"] == "drift").unwrap();
    assert_eq!(drift["parent"]["observedGeneration"], 1);
    assert_eq!(drift["resolution"], "unresolved");

    // The drift report, in Kausality's format.
    let got = receiver.wait_for(|b| !b.is_empty()).await;
    assert_eq!(got.len(), 1, "{got:#?}");
    let r = &got[0];
    assert_eq!(r["apiVersion"], "kausality.io/v1alpha1");
    assert_eq!(r["kind"], "DriftReport");
    assert_eq!(r["spec"]["phase"], "Detected");
    assert_eq!(r["spec"]["id"].as_str().unwrap().len(), 16);
    assert_eq!(
        r["spec"]["parent"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web", "uid": DEPLOY_UID, "generation": 1, "observedGeneration": 1, "lifecyclePhase": "Initialized"})
    );
    assert_eq!(r["spec"]["child"]["uid"], RS_UID);
    assert_eq!(r["spec"]["request"]["user"], DEPLOY_CTRL);
    assert_eq!(r["spec"]["request"]["operation"], "UPDATE");
    assert_eq!(r["spec"]["timestamp"], "2024-05-01T10:00:05.000000Z");

    // A redelivered batch is deduplicated: no new line, no second report.
    let (code, _, _) = post(&client, &url, event_list(&deployment_story("s"))).await;
    assert_eq!(code, 200);
    // Alice changes the Deployment's spec: the parent's generation moves on, the drift is over.
    let change = Ev {
        audit_id: "s-alice-edits".into(),
        verb: "update",
        user: "alice@example.com".into(),
        resource: "deployments",
        api_group: "apps",
        subresource: None,
        object: deployment(2, 1006, 2, Some(available_status(1))),
        code: 200,
        second: 6,
    };
    let (code, _, _) = post(&client, &url, event_list(&[change])).await;
    assert_eq!(code, 200);
    let got = receiver.wait_for(|b| b.len() >= 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[1]["spec"]["phase"], "Resolved");
    assert_eq!(got[1]["spec"]["id"], got[0]["spec"]["id"]);
    let lines = wait_lines(&out, 5).await;
    assert_eq!(lines.len(), 5, "only alice's edit is new: {lines:#?}");
    assert_eq!(class_of(&lines, "s-alice-edits"), "unowned");

    // Every metric of the published contract is exported.
    let text = reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap();
    for name in contract_metrics() {
        assert!(text.contains(&format!("# TYPE {name} ")), "metric {name} missing from /metrics");
    }
    assert!(text.contains(r#"kausality_webhook_requests_total{code="200"} 3"#), "{text}");
    assert!(text.contains(r#"kausality_sink_events_total{sink="jsonl"} 5"#), "{text}");
    assert!(text.contains(r#"kausality_drift_reports_total{phase="detected"} 1"#), "{text}");
    assert!(text.contains(r#"kausality_drift_reports_total{phase="resolved"} 1"#), "{text}");
    assert_eq!(reqwest::get(format!("http://{}/readyz", running.metrics_addr)).await.unwrap().status(), 200);
    assert_eq!(reqwest::get(format!("http://{}/healthz", running.metrics_addr)).await.unwrap().status(), 200);

    let outcome = running.shutdown().await;
    assert!(outcome.clean);
    receiver.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversize_and_per_cluster_paths() {
    let dir = temp_dir("malformed");
    let out = dir.join("out.jsonl");
    let running = start(
        &Pipeline::webhook().webhook_with("max_body_bytes = 20000\nmax_events_per_request = 3").jsonl(&out).toml(),
    )
    .await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", running.webhook_addrs[0]);

    // Nothing in the body is an audit event: 400, saying what was wrong.
    let (code, body, _) = post(&client, &format!("{base}/audit"), b"this is not json".to_vec()).await;
    assert_eq!(code, 400);
    assert!(body["error"].as_str().unwrap().contains("no audit event"), "{body}");
    assert_eq!(body["errors"][0]["reason"], "json");
    let (code, body, _) =
        post(&client, &format!("{base}/audit"), br#"{"kind":"ConfigMap","apiVersion":"v1"}"#.to_vec()).await;
    assert_eq!(code, 400);
    assert!(body["errors"][0]["message"].as_str().unwrap().contains("not an audit Event"), "{body}");

    // One good event and one broken item: 200, the good one is kept, the bad one reported.
    let good = Ev {
        audit_id: "m-good".into(),
        verb: "create",
        user: "alice@example.com".into(),
        resource: "deployments",
        api_group: "apps",
        subresource: None,
        object: deployment(1, 10, 1, None),
        code: 201,
        second: 0,
    };
    let mut list: Value = serde_json::from_slice(&event_list(&[good])).unwrap();
    list["items"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete"}));
    let (code, body, _) = post(&client, &format!("{base}/audit/eu-1"), serde_json::to_vec(&list).unwrap()).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["events"], 1);
    assert_eq!(body["invalid"], 1);
    assert_eq!(body["errors"][0]["location"], "items[1]");
    let lines = wait_lines(&out, 1).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["cluster"], "eu-1", "the path names the cluster");

    // Over the body limit: 413 with the limit in the message.
    let big = vec![b' '; 30_000];
    let (code, body, _) = post(&client, &format!("{base}/audit"), big).await;
    assert_eq!(code, 413);
    assert!(body["error"].as_str().unwrap().contains("20000"), "{body}");
    // Over the event limit: 413.
    let many: Vec<Ev> = (0..4).map(|i| Ev { audit_id: format!("m-{i}"), verb: "create", user: "a".into(), resource: "configmaps", api_group: "", subresource: None, object: json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":format!("c{i}"),"namespace":"x","uid":format!("u{i}"),"resourceVersion":"5"}}), code: 201, second: 0 }).collect();
    let received = |text: &str| {
        text.lines().find(|l| l.starts_with(r#"kausality_events_received_total{source="webhook"}"#)).map(str::to_string)
    };
    let before = received(
        &reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap(),
    );
    let (code, body, _) = post(&client, &format!("{base}/audit"), event_list(&many)).await;
    assert_eq!(code, 413);
    assert!(body["error"].as_str().unwrap().contains("4 events"), "{body}");
    let after = received(
        &reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap(),
    );
    assert!(
        before.is_some() && before == after,
        "a refused body counts no event as received: {before:?} then {after:?}"
    );
    // A cluster name that would pollute the interner, and a wrong path.
    let (code, _, _) = post(&client, &format!("{base}/audit/a%20b"), b"{}".to_vec()).await;
    assert_eq!(code, 400);
    let (code, _, _) = post(&client, &format!("{base}/events"), b"{}".to_vec()).await;
    assert_eq!(code, 404);

    let text = reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap();
    assert!(text.contains(r#"kausality_webhook_requests_total{code="413"} 2"#), "{text}");
    assert!(text.contains(r#"kausality_webhook_requests_total{code="400"} 3"#), "{text}");
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What kube-apiserver's batches look like at their largest and at their worst: 400 events of
/// 23 KB (over the per-event limit as a body, well under it per event), items that cannot be
/// read beside good ones, bodies nested past any stack, an empty array. A 400 only when nothing
/// in the body can ever be read: the API server drops a batch answered 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_batches_bad_items_and_deep_bodies() {
    let dir = temp_dir("batches");
    let out = dir.join("out.jsonl");
    let running = start(&Pipeline::webhook().jsonl(&out).toml()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let configmap = |i: usize, pad: usize| Ev {
        audit_id: format!("b-{i}"),
        verb: "create",
        user: "alice".into(),
        resource: "configmaps",
        api_group: "",
        subresource: None,
        object: json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":format!("c{i}"),"namespace":"x","uid":format!("u-{i}"),"resourceVersion":format!("{}", 10 + i)},"data":{"pad":"p".repeat(pad)}}),
        code: 201,
        second: 0,
    };

    // 400 events of about 23 KB: 9.4 MB, over the 8 MiB per-event limit as a whole.
    let big: Vec<Ev> = (0..400).map(|i| configmap(i, 11_000)).collect();
    let body = event_list(&big);
    assert!(body.len() > 9_000_000 && body.len() < 16 << 20, "{}", body.len());
    let (code, answer, _) = post(&client, &url, body).await;
    assert_eq!((code, answer["events"].as_u64(), answer["invalid"].as_u64()), (200, Some(400), Some(0)), "{answer}");

    // A number out of range and invalid UTF-8 beside good items: 200, each bad one located.
    let mut list: Value = serde_json::from_slice(&event_list(&[
        configmap(500, 0),
        configmap(501, 0),
        configmap(502, 0),
        configmap(503, 0),
    ]))
    .unwrap();
    list["items"][1]["responseStatus"]["code"] = json!(12345);
    let mut bytes = serde_json::to_vec(&list).unwrap();
    let at = bytes.windows(5).position(|w| w == b"12345").unwrap();
    bytes.splice(at..at + 5, b"1e400".iter().copied());
    let at = bytes.windows(5).position(|w| w == b"b-503").unwrap();
    bytes[at + 1] = 0xff;
    let (code, answer, _) = post(&client, &url, bytes).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!((answer["events"].as_u64(), answer["invalid"].as_u64()), (Some(2), Some(2)), "{answer}");
    assert_eq!(answer["errors"][0]["location"], "items[1]");
    assert_eq!(answer["errors"][0]["reason"], "json");
    assert_eq!(answer["errors"][1]["location"], "items[3]");
    assert_eq!(answer["errors"][1]["reason"], "encoding");

    // An item without a user is located at its own field.
    let mut list: Value = serde_json::from_slice(&event_list(&[configmap(600, 0), configmap(601, 0)])).unwrap();
    list["items"][1].as_object_mut().unwrap().remove("user");
    let (code, answer, _) = post(&client, &url, serde_json::to_vec(&list).unwrap()).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["errors"][0]["location"], "items[1].user", "{answer}");

    // Every item bad, but the list is sound: 200 (nothing to retry, nothing to drop).
    let (code, answer, _) =
        post(&client, &url, br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"verb":5},7]}"#.to_vec())
            .await;
    assert_eq!((code, answer["invalid"].as_u64()), (200, Some(2)), "{answer}");
    // An EventList without items: 200; a bare `[]`: 400, it is not an audit body.
    let (code, answer, _) =
        post(&client, &url, br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}"#.to_vec()).await;
    assert_eq!((code, answer["events"].as_u64()), (200, Some(0)), "{answer}");
    let (code, answer, _) = post(&client, &url, b"[]".to_vec()).await;
    assert_eq!(code, 400, "{answer}");
    assert!(answer["errors"][0]["message"].as_str().unwrap().contains("empty JSON array"), "{answer}");

    // Nested past any stack: nothing recurses with it, the good item beside it is read, and
    // the service goes on.
    let deep = format!(
        r#"{{"auditID":"deep","stage":"ResponseComplete","verb":"get","x":{}1{}}}"#,
        r#"{"a":["#.repeat(100_000),
        "]}".repeat(100_000)
    );
    let list = format!(
        r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{deep}]}}"#,
        configmap(700, 0).json()
    );
    let (code, answer, _) = post(&client, &url, list.into_bytes()).await;
    assert_eq!((code, answer["events"].as_u64(), answer["invalid"].as_u64()), (200, Some(2), Some(0)), "{answer}");
    let arrays = format!("{}{}", "[".repeat(400), "]".repeat(400));
    let (code, answer, _) = post(&client, &url, arrays.into_bytes()).await;
    assert_eq!(code, 200, "an array in an array is an item that is not read: {answer}");
    assert_eq!(answer["errors"][0]["reason"], "not_audit_event");
    let (code, answer, _) = post(&client, &url, "[".repeat(3000).into_bytes()).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["errors"][0]["reason"], "truncated");
    let lines = wait_lines(&out, 400 + 2 + 1 + 1).await;
    assert!(lines.iter().any(|l| l["auditID"] == "b-700"));

    let text = reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap();
    assert!(text.contains(r#"kausality_events_invalid_total{reason="not_audit_event"} 3"#), "{text}");
    assert!(text.contains(r#"kausality_events_invalid_total{reason="encoding"} 1"#), "{text}");
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_answers_429_and_nothing_is_lost_once_the_client_retries() {
    // A sink that hangs (its endpoint holds every request) fills the sink queue, then the
    // processor waits, then the intake queue fills: the webhook must say 429, not drop.
    let collector = Collector::start(false).await;
    let pipeline = Pipeline::webhook().options("reorder_window = \"0\"\nqueue_capacity = 1\nsink_queue_capacity = 1");
    let sink = format!("url = \"{}\"\nbatch_size = 1\ntimeout = \"60s\"\nflush_interval = \"10ms\"", collector.url());
    let running = start(&pipeline.sink("http", &sink).toml()).await;
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    const N: usize = 12;
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..N {
        let (client, url) = (client.clone(), url.clone());
        let ev = Ev {
            audit_id: format!("o-{i}"),
            verb: "create",
            user: "alice@example.com".into(),
            resource: "configmaps",
            api_group: "",
            subresource: None,
            object: json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": format!("cm-{i}"), "namespace": "x", "uid": format!("uid-{i}"), "resourceVersion": (100 + i).to_string()}, "data": {"k": "v"}}),
            code: 201,
            second: 0,
        };
        let body = event_list(&[ev]);
        tasks.push(tokio::spawn(async move {
            // What the API server's webhook backend does: retry on 429 after Retry-After.
            let mut throttled = 0;
            loop {
                let (code, _, retry_after) = post(&client, &url, body.clone()).await;
                match code {
                    200 => return throttled,
                    429 => {
                        assert_eq!(retry_after.as_deref(), Some("1"));
                        throttled += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("unexpected {other}"),
                }
            }
        }));
    }
    // Let the queues fill up and the 429s come, then let the sink through.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text =
            reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap();
        if text.contains(r#"code="429""#) || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    collector.open();
    let mut throttled = 0;
    for t in tasks {
        throttled += t.await.unwrap();
    }
    assert!(throttled > 0, "the intake never pushed back");
    let got = collector.wait_for(|b| b.len() >= N).await;
    let mut ids: Vec<String> = got
        .iter()
        .flat_map(|b| b.as_array().unwrap().iter().map(|e| e["auditID"].as_str().unwrap().to_string()))
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "every event reached the sink exactly once: {ids:?}");
    assert!(running.shutdown().await.clean);
    collector.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_when_configured() {
    let dir = temp_dir("token");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let running =
        start(&Pipeline::webhook().webhook_with(&format!("bearer_token_file = \"{}\"", token.display())).toml()).await;
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let body = event_list(&deployment_story("t")[..1]);
    let client = reqwest::Client::new();
    let r = client.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let r = client.post(&url).bearer_auth("wrong-token!").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = client.post(&url).bearer_auth("s3cret-token").body(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tls_client(pki: &Pki, with_client_cert: bool) -> reqwest::Client {
    let mut b =
        reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap());
    if with_client_cert {
        let pem = format!("{}{}", pki.client_pem, pki.client_key);
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// A webhook serving HTTPS with the certificate and key in `d`, asking clients for a
/// certificate from its CA when `client_ca`.
fn tls_pipeline(d: &std::path::Path, client_ca: bool) -> String {
    let ca = if client_ca { format!("client_ca = \"{}\"\n", d.join("ca.crt").display()) } else { String::new() };
    format!(
        "[[sources]]\ntype = \"webhook\"\nlisten = \"127.0.0.1:0\"\n[sources.tls]\ncert = \"{}\"\nkey = \"{}\"\n{ca}[metrics]\nlisten = \"127.0.0.1:0\"\n",
        d.join("tls.crt").display(),
        d.join("tls.key").display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_client_certificates() {
    let pki = pki(temp_dir("mtls"));
    let d = &pki.dir;
    let running = start(&tls_pipeline(d, true)).await;
    let url = format!("https://127.0.0.1:{}/audit/tls-cluster", running.webhook_addrs[0].port());
    let body = event_list(&deployment_story("x")[..1]);
    let (code, _, _) = post(&tls_client(&pki, true), &url, body.clone()).await;
    assert_eq!(code, 200, "a client with a certificate from the CA gets in");
    let refused = tls_client(&pki, false).post(&url).body(body.clone()).send().await;
    assert!(refused.is_err(), "a client without a certificate is refused in the handshake");
    let plain =
        reqwest::Client::new().post(format!("http://{}/audit", running.webhook_addrs[0])).body(body).send().await;
    assert!(plain.map(|r| r.status().as_u16() != 200).unwrap_or(true), "plain HTTP is not served on the TLS port");
    // Each failed handshake is counted with its reason.
    let failures = "kausality_tls_handshake_failures_total";
    assert_eq!(wait_metric(running.metrics_addr, failures, &["reason=\"no_client_certificate\""], 1.0).await, 1.0);
    assert_eq!(wait_metric(running.metrics_addr, failures, &["reason=\"protocol\""], 1.0).await, 1.0);
    assert_eq!(
        metric(running.metrics_addr, "kausality_tls_handshake_failures_total", &["reason=\"timeout\""]).await,
        0.0,
        "a series of every reason from the start"
    );
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(d).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_without_client_certificates() {
    let pki = pki(temp_dir("tls"));
    let d = &pki.dir;
    let running = start(&tls_pipeline(d, false)).await;
    let url = format!("https://127.0.0.1:{}/audit", running.webhook_addrs[0].port());
    let (code, body, _) = post(&tls_client(&pki, false), &url, event_list(&deployment_story("y")[..2])).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["events"], 2);
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(d).unwrap();
}
