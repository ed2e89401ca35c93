//! A random day as a fixture: the audit events of all its namespaces (stripped as
//! [`crate::audit::strip`] does, merged by stageTimestamp) and the ground truth of every write,
//! replayed by `tests/random_days_fixtures.rs` in plain `cargo test`.
//!
//! `tests/fixtures/random-days/passing/`: days every write of which replays to its truth.
//! `tests/fixtures/random-days/failing/`: days kausality-stream got wrong, with the writes it
//! got wrong (`mismatches`): their replay may still differ there, and only there, until the
//! model is fixed, so a known failing day never fails `cargo test`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::audit::{classes, replay, write_lines, AuditLine};
use crate::enriched::Event;
use crate::harness::REORDER_WINDOW;
use crate::truth::{self, Judgement, Label, Plan};
use crate::CLUSTER;

/// `tests/fixtures/random-days/` of the root package.
/// `KAUSALITY_E2E_RANDOM_FIXTURES` puts them elsewhere (a long run's days, judged again
/// outside the repository).
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("KAUSALITY_E2E_RANDOM_FIXTURES")
        .map_or_else(|| crate::repo_root().join("tests").join("fixtures").join("random-days"), PathBuf::from)
}

/// Stripped audit lines of several namespaces, merged by stageTimestamp (one API server: the
/// order it wrote them in; a line keeps its place among those of the same time).
pub fn merge(namespaces: Vec<Vec<String>>) -> Vec<String> {
    let mut all: Vec<(String, String)> = namespaces
        .into_iter()
        .flatten()
        .map(|l| {
            let at = serde_json::from_str::<Value>(&l)
                .ok()
                .and_then(|v| v.get("stageTimestamp").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default();
            (at, l)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.into_iter().map(|(_, l)| l).collect()
}

/// What a fixture of a day holds besides its stream.
pub struct DayRecord<'a> {
    /// `seed-<seed>`: the file names.
    pub name: String,
    pub seed: u64,
    /// The day's workloads and actions, in words.
    pub about: String,
    pub lines: &'a [String],
    /// What the test did in each namespace: kept so that the day can be labelled again when
    /// the oracle learns a rule ([`relabel`]).
    pub plans: &'a BTreeMap<String, Plan>,
    pub labels: &'a [Label],
    /// What kausality-stream classified (the replay of the day's namespaces).
    pub events: &'a [Event],
    pub judged: &'a Judgement,
}

/// The key a mismatch line of [`Judgement`] starts with.
pub fn mismatch_key(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("")
}

/// Writes `<name>.jsonl` and `<name>.expected.json` into `dir`.
pub fn write(dir: &Path, r: &DayRecord<'_>) -> Result<()> {
    fs::create_dir_all(dir)?;
    write_lines(&dir.join(format!("{}.jsonl", r.name)), r.lines)?;
    let mut expected = json!({
        "scenario": r.name,
        "seed": r.seed.to_string(),
        "about": r.about,
        "recordedWith": "scripts/e2e.sh random: Kubernetes v1.34.4 (kube-apiserver, kube-controller-manager, kube-scheduler), etcd v3.6.4, kwok v0.8.0; deploy/audit-policy.yaml",
        "replay": { "cluster": CLUSTER, "reorderWindow": crate::harness::REORDER_WINDOW },
        "expectations": "the ground truth of what the test did (e2e/src/truth), not kausality-stream's output",
        "served": classes(r.events)?,
        "mismatches": r.judged.mismatches.iter().map(|m| (mismatch_key(m).to_string(), json!(m))).collect::<serde_json::Map<_, _>>(),
        "confusion": r.judged.report(),
        "plans": r.plans,
    });
    if let (Value::Object(truth), Some(o)) = (Judgement::expectations(r.labels), expected.as_object_mut()) {
        o.extend(truth);
    }
    fs::write(dir.join(format!("{}.expected.json", r.name)), serde_json::to_string_pretty(&expected)? + "\n")?;
    Ok(())
}

/// Labels a recorded day again from its stream and plans (the oracle may have learned a rule
/// since), replays it, and writes it again into `passing/` or `failing/` as it now judges.
/// Returns where it went, and its labels and events.
pub fn relabel(expected_path: &Path) -> Result<(PathBuf, Vec<Label>, Vec<Event>)> {
    let expected: Value = serde_json::from_str(&fs::read_to_string(expected_path)?)?;
    let name = expected["scenario"].as_str().context("scenario")?.to_string();
    let jsonl = expected_path.with_file_name(format!("{name}.jsonl"));
    let text = fs::read_to_string(&jsonl).with_context(|| format!("reading {}", jsonl.display()))?;
    let lines: Vec<AuditLine> = text
        .lines()
        .map(|l| Ok(AuditLine { raw: l.to_string(), value: serde_json::from_str(l)? }))
        .collect::<Result<_>>()?;
    let plans: BTreeMap<String, Plan> = serde_json::from_value(expected["plans"].clone())
        .context("the fixture keeps no plans: record the day again")?;
    let mut labels = Vec::new();
    for (ns, plan) in &plans {
        let own: Vec<AuditLine> = lines
            .iter()
            .filter(|l| {
                l.str("/objectRef/namespace") == Some(ns)
                    || (l.str("/objectRef/resource") == Some("namespaces") && l.str("/objectRef/name") == Some(ns))
            })
            .cloned()
            .collect();
        labels.extend(truth::label(&own, plan).with_context(|| format!("{name}: namespace {ns}"))?);
    }
    let events = replay(&jsonl, REORDER_WINDOW)?;
    let judged = Judgement::new(&labels, &events);
    let dir = fixtures_dir().join(if judged.mismatches.is_empty() { "passing" } else { "failing" });
    let seed = expected["seed"].as_str().and_then(|s| s.parse().ok()).context("seed")?;
    let stripped: Vec<String> = text.lines().map(str::to_string).collect();
    let about = expected["about"].as_str().unwrap_or("").to_string();
    if Some(dir.as_path()) != expected_path.parent() {
        fs::remove_file(expected_path)?;
        fs::remove_file(&jsonl)?;
    }
    write(
        &dir,
        &DayRecord {
            name,
            seed,
            about,
            lines: &stripped,
            plans: &plans,
            labels: &labels,
            events: &events,
            judged: &judged,
        },
    )?;
    Ok((dir, labels, events))
}
