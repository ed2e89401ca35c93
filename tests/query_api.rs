//! The query API, black-box: a pipeline started in-process with its webhook and its query
//! listener on 127.0.0.1:0, fed real-format EventLists, asked over HTTP; every answer is
//! checked against the OpenAPI document (docs/query-api.openapi.json).

mod common;
mod serve_support;

use std::path::Path;
use std::time::Duration;

use kausality_stream::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use kausality_stream::history::story::StoryQuery;
use kausality_stream::history::{self, Mode};
use kausality_stream::pipeline::Running;
use kausality_stream::why;
use serde_json::{json, Value};
use serve_support::*;

const TOKEN: &str = "s3cret-query-token";

fn openapi() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/query-api.openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the OpenAPI document is JSON")
}

fn enriched_schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/enriched-event.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A client of the query API that checks every answer against the OpenAPI document.
struct Api {
    base: String,
    client: reqwest::Client,
    doc: Value,
}

impl Api {
    /// GETs `path_and_query` with the token (or `token`); returns the code and the JSON body,
    /// after checking the body against the document's schema for that route and code.
    async fn get_as(&self, path_and_query: &str, token: Option<&str>) -> (u16, Value) {
        self.request(reqwest::Method::GET, path_and_query, token).await
    }

    /// Any method: the answer is checked against the document's GET operation of the route,
    /// the only operation each route has (another method is answered 405, which it lists).
    async fn request(&self, method: reqwest::Method, path_and_query: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{path_and_query}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("request");
        let code = r.status().as_u16();
        assert_eq!(
            r.headers().get("content-type").map(|v| v.to_str().unwrap()),
            Some("application/json"),
            "{path_and_query} answered {code}"
        );
        let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).expect("a JSON answer");
        let route = path_and_query.split('?').next().unwrap();
        if let Some(op) = self.doc["paths"].get(route) {
            let schema = &op["get"]["responses"][code.to_string()]["content"]["application/json"]["schema"];
            assert!(!schema.is_null(), "{route} answered {code}, which the document does not list: {body}");
            common::schema::check(schema, &self.doc, &body, "$")
                .unwrap_or_else(|e| panic!("{route} {code}: {e}\nin {body}"));
        } else {
            assert!([401, 404].contains(&code), "{route} answers {code} but the document does not list it: {body}");
        }
        (code, body)
    }

    async fn get(&self, path_and_query: &str) -> (u16, Value) {
        self.get_as(path_and_query, Some(TOKEN)).await
    }
}

async fn post(client: &reqwest::Client, url: &str, events: &[Ev]) {
    let r = client.post(url).header("content-type", "application/json").body(event_list(events)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
}

/// Fills a history store from enriched events as the schema describes it (the store's own
/// writer is the `history` sink; this builds the fixture from the same events).
fn fill_history(path: &Path, events: &[Value]) {
    let c = history::open(path, Mode::Write).unwrap();
    for e in events {
        let t = parse_rfc3339_micros(e["stageTimestamp"].as_str().unwrap()).unwrap();
        let (o, p) = (&e["object"], &e["parent"]);
        c.execute(
            "INSERT INTO objects (cluster, uid, api_version, kind, namespace, name, parent_uid, parent_api_version, parent_kind, parent_name, first_us, last_us)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11
             WHERE NOT EXISTS (SELECT 1 FROM objects WHERE cluster = ?1 AND uid = ?2)",
            rusqlite::params![
                e["cluster"].as_str(),
                o["uid"].as_str(),
                o["apiVersion"].as_str(),
                o["kind"].as_str(),
                o["namespace"].as_str(),
                o["name"].as_str(),
                p["uid"].as_str(),
                p["apiVersion"].as_str(),
                p["kind"].as_str(),
                p["name"].as_str(),
                t
            ],
        )
        .unwrap();
        c.execute(
            "UPDATE objects SET last_us = max(last_us, ?3) WHERE cluster = ?1 AND uid = ?2",
            rusqlite::params![e["cluster"].as_str(), o["uid"].as_str(), t],
        )
        .unwrap();
        let object_id: i64 = c
            .query_row(
                "SELECT id FROM objects WHERE cluster = ?1 AND uid = ?2",
                [e["cluster"].as_str(), o["uid"].as_str()],
                |r| r.get(0),
            )
            .unwrap();
        let person = e["reverts"].as_array().is_some_and(|rs| rs.iter().any(|r| r["person"] == true));
        c.execute(
            "INSERT INTO mutations (object_id, time_us, audit_id, verb, subresource, user, class, resolution, policy, reverts_person, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            rusqlite::params![
                object_id,
                t,
                e["auditID"].as_str(),
                e["verb"].as_str(),
                e["subresource"].as_str(),
                e["user"].as_str(),
                e["class"].as_str(),
                e["resolution"].as_str(),
                e["policy"].as_str(),
                person as i64,
                e.to_string()
            ],
        )
        .unwrap();
        let mutation_id: i64 = c.query_row("SELECT max(id) FROM mutations", [], |r| r.get(0)).unwrap();
        for r in e["reverts"].as_array().into_iter().flatten() {
            c.execute(
                "INSERT INTO reverts (mutation_id, origin_audit_id) VALUES (?1, ?2)",
                rusqlite::params![mutation_id, r["auditID"].as_str()],
            )
            .unwrap();
        }
        for (key, t) in [("oldest_us", "min"), ("newest_us", "max")] {
            c.execute(&format!("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, (SELECT CAST({t}(time_us) AS TEXT) FROM mutations))"), [key]).unwrap();
        }
    }
}

/// The Deployment as another write of its spec: generation 2, not observed yet.
fn spec_change(audit_id: &str, rv: u64, second: u32) -> Ev {
    let mut d = deployment(2, rv, 1, Some(available_status(1)));
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    Ev {
        audit_id: audit_id.into(),
        verb: "update",
        user: "alice@example.com".into(),
        resource: "deployments",
        api_group: "apps",
        subresource: None,
        object: d,
        code: 200,
        second,
    }
}

/// A Deployment of another group with the same name: asking by bare kind is ambiguous.
fn widget_named_web() -> Ev {
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "0d0d0d0d-0000-4000-8000-000000000001", "resourceVersion": "1100", "generation": 1},
        "spec": {"size": 1},
    });
    Ev {
        audit_id: "q-widget".into(),
        verb: "create",
        user: "alice@example.com".into(),
        resource: "deployments",
        api_group: "example.com",
        subresource: None,
        object,
        code: 201,
        second: 9,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_drift_feed_and_objects_over_http() {
    let dir = temp_dir("query-api");
    let (out, store, token_file) = (dir.join("out.jsonl"), dir.join("history.db"), dir.join("token"));
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let query = format!("bearer_token_file = \"{}\"\nhistory = \"{}\"", token_file.display(), store.display());
    let running = start(
        &Pipeline::webhook()
            .cluster("kind-test")
            .options(r#"reorder_window = "50ms""#)
            .jsonl(&out)
            .query(&query)
            .toml(),
    )
    .await;
    let client = reqwest::Client::new();
    let api = Api {
        base: format!("http://{}", running.query_addr.expect("query listener")),
        client: client.clone(),
        doc: openapi(),
    };
    let audit = format!("http://{}/audit", running.webhook_addrs[0]);

    // Before any event: the cluster has no state; the history store has not been written.
    let (code, body) = api.get(&format!("/v1/verdict?parentUid={DEPLOY_UID}&user=bob")).await;
    assert_eq!(code, 404, "{body}");
    let (code, body) = api.get("/v1/drift").await;
    assert_eq!(code, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("does not exist"), "{body}");

    post(&client, &audit, &deployment_story("q")).await;
    let lines = wait_lines(&out, 4).await;
    assert_eq!(class_of(&lines, "q-ctrl-scales-back"), "drift");

    // The controller of a finished parent: drift; a person: a new origin.
    let verdict = |user: &str| {
        format!("/v1/verdict?parentUid={DEPLOY_UID}&user={user}&childKind=ReplicaSet.apps&childName=web-7d4b9c")
    };
    let (code, v) = api.get(&verdict(DEPLOY_CTRL)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["class"].as_str(), v["resolution"].as_str()), (Some("drift"), Some("unresolved")), "{v}");
    assert_eq!(
        v["parent"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web", "uid": DEPLOY_UID,
        "generation": 1, "observedGeneration": 1, "finished": true, "phase": "initialized"})
    );
    assert_eq!(v["actor"], json!({"isController": true, "controllers": [DEPLOY_CTRL]}));
    assert_eq!(v["child"]["uid"], RS_UID);
    assert_eq!(v["revertsPerson"], false, "bob's scale was reverted already: {v}");
    // A stream of 2024: the freshness says how old the state is.
    let f = &v["freshness"];
    assert_eq!(f["newestEventTime"], "2024-05-01T10:00:05.000000Z");
    assert_eq!(f["reorderLagSeconds"], 0.05);
    assert!(f["ageSeconds"].as_f64().unwrap() > 365.0 * 86400.0, "{f}");
    let (_, v) = api.get(&verdict("bob%40example.com")).await;
    assert_eq!((v["class"].as_str(), v["actor"]["isController"].as_bool()), (Some("origin"), Some(false)), "{v}");
    assert!(v["resolution"].is_null());
    // By kind, namespace and name, as a new child.
    let (code, v) = api
        .get(&format!(
            "/v1/verdict?cluster=kind-test&parentKind=Deployment&namespace=shop&parentName=web&user={DEPLOY_CTRL}"
        ))
        .await;
    assert_eq!((code, v["class"].as_str(), v["child"].is_null()), (200, Some("drift"), true), "{v}");

    // Mid-rollout: a spec change not observed yet makes the controller's writes expected.
    post(&client, &audit, &[spec_change("q-image", 1006, 6)]).await;
    wait_lines(&out, 5).await;
    let (_, v) = api.get(&verdict(DEPLOY_CTRL)).await;
    assert_eq!(
        (v["class"].as_str(), v["parent"]["generation"].as_i64(), v["parent"]["observedGeneration"].as_i64()),
        (Some("expected"), Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["freshness"]["newestEventTime"], "2024-05-01T10:00:06.000000Z");

    // Ambiguous by bare kind: 409 with the candidates; the group picks one.
    post(&client, &audit, &[widget_named_web()]).await;
    wait_lines(&out, 6).await;
    let (code, body) = api.get("/v1/verdict?parentKind=Deployment&namespace=shop&parentName=web&user=x").await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["candidates"].as_array().unwrap().len(), 2);
    let (code, _) = api.get("/v1/verdict?parentKind=Deployment.apps&namespace=shop&parentName=web&user=x").await;
    assert_eq!(code, 200);

    // Bad input.
    for (q, says) in [
        (format!("/v1/verdict?parentUid={DEPLOY_UID}"), "user is required"),
        ("/v1/verdict?user=bob".to_string(), "a parent is required"),
        (format!("/v1/verdict?parentUid={DEPLOY_UID}&parentKind=Deployment&parentName=web&user=bob"), "not both"),
        (format!("/v1/verdict?parentUid={DEPLOY_UID}&user=bob&childName=x"), "childName needs childKind"),
        (format!("/v1/verdict?parentUid={DEPLOY_UID}&user=bob&usr=x"), "unknown parameter \"usr\""),
        ("/v1/drift?since=yesterday".to_string(), "not an RFC 3339 time"),
        ("/v1/drift?limit=0".to_string(), "from 1 to 1000"),
        ("/v1/drift?limit=many".to_string(), "from 1 to 1000"),
        ("/v1/drift?after=nonsense".to_string(), "not a cursor"),
        ("/v1/drift?class=bad".to_string(), "must be one of"),
        ("/v1/drift?since=2024-05-02T00:00:00Z&until=2024-05-01T00:00:00Z".to_string(), "since must be before until"),
        ("/v1/objects?limit=1001".to_string(), "from 1 to 1000"),
    ] {
        let (code, body) = api.get(&q).await;
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body["error"].as_str().unwrap().contains(says), "{q}: {body}");
    }
    let (code, body) = api.get("/v1/verdict?parentUid=00000000-0000-4000-8000-00000000dead&user=bob").await;
    assert_eq!(code, 404);
    assert!(
        body["error"].as_str().unwrap().contains("no object of UID 00000000-0000-4000-8000-00000000dead"),
        "{body}"
    );
    let (code, body) =
        api.get(&format!("/v1/verdict?parentUid={DEPLOY_UID}&user=bob&childKind=Pod&childName=nope")).await;
    assert_eq!(code, 404, "{body}");
    let (code, _) = api.get("/v2/nothing").await;
    assert_eq!(code, 404);
    // Credentials: none, or wrong, is 401 before anything else is looked at.
    for token in [None, Some("wrong")] {
        let (code, body) = api.get_as(&format!("/v1/verdict?parentUid={DEPLOY_UID}&user=bob"), token).await;
        assert_eq!(code, 401, "{body}");
        assert_eq!(body["error"], "missing or wrong bearer token");
        assert_eq!(api.get_as("/v2/nothing", token).await.0, 401);
    }

    // The drift feed and the objects, from the history store.
    fill_history(&store, &wait_lines(&out, 6).await);
    let (code, page) = api.get("/v1/drift").await;
    assert_eq!(code, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.iter().map(|e| e["auditID"].as_str().unwrap()).collect::<Vec<_>>(), ["q-ctrl-scales-back"]);
    assert!(page["next"].is_null());
    let schema = enriched_schema();
    common::schema::check(&schema, &schema, &events[0], "$").unwrap();
    let ids = |page: &Value| {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["auditID"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&api.get("/v1/drift?class=origin").await.1), ["q-bob-scales-rs"]);
    assert_eq!(
        ids(&api.get("/v1/drift?revertsPerson=true&resolution=unresolved&kind=ReplicaSet.apps&namespace=shop&cluster=kind-test").await.1),
        ["q-ctrl-scales-back"]
    );
    for empty in [
        "/v1/drift?revertsPerson=false",
        "/v1/drift?namespace=other",
        "/v1/drift?kind=Pod",
        "/v1/drift?cluster=other",
        "/v1/drift?resolution=approved",
        "/v1/drift?until=2024-05-01T10:00:05Z",
        "/v1/drift?since=2024-05-01T10:00:05.000001Z",
    ] {
        assert!(ids(&api.get(empty).await.1).is_empty(), "{empty}");
    }
    assert_eq!(
        ids(&api.get("/v1/drift?since=2024-05-01T10:00:05Z&until=2024-05-01T10:00:06Z").await.1),
        ["q-ctrl-scales-back"]
    );
    // Paging: the three unowned writes, one per page, oldest first.
    let mut seen = Vec::new();
    let mut next = String::new();
    for _ in 0..5 {
        let (code, page) = api.get(&format!("/v1/drift?class=unowned&limit=1{next}")).await;
        assert_eq!(code, 200, "{page}");
        seen.extend(ids(&page));
        match page["next"].as_str() {
            Some(n) => next = format!("&after={n}"),
            None => break,
        }
    }
    assert_eq!(seen, ["q-create-deploy", "q-image", "q-widget"]);
    let (code, objects) = api.get("/v1/objects?kind=replicaset&namespace=shop&name=web-7d4b9c").await;
    assert_eq!(code, 200);
    assert_eq!(
        objects["objects"][0]["parent"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": DEPLOY_UID})
    );
    assert_eq!(
        (objects["objects"][0]["firstSeen"].as_str(), objects["truncated"].as_bool()),
        (Some("2024-05-01T10:00:01.000000Z"), Some(false))
    );
    // By UID (its last bytes on an index, then whole), in any cluster.
    let (code, objects) = api.get(&format!("/v1/objects?uid={DEPLOY_UID}")).await;
    assert_eq!(code, 200);
    assert_eq!(
        (objects["objects"].as_array().unwrap().len(), objects["objects"][0]["name"].as_str()),
        (1, Some("web"))
    );
    let (_, none) = api.get("/v1/objects?uid=0d0d0d0d-0000-4000-8000-00000000ffff").await;
    assert_eq!(none["objects"], json!([]));
    let (_, objects) = api.get("/v1/objects?name=web&limit=1").await;
    assert_eq!((objects["objects"].as_array().unwrap().len(), objects["truncated"].as_bool()), (1, Some(true)));
    assert_eq!(
        api.get("/v1/objects?kind=Deployment.example.com").await.1["objects"][0]["uid"],
        "0d0d0d0d-0000-4000-8000-000000000001"
    );

    // An object's story.
    let (code, story) = api.get("/v1/why?kind=ReplicaSet&namespace=shop&name=web-7d4b9c").await;
    assert_eq!(code, 200, "{story}");
    let writes: Vec<(&str, &str)> = story["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["event"]["auditID"].as_str().unwrap(), w["event"]["class"].as_str().unwrap()))
        .collect();
    assert_eq!(
        writes,
        [("q-create-rs", "initializing"), ("q-bob-scales-rs", "origin"), ("q-ctrl-scales-back", "drift")]
    );
    assert_eq!(story["writes"][1]["revertedBy"][0]["auditID"], "q-ctrl-scales-back");
    assert_eq!(story["historyFrom"], "2024-05-01T10:00:00.000000Z");
    let (_, story) = api.get(&format!("/v1/why?uid={DEPLOY_UID}")).await;
    assert_eq!(
        (story["children"][0]["uid"].as_str(), story["children"][0]["drift"].as_u64()),
        (Some(RS_UID), Some(1)),
        "{story}"
    );
    let (code, body) = api.get("/v1/why?kind=Deployment&namespace=shop&name=web").await;
    assert_eq!((code, body["candidates"].as_array().map(Vec::len)), (409, Some(2)), "{body}");
    let (code, body) = api.get("/v1/why?kind=Pod&namespace=shop&name=nope").await;
    assert_eq!(code, 404);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no Pod shop/nope in the history store (it keeps from 2024-05-01T10:00:00.000000Z)"),
        "{body}"
    );
    let (code, body) = api.get("/v1/why?kind=ReplicaSet&namespace=shop&name=web-7d4b9c&at=2024-04-01T00:00:00Z").await;
    assert_eq!(code, 410, "{body}");
    let (code, body) = api.get("/v1/why?kind=ReplicaSet").await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("name an object"), "{body}");
    assert_eq!(api.get("/v1/why?uid=x&at=noon").await.0, 400);

    // `why --server` against this API tells what `why --history` tells from the file.
    let (url, file) = (api.base.clone(), store.clone());
    let (remote, local, remote_missing, local_missing) = tokio::task::spawn_blocking(move || {
        let server =
            why::Source::Server(why::Server { url, token: Some(TOKEN.into()), tls: why::ClientTls::default() });
        let file = why::Source::Store(file);
        let q = StoryQuery {
            kind: "replicaset".into(),
            namespace: Some("shop".into()),
            name: Some("web-7d4b9c".into()),
            ..StoryQuery::default()
        };
        let missing = StoryQuery { kind: "Pod".into(), name: Some("nope".into()), ..StoryQuery::default() };
        let text = |s: Result<_, why::Error>| serde_json::to_string(&s.unwrap()).unwrap();
        (
            text(why::story(&server, &q)),
            text(why::story(&file, &q)),
            why::story(&server, &missing).unwrap_err().to_string(),
            why::story(&file, &missing).unwrap_err().to_string(),
        )
    })
    .await
    .unwrap();
    assert_eq!(remote, local);
    assert_eq!(remote_missing, local_missing);

    // Requests are counted by route and code.
    assert!(
        metric(running.metrics_addr, "kausality_query_requests_total", &["route=\"verdict\"", "code=\"200\""]).await
            >= 5.0
    );
    assert!(
        metric(running.metrics_addr, "kausality_query_requests_total", &["route=\"verdict\"", "code=\"401\""]).await
            >= 2.0
    );
    assert!(
        metric(running.metrics_addr, "kausality_query_requests_total", &["route=\"drift\"", "code=\"400\""]).await
            >= 6.0
    );

    let addr = running.query_addr.unwrap();
    let outcome = running.shutdown().await;
    assert!(outcome.clean);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the query listener stops with the pipeline");
    std::fs::remove_dir_all(&dir).ok();
}

/// A stream that is current and one that stopped a minute ago: the verdict of each says how
/// old its state is, per cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freshness_shows_a_stale_stream_per_cluster() {
    let running = start(&Pipeline::webhook().options(r#"reorder_window = "20ms""#).query("").toml()).await;
    let client = reqwest::Client::new();
    let api = Api { base: format!("http://{}", running.query_addr.unwrap()), client: client.clone(), doc: openapi() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    for (cluster, at) in [("live", now), ("stale", now - 60_000_000)] {
        let mut ev = Ev {
            audit_id: format!("{cluster}-create"),
            verb: "create",
            user: "alice@example.com".into(),
            resource: "deployments",
            api_group: "apps",
            subresource: None,
            object: deployment(1, 1000, 1, None),
            code: 201,
            second: 0,
        }
        .json();
        let ts = format_rfc3339_micros(at);
        ev["stageTimestamp"] = json!(ts);
        ev["requestReceivedTimestamp"] = json!(ts);
        let body = serde_json::to_vec(
            &json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": [ev]}),
        )
        .unwrap();
        let url = format!("http://{}/audit/{cluster}", running.webhook_addrs[0]);
        assert_eq!(client.post(url).body(body).send().await.unwrap().status(), 200);
    }
    let ask = |cluster: &str| format!("/v1/verdict?cluster={cluster}&parentUid={DEPLOY_UID}&user=alice");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (live, stale) = loop {
        let (a, b) = (api.get_as(&ask("live"), None).await, api.get_as(&ask("stale"), None).await);
        if (a.0, b.0) == (200, 200) || std::time::Instant::now() > deadline {
            break (a.1, b.1);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(live["class"], "initializing", "{live}");
    assert_eq!(live["freshness"]["reorderLagSeconds"], 0.02);
    let live_age = live["freshness"]["ageSeconds"].as_f64().unwrap();
    let stale_age = stale["freshness"]["ageSeconds"].as_f64().unwrap();
    assert!((0.0..30.0).contains(&live_age), "{live}");
    assert!((60.0..90.0).contains(&stale_age), "{stale}");
    assert_eq!(stale["freshness"]["newestEventTime"], format_rfc3339_micros(now - 60_000_000));
    // Without a history store, its routes say what to configure.
    let (code, body) = api.get_as("/v1/objects", None).await;
    assert_eq!(code, 503);
    assert!(body["error"].as_str().unwrap().contains("history"), "{body}");
    running.shutdown().await;
}

/// Every parameter a route takes is in the document, and nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_exactly_the_parameters_each_route_takes() {
    let running = start(&Pipeline::webhook().query("").toml()).await;
    let api =
        Api { base: format!("http://{}", running.query_addr.unwrap()), client: reqwest::Client::new(), doc: openapi() };
    // The checker is not lenient: an answer short of a field, or with one undeclared, fails.
    let verdict = &api.doc["components"]["schemas"]["Verdict"];
    assert!(common::schema::check(verdict, &api.doc, &json!({"class": "drift"}), "$").unwrap_err().contains("missing"));
    let error = &api.doc["components"]["schemas"]["Error"];
    assert!(common::schema::check(error, &api.doc, &json!({"error": "x", "extra": 1}), "$")
        .unwrap_err()
        .contains("undeclared field extra"));
    for (route, op) in api.doc["paths"].as_object().unwrap() {
        let mut documented: Vec<&str> =
            op["get"]["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        documented.sort();
        let (code, body) = api.get_as(&format!("{route}?undocumented=1"), None).await;
        assert_eq!(code, 400);
        let msg = body["error"].as_str().unwrap();
        let mut taken: Vec<&str> = msg.split("this route takes ").nth(1).unwrap().split(", ").collect();
        taken.sort();
        assert_eq!(taken, documented, "{route}");
    }
    running.shutdown().await;
}

/// A pipeline whose query API reads the history store at `store`, without a token.
async fn start_reading(store: &Path) -> Running {
    start(&Pipeline::webhook().query(&format!("history = \"{}\"", store.display())).toml()).await
}

/// An enriched event of the ReplicaSet shop/web, as `fill_history` takes it.
fn rs_event(audit_id: &str, second: u32, class: &str) -> Value {
    json!({
        "cluster": "c1", "auditID": audit_id, "stageTimestamp": format!("2024-05-01T10:00:{second:02}.000000Z"),
        "verb": "update", "user": DEPLOY_CTRL, "class": class, "resolution": (class == "drift").then_some("unresolved"),
        "object": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "shop", "name": "web", "uid": RS_UID},
        "parent": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": DEPLOY_UID},
    })
}

fn audit_ids(page: &Value) -> Vec<String> {
    page["events"].as_array().unwrap().iter().map(|e| e["auditID"].as_str().unwrap().to_string()).collect()
}

/// Rows whose event cannot be read (not JSON, not UTF-8): the drift feed leaves them out and
/// pages past them, the story tells them from their columns, and both count them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_rows_are_skipped_counted_and_paged_past() {
    let dir = temp_dir("query-unreadable");
    let store = dir.join("history.db");
    fill_history(&store, &(1..=4).map(|i| rs_event(&format!("x-{i}"), i, "drift")).collect::<Vec<_>>());
    let c = history::open(&store, Mode::Write).unwrap();
    c.execute("UPDATE mutations SET event = '{\"auditID\": \"x-2\", trunc' WHERE audit_id = 'x-2'", []).unwrap();
    c.execute("UPDATE mutations SET event = X'80FF7B7D' WHERE audit_id = 'x-3'", []).unwrap();
    drop(c);
    let running = start_reading(&store).await;
    let api =
        Api { base: format!("http://{}", running.query_addr.unwrap()), client: reqwest::Client::new(), doc: openapi() };

    let (code, page) = api.get_as("/v1/drift", None).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(audit_ids(&page), ["x-1", "x-4"]);
    assert!(page["next"].is_null(), "{page}");
    // One event a page: the pages that hold only an unreadable row are empty, and go on.
    let (mut seen, mut pages, mut after) = (Vec::new(), 0, String::new());
    loop {
        let (code, page) = api.get_as(&format!("/v1/drift?limit=1{after}"), None).await;
        assert_eq!(code, 200, "{page}");
        seen.extend(audit_ids(&page));
        pages += 1;
        match page["next"].as_str() {
            Some(n) => after = format!("&after={n}"),
            None => break,
        }
        assert!(pages < 10, "the feed does not end");
    }
    assert_eq!((seen, pages), (vec!["x-1".to_string(), "x-4".to_string()], 4));
    const UNREADABLE: &str = "kausality_history_unreadable_rows_total";
    assert_eq!(metric(running.metrics_addr, UNREADABLE, &["route=\"drift\""]).await, 4.0);

    let (code, story) = api.get_as("/v1/why?kind=ReplicaSet&namespace=shop&name=web", None).await;
    assert_eq!(code, 200, "{story}");
    let writes = story["writes"].as_array().unwrap();
    let told: Vec<(&str, bool)> =
        writes.iter().map(|w| (w["event"]["auditID"].as_str().unwrap(), w["event"]["unreadable"] == true)).collect();
    assert_eq!(told, [("x-1", false), ("x-2", true), ("x-3", true), ("x-4", false)]);
    assert_eq!(metric(running.metrics_addr, UNREADABLE, &["route=\"why\""]).await, 2.0);
    running.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}

/// The answers every route can give are in the document with a JSON body: a request with
/// another method than GET (405), a target longer than the API reads (414), and the token
/// checked before either; a UTC offset out of range is a 400 that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_documented_json_and_the_token_comes_first() {
    let dir = temp_dir("query-answers");
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let running =
        start(&Pipeline::webhook().query(&format!("bearer_token_file = \"{}\"", token_file.display())).toml()).await;
    let api =
        Api { base: format!("http://{}", running.query_addr.unwrap()), client: reqwest::Client::new(), doc: openapi() };
    let long = format!("/v1/drift?cluster={}", "c".repeat(9000));
    for route in ["/v1/verdict", "/v1/objects", "/v1/drift", "/v1/why"] {
        // Without the token, nothing else is looked at: not the method, not the size.
        for token in [None, Some("wrong")] {
            for method in [reqwest::Method::POST, reqwest::Method::DELETE] {
                let (code, body) = api.request(method, route, token).await;
                assert_eq!((code, &body["error"]), (401, &json!("missing or wrong bearer token")), "{route}");
            }
            let (code, _) = api.get_as(&format!("{route}{}", &long["/v1/drift".len()..]), token).await;
            assert_eq!(code, 401, "{route}");
        }
        let (code, body) = api.request(reqwest::Method::POST, route, Some(TOKEN)).await;
        assert_eq!(code, 405, "{route}: {body}");
        assert!(body["error"].as_str().unwrap().contains("only GET"), "{body}");
        let (code, body) = api.get(&format!("{route}{}", &long["/v1/drift".len()..])).await;
        assert_eq!(code, 414, "{route}: {body}");
        assert!(body["error"].as_str().unwrap().contains("8192 bytes"), "{body}");
        // What any route can answer is in its document.
        let responses = api.doc["paths"][route]["get"]["responses"].as_object().unwrap();
        for code in ["200", "400", "401", "405", "414", "500", "503"] {
            let schema = &responses.get(code).unwrap_or_else(|| panic!("{route} does not list {code}"))["content"]
                ["application/json"]["schema"];
            assert!(!schema.is_null(), "{route} {code} has no JSON body");
        }
    }
    let r = api.client.post(format!("{}/v1/drift", api.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    // HEAD is GET without the body.
    let r = api.client.head(format!("{}/v1/objects", api.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);

    for (q, says) in [
        ("/v1/drift?since=2024-05-01T10:00:00%2B25:00", "offset +25:00"),
        ("/v1/drift?until=2024-05-01T10:00:00-00:60", "offset -00:60"),
        ("/v1/why?uid=x&at=2024-05-01T10:00:00%2B24:00", "offset +24:00"),
        ("/v1/drift?since=2024-02-30T10:00:00Z", "2024-02 has 29 days"),
    ] {
        let (code, body) = api.get(q).await;
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body["error"].as_str().unwrap().contains(says), "{q}: {body}");
    }
    // The offsets there are.
    for q in [
        "/v1/drift?since=2024-05-01T10:00:00%2B14:00",
        "/v1/drift?since=2024-05-01T10:00:00-23:59",
        "/v1/drift?since=2024-02-29T10:00:00Z",
    ] {
        assert_eq!(api.get(q).await.0, 503, "{q}");
    }
    running.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes reach the store out of time order (several API servers, each with its own batches):
/// a write stored after a page was read but stamped before its last event still comes, on a
/// later page, and a client that read the last page goes on from its `cursor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_feed_pages_in_storage_order_and_never_skips_a_late_write() {
    let dir = temp_dir("query-late");
    let store = dir.join("history.db");
    fill_history(
        &store,
        &[rs_event("d-10", 10, "drift"), rs_event("d-20", 20, "drift"), rs_event("d-40", 40, "drift")],
    );
    let running = start_reading(&store).await;
    let api =
        Api { base: format!("http://{}", running.query_addr.unwrap()), client: reqwest::Client::new(), doc: openapi() };
    let page = |after: Option<String>| {
        let api = &api;
        async move {
            let q = match after {
                Some(a) => format!("/v1/drift?limit=1&after={a}"),
                None => "/v1/drift?limit=1".to_string(),
            };
            let (code, page) = api.get_as(&q, None).await;
            assert_eq!(code, 200, "{page}");
            page
        }
    };
    let mut seen = Vec::new();
    let first = page(None).await;
    seen.extend(audit_ids(&first));
    let second = page(first["next"].as_str().map(String::from)).await;
    seen.extend(audit_ids(&second));
    // Stored now, stamped before what the client has read.
    fill_history(&store, &[rs_event("d-15-late", 15, "drift")]);
    let mut after = second["next"].as_str().map(String::from);
    let mut last = Value::Null;
    while let Some(a) = after {
        last = page(Some(a)).await;
        seen.extend(audit_ids(&last));
        after = last["next"].as_str().map(String::from);
    }
    assert_eq!(seen, ["d-10", "d-20", "d-40", "d-15-late"]);
    // The last page has no next page, and says where it ended: asked again later from there,
    // the feed gives what was stored since, whatever its time.
    assert!(last["next"].is_null(), "{last}");
    let resume = last["cursor"].as_str().expect("a cursor on the last page").to_string();
    assert_eq!(audit_ids(&page(Some(resume.clone())).await), Vec::<String>::new());
    fill_history(&store, &[rs_event("d-05-later", 5, "drift"), rs_event("o-06", 6, "origin")]);
    let (code, more) = api.get_as(&format!("/v1/drift?after={resume}"), None).await;
    assert_eq!((code, audit_ids(&more)), (200, vec!["d-05-later".to_string()]), "{more}");
    // Filters by time still hold, in storage order.
    let (_, timed) = api.get_as("/v1/drift?since=2024-05-01T10:00:10Z&until=2024-05-01T10:00:40Z", None).await;
    assert_eq!(audit_ids(&timed), ["d-10", "d-20", "d-15-late"]);
    running.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
