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

/// One step of a trace: who changed which object to which generation, and when; a node holds
/// it as a [`NodeHead`] and the name's bytes. Kept small: a parent's hop lives as long as its
/// children's traces (one node per parent generation that a child extends), so the optional
/// numbers use zero as "unknown" (a generation starts at 1, and an audit event is never from
/// the first µs of 1970).
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

/// What a trace node holds besides its object's name, which follows it in the same allocation
/// (one allocation per node, where a node and its name took two: DESIGN §2's memory per object).
#[derive(Debug, PartialEq, Eq)]
pub struct NodeHead {
    /// (apiVersion, kind).
    pub ty: Ty,
    /// `None` when unknown (a parent whose producing write was never seen).
    pub user: Option<Sym>,
    /// The object's generation after the write; `None` when unknown or the kind keeps none.
    pub generation: Option<NonZeroI64>,
    /// When the write happened, in µs since the epoch; `None` when unknown.
    pub timestamp: Option<NonZeroI64>,
    /// From the object's own `kausality.io/trace-<key>` annotations.
    pub labels: Option<Labels>,
    /// The older hops; `None` at the root (the original intent, or the [`cut`] node).
    pub prev: Option<Trace>,
}

/// A trace, newest hop at the head: a shared node (a hop and the trace it extends) with the
/// hop's name in the node's own allocation. One pointer wide; an `Arc` without a weak count.
#[derive(Clone, PartialEq, Eq)]
pub struct Trace(triomphe::ThinArc<NodeHead, u8>);

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("hop", &self.hop()).field("prev", &self.head().prev).finish()
    }
}

/// A hop as a node holds it, borrowed: see [`Hop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopRef<'a> {
    /// (apiVersion, kind).
    pub ty: Ty,
    /// The object's name.
    pub name: &'a str,
    /// The object's generation after the write.
    pub generation: Option<NonZeroI64>,
    /// Who wrote.
    pub user: Option<Sym>,
    /// When, in µs since the epoch.
    pub timestamp: Option<NonZeroI64>,
    /// The object's `kausality.io/trace-<key>` labels.
    pub labels: Option<&'a Labels>,
}

impl Hop {
    /// The hop, borrowed.
    pub fn as_ref(&self) -> HopRef<'_> {
        HopRef {
            ty: self.ty,
            name: &self.name,
            generation: self.generation,
            user: self.user,
            timestamp: self.timestamp,
            labels: self.labels.as_ref(),
        }
    }
}

impl Trace {
    /// The node of `hop` extending `prev`.
    pub fn new(hop: HopRef<'_>, prev: Option<Trace>) -> Trace {
        let head = NodeHead {
            ty: hop.ty,
            user: hop.user,
            generation: hop.generation,
            timestamp: hop.timestamp,
            labels: hop.labels.cloned(),
            prev,
        };
        Trace(triomphe::ThinArc::from_header_and_slice(head, hop.name.as_bytes()))
    }

    /// Everything but the name.
    pub fn head(&self) -> &NodeHead {
        &self.0.header.header
    }

    /// The hop's object's name.
    pub fn name(&self) -> &str {
        // Built from a `&str` only ([`Trace::new`]).
        std::str::from_utf8(&self.0.slice).unwrap_or_default()
    }

    /// The older hops.
    pub fn prev(&self) -> Option<&Trace> {
        self.head().prev.as_ref()
    }

    /// The newest hop.
    pub fn hop(&self) -> HopRef<'_> {
        let h = self.head();
        HopRef {
            ty: h.ty,
            name: self.name(),
            generation: h.generation,
            user: h.user,
            timestamp: h.timestamp,
            labels: h.labels.as_ref(),
        }
    }

    /// Changes the node in place, name aside, when nothing else holds it; false when shared.
    pub fn update_if_unique(&mut self, f: impl FnOnce(&mut NodeHead)) -> bool {
        self.0.with_arc_mut(|a| match triomphe::Arc::get_mut(a) {
            Some(node) => {
                f(node.header_mut());
                true
            }
            None => false,
        })
    }

    /// The node's address, as its identity.
    pub fn as_ptr(this: &Self) -> *const NodeHead {
        this.head()
    }

    /// The same node.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        std::ptr::eq(Self::as_ptr(a), Self::as_ptr(b))
    }
}

/// A hop's name as an output holds it: the node that holds it (no copy), or a name of its
/// own.
#[derive(Clone, Debug)]
pub enum HopName {
    /// The name the head node of this trace holds.
    Node(Trace),
    /// A name of its own (an event read back, a hop written by hand).
    Own(Name),
}

impl std::ops::Deref for HopName {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            HopName::Node(t) => t.name(),
            HopName::Own(n) => n,
        }
    }
}

impl From<&str> for HopName {
    fn from(s: &str) -> Self {
        HopName::Own(Name::from(s))
    }
}

impl From<Name> for HopName {
    fn from(n: Name) -> Self {
        HopName::Own(n)
    }
}

impl PartialEq for HopName {
    fn eq(&self, o: &Self) -> bool {
        **self == **o
    }
}

impl Eq for HopName {}

impl serde::Serialize for HopName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

/// A trace of one hop: a new causal origin.
pub fn origin(hop: Hop) -> Trace {
    Trace::new(hop.as_ref(), None)
}

/// `prev` followed by `hop`.
pub fn extend(prev: Trace, hop: Hop) -> Trace {
    Trace::new(hop.as_ref(), Some(prev))
}

/// The root of a trace whose oldest hops were cut: not a hop of any object. Recognised by its
/// content, which no real hop has (a hop without a user has no time either, except the not yet
/// built node of a named object), so that it survives a snapshot and restore.
static CUT: LazyLock<Trace> = LazyLock::new(|| {
    Trace::new(
        HopRef { ty: Ty::EMPTY, name: "", generation: None, user: None, timestamp: NonZeroI64::new(1), labels: None },
        None,
    )
});

/// The shared root of every cut trace.
pub fn cut() -> Trace {
    CUT.clone()
}

fn is_cut(n: &Trace) -> bool {
    let h = n.head();
    h.prev.is_none() && h.user.is_none() && n.name().is_empty() && h.timestamp == NonZeroI64::new(1)
}

/// The same object (a hop keeps no UID: within one trace, type and name tell objects apart,
/// since an owner is in the namespace of its child or cluster-scoped). An unnamed hop matches
/// nothing.
fn same_object(a: &Trace, b: HopRef<'_>) -> bool {
    a.head().ty == b.ty && !b.name.is_empty() && a.name() == b.name
}

/// `prev` as `hop` may extend it: without `hop`'s object (an ownership cycle: cut at the
/// repeat, the hops from it down to the root go) and with at most `max_hops - 1` hops (the
/// oldest go). `prev` itself, shared, when nothing is cut; else a copy of the hops kept on the
/// [`cut`] root (at most `max_hops` nodes per write, whose old copies are freed as they are
/// replaced: a cycle costs no memory per write).
pub fn bounded(prev: &Trace, hop: HopRef<'_>, max_hops: usize) -> Trace {
    let keep = max_hops.max(2) - 1;
    let mut kept: Vec<&Trace> = Vec::new();
    let mut cur = Some(prev);
    while let Some(n) = cur {
        if is_cut(n) {
            return prev.clone();
        }
        if same_object(n, hop) || kept.len() == keep {
            break;
        }
        kept.push(n);
        cur = n.prev();
    }
    if cur.is_none() {
        return prev.clone();
    }
    kept.iter().rev().fold(cut(), |t, n| Trace::new(n.hop(), Some(t)))
}

/// The nodes of the hops, root (the original intent) first, and whether older hops were cut.
pub fn hops(t: &Trace) -> (Vec<&Trace>, bool) {
    let mut v = Vec::with_capacity(4);
    let mut cur = Some(t);
    let mut truncated = false;
    while let Some(n) = cur {
        if is_cut(n) {
            truncated = true;
            break;
        }
        v.push(n);
        cur = n.prev();
    }
    v.reverse();
    (v, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_nodes_stay_small() {
        // One node per parent generation that a child extends: with the Arc's count and the
        // name's length, 56 bytes before the name's own, in one allocation.
        assert!(std::mem::size_of::<NodeHead>() <= 40, "{}", std::mem::size_of::<NodeHead>());
        assert_eq!(std::mem::size_of::<Option<Trace>>(), 8, "one pointer");
        let i = crate::intern::Interner::new();
        let h = hop(&i, "ReplicaSet", "web-6d4cf56db6");
        let t = origin(h.clone());
        assert_eq!((t.name(), t.hop()), ("web-6d4cf56db6", h.as_ref()));
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
        (hops.iter().map(|h| h.name().to_string()).collect(), truncated)
    }

    #[test]
    fn a_short_trace_without_the_object_is_extended_as_it_is() {
        let i = crate::intern::Interner::new();
        let t = extend(origin(hop(&i, "Deployment", "web")), hop(&i, "ReplicaSet", "web-1"));
        let b = bounded(&t, hop(&i, "Pod", "web-1-a").as_ref(), DEFAULT_MAX_HOPS);
        assert!(Trace::ptr_eq(&b, &t), "shared, not copied");
        assert_eq!(
            names(&extend(b, hop(&i, "Pod", "web-1-a"))),
            (vec!["web".into(), "web-1".into(), "web-1-a".into()], false)
        );
        // A hop of another kind with the same name, or an unnamed one, is another object.
        let t = origin(hop(&i, "Deployment", "x"));
        assert!(Trace::ptr_eq(&bounded(&t, hop(&i, "Pod", "x").as_ref(), 32), &t));
        let t = origin(hop(&i, "Pod", ""));
        assert!(Trace::ptr_eq(&bounded(&t, hop(&i, "Pod", "").as_ref(), 32), &t));
    }

    #[test]
    fn an_ownership_cycle_is_cut_at_the_repeat_and_does_not_grow() {
        let i = crate::intern::Interner::new();
        let (a, b, c) = (hop(&i, "Widget", "a"), hop(&i, "Widget", "b"), hop(&i, "Widget", "c"));
        // A → B → C → A: C's trace holds A; A extending it cuts A and everything before it.
        let t = extend(extend(origin(a.clone()), b.clone()), c.clone());
        let prev = bounded(&t, a.as_ref(), 32);
        assert_eq!(names(&prev), (vec!["b".into(), "c".into()], true));
        let mut trace = extend(prev, a.clone());
        assert_eq!(names(&trace), (vec!["b".into(), "c".into(), "a".into()], true));
        // Round after round the cycle stays three hops, one per object.
        for round in 0..100 {
            for h in [&b, &c, &a] {
                trace = extend(bounded(&trace, h.as_ref(), 32), h.clone());
                let (hops, truncated) = names(&trace);
                assert_eq!(hops.len(), 3, "round {round}: {hops:?}");
                assert!(truncated);
                assert_eq!(hops.last().map(String::as_str), Some(&*h.name));
            }
        }
        // An object that is its own parent's head: only the cut root is left before it.
        let own = origin(a.clone());
        assert_eq!(names(&extend(bounded(&own, a.as_ref(), 32), a.clone())), (vec!["a".into()], true));
    }

    #[test]
    fn a_deep_chain_keeps_its_newest_hops_up_to_the_bound() {
        let i = crate::intern::Interner::new();
        let mut t = origin(hop(&i, "Widget", "w0"));
        for k in 1..100 {
            let h = hop(&i, "Widget", &format!("w{k}"));
            t = extend(bounded(&t, h.as_ref(), 8), h);
            let (hops, truncated) = names(&t);
            assert_eq!(hops.len(), (k + 1).min(8));
            assert_eq!(truncated, k >= 8, "{k}");
            assert_eq!(hops.last().cloned(), Some(format!("w{k}")));
            assert_eq!(hops[0], format!("w{}", (k + 1).saturating_sub(8)), "the oldest went");
        }
        // Already within the bound: shared as it is.
        let within = bounded(&t, hop(&i, "Widget", "w-next").as_ref(), 9);
        assert!(Trace::ptr_eq(&within, &t));
        // The cut root is no hop, and reads as one after a snapshot (same content, another node).
        let copy = Trace::new(cut().hop(), None);
        assert!(is_cut(&copy) && !is_cut(&origin(hop(&i, "Widget", "w0"))));
    }
}
