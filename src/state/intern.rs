//! String interning for the few strings that repeat across millions of events: users, kinds,
//! API versions, namespaces, clusters. Each distinct string is stored once and named by a
//! 4-byte [`Sym`], which keeps per-object state small and comparisons cheap. An object's type,
//! the (apiVersion, kind) pair, is named by one 4-byte [`Ty`]: it is kept in every object's
//! state, its owner's key and every trace node, where two handles would cost 8 bytes more each.

use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

use dashmap::DashMap;

use super::FastBuild;

/// A handle to an interned string. Only meaningful with the [`Interner`] that made it.
/// Index + 1, never zero: an `Option<Sym>` is 4 bytes too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(NonZeroU32);

impl Sym {
    /// The empty string is always interned first, so `Sym::EMPTY` is valid in every interner.
    pub const EMPTY: Sym = Sym(NonZeroU32::MIN);

    pub fn is_empty(self) -> bool {
        self == Sym::EMPTY
    }

    fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    fn of_index(i: usize) -> Sym {
        let n = u32::try_from(i + 1).expect("fewer than 2^32 interned strings");
        Sym(NonZeroU32::new(n).expect("index + 1 is not zero"))
    }
}

impl Default for Sym {
    fn default() -> Self {
        Sym::EMPTY
    }
}

/// A handle to an interned (apiVersion, kind) pair: [`Interner::ty`] makes it,
/// [`Interner::parts`] gives the pair back. Index + 1, never zero, as [`Sym`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ty(NonZeroU32);

impl Ty {
    /// The pair of two empty strings, interned first in every interner.
    pub const EMPTY: Ty = Ty(NonZeroU32::MIN);

    fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    fn of_index(i: usize) -> Ty {
        let n = u32::try_from(i + 1).expect("fewer than 2^32 interned types");
        Ty(NonZeroU32::new(n).expect("index + 1 is not zero"))
    }
}

impl Default for Ty {
    fn default() -> Self {
        Ty::EMPTY
    }
}

/// Interns strings for the life of the process. Interned strings are never freed: only
/// low-cardinality fields are interned (never object names or UIDs), so the table stays small.
#[derive(Debug)]
pub struct Interner {
    /// Lookup from text to handle; sharded so concurrent classifiers do not contend.
    ids: DashMap<Arc<str>, Sym, FastBuild>,
    /// Handle to text; appended under the write lock, read far more often than written.
    strings: RwLock<Vec<Arc<str>>>,
    /// Lookup from (apiVersion, kind) to its type handle.
    type_ids: DashMap<(Sym, Sym), Ty, FastBuild>,
    /// Type handle to its pair.
    types: RwLock<Vec<(Sym, Sym)>>,
}

impl Default for Interner {
    fn default() -> Self {
        let empty: Arc<str> = Arc::from("");
        let ids = DashMap::with_hasher(FastBuild::default());
        ids.insert(empty.clone(), Sym::EMPTY);
        let type_ids = DashMap::with_hasher(FastBuild::default());
        type_ids.insert((Sym::EMPTY, Sym::EMPTY), Ty::EMPTY);
        Interner { ids, strings: RwLock::new(vec![empty]), type_ids, types: RwLock::new(vec![(Sym::EMPTY, Sym::EMPTY)]) }
    }
}

impl Interner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the handle of `s`, interning it on first sight.
    pub fn intern(&self, s: &str) -> Sym {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let text: Arc<str> = Arc::from(s);
        // `entry` makes the insert atomic per key, so two threads interning the same new
        // string agree on one handle.
        *self.ids.entry(text.clone()).or_insert_with(|| {
            let mut strings = self.strings.write().expect("interner lock poisoned");
            strings.push(text);
            Sym::of_index(strings.len() - 1)
        })
    }

    /// The text of `sym`. Panics only for a handle from another interner (a programming error).
    pub fn resolve(&self, sym: Sym) -> Arc<str> {
        self.strings.read().expect("interner lock poisoned")[sym.index()].clone()
    }

    /// The handle of the type (apiVersion, kind), interning it on first sight.
    pub fn ty(&self, api_version: Sym, kind: Sym) -> Ty {
        if let Some(id) = self.type_ids.get(&(api_version, kind)) {
            return *id;
        }
        *self.type_ids.entry((api_version, kind)).or_insert_with(|| {
            let mut types = self.types.write().expect("interner lock poisoned");
            types.push((api_version, kind));
            Ty::of_index(types.len() - 1)
        })
    }

    /// The (apiVersion, kind) of `ty`. Panics only for a handle from another interner.
    pub fn parts(&self, ty: Ty) -> (Sym, Sym) {
        self.types.read().expect("interner lock poisoned")[ty.index()]
    }

    /// Number of distinct strings interned (for memory accounting).
    pub fn len(&self) -> usize {
        self.strings.read().expect("interner lock poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_same_handle() {
        let i = Interner::new();
        let a = i.intern("system:serviceaccount:kube-system:deployment-controller");
        let b = i.intern("system:serviceaccount:kube-system:deployment-controller");
        let c = i.intern("alice");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(&*i.resolve(c), "alice");
        assert_eq!(i.intern(""), Sym::EMPTY);
        assert_eq!(i.len(), 3);
    }

    #[test]
    fn a_type_names_its_pair_and_the_same_pair_has_one_type() {
        let i = Interner::new();
        let (apps, core) = (i.intern("apps/v1"), i.intern("v1"));
        let (rs, pod) = (i.intern("ReplicaSet"), i.intern("Pod"));
        let a = i.ty(apps, rs);
        assert_eq!(i.ty(apps, rs), a);
        let b = i.ty(core, pod);
        let c = i.ty(core, rs);
        assert!(a != b && b != c && a != c);
        assert_eq!(i.parts(a), (apps, rs));
        assert_eq!(i.parts(b), (core, pod));
        assert_eq!(i.parts(c), (core, rs));
        assert_eq!(i.ty(Sym::EMPTY, Sym::EMPTY), Ty::EMPTY);
        assert_eq!(i.parts(Ty::default()), (Sym::EMPTY, Sym::EMPTY));
    }
}
