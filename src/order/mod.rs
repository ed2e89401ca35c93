//! Ordering: duplicates out (by auditID), writes back into resourceVersion order; how current
//! the state is (the newest write applied per cluster).

mod arrivals;
mod clusters;
mod dedupe;
mod freshness;
mod reorder;

pub use arrivals::{Arrival, Arrivals};
pub use clusters::{Clusters, DEFAULT_MAX_CLUSTERS, MAX_CLUSTER_NAME_BYTES};
pub use dedupe::Dedupe;
pub use freshness::Freshness;
pub use reorder::{Placing, Released, ReorderBuffer};
