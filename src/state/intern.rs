//! String interning for the few strings that repeat across millions of events: users, kinds,
//! API versions, namespaces, clusters. Each distinct string is stored once and named by a
//! 4-byte [`Sym`], which keeps per-object state small and comparisons cheap.

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

/// Interns strings for the life of the process. Interned strings are never freed: only
/// low-cardinality fields are interned (never object names or UIDs), so the table stays small.
#[derive(Debug)]
pub struct Interner {
    /// Lookup from text to handle; sharded so concurrent classifiers do not contend.
    ids: DashMap<Arc<str>, Sym, FastBuild>,
    /// Handle to text; appended under the write lock, read far more often than written.
    strings: RwLock<Vec<Arc<str>>>,
}

impl Default for Interner {
    fn default() -> Self {
        let empty: Arc<str> = Arc::from("");
        let ids = DashMap::with_hasher(FastBuild::default());
        ids.insert(empty.clone(), Sym::EMPTY);
        Interner { ids, strings: RwLock::new(vec![empty]) }
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
}
