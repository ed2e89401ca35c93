//! `kausality-stream replay`: recorded audit logs in, enriched events out (JSON lines), and a
//! summary on stderr. Memory stays bounded whatever the size of the input: lines are read one at
//! a time and enriched events are written as they come.

mod history;
mod reader;
mod summary;

use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::classify::{Class, Engine, EngineOptions};
use crate::config::ModelConfig;
use crate::decode::{Invalid, InvalidReason, Location};
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::process::{Clock, IngestReport, Processor, ProcessorOptions};
pub use history::HistoryWritten;
pub use reader::{Reader, Record};
pub use summary::Summary;

/// What `replay` reads and how it classifies it.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Audit log files (JSON lines, EventLists, exports), read in this order.
    pub inputs: Vec<PathBuf>,
    /// The processor's settings (the event-time clock by default).
    pub processor: ProcessorOptions,
    /// The engine's bounds.
    pub engine: EngineOptions,
    /// The model's configuration (a pipeline file's, or the default).
    pub model: ModelConfig,
    /// Only these classes are written (all when empty).
    pub classes: Vec<Class>,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Longest line accepted (longer lines are counted as too_large).
    pub max_line_bytes: usize,
    /// Largest multi-line document read whole.
    pub max_document_bytes: usize,
    /// Write the enriched events into this history store instead of `out`.
    pub history: Option<PathBuf>,
    /// How long and how much the history store keeps, with `history`.
    pub history_retention: crate::history::Retention,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            inputs: Vec::new(),
            processor: ProcessorOptions { clock: Clock::EventTime, ..ProcessorOptions::default() },
            engine: EngineOptions::default(),
            model: ModelConfig::default(),
            classes: Vec::new(),
            progress: true,
            max_line_bytes: 16 << 20,
            max_document_bytes: 1 << 30,
            history: None,
            history_retention: crate::history::Retention::default(),
        }
    }
}

/// Lines read and not yet taken in, one after another in one buffer: taken in as one batch
/// ([`Processor::ingest_documents`]) once there are [`Lines::MAX`] of them or
/// [`Lines::MAX_BYTES`], or something else is read.
#[derive(Default)]
struct Lines {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`, and its number.
    ends: Vec<(usize, usize)>,
}

impl Lines {
    const MAX: usize = 256;
    const MAX_BYTES: usize = 4 << 20;

    fn push(&mut self, line: &[u8], number: usize) {
        self.bytes.extend_from_slice(line);
        self.ends.push((self.bytes.len(), number));
    }

    fn full(&self) -> bool {
        self.ends.len() >= Self::MAX || self.bytes.len() >= Self::MAX_BYTES
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], Location)> {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&(end, _)| end));
        starts.zip(&self.ends).map(|(start, &(end, n))| (&self.bytes[start..end], Location::Line(n)))
    }
}

/// What a replay did.
pub struct Outcome {
    /// What was read and classified.
    pub summary: Summary,
    /// The metrics the replay counted in.
    pub metrics: Arc<Metrics>,
    /// How long it took.
    pub elapsed: std::time::Duration,
}

impl Outcome {
    /// Nothing could be read: every input unreadable, or not one audit event decoded among
    /// rejected records.
    pub fn nothing_read(&self) -> bool {
        let invalid: u64 = InvalidReason::ALL.iter().map(|&r| self.metrics.invalid_count(r)).sum();
        self.summary.events == 0 && (self.summary.unreadable.len() == self.summary.files || invalid > 0)
    }

    /// The summary in words, as `replay` prints it.
    pub fn render(&self) -> String {
        self.summary.render(&self.metrics, self.elapsed)
    }
}

/// Replays `opts.inputs` into `out`.
pub fn run(opts: &ReplayOptions, out: &mut dyn Write) -> io::Result<Outcome> {
    let started = Instant::now();
    let metrics = Arc::new(Metrics::new());
    let engine = Arc::new(Engine::new(opts.model.clone(), opts.engine.clone()));
    let mut processor = Processor::new(engine, metrics.clone(), opts.processor.clone());
    let mut summary = Summary { files: opts.inputs.len(), ..Summary::default() };
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let mut batch: Vec<Enriched> = Vec::new();
    let total: u64 = opts.inputs.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    let bar = progress_bar(opts.progress, total);
    let mut done_before = 0u64;
    let mut history = match &opts.history {
        Some(path) => Some(history::HistoryOut::open(path, opts.history_retention)?),
        None => None,
    };

    for path in &opts.inputs {
        let name = path.display().to_string();
        let input: Box<dyn io::Read> = if name == "-" {
            Box::new(io::stdin().lock())
        } else {
            match File::open(path) {
                Ok(f) => Box::new(f),
                Err(e) => {
                    summary.unreadable.push(format!("{name}: {e}"));
                    continue;
                }
            }
        };
        let mut reader =
            Reader::new(BufReader::with_capacity(1 << 20, input), opts.max_line_bytes, opts.max_document_bytes);
        let mut report = IngestReport::default();
        let mut line = Vec::with_capacity(1 << 16);
        let mut lines = Lines::default();
        loop {
            let record = match reader.next_record(&mut line) {
                Ok(Some(r)) => Some(r),
                Ok(None) => None,
                Err(e) => {
                    summary.unreadable.push(format!("{name}: read error after {} bytes: {e}", reader.consumed));
                    None
                }
            };
            if let Some(Record::Line(n)) = record {
                lines.push(&line, n);
                if !lines.full() {
                    continue;
                }
            }
            // The lines read so far go in as one batch, before anything else read.
            if !lines.is_empty() {
                let r = processor.ingest_documents(None, lines.iter(), "file", 0, &mut batch);
                lines.clear();
                merge(&mut report, r, &name, &mut summary);
                write_batch(&mut batch, &mut summary, &opts.classes, &mut out, history.as_mut())?;
                if let Some(b) = &bar {
                    b.set_position(done_before + reader.consumed);
                }
            }
            let r = match record {
                None => break,
                Some(Record::Line(_)) => continue,
                Some(Record::Document(doc)) => processor.ingest_body(None, &doc, "file", 0, &mut batch),
                Some(Record::TooLong(n, len)) => {
                    let mut r = IngestReport::default();
                    let msg = format!("{len} bytes is over the limit of {} bytes per line", opts.max_line_bytes);
                    processor.reject(Invalid::new(Location::Line(n), InvalidReason::TooLarge, msg), &mut r);
                    r
                }
            };
            merge(&mut report, r, &name, &mut summary);
            write_batch(&mut batch, &mut summary, &opts.classes, &mut out, history.as_mut())?;
            if let Some(b) = &bar {
                b.set_position(done_before + reader.consumed);
            }
        }
        done_before += reader.consumed;
        summary.bytes += reader.consumed;
    }
    processor.flush(0, &mut batch);
    write_batch(&mut batch, &mut summary, &opts.classes, &mut out, history.as_mut())?;
    summary.tracked_objects = processor.engine().tracked_objects();
    out.flush()?;
    if let Some(h) = history {
        summary.history = Some(h.finish()?);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(Outcome { summary, metrics, elapsed: started.elapsed() })
}

fn merge(total: &mut IngestReport, r: IngestReport, file: &str, summary: &mut Summary) {
    total.events += r.events;
    total.invalid += r.invalid;
    summary.events += r.events as u64;
    for e in &r.errors {
        summary.record_invalid(file, e);
    }
}

/// The enriched events to `out` as JSON lines (only `classes`, when given), or all of them to
/// the history store.
fn write_batch(
    batch: &mut Vec<Enriched>,
    summary: &mut Summary,
    classes: &[Class],
    out: &mut impl Write,
    history: Option<&mut history::HistoryOut>,
) -> io::Result<()> {
    if let Some(h) = history {
        for e in batch.drain(..) {
            summary.record(&e);
            h.push(&e)?;
        }
        return Ok(());
    }
    let mut lines = Vec::with_capacity(batch.len() * 1024);
    for e in batch.drain(..) {
        summary.record(&e);
        if classes.is_empty() || classes.contains(&e.class) {
            e.write_json(&mut lines);
            lines.push(b'\n');
        }
    }
    out.write_all(&lines)
}

fn progress_bar(wanted: bool, total: u64) -> Option<indicatif::ProgressBar> {
    if !wanted || total == 0 || !io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}
