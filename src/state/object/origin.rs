//! Origin writes an object keeps until its controller undoes them (DESIGN §1.8): writes by
//! someone other than the controller to this object (a person's scale, an edit), and, on a
//! parent, removals of its children by someone other than the controller (a deleted or
//! evicted pod) waiting for their replacement. Kept in the rare box of the few objects that
//! had such writes; every list is bounded. Beside them, which platform-policy label selectors
//! matched the object (DESIGN §1.7).

use std::sync::Arc;

use super::ObjectState;
use crate::filter::Verb;
use crate::state::{Marks, Sym, Ty};
use crate::write::Name;

/// Most origin writes a child keeps (the latest; the oldest falls out).
pub const MAX_ORIGIN_WRITES: usize = 4;
/// Most removed children a parent keeps waiting for their replacement (oldest falls out).
pub const MAX_REMOVED: usize = 32;

/// One leaf field an origin write changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    /// Dotted path, arrays by index (`spec.template.spec.containers[0].image`).
    pub path: Box<str>,
    /// The value before the write, as JSON text; `None`: the field was absent.
    pub before: Option<Box<str>>,
    /// The value the write set, as JSON text; `None`: it removed the field.
    pub after: Option<Box<str>>,
}

/// A write by someone other than the controller, kept until the controller undoes it or it is
/// older than the horizon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginWrite {
    /// Who wrote (the effective user).
    pub user: Sym,
    /// The write's auditID.
    pub audit_id: Arc<str>,
    /// As the API server wrote it.
    pub stage_timestamp: Arc<str>,
    /// Event time in µs since the epoch, for the horizon.
    pub time_us: i64,
    /// The write's verb.
    pub verb: Verb,
    /// The object it touched: the child itself, or the removed sibling.
    pub ty: Ty,
    /// That object's name.
    pub name: Name,
    /// The leaf fields it changed; `None` when the content before the write was not known
    /// (not in the cache of recent contents), and for removals.
    pub fields: Option<Box<[FieldChange]>>,
    /// The user whose write this one put back (DESIGN §1.8): when that user puts it back in
    /// turn, the two are fighting over the fields.
    pub reverted: Option<Sym>,
    /// A removed pod's node, when its removal showed it: a DaemonSet's replacement is the pod
    /// its controller creates on that node (DESIGN §1.8). `None` for other writes.
    pub node: Option<Name>,
}

/// The origin writes of one object; boxed in the rare part only while one list is non-empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Origins {
    /// Writes to this object by others than its controller, oldest first.
    pub(super) writes: Vec<OriginWrite>,
    /// Children of this object removed by others than its controller, oldest first.
    pub(super) removed: Vec<OriginWrite>,
}

impl Origins {
    pub(super) fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.removed.is_empty()
    }
}

fn push_bounded(list: &mut Vec<OriginWrite>, w: OriginWrite, max: usize) {
    if list.len() >= max {
        list.remove(0);
    }
    list.push(w);
}

impl ObjectState {
    /// Writes to this object by others than its controller, oldest first.
    pub fn origin_writes(&self) -> &[OriginWrite] {
        self.rare.as_ref().and_then(|r| r.ext.as_deref()).map_or(&[], |e| &e.origins.writes)
    }

    /// Children removed by others than the controller, waiting for a replacement, oldest first.
    pub fn removed_children(&self) -> &[OriginWrite] {
        self.rare.as_ref().and_then(|r| r.ext.as_deref()).map_or(&[], |e| &e.origins.removed)
    }

    /// Records a write by someone other than the controller (the oldest falls out past
    /// [`MAX_ORIGIN_WRITES`]).
    pub fn push_origin_write(&mut self, w: OriginWrite) {
        push_bounded(&mut self.origins_mut().writes, w, MAX_ORIGIN_WRITES);
    }

    /// Records the removal of a child by someone other than the controller (the oldest falls
    /// out past [`MAX_REMOVED`]).
    pub fn push_removed_child(&mut self, w: OriginWrite) {
        push_bounded(&mut self.origins_mut().removed, w, MAX_REMOVED);
    }

    /// Replaces the origin writes (what a controller's write left of them).
    pub fn set_origin_writes(&mut self, writes: Vec<OriginWrite>) {
        if writes.is_empty() && self.origin_writes().is_empty() {
            return;
        }
        self.origins_mut().writes = writes;
        self.drop_empty_origins();
    }

    /// Takes the removed child that a replacement named `name` replaces, at or after `since_us`
    /// (older ones are dropped): by name first, where the controller reuses names (a
    /// StatefulSet's ordinal: the latest removal of that name), else the oldest (DESIGN §1.8).
    /// A replacement tied to a `node` (a DaemonSet's pod: the controller reuses the node as a
    /// StatefulSet reuses the ordinal) takes the latest removal on that node, else the oldest
    /// whose node is not known (an eviction, answered without the pod), else none: a pod on a
    /// node whose pod nobody removed replaces nobody, and a removal on a node gone or tainted
    /// is never taken for what a pod on another node puts back.
    pub fn take_removed_child(&mut self, since_us: i64, name: &str, node: Option<&str>) -> Option<OriginWrite> {
        if self.removed_children().is_empty() {
            return None;
        }
        let removed = &mut self.origins_mut().removed;
        removed.retain(|r| r.time_us >= since_us);
        let at = match node {
            Some(node) => removed
                .iter()
                .rposition(|r| r.node.as_deref() == Some(node))
                .or_else(|| removed.iter().position(|r| r.node.is_none())),
            None => removed.iter().rposition(|r| *r.name == *name).or((!removed.is_empty()).then_some(0)),
        };
        let taken = at.map(|i| removed.remove(i));
        self.drop_empty_origins();
        taken
    }

    /// Marks the users and types of the origin writes, for a sweep of the interner.
    pub(super) fn mark_origins(&self, m: &mut Marks) {
        for w in self.origin_writes().iter().chain(self.removed_children()) {
            m.sym(w.user);
            m.ty(w.ty);
            if let Some(u) = w.reverted {
                m.sym(u);
            }
        }
    }

    /// Which platform-policy label selectors matched the object's labels at its latest write
    /// (DESIGN §1.7), one bit each; 0 for most objects.
    pub fn selector_bits(&self) -> u64 {
        self.rare.as_ref().and_then(|r| r.ext.as_deref()).map_or(0, |e| e.selectors)
    }

    /// Keeps which policy selectors the labels matched at this write, one bit each.
    pub fn set_selector_bits(&mut self, bits: u64) {
        if bits == self.selector_bits() {
            return;
        }
        self.rare_mut().ext_mut().selectors = bits;
        self.drop_empty_origins();
    }

    fn origins_mut(&mut self) -> &mut Origins {
        &mut self.rare_mut().ext_mut().origins
    }

    /// Frees the rarest parts once they hold nothing, and the rare box once it holds nothing.
    pub(super) fn drop_empty_origins(&mut self) {
        let Some(rare) = self.rare.as_mut() else { return };
        if rare.ext.as_deref().is_some_and(|e| e.origins.is_empty() && e.selectors == 0) {
            triomphe::Arc::make_mut(rare).drop_empty_ext();
        }
        if self.rare.as_deref().is_some_and(|r| r.is_empty()) {
            self.rare = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(user: Sym, time_us: i64) -> OriginWrite {
        OriginWrite {
            user,
            audit_id: Arc::from(format!("a{time_us}")),
            stage_timestamp: Arc::from(""),
            time_us,
            verb: Verb::Delete,
            ty: Ty::EMPTY,
            name: Name::from("p"),
            fields: None,
            reverted: None,
            node: None,
        }
    }

    #[test]
    fn lists_are_bounded_taken_in_order_and_freed_when_empty() {
        let i = crate::state::Interner::new();
        let a = i.intern("a");
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        for t in 0..(MAX_ORIGIN_WRITES as i64 + 2) {
            s.push_origin_write(write(a, t));
        }
        assert_eq!(s.origin_writes().len(), MAX_ORIGIN_WRITES);
        assert_eq!(s.origin_writes()[0].time_us, 2, "the oldest fell out");
        for t in 0..(MAX_REMOVED as i64 + 1) {
            s.push_removed_child(write(a, t));
        }
        assert_eq!(s.removed_children().len(), MAX_REMOVED);
        assert_eq!(
            s.take_removed_child(10, "", None).map(|w| w.time_us),
            Some(10),
            "older than the horizon dropped, then the oldest"
        );
        assert_eq!(s.removed_children().len(), MAX_REMOVED - 10);
        s.set_origin_writes(Vec::new());
        assert!(s.origin_writes().is_empty());
        while s.take_removed_child(0, "", None).is_some() {}
        assert!(s.rare.is_none(), "nothing else was rare: the box is gone");
        assert_eq!(s.take_removed_child(0, "", None), None);
    }

    #[test]
    fn a_replacement_takes_the_removal_of_its_name_first_else_the_oldest() {
        let named = |name: &str, t: i64| OriginWrite { name: Name::from(name), ..write(Sym::EMPTY, t) };
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        for (name, t) in [("db-1", 1), ("db-0", 2), ("db-0", 3), ("web-x", 4)] {
            s.push_removed_child(named(name, t));
        }
        assert_eq!(s.take_removed_child(0, "db-0", None).map(|w| w.time_us), Some(3), "the latest removal of its name");
        assert_eq!(
            s.take_removed_child(0, "web-y", None).map(|w| w.time_us),
            Some(1),
            "no removal of its name: the oldest"
        );
        assert_eq!(s.take_removed_child(0, "db-1", None).map(|w| w.time_us), Some(2), "its name gone: the oldest");
    }

    #[test]
    fn a_replacement_on_a_node_takes_the_removal_on_that_node_else_one_of_no_known_node() {
        let on = |node: Option<&str>, t: i64| OriginWrite {
            name: Name::from(format!("agent-{t}")),
            node: node.map(Name::from),
            ..write(Sym::EMPTY, t)
        };
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        // n3's pod deleted with its node (never replaced), then n1's twice, n2's, and an
        // eviction answered without the pod.
        for (node, t) in [(Some("n3"), 1), (Some("n1"), 2), (Some("n1"), 3), (Some("n2"), 4), (None, 5)] {
            s.push_removed_child(on(node, t));
        }
        let take = |s: &mut ObjectState, node| s.take_removed_child(0, "agent-new", Some(node)).map(|w| w.time_us);
        assert_eq!(take(&mut s, "n2"), Some(4), "the removal on its node, not the oldest");
        assert_eq!(take(&mut s, "n1"), Some(3), "the latest removal on its node");
        assert_eq!(take(&mut s, "n4"), Some(5), "none on its node: the one whose node is not known");
        assert_eq!(take(&mut s, "n4"), None, "a pod on a node whose pod nobody removed replaces nobody");
        assert_eq!(s.removed_children().len(), 2, "n3's and n1's older removal stay");
        assert_eq!(
            s.take_removed_child(0, "web-x", None).map(|w| w.time_us),
            Some(1),
            "a pod tied to no node: the oldest"
        );
    }

    #[test]
    fn a_sweep_of_the_interner_keeps_what_origin_writes_name() {
        let i = crate::state::Interner::new();
        let (user, gone) = (i.intern("only-in-an-origin-write"), i.intern("nowhere"));
        let ty = i.ty(i.intern("v1"), i.intern("OnlyHere"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.push_removed_child(OriginWrite { ty, ..write(user, 1) });
        let mut t = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        t.push_origin_write(write(user, 2));
        // Two sweeps: a string looked up lately outlives the first.
        let mut freed = Vec::new();
        for _ in 0..2 {
            let mut m = i.marks();
            s.mark(&mut m, &mut std::collections::HashSet::new());
            t.mark(&mut m, &mut std::collections::HashSet::new());
            let swept = i.sweep(m);
            freed.push((swept.freed_sym(user), swept.freed_ty(ty), swept.freed_sym(gone)));
            i.release(swept);
        }
        assert_eq!(
            freed,
            [(false, false, false), (false, false, true)],
            "the origin write's user and type stay; an unnamed string goes"
        );
        assert_eq!(&*i.resolve(user), "only-in-an-origin-write");
    }

    #[test]
    fn selector_bits_live_in_the_box_only_while_set() {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert_eq!(s.selector_bits(), 0);
        s.set_selector_bits(0b101);
        assert_eq!(s.selector_bits(), 0b101);
        s.push_removed_child(write(Sym::EMPTY, 1));
        s.set_selector_bits(0);
        assert_eq!((s.selector_bits(), s.removed_children().len()), (0, 1), "the other rare parts stay");
        assert!(s.take_removed_child(0, "", None).is_some());
        assert!(s.rare.is_none());
    }

    #[test]
    fn a_shared_policy_box_is_copied_not_changed() {
        let i = crate::state::Interner::new();
        let entries = vec![(Box::from("kausality.io/trace-team"), Box::from("red"))];
        let team = crate::state::SharedPolicy::new(Arc::new(crate::state::policy::Policy::parse(
            &crate::write::Annotations { entries, hash: 1 },
        )));
        let (mut s, t) = (ObjectState::new(Ty::EMPTY, Sym::EMPTY), ObjectState::new(Ty::EMPTY, Sym::EMPTY));
        let mut t = t;
        s.set_policy(Some(team.clone()));
        t.set_policy(Some(team.clone()));
        s.push_removed_child(write(i.intern("a"), 1));
        assert_eq!((s.removed_children().len(), t.removed_children().len()), (1, 0));
        assert!(s.take_removed_child(0, "", None).is_some());
        assert!(s.policy().is_some(), "the policy stays when the lists are freed");
    }
}
