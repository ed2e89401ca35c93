//! `why --server URL`: the story from the query API of a running service (`GET /v1/why`,
//! docs/query-api.md), with the same messages as a store read on disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::Error;
use crate::decode::time::format_rfc3339_micros;
use crate::history::story::{ambiguous_message, not_found_message, ObjectRef, Story, StoryQuery};

/// How long a question may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A query API to ask.
pub struct Server {
    /// Its base URL (`http://127.0.0.1:9091`); `/v1/why` is appended.
    pub url: String,
    /// Sent as `Authorization: Bearer ...` when the API requires one.
    pub token: Option<String>,
    /// HTTPS: whom to trust and what to show.
    pub tls: ClientTls,
}

/// HTTPS to a query API with its own CA or client certificates (its `[query.tls]`): PEM files.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// CA certificates trusted besides the system's (a private CA that signed the API's).
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, for an API with `client_ca`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
}

impl ClientTls {
    fn apply(&self, mut b: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, Error> {
        let read = |flag: &str, path: &Path| {
            std::fs::read(path).map_err(|e| Error::Server(format!("cannot read {flag} {}: {e}", path.display())))
        };
        if let Some(ca) = &self.ca {
            let pem = read("--ca", ca)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::Server(format!("--ca {}: {e}", ca.display())))?;
            if certs.is_empty() {
                return Err(Error::Server(format!("--ca {}: no PEM certificate in it", ca.display())));
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let mut pem = read("--cert", cert)?;
                pem.push(b'\n');
                pem.extend(read("--key", key)?);
                let id = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    Error::Server(format!(
                        "--cert {} with --key {}: not a PEM certificate and its private key: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?;
                b = b.identity(id);
            }
            (None, None) => {}
            _ => {
                return Err(Error::Server(
                    "--cert and --key go together: the client certificate and its private key".into(),
                ))
            }
        }
        Ok(b)
    }
}

/// An error answer: `{"error": "...", "candidates": [...]}` (candidates with a 409).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    error: Option<String>,
    candidates: Option<Vec<ObjectRef>>,
}

impl Server {
    /// `GET {url}/v1/why?...`.
    pub fn story(&self, q: &StoryQuery) -> Result<Story, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Server(format!("starting the async runtime: {e}")))?;
        let (status, body) = runtime.block_on(self.get(q))?;
        answer(status, &body, q, &self.url)
    }

    async fn get(&self, q: &StoryQuery) -> Result<(u16, Vec<u8>), Error> {
        let url = format!("{}/v1/why", self.url.trim_end_matches('/'));
        let mut params: Vec<(&str, String)> = Vec::new();
        let mut put = |k, v: Option<&String>| {
            if let Some(v) = v {
                params.push((k, v.clone()));
            }
        };
        put("cluster", q.cluster.as_ref());
        put("kind", Some(&q.kind).filter(|k| !k.is_empty()));
        put("namespace", q.namespace.as_ref());
        put("name", q.name.as_ref());
        put("uid", q.uid.as_ref());
        put("at", q.at_us.map(format_rfc3339_micros).as_ref());
        // The server tells as many by default.
        put("limit", q.limit.filter(|l| *l != crate::history::story::DEFAULT_WRITES).map(|l| l.to_string()).as_ref());
        put("before", q.before.as_ref());
        let client = self
            .tls
            .apply(reqwest::Client::builder().timeout(TIMEOUT))?
            .build()
            .map_err(|e| Error::Server(format!("HTTP client: {e}")))?;
        let mut req = client.get(&url).query(&params);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let unreachable = |e: reqwest::Error| {
            let mut m = format!("cannot ask {url}: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                m.push_str(&format!(": {s}"));
                source = s.source();
            }
            Error::Server(m)
        };
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(unreachable)?;
        Ok((status, body.to_vec()))
    }
}

/// The story of a 200, or the message an error answer stands for: the same words as a store
/// read on disk gives (the query API writes them with `history::story::explain`).
fn answer(status: u16, body: &[u8], q: &StoryQuery, url: &str) -> Result<Story, Error> {
    if status == 200 {
        return serde_json::from_slice(body)
            .map_err(|e| Error::Server(format!("{url} answered a story that cannot be read: {e}")));
    }
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let said = parsed
        .error
        .clone()
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_string());
    Err(match status {
        404 => Error::NoStory(parsed.error.unwrap_or_else(|| not_found_message(q, None))),
        409 => Error::NoStory(match parsed.candidates {
            Some(c) if !c.is_empty() => ambiguous_message(q, &c),
            _ => said,
        }),
        400 | 410 => Error::NoStory(said),
        401 | 403 => Error::Server(format!("{url} refused the question (HTTP {status}: {said}); give its bearer token with --token or KAUSALITY_QUERY_TOKEN")),
        _ => Error::Server(format!("{url} answered HTTP {status}: {said}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn q() -> StoryQuery {
        StoryQuery {
            kind: "Pod".into(),
            namespace: Some("a".into()),
            name: Some("p".into()),
            at_us: Some(0),
            ..StoryQuery::default()
        }
    }

    fn candidate(ns: &str) -> ObjectRef {
        ObjectRef {
            cluster: "default".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: ns.into(),
            name: "p".into(),
            uid: format!("u-{ns}"),
            parent: None,
            first_seen: "2026-11-20T10:00:00.000000Z".into(),
            last_seen: "2026-11-20T10:00:00.000000Z".into(),
            deleted: None,
        }
    }

    #[test]
    fn error_answers_give_the_messages_of_the_store() {
        let q = q();
        let msg = |status, body: &str| match answer(status, body.as_bytes(), &q, "http://x") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a story from HTTP {status}"),
        };
        assert_eq!(
            msg(404, r#"{"error":"no Pod a/p in the history store (it keeps from X)"}"#),
            "no Pod a/p in the history store (it keeps from X)"
        );
        // Without a message of its own, the words of the local path.
        assert_eq!(msg(404, ""), not_found_message(&q, None));
        let candidates = vec![candidate("a"), candidate("b")];
        let body = serde_json::json!({"error": "ambiguous", "candidates": candidates}).to_string();
        assert_eq!(msg(409, &body), ambiguous_message(&q, &candidates));
        assert_eq!(msg(409, r#"{"error":"2 objects match"}"#), "2 objects match");
        assert_eq!(
            msg(410, r#"{"error":"the history store reaches back to T only"}"#),
            "the history store reaches back to T only"
        );
        assert_eq!(msg(400, r#"{"error":"at: not a time"}"#), "at: not a time");
        let m = msg(401, r#"{"error":"a bearer token is required"}"#);
        assert!(m.contains("HTTP 401: a bearer token is required") && m.contains("--token"), "{m}");
        assert_eq!(msg(500, "boom"), "http://x answered HTTP 500: boom");
        assert!(msg(200, "{not json").starts_with("http://x answered a story that cannot be read"));
        for status in [404, 409, 410, 400] {
            assert!(matches!(answer(status, b"{}", &q, "u"), Err(Error::NoStory(_))), "{status}");
        }
    }

    /// A server on loopback that answers one request with `status` and `body`, and hands back
    /// the request it got.
    fn serve_once(status: u16, body: String) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            let resp = format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            conn.write_all(resp.as_bytes()).unwrap();
            String::from_utf8_lossy(&req).to_string()
        });
        (url, handle)
    }

    #[test]
    fn asks_v1_why_with_the_question_and_the_token_and_reads_the_story() {
        let store = crate::history::story::testing::Store::new();
        let o = crate::history::story::testing::obj("Pod", "a", "p", "u-p");
        let id = store.object(&o);
        store.write(id, &o, &crate::history::story::testing::w(1_000_000, "x", "create", "alice", "unowned"));
        let story = crate::history::story::build(&store.conn, &q()).unwrap_err();
        // at 0 is before the store: ask without it.
        assert!(matches!(story, crate::history::story::StoryError::BeforeHistory { .. }));
        let mut ask = q();
        ask.at_us = Some(2_000_000);
        let local = crate::history::story::build(&store.conn, &ask).unwrap();
        let (url, handle) = serve_once(200, serde_json::to_string(&local).unwrap());
        let server = Server { url, token: Some("s3cret".into()), tls: ClientTls::default() };
        let got = server.story(&ask).unwrap();
        assert_eq!(serde_json::to_string(&got).unwrap(), serde_json::to_string(&local).unwrap());
        let req = handle.join().unwrap();
        let first = req.lines().next().unwrap();
        assert_eq!(first, "GET /v1/why?kind=Pod&namespace=a&name=p&at=1970-01-01T00%3A00%3A02.000000Z HTTP/1.1");
        assert!(req.to_ascii_lowercase().contains("authorization: bearer s3cret"), "{req}");
        // No token: no header.
        let (url, handle) = serve_once(404, r#"{"error":"no Pod a/p"}"#.into());
        let e = Server { url, token: None, tls: ClientTls::default() }.story(&ask).unwrap_err();
        assert_eq!(e.to_string(), "no Pod a/p");
        assert!(!handle.join().unwrap().to_ascii_lowercase().contains("authorization"));
    }

    #[test]
    fn an_unreachable_server_says_so() {
        // A port that was free a moment ago.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = Server { url: format!("http://127.0.0.1:{port}"), token: None, tls: ClientTls::default() }
            .story(&q())
            .unwrap_err();
        let m = e.to_string();
        assert!(m.starts_with(&format!("cannot ask http://127.0.0.1:{port}/v1/why")), "{m}");
        assert!(m.to_lowercase().contains("connect"), "{m}");
    }
}
