//! `[[sinks]] type = "history"`: every enriched event into the history store (SQLite,
//! docs/history.md), for `why` and the query API. The writing is the store's writer thread
//! ([`crate::history::writer`]): groups of queued batches, one transaction each, retention by
//! age and size. A store that cannot write (a full disk) holds its batches and tries again,
//! like the jsonl sink: its queue fills, the processor waits, the webhook answers 503 and
//! `/readyz` says why until it writes again. Nothing is ever half-written: a failed
//! transaction leaves no row of its batches.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Error, Events};
use crate::history::writer::{self, Report, WriterOptions};
use crate::history::{OnDamaged, Retention, Store};
use crate::metrics::{Metrics, Sink};
use crate::shell::{Errors, Span};
use crate::status::Status;

/// The store's default file, in the working directory (what `why` reads without a flag).
pub const DEFAULT_PATH: &str = "kausality-history.db";

/// `[[sinks]] type = "history"`: the history store (SQLite) that `why` and the query API read.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// The SQLite file, created with its schema when missing. Default: `"kausality-history.db"`.
    #[serde(default = "default_path")]
    pub path: String,
    /// Mutations older than this (before the newest one written) are removed; `0` keeps them
    /// whatever their age. Default: `"30d"`.
    #[serde(default = "default_max_age")]
    pub max_age: Span,
    /// The file and its WAL are kept under this many bytes, the oldest mutations removed
    /// first; `0`: no limit. At least 1 MiB. Default: 10737418240 (10 GiB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// What a store that fails SQLite's check at start gets: `"refuse"` (the service does
    /// not start, and says what to do) or `"replace"` (its files are moved aside as
    /// `PATH.damaged-UNIXTIME` and a new store is started). Default: `"refuse"`.
    #[serde(default)]
    pub on_damaged: OnDamaged,
}

fn default_path() -> String {
    DEFAULT_PATH.to_string()
}

fn default_max_age() -> Span {
    Span(Retention::default().max_age)
}

fn default_max_bytes() -> u64 {
    Retention::default().max_bytes
}

/// Smallest `max_bytes`: below it the WAL's share leaves the database nothing to keep.
pub const MIN_BYTES: u64 = 1 << 20;
/// Smallest `max_age` other than 0: retention runs every few seconds.
const MIN_AGE: Duration = Duration::from_secs(60);

impl HistoryConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        if self.path.is_empty() || self.path == "-" {
            errors.push(
                format!("{key}.path"),
                None,
                "must be a file path (the SQLite database), e.g. \"kausality-history.db\"",
            );
        } else {
            let parent = Path::new(&self.path).parent().filter(|p| !p.as_os_str().is_empty());
            if parent.is_some_and(|d| !d.is_dir()) {
                errors.push(format!("{key}.path"), None, format!("directory of {} does not exist", self.path));
            }
        }
        if self.max_bytes != 0 && self.max_bytes < MIN_BYTES {
            errors.push(
                format!("{key}.max_bytes"),
                None,
                format!("{} is too small: 0 (no limit) or at least {MIN_BYTES} (1 MiB)", self.max_bytes),
            );
        }
        if !self.max_age.0.is_zero() && self.max_age.0 < MIN_AGE {
            errors.push(
                format!("{key}.max_age"),
                None,
                format!("{} is too short: 0 (keep whatever the age) or at least 1m", self.max_age),
            );
        }
    }

    /// How long and how much the store keeps.
    pub fn retention(&self) -> Retention {
        Retention { max_age: self.max_age.0, max_bytes: self.max_bytes }
    }
}

/// Opens the store (an error names the file and what SQLite said) and starts its writer.
pub fn spawn(
    cfg: HistoryConfig,
    rx: mpsc::Receiver<Events>,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
) -> Result<JoinHandle<()>, Error> {
    let store = Store::open_checked(Path::new(&cfg.path), cfg.retention(), cfg.on_damaged)
        .map_err(|e| Error::History(e.to_string()))?;
    metrics.history_bytes(store.disk_bytes());
    let (delivered, failed) = metrics.sink_counters(Sink::History);
    let name = format!("history {}", cfg.path);
    // Dropped with the report closure when the writer thread ends: the task below then ends.
    let (ended, end) = oneshot::channel::<()>();
    let mut failing = false;
    let report = move |r: Report| {
        let _keep = &ended;
        match r {
            Report::Written { written, bytes } => {
                delivered.inc_by(written.events);
                metrics.history_bytes(bytes);
            }
            Report::Failing(error) => {
                failed.inc();
                if !std::mem::replace(&mut failing, true) {
                    tracing::error!(path = %cfg.path, error = %error, "history sink cannot write; holding the batches and trying again (the webhook answers 503 meanwhile)");
                }
                status.sink_failing(&name, format!("cannot write: {error}"));
            }
            Report::Recovered => {
                failing = false;
                status.sink_recovered(&name);
                tracing::info!(path = %cfg.path, "history sink writes again");
            }
            Report::Retained(r) => {
                tracing::debug!(path = %cfg.path, mutations = r.mutations, objects = r.objects, oldest_us = ?r.oldest_us, "history retention");
            }
            Report::Lost { events, error } => {
                tracing::error!(path = %cfg.path, error = %error, lost = events, "history sink: stopping with events it could not write");
                status.sink_failing(&name, format!("{events} events not written at the stop: {error}"));
            }
        }
    };
    writer::spawn(store, rx, WriterOptions::default(), report)
        .map_err(|e| Error::History(format!("cannot start the writer thread: {e}")))?;
    Ok(tokio::spawn(async move {
        let _ = end.await;
    }))
}
