//! kausality-stream's output, read back: the JSON-lines sink of `serve` (or the stdout of
//! `replay`), and waiting for the enriched event of a given write.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::wait;

/// The fields of an enriched event (DESIGN §4) the tests look at.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage_timestamp: String,
    pub verb: String,
    pub user: String,
    pub object: Object,
    pub class: String,
    #[serde(default)]
    pub reason: String,
    pub parent: Option<Parent>,
    pub resolution: Option<String>,
    /// Drift only: the origin writes it undoes (DESIGN §1.8).
    pub reverts: Option<Vec<Revert>>,
    #[serde(default)]
    pub freeze_violation: bool,
    #[serde(default)]
    pub trace: Vec<Hop>,
    #[serde(default)]
    pub late: bool,
    /// Position in the output (0-based): kausality-stream's processing order, which is the
    /// resourceVersion order of the writes (stageTimestamps of two API servers are not).
    #[serde(skip)]
    pub index: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Parent {
    pub kind: String,
    pub name: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub observed_generation_source: Option<String>,
    pub phase: Option<String>,
}

/// An origin write a drift undoes.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revert {
    pub user: String,
    #[serde(rename = "auditID")]
    pub audit_id: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hop {
    pub kind: String,
    pub name: String,
    pub generation: Option<i64>,
    pub user: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, serde_json::Value>,
}

impl Event {
    /// One line for logs and failure messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{:<12} {:<6} {}/{} by {}",
            self.class,
            self.verb,
            self.object.kind,
            self.object.name,
            short_user(&self.user)
        );
        if let Some(r) = &self.resolution {
            s.push_str(&format!(" [{r}]"));
        }
        if self.freeze_violation {
            s.push_str(" [freezeViolation]");
        }
        if let Some(p) = &self.parent {
            s.push_str(&format!(
                " (parent {}/{} gen {:?} observed {:?})",
                p.kind, p.name, p.generation, p.observed_generation
            ));
        }
        s
    }

    /// The users of the trace's hops, first hop first (`?` for an unknown one).
    pub fn trace_users(&self) -> Vec<String> {
        self.trace.iter().map(|h| h.user.clone().unwrap_or_else(|| "?".into())).collect()
    }
}

/// `system:serviceaccount:kube-system:x` → `sa:x`, for short lines.
pub fn short_user(u: &str) -> String {
    u.strip_prefix("system:serviceaccount:kube-system:").map_or_else(|| u.to_string(), |s| format!("sa:{s}"))
}

/// Parses JSON lines of enriched events (blank lines skipped), numbering them from `first`.
pub fn parse_lines(text: &str, first: usize) -> Result<Vec<Event>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            let mut e: Event = serde_json::from_str(l)
                .with_context(|| format!("not an enriched event: {}", &l[..l.len().min(200)]))?;
            e.index = first + i;
            Ok(e)
        })
        .collect()
}

/// The `serve` JSON-lines sink, read incrementally (only whole lines).
pub struct EnrichedLog {
    path: PathBuf,
    read: Mutex<(u64, Vec<Event>)>,
}

impl EnrichedLog {
    pub fn new(path: &Path) -> EnrichedLog {
        EnrichedLog { path: path.to_path_buf(), read: Mutex::new((0, Vec::new())) }
    }

    /// Every event written so far.
    pub fn all(&self) -> Result<Vec<Event>> {
        let mut guard = self.read.lock().expect("enriched log");
        let (offset, events) = &mut *guard;
        if let Ok(mut f) = File::open(&self.path) {
            f.seek(SeekFrom::Start(*offset))?;
            let mut buf = String::new();
            f.read_to_string(&mut buf)?;
            // Only whole lines: the sink may be in the middle of a write.
            let whole = buf.rfind('\n').map_or(0, |i| i + 1);
            let parsed = parse_lines(&buf[..whole], events.len())?;
            events.extend(parsed);
            *offset += whole as u64;
        }
        Ok(events.clone())
    }

    /// The events of objects in `namespace`, and of the Namespace itself (the API server's
    /// audit events of a namespace's own writes name it as their namespace).
    pub fn in_namespace(&self, namespace: &str) -> Result<Vec<Event>> {
        Ok(self
            .all()?
            .into_iter()
            .filter(|e| e.object.namespace == namespace || (e.object.kind == "Namespace" && e.object.name == namespace))
            .collect())
    }

    /// Waits for the first event that satisfies `pred`.
    pub async fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&Event) -> bool) -> Result<Event> {
        wait::until(what, timeout, || {
            let found = self.all().map(|all| all.into_iter().find(|e| pred(e)));
            async move { found }
        })
        .await
    }

    /// Waits for the event of the write with this auditID.
    pub async fn by_audit_id(&self, what: &str, audit_id: &str) -> Result<Event> {
        self.wait_for(&format!("the enriched event of {what} (auditID {audit_id})"), Duration::from_secs(30), |e| {
            e.audit_id == audit_id
        })
        .await
    }
}
