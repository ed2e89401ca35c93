//! The webhook's bounds against slow, idle, oversized and unauthenticated clients, black-box
//! over raw TCP on 127.0.0.1: header, body and idle timeouts, the connection cap (with the
//! metrics listener still answering), the budget of body bytes read at once, `Expect:
//! 100-continue` with a length over the limit, and the token checked before anything else.

mod serve_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serve_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn pipeline(webhook_extra: &str, out: &std::path::Path) -> String {
    Pipeline::webhook().options(r#"reorder_window = "10ms""#).webhook_with(webhook_extra).jsonl(out).toml()
}

/// Reads until the end of the response head, EOF or `within`; returns what came.
async fn read_head(s: &mut TcpStream, within: Duration) -> String {
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// True when the server closes the connection within `within` (EOF or reset).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

fn request_head(path: &str, extra: &str) -> String {
    format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_with_a_length_over_the_limit_gets_413_and_no_invitation() {
    let dir = temp_dir("expect");
    let running = start(&pipeline("max_body_bytes = 1000", &dir.join("out.jsonl"))).await;
    let addr = running.webhook_addrs[0];
    for length in [1_099_511_627_776u64, 1001] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(
            request_head("/audit", &format!("Content-Length: {length}\r\nExpect: 100-continue\r\n")).as_bytes(),
        )
        .await
        .unwrap();
        let head = read_head(&mut s, Duration::from_secs(5)).await;
        assert!(head.starts_with("HTTP/1.1 413"), "Content-Length {length}: {head:?}");
    }
    // Within the limit, the client is invited to send.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request_head("/audit", "Content-Length: 1000\r\nExpect: 100-continue\r\n").as_bytes()).await.unwrap();
    let head = read_head(&mut s, Duration::from_secs(5)).await;
    assert!(head.starts_with("HTTP/1.1 100"), "{head:?}");
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_checked_before_the_path_is_judged() {
    let dir = temp_dir("auth-first");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let running =
        start(&pipeline(&format!("bearer_token_file = \"{}\"", token.display()), &dir.join("out.jsonl"))).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", running.webhook_addrs[0]);
    let body = event_list(&deployment_story("a")[..1]);
    for path in ["/audit/bad!name", "/audit/", "/elsewhere", "/audit/ok"] {
        let r = client.post(format!("{base}{path}")).body(body.clone()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path} without the token");
    }
    let with = |path: &str| client.post(format!("{base}{path}")).bearer_auth("s3cret").body(body.clone()).send();
    assert_eq!(with("/audit/bad!name").await.unwrap().status().as_u16(), 400);
    assert_eq!(with("/elsewhere").await.unwrap().status().as_u16(), 404);
    assert_eq!(with("/audit/ok").await.unwrap().status().as_u16(), 200);
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_slow_bodies_and_idle_connections_are_cut() {
    let dir = temp_dir("timeouts");
    let extra = "header_read_timeout = \"300ms\"\nbody_read_timeout = \"500ms\"\nidle_timeout = \"400ms\"";
    let running = start(&pipeline(extra, &dir.join("out.jsonl"))).await;
    let addr = running.webhook_addrs[0];

    // Nothing sent at all, and headers trickled a byte every 100 ms: closed.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    let head = request_head("/audit", "Content-Length: 10\r\n");
    let started = Instant::now();
    for b in head.as_bytes().iter().take(12) {
        if trickle.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed_within(&mut trickle, Duration::from_secs(3)).await, "trickled headers");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(closed_within(&mut silent, Duration::from_secs(1)).await, "a connection that never sends");
    assert!(
        wait_metric(
            running.metrics_addr,
            "kausality_connection_timeouts_total",
            &["listener=\"webhook\"", "phase=\"headers\""],
            2.0
        )
        .await
            >= 2.0
    );

    // A body trickled a byte every 100 ms: 408 with Retry-After once body_read_timeout is over.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(request_head("/audit", "Content-Length: 100\r\n").as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        for _ in 0..30 {
            if slow.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        slow
    });
    let mut slow = writer.await.unwrap();
    let head = read_head(&mut slow, Duration::from_secs(3)).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head:?}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head:?}");
    assert_eq!(metric(running.metrics_addr, "kausality_connection_timeouts_total", &["phase=\"body\""]).await, 1.0);

    // A kept-alive connection serves a second request within idle_timeout, and is closed after.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    let body = event_list(&deployment_story("idle")[..1]);
    for round in 0..2 {
        kept.write_all(request_head("/audit", &format!("Content-Length: {}\r\n", body.len())).as_bytes())
            .await
            .unwrap();
        kept.write_all(&body).await.unwrap();
        let head = read_head(&mut kept, Duration::from_secs(5)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "round {round}: {head:?}");
        // The answer's body: read it off so that the next read sees only the close.
        let mut rest = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(100), kept.read(&mut rest)).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(closed_within(&mut kept, Duration::from_secs(2)).await, "idle past idle_timeout");
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_metrics_still_answer() {
    let dir = temp_dir("conn-cap");
    let running = start(&pipeline("max_connections = 8", &dir.join("out.jsonl"))).await;
    let addr = running.webhook_addrs[0];
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Let the server take them all in before the next ones come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(TcpStream::connect(addr).await.unwrap());
    }
    let started = Instant::now();
    let metrics: SocketAddr = running.metrics_addr;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let scrape = client.get(format!("http://{metrics}/metrics")).send().await.expect("metrics answer during the flood");
    assert_eq!(scrape.status().as_u16(), 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(closed_within(&mut flood[199], Duration::from_secs(2)).await, "over the cap: closed at once");
    assert!(
        wait_metric(metrics, "kausality_connections_refused_total", &["listener=\"webhook\""], 200.0).await >= 200.0
    );
    // The held ones are still served.
    held[0].write_all(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(read_head(&mut held[0], Duration::from_secs(5)).await.starts_with("HTTP/1.1 404"));
    drop(held);
    drop(flood);
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_in_flight_budget_get_503_until_room_is_back() {
    let dir = temp_dir("budget");
    let running =
        start(&pipeline("max_body_bytes = 100000\nmax_body_bytes_in_flight = 150000", &dir.join("out.jsonl"))).await;
    let addr = running.webhook_addrs[0];
    // One unfinished body holds 100,000 of the 150,000 bytes.
    let mut unfinished = TcpStream::connect(addr).await.unwrap();
    unfinished.write_all(request_head("/audit", "Content-Length: 100000\r\n").as_bytes()).await.unwrap();
    unfinished.write_all(b"{").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/audit");
    let mut big = event_list(&deployment_story("big")[..1]);
    big.resize(60_000, b' ');
    let r = client.post(&url).body(big.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers().get("retry-after").unwrap(), "1");
    // A small one still fits.
    let small = event_list(&deployment_story("small")[..1]);
    assert_eq!(client.post(&url).body(small).send().await.unwrap().status().as_u16(), 200);
    // Once the unfinished body is gone, its share is back.
    drop(unfinished);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let code = client.post(&url).body(big.clone()).send().await.unwrap().status().as_u16();
        if code == 200 || Instant::now() > deadline {
            assert_eq!(code, 200);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running.shutdown().await.clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One client of the query API that opens connections and never sends a request holds at most
/// `max_connections_per_client` of them: another client is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_every_connection_of_the_query_api() {
    let running = start(&Pipeline::webhook().query("max_connections = 8\nmax_connections_per_client = 3").toml()).await;
    let addr = running.query_addr.expect("the query API listens");
    let from = |ip: [u8; 4]| async move {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((ip, 0))).unwrap();
        s.connect(addr).await.unwrap()
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(from([127, 0, 0, 1]).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = from([127, 0, 0, 1]).await;
    assert!(closed_within(&mut fourth, Duration::from_secs(2)).await, "a fourth from the same client: closed at once");
    assert!(
        wait_metric(running.metrics_addr, "kausality_connections_refused_total", &["listener=\"query\""], 1.0).await
            >= 1.0
    );
    // Another client (another loopback address) is answered.
    let mut other = from([127, 0, 0, 2]).await;
    other.write_all(b"GET /v1/objects HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let head = read_head(&mut other, Duration::from_secs(5)).await;
    assert!(head.starts_with("HTTP/1.1 503"), "answered (no history store here): {head}");
    // Once one of its connections is gone, the first client gets one again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = from([127, 0, 0, 1]).await;
    again.write_all(b"GET /v1/objects HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(read_head(&mut again, Duration::from_secs(5)).await.starts_with("HTTP/1.1 503"));
    drop(held);
    running.shutdown().await;
}
