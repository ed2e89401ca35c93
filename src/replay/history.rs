//! `replay --history FILE`: the enriched events go into the history store through the same
//! writer as the `history` sink's (its own thread, a transaction per group of batches,
//! retention), so an incident can be examined from an old audit log with `why`.

use std::io;
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::enriched::Enriched;
use crate::history::batch::{Batch, Packed, Pool};
use crate::history::writer::{self, Report, WriterOptions};
use crate::history::{Retention, Store};

/// Events handed to the writer at once (it groups what is waiting into one transaction).
const BATCH: usize = 1024;

/// What went into the store, for the summary.
#[derive(Clone, Debug, Default)]
pub struct HistoryWritten {
    /// The store's path.
    pub path: String,
    /// Mutations written.
    pub mutations: u64,
    /// Already in the store (the same auditID on the same object): not written again.
    pub duplicates: u64,
    /// The store's size on disk at the end (database and WAL).
    pub bytes: u64,
}

#[derive(Default)]
struct Shared {
    written: HistoryWritten,
    error: Option<String>,
}

pub(super) struct HistoryOut {
    queue: Option<SyncSender<Packed>>,
    /// The events not sent yet, packed here: the writer thread never frees an event.
    pending: Packed,
    /// The buffers of the batches the writer is done with.
    pool: Pool,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Mutex<Shared>>,
}

fn failed(msg: String) -> io::Error {
    io::Error::other(msg)
}

impl HistoryOut {
    pub(super) fn open(path: &Path, retention: Retention) -> io::Result<HistoryOut> {
        let store = Store::open(path, retention).map_err(|e| failed(e.to_string()))?;
        let shared = Arc::new(Mutex::new(Shared {
            written: HistoryWritten { path: path.display().to_string(), ..HistoryWritten::default() },
            error: None,
        }));
        let (queue, rx) = sync_channel(16);
        let report_to = shared.clone();
        let report = move |r: Report| {
            let mut s = report_to.lock().unwrap_or_else(|e| e.into_inner());
            match r {
                Report::Written { written, bytes } => {
                    s.written.mutations += written.mutations;
                    s.written.duplicates += written.duplicates;
                    s.written.bytes = bytes;
                }
                Report::Lost { events, error } => s.error = Some(format!("{events} events not written: {error}")),
                Report::Failing(_) | Report::Recovered | Report::Retained(_) => {}
            }
        };
        let opts = WriterOptions { give_up_at_once: true, retain_to_the_end: true, ..WriterOptions::default() };
        let thread = writer::spawn(store, rx, opts, report)?;
        let pool = Pool::default();
        Ok(HistoryOut { queue: Some(queue), pending: pool.take(BATCH), pool, thread: Some(thread), shared })
    }

    pub(super) fn push(&mut self, e: &Enriched) -> io::Result<()> {
        self.pending.push(e);
        if self.pending.len() >= BATCH {
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> io::Result<()> {
        let batch = std::mem::replace(&mut self.pending, self.pool.take(BATCH));
        let sent = self.queue.as_ref().is_some_and(|q| q.send(batch).is_ok());
        if !sent {
            // The writer gave up: its error says why.
            return Err(self.finish_thread().err().unwrap_or_else(|| failed("the history writer stopped".into())));
        }
        Ok(())
    }

    fn finish_thread(&mut self) -> io::Result<HistoryWritten> {
        self.queue = None;
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| failed("the history writer failed unexpectedly".into()))?;
        }
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match &s.error {
            Some(e) => Err(failed(format!("history store {}: {e}", s.written.path))),
            None => Ok(s.written.clone()),
        }
    }

    /// Writes what is pending, waits for the writer and says what it wrote.
    pub(super) fn finish(mut self) -> io::Result<HistoryWritten> {
        if !self.pending.is_empty() {
            self.send()?;
        }
        let mut written = self.finish_thread()?;
        written.bytes = crate::history::writer::disk_bytes(Path::new(&written.path));
        Ok(written)
    }
}
