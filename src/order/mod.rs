//! Ordering: duplicates out (by auditID), writes back into resourceVersion order.

mod dedupe;
mod reorder;

pub use dedupe::Dedupe;
pub use reorder::{Released, ReorderBuffer};
