//! Ordering: duplicates out (by auditID), writes back into resourceVersion order.

mod clusters;
mod dedupe;
mod reorder;

pub use clusters::{Clusters, DEFAULT_MAX_CLUSTERS, MAX_CLUSTER_NAME_BYTES};
pub use dedupe::Dedupe;
pub use reorder::{Placing, Released, ReorderBuffer};
