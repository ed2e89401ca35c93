//! The enriched event as compact JSON, written by hand: the same bytes as `serde_json` makes of
//! its `Serialize`, without serde's per-byte escaping loop (writing an event that way took twice
//! the instructions of classifying it). A string is checked for bytes to escape eight at a time
//! and copied whole when there are none (nearly always). Tests hold the two writers together:
//! a field added to the event fails them until it is written here too.

use super::{ActorOut, Enriched, FieldOut, HopOut, ObjectOut, ParentOut, RevertOut};

impl Enriched {
    /// Appends the event as one line of compact JSON (no newline).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"auditID\":");
        string(out, &self.audit_id);
        field(out, "cluster");
        string(out, &self.cluster);
        field(out, "stageTimestamp");
        string(out, &self.stage_timestamp);
        field(out, "verb");
        string(out, self.verb.as_str());
        if let Some(sr) = self.subresource {
            field(out, "subresource");
            string(out, sr);
        }
        field(out, "user");
        string(out, &self.user);
        field(out, "userHash");
        string(out, &self.user_hash);
        field(out, "object");
        object(out, &self.object);
        field(out, "class");
        string(out, self.class.as_str());
        field(out, "reason");
        string(out, &self.reason);
        if let Some(p) = &self.parent {
            field(out, "parent");
            parent(out, p);
        }
        field(out, "actor");
        actor(out, &self.actor);
        if let Some(r) = self.resolution {
            field(out, "resolution");
            string(out, r.as_str());
        }
        if let Some(p) = &self.policy {
            field(out, "policy");
            string(out, p);
        }
        if let Some(reverts) = &self.reverts {
            field(out, "reverts");
            list(out, reverts, revert);
        }
        field(out, "freezeViolation");
        boolean(out, self.freeze_violation);
        field(out, "snoozed");
        boolean(out, self.snoozed);
        field(out, "trace");
        out.push(b'[');
        for (i, h) in self.trace.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            hop(out, h);
        }
        out.push(b']');
        if self.trace_truncated {
            field(out, "traceTruncated");
            boolean(out, true);
        }
        field(out, "late");
        boolean(out, self.late);
        out.push(b'}');
    }
}

fn object(out: &mut Vec<u8>, o: &ObjectOut) {
    out.extend_from_slice(b"{\"apiVersion\":");
    string(out, &o.api_version);
    field(out, "kind");
    string(out, &o.kind);
    if !o.namespace.is_empty() {
        field(out, "namespace");
        string(out, &o.namespace);
    }
    field(out, "name");
    string(out, &o.name);
    field(out, "uid");
    string(out, &o.uid);
    field(out, "generation");
    int(out, o.generation);
    out.push(b'}');
}

fn parent(out: &mut Vec<u8>, p: &ParentOut) {
    out.extend_from_slice(b"{\"apiVersion\":");
    string(out, &p.api_version);
    field(out, "kind");
    string(out, &p.kind);
    field(out, "name");
    string(out, &p.name);
    field(out, "uid");
    string(out, &p.uid);
    field(out, "generation");
    int(out, p.generation);
    field(out, "observedGeneration");
    int(out, p.observed_generation);
    field(out, "observedGenerationSource");
    opt_string(out, p.observed_generation_source.map(|s| s.as_str()));
    field(out, "finished");
    match p.finished {
        Some(b) => boolean(out, b),
        None => out.extend_from_slice(b"null"),
    }
    field(out, "phase");
    opt_string(out, p.phase.map(|p| p.as_str()));
    if let Some(a) = &p.applier {
        field(out, "applier");
        out.extend_from_slice(b"{\"name\":");
        string(out, &a.name);
        field(out, "revision");
        opt_string(out, a.revision.as_deref());
        field(out, "targetRevision");
        opt_string(out, a.target_revision.as_deref());
        out.push(b'}');
    }
    out.push(b'}');
}

fn actor(out: &mut Vec<u8>, a: &ActorOut) {
    out.extend_from_slice(b"{\"isController\":");
    match a.is_controller {
        Some(b) => boolean(out, b),
        None => out.extend_from_slice(b"null"),
    }
    field(out, "controllers");
    out.push(b'[');
    for (i, c) in a.controllers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, c);
    }
    out.extend_from_slice(b"]}");
}

fn list<T>(out: &mut Vec<u8>, items: &[T], each: fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, item);
    }
    out.push(b']');
}

fn revert(out: &mut Vec<u8>, r: &RevertOut) {
    out.extend_from_slice(b"{\"user\":");
    string(out, &r.user);
    field(out, "person");
    boolean(out, r.person);
    field(out, "auditID");
    string(out, &r.audit_id);
    field(out, "time");
    string(out, &r.time);
    field(out, "verb");
    string(out, r.verb.as_str());
    field(out, "object");
    out.extend_from_slice(b"{\"apiVersion\":");
    string(out, &r.object.api_version);
    field(out, "kind");
    string(out, &r.object.kind);
    field(out, "name");
    string(out, &r.object.name);
    out.push(b'}');
    if let Some(fields) = &r.fields {
        field(out, "fields");
        list(out, fields, field_out);
    }
    if r.fight {
        field(out, "fight");
        boolean(out, true);
    }
    out.push(b'}');
}

fn field_out(out: &mut Vec<u8>, f: &FieldOut) {
    out.extend_from_slice(b"{\"path\":");
    string(out, &f.path);
    if let Some(v) = &f.before {
        field(out, "before");
        out.extend_from_slice(v.get().as_bytes());
    }
    if let Some(v) = &f.after {
        field(out, "after");
        out.extend_from_slice(v.get().as_bytes());
    }
    field(out, "restored");
    boolean(out, f.restored);
    out.push(b'}');
}

fn hop(out: &mut Vec<u8>, h: &HopOut) {
    out.extend_from_slice(b"{\"apiVersion\":");
    string(out, &h.api_version);
    field(out, "kind");
    string(out, &h.kind);
    field(out, "name");
    string(out, &h.name);
    field(out, "generation");
    int(out, h.generation);
    field(out, "user");
    opt_string(out, h.user.as_deref());
    field(out, "timestamp");
    opt_string(out, h.timestamp.as_deref());
    if !h.labels.is_empty() {
        field(out, "labels");
        out.push(b'{');
        for (i, (k, v)) in h.labels.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, k);
            out.push(b':');
            match v {
                serde_json::Value::String(s) => string(out, s),
                other => serde_json::to_writer(&mut *out, other).expect("a JSON value writes to memory"),
            }
        }
        out.push(b'}');
    }
    out.push(b'}');
}

/// `,"name":`
fn field(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn boolean(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

fn int(out: &mut Vec<u8>, n: Option<i64>) {
    match n {
        Some(n) => out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string, escaped as `serde_json` escapes: `"` and `\` with a backslash, the control
/// characters below 0x20 as `\b \t \n \f \r` or `\u00XX` (lowercase hex); everything else,
/// non-ASCII included, as it is.
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.push(b'"');
    if !any_to_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if !needs_escape(b) {
                continue;
            }
            out.extend_from_slice(&bytes[start..i]);
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                0x0c => out.extend_from_slice(b"\\f"),
                b'\r' => out.extend_from_slice(b"\\r"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[(b >> 4) as usize]);
                    out.push(HEX[(b & 0xf) as usize]);
                }
            }
            start = i + 1;
        }
        out.extend_from_slice(&bytes[start..]);
    }
    out.push(b'"');
}

/// Whether any byte needs escaping, eight at a time: a word has a byte below 0x20 when
/// `(x - 0x20 in each byte) & !x` has a high bit set, and a byte equal to `c` when `x ^ c` has a
/// zero byte (the bit tricks are exact as a yes or no for the whole word).
fn any_to_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let mut words = bytes.chunks_exact(8);
    let mut found = 0;
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        found |= below(x, 0x20) | below(x ^ (ONES * b'"' as u64), 1) | below(x ^ (ONES * b'\\' as u64), 1);
    }
    found != 0 || words.remainder().iter().any(|&b| needs_escape(b))
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::super::{
        ActorOut, ApplierOut, Enriched, FieldOut, HopOut, ObjectOut, ParentOut, Phase, RevertOut, RevertedObject,
    };
    use crate::enriched::{Class, Resolution};
    use crate::filter::Verb;
    use crate::write::{Name, ObservedSource};

    fn hop(name: &str, labels: serde_json::Map<String, serde_json::Value>) -> HopOut {
        HopOut {
            api_version: Arc::from("apps/v1"),
            kind: Arc::from("Deployment"),
            name: name.into(),
            generation: Some(3),
            user: Some(Arc::from("alice")),
            timestamp: Some(Arc::from("2026-11-23T17:00:00.123456Z")),
            labels,
        }
    }

    /// An event with every field present, every text `text`.
    pub(crate) fn event(text: &str) -> Enriched {
        let t: Arc<str> = Arc::from(text);
        let mut labels = serde_json::Map::new();
        labels.insert("ticket".into(), serde_json::Value::String(text.into()));
        labels.insert(text.into(), serde_json::json!({"not": ["a", "string"], "n": 1.5}));
        Enriched {
            audit_id: t.clone(),
            cluster: t.clone(),
            stage_timestamp: t.clone(),
            verb: Verb::Patch,
            subresource: Some("eviction"),
            user: t.clone(),
            user_hash: Arc::from("5xzgp"),
            object: ObjectOut {
                api_version: t.clone(),
                kind: t.clone(),
                namespace: t.clone(),
                name: Name::from(text),
                uid: t.clone(),
                generation: Some(i64::MIN),
            },
            class: Class::Drift,
            reason: text.to_string(),
            parent: Some(ParentOut {
                api_version: t.clone(),
                kind: t.clone(),
                name: Name::from(text),
                uid: t.clone(),
                generation: Some(i64::MAX),
                observed_generation: Some(-1),
                observed_generation_source: Some(ObservedSource::SyncedCondition),
                finished: Some(true),
                phase: Some(Phase::Initialized),
                applier: Some(Box::new(ApplierOut {
                    name: t.clone(),
                    revision: Some(t.clone()),
                    target_revision: None,
                })),
            }),
            actor: ActorOut { is_controller: Some(true), controllers: vec![t.clone(), Arc::from("b")] },
            resolution: Some(Resolution::Approved),
            policy: Some(t.clone()),
            reverts: Some(vec![revert(text, true), revert(text, false)]),
            freeze_violation: true,
            snoozed: false,
            trace: vec![hop(text, labels), hop("", serde_json::Map::new())],
            trace_truncated: true,
            late: true,
        }
    }

    fn revert(text: &str, fields: bool) -> RevertOut {
        let raw = |v: &str| Some(serde_json::value::RawValue::from_string(v.to_string()).unwrap());
        let field = FieldOut {
            path: Arc::from(text),
            before: raw(&serde_json::to_string(text).unwrap()),
            after: raw("{\"a\":[1,null]}"),
            restored: true,
        };
        let absent = FieldOut { path: Arc::from("spec.x"), before: None, after: None, restored: false };
        RevertOut {
            user: Arc::from(text),
            person: fields,
            audit_id: Arc::from(text),
            time: Arc::from(text),
            verb: if fields { Verb::Update } else { Verb::Delete },
            object: RevertedObject { api_version: Arc::from(text), kind: Arc::from(text), name: Name::from(text) },
            fields: fields.then(|| vec![field, absent]),
            fight: fields,
        }
    }

    fn same_as_serde(e: &Enriched) {
        let mut ours = Vec::new();
        e.write_json(&mut ours);
        let theirs = serde_json::to_vec(e).unwrap();
        assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));
    }

    #[test]
    fn every_field_and_every_escape_as_serde_json_writes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for text in ["", "plain", "quote \" and backslash \\", "ünïcödé ✓ 𝄞 \u{7f}\u{80}\u{2028}", &every_ascii]
        {
            let mut e = event(text);
            same_as_serde(&e);
            // The other shapes: what is optional absent, or empty.
            e.object.namespace = Arc::from("");
            e.object.generation = None;
            e.subresource = None;
            e.parent = None;
            e.resolution = None;
            e.policy = None;
            e.reverts = None;
            e.actor = ActorOut { is_controller: None, controllers: Vec::new() };
            e.trace.clear();
            e.trace_truncated = false;
            same_as_serde(&e);
            e.actor.is_controller = Some(false);
            e.trace =
                vec![HopOut { generation: None, user: None, timestamp: None, ..hop(text, serde_json::Map::new()) }];
            e.parent = Some(ParentOut::named(Arc::from("v1"), Arc::from("K"), Name::from("n"), Arc::from("u")));
            e.reverts = Some(Vec::new());
            same_as_serde(&e);
            e.parent.as_mut().unwrap().finished = Some(false);
            same_as_serde(&e);
        }
    }

    #[test]
    fn every_name_of_every_enum_as_serde_json_writes_it() {
        let name = |v: serde_json::Value| v.as_str().unwrap().to_string();
        for c in Class::ALL {
            assert_eq!(c.as_str(), name(serde_json::to_value(c).unwrap()));
        }
        for v in [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete, Verb::Deletecollection] {
            assert_eq!(v.as_str(), name(serde_json::to_value(v).unwrap()));
        }
        for r in [Resolution::Approved, Resolution::Rejected, Resolution::Unresolved] {
            assert_eq!(r.as_str(), name(serde_json::to_value(r).unwrap()));
        }
        for p in [Phase::Initializing, Phase::Initialized, Phase::Deleting] {
            assert_eq!(p.as_str(), name(serde_json::to_value(p).unwrap()));
        }
        for s in [
            ObservedSource::Status,
            ObservedSource::SyncedCondition,
            ObservedSource::ReadyCondition,
            ObservedSource::Synthetic,
        ] {
            assert_eq!(s.as_str(), name(serde_json::to_value(s).unwrap()));
        }
    }

    #[test]
    fn the_word_at_a_time_check_finds_every_byte_to_escape_wherever_it_sits() {
        let naive = |b: &[u8]| b.iter().any(|&c| super::needs_escape(c));
        for filler in [0x61u8, 0x7f, 0x80, 0xa9, 0xc3, 0xff, 0x21, 0x23, 0x5b, 0x5d] {
            for len in 0..20 {
                for at in 0..len {
                    for b in 0..=255u8 {
                        let mut v = vec![filler; len];
                        v[at] = b;
                        assert_eq!(super::any_to_escape(&v), naive(&v), "{v:x?}");
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn the_word_at_a_time_check_agrees_on_any_bytes(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(super::any_to_escape(&v), v.iter().any(|&c| super::needs_escape(c)));
        }

        #[test]
        fn any_text_is_written_as_serde_json_writes_it(text in any::<String>(), n in any::<i64>()) {
            let mut e = event(&text);
            e.object.generation = Some(n);
            same_as_serde(&e);
        }
    }
}
