//! Random cluster days recorded from a real control plane (`scripts/e2e.sh random`,
//! docs/e2e.md "Random days"): each fixture in `tests/fixtures/random-days/` is one day's audit
//! stream (every namespace of it, request bodies cut out) with the ground truth of every write
//! (`classes`, `reverts`, `why`), labelled from what the test did.
//!
//! - `passing/`: every write replays to its truth, every drift names what it reverts.
//! - `failing/`: days kausality-stream got wrong when they were recorded, with the writes it
//!   got wrong (`mismatches`). A known failing day never fails `cargo test` while its model bug
//!   is not fixed: the replay may differ from the truth on those writes and on no other. A write
//!   that now replays to its truth is printed; once a day has none left, move it to `passing/`.

mod common;

use common::replay_fixture;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn fixtures(sub: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/random-days").join(sub);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.map(|e| e.expect("dir entry").path())
                .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The writes of a day whose replay differs from the truth: key → what differs.
fn differences(expected_path: &Path) -> (Value, BTreeMap<String, String>) {
    let (expected, events) = replay_fixture(expected_path);
    let want = expected["classes"].as_object().expect("classes");
    let why = |id: &str| expected["why"][id].as_str().unwrap_or("").to_string();
    let mut out = BTreeMap::new();
    for (id, class) in want {
        match events.get(id) {
            None => {
                out.insert(id.clone(), format!("truth {class}, not classified ({})", why(id)));
            }
            Some(e) if e["class"] != *class => {
                out.insert(id.clone(), format!("truth {class}, class {} ({})", e["class"], why(id)));
            }
            Some(_) => {}
        }
    }
    for (id, e) in &events {
        if !want.contains_key(id) {
            out.insert(
                id.clone(),
                format!(
                    "classified {} {} {}/{}, the truth has no such write",
                    e["class"], e["verb"], e["object"]["kind"], e["object"]["name"]
                ),
            );
        }
    }
    for (id, list) in expected["reverts"].as_object().into_iter().flatten() {
        let Some(e) = events.get(id).filter(|e| e["class"] == "drift") else { continue };
        let named: Vec<&str> =
            e["reverts"].as_array().into_iter().flatten().filter_map(|r| r["auditID"].as_str()).collect();
        let listed: Vec<&str> = list.as_array().expect("a list of auditIDs").iter().filter_map(Value::as_str).collect();
        let wrong = if listed.is_empty() { !named.is_empty() } else { !listed.iter().any(|a| named.contains(a)) };
        if wrong {
            out.insert(id.clone(), format!("a drift that undoes {listed:?} names {named:?} in reverts ({})", why(id)));
        }
    }
    (expected, out)
}

#[test]
fn passing_random_days_replay_to_their_ground_truth() {
    let all = fixtures("passing");
    let mut problems = Vec::new();
    for p in &all {
        let (expected, diff) = differences(p);
        let name = expected["scenario"].as_str().unwrap_or("?").to_string();
        problems.extend(diff.into_iter().map(|(id, d)| format!("{name}: {id}: {d}")));
    }
    assert!(
        problems.is_empty(),
        "{} write(s) of {} passing day(s) differ from the truth:\n{}",
        problems.len(),
        all.len(),
        problems.join("\n")
    );
}

#[test]
fn failing_random_days_differ_only_where_they_were_recorded_to() {
    let mut problems = Vec::new();
    for p in fixtures("failing") {
        let (expected, diff) = differences(&p);
        let name = expected["scenario"].as_str().unwrap_or("?").to_string();
        let known: BTreeSet<&str> =
            expected["mismatches"].as_object().expect("mismatches").keys().map(String::as_str).collect();
        assert!(!known.is_empty(), "{name}: a failing day records its mismatches");
        problems.extend(
            diff.iter().filter(|(id, _)| !known.contains(id.as_str())).map(|(id, d)| format!("{name}: {id}: {d}")),
        );
        let fixed: Vec<&&str> = known.iter().filter(|id| !diff.contains_key(**id)).collect();
        if !fixed.is_empty() {
            println!(
                "{name}: {} of {} recorded mismatch(es) now replay to the truth: {fixed:?}",
                fixed.len(),
                known.len()
            );
        }
    }
    assert!(
        problems.is_empty(),
        "{} write(s) of failing days differ from the truth where they did not when recorded:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
