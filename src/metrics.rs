//! The service's metrics: one struct that owns the Prometheus registry and has a method for
//! each thing it records. Label values come from closed sets (STYLE 16): reasons, classes,
//! sinks, status codes, and kinds that are known (built in, or named in the pipeline), else
//! `other`; never a user, a UID, a cluster name or a kind as written in an ownerReference. The
//! names are listed in `deploy/metrics.txt` and checked against the exporter.

use std::collections::HashSet;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::classify::forward::Completion;
use crate::classify::Class;
use crate::decode::InvalidReason;
use crate::filter::Ignored;
use crate::intern::FastBuild;
use crate::state::policy::Resolution;
use crate::state::Refused;

/// The service's metrics: the registry and every family in it, shared as an `Arc`.
pub struct Metrics {
    registry: Registry,
    events_received: IntCounterVec,
    events_ignored: IntCounterVec,
    events_invalid: IntCounterVec,
    mutations: IntCounterVec,
    drift: IntCounterVec,
    /// Drift that reverts a person's write (DESIGN §1.8).
    person_reverts: IntCounterVec,
    /// Fields two actors flip back and forth (DESIGN §1.8), by kind and field path (a closed
    /// set: [`crate::classify::field_label`]).
    fights: IntCounterVec,
    /// A person's write to an object that an applier manages (DESIGN §1.9), by applier
    /// profile (built-in names, else `other`).
    applier_hand_edits: IntCounterVec,
    freeze_violations: IntCounterVec,
    late_events: IntCounter,
    /// Writes stamped later than the service's clock plus `max_clock_skew`: their time is
    /// taken as when they arrived, so that it drives no clock (reorder, freshness, retention).
    future_events: IntCounter,
    /// Writes whose classification failed inside the engine (a defect, never bad input: that
    /// is rejected by the decoder); the write is skipped, the service goes on.
    classify_failures: IntCounter,
    dedup_hits: IntCounter,
    reorder_buffer_events: IntGauge,
    tracked_objects: IntGauge,
    state_evictions: IntCounter,
    processing_lag: Histogram,
    sink_events: IntCounterVec,
    sink_errors: IntCounterVec,
    /// Ingest tier: audit events produced to the keyed topic and acknowledged, by copy
    /// (`judged`, `state`).
    route_messages: IntCounterVec,
    /// Ingest tier: messages the broker did not acknowledge (their body was answered 503).
    route_errors: IntCounter,
    /// Ingest tier: writes that name no object to key them by, by reason.
    route_unroutable: IntCounterVec,
    kafka_consumer_lag: IntGaugeVec,
    /// Exactly-once: transactions aborted because the group moved on, after which the state
    /// and positions went back to the last commit.
    kafka_rewinds: IntCounter,
    webhook_requests: IntCounterVec,
    /// Query API requests, by route (a closed set: [`crate::query::Route`]) and status code.
    query_requests: IntCounterVec,
    drift_reports: IntCounterVec,
    /// State snapshots that could not be written (the previous one is kept).
    snapshot_failures: IntCounter,
    /// With a state changelog and a snapshot: each partition assigned, by what the snapshot
    /// gave (`loaded`, or why not).
    snapshot_partitions: IntCounterVec,
    trace_messages: IntCounterVec,
    /// The history store's size on disk (database and WAL), after its last transaction.
    history_bytes: IntGauge,
    /// Rows of the history store whose stored event could not be read (damaged, or written
    /// by hand), by the query API route that met them (a closed set: `drift`, `why`): left
    /// out of a drift page, told from their columns in a story.
    history_unreadable_rows: IntCounterVec,
    /// Connections closed at once because their listener had `max_connections` open, by
    /// listener (`webhook`, `metrics`).
    connections_refused: IntCounterVec,
    /// TLS handshakes that failed, by reason (a closed set: [`crate::listen::HandshakeFailure`]).
    tls_handshake_failures: IntCounterVec,
    /// Connections cut by a timeout, by listener and phase (`headers`, `idle`).
    connection_timeouts: IntCounterVec,
    /// The counters of `events_ignored` and `events_invalid` by reason (bounded label values),
    /// looked up once: a third of a stream is ignored, and a lookup by label hashes and locks.
    ignored_by: [IntCounter; Ignored::ALL.len()],
    invalid_by: [IntCounter; InvalidReason::ALL.len()],
    /// Kinds written as themselves in the `kind` and `parent_kind` labels; any other is
    /// [`OTHER_KIND`]. A kind is free text in an ownerReference, and CRDs are many.
    known_kinds: HashSet<Box<str>, FastBuild>,
}

/// The `sink` label: a sink's `type` in the pipeline file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// `jsonl`.
    Jsonl,
    /// `http`.
    Http,
    /// `drift_report`.
    DriftReport,
    /// `kafka`.
    Kafka,
    /// `history`.
    History,
    /// `kafka_route`: the ingest tier's.
    KafkaRoute,
}

impl Sink {
    /// The label value, as the pipeline file spells the sink's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sink::Jsonl => "jsonl",
            Sink::Http => "http",
            Sink::DriftReport => "drift_report",
            Sink::Kafka => "kafka",
            Sink::History => "history",
            Sink::KafkaRoute => "kafka_route",
        }
    }
}

/// The `listener` label of the connection metrics, and the listener's name in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The audit webhook.
    Webhook,
    /// The query API.
    Query,
    /// `/metrics`, `/healthz` and `/readyz`.
    Metrics,
    /// A listener of none of the above (tests).
    Http,
}

impl Listener {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Webhook => "webhook",
            Listener::Query => "query",
            Listener::Metrics => "metrics",
            Listener::Http => "http",
        }
    }
}

/// The `result` label of `kausality_snapshot_partitions_total` for a partition the snapshot
/// gave its states to.
const SNAPSHOT_LOADED: &str = "loaded";

/// The status codes of the query API's series that exist from the start.
const QUERY_CODES: [&str; 4] = ["200", "400", "401", "404"];

/// The drift report phases, in the `phase` label.
const DRIFT_REPORT_PHASES: [&str; 2] = ["detected", "resolved"];

/// The label value of a kind that is neither built in nor named in the pipeline.
pub const OTHER_KIND: &str = "other";

/// Kinds of Kubernetes itself (and the few add-ons every cluster runs), written as
/// themselves in labels.
pub const BUILT_IN_KINDS: &[&str] = &[
    "APIService",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "ControllerRevision",
    "CronJob",
    "CustomResourceDefinition",
    "DaemonSet",
    "Deployment",
    "Endpoints",
    "EndpointSlice",
    "Event",
    "FlowSchema",
    "HorizontalPodAutoscaler",
    "Ingress",
    "IngressClass",
    "Job",
    "Lease",
    "LimitRange",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkPolicy",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "PodTemplate",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "ReplicaSet",
    "ReplicationController",
    "ResourceQuota",
    "Role",
    "RoleBinding",
    "RuntimeClass",
    "Secret",
    "Service",
    "ServiceAccount",
    "StatefulSet",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl Metrics {
    /// Metrics whose kind labels are the built-in kinds, else `other`.
    pub fn new() -> Self {
        Self::with_kinds(std::iter::empty::<&str>())
    }

    /// Metrics whose kind labels are the built-in kinds and `kinds` (the kinds a pipeline
    /// names, as `Kind` or `Kind.group`), else `other`.
    pub fn with_kinds<S: AsRef<str>>(kinds: impl IntoIterator<Item = S>) -> Self {
        let r = Registry::new();
        let processing_lag = Histogram::with_opts(
            HistogramOpts::new(
                "kausality_processing_lag_seconds",
                "Time from the audit event's stageTimestamp to its classification.",
            )
            .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
        )
        .expect("valid metric");
        r.register(Box::new(processing_lag.clone())).expect("unique metric");
        let kafka_consumer_lag = IntGaugeVec::new(
            Opts::new(
                "kausality_kafka_consumer_lag_messages",
                "Messages between the consumer's position and the partition's high watermark.",
            ),
            &["topic", "partition"],
        )
        .expect("valid metric");
        r.register(Box::new(kafka_consumer_lag.clone())).expect("unique metric");
        let events_ignored =
            counter_vec(&r, "kausality_events_ignored_total", "Audit events not classified, by reason.", &["reason"]);
        let events_invalid = counter_vec(
            &r,
            "kausality_events_invalid_total",
            "Records rejected as not decodable audit events, by reason.",
            &["reason"],
        );
        // Created here, so that dashboards show zeros instead of gaps.
        let ignored_by = Ignored::ALL.map(|reason| events_ignored.with_label_values(&[reason.as_str()]));
        let invalid_by = InvalidReason::ALL.map(|reason| events_invalid.with_label_values(&[reason.as_str()]));
        Metrics {
            events_received: counter_vec(&r, "kausality_events_received_total", "Audit events received, by source.", &["source"]),
            events_ignored,
            events_invalid,
            mutations: counter_vec(&r, "kausality_mutations_total", "Classified mutations, by class, parent kind and kind.", &["class", "parent_kind", "kind"]),
            drift: counter_vec(&r, "kausality_drift_total", "Drift, by parent kind, kind and resolution.", &["parent_kind", "kind", "resolution"]),
            person_reverts: counter_vec(
                &r,
                "kausality_person_reverts_total",
                "Drift that reverts a person's write (a change of the child, or a removal of a sibling it replaces), by parent kind, kind and resolution.",
                &["parent_kind", "kind", "resolution"],
            ),
            fights: counter_vec(
                &r,
                "kausality_fights_total",
                "Writes that put back a field whose value the writer's own earlier write had set and another actor had put back (two actors flipping a field), by kind and field path.",
                &["kind", "field"],
            ),
            applier_hand_edits: counter_vec(
                &r,
                "kausality_applier_hand_edits_total",
                "A person's writes to objects that an applier (GitOps, add-on manager) manages, by applier.",
                &["applier"],
            ),
            freeze_violations: counter_vec(&r, "kausality_freeze_violations_total", "Child mutations under a parent's freeze.", &["parent_kind"]),
            late_events: counter(&r, "kausality_late_events_total", "Writes applied after writes with a higher resourceVersion."),
            future_events: counter(
                &r,
                "kausality_future_events_total",
                "Writes stamped later than the service's clock plus max_clock_skew: taken as stamped when they arrived.",
            ),
            classify_failures: counter(&r, "kausality_classify_failures_total", "Writes skipped: classifying them failed (a defect, please report it)."),
            dedup_hits: counter(&r, "kausality_dedup_hits_total", "Audit events dropped as duplicates by auditID."),
            reorder_buffer_events: gauge(&r, "kausality_reorder_buffer_events", "Writes held in the reorder buffer."),
            tracked_objects: gauge(&r, "kausality_tracked_objects", "Objects in the state store."),
            state_evictions: counter(&r, "kausality_state_evictions_total", "Objects evicted from the state store (cap or tombstone expiry)."),
            processing_lag,
            sink_events: counter_vec(&r, "kausality_sink_events_total", "Enriched events delivered, by sink.", &["sink"]),
            sink_errors: counter_vec(&r, "kausality_sink_errors_total", "Sink delivery errors, by sink.", &["sink"]),
            route_messages: counter_vec(&r, "kausality_route_messages_total", "Audit events produced to the keyed topic and acknowledged, by copy.", &["copy"]),
            route_errors: counter(&r, "kausality_route_errors_total", "Messages to the keyed topic the broker did not acknowledge."),
            route_unroutable: counter_vec(&r, "kausality_route_unroutable_total", "Writes that name no object to key them by, by reason.", &["reason"]),
            kafka_consumer_lag,
            kafka_rewinds: counter(
                &r,
                "kausality_kafka_transaction_rewinds_total",
                "Exactly-once: transactions aborted because the group moved on; state and positions went back to the last commit.",
            ),
            webhook_requests: counter_vec(&r, "kausality_webhook_requests_total", "Webhook requests, by HTTP status code.", &["code"]),
            query_requests: counter_vec(&r, "kausality_query_requests_total", "Query API requests, by route and HTTP status code.", &["route", "code"]),
            drift_reports: counter_vec(&r, "kausality_drift_reports_total", "Drift reports sent, by phase.", &["phase"]),
            snapshot_failures: counter(&r, "kausality_snapshot_failures_total", "State snapshots that could not be written."),
            snapshot_partitions: counter_vec(
                &r,
                "kausality_snapshot_partitions_total",
                "Partitions assigned with a state changelog and a snapshot, by result: loaded from the snapshot, or why not (then restored from the changelog's start).",
                &["result"],
            ),
            trace_messages: counter_vec(
                &r,
                "kausality_trace_messages_total",
                "Trace messages between partitions of a state changelog, by result: sent to an object's own partition, or what applying one did (applied, already, stale, unknown, leaf).",
                &["result"],
            ),
            history_bytes: gauge(&r, "kausality_history_store_bytes", "Bytes of the history store on disk (database and WAL)."),
            history_unreadable_rows: counter_vec(
                &r,
                "kausality_history_unreadable_rows_total",
                "History store rows whose stored event could not be read, by query API route (left out of drift pages, told from their columns in stories).",
                &["route"],
            ),
            connections_refused: counter_vec(
                &r,
                "kausality_connections_refused_total",
                "Connections closed at once: the listener had max_connections open.",
                &["listener"],
            ),
            tls_handshake_failures: counter_vec(&r, "kausality_tls_handshake_failures_total", "Failed TLS handshakes, by reason.", &["reason"]),
            connection_timeouts: counter_vec(
                &r,
                "kausality_connection_timeouts_total",
                "Connections closed by a timeout, by listener and phase.",
                &["listener", "phase"],
            ),
            registry: r,
            ignored_by,
            invalid_by,
            known_kinds: BUILT_IN_KINDS
                .iter()
                .map(|k| Box::from(*k))
                .chain(kinds.into_iter().map(|k| Box::from(k.as_ref().split('.').next().unwrap_or_default())))
                .collect(),
        }
    }

    /// `n` audit events received by the source of type `source`.
    pub fn received(&self, source: &str, n: u64) {
        self.events_received.with_label_values(&[source]).inc_by(n);
    }

    /// An audit event not classified, for `reason`.
    pub fn ignored(&self, reason: Ignored) {
        self.ignored_by[reason as usize].inc();
    }

    /// A record rejected as not a decodable audit event, for `reason`.
    pub fn invalid(&self, reason: InvalidReason) {
        self.invalid_by[reason as usize].inc();
    }

    /// The label value of `kind`: itself when known (or empty: no parent), else `other`.
    pub fn kind_label<'a>(&self, kind: &'a str) -> &'a str {
        if kind.is_empty() || self.known_kinds.contains(kind) {
            kind
        } else {
            OTHER_KIND
        }
    }

    /// A classified mutation of `kind` under `parent_kind` (empty: no parent).
    pub fn classified(&self, class: Class, parent_kind: &str, kind: &str) {
        self.mutations.with_label_values(&[class.as_str(), self.kind_label(parent_kind), self.kind_label(kind)]).inc();
    }

    /// A drift of `kind` under `parent_kind`, resolved as `resolution`.
    pub fn drifted(&self, parent_kind: &str, kind: &str, resolution: Resolution) {
        self.drift.with_label_values(&[self.kind_label(parent_kind), self.kind_label(kind), resolution.as_str()]).inc();
    }

    /// A child mutation under a frozen parent of `parent_kind`.
    pub fn freeze_violated(&self, parent_kind: &str) {
        self.freeze_violations.with_label_values(&[self.kind_label(parent_kind)]).inc();
    }

    /// A drift of `kind` under `parent_kind` that reverts a person's write.
    pub fn reverted_person(&self, parent_kind: &str, kind: &str, resolution: Resolution) {
        self.person_reverts
            .with_label_values(&[self.kind_label(parent_kind), self.kind_label(kind), resolution.as_str()])
            .inc();
    }

    /// A write of `kind` put back `path`, fighting another actor over it.
    pub fn fought(&self, kind: &str, path: &str) {
        self.fights.with_label_values(&[self.kind_label(kind), crate::classify::field_label(path)]).inc();
    }

    /// A person wrote an object managed by the applier `profile`.
    pub fn hand_edited(&self, profile: &str) {
        let label = if crate::config::appliers::BUILTIN_NAMES.contains(&profile) { profile } else { OTHER_KIND };
        self.applier_hand_edits.with_label_values(&[label]).inc();
    }

    /// An audit event dropped as a duplicate by its auditID.
    pub fn duplicate(&self) {
        self.dedup_hits.inc();
    }

    /// Audit events dropped as duplicates so far.
    pub fn duplicates(&self) -> u64 {
        self.dedup_hits.get()
    }

    /// A write stamped later than the clock plus `max_clock_skew`.
    pub fn future_write(&self) {
        self.future_events.inc();
    }

    /// Writes stamped in the future so far.
    pub fn future_writes(&self) -> u64 {
        self.future_events.get()
    }

    /// A write applied after a write with a higher resourceVersion.
    pub fn late_write(&self) {
        self.late_events.inc();
    }

    /// Late writes so far.
    pub fn late_writes(&self) -> u64 {
        self.late_events.get()
    }

    /// A write whose classification failed inside the engine.
    pub fn classify_failed(&self) {
        self.classify_failures.inc();
    }

    /// Writes whose classification failed so far.
    pub fn classify_failures(&self) -> u64 {
        self.classify_failures.get()
    }

    /// How many writes the reorder buffers hold now.
    pub fn held_writes(&self, n: usize) {
        self.reorder_buffer_events.set(n as i64);
    }

    /// How many objects the state store holds now.
    pub fn tracked_objects(&self, n: usize) {
        self.tracked_objects.set(n as i64);
    }

    /// The time from a write's stageTimestamp to its classification.
    pub fn processing_lag(&self, seconds: f64) {
        self.processing_lag.observe(seconds);
    }

    /// Objects evicted from the state store (cap or tombstone expiry).
    pub fn evicted(&self, n: u64) {
        self.state_evictions.inc_by(n);
    }

    /// `n` trace messages sent, not sent, or applied with `result`.
    pub fn trace_messages(&self, result: Completion, n: u64) {
        self.trace_messages.with_label_values(&[result.as_str()]).inc_by(n);
    }

    /// Trace messages with `result` so far.
    pub fn trace_message_count(&self, result: Completion) -> u64 {
        self.trace_messages.with_label_values(&[result.as_str()]).get()
    }

    /// The counters of events delivered by `sink` and of its delivery errors, looked up once
    /// (a sink counts every batch).
    pub fn sink_counters(&self, sink: Sink) -> (IntCounter, IntCounter) {
        (self.sink_events.with_label_values(&[sink.as_str()]), self.sink_errors.with_label_values(&[sink.as_str()]))
    }

    /// `n` events that the sink of `kind` (a [`Sink::as_str`]) never took: its task stopped.
    pub fn sink_lost(&self, kind: &str, n: u64) {
        self.sink_errors.with_label_values(&[kind]).inc_by(n);
    }

    /// A drift report of `phase` (`detected`, `resolved`) delivered.
    pub fn drift_report_sent(&self, phase: &str) {
        self.drift_reports.with_label_values(&[phase]).inc();
    }

    /// Ingest tier: audit events produced to the keyed topic and acknowledged, by copy.
    pub fn routed(&self, copy: &str, n: u64) {
        self.route_messages.with_label_values(&[copy]).inc_by(n);
    }

    /// Ingest tier: `n` messages the broker did not acknowledge.
    pub fn route_failed(&self, n: u64) {
        self.route_errors.inc_by(n);
    }

    /// Ingest tier: a write that names no object to key it by, for `reason`.
    pub fn unroutable(&self, reason: &str) {
        self.route_unroutable.with_label_values(&[reason]).inc();
    }

    /// Ingest tier: the series of each copy and each reason a write is unroutable, at zero.
    pub fn route_series<'a>(
        &self,
        copies: impl IntoIterator<Item = &'a str>,
        unroutable: impl IntoIterator<Item = &'a str>,
    ) {
        copies.into_iter().for_each(|c| drop(self.route_messages.with_label_values(&[c])));
        unroutable.into_iter().for_each(|r| drop(self.route_unroutable.with_label_values(&[r])));
    }

    /// The consumer's lag on a partition of `topic`.
    pub fn consumer_lag(&self, topic: &str, partition: &str, lag: i64) {
        self.kafka_consumer_lag.with_label_values(&[topic, partition]).set(lag);
    }

    /// A partition no longer read: its lag series goes.
    pub fn consumer_lag_gone(&self, topic: &str, partition: &str) {
        let _ = self.kafka_consumer_lag.remove_label_values(&[topic, partition]);
    }

    /// Exactly-once: a transaction aborted because the group moved on.
    pub fn rewound(&self) {
        self.kafka_rewinds.inc();
    }

    /// Transactions aborted so far.
    pub fn rewinds(&self) -> u64 {
        self.kafka_rewinds.get()
    }

    /// A webhook request answered with `code`.
    pub fn webhook_answered(&self, code: &str) {
        self.webhook_requests.with_label_values(&[code]).inc();
    }

    /// A query API request to `route` answered with `code`.
    pub fn query_answered(&self, route: &str, code: &str) {
        self.query_requests.with_label_values(&[route, code]).inc();
    }

    /// The query API's series, at zero: each route with each code it answers most, and the
    /// unreadable rows of each route that reads the history store.
    pub fn query_series<'a>(
        &self,
        routes: impl IntoIterator<Item = &'a str>,
        history_routes: impl IntoIterator<Item = &'a str>,
    ) {
        for route in routes {
            for code in QUERY_CODES {
                self.query_requests.with_label_values(&[route, code]);
            }
        }
        history_routes.into_iter().for_each(|r| drop(self.history_unreadable_rows.with_label_values(&[r])));
    }

    /// `n` rows of the history store whose stored event could not be read, met by `route`.
    pub fn unreadable_rows(&self, route: &str, n: u64) {
        self.history_unreadable_rows.with_label_values(&[route]).inc_by(n);
    }

    /// The history store's size on disk.
    pub fn history_bytes(&self, bytes: u64) {
        self.history_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A state snapshot that could not be written.
    pub fn snapshot_failed(&self) {
        self.snapshot_failures.inc();
    }

    /// A partition assigned with a changelog and a snapshot: `None` when the snapshot gave its
    /// states, else why not.
    pub fn snapshot_partition(&self, refused: Option<&Refused>) {
        self.snapshot_partitions.with_label_values(&[refused.map_or(SNAPSHOT_LOADED, Refused::label)]).inc();
    }

    /// The counter of connections `listener` refused, looked up once.
    pub fn refused_counter(&self, listener: Listener) -> IntCounter {
        self.connections_refused.with_label_values(&[listener.as_str()])
    }

    /// A connection of `listener` cut by the timeout of `phase`.
    pub fn connection_timed_out(&self, listener: Listener, phase: &str) {
        self.connection_timeouts.with_label_values(&[listener.as_str(), phase]).inc();
    }

    /// A TLS handshake that failed for `reason`.
    pub fn handshake_failed(&self, reason: &str) {
        self.tls_handshake_failures.with_label_values(&[reason]).inc();
    }

    /// The series of a listener, at zero: its refused connections, its timeouts by `phases`,
    /// and the failed handshakes by `reasons` (empty without TLS).
    pub fn listener_series<'a>(
        &self,
        listener: Listener,
        phases: impl IntoIterator<Item = &'a str>,
        reasons: impl IntoIterator<Item = &'a str>,
    ) {
        self.connections_refused.with_label_values(&[listener.as_str()]);
        phases.into_iter().for_each(|p| drop(self.connection_timeouts.with_label_values(&[listener.as_str(), p])));
        reasons.into_iter().for_each(|r| drop(self.tls_handshake_failures.with_label_values(&[r])));
    }

    /// The series of a pipeline that exist from the start, at zero, so that rates (and the
    /// alerts and panels over them) work from the first scrape: the drift report phases, the
    /// metrics listener's refusals, snapshot failures, hand edits by applier, events by
    /// `sources` (each a source's `type`, and whether it is a webhook), with a changelog the
    /// trace messages by result, and with a snapshot as well the partitions by result.
    pub fn pipeline_series<'a>(
        &self,
        sources: impl IntoIterator<Item = (&'a str, bool)>,
        changelog: bool,
        snapshot: bool,
    ) {
        for phase in DRIFT_REPORT_PHASES {
            self.drift_reports.with_label_values(&[phase]);
        }
        self.connections_refused.with_label_values(&[Listener::Metrics.as_str()]);
        self.snapshot_failures.inc_by(0);
        if changelog {
            for c in Completion::ALL {
                self.trace_messages.with_label_values(&[c.as_str()]);
            }
        }
        if changelog && snapshot {
            for result in [SNAPSHOT_LOADED, "not_held", "other_changelog", "past_end", "before_start", "too_old"] {
                self.snapshot_partitions.with_label_values(&[result]);
            }
        }
        for applier in crate::config::appliers::BUILTIN_NAMES.iter().chain(&[OTHER_KIND]) {
            self.applier_hand_edits.with_label_values(&[applier]);
        }
        for (kind, webhook) in sources {
            self.events_received.with_label_values(&[kind]);
            if webhook {
                self.webhook_requests.with_label_values(&["200"]);
            }
        }
    }

    /// Writes of `kind` that put back `field` (two actors flipping it) so far.
    pub fn fight_count(&self, kind: &str, field: &str) -> u64 {
        self.fights.with_label_values(&[kind, field]).get()
    }

    /// A person's writes to objects the applier `profile` manages so far.
    pub fn hand_edit_count(&self, profile: &str) -> u64 {
        self.applier_hand_edits.with_label_values(&[profile]).get()
    }

    /// Drift of `kind` under `parent_kind` with `resolution` that reverts a person's write,
    /// so far.
    pub fn person_revert_count(&self, parent_kind: &str, kind: &str, resolution: Resolution) -> u64 {
        self.person_reverts.with_label_values(&[parent_kind, kind, resolution.as_str()]).get()
    }

    /// Audit events not classified for `reason` so far.
    pub fn ignored_count(&self, reason: Ignored) -> u64 {
        self.ignored_by[reason as usize].get()
    }

    /// Records rejected for `reason` so far.
    pub fn invalid_count(&self, reason: InvalidReason) -> u64 {
        self.invalid_by[reason as usize].get()
    }

    /// The metrics in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding cannot fail");
        String::from_utf8(buf).expect("metrics are UTF-8")
    }

    /// The metrics text, with every family listed even before its first series: the Prometheus
    /// encoder leaves out a labelled family without series (e.g. no freeze violation yet), and
    /// dashboards and rules are written against all the names of `deploy/metrics.txt`. Such a
    /// family appears as its `# HELP` and `# TYPE` lines, without made-up samples.
    pub fn render_all(&self) -> String {
        let m = self;
        let mut text = m.render();
        let families: [(&dyn Collector, &str); 32] = [
            (&m.events_received, "counter"),
            (&m.events_ignored, "counter"),
            (&m.events_invalid, "counter"),
            (&m.mutations, "counter"),
            (&m.drift, "counter"),
            (&m.person_reverts, "counter"),
            (&m.fights, "counter"),
            (&m.applier_hand_edits, "counter"),
            (&m.freeze_violations, "counter"),
            (&m.late_events, "counter"),
            (&m.dedup_hits, "counter"),
            (&m.reorder_buffer_events, "gauge"),
            (&m.tracked_objects, "gauge"),
            (&m.state_evictions, "counter"),
            (&m.processing_lag, "histogram"),
            (&m.sink_events, "counter"),
            (&m.sink_errors, "counter"),
            (&m.kafka_consumer_lag, "gauge"),
            (&m.kafka_rewinds, "counter"),
            (&m.trace_messages, "counter"),
            (&m.webhook_requests, "counter"),
            (&m.drift_reports, "counter"),
            (&m.snapshot_failures, "counter"),
            (&m.snapshot_partitions, "counter"),
            (&m.connections_refused, "counter"),
            (&m.tls_handshake_failures, "counter"),
            (&m.connection_timeouts, "counter"),
            (&m.route_messages, "counter"),
            (&m.route_errors, "counter"),
            (&m.route_unroutable, "counter"),
            (&m.query_requests, "counter"),
            (&m.history_unreadable_rows, "counter"),
        ];
        for (collector, kind) in families {
            for d in collector.desc() {
                if !text.contains(&format!("# TYPE {} ", d.fq_name)) {
                    text.push_str(&format!("# HELP {} {}\n# TYPE {} {kind}\n", d.fq_name, d.help, d.fq_name));
                }
            }
        }
        text
    }

    /// The Prometheus registry every family is registered in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_counts_in_its_own_labelled_series() {
        // The counters are indexed by the enum's discriminant: ALL must list them in order.
        assert!(Ignored::ALL.iter().enumerate().all(|(i, r)| *r as usize == i));
        assert!(InvalidReason::ALL.iter().enumerate().all(|(i, r)| *r as usize == i));
        let m = Metrics::new();
        m.ignored(Ignored::NoOp);
        m.ignored(Ignored::NoOp);
        m.invalid(InvalidReason::Truncated);
        assert_eq!(m.events_ignored.with_label_values(&["no_op"]).get(), 2);
        assert_eq!(m.events_ignored.with_label_values(&[Ignored::Stage.as_str()]).get(), 0);
        assert_eq!(m.events_invalid.with_label_values(&["truncated"]).get(), 1);
        assert_eq!((m.ignored_count(Ignored::NoOp), m.invalid_count(InvalidReason::Truncated)), (2, 1));
        let text = m.render();
        assert!(text.contains(r#"kausality_events_ignored_total{reason="no_op"} 2"#), "{text}");
        assert!(
            text.contains(r#"kausality_events_invalid_total{reason="encoding"} 0"#),
            "zeros are there from the start"
        );
    }

    #[test]
    fn kinds_are_labels_only_when_known() {
        let m = Metrics::with_kinds(["Widget.example.org", "Gadget"]);
        for (kind, label) in [
            ("Deployment", "Deployment"),
            ("Widget", "Widget"),
            ("Gadget", "Gadget"),
            ("", ""),
            ("Gizmo", "other"),
            ("Deployment ", "other"),
        ] {
            assert_eq!(m.kind_label(kind), label, "{kind:?}");
        }
        assert_eq!(Metrics::new().kind_label("Widget"), OTHER_KIND);
        m.classified(Class::Drift, "Anything-1", "Pod");
        m.classified(Class::Drift, "Anything-2", "Pod");
        m.drifted("Anything-3", "Thing", Resolution::Unresolved);
        m.freeze_violated("Anything-4");
        assert_eq!(m.mutations.with_label_values(&["drift", "other", "Pod"]).get(), 2);
        assert_eq!(m.drift.with_label_values(&["other", "other", "unresolved"]).get(), 1);
        assert_eq!(m.freeze_violations.with_label_values(&["other"]).get(), 1);
        assert!(!m.render().contains("Anything"));
    }
}
