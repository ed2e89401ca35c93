//! Per-object state, rebuilt from the stream: a sharded concurrent map keyed by (cluster, UID).

mod cached;
mod intern;
mod object;
mod partitions;
mod record;
mod snapshot;
mod store;

pub use crate::hash::{FastBuild, FastHasher};
pub use cached::{Cached, Live, Refused, Slice};
pub use intern::{Interner, Marks, Pin, Swept, Sym, Ty};
pub use object::{
    name_key, FieldChange, Intent, ObjectState, OriginWrite, OwnerKey, Recent, SharedPolicy, TraceState,
    MAX_ORIGIN_WRITES, MAX_RECENT, MAX_REMOVED,
};
pub use partitions::{Partitions, Parts};
pub use record::{encode_record, encode_trace_message, record_key, RecordReader, TraceMessage};
pub use snapshot::{
    read_partitioned, read_snapshot, write_partitioned, write_snapshot, ChangelogMark, PartitionedSnapshot,
    SnapshotError, SnapshotStats,
};
pub use store::{ObjKey, Store, StoreStats};

/// An object's name: one pointer wide (length and count live on the heap beside the text),
/// shared by a write, the state of an owner, its trace hops and the enriched events naming it.
pub type Name = arcstr::ArcStr;
