//! Per-object state, rebuilt from the stream: a sharded concurrent map keyed by (cluster, UID).

mod intern;
mod object;
mod snapshot;
mod store;

pub use intern::{Interner, Sym};
pub use object::{ObjectState, Recent, MAX_RECENT};
pub use snapshot::{read_snapshot, write_snapshot, SnapshotError, SnapshotStats};
pub use store::{ObjKey, Store, StoreStats};
