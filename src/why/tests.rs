use serde_json::json;

use super::*;
use crate::history::story::build;
use crate::history::story::testing::{obj, w, Store};

const S: i64 = 1_000_000;
/// 2026-11-20T10:00:00Z
const T0: i64 = 1_795_168_800 * S;
const DS: &str = "system:serviceaccount:kube-system:deployment-controller";
const RSC: &str = "system:serviceaccount:kube-system:replicaset-controller";

fn q(kind: &str, ns: &str, name: &str) -> StoryQuery {
    StoryQuery { kind: kind.into(), namespace: Some(ns.into()), name: Some(name.into()), ..StoryQuery::default() }
}

/// The lines of `text` that contain every one of `parts`.
fn lines_with<'a>(text: &'a str, parts: &[&str]) -> Vec<&'a str> {
    text.lines().filter(|l| parts.iter().all(|p| l.contains(p))).collect()
}

/// A ReplicaSet alice scaled (the deployment controller scales it back: drift), with a pod
/// alice deleted and its replacement (drift), all under Deployment web.
fn shop() -> Store {
    let store = Store::new();
    let dep = obj("Deployment", "shop", "web", "u-dep");
    let rs = obj("ReplicaSet", "shop", "web-7d9f", "u-rs").owned_by(&dep);
    store.object(&dep);
    let r = store.object(&rs);
    let mut create = w(T0 + S, "a-rs-create", "create", DS, "expected");
    create.trace = vec![("Deployment", "web", 2, "alice", T0), ("ReplicaSet", "web-7d9f", 1, DS, T0 + S)];
    create.parent_state = Some((2, 1, false, "initialized"));
    store.write(r, &rs, &create);
    let mut scale = w(T0 + 100 * S, "a-scale", "patch", "alice", "origin");
    scale.subresource = Some("scale");
    scale.trace = vec![("ReplicaSet", "web-7d9f", 2, "alice", T0 + 100 * S)];
    scale.parent_state = Some((2, 2, true, "initialized"));
    store.write(r, &rs, &scale);
    let mut back = w(T0 + 101 * S, "a-scale-back", "update", DS, "drift");
    back.reverts = vec![("a-scale", "alice", "ReplicaSet", "web-7d9f", vec![("spec.replicas", json!(12), json!(14))])];
    back.trace = vec![("ReplicaSet", "web-7d9f", 3, DS, T0 + 101 * S)];
    back.parent_state = Some((2, 2, true, "initialized"));
    store.write(r, &rs, &back);
    let gone = obj("Pod", "shop", "web-7d9f-aaaaa", "u-pod-a").owned_by(&rs);
    let g = store.object(&gone);
    store.write(g, &gone, &w(T0 + 200 * S, "a-pod-a-delete", "delete", "alice", "origin"));
    let repl = obj("Pod", "shop", "web-7d9f-bbbbb", "u-pod-b").owned_by(&rs);
    let b = store.object(&repl);
    let mut replace = w(T0 + 201 * S, "a-pod-b-create", "create", RSC, "drift");
    replace.reverts = vec![("a-pod-a-delete", "alice", "Pod", "web-7d9f-aaaaa", vec![])];
    replace.resolution = Some("approved");
    replace.policy = Some("pods-come-back");
    store.write(b, &repl, &replace);
    store
}

#[test]
fn the_replicaset_tells_the_scale_the_drift_that_undid_it_and_the_chain() {
    let store = shop();
    // Short names are kubectl's, not the store's.
    assert!(matches!(
        build(&store.conn, &q("rs", "shop", "web-7d9f")),
        Err(crate::history::story::StoryError::NotFound)
    ));
    let story = build(&store.conn, &q("replicaset", "shop", "web-7d9f")).unwrap();
    let text = render(&story, Style { color: false });
    assert!(!text.contains('\x1b'), "no colours when asked for none");
    assert_eq!(text.lines().next(), Some("ReplicaSet shop/web-7d9f"));
    assert_eq!(lines_with(&text, &["owner", "Deployment/web", "u-dep"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["writes", "3 classified", "drift 1", "expected 1", "origin 1"]).len(), 1, "{text}");
    // Newest last: the create, alice's scale, the scale-back.
    let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("2026-")).collect();
    assert_eq!(
        heads,
        [
            format!("2026-11-20T10:00:01.000000Z  expected  create  by {DS}"),
            "2026-11-20T10:01:40.000000Z  origin  patch scale  by alice".to_string(),
            format!("2026-11-20T10:01:41.000000Z  drift  update  by {DS}"),
        ]
    );
    // The create's chain back to alice, hop by hop.
    assert_eq!(
        lines_with(&text, &["trace", "Deployment/web gen 2 by alice at 2026-11-20T10:00:00.000000Z"]).len(),
        1,
        "{text}"
    );
    assert_eq!(lines_with(&text, &["→ ReplicaSet/web-7d9f gen 1 by", DS]).len(), 1, "{text}");
    assert_eq!(
        lines_with(&text, &["parent", "Deployment/web: generation 2, observed 1 (status), not finished, initialized"])
            .len(),
        1,
        "{text}"
    );
    // Alice's scale: undone by the deployment controller's drift.
    assert_eq!(
        lines_with(&text, &["undone", &format!("by {DS} at 2026-11-20T10:01:41.000000Z: drift  auditID a-scale-back")])
            .len(),
        1,
        "{text}"
    );
    // The drift: what it reverts, field by field.
    assert_eq!(lines_with(&text, &["class", "drift, unresolved"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["reverts", "alice's patch at", "auditID a-scale"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["spec.replicas: 12 → 14, put back"]).len(), 1, "{text}");
    // The children: the replacement pod's drift.
    let tree = text.split("children with drift").nth(1).expect("a children section");
    assert_eq!(
        lines_with(
            tree,
            &["Pod/web-7d9f-bbbbb", "drift 1", "last at 2026-11-20T10:03:21.000000Z by", RSC, "(approved)"]
        )
        .len(),
        1,
        "{text}"
    );
    assert!(!tree.contains("aaaaa"), "the deleted pod never drifted: {tree}");
}

#[test]
fn a_deleted_pod_tells_who_deleted_it_and_what_replaced_it() {
    let store = shop();
    let story = build(&store.conn, &q("pod", "shop", "web-7d9f-aaaaa")).unwrap();
    let text = render(&story, Style { color: false });
    assert_eq!(
        lines_with(&text, &["deleted", "2026-11-20T10:03:20.000000Z by alice", "auditID a-pod-a-delete"]).len(),
        1,
        "{text}"
    );
    assert_eq!(lines_with(&text, &["origin", "delete", "by alice"]).len(), 1, "{text}");
    assert_eq!(
        lines_with(
            &text,
            &[
                "undone",
                "by",
                RSC,
                "at 2026-11-20T10:03:21.000000Z: drift of Pod/web-7d9f-bbbbb  auditID a-pod-b-create"
            ]
        )
        .len(),
        1,
        "{text}"
    );
    assert!(!text.contains("children with drift"));
    // The replacement: approved by a policy, reverting alice's delete of another pod.
    let story = build(&store.conn, &q("pod", "shop", "web-7d9f-bbbbb")).unwrap();
    let text = render(&story, Style { color: false });
    assert_eq!(lines_with(&text, &["class", "drift, approved by pods-come-back"]).len(), 1, "{text}");
    assert_eq!(
        lines_with(&text, &["reverts", "alice's delete of Pod/web-7d9f-aaaaa", "auditID a-pod-a-delete"]).len(),
        1,
        "{text}"
    );
}

#[test]
fn notes_an_empty_story_a_drift_reverting_nobody_and_odd_events() {
    let store = Store::new();
    let o = obj("ConfigMap", "a", "c", "u-c");
    let id = store.object(&o);
    let mut d = w(T0 + 10 * S, "d", "update", "system:c", "drift");
    d.trace = vec![];
    store.write(id, &o, &d);
    store
        .conn
        .execute(
            "UPDATE mutations SET event = json_set(event, '$.freezeViolation', json('true'), '$.late', json('true'), '$.traceTruncated', json('true'))",
            [],
        )
        .unwrap();
    let text = render(&build(&store.conn, &q("ConfigMap", "a", "c")).unwrap(), Style { color: false });
    assert_eq!(lines_with(&text, &["reverts", "nobody's write in the stream"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["note", "freeze violated"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["note", "late: applied"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["(older hops cut)"]).len(), 1, "{text}");
    // Before its first write.
    let early = StoryQuery { at_us: Some(T0 + 5 * S), ..q("ConfigMap", "a", "c") };
    let e = build(&store.conn, &early).unwrap_err();
    assert!(matches!(e, crate::history::story::StoryError::BeforeHistory { .. }));
    store.conn.execute("UPDATE meta SET value = ?1 WHERE key = 'oldest_us'", [T0.to_string()]).unwrap();
    let text = render(&build(&store.conn, &early).unwrap(), Style { color: false });
    assert_eq!(lines_with(&text, &["no classified write of it up to 2026-11-20T10:00:05.000000Z"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["history", "as of 2026-11-20T10:00:05.000000Z"]).len(), 1, "{text}");
    // An event that cannot be read.
    store.conn.execute("UPDATE mutations SET event = 'garbage'", []).unwrap();
    let text = render(&build(&store.conn, &q("ConfigMap", "a", "c")).unwrap(), Style { color: false });
    assert_eq!(lines_with(&text, &["note", "could not be read"]).len(), 1, "{text}");
    assert_eq!(lines_with(&text, &["drift", "update", "by system:c"]).len(), 1, "{text}");
}

#[test]
fn colours_on_a_terminal_only() {
    let store = shop();
    let story = build(&store.conn, &q("ReplicaSet", "shop", "web-7d9f")).unwrap();
    let text = render(&story, Style { color: true });
    assert!(text.contains("\x1b[1;31mdrift\x1b[0m"), "{text}");
    assert!(text.contains("\x1b[1mReplicaSet shop/web-7d9f\x1b[0m"), "{text}");
}

#[test]
fn a_long_list_of_children_is_cut() {
    let store = Store::new();
    let rs = obj("ReplicaSet", "a", "rs", "u-rs");
    store.object(&rs);
    let names: Vec<&'static str> = (0..25).map(|i| &*Box::leak(format!("p{i:02}").into_boxed_str())).collect();
    for name in &names {
        let pod = obj("Pod", "a", name, name).owned_by(&rs);
        let id = store.object(&pod);
        store.write(id, &pod, &w(T0, "x", "create", RSC, "drift"));
    }
    let text = render(&build(&store.conn, &q("ReplicaSet", "a", "rs")).unwrap(), Style { color: false });
    assert_eq!(lines_with(&text, &["Pod/p", "drift 1"]).len(), 20, "{text}");
    assert_eq!(lines_with(&text, &["… and 5 more (--output json lists them all)"]).len(), 1, "{text}");
}

#[test]
fn object_and_time_arguments() {
    assert_eq!(parse_object("pod/web-1"), Ok(("pod".into(), "web-1".into())));
    assert_eq!(parse_object("replicasets.apps/web-7d9f"), Ok(("replicasets.apps".into(), "web-7d9f".into())));
    for bad in ["pod", "/web", "pod/", "shop/pod/web", ""] {
        let e = parse_object(bad).unwrap_err();
        assert!(e.contains("expected KIND/NAME"), "{bad}: {e}");
    }
    let now = T0;
    assert_eq!(parse_at("2026-11-20T10:00:00Z", now), Ok(T0));
    assert_eq!(parse_at("2026-11-20T12:00:00+02:00", now), Ok(T0));
    assert_eq!(parse_at("90s", now), Ok(T0 - 90 * S));
    assert_eq!(parse_at("30m", now), Ok(T0 - 1800 * S));
    assert_eq!(parse_at("2h", now), Ok(T0 - 7200 * S));
    assert_eq!(parse_at("1.5d", now), Ok(T0 - 129_600 * S));
    for bad in ["yesterday", "2", "2w", "h", "-2h", "2026-11-20"] {
        let e = parse_at(bad, now).unwrap_err();
        assert!(e.contains("expected an RFC 3339 time"), "{bad}: {e}");
    }
    // Before what RFC 3339 can write: a mistake, not a time to ask about.
    assert_eq!(crate::decode::time::parse_rfc3339_micros("0000-01-01T00:00:00Z"), Some(EARLIEST_AT_US));
    let year_0_ago = (now - EARLIEST_AT_US) / S;
    assert_eq!(parse_at(&format!("{year_0_ago}s"), now), Ok(EARLIEST_AT_US));
    for absurd in [format!("{}s", year_0_ago + 1), "99999999999d".to_string(), "1".repeat(400) + "d"] {
        let e = parse_at(&absurd, now).unwrap_err();
        assert!(e.contains("is too long ago: --at reaches back to 0000-01-01T00:00:00Z"), "{absurd}: {e}");
    }
    assert!(parse_at("2026-11-20T10:00:00-24:00", now).unwrap_err().contains("has the UTC offset -24:00"));
}

#[test]
fn a_missing_or_foreign_store_file_says_so() {
    let dir = std::env::temp_dir().join(format!("kausality-why-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("none.db");
    let e = story(&Source::Store(missing.clone()), &q("Pod", "a", "p")).unwrap_err();
    assert!(matches!(e, Error::Store(crate::history::Error::Missing { .. })), "{e:?}");
    assert!(e.to_string().contains("does not exist") && e.to_string().contains("replay --history"), "{e}");
    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "not a database, just some words that are long enough to be a header").unwrap();
    let e = story(&Source::Store(foreign), &q("Pod", "a", "p")).unwrap_err();
    assert!(e.to_string().contains("not a database"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_store_file_gives_the_story_or_says_why_not() {
    let dir = std::env::temp_dir().join(format!("kausality-why-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.db");
    let store = shop();
    let o = obj("Pod", "other", "web-7d9f-aaaaa", "u-other");
    let id = store.object(&o);
    store.write(id, &o, &w(T0 + 300 * S, "o", "create", "bob", "unowned"));
    store.conn.execute("VACUUM INTO ?1", [path.to_str().unwrap()]).unwrap();
    let source = Source::Store(path.clone());
    let story = super::story(&source, &q("ReplicaSet", "shop", "web-7d9f")).unwrap();
    assert_eq!(story.writes.len(), 3);
    let no_story = |q: StoryQuery| match super::story(&source, &q) {
        Err(Error::NoStory(m)) => m,
        other => panic!("{:?}", other.map(|s| s.object)),
    };
    assert_eq!(
        no_story(q("ReplicaSet", "shop", "nope")),
        "no ReplicaSet shop/nope in the history store (it keeps from 2026-11-20T10:00:01.000000Z)"
    );
    let m = no_story(StoryQuery { namespace: None, ..q("Pod", "", "web-7d9f-aaaaa") });
    assert!(
        m.starts_with(
            "2 objects match Pod web-7d9f-aaaaa in any namespace; pick one with -n NAMESPACE (or --uid UID):"
        ),
        "{m}"
    );
    let m = no_story(StoryQuery { at_us: Some(T0), ..q("ReplicaSet", "shop", "web-7d9f") });
    assert!(m.starts_with("the history store reaches back to 2026-11-20T10:00:01.000000Z only"), "{m}");
    std::fs::remove_dir_all(&dir).unwrap();
}
