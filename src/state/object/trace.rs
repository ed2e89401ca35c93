//! An object's trace and, for an object that keeps it, its name: three fields of the state.

use std::collections::HashSet;
use std::num::NonZeroI64;

use super::ObjectState;
use crate::state::{Marks, Sym};
use crate::trace::{HopRef, NodeHead, Trace};

/// `trace_time` of an own node that is not built yet: only the name and the producing write
/// are in it (an own node that is built keeps no time there).
const PENDING: [u32; 2] = [u32::MAX; 2];

/// The trace of an object's producing mutation (DESIGN §1.6), kept compactly: the trace that
/// write extended (its parent's, shared by all siblings) and who wrote it when. The object's own
/// trace node is only built when one of its children extends it, and then replaces them (the
/// node holds the same in its head hop): most objects are leaves and never need one. The
/// state keeps it in three fields ([`ObjectState::trace`]), 20 bytes with no tag.
#[derive(Clone, Debug, Default)]
pub enum TraceState {
    /// No producing write was seen.
    #[default]
    Unknown,
    /// The producing write.
    Write {
        /// The trace it extended; `None` for a new origin.
        prev: Option<Trace>,
        /// Who made it.
        user: Sym,
        /// When, in µs since the epoch; 0 when unknown.
        time_us: i64,
    },
    /// This object's own trace, built on its first use as a parent.
    Node(Trace),
}

impl TraceState {
    /// The producing write's (extended trace, user, time) as an own node not built yet keeps
    /// them: none of them for an unknown write or a built node.
    fn pending_parts(self) -> (Option<Trace>, Option<Sym>, Option<NonZeroI64>) {
        match self {
            TraceState::Write { prev, user, time_us } => {
                (prev, Some(user).filter(|u| !u.is_empty()), NonZeroI64::new(time_us))
            }
            TraceState::Unknown | TraceState::Node(_) => (None, None, None),
        }
    }

    /// Kept from its parts (a restore): unknown when all three are.
    pub fn of_parts(prev: Option<Trace>, user: Sym, time_us: i64) -> Self {
        if prev.is_none() && user.is_empty() && time_us == 0 {
            return TraceState::Unknown;
        }
        TraceState::Write { prev, user, time_us }
    }
}

impl ObjectState {
    /// Marks every string and type the state refers to, for a sweep of the interner: its
    /// key's cluster, type, namespace, updaters, owner's type, its origin writes' users and
    /// types, and its trace's (each trace node
    /// once: `seen` holds those marked already, shared prefixes are walked once).
    pub fn mark(&self, m: &mut Marks, seen: &mut HashSet<*const NodeHead>) {
        m.sym(self.key.cluster);
        m.ty(self.ty);
        m.sym(self.namespace);
        for &u in self.updaters().as_slice().iter().chain(self.status_updaters().as_slice()) {
            m.sym(u);
        }
        if let Some(o) = &self.owner {
            m.ty(o.ty);
        }
        self.mark_origins(m);
        if let Some(u) = self.trace_user {
            m.sym(u);
        }
        let mut cur = self.trace_ptr.as_ref();
        while let Some(n) = cur {
            if !seen.insert(Trace::as_ptr(n)) {
                break;
            }
            m.ty(n.head().ty);
            if let Some(u) = n.head().user {
                m.sym(u);
            }
            cur = n.prev();
        }
    }

    /// How the current generation came about.
    pub fn trace(&self) -> TraceState {
        match (&self.trace_ptr, self.trace_user) {
            (prev, Some(user)) => TraceState::Write { prev: prev.clone(), user, time_us: self.trace_time_us() },
            (Some(_), None) if self.trace_time == PENDING => {
                let (prev, user, time_us) = self.trace_parts();
                TraceState::of_parts(prev.cloned(), user, time_us)
            }
            (Some(node), None) => TraceState::Node(node.clone()),
            (None, None) => TraceState::Unknown,
        }
    }

    /// The name, when the object keeps it (see `trace_ptr`).
    pub fn name(&self) -> Option<&str> {
        match (&self.trace_ptr, self.trace_user) {
            (Some(node), None) if !node.name().is_empty() => Some(node.name()),
            _ => None,
        }
    }

    /// Keeps `name` (an empty one is no name). The trace stays as it was; an own node already
    /// built is copied with the new name, so children that extended the old one keep it.
    pub fn set_name(&mut self, name: &str) {
        if name.is_empty() || self.name() == Some(name) {
            return;
        }
        match (&self.trace_ptr, self.trace_user) {
            (Some(node), None) => {
                let renamed = Trace::new(HopRef { name, ..node.hop() }, node.prev().cloned());
                self.trace_ptr = Some(renamed);
            }
            _ => self.pending(name, self.trace()),
        }
    }

    /// Keeps `name` and `trace` (a producing write, or none) in an own node not built yet.
    fn pending(&mut self, name: &str, trace: TraceState) {
        let (prev, user, timestamp) = trace.pending_parts();
        let hop = HopRef { ty: self.ty, name, generation: None, user, timestamp, labels: None };
        (self.trace_ptr, self.trace_user, self.trace_time) = (Some(Trace::new(hop, prev)), None, PENDING);
    }

    /// [`ObjectState::pending`] with the name the state keeps in its own node. A node not
    /// built yet is this state's alone (nothing extends it): changed in place when nothing
    /// else holds it at the moment.
    fn pending_again(&mut self, trace: TraceState) {
        let Some(node) = self.trace_ptr.as_mut() else { return };
        let (prev, user, timestamp) = trace.pending_parts();
        let mut prev = Some(prev);
        if self.trace_time == PENDING
            && node.update_if_unique(|h| {
                (h.generation, h.user, h.timestamp, h.labels, h.prev) =
                    (None, user, timestamp, None, prev.take().flatten())
            })
        {
            return;
        }
        let hop = HopRef { ty: self.ty, generation: None, user, timestamp, labels: None, ..node.hop() };
        *node = Trace::new(hop, prev.flatten());
        self.trace_time = PENDING;
    }

    /// The producing write's (extended trace, user, time in µs) whichever way it is kept;
    /// `(None, Sym::EMPTY, 0)` when unknown.
    pub fn trace_parts(&self) -> (Option<&Trace>, Sym, i64) {
        match (&self.trace_ptr, self.trace_user) {
            (prev, Some(user)) => (prev.as_ref(), user, self.trace_time_us()),
            (Some(n), None) => {
                (n.prev(), n.head().user.unwrap_or(Sym::EMPTY), n.head().timestamp.map_or(0, |t| t.get()))
            }
            (None, None) => (None, Sym::EMPTY, 0),
        }
    }

    fn trace_time_us(&self) -> i64 {
        let [lo, hi] = self.trace_time;
        ((hi as u64) << 32 | lo as u64) as i64
    }

    /// Sets how the current generation came about; a kept name stays (a producing write then
    /// waits in an own node not built yet).
    pub fn set_trace(&mut self, trace: TraceState) {
        if let (Some(_), TraceState::Write { .. } | TraceState::Unknown) = (self.name(), &trace) {
            self.pending_again(trace);
            return;
        }
        (self.trace_ptr, self.trace_user, self.trace_time) = match trace {
            TraceState::Unknown => (None, None, [0; 2]),
            TraceState::Write { prev, user, time_us } => {
                (prev, Some(user), [time_us as u32, (time_us as u64 >> 32) as u32])
            }
            TraceState::Node(node) => (Some(node), None, [0; 2]),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Ty;
    use crate::write::Name;

    #[test]
    fn a_trace_kept_in_three_fields_comes_back_as_it_was_set() {
        use crate::trace::{origin, Hop};
        let i = crate::state::Interner::new();
        let (u, v) = (i.intern("u"), i.intern("v"));
        let hop = |user| Hop {
            ty: Ty::EMPTY,
            name: Name::from("p"),
            generation: None,
            user: Some(user),
            timestamp: None,
            labels: None,
        };
        let node = origin(hop(v));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert!(matches!(s.trace(), TraceState::Unknown));
        assert_eq!(s.trace_parts(), (None, Sym::EMPTY, 0));
        for time_us in [0, 1, -1, 1_700_000_000_123_456, i64::MAX, i64::MIN] {
            for (prev, user) in [(None, u), (Some(node.clone()), Sym::EMPTY)] {
                s.set_trace(TraceState::Write { prev: prev.clone(), user, time_us });
                match s.trace() {
                    TraceState::Write { prev: p, user: got, time_us: t } => {
                        assert_eq!(
                            (p.as_ref().map(Trace::as_ptr), got, t),
                            (prev.as_ref().map(Trace::as_ptr), user, time_us)
                        )
                    }
                    other => panic!("a write came back as {other:?}"),
                }
                assert_eq!(s.trace_parts(), (prev.as_ref(), user, time_us));
            }
        }
        s.set_trace(TraceState::Node(node.clone()));
        assert!(matches!(s.trace(), TraceState::Node(n) if Trace::ptr_eq(&n, &node)));
        assert_eq!(s.trace_parts(), (None, v, 0), "a node's parts are its head hop's");
        s.set_trace(TraceState::Unknown);
        assert!(matches!(s.trace(), TraceState::Unknown));
    }

    #[test]
    fn a_kept_name_lives_in_the_own_node_and_leaves_the_trace_as_it_was() {
        use crate::trace::{extend, origin, Hop};
        let i = crate::state::Interner::new();
        let (u, v) = (i.intern("u"), i.intern("v"));
        let hop = |name: &str, user| Hop {
            ty: Ty::EMPTY,
            name: Name::from(name),
            generation: None,
            user: Some(user),
            timestamp: None,
            labels: None,
        };
        let parent = origin(hop("parent", v));
        let write = |s: &ObjectState| match s.trace() {
            TraceState::Write { prev, user, time_us } => (prev.map(|p| Trace::as_ptr(&p)), user, time_us),
            other => panic!("expected a write, got {other:?}"),
        };

        // A leaf keeps no name, and an empty name is none.
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_name("");
        assert_eq!(s.name(), None);
        s.set_trace(TraceState::Write { prev: Some(parent.clone()), user: u, time_us: 7 });
        assert_eq!(s.name(), None);
        assert_eq!(write(&s), (Some(Trace::as_ptr(&parent)), u, 7));

        // Named after its producing write: the write comes back unchanged.
        s.set_name("rs");
        assert_eq!(s.name(), Some("rs"));
        assert_eq!(write(&s), (Some(Trace::as_ptr(&parent)), u, 7));
        assert_eq!(s.trace_parts(), (Some(&parent), u, 7));

        // Every producing write keeps the name, whatever its parts.
        for time_us in [0, 1, -1, i64::MAX, i64::MIN] {
            for (prev, user) in [(None, u), (Some(parent.clone()), Sym::EMPTY), (Some(parent.clone()), v)] {
                s.set_trace(TraceState::Write { prev: prev.clone(), user, time_us });
                assert_eq!(s.name(), Some("rs"));
                if prev.is_none() && user.is_empty() && time_us == 0 {
                    assert!(matches!(s.trace(), TraceState::Unknown));
                } else {
                    assert_eq!(write(&s), (prev.as_ref().map(Trace::as_ptr), user, time_us));
                }
                assert_eq!(s.trace_parts(), (prev.as_ref(), user, time_us));
            }
        }

        // No producing write: unknown, the name kept.
        s.set_trace(TraceState::Unknown);
        assert!(matches!(s.trace(), TraceState::Unknown));
        assert_eq!(s.name(), Some("rs"));
        let mut unknown = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        unknown.set_name("deploy");
        assert!(matches!(unknown.trace(), TraceState::Unknown));
        assert_eq!(unknown.trace_parts(), (None, Sym::EMPTY, 0));
        assert_eq!(unknown.name(), Some("deploy"));

        // The node built on first use as a parent is the trace, and holds the name.
        s.set_trace(TraceState::Write { prev: Some(parent.clone()), user: u, time_us: 9 });
        let own = extend(parent.clone(), hop("rs", u));
        s.set_trace(TraceState::Node(own.clone()));
        assert!(matches!(s.trace(), TraceState::Node(n) if Trace::ptr_eq(&n, &own)));
        assert_eq!(s.name(), Some("rs"));

        // A new name: a child that extended the built node keeps it as it was; the state's
        // node is a copy with the new name and the same hop otherwise.
        let child = extend(own.clone(), hop("pod", u));
        s.set_name("rs-renamed");
        assert_eq!(s.name(), Some("rs-renamed"));
        assert_eq!(child.prev().unwrap().name(), "rs");
        match s.trace() {
            TraceState::Node(n) => {
                assert!(!Trace::ptr_eq(&n, &own));
                assert_eq!((n.head().user, n.prev().map(Trace::as_ptr)), (Some(u), Some(Trace::as_ptr(&parent))));
            }
            other => panic!("expected the node, got {other:?}"),
        }

        // The next producing write replaces the built node (still the children's) and keeps the name.
        s.set_trace(TraceState::Write { prev: None, user: v, time_us: 11 });
        assert_eq!(write(&s), (None, v, 11));
        assert_eq!(s.name(), Some("rs-renamed"));
        assert_eq!(child.prev().unwrap().name(), "rs");
    }
}
