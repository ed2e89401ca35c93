//! The end-to-end scenarios against a real control plane (docs/e2e.md). A runner of its own
//! (`harness = false`): the control plane is started once per cluster shape, shared by the
//! scenarios (each in its own namespace), and always stopped, even when a scenario fails or
//! panics. The output follows libtest's (`test NAME ... ok`, `test result: ...`).
//!
//! ```text
//! cargo test -p kausality-e2e -- [FILTER...]     # substring filters, like libtest
//! KAUSALITY_E2E_RECORD=1 ...                     # rewrite tests/fixtures/controlplane/ (and flux/)
//! KAUSALITY_FLUX=0 ...                           # leave out the flux scenarios
//! ```

mod scenarios;

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kausality_e2e::harness::Cluster;

/// A scenario must end within this (a stuck wait fails it, the others still run).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(300);
/// The day in a namespace does a dozen steps, each waited for.
const DAY_TIMEOUT: Duration = Duration::from_secs(600);

/// (cluster directory, API servers, scenarios)
const CLUSTERS: [(&str, u8, &[&str]); 2] = [
    (
        "single",
        1,
        &[
            "rollout",
            "manual-scale",
            "hpa-scale",
            "deletes",
            "widget-native",
            "widget-conditions",
            "widget-synthetic",
            "approvals",
            "cluster-day",
            "flux",
            "flux-tenant",
        ],
    ),
    ("dual", 2, &["dual-rollout", "dual-manual-scale", "dual-hpa-scale", "dual-deletes", "dual-cluster-day"]),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    // `cluster_day` selects `cluster-day`: a filter may spell the name as a Rust identifier.
    // `--exact`: the whole name, as with libtest.
    let exact = args.iter().any(|a| a == "--exact");
    let matches = |name: &str, f: &str| if exact { name == f } else { name.contains(f) };
    let selected = |name: &str| {
        filters.is_empty() || filters.iter().any(|f| matches(name, f) || matches(name, &f.replace('_', "-")))
    };
    // The flux scenarios need kustomize-controller (scripts/flux.sh build); KAUSALITY_FLUX=0
    // leaves them out, as if they were not there.
    let flux = std::env::var("KAUSALITY_FLUX").map_or(true, |v| v != "0");
    let known = |name: &&str| flux || !name.starts_with("flux");
    let all: Vec<&str> = CLUSTERS.iter().flat_map(|(_, _, names)| names.iter().copied()).filter(known).collect();
    if args.iter().any(|a| a == "--list") {
        for n in &all {
            println!("{n}: test");
        }
        return ExitCode::SUCCESS;
    }
    let total = all.iter().filter(|n| selected(n)).count();
    let filtered_out = all.len() - total;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let started = Instant::now();
    let (mut passed, mut failed) = (0usize, Vec::new());
    println!("\nrunning {total} tests");
    for (dir, apiservers, names) in CLUSTERS {
        let names: Vec<&str> = names.iter().copied().filter(known).filter(|n| selected(n)).collect();
        if names.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let cluster = match rt.block_on(Cluster::start(dir, apiservers)) {
            Ok(c) => c,
            Err(e) => {
                for n in &names {
                    println!("test {n} ... FAILED (cluster did not start)");
                    failed.push((n.to_string(), format!("{e:#}")));
                }
                continue;
            }
        };
        println!(
            "    cluster {dir} ({apiservers} API server(s)) up in {:.1}s: {}",
            t0.elapsed().as_secs_f64(),
            cluster.dir.display()
        );
        for name in names {
            let t = Instant::now();
            let limit =
                if name.ends_with("cluster-day") || name.starts_with("flux") { DAY_TIMEOUT } else { SCENARIO_TIMEOUT };
            let run = async {
                AssertUnwindSafe(tokio::time::timeout(limit, scenarios::run(&cluster, name))).catch_unwind().await
            };
            let outcome = match rt.block_on(run) {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => Err(format!("{e:#}")),
                Ok(Err(_)) => Err(format!("timed out after {limit:?}")),
                Err(panic) => Err(panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into())),
            };
            match outcome {
                Ok(()) => {
                    println!("test {name} ... ok ({:.1}s)", t.elapsed().as_secs_f64());
                    passed += 1;
                }
                Err(e) => {
                    println!("test {name} ... FAILED ({:.1}s)", t.elapsed().as_secs_f64());
                    failed.push((name.to_string(), e));
                }
            }
        }
        let t1 = Instant::now();
        if let Err(e) = cluster.stop() {
            failed.push((format!("{dir}: stop"), format!("{e:#}")));
        }
        println!(
            "    cluster {dir} stopped in {:.1}s; {:.1}s in all",
            t1.elapsed().as_secs_f64(),
            t0.elapsed().as_secs_f64()
        );
    }
    if !failed.is_empty() {
        println!("\nfailures:\n");
        for (name, e) in &failed {
            println!("---- {name} ----\n{e}\n");
        }
        println!("failures:");
        for (name, _) in &failed {
            println!("    {name}");
        }
    }
    let result = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {result}. {passed} passed; {} failed; 0 ignored; 0 measured; {filtered_out} filtered out; finished in {:.2}s\n",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
