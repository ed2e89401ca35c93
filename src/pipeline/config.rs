//! The pipeline file (`pipelines/*.toml`): what one `serve` process reads, classifies and
//! writes. Every struct rejects unknown keys (a typo must not silently fall back to a default),
//! and every field says its default where it is declared. [`super::load`] turns a file into
//! this, reporting every error at once.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::config::{LifecycleSignal, PolicyAction};
use crate::shell::{Span, UnknownParentsConfig};
use crate::sinks::SinkConfig;
use crate::sources::SourceConfig;

/// A whole pipeline file.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Cluster name for events whose source names none (`POST /audit`, file sources).
    /// Default: `"default"`.
    pub cluster: String,
    /// `[options]`: queues, the reorder window, timeouts.
    pub options: Options,
    /// `[scope]`: which events the pipeline looks at.
    pub scope: ScopeConfig,
    /// `[[ignore]]`: fields whose changes are no change of intent.
    pub ignore: Vec<IgnoreConfig>,
    /// `[[lifecycle]]`: how kinds tell that they are initialized, deleting or paused.
    pub lifecycle: Vec<LifecycleConfig>,
    /// `[[in_progress]]`: how kinds tell that a rollout is under way.
    pub in_progress: Vec<InProgressConfig>,
    /// Fields whose values are never kept, besides the defaults (DESIGN §1.8, [`crate::redact`]).
    pub sensitive: Vec<SensitiveConfig>,
    /// Platform policies that approve or reject drift, in order (DESIGN §1.7).
    pub policies: Vec<PolicyConfig>,
    /// The pipeline's own appliers, after the built-in profiles (DESIGN §1.9).
    pub appliers: Vec<crate::config::appliers::ApplierConfig>,
    /// Where audit events come from; at least one.
    pub sources: Vec<SourceConfig>,
    /// Where enriched events go; none is allowed (metrics only).
    pub sinks: Vec<SinkConfig>,
    /// `[metrics]`: the metrics listener and the kinds written as labels.
    pub metrics: MetricsConfig,
    /// `[state]`: bounds of the state, and its snapshot.
    pub state: StateConfig,
    /// `[unknown_parents]`: fetching parents the stream never showed.
    pub unknown_parents: UnknownParentsConfig,
    /// The query API's listener; `None`: no query API.
    pub query: Option<crate::query::QueryConfig>,
}

/// `[options]`: how the processing chain behaves.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// How long writes are held to be applied in resourceVersion order, counted from when the
    /// source received them (the webhook read the body, the Kafka consumer polled the message);
    /// later writes are still applied and counted as late. Default: `"500ms"`.
    pub reorder_window: Span,
    /// Most writes held per cluster before the oldest are released early. Default: 100000.
    pub reorder_max_held: usize,
    /// A write stamped further than this ahead of the service's clock is counted
    /// (`kausality_future_events_total`) and taken as stamped when it arrived: one bad clock
    /// must not drive the reorder window, the verdict's freshness or the history's retention.
    /// `"0"` turns the check off. Default: `"10m"`.
    pub max_clock_skew: Span,
    /// Most clusters (names from `/audit/{cluster}` or a Kafka header, and `cluster`); a body
    /// of a new cluster past it is refused (the webhook answers 400). Default: 1000.
    pub max_clusters: usize,
    /// Most objects kept in state; the coldest are evicted past it. Default: 2000000.
    pub max_objects: usize,
    /// Most hops in an enriched event's trace, 2 to 1024; past it the oldest are cut and the
    /// event says `traceTruncated` (real trees are 2-5 deep). Default: 32.
    pub max_trace_hops: usize,
    /// How many recent auditIDs are remembered to drop redelivered events. Default: 200000.
    pub dedupe_capacity: usize,
    /// How long a deleted object is remembered, so its children's later deletes read as
    /// teardown. Default: `"15m"`.
    pub tombstone_ttl: Span,
    /// Largest audit event accepted, in bytes, each one also inside an EventList (a body's
    /// own limit is its source's). Default: 8388608 (8 MiB): an event carries the request and
    /// the response object, each up to the API server's 3 MiB.
    pub max_record_bytes: usize,
    /// Bodies queued between the sources and the processor. When full, the webhook answers
    /// 429 with Retry-After (the API server retries). Default: 64.
    pub queue_capacity: usize,
    /// Batches of enriched events queued in front of each sink. When full, the processor
    /// waits (and the webhook's queue fills up). Default: 64.
    pub sink_queue_capacity: usize,
    /// How often the reorder buffer is checked for writes whose window has passed.
    /// Default: `"50ms"`.
    pub tick_interval: Span,
    /// Upper bound on a graceful shutdown (drain, flush sinks, write the snapshot).
    /// Default: `"25s"` (below Kubernetes' default 30 s grace period).
    pub shutdown_timeout: Span,
    /// How far back (event time) a drift looks for the origin writes it reverts (DESIGN §1.8).
    /// Default: `"168h"` (7 days).
    pub revert_horizon: Span,
    /// Most contents of controller-owned children kept, so that an origin write can name the
    /// fields it changed (the least recently written go first). Default: 16384.
    pub revert_contents_max_entries: usize,
    /// Most bytes of JSON text in that cache (the memory it costs, plus about 100 bytes per
    /// entry). Default: 16777216 (16 MiB).
    pub revert_contents_max_bytes: usize,
    /// Kind keys whose field changes are not tracked (their reverts are named without fields).
    /// Default: `["Pod"]`.
    pub revert_untracked_kinds: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            reorder_window: Span::ms(500),
            reorder_max_held: 100_000,
            max_clock_skew: Span::secs(600),
            max_clusters: crate::order::DEFAULT_MAX_CLUSTERS,
            max_objects: 2_000_000,
            max_trace_hops: crate::trace::DEFAULT_MAX_HOPS,
            dedupe_capacity: 200_000,
            tombstone_ttl: Span::secs(15 * 60),
            max_record_bytes: 8 << 20,
            queue_capacity: 64,
            sink_queue_capacity: 64,
            tick_interval: Span::ms(50),
            shutdown_timeout: Span::secs(25),
            revert_horizon: Span::secs(7 * 24 * 3600),
            revert_contents_max_entries: crate::classify::DEFAULT_CONTENTS_MAX_ENTRIES,
            revert_contents_max_bytes: crate::classify::DEFAULT_CONTENTS_MAX_BYTES,
            revert_untracked_kinds: vec!["Pod".to_string()],
        }
    }
}

/// `[scope]`: which events are looked at. Empty include lists include everything.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeConfig {
    /// API groups to look at (`core` or `""` for the core group). Default: all.
    pub include_groups: Vec<String>,
    /// API groups to leave out. Default: none.
    pub exclude_groups: Vec<String>,
    /// Resources (plural, as in `objectRef.resource`: `deployments`) to look at. Default: all.
    pub include_resources: Vec<String>,
    /// Resources to leave out, e.g. `["leases", "events"]`. Default: none.
    pub exclude_resources: Vec<String>,
    /// Namespaces to look at; cluster-scoped objects are always looked at. Default: all.
    pub include_namespaces: Vec<String>,
    /// Namespaces to leave out. Default: none.
    pub exclude_namespaces: Vec<String>,
    /// Equality-based label selector on the written object: `k=v`, `k!=v`, `k`, `!k`,
    /// comma-separated. Default: none.
    pub label_selector: Option<String>,
}

/// `[[ignore]]`: fields of a kind that do not count as a spec change.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreConfig {
    /// Kind key: `Kind.group`, or `Kind` for the core group (e.g. `Deployment.apps`). Required.
    pub kind: String,
    /// Dotted field paths, e.g. `["spec.replicas"]`. Required.
    pub paths: Vec<String>,
}

/// `[[sensitive]]`: fields whose values are never kept, on top of the defaults that always
/// hold (a Secret's `data` and `stringData`; any `password`, `token`, `apiKey`,
/// `clientSecret`, `privateKey`, `secretKey` or `accessKey`). What a drift reverts names such
/// a field with a digest and a length instead of its value, in every output.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitiveConfig {
    /// Kind key (`Kind.group`, or `Kind` for the core group) whose `fields` are sensitive.
    /// Required with `fields`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Dotted field paths of `kind`: every value at or below each is redacted (e.g.
    /// `["spec.credentials"]`). Default: none.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Key names whose values are redacted wherever they appear, in every kind (e.g.
    /// `["sshKey"]`). Default: none.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `[[lifecycle]]`: how a kind of parent shows it has initialized (replaces the defaults).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Kind key: `Kind.group`, or `Kind` for the core group. Required.
    pub kind: String,
    /// Any of `initializedCondition`, `readyCondition`, `availableCondition`,
    /// `phaseAnnotation`, `observedGeneration`. Required.
    pub signals: Vec<LifecycleSignal>,
}

/// `[[in_progress]]`: what in a parent kind's status shows its controller still at work on the
/// generation it reports observed (DESIGN §1.3). A generation is finished at the first write
/// that reports it observed and shows none of these; a controller's child write before that is
/// `expected`, after it `drift`. Entries of one kind add up.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InProgressConfig {
    /// Kind key: `Kind.group`, or `Kind` for the core group. Required.
    pub kind: String,
    /// Conditions whose reason means work in progress, as `Type=Reason` (e.g.
    /// `Synced=Reconciling`). Default: none.
    #[serde(default)]
    pub conditions: Vec<String>,
    /// Comparisons that hold while the controller is at work, as `FIELD OP VALUE`: `FIELD` a
    /// dotted path under `spec.` or `status.`, `OP` one of `==`, `!=`, `<`, `<=`, `>`, `>=`,
    /// `VALUE` another such path, a number, `true`/`false` or a string (e.g.
    /// `status.updatedReplicas != spec.replicas`). An absent field shows nothing. Default: none.
    #[serde(default)]
    pub fields: Vec<String>,
    /// Comparisons, written as `fields` are, that say the spec asks for no progress (e.g.
    /// `spec.suspend == true`): while one holds, none of the kind's signals does, the built-in
    /// ones included, so a generation observed then is finished. Default: none.
    #[serde(default)]
    pub paused: Vec<String>,
    /// Keep the built-in signals of Deployment, StatefulSet, DaemonSet and ReplicaSet; `false`
    /// turns them off for this kind. Default: `true`.
    #[serde(default = "keep_builtin")]
    pub builtin: bool,
}

fn keep_builtin() -> bool {
    true
}

/// `[[policy]]`: a named platform policy that approves or rejects drift (DESIGN §1.7). Every
/// criterion given must hold; an absent one matches anything. The parent's own annotations
/// (`kausality.io/approvals`, `rejections`, `freeze`) win over every policy; among policies a
/// rejection wins over an approval, and the first matching policy of that action in the file
/// names the resolution (the enriched event's `policy`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Unique name, written into the enriched event and the drift report. Required.
    pub name: String,
    /// `approve` or `reject`. Required.
    pub action: PolicyAction,
    /// What the policy is for, in words. Default: none.
    #[serde(default)]
    pub description: Option<String>,
    /// Kind keys of the parent (`ReplicaSet.apps`, `Widget.example.io`). Default: any.
    #[serde(default)]
    pub parent_kinds: Vec<String>,
    /// Kind keys of the drifting child (`Pod`, `ConfigMap`). Default: any.
    #[serde(default)]
    pub child_kinds: Vec<String>,
    /// Users that made the drift (the parent's controller), exactly as in the audit event.
    /// Default: any.
    #[serde(default)]
    pub controllers: Vec<String>,
    /// Namespaces of the drifting child. Default: any.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Equality-based label selector on the **parent's** labels (`team=platform,!canary`).
    /// Default: any.
    #[serde(default)]
    pub parent_labels: Option<String>,
    /// `true`: only drift that reverts a person's write (DESIGN §1.8); `false`: only drift that
    /// reverts none. Default: either.
    #[serde(default)]
    pub reverts_person: Option<bool>,
}

/// `[metrics]`: the listener of `/metrics`, `/healthz` and `/readyz`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address to listen on. Default: `"127.0.0.1:9090"`.
    pub listen: SocketAddr,
    /// Kinds (`Kind` or `Kind.group`) written as themselves in the `kind` and `parent_kind`
    /// labels, besides the built-in kinds and those `[[ignore]]`, `[[lifecycle]]` and
    /// `[[in_progress]]` name;
    /// any other kind is `other` (kinds are free text in ownerReferences). Default: none.
    pub kinds: Vec<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { listen: SocketAddr::from(([127, 0, 0, 1], 9090)), kinds: Vec::new() }
    }
}

/// `[state]`: the snapshot that lets a restart keep what the stream taught.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Snapshot file, written atomically (temporary file, then rename) every
    /// `snapshot_interval` and on shutdown, and read at start-up. With a Kafka source's state
    /// changelog, a cache of it: each partition assigned is loaded from it when its changelog
    /// position is still good (docs/scale-out.md, "Snapshots"). Default: none (state is lost
    /// on restart, or comes from the changelog).
    pub snapshot: Option<PathBuf>,
    /// How often the snapshot is written while running. Default: `"60s"`.
    pub snapshot_interval: Span,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { snapshot: None, snapshot_interval: Span::secs(60) }
    }
}
