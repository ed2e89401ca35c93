//! What the stages around the engine read and restore of what it holds (STYLE 14): the
//! processor (symbols, the journal of changed objects, upkeep, snapshots), the changelog
//! (records in and out, trace messages for other partitions), the fetcher and the tests. Each
//! is a named method, so the engine's fields stay its own.

use std::io::{Read, Write as IoWrite};
use std::sync::Arc;

use super::{forward, Engine};
use crate::state::{
    read_snapshot, write_snapshot, Interner, ObjKey, ObjectState, SnapshotError, SnapshotStats, StoreStats,
};
use crate::write::{Extractor, Uid};

impl Engine {
    /// The symbol table the engine's state is written in, shared with the decoders.
    pub fn interner(&self) -> &Arc<Interner> {
        &self.interner
    }

    /// What turns a decoded audit event into a [`crate::write::Write`] for this engine: its
    /// symbols and its model's configuration.
    pub fn extractor(&self) -> Extractor<'_> {
        Extractor { interner: &self.interner, config: &self.config }
    }

    /// How many objects the state holds (tombstones included).
    pub fn tracked_objects(&self) -> usize {
        self.store.len()
    }

    /// `f` of the state of `key`, if the store holds it.
    pub fn read_state<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        self.store.read(key, f)
    }

    /// The namespace of the object `uid` of `cluster` (empty for a cluster-scoped one), if
    /// the state holds it.
    pub fn namespace_of(&self, cluster: &str, uid: Uid) -> Option<Arc<str>> {
        let namespace = self.read_in_cluster(cluster, uid, |s| s.namespace)?;
        Some(self.interner.resolve(namespace))
    }

    /// `f` of every object's state, in no order.
    pub fn for_each_state(&self, f: impl FnMut(&ObjKey, &ObjectState)) {
        self.store.for_each(f)
    }

    /// Keeps a journal of the keys whose state changes or goes (a state changelog writes them).
    pub fn keep_journal(&self) {
        self.store.keep_journal()
    }

    /// The keys changed or removed since the last call, in order, possibly repeated.
    pub fn take_journal(&self, into: &mut Vec<ObjKey>) {
        self.store.take_journal(into)
    }

    /// Keeps the store under its cap and drops expired tombstones, as of `now_us`.
    pub fn maintain(&self, now_us: i64) -> StoreStats {
        self.store.maintain(now_us)
    }

    /// Puts `state` of `key` in place unless the store holds one at least as new (by
    /// resourceVersion); whether it did. Not journaled: the state came from the changelog.
    pub fn restore_newer(&self, key: ObjKey, state: ObjectState) -> bool {
        self.store.restore_newer(key, state)
    }

    /// As [`Engine::restore_newer`], and a state of the same resourceVersion is replaced too.
    pub fn restore_over(&self, key: ObjKey, state: ObjectState) -> bool {
        self.store.restore_over(key, state)
    }

    /// Removes the state of `key` without a journal entry (a partition given up: its
    /// changelog keeps it).
    pub fn forget(&self, key: &ObjKey) -> Option<ObjectState> {
        self.store.forget(key)
    }

    /// Writes the state and `dedupe` (the dedupe window) as a snapshot.
    pub fn write_snapshot(&self, dedupe: &[u128], out: &mut impl IoWrite) -> std::io::Result<SnapshotStats> {
        write_snapshot(&self.store, &self.interner, dedupe, out)
    }

    /// Reads a snapshot into the (fresh) state; its dedupe window is returned.
    pub fn read_snapshot(&self, input: &mut impl Read) -> Result<(SnapshotStats, Vec<u128>), SnapshotError> {
        read_snapshot(&self.store, &self.interner, input)
    }

    /// Sends trace messages to other partitions from now on, out of `partitions` in all.
    pub fn enable_forwards(&self, partitions: i32) {
        self.forwards.enable(partitions)
    }

    /// The trace messages for other partitions queued since the last call.
    pub fn take_forwards(&self) -> Vec<forward::Forward> {
        self.forwards.take()
    }
}
