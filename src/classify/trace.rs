//! Causal traces (DESIGN §1.6): the chain of hops from a human or tool's intent to an object.
//! Stored as a shared linked list, so the many children of one parent share its prefix.

use std::sync::Arc;

use crate::state::Sym;

/// `kausality.io/trace-<key>` labels of an object, as (key, value), shared between hops.
pub type Labels = Arc<[(Box<str>, Box<str>)]>;

/// One step of a trace: who changed which object to which generation, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub api_version: Sym,
    pub kind: Sym,
    pub name: Arc<str>,
    pub generation: Option<i64>,
    /// `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Sym>,
    /// The write's stageTimestamp as the API server wrote it (shared, not copied); `None`
    /// when unknown.
    pub timestamp: Option<Arc<str>>,
    /// From the object's own `kausality.io/trace-<key>` annotations.
    pub labels: Option<Labels>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct TraceNode {
    pub hop: Hop,
    pub prev: Option<Trace>,
}

/// A trace, newest hop at the head.
pub type Trace = Arc<TraceNode>;

/// A trace of one hop: a new causal origin.
pub fn origin(hop: Hop) -> Trace {
    Arc::new(TraceNode { hop, prev: None })
}

/// `prev` followed by `hop`.
pub fn extend(prev: Trace, hop: Hop) -> Trace {
    Arc::new(TraceNode { hop, prev: Some(prev) })
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
