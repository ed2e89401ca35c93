//! The API servers' audit LOG files (the other audit backend, written next to the webhook):
//! a scenario's namespace cut out of them, replayed with `kausality-stream replay`, and
//! compared with what the live webhook path classified; and the recorded fixtures.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::enriched::{parse_lines, EnrichedLog, Event};
use crate::{serve, wait, CLUSTER};

/// One audit event of a scenario, as an API server wrote it.
#[derive(Clone, Debug)]
pub struct AuditLine {
    /// The line, byte for byte.
    pub raw: String,
    pub value: Value,
}

impl AuditLine {
    pub fn str(&self, pointer: &str) -> Option<&str> {
        self.value.pointer(pointer).and_then(Value::as_str)
    }

    pub fn audit_id(&self) -> &str {
        self.str("/auditID").unwrap_or("")
    }

    pub fn stage_timestamp(&self) -> &str {
        self.str("/stageTimestamp").unwrap_or("")
    }

    pub fn code(&self) -> i64 {
        self.value.pointer("/responseStatus/code").and_then(Value::as_i64).unwrap_or(0)
    }

    /// `resource` or `resource/subresource`.
    pub fn resource(&self) -> String {
        match (self.str("/objectRef/resource"), self.str("/objectRef/subresource")) {
            (Some(r), Some(s)) => format!("{r}/{s}"),
            (Some(r), None) => r.to_string(),
            _ => String::new(),
        }
    }

    /// The effective user: the impersonated one if any.
    pub fn user(&self) -> &str {
        self.str("/impersonatedUser/username").or_else(|| self.str("/user/username")).unwrap_or("")
    }

    /// `metadata.resourceVersion` of the response object, as a number.
    pub fn resource_version(&self) -> Option<u64> {
        self.str("/responseObject/metadata/resourceVersion").and_then(|s| s.parse().ok())
    }
}

/// The audit log files of a cluster's API servers.
pub struct AuditLogs {
    pub files: Vec<PathBuf>,
}

impl AuditLogs {
    /// Every file of the logs, those the API servers rotated out included: kube-apiserver
    /// rotates its audit log at 100 MB even with `--audit-log-maxsize=0` (its logger's
    /// default), into `<name>-<time>.log` beside it, so a long run's early lines move there.
    pub fn all_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for f in &self.files {
            let (Some(dir), Some(stem), Some(ext)) =
                (f.parent(), f.file_stem().and_then(|s| s.to_str()), f.extension().and_then(|e| e.to_str()))
            else {
                out.push(f.clone());
                continue;
            };
            let mut rotated: Vec<PathBuf> = fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        // `<stem>-2026-11-27T12-58-38.832.<ext>`: a time after the stem.
                        n.strip_prefix(stem)
                            .and_then(|r| r.strip_prefix('-'))
                            .and_then(|r| r.strip_suffix(&format!(".{ext}")))
                            .is_some_and(|t| t.len() > 10 && t.as_bytes()[4] == b'-' && t.as_bytes()[10] == b'T')
                    })
                })
                .collect();
            rotated.sort();
            out.extend(rotated);
            out.push(f.clone());
        }
        out
    }

    /// The events of objects in `namespace` and of the Namespace itself, from every API
    /// server, merged by stageTimestamp (as a log shipper would; kausality-stream orders them
    /// by resourceVersion itself).
    pub fn namespace(&self, namespace: &str) -> Result<Vec<AuditLine>> {
        let mut out = Vec::new();
        for f in &self.all_files() {
            let text = fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            for line in text.lines() {
                // Cheap pre-filter before parsing: most lines are of other namespaces.
                if !line.contains(namespace) {
                    continue;
                }
                let value: Value =
                    serde_json::from_str(line).with_context(|| format!("audit log {} has a bad line", f.display()))?;
                let str_at = |p: &str| value.pointer(p).and_then(Value::as_str);
                let own =
                    str_at("/objectRef/resource") == Some("namespaces") && str_at("/objectRef/name") == Some(namespace);
                if str_at("/objectRef/namespace") == Some(namespace) || own {
                    out.push(AuditLine { raw: line.to_string(), value });
                }
            }
        }
        out.sort_by(|a, b| a.stage_timestamp().cmp(b.stage_timestamp()));
        Ok(out)
    }

    /// How many lines name `namespace` (cheap: no JSON parse; a count only tells growth).
    fn mentions(&self, namespace: &str) -> Result<usize> {
        let needle = format!("\"namespace\":\"{namespace}\"");
        let mut n = 0;
        for f in &self.all_files() {
            n += fs::read_to_string(f)
                .with_context(|| format!("reading {}", f.display()))?
                .lines()
                .filter(|l| l.contains(&needle))
                .count();
        }
        Ok(n)
    }

    /// Waits until no new event of `namespace` has been written for `quiet` (the controllers
    /// are done), and returns the namespace's events.
    pub async fn quiet(&self, namespace: &str, quiet: Duration) -> Result<Vec<AuditLine>> {
        let (mut count, mut since) = (self.mentions(namespace)?, Instant::now());
        let deadline = Instant::now() + Duration::from_secs(90);
        while since.elapsed() < quiet {
            tokio::time::sleep(wait::POLL).await;
            let n = self.mentions(namespace)?;
            if n != count {
                (count, since) = (n, Instant::now());
            }
            if Instant::now() > deadline {
                bail!("the audit log of namespace {namespace} never went quiet ({count} events)");
            }
        }
        self.namespace(namespace)
    }
}

/// What a fixture keeps of an audit event: the line as the API server wrote it, byte for
/// byte, without the request body (`requestObject`: kausality-stream reads the response; it is
/// a third of the volume). `managedFields` are already left out by the audit policy.
pub fn strip(raw: &str) -> Result<String> {
    struct Fields<'a>(Vec<(String, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Fields<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Fields<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an audit event object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                        out.push((k, v));
                    }
                    Ok(Fields(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    let Fields(fields) = serde_json::from_str(raw).context("an audit event is not a JSON object")?;
    let kept: Vec<String> = fields
        .iter()
        .filter(|(k, _)| k != "requestObject")
        .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).expect("a string"), v.get()))
        .collect();
    Ok(format!("{{{}}}", kept.join(",")))
}

/// Writes lines, each ended by a newline.
pub fn write_lines(path: &Path, lines: &[String]) -> Result<()> {
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `kausality-stream replay --cluster e2e` of one file.
pub fn replay(file: &Path, reorder_window: &str) -> Result<Vec<Event>> {
    let bin = serve::binary()?;
    let out = Command::new(&bin)
        .args(["replay", "--cluster", CLUSTER, "--reorder-window", reorder_window, "--no-progress", "--quiet"])
        .arg(file)
        .output()
        .with_context(|| format!("running {} replay", bin.display()))?;
    if !out.status.success() {
        bail!(
            "kausality-stream replay {} failed ({}): {}",
            file.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_lines(&String::from_utf8_lossy(&out.stdout), 0)
}

/// auditID → class (`auditID/uid` for each object of a deletecollection). Fails on two events
/// of one key.
pub fn classes(events: &[Event]) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for e in events {
        let key = crate::truth::event_key(e);
        if m.insert(key.clone(), e.class.clone()).is_some() {
            bail!("two enriched events for {key}");
        }
    }
    Ok(m)
}

/// The outcome of [`check_replay`].
pub struct ReplayCheck {
    /// The namespace's audit events (stripped), the fixture's content.
    pub lines: Vec<String>,
    /// What the replay classified, in order.
    pub events: Vec<Event>,
}

/// Waits until the namespace's audit log has been quiet for `quiet`, replays it (as written,
/// and stripped as a fixture), and checks that the live webhook path gave every replayed
/// write the same class, and classified nothing the log does not hold.
pub async fn check_replay(
    logs: &AuditLogs,
    live: &EnrichedLog,
    namespace: &str,
    dir: &Path,
    reorder_window: &str,
) -> Result<ReplayCheck> {
    // 1. Quiet: no new audit event of the namespace for a while (controllers done).
    let lines = logs.quiet(namespace, Duration::from_secs(3)).await?;
    fs::create_dir_all(dir)?;
    let raw = dir.join(format!("{namespace}.audit.jsonl"));
    write_lines(&raw, &lines.iter().map(|l| l.raw.clone()).collect::<Vec<_>>())?;
    let stripped = lines.iter().map(|l| strip(&l.raw)).collect::<Result<Vec<_>>>()?;
    let fixture = dir.join(format!("{namespace}.fixture.jsonl"));
    write_lines(&fixture, &stripped)?;

    // 2. Replay the log as the API servers wrote it, and as the fixture keeps it.
    let replayed = replay(&raw, reorder_window)?;
    let want = classes(&replayed)?;
    let from_fixture = classes(&replay(&fixture, reorder_window)?)?;
    if from_fixture != want {
        bail!(
            "replaying the stripped fixture of {namespace} gives other classes than the raw log:\n{}",
            diff(&want, &from_fixture)
        );
    }

    // 3. The live path: every replayed write arrived and got the same class. When some never
    // come, the difference says which (and whether the live path classified others instead).
    let waited = wait::until(
        &format!("the live enriched events of the {} writes replayed from namespace {namespace}", want.len()),
        Duration::from_secs(30),
        || {
            let r = live.in_namespace(namespace).map(|evs| {
                let keys: std::collections::HashSet<String> = evs.iter().map(crate::truth::event_key).collect();
                want.keys().all(|k| keys.contains(k)).then(|| evs.clone())
            });
            async move { r }
        },
    )
    .await;
    let live_events = match waited {
        Ok(evs) => evs,
        Err(e) => {
            let evs = live.in_namespace(namespace)?;
            let got: BTreeMap<String, String> =
                evs.iter().map(|e| (crate::truth::event_key(e), e.class.clone())).collect();
            bail!("{e:#}; the live path and `replay` of namespace {namespace} differ:\n{}", diff(&want, &got));
        }
    };
    let last = lines.last().map(|l| l.stage_timestamp().to_string()).unwrap_or_default();
    let got: BTreeMap<String, String> = live_events
        .iter()
        .map(|e| (crate::truth::event_key(e), e))
        .filter(|(k, e)| want.contains_key(k) || e.stage_timestamp <= last)
        .map(|(k, e)| (k, e.class.clone()))
        .collect();
    if got != want {
        let described: Vec<String> =
            live_events.iter().map(|e| format!("  live   {} {}", e.audit_id, e.describe())).collect();
        let replay_described: Vec<String> =
            replayed.iter().map(|e| format!("  replay {} {}", e.audit_id, e.describe())).collect();
        bail!(
            "live webhook classes differ from `kausality-stream replay` of the audit log for namespace {namespace}:\n{}\n{}\n{}",
            diff(&want, &got),
            described.join("\n"),
            replay_described.join("\n")
        );
    }
    Ok(ReplayCheck { lines: stripped, events: replayed })
}

fn diff(want: &BTreeMap<String, String>, got: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            Some(g) if g == v => {}
            Some(g) => out.push(format!("  {k}: replay {v}, live {g}")),
            None => out.push(format!("  {k}: replay {v}, live missing")),
        }
    }
    for (k, g) in got {
        if !want.contains_key(k) {
            out.push(format!("  {k}: replay missing, live {g}"));
        }
    }
    out.join("\n")
}

/// A named write of a scenario and what kausality-stream must say about it; kept in the
/// fixture's `.expected.json` and checked again by `tests/controlplane_fixtures.rs`.
#[derive(Clone, Debug)]
pub struct Fact {
    pub what: String,
    pub event: Event,
}

impl Fact {
    pub fn to_json(&self) -> Value {
        let e = &self.event;
        let mut v = json!({
            "what": self.what,
            "auditID": e.audit_id,
            "class": e.class,
            "verb": e.verb,
            "user": e.user,
            "object": format!("{}/{}", e.object.kind, e.object.name),
        });
        let o = v.as_object_mut().expect("object");
        if let Some(r) = &e.resolution {
            o.insert("resolution".into(), json!(r));
        }
        if e.freeze_violation {
            o.insert("freezeViolation".into(), json!(true));
        }
        if let Some(src) = e.parent.as_ref().and_then(|p| p.observed_generation_source.as_ref()) {
            o.insert("observedGenerationSource".into(), json!(src));
        }
        o.insert("traceUsers".into(), json!(e.trace_users()));
        if let Some(reverts) = &e.reverts {
            o.insert("revertsUsers".into(), json!(reverts.iter().map(|r| &r.user).collect::<Vec<_>>()));
        }
        let labels: BTreeMap<_, _> = e.trace.first().map(|h| h.labels.clone()).unwrap_or_default();
        if !labels.is_empty() {
            o.insert("traceLabels".into(), json!(labels));
        }
        v
    }
}

/// Where recorded fixtures live: `tests/fixtures/controlplane/` of the root package.
pub fn fixtures_dir() -> PathBuf {
    crate::repo_root().join("tests").join("fixtures").join("controlplane")
}

/// Writes `<name>.jsonl` (the namespace's audit events, stripped) and `<name>.expected.json`
/// (auditID → class, and the facts) into `dir`. With `truth` (a scenario judged against its
/// ground truth, [`crate::truth`]), the expectations are the truth's classes, reverts and
/// reasons instead of what kausality-stream said.
pub fn write_fixture(
    dir: &Path,
    name: &str,
    about: &str,
    reorder_window: &str,
    check: &ReplayCheck,
    facts: &[Fact],
    truth: Option<Value>,
) -> Result<()> {
    fs::create_dir_all(dir)?;
    write_lines(&dir.join(format!("{name}.jsonl")), &check.lines)?;
    let mut expected = json!({
        "scenario": name,
        "about": about,
        "recordedWith": "scripts/controlplane.sh: Kubernetes v1.34.4 (kube-apiserver, kube-controller-manager, kube-scheduler), etcd v3.6.4, kwok v0.8.0; deploy/audit-policy.yaml",
        "replay": { "cluster": CLUSTER, "reorderWindow": reorder_window },
        "classes": classes(&check.events)?,
        "facts": facts.iter().map(Fact::to_json).collect::<Vec<_>>(),
    });
    if let (Some(Value::Object(truth)), Some(o)) = (truth, expected.as_object_mut()) {
        o.insert(
            "expectations".into(),
            json!("the ground truth of what the test did (e2e/src/truth.rs), not kausality-stream's output"),
        );
        o.extend(truth);
    }
    fs::write(dir.join(format!("{name}.expected.json")), serde_json::to_string_pretty(&expected)? + "\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logs_rotated_out_are_read_before_their_current_file() {
        let dir = std::env::temp_dir().join(format!("kausality-e2e-audit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for name in [
            "audit.log",
            "audit-2.log",
            "audit-2026-11-27T12-58-38.832.log",
            "audit-2-2026-11-27T12-00-00.000.log",
            "policy.yaml",
        ] {
            fs::write(dir.join(name), "").unwrap();
        }
        let names = |f: &str| -> Vec<String> {
            AuditLogs { files: vec![dir.join(f)] }
                .all_files()
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
                .collect()
        };
        assert_eq!(names("audit.log"), ["audit-2026-11-27T12-58-38.832.log", "audit.log"]);
        assert_eq!(names("audit-2.log"), ["audit-2-2026-11-27T12-00-00.000.log", "audit-2.log"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
