use std::borrow::Cow;

use serde_json::{json, Value};

use super::*;

const RS: &str = "11111111-1111-1111-1111-111111111111";
const DEP: &str = "22222222-2222-2222-2222-222222222222";
const POD: &str = "33333333-3333-3333-3333-333333333333";
const OTHER: &str = "44444444-4444-4444-4444-444444444444";

fn uid(u: &str) -> Key<'static> {
    Key::Uid(Cow::Owned(u.to_string()))
}

/// A completed, successful write of `resource` with `response` as its answer.
fn event(verb: &str, resource: &str, subresource: Option<&str>, response: Option<Value>) -> Value {
    let mut oref = json!({"resource": resource, "namespace": "ns", "name": "x", "apiVersion": "v1"});
    if let Some(s) = subresource {
        oref["subresource"] = json!(s);
    }
    let mut ev = json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "auditID": "a1", "stage": "ResponseComplete",
        "requestURI": format!("/api/v1/namespaces/ns/{resource}/x"), "verb": verb,
        "user": {"username": "u"}, "objectRef": oref, "responseStatus": {"code": 200},
    });
    if let Some(r) = response {
        ev["responseObject"] = r;
    }
    ev
}

fn object(uid: Option<&str>, owners: Value) -> Value {
    let mut md = json!({"name": "x", "namespace": "ns", "resourceVersion": "5", "ownerReferences": owners});
    if let Some(u) = uid {
        md["uid"] = json!(u);
    }
    json!({"kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": md, "spec": {}})
}

fn owner(uid: &str, controller: Option<bool>) -> Value {
    let mut o = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": uid});
    if let Some(c) = controller {
        o["controller"] = json!(c);
    }
    o
}

/// The route of an event, owned (the event is parsed from its text here).
fn routed(ev: &Value) -> Result<Route<'static>, Skip> {
    let text = ev.to_string();
    let parsed: AuditEvent = serde_json::from_str(&text).unwrap();
    route(&parsed)
        .map(|r| Route { judged: r.judged.into_owned(), state: r.state.into_iter().map(Key::into_owned).collect() })
}

#[test]
fn an_owned_object_is_judged_at_its_controller_and_kept_at_itself() {
    let ev = event("update", "replicasets", None, Some(object(Some(RS), json!([owner(DEP, Some(true))]))));
    assert_eq!(routed(&ev), Ok(Route { judged: uid(DEP), state: vec![uid(RS)] }));
    // A status write feeds the parent state its children are judged by: the same two copies.
    let st = event("update", "replicasets", Some("status"), Some(object(Some(RS), json!([owner(DEP, Some(true))]))));
    assert_eq!(routed(&st), Ok(Route { judged: uid(DEP), state: vec![uid(RS)] }));
}

#[test]
fn an_object_without_a_controller_goes_once_to_its_own_uid() {
    for owners in
        [json!([]), json!(null), json!([owner(DEP, None)]), json!([owner(DEP, Some(false)), owner(OTHER, Some(false))])]
    {
        let ev = event("update", "deployments", None, Some(object(Some(DEP), owners.clone())));
        assert_eq!(routed(&ev), Ok(Route { judged: uid(DEP), state: vec![] }), "owners {owners}");
    }
    // A controller reference without a UID names nobody.
    let ev = event(
        "create",
        "pods",
        None,
        Some(object(Some(POD), json!([{"kind": "ReplicaSet", "controller": true, "uid": ""}]))),
    );
    assert_eq!(routed(&ev), Ok(Route { judged: uid(POD), state: vec![] }));
}

#[test]
fn the_controller_among_other_owners_and_the_first_of_two_controllers() {
    let mixed = json!([owner(OTHER, Some(false)), owner(DEP, Some(true))]);
    assert_eq!(
        routed(&event("patch", "replicasets", None, Some(object(Some(RS), mixed)))),
        Ok(Route { judged: uid(DEP), state: vec![uid(RS)] })
    );
    // Two controllers is refused by the API server; an odd event is routed as the classify
    // tier reads it (the first one).
    let two = json!([owner(DEP, Some(true)), owner(OTHER, Some(true))]);
    assert_eq!(
        routed(&event("patch", "replicasets", None, Some(object(Some(RS), two)))),
        Ok(Route { judged: uid(DEP), state: vec![uid(RS)] })
    );
    // An object naming itself as its controller: one copy.
    let own = json!([owner(RS, Some(true))]);
    assert_eq!(
        routed(&event("patch", "replicasets", None, Some(object(Some(RS), own)))),
        Ok(Route { judged: uid(RS), state: vec![] })
    );
}

#[test]
fn a_write_whose_answer_has_no_uid_is_not_produced_unless_a_delete_names_one() {
    let ev = event("update", "replicasets", None, Some(object(None, json!([owner(DEP, Some(true))]))));
    assert_eq!(routed(&ev), Err(Skip::Unroutable(Unroutable::NoObject)));
    // A create at Metadata level (no answer): nothing to key state by.
    assert_eq!(routed(&event("create", "pods", None, None)), Err(Skip::Unroutable(Unroutable::NoObject)));
    // Even with the objectRef's UID, only a delete is keyed by it (as the classify tier reads it).
    let mut ev = event("update", "pods", None, None);
    ev["objectRef"]["uid"] = json!(POD);
    assert_eq!(routed(&ev), Err(Skip::Unroutable(Unroutable::NoObject)));
    ev["verb"] = json!("delete");
    assert_eq!(routed(&ev), Ok(Route { judged: uid(POD), state: vec![] }));
}

#[test]
fn a_delete_answered_with_a_status_goes_to_the_uid_it_names() {
    let status =
        |details: Value| json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": details});
    let ev = event("delete", "configmaps", None, Some(status(json!({"name": "x", "kind": "configmaps", "uid": POD}))));
    assert_eq!(routed(&ev), Ok(Route { judged: uid(POD), state: vec![] }));
    // No UID in the details: the objectRef's.
    let mut ev = event("delete", "configmaps", None, Some(status(json!({"name": "x"}))));
    assert_eq!(routed(&ev), Err(Skip::Unroutable(Unroutable::NoObject)));
    ev["objectRef"]["uid"] = json!(OTHER);
    assert_eq!(routed(&ev), Ok(Route { judged: uid(OTHER), state: vec![] }));
    // The details' UID wins over the objectRef's; an empty one does not.
    let mut ev = event("delete", "configmaps", None, Some(status(json!({"uid": POD}))));
    ev["objectRef"]["uid"] = json!(OTHER);
    assert_eq!(routed(&ev), Ok(Route { judged: uid(POD), state: vec![] }));
    let mut ev = event("delete", "configmaps", None, Some(status(json!({"uid": ""}))));
    ev["objectRef"]["uid"] = json!(OTHER);
    assert_eq!(routed(&ev), Ok(Route { judged: uid(OTHER), state: vec![] }));
    // A delete that returns the object (with its owners) is routed like any write of it.
    let ev = event("delete", "replicasets", None, Some(object(Some(RS), json!([owner(DEP, Some(true))]))));
    assert_eq!(routed(&ev), Ok(Route { judged: uid(DEP), state: vec![uid(RS)] }));
    // A Status answer to anything but a delete names nothing written.
    let ev = event("update", "configmaps", None, Some(status(json!({"uid": POD}))));
    assert_eq!(routed(&ev), Err(Skip::Unroutable(Unroutable::NoObject)));
}

fn eviction(request: Value) -> Value {
    let mut ev = event(
        "create",
        "pods",
        Some("eviction"),
        Some(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
    );
    ev["requestObject"] = request;
    ev
}

#[test]
fn an_eviction_goes_to_the_precondition_uid_else_by_namespace_and_name() {
    let body = |opts: Value| json!({"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": "x", "namespace": "ns"}, "deleteOptions": opts});
    let with_uid = eviction(body(json!({"preconditions": {"uid": POD}})));
    assert_eq!(routed(&with_uid), Ok(Route { judged: uid(POD), state: vec![] }));
    let by_name =
        Key::Name { resource: Cow::Borrowed("pods"), namespace: Cow::Borrowed("ns"), name: Cow::Borrowed("x") };
    for request in [
        body(json!({})),
        body(json!({"preconditions": {"uid": ""}})),
        body(json!({"preconditions": {"resourceVersion": "5"}})),
        json!("odd"),
        json!(null),
    ] {
        assert_eq!(
            routed(&eviction(request.clone())),
            Ok(Route { judged: by_name.clone(), state: vec![] }),
            "request {request}"
        );
    }
    assert_eq!(by_name.text(), "pods/ns/x");
    // No pod name: nothing to key by.
    let mut nameless = eviction(body(json!({})));
    nameless["objectRef"]["name"] = json!("");
    assert_eq!(routed(&nameless), Err(Skip::Unroutable(Unroutable::NoObject)));
    // A dry-run eviction deleted nothing.
    assert_eq!(routed(&eviction(body(json!({"dryRun": ["All"]})))), Err(Skip::Ignored(Ignored::DryRun)));
}

#[test]
fn a_scale_write_goes_to_the_object_itself() {
    let scale = |uid: Option<&str>| {
        let mut md = json!({"name": "x", "namespace": "ns", "resourceVersion": "7"});
        if let Some(u) = uid {
            md["uid"] = json!(u);
        }
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": md, "spec": {"replicas": 3}})
    };
    assert_eq!(
        routed(&event("update", "replicasets", Some("scale"), Some(scale(Some(RS))))),
        Ok(Route { judged: uid(RS), state: vec![] })
    );
    let mut ev = event("patch", "replicasets", Some("scale"), Some(scale(None)));
    assert_eq!(routed(&ev), Err(Skip::Unroutable(Unroutable::NoObject)));
    ev["objectRef"]["uid"] = json!(RS);
    assert_eq!(routed(&ev), Ok(Route { judged: uid(RS), state: vec![] }));
}

#[test]
fn a_deletecollection_is_judged_with_its_first_item_and_reaches_every_other_key() {
    let item = |u: Option<&str>, owners: Value| {
        let mut md = json!({"name": "p", "namespace": "ns", "ownerReferences": owners});
        if let Some(u) = u {
            md["uid"] = json!(u);
        }
        json!({"metadata": md, "spec": {}})
    };
    let list = |items: Vec<Value>| json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": items});
    // Two pods of one ReplicaSet: judged there, kept at each pod.
    let same =
        list(vec![item(Some(POD), json!([owner(RS, Some(true))])), item(Some(OTHER), json!([owner(RS, Some(true))]))]);
    assert_eq!(
        routed(&event("deletecollection", "pods", None, Some(same))),
        Ok(Route { judged: uid(RS), state: vec![uid(POD), uid(OTHER)] })
    );
    // Items of two controllers, one without any, one without a UID (skipped).
    let mixed = list(vec![
        item(Some(POD), json!([])),
        item(None, json!([owner(DEP, Some(true))])),
        item(Some(OTHER), json!([owner(DEP, Some(true))])),
    ]);
    assert_eq!(
        routed(&event("deletecollection", "pods", None, Some(mixed))),
        Ok(Route { judged: uid(POD), state: vec![uid(DEP), uid(OTHER)] })
    );
    // Nothing deleted, or nothing with a UID.
    for items in [vec![], vec![item(None, json!([]))]] {
        assert_eq!(
            routed(&event("deletecollection", "pods", None, Some(list(items)))),
            Err(Skip::Unroutable(Unroutable::NoObject))
        );
    }
    // Items that are not objects: the list cannot be read.
    let odd = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [1, 2]});
    assert_eq!(
        routed(&event("deletecollection", "pods", None, Some(odd))),
        Err(Skip::Unroutable(Unroutable::NoObject))
    );
}

#[test]
fn what_the_filter_ignores_is_not_produced() {
    let ok = event("update", "replicasets", None, Some(object(Some(RS), json!([]))));
    let mut stage = ok.clone();
    stage["stage"] = json!("RequestReceived");
    assert_eq!(routed(&stage), Err(Skip::Ignored(Ignored::Stage)));
    let mut get = ok.clone();
    get["verb"] = json!("get");
    assert_eq!(routed(&get), Err(Skip::Ignored(Ignored::ReadVerb)));
    let mut failed = ok.clone();
    failed["responseStatus"]["code"] = json!(409);
    assert_eq!(routed(&failed), Err(Skip::Ignored(Ignored::StatusCode)));
    let mut dry = ok.clone();
    dry["requestURI"] = json!("/api/v1/namespaces/ns/replicasets/x?dryRun=All");
    assert_eq!(routed(&dry), Err(Skip::Ignored(Ignored::DryRun)));
    let exec = event("create", "pods", Some("exec"), None);
    assert_eq!(routed(&exec), Err(Skip::Ignored(Ignored::Subresource)));
}

#[test]
fn the_same_event_twice_goes_to_the_same_keys_and_partitions() {
    let ev = event("update", "replicasets", None, Some(object(Some(RS), json!([owner(DEP, Some(true))]))));
    let (a, b) = (routed(&ev).unwrap(), routed(&ev).unwrap());
    assert_eq!(a, b);
    let p = |k: &Key| partition_of(k.text().as_bytes(), 12);
    assert_eq!(p(&a.judged), p(&b.judged));
    assert_eq!(a.state.iter().map(p).collect::<Vec<_>>(), b.state.iter().map(p).collect::<Vec<_>>());
}
