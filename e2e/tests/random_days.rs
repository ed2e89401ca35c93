//! Random cluster days against a real control plane (docs/e2e.md, "Random days"). Our own
//! runner (`harness = false`), started by `scripts/e2e.sh random`; without
//! `KAUSALITY_E2E_RANDOM=1` it runs nothing, so `cargo test -p kausality-e2e` stays the
//! scenarios.
//!
//! ```text
//! scripts/e2e.sh random [--days N] [--steps M] [--seed S]
//! ```
//!
//! Each day is drawn from its seed (fresh ones unless `--seed`; day i of a run with `--seed S`
//! has seed S+i), runs its workloads at the same time, each in its own namespace, and judges
//! every write of them against the ground truth. A day kausality-stream gets wrong prints its
//! seed, confusion table and mismatches, and is recorded in
//! `tests/fixtures/random-days/failing/`; with `KAUSALITY_E2E_RECORD=1` a passing day is
//! recorded in `tests/fixtures/random-days/passing/`.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::future::join_all;
use futures::stream::{self, StreamExt};

use kausality_e2e::audit;
use kausality_e2e::enriched::Event;
use kausality_e2e::harness::{Cluster, Scene, REORDER_WINDOW};
use kausality_e2e::random::{self, act, record, Day};
use kausality_e2e::truth::{self, event_key, Judgement, Label, Plan};

/// A day runs its workloads at once; the longest takes a few minutes.
const DAY_TIMEOUT: Duration = Duration::from_secs(1200);

struct Args {
    days: usize,
    steps: usize,
    seed: Option<u64>,
    /// Days run at the same time, each in namespaces of its own on the one control plane.
    parallel: usize,
    /// Print the days the seeds draw, run nothing.
    dry_run: bool,
    /// Label the recorded days again with the oracle as it is now, run nothing.
    relabel: bool,
    /// The weights long days draw with (`--mix grown`: as the days recorded before they were
    /// raised).
    mix: random::Mix,
}

fn args() -> Result<Args> {
    let mut a = Args {
        days: 1,
        steps: 8,
        seed: None,
        parallel: 1,
        dry_run: false,
        relabel: false,
        mix: random::Mix::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--days" => a.days = value("--days")?.parse().context("--days N")?,
            "--steps" => a.steps = value("--steps")?.parse().context("--steps M")?,
            "--seed" => a.seed = Some(value("--seed")?.parse().context("--seed S (a number)")?),
            "--parallel" => a.parallel = value("--parallel")?.parse::<usize>().context("--parallel K")?.max(1),
            "--dry-run" => a.dry_run = true,
            "--relabel" => a.relabel = true,
            "--mix" => {
                a.mix = match value("--mix")?.as_str() {
                    "grown" => random::Mix::Grown,
                    "even" => random::Mix::Even,
                    other => bail!("--mix grown|even, not {other}"),
                }
            }
            // What cargo and libtest pass along.
            "--test-threads=1" | "--nocapture" | "-q" | "--quiet" => {}
            other => bail!("unknown argument {other}: --days N --steps M --seed S --parallel K --dry-run --relabel --mix grown|even"),
        }
    }
    Ok(a)
}

/// How a day ended.
enum Verdict {
    Passed,
    /// kausality-stream disagreed with the truth on this many writes.
    Mismatched(usize),
    /// The truth could not be told (a write no rule explains): never a guess.
    Untellable(String),
    /// The day could not be run (a wait timed out, an API call failed).
    Broken(String),
}

struct Outcome {
    seed: u64,
    steps: usize,
    secs: f64,
    verdict: Verdict,
    labels: Vec<Label>,
    events: Vec<Event>,
    /// The action of every step ([`random::Action::tag`]), the first of each workload its creation.
    tags: Vec<String>,
}

fn main() -> ExitCode {
    if std::env::var("KAUSALITY_E2E_RANDOM").as_deref() != Ok("1") {
        println!("\nrunning 0 tests (random days: scripts/e2e.sh random)\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n");
        return ExitCode::SUCCESS;
    }
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("random days: {e:#}");
            return ExitCode::from(2);
        }
    };
    if args.dry_run {
        let mut all = Vec::new();
        for d in 0..args.days {
            let seed = args.seed.map_or_else(random::fresh_seed, |s| s.wrapping_add(d as u64));
            let day = random::day_of(seed, args.steps, args.mix);
            all.extend(drawn(&day));
            println!("day seed {}: {} steps", day.seed, day.steps());
            for w in &day.workloads {
                println!(
                    "  {:?}: {}",
                    w.kind,
                    w.actions.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")
                );
            }
        }
        print_drawn(all.into_iter());
        return ExitCode::SUCCESS;
    }
    if args.relabel {
        return relabel();
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let t0 = Instant::now();
    let cluster = match rt.block_on(Cluster::start("random", 1)) {
        Ok(c) => c,
        Err(e) => {
            println!("random days: the cluster did not start: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("    cluster up in {:.1}s: {}", t0.elapsed().as_secs_f64(), cluster.dir.display());
    // Seeds drawn up front, so that a run prints them in order whatever finishes first.
    let seeds: Vec<u64> =
        (0..args.days).map(|d| args.seed.map_or_else(random::fresh_seed, |s| s.wrapping_add(d as u64))).collect();
    let one = |seed: u64| {
        let cluster = &cluster;
        let day = random::day_of(seed, args.steps, args.mix);
        async move {
            let t = Instant::now();
            let run = tokio::time::timeout(DAY_TIMEOUT, run_day(cluster, &day)).await;
            let (verdict, labels, events) = match run {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => (Verdict::Broken(format!("{e:#}")), Vec::new(), Vec::new()),
                Err(_) => (Verdict::Broken(format!("timed out after {DAY_TIMEOUT:?}")), Vec::new(), Vec::new()),
            };
            let tags = drawn(&day);
            let o =
                Outcome { seed, steps: day.steps(), secs: t.elapsed().as_secs_f64(), verdict, labels, events, tags };
            println!("test day seed {} ({} steps) ... {} ({:.1}s)", o.seed, o.steps, verdict_word(&o.verdict), o.secs);
            o
        }
    };
    let mut outcomes: Vec<Outcome> =
        rt.block_on(stream::iter(seeds.iter().copied()).map(one).buffer_unordered(args.parallel).collect());
    outcomes.sort_by_key(|o| seeds.iter().position(|&s| s == o.seed));
    let t1 = Instant::now();
    if let Err(e) = cluster.stop() {
        println!("random days: stopping the cluster: {e:#}");
    }
    println!("    cluster stopped in {:.1}s", t1.elapsed().as_secs_f64());
    summary(&outcomes, t0.elapsed().as_secs_f64())
}

/// The actions of a day's steps, a creation named with its kind (`create Deployment`).
fn drawn(day: &Day) -> Vec<String> {
    day.workloads
        .iter()
        .flat_map(|w| {
            w.actions.iter().map(move |a| {
                if a.tag() == "create" {
                    format!("create {}", w.kind.object().0)
                } else {
                    a.tag().to_string()
                }
            })
        })
        .collect()
}

/// How many times each action was drawn.
fn print_drawn(tags: impl Iterator<Item = String>) {
    let mut n: BTreeMap<String, usize> = BTreeMap::new();
    for t in tags {
        *n.entry(t).or_insert(0) += 1;
    }
    println!("\nactions drawn ({} steps):", n.values().sum::<usize>());
    for (t, k) in &n {
        println!("  {k:>5} {t}");
    }
}

/// Every recorded day labelled again (`--relabel`).
fn relabel() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    let (mut labels, mut events, mut days) = (Vec::new(), Vec::new(), 0);
    // Every day listed first: a failing day that now passes moves to `passing/`, and is not
    // judged twice.
    let mut all = Vec::new();
    for sub in ["failing", "passing"] {
        let dir = record::fixtures_dir().join(sub);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
                    .collect()
            })
            .unwrap_or_default();
        paths.sort();
        all.push(paths);
    }
    for paths in all {
        for p in paths {
            match record::relabel(&p) {
                Ok((to, l, e)) => {
                    let n = Judgement::new(&l, &e).mismatches.len();
                    println!("{}: {n} mismatch(es), now in {}", p.display(), to.display());
                    labels.extend(l);
                    events.extend(e);
                    days += 1;
                }
                Err(e) => {
                    println!("{}: {e:#}", p.display());
                    status = ExitCode::FAILURE;
                }
            }
        }
    }
    println!("\nsummed over the {days} recorded day(s):\n{}", Judgement::new(&labels, &events).report());
    status
}

fn verdict_word(v: &Verdict) -> String {
    match v {
        Verdict::Passed => "ok".into(),
        Verdict::Mismatched(n) => format!("FAILED ({n} writes differ from the truth)"),
        Verdict::Untellable(_) => "FAILED (untellable)".into(),
        Verdict::Broken(_) => "FAILED (did not run)".into(),
    }
}

/// Runs one day: its scenes made one after another, its workloads at the same time, then each
/// namespace replayed and labelled; the day judged as one and recorded.
async fn run_day(cluster: &Cluster, day: &Day) -> Result<(Verdict, Vec<Label>, Vec<Event>)> {
    let seed = day.seed;
    println!("\nday seed {seed}: {} steps in {} workload(s)", day.steps(), day.workloads.len());
    let mut about = Vec::new();
    let mut scenes = Vec::new();
    for (i, w) in day.workloads.iter().enumerate() {
        let (kind, name) = w.kind.object();
        let line =
            format!("{kind} {name}: {}", w.actions.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", "));
        let s = Scene::new(cluster, &format!("day-{seed:016x}-{i}"), &line).await?;
        println!("  {}: {kind} {name}: {}", s.ns, w.actions.iter().map(|a| a.tag()).collect::<Vec<_>>().join(" → "));
        about.push(format!("{}: {line}", s.ns));
        scenes.push(s);
    }
    let runs = join_all(
        scenes.iter().zip(&day.workloads).enumerate().map(|(i, (s, w))| act::run(s, w, seed ^ (i as u64 + 1))),
    )
    .await;
    let mut ran = Vec::new();
    for (s, r) in scenes.iter().zip(runs) {
        let r = r.with_context(|| format!("namespace {}", s.ns))?;
        for (step, secs) in &r.steps {
            println!("    {} {step}: {secs:.1}s", s.ns);
        }
        ran.push(r);
    }
    let (mut labels, mut events, mut streams) = (Vec::new(), Vec::new(), Vec::new());
    let plans: BTreeMap<String, Plan> = scenes.iter().zip(&ran).map(|(s, r)| (s.ns.clone(), r.plan.clone())).collect();
    for (s, r) in scenes.iter().zip(&ran) {
        let scenarios = cluster.dir.join("scenarios");
        std::fs::create_dir_all(&scenarios)?;
        std::fs::write(scenarios.join(format!("{}.plan.json", s.ns)), serde_json::to_string_pretty(&r.plan)?)?;
        let check = audit::check_replay(&cluster.audit, &cluster.live, &s.ns, &scenarios, REORDER_WINDOW)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}\n({})", cluster.serve.intake()))?;
        match truth::label(&cluster.audit.namespace(&s.ns)?, &r.plan) {
            Ok(l) => labels.extend(l),
            Err(e) => {
                println!("  day seed {seed}: the truth of {} cannot be told:\n{e:#}", s.ns);
                return Ok((Verdict::Untellable(format!("{}: {e:#}", s.ns)), Vec::new(), Vec::new()));
            }
        }
        events.extend(check.events);
        streams.push(check.lines);
    }
    let judged = Judgement::new(&labels, &events);
    println!("  day seed {seed}: {} writes labelled, {} classified", labels.len(), events.len());
    for line in judged.report().lines() {
        println!("    {line}");
    }
    let lines = record::merge(streams);
    for m in &judged.mismatches {
        println!("    mismatch: {m}");
        // The object's writes as the log holds them: the fixture stays on the machine that ran
        // the day, this is what a failure's log carries of it.
        for w in timeline(&lines, m.split_whitespace().next().unwrap_or_default()) {
            println!("      {w}");
        }
    }
    let rec = record::DayRecord {
        name: format!("seed-{seed}"),
        seed,
        about: about.join("\n"),
        lines: &lines,
        plans: &plans,
        labels: &labels,
        events: &events,
        judged: &judged,
    };
    let dir = if !judged.mismatches.is_empty() {
        record::fixtures_dir().join("failing")
    } else if cluster.record {
        record::fixtures_dir().join("passing")
    } else {
        cluster.dir.join("fixtures")
    };
    record::write(&dir, &rec)?;
    println!("  day seed {seed}: recorded in {}", dir.display());
    let verdict =
        if judged.mismatches.is_empty() { Verdict::Passed } else { Verdict::Mismatched(judged.mismatches.len()) };
    Ok((verdict, labels, events))
}

/// The run's days, the summed confusion table, and every mismatch grouped by cause (the
/// action of the step, the object's kind, truth → class).
fn summary(outcomes: &[Outcome], secs: f64) -> ExitCode {
    println!("\nrandom days: {} day(s) in {secs:.1}s", outcomes.len());
    for o in outcomes {
        println!(
            "  seed {:<20} {:>3} steps {:>7.1}s  {} writes  {}",
            o.seed,
            o.steps,
            o.secs,
            o.labels.len(),
            verdict_word(&o.verdict)
        );
        if let Verdict::Untellable(e) | Verdict::Broken(e) = &o.verdict {
            println!("    {}", e.replace('\n', "\n    "));
        }
    }
    print_drawn(outcomes.iter().flat_map(|o| o.tags.iter().cloned()));
    let labels: Vec<Label> = outcomes.iter().flat_map(|o| o.labels.iter().cloned()).collect();
    let events: Vec<Event> = outcomes.iter().flat_map(|o| o.events.iter().cloned()).collect();
    let judged = Judgement::new(&labels, &events);
    println!("\nsummed over the judged days:\n{}", judged.report());
    let by_key: HashMap<String, &Event> = events.iter().map(|e| (event_key(e), e)).collect();
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    for l in &labels {
        let class = by_key.get(&l.key).map_or(truth::NONE, |e| e.class.as_str());
        let reverts_wrong = class == l.class && judged.mismatches.iter().any(|m| record::mismatch_key(m) == l.key);
        if class != l.class || reverts_wrong {
            let action = l.step.rsplit(' ').next().unwrap_or("");
            let kind = l.object.split('/').next().unwrap_or("");
            let what = if reverts_wrong {
                "drift names the wrong reverts".to_string()
            } else {
                format!("truth {} → class {class}", l.class)
            };
            *groups.entry(format!("[{action}] {} {kind} by {}: {what}", l.verb, l.user)).or_insert(0) += 1;
        }
    }
    if !groups.is_empty() {
        println!("mismatches by cause ([step action] write by: truth → class):");
        for (g, n) in &groups {
            println!("  {n:>4} × {g}");
        }
    }
    let ok = outcomes.iter().all(|o| matches!(o.verdict, Verdict::Passed));
    let failed = outcomes.iter().filter(|o| !matches!(o.verdict, Verdict::Passed)).count();
    println!(
        "\ntest result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out; finished in {secs:.2}s\n",
        if ok { "ok" } else { "FAILED" },
        outcomes.len() - failed
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every write of the object (namespace, resource, name) that the write `audit_id` names, one
/// line each: auditID, verb, user, code, resourceVersion, UID, deletion mark, received, done.
fn timeline(lines: &[String], audit_id: &str) -> Vec<String> {
    let parsed: Vec<serde_json::Value> = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let s = |v: &serde_json::Value, p: &str| v.pointer(p).and_then(serde_json::Value::as_str).unwrap_or("").to_string();
    let object =
        |v: &serde_json::Value| (s(v, "/objectRef/namespace"), s(v, "/objectRef/resource"), s(v, "/objectRef/name"));
    let Some(target) = parsed.iter().find(|v| s(v, "/auditID") == audit_id).map(object) else {
        return Vec::new();
    };
    parsed
        .iter()
        .filter(|v| object(v) == target && !matches!(s(v, "/verb").as_str(), "get" | "list" | "watch"))
        .map(|v| {
            let uid = v.pointer("/responseObject/metadata/uid").or_else(|| v.pointer("/responseObject/details/uid"));
            format!(
                "{} {} {} by {} {} rv {} uid {} marked {} received {} done {}",
                s(v, "/auditID"),
                s(v, "/verb"),
                s(v, "/objectRef/subresource"),
                s(v, "/user/username"),
                v.pointer("/responseStatus/code").and_then(serde_json::Value::as_i64).unwrap_or(0),
                s(v, "/responseObject/metadata/resourceVersion"),
                uid.and_then(serde_json::Value::as_str).unwrap_or("-"),
                s(v, "/responseObject/metadata/deletionTimestamp"),
                s(v, "/requestReceivedTimestamp"),
                s(v, "/stageTimestamp"),
            )
        })
        .collect()
}
