//! What the judgement of a mutation knows of the mutated object, and what its write says of
//! its content: shared by the judgement (`judge`) and the revert tracking (`reverts`), below
//! both.

use std::sync::Arc;

use crate::state::{Sym, Ty};
use crate::trace::Labels;
use crate::write::{Name, Uid};

/// What the judgement of a mutation needs to know about the mutated object.
pub(super) struct Child<'a> {
    pub uid: Uid,
    pub uid_text: &'a Arc<str>,
    pub ty: Ty,
    pub namespace: Sym,
    pub name: &'a Name,
    pub generation: Option<i64>,
    pub labels: Option<Labels>,
    /// What the write says of the child's content (for reverts, DESIGN §1.8).
    pub written: Written<'a>,
    /// A pod's node, as its write shows it (`ObjectFacts::node`).
    pub node: Option<&'a Name>,
}

impl<'a> Child<'a> {
    /// A child as its state shows it, `(ty, generation, labels)` (`generation` 0: unknown),
    /// with nothing known of its content.
    pub(super) fn kept(
        uid: Uid,
        uid_text: &'a Arc<str>,
        namespace: Sym,
        name: &'a Name,
        (ty, generation, labels): (Ty, i64, Option<Labels>),
    ) -> Self {
        Child {
            uid,
            uid_text,
            ty,
            namespace,
            name,
            generation: (generation != 0).then_some(generation),
            labels,
            written: Written::Nothing,
            node: None,
        }
    }
}

/// What a write says of a child's content.
#[derive(Clone, Copy)]
pub(super) enum Written<'a> {
    /// The whole content (create, update, patch; a delete that returned the object).
    Full(&'a Arc<str>),
    /// `spec.replicas` only (a scale write).
    Replicas(i64),
    /// Nothing (a kind whose fields are not tracked, a delete answered with a Status).
    Nothing,
}
