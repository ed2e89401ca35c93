//! The decision (DESIGN §1.1, §1.2): pure functions of the parent's state and the child's
//! updaters, tested rule by rule.

use crate::state::{Recent, Sym};

pub use crate::enriched::Class;

/// Who the controller is, as far as the updater sets tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The actor is the controller; the set is who may be the controller.
    Controller(Vec<Sym>),
    /// The actor is someone else; the set is who the controller is.
    NotController(Vec<Sym>),
    /// Several users changed the child and nobody is known to write the parent's status.
    Undetermined,
}

impl Identity {
    /// `Some(true)` when the actor is the controller, `Some(false)` when not, `None` when it
    /// cannot be told.
    pub fn is_controller(&self) -> Option<bool> {
        match self {
            Identity::Controller(_) => Some(true),
            Identity::NotController(_) => Some(false),
            Identity::Undetermined => None,
        }
    }

    /// Who the controller is (or may be); empty when undetermined.
    pub fn controllers(&self) -> &[Sym] {
        match self {
            Identity::Controller(c) | Identity::NotController(c) => c,
            Identity::Undetermined => &[],
        }
    }
}

/// Decides whether `user`, mutating a child whose updaters are `child_updaters` (the user
/// already counted), is the controller of a parent whose status writers are `status_updaters`.
pub fn identify(user: Sym, child_updaters: &Recent, status_updaters: &Recent) -> Identity {
    let verdict =
        |set: Vec<Sym>| if set.contains(&user) { Identity::Controller(set) } else { Identity::NotController(set) };
    if !status_updaters.is_empty() {
        let both: Vec<Sym> =
            child_updaters.as_slice().iter().copied().filter(|u| status_updaters.contains(*u)).collect();
        if !both.is_empty() {
            return verdict(both);
        }
        return verdict(status_updaters.as_slice().to_vec());
    }
    if child_updaters.len() == 1 {
        return verdict(child_updaters.as_slice().to_vec());
    }
    Identity::Undetermined
}

/// What the decision needs to know of the parent.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParentFacts {
    /// The parent is being deleted (or is gone).
    pub deleting: bool,
    /// The parent has shown that it finished initializing (DESIGN §1.4).
    pub initialized: bool,
    /// The parent's generation (an applier's parent: its intent's epoch, DESIGN §1.9); 0 when
    /// unknown.
    pub generation: i64,
    /// The generation its controller last reported observed (an applier's parent: the intent
    /// shown applied); `None` when never.
    pub observed: Option<i64>,
    /// The controller has finished the observed generation (DESIGN §1.3).
    pub finished: bool,
}

/// The class of a mutation of a child of a known parent, in the order of DESIGN §1.1.
pub fn decide(parent: &ParentFacts, identity: &Identity) -> Class {
    if parent.deleting {
        return Class::Deleting;
    }
    if !parent.initialized {
        return Class::Initializing;
    }
    match identity {
        Identity::Undetermined => Class::Undetermined,
        Identity::NotController(_) => Class::Origin,
        // Reconciling while the generation is not observed, or observed and not finished.
        Identity::Controller(_) => match parent.observed {
            Some(observed) if observed == parent.generation && parent.finished => Class::Drift,
            _ => Class::Expected,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Interner;

    fn users() -> (Interner, [Sym; 4]) {
        let i = Interner::new();
        let s = [i.intern("ctrl"), i.intern("alice"), i.intern("bob"), i.intern("gc")];
        (i, s)
    }

    fn recent(us: &[Sym]) -> Recent {
        let mut r = Recent::default();
        for &u in us.iter().rev() {
            r.push(u);
        }
        r
    }

    #[test]
    fn identify_by_intersection_of_child_updaters_and_status_updaters() {
        let (_i, [ctrl, alice, _, _]) = users();
        // The controller writes the parent's status and the child: it is the controller.
        assert_eq!(identify(ctrl, &recent(&[ctrl, alice]), &recent(&[ctrl])), Identity::Controller(vec![ctrl]));
        // Alice also changed the child, but only ctrl is in both sets.
        assert_eq!(identify(alice, &recent(&[alice, ctrl]), &recent(&[ctrl])), Identity::NotController(vec![ctrl]));
    }

    #[test]
    fn identify_by_status_updaters_when_no_overlap() {
        let (_i, [ctrl, alice, bob, _]) = users();
        assert_eq!(identify(ctrl, &recent(&[ctrl]), &recent(&[ctrl, bob])), Identity::Controller(vec![ctrl]));
        // Alice is the only child updater and not a status writer: not the controller.
        assert_eq!(identify(alice, &recent(&[alice, bob]), &recent(&[ctrl])), Identity::NotController(vec![ctrl]));
    }

    #[test]
    fn identify_by_single_updater_or_undetermined() {
        let (_i, [ctrl, alice, _, _]) = users();
        let none = Recent::default();
        assert_eq!(identify(ctrl, &recent(&[ctrl]), &none), Identity::Controller(vec![ctrl]));
        assert_eq!(identify(alice, &recent(&[alice, ctrl]), &none), Identity::Undetermined);
    }

    #[test]
    fn decision_order() {
        let (_i, [ctrl, ..]) = users();
        let c = Identity::Controller(vec![ctrl]);
        let n = Identity::NotController(vec![ctrl]);
        let stable =
            ParentFacts { deleting: false, initialized: true, generation: 2, observed: Some(2), finished: true };
        assert_eq!(decide(&stable, &c), Class::Drift);
        assert_eq!(
            decide(&ParentFacts { finished: false, ..stable }, &c),
            Class::Expected,
            "observed, not finished: still reconciling"
        );
        assert_eq!(
            decide(&ParentFacts { finished: false, ..stable }, &n),
            Class::Origin,
            "not finished changes nothing for others"
        );
        assert_eq!(decide(&stable, &n), Class::Origin);
        assert_eq!(decide(&stable, &Identity::Undetermined), Class::Undetermined);
        assert_eq!(decide(&ParentFacts { observed: Some(1), ..stable }, &c), Class::Expected);
        assert_eq!(decide(&ParentFacts { observed: None, ..stable }, &c), Class::Expected);
        assert_eq!(
            decide(&ParentFacts { observed: Some(3), ..stable }, &c),
            Class::Expected,
            "observed ahead is not stable either"
        );
        // Lifecycle comes before identification: a person's change of a child of an
        // uninitialized parent is `initializing`, not `origin`.
        assert_eq!(decide(&ParentFacts { initialized: false, ..stable }, &n), Class::Initializing);
        assert_eq!(decide(&ParentFacts { initialized: false, deleting: true, ..stable }, &n), Class::Deleting);
        assert_eq!(decide(&ParentFacts { deleting: true, ..stable }, &c), Class::Deleting);
    }
}
