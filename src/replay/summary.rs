//! The human summary `replay` prints on stderr.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::classify::Class;
use crate::decode::{Invalid, InvalidReason};
use crate::enriched::{Enriched, RevertOut};
use crate::filter::Ignored;
use crate::metrics::Metrics;

/// Tallies what `replay` needs beyond the metrics: classes, drifting parents and controllers,
/// examples of rejected records.
#[derive(Default)]
pub struct Summary {
    /// Input files.
    pub files: usize,
    /// Input files that could not be read, and why.
    pub unreadable: Vec<String>,
    /// Bytes read.
    pub bytes: u64,
    /// Audit events decoded.
    pub events: u64,
    /// Classified mutations, by class.
    pub classes: HashMap<Class, u64>,
    /// Mutations applied after a write with a higher resourceVersion.
    pub late: u64,
    /// Drift, by parent (`Kind namespace/name`).
    pub drift_parents: HashMap<String, u64>,
    /// Drift, by the user that wrote it.
    pub drift_controllers: HashMap<String, u64>,
    /// Drift by what resolved it (a platform policy or the parent's annotation).
    pub drift_policies: HashMap<String, u64>,
    /// The first few rejected records, with their file.
    pub invalid_examples: Vec<String>,
    /// Origin writes that a drift reverted (DESIGN §1.8), the first [`REVERTS_SHOWN`] in words.
    pub reverted: Vec<String>,
    /// All reverted origin writes, and those of persons.
    pub reverted_total: u64,
    /// Reverted origin writes that were persons'.
    pub reverted_persons: u64,
    /// Objects in the state store at the end.
    pub tracked_objects: usize,
    /// `--history`: what went into the history store.
    pub history: Option<super::HistoryWritten>,
}

const EXAMPLES: usize = 5;
/// Reverted changes listed by name in the summary.
pub(super) const REVERTS_SHOWN: usize = 20;

impl Summary {
    /// Tallies one enriched event.
    pub fn record(&mut self, e: &Enriched) {
        *self.classes.entry(e.class).or_default() += 1;
        if e.late {
            self.late += 1;
        }
        if e.class == Class::Drift {
            let parent = e.parent.as_ref().map_or_else(String::new, |p| {
                let ns = if e.object.namespace.is_empty() { String::new() } else { format!("{}/", e.object.namespace) };
                format!("{} {}{}", p.kind, ns, p.name)
            });
            *self.drift_parents.entry(parent).or_default() += 1;
            *self.drift_controllers.entry(e.user.to_string()).or_default() += 1;
            if let (Some(policy), Some(resolution)) = (&e.policy, e.resolution) {
                *self.drift_policies.entry(format!("{policy} ({})", resolution.as_str())).or_default() += 1;
            }
        }
        // A drift's, and any other write's that put another's back (DESIGN §1.8).
        for r in e.reverts.iter().flatten() {
            self.reverted_total += 1;
            self.reverted_persons += r.person as u64;
            if self.reverted.len() < REVERTS_SHOWN {
                self.reverted.push(reverted_line(e, r));
            }
        }
    }

    /// Keeps a rejected record of `file` as an example, while there are few.
    pub fn record_invalid(&mut self, file: &str, e: &Invalid) {
        if self.invalid_examples.len() < EXAMPLES {
            self.invalid_examples.push(format!("{file} {e}"));
        }
    }

    /// Classified mutations, all classes.
    pub fn classified(&self) -> u64 {
        self.classes.values().sum()
    }

    /// The summary in words, with the counts of `metrics` and the rate over `elapsed`.
    pub fn render(&self, metrics: &Metrics, elapsed: Duration) -> String {
        let mut s = String::new();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            s,
            "kausality-stream replay: {} file(s), {} in {:.2} s ({}/s, {} events/s)",
            self.files,
            bytes(self.bytes),
            secs,
            bytes((self.bytes as f64 / secs) as u64),
            thousands((self.events as f64 / secs) as u64)
        );
        for f in &self.unreadable {
            let _ = writeln!(s, "  unreadable: {f}");
        }
        let _ = writeln!(s, "  events read    {:>12}", thousands(self.events));
        let ignored: Vec<(Ignored, u64)> =
            Ignored::ALL.iter().map(|&r| (r, metrics.ignored_count(r))).filter(|(_, n)| *n > 0).collect();
        let _ = writeln!(
            s,
            "  ignored        {:>12}   {}",
            thousands(ignored.iter().map(|(_, n)| n).sum()),
            ignored.iter().map(|(r, n)| format!("{} {}", r.as_str(), thousands(*n))).collect::<Vec<_>>().join(" · ")
        );
        let invalid: Vec<(InvalidReason, u64)> =
            InvalidReason::ALL.iter().map(|&r| (r, metrics.invalid_count(r))).filter(|(_, n)| *n > 0).collect();
        let _ = writeln!(
            s,
            "  invalid        {:>12}   {}",
            thousands(invalid.iter().map(|(_, n)| n).sum()),
            invalid.iter().map(|(r, n)| format!("{} {}", r.as_str(), thousands(*n))).collect::<Vec<_>>().join(" · ")
        );
        for ex in &self.invalid_examples {
            let _ = writeln!(s, "      e.g. {ex}");
        }
        let _ = writeln!(s, "  duplicates     {:>12}", thousands(metrics.duplicates()));
        let _ = writeln!(
            s,
            "  state          {:>12}   objects tracked{}",
            thousands(self.tracked_objects as u64),
            peak_rss().map(|kib| format!(" · peak RSS {}", bytes(kib * 1024))).unwrap_or_default()
        );
        let _ = writeln!(s, "  late           {:>12}", thousands(self.late));
        let mut classes: Vec<(Class, u64)> = self.classes.iter().map(|(c, n)| (*c, *n)).collect();
        classes.sort();
        let _ = writeln!(
            s,
            "  classified     {:>12}   {}",
            thousands(self.classified()),
            classes.iter().map(|(c, n)| format!("{} {}", c.as_str(), thousands(*n))).collect::<Vec<_>>().join(" · ")
        );
        if !self.drift_policies.is_empty() {
            let mut by: Vec<(&String, &u64)> = self.drift_policies.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let _ = writeln!(
                s,
                "  drift resolved by: {}",
                by.iter().map(|(p, n)| format!("{p} {}", thousands(**n))).collect::<Vec<_>>().join(" · ")
            );
        }
        if self.reverted_total > 0 {
            let _ = writeln!(
                s,
                "  reverted changes: {} ({} by persons)",
                thousands(self.reverted_total),
                thousands(self.reverted_persons)
            );
            for line in &self.reverted {
                let _ = writeln!(s, "    {line}");
            }
            if self.reverted_total > self.reverted.len() as u64 {
                let _ = writeln!(
                    s,
                    "    ... and {} more (the `reverts` of the drift events)",
                    thousands(self.reverted_total - self.reverted.len() as u64)
                );
            }
        }
        if let Some(h) = &self.history {
            let _ = writeln!(
                s,
                "  history        {:>12}   mutations written to {} ({} on disk{})",
                thousands(h.mutations),
                h.path,
                bytes(h.bytes),
                if h.duplicates > 0 { format!(" · {} already there", thousands(h.duplicates)) } else { String::new() }
            );
        }
        for (title, map) in
            [("top drifting parents", &self.drift_parents), ("top drifting controllers", &self.drift_controllers)]
        {
            if map.is_empty() {
                continue;
            }
            let mut top: Vec<(&String, &u64)> = map.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let _ = writeln!(s, "  {title}:");
            for (name, n) in top.into_iter().take(5) {
                let _ = writeln!(s, "    {:>8}  {name}", thousands(*n));
            }
        }
        s
    }
}

/// One reverted change in words: when, who, what they did, and which drift undid it.
fn reverted_line(e: &Enriched, r: &RevertOut) -> String {
    let ns = if e.object.namespace.is_empty() { String::new() } else { format!("{}/", e.object.namespace) };
    let fields = match &r.fields {
        None => String::new(),
        Some(fields) => {
            let shown: Vec<String> = fields
                .iter()
                .map(|f| {
                    let v = |x: &Option<Box<serde_json::value::RawValue>>| {
                        x.as_ref().map_or("(absent)".to_string(), |r| r.get().to_string())
                    };
                    format!("{} {}→{}", f.path, v(&f.before), v(&f.after))
                })
                .collect();
            format!(" {}", shown.join(", "))
        }
    };
    // An applier's put-back: whose intent it carried out, at which revision (DESIGN §1.9).
    let applier =
        e.parent.as_ref().and_then(|p| p.applier.as_deref().map(|a| (p, a))).map_or_else(String::new, |(p, a)| {
            format!(
                " · applier {} of {} {} at revision {}",
                a.name,
                p.kind,
                p.name,
                a.revision.as_deref().unwrap_or("(none applied yet)")
            )
        });
    let fight = if r.fight { " · a fight: it had put back a write of theirs" } else { "" };
    format!(
        "{} {}{} {} {} {ns}{}{fields} · undone by {} ({} of {} {ns}{}){applier}{fight}",
        r.time,
        r.user,
        if r.person { "" } else { " (not a person)" },
        r.verb.as_str(),
        r.object.kind,
        r.object.name,
        e.user,
        e.verb.as_str(),
        e.object.kind,
        e.object.name
    )
}

/// Peak resident memory of this process in KiB (Linux: VmHWM), for the summary.
pub(super) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
