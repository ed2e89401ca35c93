//! The state snapshot: what the stream taught survives a restart. Written atomically (a
//! temporary file in the same directory, fsync, rename), periodically and on shutdown, by the
//! processor task between two batches, so it is consistent with the dedupe window; read once
//! at start-up, before any source listens.
//!
//! Layout: `KSSNAP` magic and a version, the dedupe window (auditID hashes, oldest first), then
//! the model's state to the end of the file, in the model's own format.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::classify::Engine;
use crate::order::Dedupe;

const MAGIC: &[u8; 6] = b"KSSNAP";
const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("snapshot {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("snapshot {path} is not a kausality-stream snapshot (or of another version): {what}")]
    Format { path: String, what: String },
}

/// What a save or a restore moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes: u64,
    pub dedupe_ids: usize,
    pub objects: usize,
    /// Whether the model's state is part of the snapshot (see [`MODEL_STATE_SAVED`]).
    pub model_state: bool,
    pub millis: u128,
}

/// The model's share of the snapshot. `Engine::snapshot_to` / `Engine::restore_from` are being
/// written in the model (state serialization); until they are merged, snapshots carry only the
/// dedupe window and these two functions are the seam to replace:
/// `save_model` → `engine.snapshot_to(w)`, `restore_model` → `Engine::restore_from(r)`.
pub const MODEL_STATE_SAVED: bool = false;

fn save_model(engine: &Engine, w: &mut dyn Write) -> io::Result<()> {
    let _ = (engine, w);
    Ok(())
}

fn restore_model(fresh: Engine, r: &mut dyn Read) -> io::Result<Engine> {
    let _ = r;
    Ok(fresh)
}

/// Writes `path` atomically: the old snapshot stays whole until the new one is complete.
pub fn save(path: &Path, engine: &Engine, dedupe: &Dedupe) -> Result<Stats, Error> {
    let started = Instant::now();
    let io_err = |source| Error::Io { path: path.display().to_string(), source };
    let tmp = temp_path(path);
    let result = (|| -> io::Result<u64> {
        let file = File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        let hashes = dedupe.hashes();
        w.write_all(&(hashes.len() as u64).to_le_bytes())?;
        for h in &hashes {
            w.write_all(&h.to_le_bytes())?;
        }
        save_model(engine, &mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        drop(file);
        fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(len)
    })();
    match result {
        Ok(bytes) => Ok(Stats {
            bytes,
            dedupe_ids: dedupe.hashes().len(),
            objects: engine.store.len(),
            model_state: MODEL_STATE_SAVED,
            millis: started.elapsed().as_millis(),
        }),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(io_err(e))
        }
    }
}

/// Reads `path` into a fresh engine and the dedupe window; `Ok(None)` when there is no
/// snapshot yet (first start).
pub fn restore(path: &Path, fresh: Engine, dedupe: &mut Dedupe) -> Result<(Engine, Option<Stats>), Error> {
    let started = Instant::now();
    let name = path.display().to_string();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((fresh, None)),
        Err(source) => return Err(Error::Io { path: name, source }),
    };
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut r = BufReader::with_capacity(1 << 20, file);
    let format = |what: &str| Error::Format { path: name.clone(), what: what.to_string() };
    let io_err = |source| Error::Io { path: name.clone(), source };
    let mut magic = [0u8; 6];
    r.read_exact(&mut magic).map_err(|_| format("too short"))?;
    if &magic != MAGIC {
        return Err(format("wrong magic bytes"));
    }
    let mut v = [0u8; 4];
    r.read_exact(&mut v).map_err(|_| format("too short"))?;
    if u32::from_le_bytes(v) != VERSION {
        return Err(format(&format!("version {} (this binary reads {VERSION})", u32::from_le_bytes(v))));
    }
    let mut n = [0u8; 8];
    r.read_exact(&mut n).map_err(|_| format("too short"))?;
    let n = u64::from_le_bytes(n);
    if n.saturating_mul(16) > bytes {
        return Err(format("dedupe window longer than the file"));
    }
    let mut hashes = Vec::with_capacity(n as usize);
    let mut h = [0u8; 16];
    for _ in 0..n {
        r.read_exact(&mut h).map_err(io_err)?;
        hashes.push(u128::from_le_bytes(h));
    }
    dedupe.restore(&hashes);
    let engine = restore_model(fresh, &mut r).map_err(io_err)?;
    let stats = Stats {
        bytes,
        dedupe_ids: hashes.len(),
        objects: engine.store.len(),
        model_state: MODEL_STATE_SAVED,
        millis: started.elapsed().as_millis(),
    };
    Ok((engine, Some(stats)))
}

fn temp_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::EngineOptions;
    use crate::config::ModelConfig;

    #[test]
    fn round_trip_keeps_the_dedupe_window() {
        let dir = std::env::temp_dir().join(format!("ks-snap-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.snapshot");
        let engine = Engine::new(ModelConfig::default(), EngineOptions::default());
        let mut d = Dedupe::new(10);
        assert!(d.first_sight("a") && d.first_sight("b"));
        let saved = save(&path, &engine, &d).unwrap();
        assert_eq!(saved.dedupe_ids, 2);
        let mut d2 = Dedupe::new(10);
        let (_, stats) = restore(&path, Engine::new(ModelConfig::default(), EngineOptions::default()), &mut d2).unwrap();
        assert_eq!(stats.unwrap().dedupe_ids, 2);
        assert!(!d2.first_sight("a"), "a was in the restored window");
        fs::write(&path, b"garbage!garbage!").unwrap();
        let Err(err) = restore(&path, Engine::new(ModelConfig::default(), EngineOptions::default()), &mut d2) else { panic!("garbage restored") };
        assert!(err.to_string().contains("not a kausality-stream snapshot"), "{err}");
        assert!(restore(&dir.join("none"), Engine::new(ModelConfig::default(), EngineOptions::default()), &mut d2).unwrap().1.is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
