//! A body of audit events (a webhook batch) into the messages the ingest tier produces: each
//! event's bytes unchanged, its key and partition, and which copy it is.

use std::ops::Range;

use super::{partition_of, route, Skip, Unroutable};
use crate::config::appliers::Appliers;
use crate::decode::{decode_body_raw, DecodeOptions, Invalid, InvalidReason};
use crate::filter::Ignored;
use crate::process::IngestReport;
use crate::scope::Scope;

/// Which copy of an event a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    /// Classified and emitted where it lands.
    Judged,
    /// Applied to state where it lands, nothing emitted ([`super::COPY_HEADER`]).
    State,
}

impl Copy {
    /// The `copy` label of `kausality_route_messages_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Copy::Judged => "judged",
            Copy::State => "state",
        }
    }
}

/// One message to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The event's bytes in the body.
    pub range: Range<usize>,
    /// The message key (see [`super::Key`]).
    pub key: String,
    /// The partition of the keyed topic it goes to.
    pub partition: i32,
    /// Which copy of the event it is.
    pub copy: Copy,
    /// The partition of the event's judged copy (a state-only copy names it in
    /// [`super::JUDGED_PARTITION_HEADER`]).
    pub judged_partition: i32,
}

/// What a body brought.
#[derive(Debug, Default)]
pub struct Routed {
    /// The messages to produce, in the body's order.
    pub messages: Vec<Message>,
    /// Events decoded, records rejected (the first few, for the webhook's answer).
    pub report: IngestReport,
    /// Why each record rejected was, to count.
    pub invalid: Vec<InvalidReason>,
    /// Why each event not routed was ignored, to count.
    pub ignored: Vec<Ignored>,
    /// Why each write that names no object was not routed, to count.
    pub unroutable: Vec<Unroutable>,
}

const KEPT_ERRORS: usize = 10;

/// Routes every event of `body` among `partitions` (> 0). A state-only copy that would land
/// on its judged copy's partition is not produced: the judged copy brings the state there.
/// A Namespace's or an applier's parent's write ([`super::everywhere`]) also gets a state-only copy on each partition
/// that no other copy reaches, keyed like its judged copy, on that partition explicitly.
pub fn route_body(
    body: &[u8],
    opts: &DecodeOptions,
    scope: Option<&Scope>,
    appliers: &Appliers,
    partitions: i32,
) -> Routed {
    let mut out = Routed::default();
    let base = body.as_ptr() as usize;
    decode_body_raw(body, opts, &mut |_, r| {
        let (bytes, ev) = match r {
            Ok(x) => x,
            Err(invalid) => return reject(&mut out, invalid),
        };
        out.report.events += 1;
        if scope.is_some_and(|s| !s.admits(&ev)) && crate::filter::admit(&ev).is_ok() {
            return out.ignored.push(Ignored::Excluded);
        }
        let routed = match route(&ev) {
            Ok(r) => r,
            Err(Skip::Ignored(reason)) => return out.ignored.push(reason),
            Err(Skip::Unroutable(reason)) => return out.unroutable.push(reason),
        };
        let start = bytes.as_ptr() as usize - base;
        let range = start..start + bytes.len();
        let key = routed.judged.text().into_owned();
        let judged_partition = partition_of(key.as_bytes(), partitions);
        out.messages.push(Message {
            range: range.clone(),
            key,
            partition: judged_partition,
            copy: Copy::Judged,
            judged_partition,
        });
        let first = out.messages.len() - 1;
        for k in &routed.state {
            let key = k.text().into_owned();
            let partition = partition_of(key.as_bytes(), partitions);
            if partition != judged_partition {
                out.messages.push(Message {
                    range: range.clone(),
                    key,
                    partition,
                    copy: Copy::State,
                    judged_partition,
                });
            }
        }
        if super::everywhere(&ev, appliers) {
            let key = out.messages[first].key.clone();
            for partition in 0..partitions {
                if !out.messages[first..].iter().any(|m| m.partition == partition) {
                    out.messages.push(Message {
                        range: range.clone(),
                        key: key.clone(),
                        partition,
                        copy: Copy::State,
                        judged_partition,
                    });
                }
            }
        }
    });
    out
}

fn reject(out: &mut Routed, invalid: Invalid) {
    out.invalid.push(invalid.reason);
    out.report.invalid += 1;
    if out.report.errors.len() < KEPT_ERRORS {
        out.report.errors.push(invalid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::murmur2;

    const DEP: &str = "22222222-2222-2222-2222-222222222222";

    fn write(id: &str, uid: &str, owner: Option<&str>, resource: &str) -> String {
        let owners = owner
            .map(|o| {
                format!(r#","ownerReferences":[{{"uid":"{o}","controller":true,"kind":"Deployment","name":"d"}}]"#)
            })
            .unwrap_or_default();
        format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"{id}","stage":"ResponseComplete","verb":"update","requestURI":"/apis/apps/v1/namespaces/ns/{resource}/x","user":{{"username":"u"}},"objectRef":{{"resource":"{resource}","namespace":"ns","name":"x","apiGroup":"apps","apiVersion":"v1"}},"responseStatus":{{"code":200}},"responseObject":{{"kind":"ReplicaSet","apiVersion":"apps/v1","metadata":{{"name":"x","namespace":"ns","uid":"{uid}"{owners}}},"spec":{{}}}}}}"#
        )
    }

    /// Two UIDs on different partitions of `n`.
    fn apart(n: i32) -> (String, String) {
        let owner = DEP.to_string();
        let own = (0..)
            .map(|i| format!("00000000-0000-0000-0000-{i:012}"))
            .find(|u| partition_of(u.as_bytes(), n) != partition_of(owner.as_bytes(), n))
            .unwrap();
        (owner, own)
    }

    #[test]
    fn every_event_goes_unchanged_with_its_keys_and_partitions() {
        let (owner, own) = apart(8);
        let (a, b) = (write("a", &own, Some(&owner), "replicasets"), write("b", &owner, None, "deployments"));
        let body =
            format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{a},{{"kind":"Event"}},{b}]}}"#);
        let r = route_body(body.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8);
        assert_eq!((r.report.events, r.report.invalid), (2, 1));
        let texts: Vec<&str> = r.messages.iter().map(|m| &body[m.range.clone()]).collect();
        assert_eq!(texts, [a.as_str(), a.as_str(), b.as_str()]);
        let p = |k: &str| (murmur2(k.as_bytes()) & 0x7fff_ffff) % 8;
        let expect = [
            (owner.as_str(), Copy::Judged, p(&owner)),
            (own.as_str(), Copy::State, p(&owner)),
            (owner.as_str(), Copy::Judged, p(&owner)),
        ];
        for (m, (key, copy, judged)) in r.messages.iter().zip(expect) {
            assert_eq!((m.key.as_str(), m.copy, m.partition, m.judged_partition), (key, copy, p(key), judged));
        }
    }

    /// A write of Namespace `uid` by `verb`, answered with `response`.
    fn namespace(id: &str, verb: &str, subresource: Option<&str>, response: &str) -> String {
        let sub = subresource.map(|s| format!(r#","subresource":"{s}""#)).unwrap_or_default();
        format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"{id}","stage":"ResponseComplete","verb":"{verb}","requestURI":"/api/v1/namespaces/team","user":{{"username":"alice"}},"objectRef":{{"resource":"namespaces","name":"team","apiVersion":"v1"{sub}}},"responseStatus":{{"code":200}},"responseObject":{response}}}"#
        )
    }

    #[test]
    fn a_namespace_write_reaches_every_partition_once() {
        const NS: &str = "55555555-5555-5555-5555-555555555555";
        let obj = |deleting: bool| {
            let ts = if deleting { r#","deletionTimestamp":"2026-11-25T10:00:00Z""# } else { "" };
            format!(
                r#"{{"kind":"Namespace","apiVersion":"v1","metadata":{{"name":"team","uid":"{NS}","resourceVersion":"9"{ts}}},"spec":{{"finalizers":["kubernetes"]}}}}"#
            )
        };
        let status = format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Success","details":{{"name":"team","kind":"namespaces","uid":"{NS}"}}}}"#
        );
        let writes = [
            namespace("c", "create", None, &obj(false)),
            namespace("d", "delete", None, &obj(true)),
            namespace("s", "update", Some("status"), &obj(true)),
            namespace("g", "delete", None, &status),
        ];
        for n in [1, 3, 8] {
            for ev in &writes {
                let r = route_body(ev.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), n);
                let jp = partition_of(NS.as_bytes(), n);
                let mut parts: Vec<i32> = r.messages.iter().map(|m| m.partition).collect();
                parts.sort();
                assert_eq!(parts, (0..n).collect::<Vec<_>>(), "{ev}: one message per partition of {n}");
                for m in &r.messages {
                    assert_eq!((m.key.as_str(), m.judged_partition, &ev[m.range.clone()]), (NS, jp, ev.as_str()));
                    assert_eq!(
                        m.copy,
                        if m.partition == jp { Copy::Judged } else { Copy::State },
                        "{ev} on {}",
                        m.partition
                    );
                }
            }
        }
        // What the classify tier would ignore is not produced at all (a finalize write).
        let finalize = namespace("f", "update", Some("finalize"), &obj(true));
        assert_eq!(
            route_body(finalize.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8).messages.len(),
            0
        );
        // Another group's `namespaces` is an object like any other; so is any object in a
        // namespace (objectRef.namespace names it, objectRef.resource does not).
        let other = writes[1].replace(r#""apiVersion":"v1"}"#, r#""apiGroup":"example.com","apiVersion":"v1"}"#);
        assert!(other.contains("example.com"));
        assert_eq!(
            route_body(other.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8).messages.len(),
            1
        );
        let (owner, own) = apart(8);
        assert_eq!(
            route_body(
                write("a", &own, Some(&owner), "replicasets").as_bytes(),
                &DecodeOptions::default(),
                None,
                &Appliers::default(),
                8
            )
            .messages
            .len(),
            2
        );
    }

    #[test]
    fn an_appliers_parent_reaches_every_partition_once() {
        const KS: &str = "66666666-6666-6666-6666-666666666666";
        let ev = |group: &str, resource: &str| {
            format!(
                r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"k","stage":"ResponseComplete","verb":"update","requestURI":"/apis/{group}/v1/namespaces/flux-system/{resource}/apps/status","user":{{"username":"system:serviceaccount:flux-system:kustomize-controller"}},"objectRef":{{"resource":"{resource}","subresource":"status","namespace":"flux-system","name":"apps","apiGroup":"{group}","apiVersion":"v1"}},"responseStatus":{{"code":200}},"responseObject":{{"kind":"Kustomization","apiVersion":"{group}/v1","metadata":{{"name":"apps","namespace":"flux-system","uid":"{KS}","resourceVersion":"9","generation":1}},"spec":{{}},"status":{{"lastAppliedRevision":"main@sha1:a"}}}}}}"#
            )
        };
        let flux = ev("kustomize.toolkit.fluxcd.io", "kustomizations");
        let r = route_body(flux.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8);
        let mut parts: Vec<i32> = r.messages.iter().map(|m| m.partition).collect();
        parts.sort();
        assert_eq!(parts, (0..8).collect::<Vec<_>>(), "one message per partition");
        assert_eq!(r.messages.iter().filter(|m| m.copy == Copy::Judged).count(), 1);
        // Without the profiles, or another group's kind of that name: one message.
        let none = Appliers { profiles: Vec::new() };
        assert_eq!(route_body(flux.as_bytes(), &DecodeOptions::default(), None, &none, 8).messages.len(), 1);
        let other = ev("example.com", "kustomizations");
        assert_eq!(
            route_body(other.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8).messages.len(),
            1
        );
    }

    #[test]
    fn a_state_copy_on_its_judged_partition_is_left_out() {
        let (owner, own) = apart(8);
        let ev = write("a", &own, Some(&owner), "replicasets");
        // One partition: both keys land together.
        let r = route_body(ev.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 1);
        assert_eq!(r.messages.iter().map(|m| m.copy).collect::<Vec<_>>(), [Copy::Judged]);
        assert_eq!(
            route_body(ev.as_bytes(), &DecodeOptions::default(), None, &Appliers::default(), 8).messages.len(),
            2
        );
    }

    #[test]
    fn ignored_unroutable_and_excluded_events_are_counted_not_produced() {
        let ok = write("a", DEP, None, "replicasets");
        let read = ok.replace(r#""verb":"update""#, r#""verb":"get""#);
        let no_uid = ok.replace(&format!(r#","uid":"{DEP}""#), "");
        let body = format!("{ok}\n{read}\n{no_uid}\nnot json\n");
        let scope = Scope { exclude_resources: ["deployments".to_string()].into_iter().collect(), ..Scope::default() };
        let r = route_body(body.as_bytes(), &DecodeOptions::default(), Some(&scope), &Appliers::default(), 4);
        assert_eq!((r.report.events, r.report.invalid, r.messages.len()), (3, 1, 1));
        assert_eq!(r.ignored, [Ignored::ReadVerb]);
        assert_eq!(r.unroutable, [Unroutable::NoObject]);
        assert_eq!(r.invalid, [InvalidReason::Json]);
        // Out of scope.
        let dep = write("d", DEP, None, "deployments");
        let r = route_body(dep.as_bytes(), &DecodeOptions::default(), Some(&scope), &Appliers::default(), 4);
        assert_eq!((r.messages.len(), r.ignored.as_slice()), (0, [Ignored::Excluded].as_slice()));
    }
}
