//! String interning for the few strings that repeat across millions of events: users, kinds,
//! API versions, namespaces, clusters. Each distinct string is stored once and named by a
//! 4-byte [`Sym`], which keeps per-object state small and comparisons cheap. An object's type,
//! the (apiVersion, kind) pair, is named by one 4-byte [`Ty`]: it is kept in every object's
//! state, its owner's key and every trace node, where two handles would cost 8 bytes more each.
//!
//! Users and namespaces come and go without end, so the table is swept ([`Interner::sweep`]):
//! a string that no live state refers to (the caller marks what it holds) and that nobody
//! looked up lately is freed, and its handle is given to a later string. "Lately" is what
//! makes the handles in flight safe: a decoder on another thread holds handles in writes that
//! no state holds yet. Each lookup stamps its entry with the current epoch; a sweep starts a
//! new epoch and frees only entries stamped before the oldest epoch still [`Pin`]ned by a
//! body being decoded or carried to the processor (or before the epoch that just ended, when
//! nothing is pinned).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dashmap::DashMap;

mod hash;

pub use hash::{FastBuild, FastHasher};

/// An object's name: one pointer wide (length and count live on the heap beside the text),
/// shared by a write, the state of an owner, its trace hops and the enriched events naming it.
pub type Name = arcstr::ArcStr;

/// A handle to an interned string. Only meaningful with the [`Interner`] that made it.
/// Index + 1, never zero: an `Option<Sym>` is 4 bytes too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(NonZeroU32);

impl Sym {
    /// The empty string is always interned first, so `Sym::EMPTY` is valid in every interner.
    pub const EMPTY: Sym = Sym(NonZeroU32::MIN);

    /// A handle no interner gives out (it would take 2^32 - 1 strings): a user the stream never
    /// showed, asked about without interning it (the verdict). Never resolve it.
    pub const UNSEEN: Sym = Sym(NonZeroU32::MAX);

    /// Whether this is the handle of the empty string.
    pub fn is_empty(self) -> bool {
        self == Sym::EMPTY
    }

    fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    fn of_index(i: usize) -> Sym {
        let n = u32::try_from(i + 1)
            .ok()
            .filter(|&n| n != u32::MAX)
            .expect("fewer than 2^32 - 1 interned strings (the last is `UNSEEN`)");
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

/// A table of values by index, with the indexes of freed entries given out again first.
#[derive(Debug)]
struct Table<T> {
    values: Vec<T>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    fn add(&mut self, value: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.values[i as usize] = value;
                i as usize
            }
            None => {
                self.values.push(value);
                self.values.len() - 1
            }
        }
    }

    fn live(&self) -> usize {
        self.values.len() - self.free.len()
    }
}

/// A handle and the epoch of its latest lookup.
#[derive(Debug)]
struct Entry<H> {
    handle: H,
    seen: AtomicU32,
}

impl<H: Copy> Entry<H> {
    fn new(handle: H, epoch: u32) -> Self {
        Entry { handle, seen: AtomicU32::new(epoch) }
    }

    /// The handle, stamped with `epoch` (a store only when it changes: lookups stay reads).
    fn touch(&self, epoch: u32) -> H {
        if self.seen.load(Ordering::Relaxed) < epoch {
            self.seen.store(epoch, Ordering::Relaxed);
        }
        self.handle
    }
}

/// Interned strings and types; see the module's documentation for how they are freed.
#[derive(Debug)]
pub struct Interner {
    /// Lookup from text to handle; sharded so concurrent classifiers do not contend.
    ids: DashMap<Arc<str>, Entry<Sym>, FastBuild>,
    /// Handle to text; appended under the write lock, read far more often than written.
    strings: RwLock<Table<Arc<str>>>,
    /// Lookup from (apiVersion, kind) to its type handle.
    type_ids: DashMap<(Sym, Sym), Entry<Ty>, FastBuild>,
    /// Type handle to its pair.
    types: RwLock<Table<(Sym, Sym)>>,
    /// The current epoch: one more at each sweep.
    epoch: AtomicU32,
    /// Pins alive, by the epoch they were taken in.
    pins: Mutex<BTreeMap<u32, usize>>,
}

impl Default for Interner {
    fn default() -> Self {
        let empty: Arc<str> = Arc::from("");
        let ids = DashMap::with_hasher(FastBuild::default());
        ids.insert(empty.clone(), Entry::new(Sym::EMPTY, 0));
        let type_ids = DashMap::with_hasher(FastBuild::default());
        type_ids.insert((Sym::EMPTY, Sym::EMPTY), Entry::new(Ty::EMPTY, 0));
        Interner {
            ids,
            strings: RwLock::new(Table { values: vec![empty], free: Vec::new() }),
            type_ids,
            types: RwLock::new(Table { values: vec![(Sym::EMPTY, Sym::EMPTY)], free: Vec::new() }),
            epoch: AtomicU32::new(1),
            pins: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Keeps what is interned from the epoch it was taken in on (see the module's documentation):
/// held by a body from the start of its decoding until the processor has taken its writes in.
#[derive(Debug)]
pub struct Pin {
    interner: Arc<Interner>,
    epoch: u32,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = self.interner.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = pins.get_mut(&self.epoch) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.epoch);
            }
        }
    }
}

/// The strings and types that live state refers to, marked by the caller of a sweep.
#[derive(Debug, Default)]
pub struct Marks {
    syms: Vec<bool>,
    types: Vec<bool>,
}

impl Marks {
    /// Marks `s` as referred to by live state: the sweep keeps it.
    pub fn sym(&mut self, s: Sym) {
        if let Some(m) = self.syms.get_mut(s.index()) {
            *m = true;
        }
    }

    /// Marks `t` (and so its apiVersion and kind strings) as referred to by live state.
    pub fn ty(&mut self, t: Ty) {
        if let Some(m) = self.types.get_mut(t.index()) {
            *m = true;
        }
    }
}

/// What a sweep freed; the handles are given out again only once [`Interner::release`] has
/// them (after the caller dropped its caches of the freed ones).
#[derive(Debug, Default)]
pub struct Swept {
    syms: Vec<bool>,
    types: Vec<bool>,
    /// How many strings the sweep freed.
    pub strings_freed: usize,
    /// How many types the sweep freed.
    pub types_freed: usize,
    /// Strings live state refers to (marked, or part of a type that stays).
    pub strings_marked: usize,
}

impl Swept {
    /// Whether the sweep freed `s`: a cache keyed by it must drop it before [`Interner::release`].
    pub fn freed_sym(&self, s: Sym) -> bool {
        self.syms.get(s.index()).copied().unwrap_or(false)
    }

    /// Whether the sweep freed `t`, as [`Swept::freed_sym`] for types.
    pub fn freed_ty(&self, t: Ty) -> bool {
        self.types.get(t.index()).copied().unwrap_or(false)
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Interner {
    /// An interner holding only the empty string and the empty type.
    pub fn new() -> Self {
        Self::default()
    }

    fn now(&self) -> u32 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Returns the handle of `s`, interning it on first sight.
    pub fn intern(&self, s: &str) -> Sym {
        let epoch = self.now();
        if let Some(e) = self.ids.get(s) {
            // Stamped while the entry is locked for reading: a sweep removes it under the
            // write lock, so it sees the stamp or the lookup misses and interns anew.
            return e.touch(epoch);
        }
        let text: Arc<str> = Arc::from(s);
        // `entry` makes the insert atomic per key, so two threads interning the same new
        // string agree on one handle.
        self.ids
            .entry(text.clone())
            .or_insert_with(|| Entry::new(Sym::of_index(write(&self.strings).add(text)), epoch))
            .touch(epoch)
    }

    /// The handle of `s` when it is interned (and it counts as looked up); interns nothing.
    pub fn lookup(&self, s: &str) -> Option<Sym> {
        let epoch = self.now();
        self.ids.get(s).map(|e| e.touch(epoch))
    }

    /// The text of `sym` (empty for a handle freed by a sweep). Panics only for a handle from
    /// another interner (a programming error).
    pub fn resolve(&self, sym: Sym) -> Arc<str> {
        read(&self.strings).values[sym.index()].clone()
    }

    /// The handle of the type (apiVersion, kind), interning it on first sight.
    pub fn ty(&self, api_version: Sym, kind: Sym) -> Ty {
        let epoch = self.now();
        if let Some(e) = self.type_ids.get(&(api_version, kind)) {
            return e.touch(epoch);
        }
        self.type_ids
            .entry((api_version, kind))
            .or_insert_with(|| Entry::new(Ty::of_index(write(&self.types).add((api_version, kind))), epoch))
            .touch(epoch)
    }

    /// The (apiVersion, kind) of `ty`. Panics only for a handle from another interner.
    pub fn parts(&self, ty: Ty) -> (Sym, Sym) {
        read(&self.types).values[ty.index()]
    }

    /// Number of distinct strings interned (for memory accounting).
    pub fn len(&self) -> usize {
        read(&self.strings).live()
    }

    /// Whether nothing but the empty string (interned from the start) is held.
    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }

    /// Number of distinct types interned.
    pub fn types(&self) -> usize {
        read(&self.types).live()
    }

    /// A pin for a body about to be decoded: what is interned from now on is not freed while
    /// it lives.
    pub fn pin(self: &Arc<Self>) -> Pin {
        let mut pins = self.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let epoch = self.now();
        *pins.entry(epoch).or_default() += 1;
        Pin { interner: self.clone(), epoch }
    }

    /// Marks sized for the current tables.
    pub fn marks(&self) -> Marks {
        let mut m = Marks {
            syms: vec![false; read(&self.strings).values.len()],
            types: vec![false; read(&self.types).values.len()],
        };
        m.sym(Sym::EMPTY);
        m.ty(Ty::EMPTY);
        m
    }

    /// Frees the strings and types that are neither marked nor looked up since the oldest
    /// pinned epoch (the one that ends now, when nothing is pinned), and starts a new epoch.
    /// A type that stays keeps its two strings. Pass the result to [`Interner::release`].
    pub fn sweep(&self, mut marks: Marks) -> Swept {
        let before = {
            let pins = self.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let ended = self.epoch.fetch_add(1, Ordering::Relaxed);
            pins.keys().next().copied().unwrap_or(ended).min(ended)
        };
        let mut swept =
            Swept { syms: vec![false; marks.syms.len()], types: vec![false; marks.types.len()], ..Swept::default() };
        self.type_ids.retain(|_, e| {
            let i = e.handle.index();
            let keep = i >= marks.types.len() || marks.types[i] || e.seen.load(Ordering::Relaxed) >= before;
            if !keep {
                swept.types[i] = true;
            }
            keep
        });
        {
            let types = read(&self.types);
            for (i, &(a, k)) in types.values.iter().enumerate() {
                if !swept.types.get(i).copied().unwrap_or(false) {
                    marks.sym(a);
                    marks.sym(k);
                }
            }
        }
        swept.strings_marked = marks.syms.iter().filter(|&&m| m).count();
        self.ids.retain(|_, e| {
            let i = e.handle.index();
            let keep = i >= marks.syms.len() || marks.syms[i] || e.seen.load(Ordering::Relaxed) >= before;
            if !keep {
                swept.syms[i] = true;
            }
            keep
        });
        swept.strings_freed = swept.syms.iter().filter(|&&f| f).count();
        swept.types_freed = swept.types.iter().filter(|&&f| f).count();
        swept
    }

    /// Gives the handles a sweep freed out again; their texts are dropped now.
    pub fn release(&self, swept: Swept) {
        let empty: Arc<str> = Arc::from("");
        let mut strings = write(&self.strings);
        for (i, _) in swept.syms.iter().enumerate().filter(|(_, &f)| f) {
            strings.values[i] = empty.clone();
            strings.free.push(i as u32);
        }
        drop(strings);
        let mut types = write(&self.types);
        for (i, _) in swept.types.iter().enumerate().filter(|(_, &f)| f) {
            types.values[i] = (Sym::EMPTY, Sym::EMPTY);
            types.free.push(i as u32);
        }
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
        assert_eq!((i.lookup("alice"), i.lookup("bob")), (Some(c), None));
        assert_eq!(i.len(), 3, "a lookup interns nothing");
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

    /// Sweeps with only `keep` marked and gives the freed handles out again.
    fn sweep(i: &Interner, keep_syms: &[Sym], keep_types: &[Ty]) -> (usize, usize) {
        let mut m = i.marks();
        keep_syms.iter().for_each(|&s| m.sym(s));
        keep_types.iter().for_each(|&t| m.ty(t));
        let swept = i.sweep(m);
        let freed = (swept.strings_freed, swept.types_freed);
        i.release(swept);
        freed
    }

    #[test]
    fn a_sweep_frees_what_is_neither_marked_nor_looked_up_lately_and_reuses_the_handles() {
        let i = Interner::new();
        let (kept, gone) = (i.intern("kept"), i.intern("gone"));
        let (v1, pod, widget) = (i.intern("v1"), i.intern("Pod"), i.intern("Widget"));
        let pods = i.ty(v1, pod);
        let widgets = i.ty(v1, widget);
        // Everything was looked up in the epoch that the first sweep ends: nothing goes.
        assert_eq!(sweep(&i, &[], &[]), (0, 0));
        // Now only what is marked stays, and the strings of a type that stays.
        assert_eq!(sweep(&i, &[kept], &[pods]), (2, 1), "gone, Widget; the Widget type");
        assert_eq!((i.len(), i.types()), (4, 2), "the empty string, kept, v1, Pod; the empty type, Pod");
        assert_eq!(i.parts(pods), (v1, pod));
        assert_eq!((&*i.resolve(kept), &*i.resolve(gone)), ("kept", ""));
        assert_eq!(i.lookup("gone"), None);
        // Freed handles are given out again, to new text.
        let (n1, n2) = (i.intern("new-1"), i.intern("new-2"));
        let mut reused = [n1, n2];
        reused.sort();
        let mut freed = [gone, widget];
        freed.sort();
        assert_eq!(reused, freed);
        assert_eq!((&*i.resolve(n1), &*i.resolve(n2)), ("new-1", "new-2"));
        assert_eq!(i.ty(v1, n1), widgets, "the freed type handle too");
        assert_eq!(i.intern("gone"), Sym::of_index(6), "a freed text interned again is new");
    }

    #[test]
    fn what_a_pinned_body_interns_survives_sweeps_until_the_pin_goes() {
        let i = Arc::new(Interner::new());
        let pin = i.pin();
        let user = i.intern("user-in-flight");
        let ns = i.intern("ns-in-flight");
        let t = i.ty(ns, user);
        for _ in 0..3 {
            assert_eq!(sweep(&i, &[], &[]), (0, 0), "pinned");
        }
        assert_eq!((&*i.resolve(user), i.parts(t)), ("user-in-flight", (ns, user)));
        drop(pin);
        let _later = i.pin();
        assert_eq!(sweep(&i, &[], &[]), (2, 1), "the pin is gone; a later one keeps nothing of before it");
        assert_eq!(i.len(), 1);
        // A lookup stamps the entry: what is used keeps living without marks.
        let alive = i.intern("alive");
        for _ in 0..3 {
            i.lookup("alive");
            sweep(&i, &[], &[]);
        }
        assert_eq!(i.lookup("alive"), Some(alive));
    }
}
