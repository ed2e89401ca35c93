//! Causal traces (DESIGN §1.6): the chain of hops from a human or tool's intent to an object.
//! Stored as a shared linked list, so the many children of one parent share its prefix.
//!
//! A trace is bounded: an object never appears twice in it (an ownership cycle, A owns B owns
//! A, would otherwise add a hop at every write), and it has at most a configured number of
//! hops. What is cut is its oldest part, and the trace then starts at the shared [`cut`] node,
//! which the output shows as `traceTruncated` instead of as a hop.

use std::num::NonZeroI64;
use std::sync::{Arc, LazyLock};

use crate::intern::{Name, Sym, Ty};

/// Most hops in a trace unless configured (`options.max_trace_hops`): real trees are two to
/// five deep (Deployment → ReplicaSet → Pod; a Crossplane claim → XR → composed resources).
pub const DEFAULT_MAX_HOPS: usize = 32;

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
    /// The object's name.
    pub name: Name,
    /// The object's generation after the write; `None` when unknown or the kind keeps none.
    pub generation: Option<NonZeroI64>,
    /// `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Sym>,
    /// When the write happened, in µs since the epoch; `None` when unknown. The write being
    /// judged is written out with its stageTimestamp as the API server wrote it instead.
    pub timestamp: Option<NonZeroI64>,
    /// From the object's own `kausality.io/trace-<key>` annotations.
    pub labels: Option<Labels>,
}

/// One node of a trace's linked list: a hop and the trace it extends.
#[derive(Debug, PartialEq, Eq)]
pub struct TraceNode {
    /// The newest hop.
    pub hop: Hop,
    /// The older hops; `None` at the root (the original intent, or the [`cut`] node).
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

/// The root of a trace whose oldest hops were cut: not a hop of any object. Recognised by its
/// content, which no real hop has (a hop without a user has no time either, except the not yet
/// built node of a named object), so that it survives a snapshot and restore.
static CUT: LazyLock<Trace> = LazyLock::new(|| {
    Trace::new(TraceNode {
        hop: Hop {
            ty: Ty::EMPTY,
            name: Name::new(),
            generation: None,
            user: None,
            timestamp: NonZeroI64::new(1),
            labels: None,
        },
        prev: None,
    })
});

/// The shared root of every cut trace.
pub fn cut() -> Trace {
    CUT.clone()
}

fn is_cut(n: &TraceNode) -> bool {
    n.prev.is_none() && n.hop.user.is_none() && n.hop.name.is_empty() && n.hop.timestamp == NonZeroI64::new(1)
}

/// The same object (a hop keeps no UID: within one trace, type and name tell objects apart,
/// since an owner is in the namespace of its child or cluster-scoped). An unnamed hop matches
/// nothing.
fn same_object(a: &Hop, b: &Hop) -> bool {
    a.ty == b.ty && !a.name.is_empty() && a.name == b.name
}

/// `prev` as `hop` may extend it: without `hop`'s object (an ownership cycle: cut at the
/// repeat, the hops from it down to the root go) and with at most `max_hops - 1` hops (the
/// oldest go). `prev` itself, shared, when nothing is cut; else a copy of the hops kept on the
/// [`cut`] root (at most `max_hops` nodes per write, whose old copies are freed as they are
/// replaced: a cycle costs no memory per write).
pub fn bounded(prev: &Trace, hop: &Hop, max_hops: usize) -> Trace {
    let keep = max_hops.max(2) - 1;
    let mut kept: Vec<&TraceNode> = Vec::new();
    let mut cur = Some(prev);
    while let Some(n) = cur {
        if is_cut(n) {
            return prev.clone();
        }
        if same_object(&n.hop, hop) || kept.len() == keep {
            break;
        }
        kept.push(n);
        cur = n.prev.as_ref();
    }
    if cur.is_none() {
        return prev.clone();
    }
    kept.iter().rev().fold(cut(), |t, n| extend(t, n.hop.clone()))
}

/// The hops, root (the original intent) first, and whether older hops were cut.
pub fn hops(t: &Trace) -> (Vec<&Hop>, bool) {
    let mut v = Vec::with_capacity(4);
    let mut cur = Some(t);
    let mut truncated = false;
    while let Some(n) = cur {
        if is_cut(n) {
            truncated = true;
            break;
        }
        v.push(&n.hop);
        cur = n.prev.as_ref();
    }
    v.reverse();
    (v, truncated)
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

    fn hop(i: &crate::intern::Interner, kind: &str, name: &str) -> Hop {
        let ty = i.ty(i.intern("v1"), i.intern(kind));
        Hop {
            ty,
            name: Name::from(name),
            generation: None,
            user: Some(i.intern("u")),
            timestamp: NonZeroI64::new(7),
            labels: None,
        }
    }

    fn names(t: &Trace) -> (Vec<String>, bool) {
        let (hops, truncated) = hops(t);
        (hops.iter().map(|h| h.name.to_string()).collect(), truncated)
    }

    #[test]
    fn a_short_trace_without_the_object_is_extended_as_it_is() {
        let i = crate::intern::Interner::new();
        let t = extend(origin(hop(&i, "Deployment", "web")), hop(&i, "ReplicaSet", "web-1"));
        let b = bounded(&t, &hop(&i, "Pod", "web-1-a"), DEFAULT_MAX_HOPS);
        assert!(Trace::ptr_eq(&b, &t), "shared, not copied");
        assert_eq!(
            names(&extend(b, hop(&i, "Pod", "web-1-a"))),
            (vec!["web".into(), "web-1".into(), "web-1-a".into()], false)
        );
        // A hop of another kind with the same name, or an unnamed one, is another object.
        let t = origin(hop(&i, "Deployment", "x"));
        assert!(Trace::ptr_eq(&bounded(&t, &hop(&i, "Pod", "x"), 32), &t));
        let t = origin(hop(&i, "Pod", ""));
        assert!(Trace::ptr_eq(&bounded(&t, &hop(&i, "Pod", ""), 32), &t));
    }

    #[test]
    fn an_ownership_cycle_is_cut_at_the_repeat_and_does_not_grow() {
        let i = crate::intern::Interner::new();
        let (a, b, c) = (hop(&i, "Widget", "a"), hop(&i, "Widget", "b"), hop(&i, "Widget", "c"));
        // A → B → C → A: C's trace holds A; A extending it cuts A and everything before it.
        let t = extend(extend(origin(a.clone()), b.clone()), c.clone());
        let prev = bounded(&t, &a, 32);
        assert_eq!(names(&prev), (vec!["b".into(), "c".into()], true));
        let mut trace = extend(prev, a.clone());
        assert_eq!(names(&trace), (vec!["b".into(), "c".into(), "a".into()], true));
        // Round after round the cycle stays three hops, one per object.
        for round in 0..100 {
            for h in [&b, &c, &a] {
                trace = extend(bounded(&trace, h, 32), h.clone());
                let (hops, truncated) = names(&trace);
                assert_eq!(hops.len(), 3, "round {round}: {hops:?}");
                assert!(truncated);
                assert_eq!(hops.last().map(String::as_str), Some(&*h.name));
            }
        }
        // An object that is its own parent's head: only the cut root is left before it.
        let own = origin(a.clone());
        assert_eq!(names(&extend(bounded(&own, &a, 32), a.clone())), (vec!["a".into()], true));
    }

    #[test]
    fn a_deep_chain_keeps_its_newest_hops_up_to_the_bound() {
        let i = crate::intern::Interner::new();
        let mut t = origin(hop(&i, "Widget", "w0"));
        for k in 1..100 {
            let h = hop(&i, "Widget", &format!("w{k}"));
            t = extend(bounded(&t, &h, 8), h);
            let (hops, truncated) = names(&t);
            assert_eq!(hops.len(), (k + 1).min(8));
            assert_eq!(truncated, k >= 8, "{k}");
            assert_eq!(hops.last().cloned(), Some(format!("w{k}")));
            assert_eq!(hops[0], format!("w{}", (k + 1).saturating_sub(8)), "the oldest went");
        }
        // Already within the bound: shared as it is.
        let within = bounded(&t, &hop(&i, "Widget", "w-next"), 9);
        assert!(Trace::ptr_eq(&within, &t));
        // The cut root is no hop, and reads as one after a snapshot (same content, another node).
        let copy = Trace::new(TraceNode { hop: cut().hop.clone(), prev: None });
        assert!(is_cut(&copy) && !is_cut(&origin(hop(&i, "Widget", "w0"))));
    }
}
