//! Causal traces (DESIGN §1.6): the chain of hops from a human or tool's intent to an object.
//! Stored as a shared linked list, so the many children of one parent share its prefix.

use std::num::NonZeroI64;
use std::sync::Arc;

use crate::state::{Sym, Ty};
use crate::write::Name;

/// `kausality.io/trace-<key>` labels of an object, as (key, value), shared between hops. A
/// `Vec` behind the `Arc` keeps the handle one pointer wide, in every hop that has one.
pub type Labels = Arc<Vec<(Box<str>, Box<str>)>>;

/// One step of a trace: who changed which object to which generation, and when. Kept small:
/// a parent's hop lives as long as its children's traces (one node per parent generation that a
/// child extends), so the optional numbers use zero as "unknown" (a generation starts at 1, and
/// an audit event is never from the first µs of 1970).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    /// (apiVersion, kind).
    pub ty: Ty,
    pub name: Name,
    pub generation: Option<NonZeroI64>,
    /// `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Sym>,
    /// When the write happened, in µs since the epoch; `None` when unknown. The write being
    /// judged is written out with its stageTimestamp as the API server wrote it instead.
    pub timestamp: Option<NonZeroI64>,
    /// From the object's own `kausality.io/trace-<key>` annotations.
    pub labels: Option<Labels>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct TraceNode {
    pub hop: Hop,
    pub prev: Option<Trace>,
}

/// A trace, newest hop at the head. An `Arc` without a weak count: 8 bytes less in every node.
pub type Trace = triomphe::Arc<TraceNode>;

/// A trace of one hop: a new causal origin.
pub fn origin(hop: Hop) -> Trace {
    Trace::new(TraceNode { hop, prev: None })
}

/// `prev` followed by `hop`.
pub fn extend(prev: Trace, hop: Hop) -> Trace {
    Trace::new(TraceNode { hop, prev: Some(prev) })
}

/// The hops, root (the original intent) first.
pub fn hops(t: &Trace) -> Vec<&Hop> {
    let mut v = Vec::with_capacity(4);
    let mut cur = Some(t);
    while let Some(n) = cur {
        v.push(&n.hop);
        cur = n.prev.as_ref();
    }
    v.reverse();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_nodes_stay_small() {
        // One node per parent generation that a child extends: 56 bytes with the Arc's count
        // is glibc's 64-byte bin (one byte more and it takes the 80-byte bin).
        assert!(std::mem::size_of::<TraceNode>() <= 48, "{}", std::mem::size_of::<TraceNode>());
    }
}
