//! The `kausality-stream` command line.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use kausality_stream::classify::Class;
use kausality_stream::config::progress::{Comparison, ConditionReason};
use kausality_stream::corpus::{self, CorpusOptions};
use kausality_stream::decode::Unwrap;
use kausality_stream::history::Retention;
use kausality_stream::pipeline::{self, Overrides};
use kausality_stream::replay::{self, ReplayOptions};
use kausality_stream::why;

/// For every change a Kubernetes controller makes, whether anyone asked for it.
#[derive(Parser)]
#[command(name = "kausality-stream", version, about, long_about = None)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "KAUSALITY_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Classify a recorded audit log: enriched events to stdout (JSON lines), a summary to stderr.
    Replay(ReplayArgs),
    /// Run a pipeline: receive audit events (webhook, files), classify them live, write
    /// enriched events, metrics and drift reports. Stops gracefully on SIGTERM or Ctrl-C.
    Serve(ServeArgs),
    /// Check pipeline files: prints `FILE: ok`, or every problem of each file; exits non-zero
    /// if any file has one.
    Validate(ValidateArgs),
    /// Write a realistic synthetic audit stream (deterministic from a seed), for benchmarks and soak tests.
    Generate(GenerateArgs),
    /// An object's story from the history store: each classified write (time, actor, class,
    /// resolution), its causal chain back to the human intent, what it reverted or what
    /// reverted it, its parent's state at that moment, and its children's drift.
    Why(WhyArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Pipeline file (TOML); without it, the embedded default (pipelines/default.toml):
    /// webhook on 127.0.0.1:8080 (plain HTTP), JSON lines on stdout, metrics on 127.0.0.1:9090.
    #[arg(long, env = "KAUSALITY_PIPELINE")]
    pipeline: Option<PathBuf>,
    /// Listen address of the webhook source, replacing the pipeline's (the first webhook).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Listen address of /metrics, /healthz and /readyz, replacing the pipeline's.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Listen address of the query API (docs/query-api.md), replacing the pipeline's.
    #[arg(long)]
    query_listen: Option<SocketAddr>,
}

#[derive(clap::Args)]
struct ValidateArgs {
    /// Pipeline files to check.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(clap::Args)]
struct GenerateArgs {
    /// Number of audit events.
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// Deployment trees per namespace.
    #[arg(long, default_value_t = 10)]
    deployments: usize,
    /// Include managedFields in objects (as an API server without omitManagedFields writes them).
    #[arg(long)]
    managed_fields: bool,
    /// Write webhook-style EventLists of this many events per line instead of one event per line.
    #[arg(long, default_value_t = 0)]
    event_list_size: usize,
    /// Keep every tree live (no deletions), e.g. to measure memory per tracked object.
    #[arg(long)]
    no_teardown: bool,
    /// Output file (stdout by default).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Audit log files (JSON lines, an EventList or a single event per file); `-` reads stdin.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Cluster name written into every event.
    #[arg(long, default_value = "default")]
    cluster: String,
    /// How long (in event time) writes are held to be put in resourceVersion order, e.g. 500ms, 2s, 0.
    #[arg(long, default_value = "500ms", value_parser = parse_duration_us)]
    reorder_window: i64,
    /// A write stamped further than this ahead of this machine's clock is counted and taken as
    /// stamped at the newest time of the log so far (0: no limit).
    #[arg(long, default_value = "10m", value_parser = parse_duration_us)]
    max_clock_skew: i64,
    /// Only write enriched events of these classes (repeat or comma-separate); all by default.
    #[arg(long = "class", value_delimiter = ',', value_parser = parse_class)]
    classes: Vec<Class>,
    /// Unwrap a shipper's envelope around the events.
    #[arg(long, value_enum, default_value_t = UnwrapArg::None)]
    unwrap: UnwrapArg,
    /// Leave a field out of the spec comparison for a kind, as KIND=PATH (e.g. Deployment.apps=spec.replicas).
    #[arg(long = "ignore-field", value_parser = parse_ignore_field)]
    ignore_fields: Vec<(String, String)>,
    /// A condition reason that shows a kind's controller still at work, as KIND=TYPE=REASON
    /// (e.g. Widget.example.com=Synced=Reconciling); repeat for more. A generation is finished
    /// at the first status that reports it observed and shows none of the kind's signals.
    #[arg(long = "in-progress-condition", value_parser = parse_in_progress_condition)]
    in_progress_conditions: Vec<(String, ConditionReason)>,
    /// A field comparison that shows a kind's controller still at work, as KIND=FIELD OP VALUE
    /// (e.g. 'Widget.example.com=status.updatedReplicas != spec.replicas'; OP one of ==, !=, <,
    /// <=, >, >=; VALUE a spec./status. path, a number, true/false or a string). Added to the
    /// built-in signals of Deployment, StatefulSet, DaemonSet and ReplicaSet.
    #[arg(long = "in-progress-field", value_parser = parse_in_progress_field)]
    in_progress_fields: Vec<(String, Comparison)>,
    /// A field comparison that says a kind's spec asks for no progress, as KIND=FIELD OP VALUE
    /// (e.g. 'Widget.example.com=spec.suspend == true'): while it holds, none of the kind's
    /// signals does, so a generation observed then is finished.
    #[arg(long = "in-progress-paused", value_parser = parse_in_progress_field)]
    in_progress_paused: Vec<(String, Comparison)>,
    /// The rule before finishing was kept: a generation is finished as soon as its controller
    /// reports it observed, whatever its status shows (rollouts after that read as drift).
    #[arg(long)]
    observed_is_finished: bool,
    /// Most objects kept in state; the coldest are evicted past it.
    #[arg(long, default_value_t = 2_000_000)]
    max_objects: usize,
    /// How far back (in event time) a drift looks for the origin writes it reverts, e.g. 168h, 30m.
    #[arg(long, default_value = "168h", value_parser = parse_duration_us)]
    revert_horizon: i64,
    /// Platform policies that approve or reject drift: the [[policy]] tables of a pipeline file or of a file that holds only those.
    #[arg(long)]
    policies: Option<PathBuf>,
    /// Longest line read, in bytes; longer lines are counted as invalid (too_large).
    #[arg(long, default_value_t = 16 << 20)]
    max_line_bytes: usize,
    /// Write the enriched events into this history store (SQLite, created when missing, read
    /// by `why`) instead of stdout; events already in it are not written again.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// With --history: remove mutations older than this before the newest one (e.g. 30d; 0 keeps all).
    #[arg(long, default_value = "30d", value_parser = parse_duration_us)]
    history_max_age: i64,
    /// With --history: keep the store (database and WAL) under this many bytes (0: no limit).
    #[arg(long, default_value_t = 10 << 30)]
    history_max_bytes: u64,
    /// Do not show a progress bar (it only shows on a terminal anyway).
    #[arg(long)]
    no_progress: bool,
    /// Do not print the summary on stderr.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(clap::Args)]
struct WhyArgs {
    /// The object as KIND/NAME: the kind in any case, singular or plural, with its group if
    /// needed (pod/web-1, replicasets/web-7d9f, Deployment.apps/web). Leave it out with --uid.
    #[arg(value_name = "KIND/NAME", required_unless_present = "uid", value_parser = why::parse_object)]
    object: Option<(String, String)>,
    /// Its namespace; without it, every namespace is searched ('' for a cluster-scoped object).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Its cluster (as the service named it); without it, every cluster is searched.
    #[arg(long)]
    cluster: Option<String>,
    /// Its UID: picks one of several objects of the same name.
    #[arg(long)]
    uid: Option<String>,
    /// The story up to this time: RFC 3339 (2026-11-20T10:00:00Z) or how long ago (90s, 30m, 2h, 1d).
    #[arg(long, value_parser = parse_at)]
    at: Option<i64>,
    /// Most writes told, the newest (up to --at); the story says how many earlier ones it left out
    /// and the --before that tells them.
    #[arg(long, default_value_t = kausality_stream::history::story::DEFAULT_WRITES, value_parser = parse_writes_limit)]
    limit: usize,
    /// Only the writes before this cursor (what a story that left earlier writes out says).
    #[arg(long)]
    before: Option<String>,
    /// The history store to read [default: kausality-history.db, where the default pipeline writes it].
    #[arg(long, conflicts_with = "server")]
    history: Option<PathBuf>,
    /// Ask the query API of a running service instead (GET URL/v1/why), e.g. http://127.0.0.1:9091.
    #[arg(long)]
    server: Option<String>,
    /// Bearer token for --server (better given in the environment).
    #[arg(long, env = "KAUSALITY_QUERY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificates (PEM) to trust for an https --server, besides the system's.
    #[arg(long, value_name = "FILE", requires = "server", conflicts_with = "history")]
    ca: Option<PathBuf>,
    /// Client certificate (PEM) for an https --server that asks for one; with --key.
    #[arg(long, value_name = "FILE", requires_all = ["server", "key"], conflicts_with = "history")]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM); with --cert.
    #[arg(long, value_name = "FILE", requires_all = ["server", "cert"], conflicts_with = "history")]
    key: Option<PathBuf>,
    /// text for a person, json (the story as the query API serves it) for scripts.
    #[arg(long, short, value_enum, default_value_t = WhyOutput::Text)]
    output: WhyOutput,
}

#[derive(Clone, Copy, ValueEnum)]
enum WhyOutput {
    Text,
    Json,
}

fn parse_at(s: &str) -> Result<i64, String> {
    why::parse_at(s, kausality_stream::shell::now_us())
}

fn parse_writes_limit(s: &str) -> Result<usize, String> {
    let most = kausality_stream::history::story::MAX_WRITES;
    s.parse::<usize>()
        .ok()
        .filter(|n| (1..=most).contains(n))
        .ok_or_else(|| format!("{s:?}: a whole number from 1 to {most}"))
}

#[derive(Clone, Copy, ValueEnum)]
enum UnwrapArg {
    None,
    Aks,
}

/// A duration flag, in microseconds: the pipeline file's parser (`500ms`, `10m`, `30d`, ...).
fn parse_duration_us(s: &str) -> Result<i64, String> {
    kausality_stream::shell::duration::parse(s).map(|d| d.as_micros() as i64)
}

fn parse_class(s: &str) -> Result<Class, String> {
    Class::ALL
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| format!("unknown class {s:?}; one of {}", Class::ALL.map(Class::as_str).join(", ")))
}

fn parse_ignore_field(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, p)) if !k.is_empty() && !p.is_empty() => Ok((k.to_string(), p.to_string())),
        _ => Err(format!("{s:?}: expected KIND=PATH, e.g. Deployment.apps=spec.replicas")),
    }
}

fn parse_in_progress_condition(s: &str) -> Result<(String, ConditionReason), String> {
    let (kind, signal) = s
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?}: expected KIND=TYPE=REASON, e.g. Widget.example.com=Synced=Reconciling"))?;
    Ok((kind.to_string(), ConditionReason::parse(signal)?))
}

fn parse_in_progress_field(s: &str) -> Result<(String, Comparison), String> {
    let (kind, signal) = s.split_once('=').filter(|(k, _)| !k.is_empty() && !k.contains(' ')).ok_or_else(|| {
        format!(
            "{s:?}: expected KIND=FIELD OP VALUE, e.g. 'Widget.example.com=status.updatedReplicas != spec.replicas'"
        )
    })?;
    Ok((kind.to_string(), Comparison::parse(signal)?))
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn replay(args: ReplayArgs) -> Result<ExitCode> {
    if args.history_max_bytes != 0 && args.history_max_bytes < kausality_stream::sinks::history::MIN_BYTES {
        bail!("--history-max-bytes {} is too small: 0 (no limit) or at least 1048576 (1 MiB)", args.history_max_bytes);
    }
    let mut opts = ReplayOptions {
        inputs: args.files,
        classes: args.classes,
        progress: !args.no_progress,
        max_line_bytes: args.max_line_bytes,
        history: args.history,
        history_retention: Retention {
            max_age: std::time::Duration::from_micros(args.history_max_age.max(0) as u64),
            max_bytes: args.history_max_bytes,
        },
        ..ReplayOptions::default()
    };
    opts.processor.default_cluster = args.cluster;
    opts.processor.reorder_window_us = args.reorder_window;
    opts.processor.max_clock_skew_us = args.max_clock_skew;
    opts.processor.decode.unwrap = match args.unwrap {
        UnwrapArg::None => Unwrap::None,
        UnwrapArg::Aks => Unwrap::Aks,
    };
    opts.processor.decode.max_record_bytes = args.max_line_bytes;
    opts.engine.max_objects = args.max_objects;
    opts.engine.revert_horizon_us = args.revert_horizon;
    for (kind, path) in args.ignore_fields {
        opts.model.ignore_field(&kind, &path);
    }
    for (kind, c) in args.in_progress_conditions {
        opts.model.add_progress(&kind, vec![c], Vec::new(), true);
    }
    for (kind, c) in args.in_progress_fields {
        opts.model.add_progress(&kind, Vec::new(), vec![c], true);
    }
    for (kind, c) in args.in_progress_paused {
        opts.model.add_paused(&kind, vec![c]);
    }
    opts.model.observed_is_finished = args.observed_is_finished;
    if let Some(file) = &args.policies {
        let policies = pipeline::load_policies(file)?;
        pipeline::model_policies(&policies, &mut opts.model).map_err(anyhow::Error::msg)?;
    }
    let stdout = io::stdout();
    let outcome = replay::run(&opts, &mut stdout.lock()).context("writing enriched events")?;
    if !args.quiet {
        eprint!("{}", outcome.render());
    }
    if outcome.nothing_read() {
        bail!("nothing could be read from the input (see the summary above)");
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    let mut cfg = match &args.pipeline {
        Some(path) => pipeline::load_file(path)?,
        None => pipeline::load_str("<embedded pipelines/default.toml>", pipeline::DEFAULT_PIPELINE)?,
    };
    Overrides { listen: args.listen, metrics_listen: args.metrics_listen, query_listen: args.query_listen }
        .apply(&mut cfg);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kausality-io")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let running = pipeline::start(cfg).await?;
        tokio::select! {
            signal = shutdown_signal() => tracing::info!(signal, "signal received; shutting down"),
            // The pipeline can also stop on its own (a failed processor).
            _ = running_stopped(&running) => {}
        }
        let outcome = running.shutdown().await;
        if !outcome.clean {
            bail!("shutdown was not clean (see the log above)");
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn running_stopped(running: &pipeline::Running) {
    running.stopped().await
}

/// SIGTERM (Kubernetes, docker stop) or SIGINT (Ctrl-C). A second signal exits at once.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("second signal: exiting without a clean shutdown");
        std::process::exit(130);
    });
    name
}

fn validate(args: ValidateArgs) -> Result<ExitCode> {
    let mut failed = false;
    for file in &args.files {
        match pipeline::load_file(file) {
            Ok(_) => println!("{}: ok", file.display()),
            Err(errors) => {
                failed = true;
                println!("{errors}");
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn generate(args: GenerateArgs) -> Result<ExitCode> {
    let opts = CorpusOptions {
        seed: args.seed,
        namespaces: args.namespaces,
        deployments_per_namespace: args.deployments,
        events: args.events,
        managed_fields: args.managed_fields,
        event_list_size: args.event_list_size,
        teardown: !args.no_teardown,
    };
    let written = match &args.output {
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            let mut out = io::BufWriter::new(file);
            let n = corpus::generate(&opts, &mut out)?;
            io::Write::flush(&mut out)?;
            n
        }
        None => corpus::generate(&opts, &mut io::BufWriter::new(io::stdout().lock()))?,
    };
    eprintln!("wrote {written} audit events");
    Ok(ExitCode::SUCCESS)
}

fn why(args: WhyArgs) -> Result<ExitCode> {
    let (kind, name) = args.object.map_or((String::new(), None), |(k, n)| (k, Some(n)));
    let q = kausality_stream::history::story::StoryQuery {
        cluster: args.cluster,
        kind,
        namespace: args.namespace,
        name,
        uid: args.uid,
        at_us: args.at,
        limit: Some(args.limit),
        before: args.before,
    };
    let source = match args.server {
        Some(url) => why::Source::Server(why::Server {
            url,
            token: args.token,
            tls: why::ClientTls { ca: args.ca, cert: args.cert, key: args.key },
        }),
        None => why::Source::Store(args.history.unwrap_or_else(|| PathBuf::from(why::DEFAULT_STORE))),
    };
    let story = why::story(&source, &q)?;
    let mut out = io::stdout().lock();
    match args.output {
        WhyOutput::Json => {
            serde_json::to_writer(&mut out, &story)?;
            io::Write::write_all(&mut out, b"\n")?;
        }
        WhyOutput::Text => {
            // Colours only on a terminal, and never when NO_COLOR is set.
            let color = io::IsTerminal::is_terminal(&out) && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            io::Write::write_all(&mut out, why::render(&story, why::Style { color }).as_bytes())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An error and its causes, each said once. Many errors put their source's words in their own
/// message and name it as their source too (`history store X: {source}`); printing the chain
/// (`{:#}`) would say those words again, then those of the source's own source. The walk stops
/// at the first cause whose words were already said: the error that quoted it said enough.
fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            break;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    let result = match cli.command {
        Command::Replay(args) => replay(args),
        Command::Serve(args) => serve(args),
        Command::Validate(args) => validate(args),
        Command::Generate(args) => generate(args),
        Command::Why(args) => why(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}
