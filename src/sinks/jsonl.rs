//! `[[sinks]] type = "jsonl"`: one enriched event per line, to stdout or a file. A file is
//! rotated by size (`path` → `path.1` → ... → `path.{keep}`), so a long-running service does not
//! fill its volume. Writes are plain blocking I/O on a thread of its own.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Error, Events};
use crate::metrics::Metrics;
use crate::pipeline::load::Errors;

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
    File { path: PathBuf, file: BufWriter<File>, written: u64, rotate_bytes: u64, keep: usize },
}

impl Out {
    fn open(cfg: &JsonlConfig) -> io::Result<Out> {
        if cfg.path == "-" {
            return Ok(Out::Stdout(io::stdout()));
        }
        let path = PathBuf::from(&cfg.path);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let written = file.metadata()?.len();
        Ok(Out::File { path, file: BufWriter::with_capacity(1 << 16, file), written, rotate_bytes: cfg.rotate_bytes, keep: cfg.keep })
    }

    /// Writes a batch and flushes it, so a reader of the file sees whole batches promptly.
    fn write_batch(&mut self, events: &Events, line: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Out::Stdout(s) => {
                let mut lock = s.lock();
                for e in events.iter() {
                    line.clear();
                    e.write_json(line);
                    line.push(b'\n');
                    lock.write_all(line)?;
                }
                lock.flush()
            }
            Out::File { path, file, written, rotate_bytes, keep } => {
                for e in events.iter() {
                    line.clear();
                    e.write_json(line);
                    line.push(b'\n');
                    if *rotate_bytes > 0 && *written > 0 && *written + line.len() as u64 > *rotate_bytes {
                        file.flush()?;
                        rotate(path, *keep)?;
                        *file = BufWriter::with_capacity(1 << 16, OpenOptions::new().create(true).write(true).truncate(true).open(&*path)?);
                        *written = 0;
                    }
                    file.write_all(line)?;
                    *written += line.len() as u64;
                }
                file.flush()
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

pub fn spawn(cfg: JsonlConfig, mut rx: mpsc::Receiver<Events>, metrics: Arc<Metrics>) -> Result<JoinHandle<()>, Error> {
    let mut out = Out::open(&cfg).map_err(|source| Error::Open { path: cfg.path.clone(), source })?;
    let delivered = metrics.sink_events.with_label_values(&["jsonl"]);
    let failed = metrics.sink_errors.with_label_values(&["jsonl"]);
    Ok(tokio::task::spawn_blocking(move || {
        let mut line = Vec::with_capacity(4096);
        while let Some(events) = rx.blocking_recv() {
            match out.write_batch(&events, &mut line) {
                Ok(()) => delivered.inc_by(events.len() as u64),
                Err(e) => {
                    failed.inc_by(events.len() as u64);
                    tracing::warn!(path = %cfg.path, error = %e, events = events.len(), "jsonl sink write failed");
                    // Reopen for the next batch (the file may have been removed or the disk freed).
                    if let Ok(o) = Out::open(&cfg) {
                        out = o;
                    }
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
