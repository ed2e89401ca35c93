//! Building a pipeline before anything of it runs: the metrics (their series at zero), the
//! model with the options of the pipeline file, the processor with the state restored from
//! the snapshot (or, with a Kafka state changelog, its topic created or checked), and what the
//! running parts will share.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "kafka")]
use std::time::Duration;

use super::config::PipelineConfig;
use super::error::Error;
use super::{load, snapshot_file};
use crate::classify::{Engine, EngineOptions};
use crate::config::progress::{Comparison, ConditionReason};
use crate::config::ModelConfig;
use crate::decode::DecodeOptions;
use crate::metrics::Metrics;
use crate::process::{Clock, Processor, ProcessorOptions};
use crate::scope::{LabelSelector, Scope};
use crate::sources::SourceConfig;
use crate::status::Status;

/// Longest a Kafka transaction call (send offsets, commit, abort) may block.
#[cfg(feature = "kafka")]
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A pipeline built, not yet running.
pub(super) struct Parts {
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    /// The processor, with the state of the snapshot when there is one.
    pub processor: Processor,
    /// What the parts report about themselves (`/readyz`, the exit code).
    pub status: Arc<Status>,
    /// Exactly-once Kafka: the positions the restored state covers, by topic and partition.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub resume: HashMap<(String, i32), i64>,
    /// Exactly-once Kafka: the transaction the source and the Kafka sink share, and how often
    /// it is committed.
    #[cfg(feature = "kafka")]
    pub transaction: Option<(Arc<crate::kafka::Transaction>, Duration)>,
    /// The Kafka source's state changelog, when it has one on: the state is kept per
    /// partition, restored from it when a partition is assigned.
    #[cfg(feature = "kafka")]
    pub changelog: Option<Arc<crate::changelog::Changelog>>,
}

/// Builds the pipeline of `cfg`: fails only when the snapshot cannot be restored, or the
/// changelog topic cannot be created or is not fit.
pub(super) async fn build(cfg: &PipelineConfig) -> Result<Parts, Error> {
    let metrics = metrics(cfg);
    let engine = Arc::new(Engine::new(model_config(cfg), engine_options(cfg)));
    let mut processor = Processor::new(engine.clone(), metrics.clone(), processor_options(cfg));
    #[cfg(feature = "kafka")]
    let changelog = start_changelog(cfg, &engine, &metrics).await?;
    #[cfg(feature = "kafka")]
    if let Some(c) = &changelog {
        processor.keep_partitions(c.partitions.clone());
        if let Some(path) = &cfg.state.snapshot {
            c.use_snapshot(restore_cached(path, &mut processor));
        }
    }
    let resume = restore(cfg, &mut processor)?;
    Ok(Parts {
        metrics,
        engine,
        processor,
        status: Arc::new(Status::default()),
        resume,
        #[cfg(feature = "kafka")]
        transaction: transaction(cfg),
        #[cfg(feature = "kafka")]
        changelog,
    })
}

/// Whether the pipeline's Kafka source keeps the state in a changelog.
fn with_changelog(cfg: &PipelineConfig) -> bool {
    cfg.sources.iter().any(|s| matches!(s, SourceConfig::Kafka(k) if k.changelog_on().is_some()))
}

/// The snapshot file. With a changelog it is a cache of the changelog (read by
/// [`restore_cached`], written by the changelog), else the state itself.
pub(super) fn snapshot_path(cfg: &PipelineConfig) -> Option<&PathBuf> {
    cfg.state.snapshot.as_ref()
}

/// The state changelog of the pipeline's Kafka source, when it has one on: its topic is
/// created or checked before anything is read.
#[cfg(feature = "kafka")]
async fn start_changelog(
    cfg: &PipelineConfig,
    engine: &Arc<Engine>,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<crate::changelog::Changelog>>, Error> {
    let Some(k) = cfg.sources.iter().find_map(|s| match s {
        SourceConfig::Kafka(k) if k.changelog_on().is_some() => Some(k),
        _ => None,
    }) else {
        return Ok(None);
    };
    let changelog = crate::changelog::Changelog::new(&k.changelog_settings(), engine.clone(), metrics.clone())?;
    changelog.ensure_topic(&k.topics[0]).await?;
    tracing::info!(topic = %changelog.topic, exactly_once = k.exactly_once, "state kept per partition in the changelog");
    Ok(Some(Arc::new(changelog)))
}

fn metrics(cfg: &PipelineConfig) -> Arc<Metrics> {
    // Kinds the pipeline names are written as themselves in metric labels; others as `other`.
    let named = cfg
        .ignore
        .iter()
        .map(|i| &i.kind)
        .chain(cfg.lifecycle.iter().map(|l| &l.kind))
        .chain(cfg.in_progress.iter().map(|p| &p.kind));
    let named = named.chain(&cfg.metrics.kinds);
    let metrics = Arc::new(Metrics::with_kinds(named));
    // Series that exist from the start, at zero, so that rates work from the first scrape.
    let sources = cfg.sources.iter().map(|s| (s.kind(), matches!(s, SourceConfig::Webhook(_))));
    metrics.pipeline_series(sources, with_changelog(cfg), cfg.state.snapshot.is_some());
    metrics
}

pub(super) fn model_config(cfg: &PipelineConfig) -> ModelConfig {
    let mut model = ModelConfig::default();
    for ig in &cfg.ignore {
        for p in &ig.paths {
            model.ignore_field(&ig.kind, p);
        }
    }
    model.untracked_field_kinds = cfg.options.revert_untracked_kinds.clone();
    for sc in &cfg.sensitive {
        if let Some(kind) = &sc.kind {
            sc.fields.iter().for_each(|f| model.sensitive.add_field(kind, f));
        }
        sc.keys.iter().for_each(|k| model.sensitive.add_key(k));
    }
    // Checked by `load`.
    if let Err(e) = load::model_policies(&cfg.policies, &mut model) {
        tracing::error!(error = %e, "platform policies left out");
    }
    load::model_appliers(&cfg.appliers, &mut model);
    for lc in &cfg.lifecycle {
        model.lifecycle.insert(lc.kind.clone(), lc.signals.clone());
    }
    // Checked by `load`: what does not parse was refused there.
    for ip in &cfg.in_progress {
        let conditions = ip.conditions.iter().filter_map(|c| ConditionReason::parse(c).ok()).collect();
        let fields = ip.fields.iter().filter_map(|f| Comparison::parse(f).ok()).collect();
        model.add_progress(&ip.kind, conditions, fields, ip.builtin);
        model.add_paused(&ip.kind, ip.paused.iter().filter_map(|f| Comparison::parse(f).ok()).collect());
    }
    model
}

fn engine_options(cfg: &PipelineConfig) -> EngineOptions {
    let o = &cfg.options;
    EngineOptions {
        max_objects: o.max_objects,
        tombstone_ttl_us: o.tombstone_ttl.as_micros_i64(),
        max_trace_hops: o.max_trace_hops,
        revert_horizon_us: o.revert_horizon.as_micros_i64(),
        contents_max_entries: o.revert_contents_max_entries,
        contents_max_bytes: o.revert_contents_max_bytes,
    }
}

fn processor_options(cfg: &PipelineConfig) -> ProcessorOptions {
    let o = &cfg.options;
    ProcessorOptions {
        default_cluster: cfg.cluster.clone(),
        reorder_window_us: o.reorder_window.as_micros_i64(),
        reorder_max_held: o.reorder_max_held,
        max_clusters: o.max_clusters,
        dedupe_capacity: o.dedupe_capacity,
        decode: DecodeOptions { max_record_bytes: o.max_record_bytes, ..DecodeOptions::default() },
        clock: Clock::Arrival,
        scope: scope(cfg),
        max_clock_skew_us: o.max_clock_skew.as_micros_i64(),
    }
}

/// The pipeline's scope; `None`: everything.
pub(super) fn scope(cfg: &PipelineConfig) -> Option<Arc<Scope>> {
    let s = &cfg.scope;
    let set = |v: &Vec<String>| v.iter().map(|g| if g.is_empty() { "core".to_string() } else { g.clone() }).collect();
    let scope = Scope {
        include_groups: set(&s.include_groups),
        exclude_groups: set(&s.exclude_groups),
        include_resources: s.include_resources.iter().cloned().collect(),
        exclude_resources: s.exclude_resources.iter().cloned().collect(),
        include_namespaces: s.include_namespaces.iter().cloned().collect(),
        exclude_namespaces: s.exclude_namespaces.iter().cloned().collect(),
        // Checked by `load`.
        labels: s.label_selector.as_deref().and_then(|l| LabelSelector::parse(l).ok()).unwrap_or_default(),
    };
    (!scope.is_everything()).then(|| Arc::new(scope))
}

/// Restores the snapshot into `processor`, when the pipeline has one and it exists; returns
/// the Kafka positions the restored state covers (exactly-once).
fn restore(cfg: &PipelineConfig, processor: &mut Processor) -> Result<HashMap<(String, i32), i64>, Error> {
    let mut resume = HashMap::new();
    let Some(path) = snapshot_path(cfg).filter(|_| !with_changelog(cfg)) else { return Ok(resume) };
    for stale in snapshot_file::remove_stale_temporaries(path) {
        tracing::info!(path = %stale.display(), "removed the temporary snapshot file of a process that was killed while writing it");
    }
    match snapshot_file::restore(path, processor)? {
        Some(r) => {
            tracing::info!(
                path = %path.display(),
                bytes = r.stats.bytes,
                objects = r.stats.content.objects,
                dedupe_ids = r.stats.content.dedupe_ids,
                kafka_positions = r.positions.len(),
                millis = r.stats.millis as u64,
                "state restored from snapshot"
            );
            resume.extend(r.positions.into_iter().map(|p| ((p.topic, p.partition), p.next)));
        }
        None => tracing::info!(path = %path.display(), "no snapshot yet: starting with empty state"),
    }
    Ok(resume)
}

/// With a changelog: the snapshot's dedupe window into `processor`, and its states by
/// partition, for the changelog to load when partitions are assigned. The snapshot is only a
/// cache then: one that cannot be read is said and left aside (each partition comes from the
/// changelog), never a reason not to start.
#[cfg(feature = "kafka")]
fn restore_cached(path: &std::path::Path, processor: &mut Processor) -> Option<crate::state::Cached> {
    for stale in snapshot_file::remove_stale_temporaries(path) {
        tracing::info!(path = %stale.display(), "removed the temporary snapshot file of a process that was killed while writing it");
    }
    match snapshot_file::restore_cached(path, processor) {
        Ok(Some((stats, Some(cached)))) => {
            tracing::info!(
                path = %path.display(),
                bytes = stats.bytes,
                topic = cached.topic(),
                partitions = ?cached.partitions(),
                states = cached.states(),
                dedupe_ids = stats.content.dedupe_ids,
                millis = stats.millis as u64,
                "state snapshot read: each partition it holds is loaded from it when assigned, if its changelog position is still good"
            );
            Some(cached)
        }
        Ok(Some((_, None))) => {
            tracing::warn!(path = %path.display(), "the state snapshot holds no changelog positions (written without a state changelog, or by an older version): each partition is restored from the changelog's start");
            None
        }
        Ok(None) => {
            tracing::info!(path = %path.display(), "no snapshot yet: each partition is restored from the changelog");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "the state snapshot cannot be read: each partition is restored from the changelog's start");
            None
        }
    }
}

/// With `exactly_once`, the Kafka source and the Kafka sink share one transaction.
#[cfg(feature = "kafka")]
fn transaction(cfg: &PipelineConfig) -> Option<(Arc<crate::kafka::Transaction>, Duration)> {
    cfg.sources.iter().find_map(|s| match s {
        SourceConfig::Kafka(k) if k.exactly_once => Some((
            Arc::new(crate::kafka::Transaction::new(k.transactional_id(), TRANSACTION_TIMEOUT)),
            k.transaction_interval.0,
        )),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::progress::Builtin;

    #[test]
    fn in_progress_entries_reach_the_model() {
        let text = r#"[[sources]]
type = "webhook"
plain_http = true
[[in_progress]]
kind = "Widget.example.com"
conditions = ["Synced=Reconciling"]
[[in_progress]]
kind = "Widget.example.com"
fields = ["status.phase == Updating"]
[[in_progress]]
kind = "Deployment.apps"
builtin = false
[[in_progress]]
kind = "ReplicaSet.apps"
conditions = ["Scaling=Waiting"]
[[in_progress]]
kind = "Widget.example.com"
paused = ["spec.suspend == true"]
"#;
        let model = model_config(&load::load_str("p.toml", text).unwrap());
        let widget = model.progress("Widget.example.com").expect("signals");
        assert_eq!(
            (widget.builtin, widget.conditions.len(), widget.fields.len(), widget.paused.len()),
            (None, 1, 1, 1),
            "entries of one kind add up"
        );
        assert!(model.progress("Deployment.apps").is_none(), "built-ins off, nothing else: finished when observed");
        let rs = model.progress("ReplicaSet.apps").expect("signals");
        assert_eq!((rs.builtin, rs.conditions.len()), (Some(Builtin::ReplicaSet), 1), "added to the built-ins");
        assert_eq!(
            model.progress("StatefulSet.apps").and_then(|p| p.builtin),
            Some(Builtin::StatefulSet),
            "untouched defaults"
        );
    }
}
