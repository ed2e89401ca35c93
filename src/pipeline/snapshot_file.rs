//! The state snapshot file: what the stream taught survives a restart. The content (state
//! store and dedupe window, in the model's own format) comes from `Processor::snapshot` and
//! goes back with `Processor::restore`; this module is the file around it. Written atomically
//! (a temporary file in the same directory, fsync, rename, fsync of the directory) so that a
//! crash mid-write leaves the previous snapshot whole; written by the processor task between
//! two batches, periodically and after the final flush on shutdown; read once at start-up,
//! before any source listens.
//!
//! With an exactly-once Kafka source, the file starts with the Kafka positions the state
//! covers (a text header, `KAUSALITY-POSITIONS 1`, one `topic<TAB>partition<TAB>next offset`
//! line each, then an empty line): a restart reads again, silently, what was committed after
//! the snapshot, so the state catches up with the outputs already written.
//!
//! With a state changelog, the content is the changelog's ([`restore_cached`]): the states by
//! partition and each partition's changelog position, a cache that partitions assigned load
//! from; no input positions (the changelog brings the state to the committed offsets).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::process::Processor;
use crate::state::{Cached, SnapshotError, SnapshotStats};

/// Why a snapshot file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be written or read.
    #[error("snapshot {path}: {source}")]
    Io {
        /// The snapshot file.
        path: String,
        /// What the OS said.
        source: io::Error,
    },
    /// The file's content cannot be restored.
    #[error("snapshot {path}: {source}")]
    Restore {
        /// The snapshot file.
        path: String,
        /// What is wrong with it.
        source: SnapshotError,
    },
    /// The Kafka positions at its start cannot be read.
    #[error("snapshot {path}: bad Kafka positions header: {line:?}")]
    Positions {
        /// The snapshot file.
        path: String,
        /// The line that is not a position.
        line: String,
    },
}

const POSITIONS: &str = "KAUSALITY-POSITIONS 1";

/// Where a source's partition stands: every message before `next` is in the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset of the first message not in the state.
    pub next: i64,
}

/// What a save or a restore moved, and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// What the snapshot held.
    pub content: SnapshotStats,
    /// Size of the file.
    pub bytes: u64,
    /// How long it took, in milliseconds.
    pub millis: u128,
}

/// Writes `path` atomically: the old snapshot stays whole until the new one is complete.
/// Flush the processor first if held writes must be part of it (shutdown).
/// `positions`: the Kafka positions the state covers (exactly-once), or none.
pub fn save(path: &Path, processor: &Processor, positions: &[Position]) -> Result<Stats, Error> {
    save_with(path, positions, |mut w| processor.snapshot(&mut w))
}

/// [`save`] of the content `content` writes.
pub fn save_with(
    path: &Path,
    positions: &[Position],
    content: impl FnOnce(&mut dyn io::Write) -> io::Result<SnapshotStats>,
) -> Result<Stats, Error> {
    let started = Instant::now();
    let tmp = temp_path(path);
    let result = (|| -> io::Result<(SnapshotStats, u64)> {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        if !positions.is_empty() {
            writeln!(w, "{POSITIONS}")?;
            for p in positions {
                writeln!(w, "{}\t{}\t{}", p.topic, p.partition, p.next)?;
            }
            writeln!(w)?;
        }
        let content = content(&mut w)?;
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

/// What a restore brought back.
#[derive(Debug)]
pub struct Restored {
    /// What was read, and how long it took.
    pub stats: Stats,
    /// The Kafka positions the state covers; empty unless written by an exactly-once pipeline.
    pub positions: Vec<Position>,
}

/// The snapshot at `path` to read, and its size in bytes; `Ok(None)` when there is none yet.
fn open(path: &Path) -> Result<Option<(BufReader<File>, u64)>, Error> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path: path.display().to_string(), source }),
    };
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Some((BufReader::with_capacity(1 << 20, file), bytes)))
}

/// Reads `path` into a fresh processor; `Ok(None)` when there is no snapshot yet (first start).
pub fn restore(path: &Path, processor: &mut Processor) -> Result<Option<Restored>, Error> {
    let started = Instant::now();
    let name = || path.display().to_string();
    let Some((mut input, bytes)) = open(path)? else { return Ok(None) };
    let positions = read_positions(&mut input).map_err(|e| match e {
        PositionsError::Io(source) => Error::Io { path: name(), source },
        PositionsError::Line(line) => Error::Positions { path: name(), line },
    })?;
    let content = processor.restore(&mut input).map_err(|source| Error::Restore { path: name(), source })?;
    Ok(Some(Restored { stats: Stats { content, bytes, millis: started.elapsed().as_millis() }, positions }))
}

/// Reads `path`, written with a state changelog, into a fresh processor: its dedupe window,
/// and the states by partition to load when partitions are assigned (`None`: the snapshot has
/// no changelog positions). `Ok(None)` when there is no snapshot yet.
pub fn restore_cached(path: &Path, processor: &mut Processor) -> Result<Option<(Stats, Option<Cached>)>, Error> {
    let started = Instant::now();
    let name = || path.display().to_string();
    let Some((mut input, bytes)) = open(path)? else { return Ok(None) };
    // Input positions (a snapshot of an exactly-once pipeline without a changelog) are of no
    // use: the changelog brings each partition's state to its committed offset.
    read_positions(&mut input).map_err(|e| match e {
        PositionsError::Io(source) => Error::Io { path: name(), source },
        PositionsError::Line(line) => Error::Positions { path: name(), line },
    })?;
    let (content, cached) =
        processor.restore_partitioned(&mut input).map_err(|source| Error::Restore { path: name(), source })?;
    Ok(Some((Stats { content, bytes, millis: started.elapsed().as_millis() }, cached)))
}

enum PositionsError {
    Io(io::Error),
    Line(String),
}

/// Reads the positions header, if the file has one, leaving `input` at the state's start.
fn read_positions(input: &mut impl BufRead) -> Result<Vec<Position>, PositionsError> {
    if !input.fill_buf().map_err(PositionsError::Io)?.starts_with(POSITIONS.as_bytes()) {
        return Ok(Vec::new());
    }
    let mut positions = Vec::new();
    let mut line = String::new();
    input.read_line(&mut line).map_err(PositionsError::Io)?;
    loop {
        line.clear();
        if input.read_line(&mut line).map_err(PositionsError::Io)? == 0 {
            return Err(PositionsError::Line("(end of file before the state)".to_string()));
        }
        let l = line.trim_end_matches('\n');
        if l.is_empty() {
            return Ok(positions);
        }
        let mut f = l.split('\t');
        let position = match (f.next(), f.next().map(str::parse), f.next().map(str::parse), f.next()) {
            (Some(topic), Some(Ok(partition)), Some(Ok(next)), None) if !topic.is_empty() => {
                Position { topic: topic.to_string(), partition, next }
            }
            _ => return Err(PositionsError::Line(l.to_string())),
        };
        positions.push(position);
    }
}

/// Removes the temporary files that a process killed while writing a snapshot left next to
/// `path` (`path.tmp-<pid>`): those of a process that is gone, and one with our own pid (a
/// container restarts with the same pid; nothing of ours writes yet when this runs). Files of
/// a live process and every other name are left alone. Returns what was removed; a file that
/// cannot be removed is logged and kept.
pub fn remove_stale_temporaries(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Vec::new() };
    let prefix = format!("{name}.tmp-");
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let own = std::process::id();
    // Without /proc (not Linux) no other pid can be told alive or dead: only ours goes.
    let proc_fs = Path::new("/proc/self").exists();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let dead = pid == own || (proc_fs && !Path::new("/proc").join(pid.to_string()).exists());
        if !dead {
            continue;
        }
        let stale = entry.path();
        match fs::remove_file(&stale) {
            Ok(()) => removed.push(stale),
            Err(e) => {
                tracing::warn!(path = %stale.display(), error = %e, "cannot remove a stale temporary snapshot file")
            }
        }
    }
    removed
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
        let saved = save(&path, &p, &[]).unwrap();
        assert_eq!(saved.content.dedupe_ids, 2);
        assert!(saved.bytes > 0);
        assert!(!temp_path(&path).exists(), "the temporary file was renamed");
        let mut q = processor();
        let restored = restore(&path, &mut q).unwrap().unwrap();
        assert_eq!(restored.stats.content.dedupe_ids, 2);
        assert!(restored.positions.is_empty());
        assert!(!q.dedupe_mut().first_sight("a"), "a was in the restored window");
        fs::write(&path, b"garbage!garbage!").unwrap();
        let err = restore(&path, &mut processor()).unwrap_err();
        assert!(err.to_string().contains("not a kausality-stream state snapshot"), "{err}");
        assert!(restore(&dir.join("none"), &mut processor()).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_changelog_snapshot_comes_back_as_a_cache_by_partition_and_an_older_one_as_none() {
        use crate::state::{write_partitioned, ChangelogMark, ObjKey, ObjectState, Parts};
        let dir = std::env::temp_dir().join(format!("ks-snap-cache-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.snapshot");
        let p = processor();
        let interner = p.engine().interner();
        let state = ObjectState::new(interner.ty(interner.intern("v1"), interner.intern("Pod")), interner.intern("ns"));
        let objects = vec![(ObjKey::new(interner.intern("c#p2"), 5), state)];
        let mark = ChangelogMark { topic: "state".into(), partitions: 4, taken_us: 1, positions: vec![(2, 17)] };
        save_with(&path, &[], |mut w| write_partitioned(&objects, &[Parts::one(2)], &mark, interner, &[7], &mut w))
            .unwrap();
        let mut q = processor();
        let (stats, cached) = restore_cached(&path, &mut q).unwrap().unwrap();
        let cached = cached.expect("changelog positions");
        assert_eq!(
            (stats.content.objects, cached.topic(), cached.partitions(), cached.states()),
            (1, "state", vec![2], 1)
        );
        assert_eq!(q.dedupe_window(), [7], "the dedupe window is restored at once");
        assert_eq!(q.engine().tracked_objects(), 0, "the states wait for their partition");
        // Without a changelog: its own snapshot, no cache; and a plain restore refuses the cache.
        save(&path, &p, &[Position { topic: "audit".into(), partition: 0, next: 3 }]).unwrap();
        let (_, cached) = restore_cached(&path, &mut processor()).unwrap().unwrap();
        assert!(cached.is_none());
        save_with(&path, &[], |mut w| write_partitioned(&objects, &[Parts::one(2)], &mark, interner, &[], &mut w))
            .unwrap();
        let err = restore(&path, &mut processor()).unwrap_err();
        assert!(err.to_string().contains("written with the state changelog state"), "{err}");
        assert!(restore_cached(&dir.join("none"), &mut processor()).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("ks-snap-stale-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.snapshot");
        // A pid that is gone: a child that has exited and been reaped.
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let mut alive = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let names = [
            format!("state.snapshot.tmp-{dead_pid}"),
            format!("state.snapshot.tmp-{}", std::process::id()),
            format!("state.snapshot.tmp-{}", alive.id()),
            format!("other.snapshot.tmp-{dead_pid}"),
            "state.snapshot.tmp-notapid".to_string(),
            "state.snapshot".to_string(),
        ];
        for n in &names {
            fs::write(dir.join(n), b"x").unwrap();
        }
        let mut removed: Vec<String> = remove_stale_temporaries(&path)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        removed.sort();
        let mut expected = vec![names[0].clone(), names[1].clone()];
        expected.sort();
        assert_eq!(removed, expected);
        for n in &names[2..] {
            assert!(dir.join(n).exists(), "{n} is kept");
        }
        alive.kill().unwrap();
        alive.wait().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kafka_positions_go_before_the_state_and_come_back() {
        let dir = std::env::temp_dir().join(format!("ks-snap-pos-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.snapshot");
        let mut p = processor();
        assert!(p.dedupe_mut().first_sight("a"));
        let positions = vec![
            Position { topic: "audit.eu-1".into(), partition: 0, next: 1234 },
            Position { topic: "audit.eu-1".into(), partition: 7, next: 0 },
        ];
        save(&path, &p, &positions).unwrap();
        let mut q = processor();
        let restored = restore(&path, &mut q).unwrap().unwrap();
        assert_eq!(restored.positions, positions);
        assert_eq!(restored.stats.content.dedupe_ids, 1);
        assert!(!q.dedupe_mut().first_sight("a"), "the state after the header was restored");

        let text = fs::read(&path).unwrap();
        let mut broken = b"KAUSALITY-POSITIONS 1\naudit\tzero\t5\n\n".to_vec();
        broken.extend_from_slice(&text[text.windows(2).position(|w| w == b"\n\n").unwrap() + 2..]);
        fs::write(&path, &broken).unwrap();
        let err = restore(&path, &mut processor()).unwrap_err();
        assert!(err.to_string().contains("bad Kafka positions header") && err.to_string().contains("zero"), "{err}");
        fs::write(&path, b"KAUSALITY-POSITIONS 1\naudit\t0\t5\n").unwrap();
        let err = restore(&path, &mut processor()).unwrap_err();
        assert!(err.to_string().contains("end of file"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
