//! kausality-stream: for every change a Kubernetes controller makes, whether anyone asked for it.
//!
//! The data path, in the order an audit event travels:
//!
//! - [`decode`]: bytes (JSON lines, an `EventList`, a single event) to borrowed audit events,
//!   or explained, counted rejections.
//! - [`filter`]: only completed, successful, persisted writes go on.
//! - [`write`]: the owned, compact record of one write that the rest of the chain carries.
//! - [`order`]: duplicates out by auditID; writes back into resourceVersion order.
//! - [`classify`]: the model (DESIGN §1): applies writes to [`state`] (which keeps each parent's
//!   parsed policy, [`state::policy`]) and judges each mutation as drift, expected, origin, ...
//!   with a causal trace. Pure: no I/O, no async.
//! - [`redact`]: the values of sensitive fields (Secrets, passwords, tokens) replaced by
//!   digests before anything keeps an object's content.
//! - [`enriched`]: the output record of a classified mutation, and its JSON as sinks write it.
//! - [`process`]: the chain above, shared by every front end: [`process::Decoder`] (on a
//!   source's thread) and the [`process::Processor`].
//! - [`partition`]: Kafka's partitioner, a leaf that the model (traces across partitions) and
//!   the ingest tier share.
//! - [`intern`] and [`trace`]: the vocabulary below [`write`], [`state`] and [`classify`] alike:
//!   interned strings (users, kinds, namespaces) and the causal trace a write carries.
//! - [`metrics`]: what is counted, in the Prometheus format.
//! - [`history`]: the history store on disk (SQLite): every classified mutation and tombstone,
//!   for `why` and the query API.
//! - [`why`]: the `why` command: an object's story from the history store or the query API,
//!   for the terminal.
//! - [`replay`]: the `replay` command: a recorded audit log in, enriched events out.
//! - [`scope`]: which events a pipeline looks at (groups, resources, namespaces, labels).
//! - [`corpus`]: a workload generator on top of [`sim`], for benchmarks and soak tests.
//! - [`sim`]: a simulated API server writing audit events, for tests, benchmarks and corpora.
//!
//! The live service (`serve`), around that chain, in two tiers when scaled out
//! (docs/scale-out.md; the diagram is in [`pipeline`]):
//!
//! - [`pipeline`]: the pipeline file, and the runner that joins sources → processor → sinks
//!   with bounded queues, its durability (snapshot, Kafka checkpoints and transactions, the
//!   changelog's writes) and the graceful shutdown.
//! - [`sources`]: the audit webhook, Kafka topics, recorded files.
//! - [`sinks`]: JSON lines, HTTP, Kafka, Kausality drift reports, the history store.
//! - [`route`]: the ingest tier: where an audit event goes on a keyed topic (its judged and
//!   state-only keys) and the producer the webhook hands it to (`kafka_route`).
//! - `changelog` (with the `kafka` feature): the classify tier's state kept per partition in a
//!   compacted topic, and the trace messages it sends to other partitions on the input topic
//!   (read back by the Kafka source).
//! - [`kafka`]: what the Kafka source and sink share (client properties, transactions).
//! - [`shell`]: what the runner and its components share, below both: the pipeline file's
//!   errors, durations, checkpoints and receipts, the wall clock.
//! - [`listen`]: serving HTTP(S) with a graceful stop and bounded connections.
//! - [`query`]: the query API: the verdict from the live state, objects and the drift feed
//!   from the history store.
//! - [`status`]: what the parts report about themselves (a sink that cannot write, a failed
//!   snapshot), for the webhook, `/readyz` and the exit code.

// Every public item of the library says what it is (tests and benches are crates of their own).
#![warn(missing_docs)]

#[cfg(feature = "kafka")]
pub mod changelog;
pub mod classify;
pub mod config;
pub mod corpus;
pub mod decode;
pub mod enriched;
#[cfg(feature = "fetch")]
pub mod fetch;
pub mod filter;
pub mod history;
pub mod intern;
pub mod kafka;
pub mod listen;
pub mod metrics;
pub mod order;
pub mod partition;
pub mod pipeline;
pub mod process;
pub mod query;
pub mod redact;
pub mod replay;
pub mod route;
pub mod scope;
pub mod shell;
pub mod sim;
pub mod sinks;
pub mod sources;
pub mod state;
pub mod status;
pub mod trace;
pub mod why;
pub mod write;
