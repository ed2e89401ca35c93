//! The labels against kausality-stream's classes: mismatches, the confusion table, precision
//! and recall, and the expectations a fixture keeps.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{event_key, Label, Reverts, CLASSES, NONE};
use crate::enriched::{short_user, Event};

/// The labels against kausality-stream's events of the same writes.
pub struct Judgement {
    /// (truth, class) → count.
    pub confusion: BTreeMap<(String, String), usize>,
    pub mismatches: Vec<String>,
    pub writes: usize,
    /// Drifts, true and classified so, whose truth names the writes they revert: how many,
    /// and how many of them name one of those writes in `reverts`.
    pub reverts_wanted: usize,
    pub reverts_named: usize,
    /// Drifts, true and classified so, that revert nobody: how many, and how many say so.
    pub reverts_nobody: usize,
    pub reverts_nobody_said: usize,
}

impl Judgement {
    pub fn new(labels: &[Label], events: &[Event]) -> Judgement {
        let by_key: HashMap<String, &Event> = events.iter().map(|e| (event_key(e), e)).collect();
        let mut confusion = BTreeMap::new();
        let mut mismatches = Vec::new();
        let mut known = BTreeSet::new();
        let (mut reverts_wanted, mut reverts_named, mut reverts_nobody, mut reverts_nobody_said) = (0, 0, 0, 0);
        for l in labels {
            known.insert(l.key.clone());
            let got = by_key.get(&l.key);
            let class = got.map_or(NONE.to_string(), |e| e.class.clone());
            *confusion.entry((l.class.clone(), class.clone())).or_insert(0) += 1;
            let at = format!("{} {:<16} {} by {} [{}]", l.key, l.verb, l.object, l.user, l.step);
            if class != l.class {
                mismatches.push(format!("{at}: truth {}, class {class} — {}", l.class, l.why));
                continue;
            }
            if let (Some(want), Some(e)) = (&l.reverts, got) {
                let named: Vec<&str> = e.reverts.iter().flatten().map(|r| r.audit_id.as_str()).collect();
                match want {
                    Reverts::AnyOf(ids) => {
                        reverts_wanted += 1;
                        reverts_named += usize::from(ids.iter().any(|i| named.contains(&i.as_str())));
                    }
                    Reverts::Nobody => {
                        reverts_nobody += 1;
                        reverts_nobody_said += usize::from(named.is_empty());
                    }
                }
                match want {
                    Reverts::AnyOf(ids) if !ids.iter().any(|i| named.contains(&i.as_str())) => mismatches
                        .push(format!("{at}: a drift that undoes {ids:?} names {named:?} in reverts — {}", l.why)),
                    Reverts::Nobody if !named.is_empty() => mismatches
                        .push(format!("{at}: a drift that undoes nobody names {named:?} in reverts — {}", l.why)),
                    _ => {}
                }
            }
        }
        for e in events {
            let k = event_key(e);
            if !known.contains(&k) {
                *confusion.entry((NONE.to_string(), e.class.clone())).or_insert(0) += 1;
                mismatches.push(format!(
                    "{k} {} {}/{} by {}: classified {} but the truth has no such write",
                    e.verb,
                    e.object.kind,
                    e.object.name,
                    short_user(&e.user),
                    e.class
                ));
            }
        }
        Judgement {
            confusion,
            mismatches,
            writes: labels.len(),
            reverts_wanted,
            reverts_named,
            reverts_nobody,
            reverts_nobody_said,
        }
    }

    fn count(&self, f: impl Fn(&str, &str) -> bool) -> usize {
        self.confusion.iter().filter(|((t, c), _)| f(t, c)).map(|(_, n)| n).sum()
    }

    /// (precision, recall, true positives, classified as `class`, truly `class`).
    pub fn precision_recall(&self, class: &str) -> (f64, f64, usize, usize, usize) {
        let tp = self.count(|t, c| t == class && c == class);
        let said = self.count(|_, c| c == class);
        let truly = self.count(|t, _| t == class);
        let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
        (ratio(tp, said), ratio(tp, truly), tp, said, truly)
    }

    /// The confusion table and the figures, as printed and kept in docs/e2e.md.
    pub fn report(&self) -> String {
        let cols: Vec<&str> = CLASSES.iter().copied().filter(|c| self.count(|_, x| x == *c) > 0).collect();
        let rows: Vec<&str> = CLASSES.iter().copied().filter(|c| self.count(|t, _| t == *c) > 0).collect();
        let mut out = String::new();
        let _ = write!(out, "| truth \\ class |");
        for c in &cols {
            let _ = write!(out, " {c} |");
        }
        let _ = writeln!(out, " total |");
        let _ = writeln!(out, "|---|{}---:|", "---:|".repeat(cols.len()));
        for r in &rows {
            let _ = write!(out, "| {r} |");
            for c in &cols {
                let n = self.count(|t, x| t == *r && x == *c);
                let _ = if n == 0 { write!(out, " · |") } else { write!(out, " {n} |") };
            }
            let _ = writeln!(out, " {} |", self.count(|t, _| t == *r));
        }
        for class in ["drift", "origin"] {
            let (p, r, tp, said, truly) = self.precision_recall(class);
            let _ = writeln!(out, "{class}: precision {p:.2} ({tp}/{said}), recall {r:.2} ({tp}/{truly})");
        }
        let _ = writeln!(
            out,
            "reverts: {}/{} true drifts name the write they revert; {}/{} that revert nobody say so",
            self.reverts_named, self.reverts_wanted, self.reverts_nobody_said, self.reverts_nobody
        );
        out
    }

    /// The fixture's expectations: the truth's classes and reverts, and why.
    pub fn expectations(labels: &[Label]) -> Value {
        let classes: BTreeMap<&str, &str> =
            labels.iter().filter(|l| l.class != NONE).map(|l| (l.key.as_str(), l.class.as_str())).collect();
        let reverts: BTreeMap<&str, Vec<String>> = labels
            .iter()
            .filter_map(|l| match &l.reverts {
                Some(Reverts::AnyOf(ids)) => Some((l.key.as_str(), ids.clone())),
                Some(Reverts::Nobody) => Some((l.key.as_str(), Vec::new())),
                None => None,
            })
            .collect();
        let why: BTreeMap<&str, String> = labels
            .iter()
            .map(|l| {
                (l.key.as_str(), format!("{} {} {} by {} [{}]: {}", l.class, l.verb, l.object, l.user, l.step, l.why))
            })
            .collect();
        json!({ "classes": classes, "reverts": reverts, "why": why })
    }
}
