//! The state snapshot file: what the stream taught survives a restart. The content (state
//! store and dedupe window, in the model's own format) comes from `Processor::snapshot` and
//! goes back with `Processor::restore`; this module is the file around it. Written atomically
//! (a temporary file in the same directory, fsync, rename, fsync of the directory) so that a
//! crash mid-write leaves the previous snapshot whole; written by the processor task between
//! two batches, periodically and after the final flush on shutdown; read once at start-up,
//! before any source listens.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::process::Processor;
use crate::state::{SnapshotError, SnapshotStats};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("snapshot {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("snapshot {path}: {source}")]
    Restore { path: String, source: SnapshotError },
}

/// What a save or a restore moved, and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub content: SnapshotStats,
    /// Size of the file.
    pub bytes: u64,
    pub millis: u128,
}

/// Writes `path` atomically: the old snapshot stays whole until the new one is complete.
/// Flush the processor first if held writes must be part of it (shutdown).
pub fn save(path: &Path, processor: &Processor) -> Result<Stats, Error> {
    let started = Instant::now();
    let tmp = temp_path(path);
    let result = (|| -> io::Result<(SnapshotStats, u64)> {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let content = processor.snapshot(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let bytes = file.metadata()?.len();
        drop(file);
        fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok((content, bytes))
    })();
    match result {
        Ok((content, bytes)) => Ok(Stats { content, bytes, millis: started.elapsed().as_millis() }),
        Err(source) => {
            let _ = fs::remove_file(&tmp);
            Err(Error::Io { path: path.display().to_string(), source })
        }
    }
}

/// Reads `path` into a fresh processor; `Ok(None)` when there is no snapshot yet (first start).
pub fn restore(path: &Path, processor: &mut Processor) -> Result<Option<Stats>, Error> {
    let started = Instant::now();
    let name = || path.display().to_string();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path: name(), source }),
    };
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let content = processor.restore(&mut BufReader::with_capacity(1 << 20, file)).map_err(|source| Error::Restore { path: name(), source })?;
    Ok(Some(Stats { content, bytes, millis: started.elapsed().as_millis() }))
}

fn temp_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::classify::{Engine, EngineOptions};
    use crate::config::ModelConfig;
    use crate::metrics::Metrics;
    use crate::process::ProcessorOptions;

    fn processor() -> Processor {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        Processor::new(engine, Arc::new(Metrics::new()), ProcessorOptions::default())
    }

    #[test]
    fn atomic_round_trip_and_clear_errors() {
        let dir = std::env::temp_dir().join(format!("ks-snap-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.snapshot");
        let mut p = processor();
        assert!(p.dedupe_mut().first_sight("a") && p.dedupe_mut().first_sight("b"));
        let saved = save(&path, &p).unwrap();
        assert_eq!(saved.content.dedupe_ids, 2);
        assert!(saved.bytes > 0);
        assert!(!temp_path(&path).exists(), "the temporary file was renamed");
        let mut q = processor();
        let stats = restore(&path, &mut q).unwrap().unwrap();
        assert_eq!(stats.content.dedupe_ids, 2);
        assert!(!q.dedupe_mut().first_sight("a"), "a was in the restored window");
        fs::write(&path, b"garbage!garbage!").unwrap();
        let err = restore(&path, &mut processor()).unwrap_err();
        assert!(err.to_string().contains("not a kausality-stream state snapshot"), "{err}");
        assert!(restore(&dir.join("none"), &mut processor()).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
