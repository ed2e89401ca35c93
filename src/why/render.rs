//! A story in the terminal: the object, then each classified write oldest first (newest last,
//! next to the prompt) with its class, the causal chain back to the human intent, what it
//! reverted or what reverted it and the parent's state at that moment, then the tree of the
//! children's drift.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

use crate::history::story::{Child, RevertedBy, Story};

/// Children listed per level; the rest are counted.
const MAX_CHILDREN_SHOWN: usize = 20;

/// Colours (ANSI) or plain text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Whether to colour the text with ANSI escapes.
    pub color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
    fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
    fn class(self, class: &str, text: &str) -> String {
        let code = match class {
            "drift" => "1;31",
            "origin" => "33",
            "expected" => "32",
            _ => "36",
        };
        self.paint(code, text)
    }
}

/// What the renderer reads of an enriched event (docs/enriched-events.md); anything missing
/// reads as empty, so an event from an older or newer build still renders.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    stage_timestamp: String,
    verb: String,
    subresource: Option<String>,
    user: String,
    class: String,
    reason: String,
    object: EventObject,
    parent: Option<Parent>,
    resolution: Option<String>,
    policy: Option<String>,
    reverts: Option<Vec<Revert>>,
    freeze_violation: bool,
    snoozed: bool,
    trace: Vec<Hop>,
    trace_truncated: bool,
    late: bool,
    unreadable: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EventObject {
    kind: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Parent {
    kind: String,
    name: String,
    generation: Option<i64>,
    observed_generation: Option<i64>,
    observed_generation_source: Option<String>,
    finished: Option<bool>,
    phase: Option<String>,
    /// An applier's parent (DESIGN §1.9): which applier, at which revisions.
    applier: Option<Applier>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Applier {
    name: String,
    revision: Option<String>,
    target_revision: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Revert {
    user: String,
    #[serde(rename = "auditID")]
    audit_id: String,
    time: String,
    verb: String,
    object: EventObject,
    fields: Option<Vec<Field>>,
    /// The write undone had put back one of this write's user: a fight.
    fight: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Field {
    path: String,
    before: Option<Value>,
    after: Option<Value>,
    restored: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Hop {
    kind: String,
    name: String,
    generation: Option<i64>,
    user: Option<String>,
    timestamp: Option<String>,
    labels: BTreeMap<String, Value>,
}

/// The story as text.
pub fn render(story: &Story, style: Style) -> String {
    let mut out = String::new();
    header(&mut out, story, style);
    let events: Vec<Event> =
        story.writes.iter().map(|w| serde_json::from_str(w.event.get()).unwrap_or_default()).collect();
    summary(&mut out, &events);
    if events.is_empty() {
        let _ = writeln!(
            out,
            "\nno classified write of it {}",
            story.at.as_ref().map_or("is kept".to_string(), |at| format!("up to {at}"))
        );
    }
    if let Some(earlier) = &story.earlier {
        let _ = writeln!(
            out,
            "\n{} earlier write{} not shown (the newest {} are): ask again with --before {}",
            earlier.writes,
            if earlier.writes == 1 { "" } else { "s" },
            story.writes.len(),
            earlier.before
        );
    }
    for (e, w) in events.iter().zip(&story.writes) {
        write_one(&mut out, e, &w.reverted_by, &story.object.kind, &story.object.name, style);
    }
    if !story.children.is_empty() {
        let _ = writeln!(out, "\n{}", style.bold("children with drift"));
        tree(&mut out, &story.children, 1, style);
    }
    out
}

fn header(out: &mut String, story: &Story, style: Style) {
    let o = &story.object;
    let place = if o.namespace.is_empty() { o.name.clone() } else { format!("{}/{}", o.namespace, o.name) };
    let _ = writeln!(out, "{}", style.bold(&format!("{} {place}", o.kind)));
    let _ = writeln!(out, "  {:<9} {}  cluster {}  uid {}", "object", o.api_version, o.cluster, o.uid);
    if let Some(p) = &o.parent {
        let _ = writeln!(out, "  {:<9} {}/{}  uid {}", "owner", p.kind, p.name, p.uid);
    }
    let _ = writeln!(out, "  {:<9} {} .. {}", "seen", o.first_seen, o.last_seen);
    if let Some(d) = &o.deleted {
        let _ = writeln!(out, "  {:<9} {} by {}  auditID {}", "deleted", d.time, d.user, d.audit_id);
    }
    let kept =
        story.history_from.as_deref().map_or("the store is empty".to_string(), |f| format!("the store keeps from {f}"));
    let at = story.at.as_deref().map(|a| format!("; as of {a}")).unwrap_or_default();
    let _ = writeln!(out, "  {:<9} {kept}{at}", "history");
}

/// "5 classified writes: drift 2 · origin 1 · expected 2".
fn summary(out: &mut String, events: &[Event]) {
    let mut by_class: BTreeMap<&str, usize> = BTreeMap::new();
    for e in events {
        *by_class.entry(&e.class).or_default() += 1;
    }
    let parts: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let _ = writeln!(
        out,
        "  {:<9} {} classified: {}",
        "writes",
        events.len(),
        if parts.is_empty() { "none".into() } else { parts.join(" · ") }
    );
}

fn write_one(out: &mut String, e: &Event, reverted_by: &[RevertedBy], kind: &str, name: &str, style: Style) {
    let verb = match &e.subresource {
        Some(s) => format!("{} {s}", e.verb),
        None => e.verb.clone(),
    };
    let _ = writeln!(
        out,
        "\n{}  {}  {}  by {}",
        style.bold(&e.stage_timestamp),
        style.class(&e.class, &e.class),
        verb,
        e.user
    );
    let mut class = e.class.clone();
    if let Some(r) = &e.resolution {
        class.push_str(&format!(", {r}"));
    }
    if let Some(p) = &e.policy {
        class.push_str(&format!(" by {p}"));
    }
    // The heading names the class; this line adds what resolved a drift.
    if class != e.class {
        line(out, "class", &style.class(&e.class, &class));
    }
    if !e.reason.is_empty() {
        line(out, "reason", &e.reason);
    }
    let mut notes = Vec::new();
    if e.freeze_violation {
        notes.push("freeze violated: the parent carries kausality.io/freeze");
    }
    if e.snoozed {
        notes.push("snoozed: no drift report (kausality.io/snooze)");
    }
    if e.late {
        notes.push("late: applied after writes with a newer resourceVersion");
    }
    if e.unreadable {
        notes.push("the stored event could not be read: only its columns are shown");
    }
    for n in notes {
        line(out, "note", n);
    }
    for (i, h) in e.trace.iter().enumerate() {
        let mut hop = format!("{}/{}", h.kind, h.name);
        if let Some(g) = h.generation {
            hop.push_str(&format!(" gen {g}"));
        }
        hop.push_str(&format!(" by {}", h.user.as_deref().unwrap_or("(unknown)")));
        if let Some(t) = &h.timestamp {
            hop.push_str(&format!(" at {t}"));
        }
        if !h.labels.is_empty() {
            let labels: Vec<String> = h
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect();
            hop.push_str(&format!(" [{}]", labels.join(", ")));
        }
        let (label, arrow) = if i == 0 { ("trace", "") } else { ("", "→ ") };
        line(out, label, &format!("{arrow}{hop}"));
    }
    if e.trace_truncated {
        line(out, "", &style.dim("(older hops cut)"));
    }
    if let Some(p) = &e.parent {
        line(out, "parent", &parent(p));
    }
    for r in e.reverts.iter().flatten() {
        let what = if r.object.kind == kind && r.object.name == name {
            String::new()
        } else {
            format!(" of {}/{}", r.object.kind, r.object.name)
        };
        let fight = if r.fight { " (a fight: it had put back a write of theirs)" } else { "" };
        line(out, "reverts", &format!("{}'s {}{what} at {}  auditID {}{fight}", r.user, r.verb, r.time, r.audit_id));
        for f in r.fields.iter().flatten() {
            line(out, "", &field(f));
        }
    }
    if e.class == "drift" && e.reverts.as_ref().is_some_and(Vec::is_empty) {
        line(out, "reverts", &style.dim("nobody's write in the stream (its cause is outside it)"));
    }
    for by in reverted_by {
        // A replacement of a removed object is a write of another object.
        let what = if by.object.kind == kind && by.object.name == name {
            String::new()
        } else {
            format!(" of {}/{}", by.object.kind, by.object.name)
        };
        line(
            out,
            "undone",
            &format!(
                "by {} at {}: {}{what}  auditID {}",
                by.user,
                by.time,
                style.class(&by.class, &by.class),
                by.audit_id
            ),
        );
    }
    line(out, "auditID", &e.audit_id);
}

fn line(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "  {label:<9} {text}");
}

/// "Deployment/web: generation 2, observed 2 (status), finished, initialized".
fn parent(p: &Parent) -> String {
    let num = |n: Option<i64>| n.map_or("?".to_string(), |n| n.to_string());
    let mut s =
        format!("{}/{}: generation {}, observed {}", p.kind, p.name, num(p.generation), num(p.observed_generation));
    if let Some(src) = &p.observed_generation_source {
        s.push_str(&format!(" ({src})"));
    }
    match p.finished {
        Some(true) => s.push_str(", finished"),
        Some(false) => s.push_str(", not finished"),
        None => {}
    }
    s.push_str(&format!(", {}", p.phase.as_deref().unwrap_or("never seen")));
    if let Some(a) = &p.applier {
        let text = |r: &Option<String>| r.clone().unwrap_or_else(|| "none".to_string());
        s.push_str(&format!("; applied by {} at revision {}", a.name, text(&a.revision)));
        if a.target_revision.is_some() && a.target_revision != a.revision {
            s.push_str(&format!(", applying {}", text(&a.target_revision)));
        }
    }
    s
}

/// "spec.replicas: 12 → 14, put back" (before the origin write → what it set).
fn field(f: &Field) -> String {
    let v = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), Value::to_string);
    let back = if f.restored { ", put back" } else { ", overwritten" };
    format!("{}: {} → {}{back}", f.path, v(&f.before), v(&f.after))
}

fn tree(out: &mut String, children: &[Child], depth: usize, style: Style) {
    let indent = "  ".repeat(depth);
    for c in children.iter().take(MAX_CHILDREN_SHOWN) {
        let mut s = format!("{indent}{}/{}", c.kind, c.name);
        if c.drift > 0 {
            s.push_str(&format!("  {}", style.class("drift", &format!("drift {}", c.drift))));
        }
        if let Some(l) = &c.last_drift {
            s.push_str(&format!(", last at {} by {}", l.time, l.user));
            if let Some(r) = &l.resolution {
                s.push_str(&format!(" ({r})"));
            }
        }
        if c.deleted {
            s.push_str(&style.dim("  deleted"));
        }
        let _ = writeln!(out, "{s}");
        tree(out, &c.children, depth + 1, style);
    }
    if children.len() > MAX_CHILDREN_SHOWN {
        let _ = writeln!(
            out,
            "{indent}{}",
            style.dim(&format!("… and {} more (--output json lists them all)", children.len() - MAX_CHILDREN_SHOWN))
        );
    }
}

#[cfg(test)]
mod applier_tests {
    use super::*;

    #[test]
    fn an_appliers_parent_says_which_applier_and_revision() {
        let p: Parent = serde_json::from_value(serde_json::json!({
            "kind": "Kustomization", "name": "apps", "generation": 1, "observedGeneration": 1, "phase": "initialized",
            "applier": {"name": "flux-kustomize", "revision": "main@sha1:1111", "targetRevision": "main@sha1:2222"}
        }))
        .unwrap();
        assert_eq!(
            parent(&p),
            "Kustomization/apps: generation 1, observed 1, initialized; applied by flux-kustomize at revision main@sha1:1111, applying main@sha1:2222"
        );
    }
}
