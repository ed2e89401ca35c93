//! What few objects need: updater sets past one user, used-up approvals, wide generations,
//! origin writes waiting to be reverted, which platform-policy selectors matched, and the
//! policy, in one box shared by the objects whose box would hold the same policy and nothing
//! else.

use std::sync::Arc;

use super::origin::Origins;
use super::ObjectState;
use crate::state::policy::Policy;
use crate::state::Sym;

/// How many distinct users the updater sets keep (DESIGN §1.2).
pub const MAX_RECENT: usize = 5;

/// The most recent distinct users, newest first, at most [`MAX_RECENT`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    users: [Sym; MAX_RECENT],
    len: u8,
}

impl Recent {
    /// Records `user` as the most recent; an old entry of the same user moves to the front and
    /// the oldest falls out when full.
    pub fn push(&mut self, user: Sym) {
        let len = self.len as usize;
        let pos = self.users[..len].iter().position(|&u| u == user);
        let end = match pos {
            Some(p) => p,
            None if len < MAX_RECENT => {
                self.len += 1;
                len
            }
            None => MAX_RECENT - 1,
        };
        self.users.copy_within(0..end, 1);
        self.users[0] = user;
    }

    /// Whether `user` is in the set.
    pub fn contains(&self, user: Sym) -> bool {
        self.as_slice().contains(&user)
    }

    /// The users, newest first.
    pub fn as_slice(&self) -> &[Sym] {
        &self.users[..self.len as usize]
    }

    /// How many users the set holds (at most [`MAX_RECENT`]).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the set holds nobody.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A set of at most one user.
    fn of(user: Option<Sym>) -> Recent {
        let mut r = Recent::default();
        if let Some(u) = user {
            r.push(u);
        }
        r
    }
}

/// The parts of an object's state that most objects never need.
#[derive(Clone, Debug, Default)]
pub(super) struct Rare {
    /// Users who changed this object's spec, created or deleted it (once either set holds more
    /// than one; both empty before).
    updaters: Recent,
    /// Users who wrote this object's status (likewise).
    status_updaters: Recent,
    /// `once` approvals already used up, by content hash, oldest first. A boxed slice, not a
    /// `Vec` (8 bytes less; it is replaced on each rare use-up).
    consumed_approvals: Box<[u64]>,
    /// The parts rare even among these objects (wide generations, origin writes, matched
    /// selectors). Boxed again: inline they would take the box from glibc's 96-byte bin to a
    /// larger one.
    pub(super) ext: Option<Box<Ext>>,
    /// Parsed `kausality.io/` annotations, shared by objects with the same ones; `None` for
    /// the many objects without any.
    policy: Option<Arc<Policy>>,
}

impl Rare {
    /// Holds a policy and nothing else (or nothing at all).
    fn only_policy(&self) -> bool {
        self.updaters.is_empty()
            && self.status_updaters.is_empty()
            && self.consumed_approvals.is_empty()
            && self.ext.is_none()
    }

    /// Holds nothing at all: the state can drop it.
    pub(super) fn is_empty(&self) -> bool {
        self.only_policy() && self.policy.is_none()
    }

    /// The rarest parts, made on first use.
    pub(super) fn ext_mut(&mut self) -> &mut Ext {
        self.ext.get_or_insert_with(Box::default)
    }

    /// Drops the rarest parts once they hold nothing.
    pub(super) fn drop_empty_ext(&mut self) {
        if self.ext.as_deref().is_some_and(Ext::is_empty) {
            self.ext = None;
        }
    }

    /// The updater sets are here, not in the state (either holds more than one user).
    fn has_updaters(&self) -> bool {
        !self.updaters.is_empty() || !self.status_updaters.is_empty()
    }

    pub(super) fn wide(&self, slot: usize) -> i64 {
        self.ext.as_ref().map_or(0, |e| e.wide[slot])
    }

    pub(super) fn wide_mut(&mut self) -> &mut [i64; 3] {
        &mut self.ext_mut().wide
    }
}

/// The rarest parts of an object's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Ext {
    /// The observed, the status-write and the object's generation when the state cannot keep
    /// them in 16 bits (in that order): a generation past 32,767, an observed generation that
    /// far from it. 0 when unused.
    pub(super) wide: [i64; 3],
    /// Origin writes waiting for the controller to revert them (DESIGN §1.8).
    pub(super) origins: Origins,
    /// Which of the pipeline's policy label selectors matched the object's labels at its
    /// latest write, one bit per selector (DESIGN §1.7).
    pub(super) selectors: u64,
    /// The intents of an applier's parent (DESIGN §1.9).
    pub(super) intent: Option<Box<super::intent::Intent>>,
}

impl Ext {
    fn is_empty(&self) -> bool {
        *self == Ext::default()
    }
}

/// A parsed policy as object states hold it: a box of rare parts holding only the policy, which
/// every object with that policy and no other rare part shares (no box of its own). Handed out
/// by the policy cache, one per distinct policy.
#[derive(Clone, Debug)]
pub struct SharedPolicy(triomphe::Arc<Rare>);

impl SharedPolicy {
    /// The box holding `policy` and nothing else.
    pub fn new(policy: Arc<Policy>) -> Self {
        SharedPolicy(triomphe::Arc::new(Rare { policy: Some(policy), ..Rare::default() }))
    }

    /// The policy it holds.
    pub fn policy(&self) -> &Arc<Policy> {
        self.0.policy.as_ref().expect("a shared policy holds one")
    }
}

/// How many used-up `once` approvals an object remembers.
const MAX_CONSUMED_APPROVALS: usize = 32;

impl ObjectState {
    /// The rare part when it holds the updater sets.
    fn rare_updaters(&self) -> Option<&Rare> {
        self.rare.as_deref().filter(|rare| rare.has_updaters())
    }

    /// Users who changed this object's spec, created or deleted it.
    pub fn updaters(&self) -> Recent {
        match self.rare_updaters() {
            Some(rare) => rare.updaters,
            None => Recent::of(self.updater),
        }
    }

    /// Users who wrote this object's status.
    pub fn status_updaters(&self) -> Recent {
        match self.rare_updaters() {
            Some(rare) => rare.status_updaters,
            None => Recent::of(self.status_updater),
        }
    }

    /// Adds `user` to the users who changed the spec, created or deleted the object.
    pub fn push_updater(&mut self, user: Sym) {
        if self.rare_updaters().is_none() && self.updater.is_none_or(|u| u == user) {
            self.updater = Some(user);
        } else {
            self.updaters_mut().updaters.push(user);
        }
    }

    /// Adds `user` to the users who wrote the status.
    pub fn push_status_updater(&mut self, user: Sym) {
        if self.rare_updaters().is_none() && self.status_updater.is_none_or(|u| u == user) {
            self.status_updater = Some(user);
        } else {
            self.updaters_mut().status_updaters.push(user);
        }
    }

    /// Replaces both updater sets (restore).
    pub fn set_updaters(&mut self, updaters: Recent, status_updaters: Recent) {
        (self.updater, self.status_updater) = (None, None);
        if updaters.len() <= 1 && status_updaters.len() <= 1 {
            if self.rare_updaters().is_some() {
                let rare = self.rare_mut();
                (rare.updaters, rare.status_updaters) = (Recent::default(), Recent::default());
            }
            (self.updater, self.status_updater) =
                (updaters.as_slice().first().copied(), status_updaters.as_slice().first().copied());
        } else {
            let rare = self.rare_mut();
            (rare.updaters, rare.status_updaters) = (updaters, status_updaters);
        }
    }

    /// `once` approvals already used up, by content hash, oldest first.
    pub fn consumed_approvals(&self) -> &[u64] {
        self.rare.as_ref().map_or(&[], |rare| &rare.consumed_approvals)
    }

    /// Records a `once` approval as used up; the oldest is forgotten past 32.
    pub fn consume_approval(&mut self, key: u64) {
        let used = &mut self.rare_mut().consumed_approvals;
        let kept = &used[used.len().saturating_sub(MAX_CONSUMED_APPROVALS - 1)..];
        *used = kept.iter().copied().chain([key]).collect();
    }

    /// Parsed `kausality.io/` annotations; `None` for the many objects without any.
    pub fn policy(&self) -> Option<&Arc<Policy>> {
        self.rare.as_ref().and_then(|rare| rare.policy.as_ref())
    }

    /// Sets the object's policy, or none. An object with no other rare part shares the
    /// policy's box (and drops its box with `None`); one with other rare parts keeps them and
    /// holds the policy in its own box.
    pub fn set_policy(&mut self, policy: Option<SharedPolicy>) {
        match &mut self.rare {
            Some(rare) if !rare.only_policy() => {
                let policy = policy.map(|p| p.policy().clone());
                if rare.policy.as_ref().map(Arc::as_ptr) != policy.as_ref().map(Arc::as_ptr) {
                    triomphe::Arc::make_mut(rare).policy = policy;
                }
            }
            _ => self.rare = policy.map(|p| p.0),
        }
    }

    /// The rare part to change, made on first use; a shared one is copied first.
    pub(super) fn rare_mut(&mut self) -> &mut Rare {
        triomphe::Arc::make_mut(self.rare.get_or_insert_with(Default::default))
    }

    /// The rare part with the updater sets moved into it.
    fn updaters_mut(&mut self) -> &mut Rare {
        let (updaters, status_updaters) = (self.updaters(), self.status_updaters());
        (self.updater, self.status_updater) = (None, None);
        let rare = self.rare_mut();
        (rare.updaters, rare.status_updaters) = (updaters, status_updaters);
        rare
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Ty;
    use crate::write::ObservedSource;

    #[test]
    fn recent_keeps_five_distinct_newest_first() {
        let s = |i: u32| {
            let interner = crate::state::Interner::new();
            let mut last = Sym::EMPTY;
            for k in 0..=i {
                last = interner.intern(&format!("u{k}"));
            }
            last
        };
        let (a, b, c, d, e, f) = (s(1), s(2), s(3), s(4), s(5), s(6));
        let mut r = Recent::default();
        for u in [a, b, a] {
            r.push(u);
        }
        assert_eq!(r.as_slice(), &[a, b]);
        for u in [c, d, e, f] {
            r.push(u);
        }
        assert_eq!(r.as_slice(), &[f, e, d, c, a], "b was the oldest and fell out");
        r.push(c);
        assert_eq!(r.as_slice(), &[c, f, e, d, a]);
        assert!(r.contains(a) && !r.contains(b));
    }

    #[test]
    fn updater_sets_move_to_the_box_past_one_user() {
        let i = crate::state::Interner::new();
        let (a, b, c) = (i.intern("a"), i.intern("b"), i.intern("c"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.push_updater(a);
        s.push_updater(a);
        s.push_status_updater(c);
        assert!(s.rare.is_none());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[a][..], &[c][..]));
        s.push_updater(b);
        assert!(s.rare.is_some());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[b, a][..], &[c][..]));
        let mut t = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        t.push_updater(a);
        for k in 0..40 {
            t.consume_approval(k);
        }
        assert_eq!(t.consumed_approvals().len(), 32);
        assert_eq!(t.consumed_approvals()[0], 8, "the oldest are forgotten");
        assert_eq!(t.updaters().as_slice(), &[a]);
    }

    fn shared(team: &str) -> SharedPolicy {
        let entries = vec![(Box::from("kausality.io/trace-team"), Box::from(team))];
        SharedPolicy::new(Arc::new(Policy::parse(&crate::write::Annotations { entries, hash: 1 })))
    }

    fn box_of(s: &ObjectState) -> *const Rare {
        s.rare.as_ref().map_or(std::ptr::null(), triomphe::Arc::as_ptr)
    }

    #[test]
    fn objects_with_the_same_policy_share_one_box() {
        let i = crate::state::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let team = shared("red");
        let (mut s, mut t) = (ObjectState::new(Ty::EMPTY, Sym::EMPTY), ObjectState::new(Ty::EMPTY, Sym::EMPTY));
        s.push_updater(a);
        t.push_updater(b);
        t.push_status_updater(a);
        s.set_policy(Some(team.clone()));
        t.set_policy(Some(team.clone()));
        assert!(
            triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0)
                && triomphe::Arc::ptr_eq(t.rare.as_ref().unwrap(), &team.0)
        );
        assert!(Arc::ptr_eq(s.policy().unwrap(), team.policy()) && Arc::ptr_eq(t.policy().unwrap(), team.policy()));
        assert_eq!(
            (s.updaters().as_slice(), s.status_updaters().as_slice()),
            (&[a][..], &[][..]),
            "single updaters stay inline"
        );
        assert_eq!((t.updaters().as_slice(), t.status_updaters().as_slice()), (&[b][..], &[a][..]));
        s.push_updater(a);
        s.push_status_updater(b);
        assert!(triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0), "one user per set: still shared");
        // Another policy: the shared box of that one; none: no box.
        let blue = shared("blue");
        s.set_policy(Some(blue.clone()));
        assert!(triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &blue.0));
        s.set_policy(None);
        assert!(s.rare.is_none() && s.policy().is_none());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[a][..], &[b][..]));
        assert!(Arc::ptr_eq(t.policy().unwrap(), team.policy()), "the other object keeps it");
    }

    #[test]
    fn changing_a_shared_box_copies_it_first() {
        let i = crate::state::Interner::new();
        let users: Vec<Sym> = (0..4).map(|k| i.intern(&format!("u{k}"))).collect();
        let team = shared("red");
        let (mut s, mut t) = (ObjectState::new(Ty::EMPTY, Sym::EMPTY), ObjectState::new(Ty::EMPTY, Sym::EMPTY));
        t.push_updater(users[0]);
        for o in [&mut s, &mut t] {
            o.set_policy(Some(team.clone()));
        }
        for &u in &users {
            s.push_updater(u);
        }
        assert!(!triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0), "the updaters spilled into a copy");
        assert_eq!(s.updaters().as_slice(), &[users[3], users[2], users[1], users[0]]);
        assert!(Arc::ptr_eq(s.policy().unwrap(), team.policy()), "the copy keeps the policy");
        assert!(triomphe::Arc::ptr_eq(t.rare.as_ref().unwrap(), &team.0));
        assert_eq!(t.updaters().as_slice(), &[users[0]], "the other object's view is unchanged");
        // A unique box is changed in place.
        let own = box_of(&s);
        s.push_status_updater(users[1]);
        s.consume_approval(7);
        assert_eq!(box_of(&s), own);
        // An approval used up, a wide generation, restored updater sets: each in a copy of its own.
        let mut u = t.clone();
        t.consume_approval(9);
        u.set_generation(i64::MAX);
        let mut two = Recent::of(Some(users[0]));
        two.push(users[1]);
        let mut v = u.clone();
        v.set_updaters(two, Recent::default());
        assert_eq!(
            (t.consumed_approvals(), u.consumed_approvals(), s.consumed_approvals()),
            (&[9][..], &[][..], &[7][..])
        );
        assert_eq!((t.generation(), u.generation(), v.generation()), (0, i64::MAX, i64::MAX));
        assert_eq!((u.updaters().as_slice(), v.updaters().as_slice()), (&[users[0]][..], &[users[1], users[0]][..]));
        for o in [&s, &t, &u, &v] {
            assert!(Arc::ptr_eq(o.policy().unwrap(), team.policy()));
        }
        assert!(team.0.only_policy(), "the shared box never changed");
        // Restored sets of one user each go back inline; the box keeps the rest.
        v.set_updaters(Recent::of(Some(users[2])), Recent::default());
        assert_eq!((v.updaters().as_slice(), v.generation()), (&[users[2]][..], i64::MAX));
        assert!(v.rare.as_ref().is_some_and(|rare| !rare.has_updaters()));
    }

    #[test]
    fn clearing_the_policy_keeps_the_other_rare_parts() {
        let i = crate::state::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_policy(Some(shared("red")));
        s.push_updater(a);
        s.push_updater(b);
        s.consume_approval(3);
        s.set_observed(Some((i64::MAX, ObservedSource::Status)));
        s.set_policy(None);
        assert!(s.policy().is_none() && s.rare.is_some());
        assert_eq!(s.updaters().as_slice(), &[b, a]);
        assert_eq!(s.consumed_approvals(), &[3]);
        assert_eq!(s.observed(), Some((i64::MAX, ObservedSource::Status)));
    }

    #[test]
    fn a_policy_set_on_an_object_with_its_own_rare_parts_keeps_them() {
        let i = crate::state::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let (red, blue) = (shared("red"), shared("blue"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.push_status_updater(a);
        s.push_status_updater(b);
        s.consume_approval(5);
        s.set_generation(i64::MIN);
        let own = box_of(&s);
        s.set_policy(Some(red.clone()));
        assert_eq!(box_of(&s), own, "set in its own box");
        assert!(Arc::ptr_eq(s.policy().unwrap(), red.policy()));
        s.set_policy(Some(blue.clone()));
        assert_eq!(box_of(&s), own);
        assert!(Arc::ptr_eq(s.policy().unwrap(), blue.policy()));
        assert_eq!((s.status_updaters().as_slice(), s.updaters().as_slice()), (&[b, a][..], &[][..]));
        assert_eq!((s.consumed_approvals(), s.generation()), (&[5][..], i64::MIN));
        assert!(red.0.only_policy() && blue.0.only_policy());
    }
}
