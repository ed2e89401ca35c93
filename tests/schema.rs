//! The published JSON Schema describes what is emitted: every enriched event of a varied stream
//! validates (required fields, types, enums, no undeclared fields).

mod common;

use std::path::Path;

use common::schema::check;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::replay::{run, ReplayOptions};
use serde_json::Value;

#[test]
fn every_enriched_event_matches_the_published_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/enriched-event.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("kausality-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("corpus.jsonl");
    let mut data = Vec::new();
    generate(
        &CorpusOptions { events: 3_000, namespaces: 2, deployments_per_namespace: 4, ..Default::default() },
        &mut data,
    )
    .unwrap();
    std::fs::write(&input, data).unwrap();
    let mut out = Vec::new();
    run(
        &ReplayOptions {
            inputs: vec![input, Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/edge-cases.jsonl")],
            progress: false,
            ..Default::default()
        },
        &mut out,
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let mut classes = std::collections::BTreeSet::new();
    let mut n = 0;
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).unwrap();
        check(&schema, &schema, &v, "$").unwrap_or_else(|e| panic!("{e}\nin {v}"));
        classes.insert(v["class"].as_str().unwrap().to_string());
        n += 1;
    }
    assert!(n > 1000);
    assert!(classes.len() >= 7, "{classes:?}");
}

#[test]
fn the_checker_rejects_what_the_schema_forbids() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/enriched-event.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let bad = serde_json::json!({"auditID": "x", "class": "weird"});
    assert!(check(&schema, &schema, &bad, "$").is_err());
}

/// The sinks write an event with `Enriched::write_json`, by hand; the schema above and every
/// reader expect what `serde_json` makes of the same event. Byte for byte, on every recorded
/// control-plane scenario, the edge cases and a generated stream with managedFields.
#[test]
fn sinks_write_each_event_exactly_as_serde_json_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut streams: Vec<Vec<String>> = Vec::new();
    let mut files: Vec<_> =
        std::fs::read_dir(root.join("tests/fixtures/controlplane")).unwrap().map(|e| e.unwrap().path()).collect();
    files.push(root.join("tests/fixtures/edge-cases.jsonl"));
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "jsonl")) {
        streams.push(std::fs::read_to_string(f).unwrap().lines().map(str::to_string).collect());
    }
    let mut data = Vec::new();
    generate(&CorpusOptions { events: 2_000, managed_fields: true, ..Default::default() }, &mut data).unwrap();
    streams.push(String::from_utf8(data).unwrap().lines().map(str::to_string).collect());
    let mut n = 0;
    for events in &streams {
        for e in common::run(events) {
            let mut line = Vec::new();
            e.write_json(&mut line);
            assert_eq!(String::from_utf8(line).unwrap(), serde_json::to_string(&e).unwrap());
            n += 1;
        }
    }
    assert!(n > 1000, "{n} events compared");
}
