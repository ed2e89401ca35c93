//! Causal traces (DESIGN §1.6): the chain of hops from a human or tool's intent to an object.
//! Stored as a shared linked list, so the many children of one parent share its prefix.

use std::sync::Arc;

use crate::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use crate::state::Sym;

/// `kausality.io/trace-<key>` labels of an object, as (key, value), shared between hops. A
/// `Vec` behind the `Arc` keeps the handle one pointer wide, in every hop that has one.
pub type Labels = Arc<Vec<(Box<str>, Box<str>)>>;

/// One step of a trace: who changed which object to which generation, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub api_version: Sym,
    pub kind: Sym,
    pub name: Arc<str>,
    pub generation: Option<i64>,
    /// `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Sym>,
    /// When the write happened; `None` when unknown.
    pub timestamp: Option<Stamp>,
    /// From the object's own `kausality.io/trace-<key>` annotations.
    pub labels: Option<Labels>,
}

/// The time of a hop. The write being judged has its stageTimestamp as the API server wrote it
/// (shared, not copied); a hop rebuilt from state, kept for as long as its children are, holds
/// only the µs and is formatted for output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stamp {
    Text(Arc<str>),
    Micros(i64),
}

impl Stamp {
    /// The stamp of `text`: µs when they format back to the same text, else the text.
    pub fn parse(text: &str) -> Stamp {
        match parse_rfc3339_micros(text) {
            Some(us) if format_rfc3339_micros(us) == text => Stamp::Micros(us),
            _ => Stamp::Text(Arc::from(text)),
        }
    }

    /// As RFC 3339 text.
    pub fn text(&self) -> Arc<str> {
        match self {
            Stamp::Text(t) => t.clone(),
            Stamp::Micros(us) => Arc::from(format_rfc3339_micros(*us)),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_keep_their_text() {
        let t = "2024-05-01T10:00:00.123456Z";
        assert!(matches!(Stamp::parse(t), Stamp::Micros(_)));
        assert_eq!(&*Stamp::parse(t).text(), t);
        let other = "2024-05-01T10:00:00Z";
        assert_eq!(Stamp::parse(other), Stamp::Text(Arc::from(other)), "another precision is kept as written");
    }

    #[test]
    fn trace_nodes_stay_small() {
        // One node per parent generation that a child extends: 104 bytes with the Arc counts
        // is glibc's 112-byte bin.
        assert!(std::mem::size_of::<TraceNode>() <= 88, "{}", std::mem::size_of::<TraceNode>());
    }
}
