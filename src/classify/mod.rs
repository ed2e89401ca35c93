//! Classification: applies each [`Write`] to the state and judges the mutations (DESIGN §1).
//! Pure: no I/O, no async. Writes must be applied in resourceVersion order per cluster (the
//! reorder buffer's job); the engine itself is safe to share between threads.

mod appliers;
mod child;
mod counted;
mod decide;
mod engine_state;
pub mod forward;
mod judge;
pub mod platform;
mod reverts;
mod verdict;

use std::collections::HashSet;
use std::sync::Arc;

use dashmap::DashMap;

use child::{Child, Written};
pub use decide::{decide, identify, Class, Identity, ParentFacts};
use judge::trace_labels;
pub use reverts::{diff, field_label, is_person, leaves, Contents};
pub use verdict::{kind_matches, Candidate, ChildQuery, ParentRef, Verdict, VerdictError, VerdictParent, VerdictQuery};

use crate::config::{kind_key, LifecycleSignal, ModelConfig};
use crate::enriched::Enriched;
use crate::filter::{Ignored, Subresource, Verb};
/// The policy a parent's annotations set, kept in its state ([`crate::state::policy`]).
pub use crate::state::policy;
use crate::state::{
    name_key, FastBuild, Interner, Marks, ObjKey, ObjectState, OwnerKey, Recent, Store, Sym, TraceState, Ty,
};
/// Causal traces, which the model builds and the state keeps ([`crate::trace`]).
pub use crate::trace;
use crate::write::{kind_of_resource, Name, ObjectFacts, Target, Uid, Write};
use policy::PolicyCache;

/// The result of applying one write.
#[derive(Debug)]
pub enum Applied {
    /// One enriched event per classified mutation (several for a deletecollection).
    Classified(Vec<Enriched>),
    /// Not a mutation of intent; state was fed.
    Ignored(Ignored),
    /// A deletecollection some of whose items were not classified (their deletion was
    /// completed, DESIGN §1.5).
    Items {
        /// An event per classified item.
        events: Vec<Enriched>,
        /// A reason per other item.
        ignored: Vec<Ignored>,
    },
    /// A trace message (not an audit event): what it did to the object's trace.
    Trace(forward::Completion),
}

/// Options of the engine beyond the model's configuration.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Most objects kept in state; the coldest are evicted past it (at least 16).
    pub max_objects: usize,
    /// How long a deleted object's tombstone is kept, in µs of event time.
    pub tombstone_ttl_us: i64,
    /// Most hops in a trace (the oldest are cut past it).
    pub max_trace_hops: usize,
    /// How far back (event time) a drift looks for the origin writes it reverts (DESIGN §1.8).
    pub revert_horizon_us: i64,
    /// Most contents of controller-owned children kept to name the fields an origin write
    /// changes, by entries ([`Contents`]).
    pub contents_max_entries: usize,
    /// Most bytes of JSON text in the same cache.
    pub contents_max_bytes: usize,
}

/// Default revert horizon: 7 days.
pub const DEFAULT_REVERT_HORIZON_US: i64 = 7 * 24 * 3600 * 1_000_000;
/// Default bound of the cache of recent contents by entries: 16,384.
pub const DEFAULT_CONTENTS_MAX_ENTRIES: usize = 16_384;
/// Default bound of the cache of recent contents by bytes of text: 16 MiB.
pub const DEFAULT_CONTENTS_MAX_BYTES: usize = 16 << 20;

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_objects: 2_000_000,
            tombstone_ttl_us: 15 * 60 * 1_000_000,
            max_trace_hops: trace::DEFAULT_MAX_HOPS,
            revert_horizon_us: DEFAULT_REVERT_HORIZON_US,
            contents_max_entries: DEFAULT_CONTENTS_MAX_ENTRIES,
            contents_max_bytes: DEFAULT_CONTENTS_MAX_BYTES,
        }
    }
}

/// The model (DESIGN §1): the per-object state, the interner and the caches that judging writes
/// needs. Shared by the threads that classify (every method takes `&self`).
pub struct Engine {
    interner: Arc<Interner>,
    store: Store,
    config: ModelConfig,
    /// Lifecycle signals by (apiVersion, kind), as a bit set; computed once per kind.
    lifecycle_bits: DashMap<Ty, u8, FastBuild>,
    /// (apiVersion, kind) of every controller owner seen: objects of these kinds keep their
    /// name in state (see [`ObjectState::name`]).
    owner_kinds: DashMap<Ty, (), FastBuild>,
    /// userHash by user.
    user_hashes: DashMap<Sym, Arc<str>, FastBuild>,
    /// Parsed policies, shared by the objects with the same annotations.
    policies: PolicyCache,
    /// Most hops in a trace, at least 2 (a parent and its child).
    max_trace_hops: usize,
    /// Recent contents of controller-owned children (DESIGN §1.8).
    contents: Contents,
    /// How far back a drift looks for the origin writes it reverts, in µs of event time.
    revert_horizon_us: i64,
    /// Namespaces being deleted, by (cluster, name), with the event time their deletion was
    /// seen: every child write in them is teardown (`deleting`). Kept by name, not by symbol,
    /// so sweeping the interner cannot make an entry name another namespace; forgotten when the
    /// namespace is created again or after the tombstone TTL.
    terminating_namespaces: counted::Counted<(Arc<str>, Arc<str>), i64>,
    tombstone_ttl_us: i64,
    /// The Kafka partitions each cluster's state is kept by (`cluster#pN` scopes, with a state
    /// changelog), by cluster name: the readers of the live state by cluster (the verdict, the
    /// drift report) look in each. Names, not symbols: the interner may sweep a scope's symbol
    /// once its objects are gone.
    partition_scopes: DashMap<Arc<str>, Vec<i32>, FastBuild>,
    /// Trace messages for other partitions, sent at the next commit ([`forward`]).
    forwards: forward::Forwards,
    /// Appliers' parents by where their members' markers name them (DESIGN §1.9).
    applier_parents: DashMap<appliers::ParentAt, Uid, FastBuild>,
    /// Appliers' parents that apply to another cluster, by where their members there name
    /// them (the target cluster's name, `*` for any): the parent's own cluster and UID.
    remote_parents: counted::Counted<appliers::ParentAt, (Arc<str>, Uid)>,
    /// The parents found in another cluster than their members': their cluster, by the
    /// members' cluster and the parent's UID.
    remote_owners: counted::Counted<ObjKey, Arc<str>>,
    /// The applier profile of each type of parent, `None` for the other types; once per type.
    applier_kinds: DashMap<Ty, Option<u16>, FastBuild>,
}

impl Engine {
    /// An engine with empty state.
    pub fn new(config: ModelConfig, options: EngineOptions) -> Self {
        Engine {
            interner: Arc::new(Interner::new()),
            store: Store::new(options.max_objects, options.tombstone_ttl_us),
            config,
            lifecycle_bits: DashMap::with_hasher(FastBuild::default()),
            owner_kinds: DashMap::with_hasher(FastBuild::default()),
            user_hashes: DashMap::with_hasher(FastBuild::default()),
            policies: PolicyCache::default(),
            max_trace_hops: options.max_trace_hops.max(2),
            contents: Contents::new(options.contents_max_entries, options.contents_max_bytes),
            revert_horizon_us: options.revert_horizon_us,
            terminating_namespaces: counted::Counted::new(),
            tombstone_ttl_us: options.tombstone_ttl_us,
            partition_scopes: DashMap::with_hasher(FastBuild::default()),
            forwards: forward::Forwards::default(),
            applier_parents: DashMap::with_hasher(FastBuild::default()),
            remote_parents: counted::Counted::new(),
            remote_owners: counted::Counted::new(),
            applier_kinds: DashMap::with_hasher(FastBuild::default()),
        }
    }

    /// Notes that writes of `cluster` are kept by Kafka partition `partition` (a scope
    /// `cluster#pN`).
    pub fn note_partition_scope(&self, cluster: &str, partition: i32) {
        if self.partition_scopes.get(cluster).is_some_and(|ps| ps.contains(&partition)) {
            return;
        }
        let mut ps = self.partition_scopes.entry(Arc::from(cluster)).or_default();
        if let Err(at) = ps.binary_search(&partition) {
            ps.insert(at, partition);
        }
    }

    /// The scopes `cluster`'s state is kept under: the cluster itself, and with a changelog
    /// each partition's `cluster#pN` that holds anything; empty for a cluster never seen.
    pub fn scopes(&self, cluster: &str) -> Vec<Sym> {
        let mut out: Vec<Sym> = self.interner.lookup(cluster).into_iter().collect();
        if let Some(ps) = self.partition_scopes.get(cluster) {
            out.extend(ps.iter().filter_map(|p| self.interner.lookup(&format!("{cluster}#p{p}"))));
        }
        out
    }

    /// `f` of the object `uid` of `cluster`, in the first of its scopes that holds it (an
    /// object's copies on several partitions share its facts: each applies all its writes).
    pub fn read_in_cluster<R>(
        &self,
        cluster: &str,
        uid: crate::write::Uid,
        mut f: impl FnMut(&crate::state::ObjectState) -> R,
    ) -> Option<R> {
        self.scopes(cluster).into_iter().find_map(|scope| self.store.read(&ObjKey::new(scope, uid), &mut f))
    }

    /// Notes a Namespace's deletion (or its creation again): the namespace controller deletes
    /// what it holds kind by kind, children before their parents, so their parents' own state
    /// cannot tell that it is teardown (DESIGN §1.4).
    fn note_namespace(&self, w: &Write, f: &ObjectFacts) {
        if f.namespace != Sym::EMPTY {
            return;
        }
        let (api_version, kind) = self.interner.parts(f.ty);
        if &*self.interner.resolve(kind) != "Namespace"
            || &*self.interner.resolve(api_version) != "v1"
            || f.name.is_empty()
        {
            return;
        }
        // By the write's scope: with a state kept per partition, a partition knows of the
        // deletions its own messages showed, whichever partitions its process also holds.
        let key = (self.interner.resolve(w.scope), Arc::<str>::from(&*f.name));
        if f.deleting || f.gone {
            let horizon = w.time_us.saturating_sub(self.tombstone_ttl_us);
            self.terminating_namespaces.retain(|_, since| *since >= horizon);
            self.terminating_namespaces.insert_if_absent(key, w.time_us);
        } else if w.verb == Verb::Create {
            self.terminating_namespaces.remove(&key);
        }
    }

    /// True when the child's namespace is being deleted (see [`Engine::note_namespace`]).
    fn namespace_terminating(&self, cluster: Sym, namespace: Sym) -> bool {
        if self.terminating_namespaces.is_empty() || namespace == Sym::EMPTY {
            return false;
        }
        let key = (self.interner.resolve(cluster), self.interner.resolve(namespace));
        self.terminating_namespaces.contains_key(&key)
    }

    /// Applies `w` to the state and classifies the mutations it makes (DESIGN §1).
    pub fn apply(&self, w: &Write) -> Applied {
        match &w.target {
            Target::Object(f) => match (w.subresource, w.verb, &*self.with_applier(w, f)) {
                (Subresource::Status, _, f) => {
                    self.status_write(w, f);
                    Applied::Ignored(Ignored::StatusWrite)
                }
                (_, Verb::Create, f) => Applied::Classified(vec![self.mutation(w, f)]),
                (_, Verb::Update | Verb::Patch, f) => self.update(w, f),
                (_, Verb::Delete | Verb::Deletecollection, f) => Self::one(self.delete_object(w, f)),
            },
            Target::Scale { uid, uid_text, namespace, name, resource, api_version, replicas } => {
                let named = Named { uid: *uid, uid_text, namespace: *namespace, name };
                self.scale(w, named, *resource, *api_version, *replicas)
            }
            Target::Gone { uid, uid_text, namespace, name, ty } => {
                Self::one(self.delete_gone(w, Named { uid: *uid, uid_text, namespace: *namespace, name }, *ty))
            }
            Target::Many(items) => {
                let (mut events, mut ignored) = (Vec::with_capacity(items.len()), Vec::new());
                for f in items {
                    match self.delete_object(w, &self.with_applier(w, f)) {
                        Ok(e) => events.push(e),
                        Err(reason) => ignored.push(reason),
                    }
                }
                if ignored.is_empty() {
                    Applied::Classified(events)
                } else {
                    Applied::Items { events, ignored }
                }
            }
            Target::Eviction { namespace, name, place } => Self::one(self.evict(w, *namespace, name, *place)),
            Target::Trace { uid, prev } => Applied::Trace(self.complete_trace(w, *uid, prev)),
        }
    }

    fn one(judged: Result<Enriched, Ignored>) -> Applied {
        match judged {
            Ok(event) => Applied::Classified(vec![event]),
            Err(reason) => Applied::Ignored(reason),
        }
    }

    /// Learns an object from outside the stream (a parent fetched from the API because the
    /// stream never showed it): its state is filled in without counting any user as a writer.
    pub fn observe(&self, cluster: Sym, f: &ObjectFacts, time_us: i64) {
        let key = ObjKey::new(cluster, f.uid);
        self.store.upsert(
            key,
            || Self::new_state(f),
            |s| {
                if s.last_resource_version == 0 || f.resource_version.is_some_and(|rv| rv >= s.last_resource_version) {
                    let w = Write {
                        seq: 0,
                        cluster,
                        audit_id: Arc::from(""),
                        time_us,
                        received_us: 0,
                        stage_timestamp: Arc::from(""),
                        verb: Verb::Update,
                        subresource: Subresource::None,
                        user: Sym::EMPTY,
                        field_manager: None,
                        resource_version: f.resource_version,
                        resource: Sym::EMPTY,
                        target: Target::Gone {
                            uid: f.uid,
                            uid_text: f.uid_text.clone(),
                            namespace: f.namespace,
                            name: f.name.clone(),
                            ty: f.ty,
                        },
                        late: false,
                        silent: false,
                        partition: None,
                        scope: cluster,
                    };
                    self.refresh(s, f, &w, false);
                }
            },
        );
    }

    fn key(w: &Write, uid: Uid) -> ObjKey {
        ObjKey::new(w.scope, uid)
    }

    fn new_state(f: &ObjectFacts) -> ObjectState {
        ObjectState::new(f.ty, f.namespace)
    }

    /// Keeps `name` in the state of an object whose kind is known to own others.
    /// The object's own write wins over the name a child's ownerReference gave it.
    fn keep_name(&self, s: &mut ObjectState, name: &Name) {
        if name.is_empty() {
            return;
        }
        match s.name() {
            Some(kept) if kept == &**name => {}
            Some(_) => s.set_name(name),
            None if self.owner_kinds.contains_key(&s.ty) || self.is_namespace(s.namespace, s.ty) => s.set_name(name),
            None => {}
        }
    }

    /// Frees the interned strings and types that no object's state refers to, nor `extra`
    /// (what the caller holds: writes not applied yet), nor a body still in flight (see
    /// [`Interner`]); the caches by handle forget the freed ones. Returns (strings freed,
    /// types freed, strings that live state refers to). Users and namespaces come and go:
    /// without it the interner would grow without bound while `max_objects` holds the store.
    pub fn sweep_symbols(&self, extra: impl FnOnce(&mut Marks)) -> (usize, usize, usize) {
        let mut marks = self.interner.marks();
        let mut seen = HashSet::new();
        self.store.for_each(|_, s| s.mark(&mut marks, &mut seen));
        drop(seen);
        extra(&mut marks);
        let swept = self.interner.sweep(marks);
        self.user_hashes.retain(|u, _| !swept.freed_sym(*u));
        self.lifecycle_bits.retain(|t, _| !swept.freed_ty(*t));
        self.owner_kinds.retain(|t, _| !swept.freed_ty(*t));
        let counts = (swept.strings_freed, swept.types_freed, swept.strings_marked);
        self.interner.release(swept);
        counts
    }

    /// A `v1` Namespace (it keeps its name, so that a restore knows which namespaces are
    /// being deleted).
    fn is_namespace(&self, namespace: Sym, ty: Ty) -> bool {
        if namespace != Sym::EMPTY {
            return false;
        }
        let (api_version, kind) = self.interner.parts(ty);
        &*self.interner.resolve(kind) == "Namespace" && &*self.interner.resolve(api_version) == "v1"
    }

    /// After a restore: the kinds of the objects that kept a name are owner kinds (and an
    /// applier's parents are found by name again, DESIGN §1.9), and a
    /// namespace whose newest state (by resourceVersion, of each scope and name) is being
    /// deleted is being deleted (DESIGN §1.4): the engine's own note of it was not restored.
    pub fn note_restored(&self) {
        let mut namespaces: std::collections::HashMap<(Arc<str>, Name), (u64, bool, i64)> =
            std::collections::HashMap::new();
        let mut parents: std::collections::HashMap<appliers::ParentAt, (u64, Uid)> = std::collections::HashMap::new();
        self.store.for_each(|k, s| {
            let Some(name) = s.name() else { return };
            if let Some(profile) = self.applier_of_parent(s.ty) {
                // The newest incarnation of a name wins, as it does when written.
                let at =
                    (self.interner.resolve(k.cluster), profile, self.interner.resolve(s.namespace), Name::from(name));
                let newest = (s.last_resource_version, k.uid());
                parents.entry(at).and_modify(|p| *p = (*p).max(newest)).or_insert(newest);
            }
            if !self.is_namespace(s.namespace, s.ty) {
                self.note_owner_kind(s.ty);
                return;
            }
            let newest = (s.last_resource_version, s.deleting() || s.deleted(), s.last_seen_us());
            namespaces
                .entry((self.interner.resolve(k.cluster), Name::from(name)))
                .and_modify(|n| {
                    if newest.0 >= n.0 {
                        *n = newest;
                    }
                })
                .or_insert(newest);
        });
        for (at, (_, uid)) in parents {
            self.applier_parents.insert(at, uid);
        }
        for ((scope, name), (_, deleting, since)) in namespaces {
            let key = (scope, Arc::<str>::from(&*name));
            if deleting {
                self.terminating_namespaces.insert_if_absent(key, since);
            } else {
                self.terminating_namespaces.remove(&key);
            }
        }
    }

    /// Notes that objects of this kind own others (once per kind).
    fn note_owner_kind(&self, ty: Ty) {
        if !self.owner_kinds.contains_key(&ty) {
            self.owner_kinds.insert(ty, ());
        }
    }

    /// True when the write is older than what the state already holds: it may still teach who
    /// wrote, but must not roll the state back.
    fn is_stale(s: &ObjectState, f: &ObjectFacts) -> bool {
        f.resource_version.is_some_and(|rv| rv < s.last_resource_version)
    }

    /// Takes the object's facts into its state; `status_written`: the write changed the status
    /// (its generation is the synthetic observed generation).
    fn refresh(&self, s: &mut ObjectState, f: &ObjectFacts, w: &Write, status_written: bool) {
        s.seen_at(w.time_us);
        if Self::is_stale(s, f) {
            return;
        }
        let observed_before = s.observed_generation().map(|(g, _)| g);
        if status_written {
            s.set_status_write_generation(f.generation.or(Some(s.generation())));
        }
        s.ty = f.ty;
        s.namespace = f.namespace;
        if !f.name.is_empty() {
            s.set_name_key(name_key(&f.name));
        }
        self.keep_name(s, &f.name);
        if let Some(g) = f.generation {
            s.set_generation(g);
        }
        s.set_observed(f.observed);
        // The status as this write's response shows it: the controller's latest status write
        // (seen again through any write of the object when the status write itself was not).
        s.observe_progress(observed_before, f.in_progress);
        s.set_content_hash(Some(f.content_hash));
        s.set_status_hash(f.status_hash);
        if f.deleting {
            s.set_deleting(true);
        }
        if f.deleting || f.gone || w.verb == Verb::Create {
            self.note_namespace(w, f);
        }
        if f.gone && !s.deleted() {
            // The write that removed the last finalizer of an object being deleted: it is gone.
            s.set_deleted(true);
            self.store.tombstoned();
        }
        if let Some(rv) = f.resource_version {
            s.last_resource_version = rv;
        }
        s.owner = f.owner.as_ref().map(|o| OwnerKey::new(o.uid, o.ty));
        if let Some(intent) = &f.intent {
            s.observe_intent(intent);
        }
        self.note_applier_parent(w.scope, s, f);
        // Which policy selectors its labels match, kept only where a drift can ask: objects
        // known to own others and the tops of trees (the many leaves never need it).
        if f.selector_bits != s.selector_bits()
            && (f.selector_bits == 0 || s.owner.is_none() || self.owner_kinds.contains_key(&s.ty))
        {
            s.set_selector_bits(f.selector_bits);
        }
        match &f.annotations {
            None => s.set_policy(None),
            Some(a) if s.policy().is_some_and(|p| p.source_hash == a.hash) => {}
            Some(a) => s.set_policy(Some(self.policies.get(a))),
        }
        if !s.initialized() {
            s.set_initialized(self.initialized_now(s, f));
        }
    }

    fn lifecycle(&self, ty: Ty) -> u8 {
        if let Some(b) = self.lifecycle_bits.get(&ty) {
            return *b;
        }
        let (api_version, kind) = self.interner.parts(ty);
        let key = kind_key(&self.interner.resolve(api_version), &self.interner.resolve(kind));
        let bits = self.config.lifecycle_signals(&key).iter().fold(0u8, |acc, s| acc | (1 << *s as u8));
        self.lifecycle_bits.insert(ty, bits);
        bits
    }

    /// DESIGN §1.4: does the object, as written now, show it has initialized?
    fn initialized_now(&self, s: &ObjectState, f: &ObjectFacts) -> bool {
        let bits = self.lifecycle(f.ty);
        let on = |sig: LifecycleSignal| bits & (1 << sig as u8) != 0;
        let observed = s.observed_generation();
        (on(LifecycleSignal::InitializedCondition) && f.conditions.initialized)
            || (on(LifecycleSignal::ReadyCondition) && f.conditions.ready)
            || (on(LifecycleSignal::AvailableCondition) && f.conditions.available && observed.is_some())
            || (on(LifecycleSignal::PhaseAnnotation) && s.policy().is_some_and(|p| p.phase_initialized))
            || (on(LifecycleSignal::ObservedGeneration) && f.observed.is_some_and(|(g, _)| Some(g) == f.generation))
            || (on(LifecycleSignal::StartTime) && f.conditions.started)
            || (on(LifecycleSignal::StatusWrite) && s.status_write_generation().is_some())
    }

    fn status_write(&self, w: &Write, f: &ObjectFacts) {
        self.store.upsert(
            Self::key(w, f.uid),
            || Self::new_state(f),
            |s| {
                s.push_status_updater(w.user);
                self.refresh(s, f, w, true);
            },
        );
    }

    fn update(&self, w: &Write, f: &ObjectFacts) -> Applied {
        let key = Self::key(w, f.uid);
        let prev =
            self.store.read(&key, |s| (s.last_resource_version, s.content_hash(), s.status_hash(), s.generation()));
        // An answer of metadata only (the garbage collector's orphaning patch) shows no spec: it
        // changed the spec only if the generation moved. Otherwise it is no mutation of intent,
        // and its empty spec and status must not overwrite what the state knows.
        if f.metadata_only && !prev.is_some_and(|(_, _, _, g)| g != 0 && f.generation.is_some_and(|n| n != g)) {
            self.store.update(&key, |s| s.seen_at(w.time_us));
            return Applied::Ignored(Ignored::NotSpecChange);
        }
        let spec_changed = match prev {
            Some((rv, ..)) if rv != 0 && f.resource_version == Some(rv) => {
                self.store.update(&key, |s| s.seen_at(w.time_us));
                return Applied::Ignored(Ignored::NoOp);
            }
            Some((_, Some(hash), ..)) => hash != f.content_hash,
            // Spec unknown since a scale write: the API server's generation tells.
            Some((_, None, _, generation)) => generation == 0 || f.generation.is_none_or(|g| g != generation),
            // Never seen: its previous content is unknown, and a missed mutation is worse.
            None => true,
        };
        if spec_changed {
            return Applied::Classified(vec![self.mutation(w, f)]);
        }
        let status_changed = f.status_hash.is_some() && prev.is_some_and(|(_, _, sh, _)| sh != f.status_hash);
        self.store.update(&key, |s| {
            // A status change through the main resource (kinds without a status subresource)
            // is a status write all the same.
            if status_changed {
                s.push_status_updater(w.user);
            }
            self.refresh(s, f, w, status_changed);
        });
        Applied::Ignored(Ignored::NotSpecChange)
    }

    /// A create, or an update that changed the spec.
    fn mutation(&self, w: &Write, f: &ObjectFacts) -> Enriched {
        let (event, trace) = self.judge_object(w, f, |_| {});
        self.keep_trace(w, f.uid, &f.uid_text, f.ty, trace);
        event
    }

    fn delete_object(&self, w: &Write, f: &ObjectFacts) -> Result<Enriched, Ignored> {
        let removed = |s: &mut ObjectState| {
            // Still there (finalizers, graceful deletion) or gone: teardown either way.
            s.set_deleting(true);
            if !f.deleting && !s.deleted() {
                s.set_deleted(true);
                self.store.tombstoned();
            }
        };
        // DESIGN §1.5: the object carried a deletionTimestamp before this write (its first
        // delete, or a status write, showed it): this delete completes a deletion judged then.
        // What the response shows cannot tell: the first delete's shows the time it just set.
        let completed = self.store.update(&Self::key(w, f.uid), |s| {
            let completed = s.deleting() || s.deleted();
            if completed {
                self.refresh(s, f, w, false);
                removed(s);
            }
            completed
        });
        if completed == Some(true) {
            return Err(Ignored::DeletionCompleted);
        }
        Ok(self.judge_object(w, f, removed).0)
    }

    /// Judges a mutation whose response carries the full object: the actor joins the object's
    /// updaters, the facts (and `also`) go into its state, then the verdict.
    fn judge_object(&self, w: &Write, f: &ObjectFacts, also: impl FnOnce(&mut ObjectState)) -> (Enriched, TraceState) {
        let (updaters, labels) = self.store.upsert(
            Self::key(w, f.uid),
            || Self::new_state(f),
            |s| {
                s.push_updater(w.user);
                self.refresh(s, f, w, false);
                also(s);
                (s.updaters(), trace_labels(s.policy()))
            },
        );
        let written = f.content.as_ref().map_or(Written::Nothing, Written::Full);
        let child = Child {
            uid: f.uid,
            uid_text: &f.uid_text,
            ty: f.ty,
            namespace: f.namespace,
            name: &f.name,
            generation: f.generation,
            labels,
            written,
            node: f.node.as_ref(),
        };
        self.judge(w, &child, f.owner.as_ref(), &updaters, None)
    }

    fn delete_gone(&self, w: &Write, named: Named<'_>, by_ref: Ty) -> Result<Enriched, Ignored> {
        let Named { uid, uid_text, namespace, name } = named;
        let key = Self::key(w, uid);
        let completed = self.store.update(&key, |s| {
            let completed = s.deleting() || s.deleted();
            if completed {
                s.seen_at(w.time_us);
                if !s.deleted() {
                    s.set_deleted(true);
                    self.store.tombstoned();
                }
            }
            completed
        });
        if completed == Some(true) {
            return Err(Ignored::DeletionCompleted);
        }
        let known = self.store.update(&key, |s| {
            s.push_updater(w.user);
            s.set_deleting(true);
            if !s.deleted() {
                s.set_deleted(true);
                self.store.tombstoned();
            }
            s.seen_at(w.time_us);
            (s.updaters(), s.owner, trace_labels(s.policy()), s.ty, s.generation())
        });
        let (updaters, owner, labels, ty, generation) = known.clone().unwrap_or_else(|| {
            let mut r = Recent::default();
            r.push(w.user);
            (r, None, None, by_ref, 0)
        });
        let child = Child::kept(uid, uid_text, namespace, name, (ty, generation, labels));
        let unknown = known.is_none().then_some("the deleted object was never seen and the response carries no owner");
        let owner = owner.map(|o| self.owner_link(w.scope, o));
        Ok(self.judge(w, &child, owner.as_ref(), &updaters, unknown).0)
    }

    /// An eviction (DESIGN §1.5): a delete of the pod by the evicting user, the pod found in
    /// state by cluster, namespace and name. It is then being deleted (the kubelet's final
    /// delete completes it); a pod not known by that name, or known twice, is not guessed.
    ///
    /// The pod meant is the one of that name at the eviction's place in etcd order (`place`):
    /// an eviction that comes late (past the reorder window), after its pod's final delete and
    /// the create of a new pod of the same name (a StatefulSet's), means the old one, removed
    /// since: its deletion is complete (judged at the final delete, the only removal the stream
    /// showed in time), and the new pod is left alone.
    fn evict(&self, w: &Write, namespace: Sym, name: &Name, place: Option<u64>) -> Result<Enriched, Ignored> {
        let pod = self.interner.ty(self.interner.intern("v1"), self.interner.intern("Pod"));
        let found = self.store.find_named(w.scope, pod, namespace, name_key(name));
        // Two live pods of one name cannot be: a pod still deleting beside a live one had its
        // final delete missed, and the live one is meant. Two live ones: a clash of name keys.
        let key = match found.iter().filter(|(_, deleting)| !deleting).collect::<Vec<_>>()[..] {
            [(key, _)] => *key,
            [] if !found.is_empty() => return Err(Ignored::DeletionCompleted),
            _ => return Err(Ignored::EvictionUnknownPod),
        };
        // A pod written after the eviction's place may have been created since under the same
        // name: then a pod of that name removed after that place is the one meant (one more
        // scan of the state, only for the evictions that come late).
        let written_after = |at: u64| self.store.read(&key, |s| s.last_resource_version > at) == Some(true);
        if place.is_some_and(|at| {
            written_after(at) && self.store.removed_named_after(w.scope, pod, namespace, name_key(name), at)
        }) {
            return Err(Ignored::DeletionCompleted);
        }
        let (updaters, owner, labels, ty, generation) = self
            .store
            .update(&key, |s| {
                s.push_updater(w.user);
                s.set_deleting(true);
                s.seen_at(w.time_us);
                (s.updaters(), s.owner, trace_labels(s.policy()), s.ty, s.generation())
            })
            .ok_or(Ignored::EvictionUnknownPod)?;
        let uid_text: Arc<str> = Arc::from(judge::format_uid(key.uid()));
        let child = Child::kept(key.uid(), &uid_text, namespace, name, (ty, generation, labels));
        let owner = owner.map(|o| self.owner_link(w.scope, o));
        Ok(self.judge(w, &child, owner.as_ref(), &updaters, None).0)
    }

    fn scale(
        &self,
        w: &Write,
        named: Named<'_>,
        resource: Sym,
        ref_api_version: Sym,
        replicas: Option<i64>,
    ) -> Applied {
        let Named { uid, uid_text, namespace, name } = named;
        let key = Self::key(w, uid);
        let rv = w.resource_version;
        if self.store.read(&key, |s| rv.is_some_and(|rv| rv == s.last_resource_version)) == Some(true) {
            return Applied::Ignored(Ignored::NoOp);
        }
        let prior = self.store.read(&key, |s| s.ty);
        // A scale write changes only `spec.replicas`: when that field is ignored for the kind,
        // the known spec hash still holds and nothing is judged.
        let replicas_ignored = prior.is_some_and(|ty| {
            let (av, k) = self.interner.parts(ty);
            let kk = kind_key(&self.interner.resolve(av), &self.interner.resolve(k));
            self.config.ignored(&kk).is_some_and(|paths| paths.iter().any(|p| p == &["spec", "replicas"]))
        });
        let known = self.store.update(&key, |s| {
            if s.generation() > 0 {
                s.set_generation(s.generation().saturating_add(1));
            }
            if !replicas_ignored {
                s.set_content_hash(None);
            }
            if let Some(rv) = rv {
                s.last_resource_version = s.last_resource_version.max(rv);
            }
            s.seen_at(w.time_us);
            (s.ty, s.generation(), s.owner, trace_labels(s.policy()))
        });
        if replicas_ignored {
            return Applied::Ignored(Ignored::NotSpecChange);
        }
        let (ty, generation, owner, labels, unknown) = match known {
            Some((ty, g, o, l)) => (ty, g, o, l, None),
            None => {
                let ty = self
                    .interner
                    .ty(ref_api_version, self.interner.intern(kind_of_resource(&self.interner.resolve(resource))));
                self.store.upsert(
                    key,
                    || ObjectState::new(ty, namespace),
                    |s| {
                        self.keep_name(s, name);
                        s.last_resource_version = rv.unwrap_or(0);
                        s.set_last_seen_us(w.time_us);
                    },
                );
                (ty, 0, None, None, Some("scaled object never seen: its owner is unknown"))
            }
        };
        let updaters = self.store.update(&key, |s| {
            s.push_updater(w.user);
            s.updaters()
        });
        let written = replicas.map_or(Written::Nothing, Written::Replicas);
        let child = Child { written, ..Child::kept(uid, uid_text, namespace, name, (ty, generation, labels)) };
        let owner = owner.map(|o| self.owner_link(w.scope, o));
        let (event, trace) = self.judge(w, &child, owner.as_ref(), &updaters.unwrap_or_default(), unknown);
        self.keep_trace(w, uid, uid_text, ty, trace);
        Applied::Classified(vec![event])
    }
}

/// An object that a write names by identity alone: a scale (its response is a `Scale`), a
/// delete answered without the object.
struct Named<'a> {
    uid: Uid,
    uid_text: &'a Arc<str>,
    namespace: Sym,
    name: &'a Name,
}
