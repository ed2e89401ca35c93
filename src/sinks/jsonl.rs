//! `[[sinks]] type = "jsonl"`: one enriched event per line, to stdout or a file. A file is
//! rotated by size (`path` → `path.1` → ... → `path.{keep}`), so a long-running service does not
//! fill its volume. Writes are plain blocking I/O on a thread of its own, a batch at a time
//! and whole lines only; a batch that cannot be written is held and tried again (see
//! [`spawn`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Error, Events};
use crate::metrics::{Metrics, Sink};
use crate::shell::Errors;
use crate::status::Status;

/// `[[sinks]] type = "jsonl"`: JSON lines to stdout or a file, with size-based rotation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlConfig {
    /// `-` for stdout, else a file (appended to). Default: `"-"`.
    #[serde(default = "stdout")]
    pub path: String,
    /// Rotate the file once it reaches this many bytes; 0 never rotates. Ignored for stdout.
    /// Default: 0.
    #[serde(default)]
    pub rotate_bytes: u64,
    /// Rotated files kept (`path.1` is the newest). Default: 5.
    #[serde(default = "default_keep")]
    pub keep: usize,
}

fn stdout() -> String {
    "-".to_string()
}

fn default_keep() -> usize {
    5
}

impl JsonlConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        if self.path.is_empty() {
            errors.push(format!("{key}.path"), None, "must be \"-\" (stdout) or a file path");
        } else if self.path != "-" {
            let parent = Path::new(&self.path).parent().filter(|p| !p.as_os_str().is_empty());
            if parent.is_some_and(|d| !d.is_dir()) {
                errors.push(format!("{key}.path"), None, format!("directory of {} does not exist", self.path));
            }
        }
    }
}

enum Out {
    Stdout(io::Stdout),
    File { path: PathBuf, file: File, written: u64, rotate_bytes: u64, keep: usize },
}

impl Out {
    fn open(cfg: &JsonlConfig) -> io::Result<Out> {
        if cfg.path == "-" {
            return Ok(Out::Stdout(io::stdout()));
        }
        let path = PathBuf::from(&cfg.path);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let written = file.metadata()?.len();
        Ok(Out::File { path, file, written, rotate_bytes: cfg.rotate_bytes, keep: cfg.keep })
    }

    /// Writes a batch of whole lines (`lines`), all or nothing: a file that could not take it
    /// all is truncated back to where the batch began, so that no half line is ever left and
    /// the retry writes the batch once. A file is rotated between batches, so one file may
    /// pass `rotate_bytes` by at most one batch. Stdout cannot be truncated: a failed write is
    /// retried whole (a reader may see the lines before the failure twice).
    fn write_batch(&mut self, lines: &[u8]) -> io::Result<()> {
        match self {
            Out::Stdout(s) => {
                let mut lock = s.lock();
                lock.write_all(lines)?;
                lock.flush()
            }
            Out::File { path, file, written, rotate_bytes, keep } => {
                if *rotate_bytes > 0 && *written > 0 && *written + lines.len() as u64 > *rotate_bytes {
                    rotate(path, *keep)?;
                    *file = OpenOptions::new().create(true).append(true).open(&*path)?;
                    *written = 0;
                }
                let start = *written;
                match file.write_all(lines) {
                    Ok(()) => {
                        *written += lines.len() as u64;
                        Ok(())
                    }
                    Err(e) => {
                        if let Err(t) = file.set_len(start) {
                            tracing::error!(path = %path.display(), error = %t, "jsonl sink cannot truncate a partly written batch");
                        }
                        Err(e)
                    }
                }
            }
        }
    }
}

fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

/// `path.{keep-1}` → `path.{keep}`, ..., `path` → `path.1`; the oldest falls off.
fn rotate(path: &Path, keep: usize) -> io::Result<()> {
    if keep == 0 {
        return fs::remove_file(path);
    }
    for n in (1..keep).rev() {
        match fs::rename(numbered(path, n), numbered(path, n + 1)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    fs::rename(path, numbered(path, 1))
}

/// First wait before writing a failed batch again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// After the stop (the queue is closed), how long a failed batch is still tried before what
/// is left is given up (and the exit code says so). Below the default shutdown timeout.
const RETRY_AFTER_STOP: Duration = Duration::from_secs(5);

/// A sink that cannot write holds its batch and tries it again until it is written: it takes
/// no new batch meanwhile, so its queue fills and the processor waits (with a Kafka source,
/// the offsets of what it holds are not committed); it reports itself in the [`Status`], so
/// the webhook answers 503 + `Retry-After` and `/readyz` is not ready until it writes again.
pub fn spawn(
    cfg: JsonlConfig,
    mut rx: mpsc::Receiver<Events>,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
) -> Result<JoinHandle<()>, Error> {
    let mut out = Out::open(&cfg).map_err(|source| Error::Open { path: cfg.path.clone(), source })?;
    let (delivered, failed) = metrics.sink_counters(Sink::Jsonl);
    let name = format!("jsonl {}", cfg.path);
    Ok(tokio::task::spawn_blocking(move || {
        let mut lines = Vec::with_capacity(1 << 16);
        let mut failing = false;
        while let Some(events) = rx.blocking_recv() {
            lines.clear();
            for e in events.iter() {
                e.write_json(&mut lines);
                lines.push(b'\n');
            }
            let mut wait = RETRY_FIRST;
            let mut given_up_at: Option<Instant> = None;
            loop {
                let error = match out.write_batch(&lines) {
                    Ok(()) => {
                        delivered.inc_by(events.len() as u64);
                        if std::mem::take(&mut failing) {
                            status.sink_recovered(&name);
                            tracing::info!(path = %cfg.path, "jsonl sink writes again");
                        }
                        break;
                    }
                    Err(e) => e,
                };
                failed.inc();
                if !std::mem::replace(&mut failing, true) {
                    tracing::error!(path = %cfg.path, error = %error, events = events.len(), "jsonl sink cannot write; holding the batch and trying again (the webhook answers 503 meanwhile)");
                }
                status.sink_failing(&name, format!("cannot write: {error}"));
                if rx.is_closed() {
                    let since = *given_up_at.get_or_insert_with(Instant::now);
                    if since.elapsed() >= RETRY_AFTER_STOP {
                        let mut lost = events.len();
                        while let Ok(rest) = rx.try_recv() {
                            lost += rest.len();
                        }
                        tracing::error!(path = %cfg.path, error = %error, lost, "jsonl sink: stopping with events it could not write");
                        status.sink_failing(&name, format!("{lost} events not written at the stop: {error}"));
                        return;
                    }
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(RETRY_MAX);
                // The file may have been removed or rotated away by hand: open it again.
                if let Ok(o) = Out::open(&cfg) {
                    out = o;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_n_files() {
        let dir = std::env::temp_dir().join(format!("ks-jsonl-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.jsonl");
        for i in 0..4 {
            fs::write(&p, format!("{i}")).unwrap();
            rotate(&p, 2).unwrap();
        }
        assert_eq!(fs::read_to_string(numbered(&p, 1)).unwrap(), "3");
        assert_eq!(fs::read_to_string(numbered(&p, 2)).unwrap(), "2");
        assert!(!numbered(&p, 3).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
