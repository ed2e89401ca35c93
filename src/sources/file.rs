//! `[[sources]] type = "file"`: a recorded audit log replayed once into the live pipeline at
//! start-up (to warm the state from last hours' log, say), after which the pipeline keeps
//! serving its other sources. Read on a blocking thread, line by line, in bodies of about
//! 1 MiB; a full queue makes the reader wait, so nothing is dropped.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::decode::InvalidReason;
use crate::metrics::Metrics;
use crate::process::IngestReport;
use crate::replay::{Reader, Record};
use crate::shell::{check_file, Errors};
use crate::sources::{Batch, Body};

/// `[[sources]] type = "file"`: an audit log read once, from its start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Audit log: JSON lines (log backend), or one EventList / Event document. Required.
    pub path: PathBuf,
    /// Cluster of the events in the file. Default: the pipeline's `cluster`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Longest line read, in bytes; longer lines are counted as invalid (`too_large`).
    /// Default: 16777216 (16 MiB).
    #[serde(default = "default_max_line")]
    pub max_line_bytes: usize,
}

fn default_max_line() -> usize {
    16 << 20
}

/// Size of the bodies the file is cut into.
const CHUNK_BYTES: usize = 1 << 20;

impl FileConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        check_file(errors, &format!("{key}.path"), &self.path);
    }
}

/// Replays the file on a blocking thread; returns what the processor made of it.
pub fn spawn(
    cfg: FileConfig,
    queue: mpsc::Sender<Batch>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<IngestReport> {
    tokio::task::spawn_blocking(move || {
        let name = cfg.path.display().to_string();
        let mut total = IngestReport::default();
        let file = match File::open(&cfg.path) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(file = %name, error = %e, "cannot open the file source");
                return total;
            }
        };
        let mut reader = Reader::new(BufReader::with_capacity(1 << 20, file), cfg.max_line_bytes, 1 << 30);
        let mut body = Vec::with_capacity(CHUNK_BYTES + 4096);
        let mut line = Vec::with_capacity(1 << 16);
        let send = |body: Vec<u8>, total: &mut IngestReport| -> bool {
            let (ack, acked) = oneshot::channel();
            let batch = Batch {
                cluster: cfg.cluster.clone(),
                body: Body::Raw(body),
                source: "file",
                ack: Some(ack),
                done: None,
                unwrap: None,
                received_us: None,
            };
            if queue.blocking_send(batch).is_err() {
                return false;
            }
            if let Ok(r) = acked.blocking_recv() {
                total.events += r.events;
                total.invalid += r.invalid;
                total.errors.extend(r.errors.into_iter().take(10usize.saturating_sub(total.errors.len())));
            }
            true
        };
        loop {
            let record = match reader.next_record(&mut line) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(file = %name, error = %e, after_bytes = reader.consumed, "read error; stopping the file source");
                    break;
                }
            };
            match record {
                Record::Line(_) => {
                    body.extend_from_slice(&line);
                    body.push(b'\n');
                }
                Record::Document(doc) => body = doc,
                Record::TooLong(n, len) => {
                    metrics.invalid(InvalidReason::TooLarge);
                    total.invalid += 1;
                    tracing::warn!(file = %name, line = n, bytes = len, "line over max_line_bytes skipped");
                }
            }
            if body.len() >= CHUNK_BYTES && !send(std::mem::take(&mut body), &mut total) {
                return total;
            }
        }
        if !body.is_empty() {
            send(body, &mut total);
        }
        tracing::info!(file = %name, events = total.events, invalid = total.invalid, "file source replayed");
        for e in &total.errors {
            tracing::warn!(file = %name, location = %e.path(), reason = e.reason.as_str(), "{}", e.message);
        }
        total
    })
}
