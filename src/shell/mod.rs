//! What the runner ([`crate::pipeline`]) and the components it starts (sources, sinks, the
//! fetcher, the query API) have in common. It sits below both, so that a component never
//! imports the runner that starts it, as Vector keeps `config` below `sources` and `sinks`:
//!
//! - [`errors`]: the pipeline file's errors, which every component's own checks add to, and
//!   the checks several share (a readable file, TLS files and a bearer token);
//! - [`duration`]: durations as pipeline files write them (`500ms`, `10m`);
//! - [`checkpoint`]: when a source may forget a message (done, barriers, the sinks' receipts);
//! - [`unknown_parents`]: the fetcher's settings and the objects it hands back;
//! - [`now_us`]: the wall clock that stamps arrivals.

pub mod checkpoint;
pub mod duration;
pub mod errors;
pub mod unknown_parents;

use std::time::{SystemTime, UNIX_EPOCH};

pub use checkpoint::{Barrier, Checkpoints, Done, Receipt, Rewind};
pub use duration::Span;
pub use errors::{check_credentials, check_file, ConfigError, ConfigErrors, Errors};
pub use unknown_parents::{Observed, UnknownParentsConfig};

/// Wall-clock time, µs since the epoch.
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}
