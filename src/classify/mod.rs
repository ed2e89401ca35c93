//! Classification: applies each [`Write`] to the state and judges the mutations (DESIGN §1).
//! Pure: no I/O, no async. Writes must be applied in resourceVersion order per cluster (the
//! reorder buffer's job); the engine itself is safe to share between threads.

mod decide;
pub mod policy;
pub mod trace;

use std::sync::Arc;

use dashmap::DashMap;

pub use decide::{decide, identify, Class, Identity, ParentFacts};

use crate::config::{kind_key, LifecycleSignal, ModelConfig};
use crate::decode::time::format_rfc3339_micros;
use crate::enriched::{user_hash, ActorOut, Enriched, HopOut, ObjectOut, ParentOut, Phase};
use crate::filter::{Ignored, Subresource, Verb};
use crate::state::{Interner, ObjKey, ObjectState, Recent, Store, Sym};
use crate::write::{kind_of_resource, ObjectFacts, OwnerLink, Target, Uid, Write};
use policy::{ChildRef, Policy, Resolution};
use trace::{Hop, Trace};

/// The result of applying one write.
#[derive(Debug)]
pub enum Applied {
    /// One enriched event per classified mutation (several for a deletecollection).
    Classified(Vec<Enriched>),
    /// Not a mutation of intent; state was fed.
    Ignored(Ignored),
}

/// Options of the engine beyond the model's configuration.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub max_objects: usize,
    pub tombstone_ttl_us: i64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { max_objects: 2_000_000, tombstone_ttl_us: 15 * 60 * 1_000_000 }
    }
}

pub struct Engine {
    pub interner: Arc<Interner>,
    pub store: Store,
    pub config: ModelConfig,
    /// Lifecycle signals by (apiVersion, kind), as a bit set; computed once per kind.
    lifecycle_bits: DashMap<(Sym, Sym), u8>,
    /// userHash by user.
    user_hashes: DashMap<Sym, Arc<str>>,
}

/// What the judgement of a mutation needs to know about the mutated object.
struct Child<'a> {
    uid_text: &'a Arc<str>,
    api_version: Sym,
    kind: Sym,
    namespace: Sym,
    name: &'a Arc<str>,
    generation: Option<i64>,
    labels: Option<Arc<[(Box<str>, Box<str>)]>>,
}

/// A copy of the parent's state, taken so no two map entries are ever locked at once.
struct ParentView {
    facts: ParentFacts,
    observed: Option<(i64, crate::write::ObservedSource)>,
    status_updaters: Recent,
    deleted: bool,
    trace: Option<Trace>,
    policy: Option<Arc<Policy>>,
    consumed: Vec<u64>,
    labels: Option<Arc<[(Box<str>, Box<str>)]>>,
}

impl Engine {
    pub fn new(config: ModelConfig, options: EngineOptions) -> Self {
        Engine {
            interner: Arc::new(Interner::new()),
            store: Store::new(options.max_objects, options.tombstone_ttl_us),
            config,
            lifecycle_bits: DashMap::new(),
            user_hashes: DashMap::new(),
        }
    }

    pub fn apply(&self, w: &Write) -> Applied {
        match &w.target {
            Target::Object(f) => match (w.subresource, w.verb) {
                (Subresource::Status, _) => {
                    self.status_write(w, f);
                    Applied::Ignored(Ignored::StatusWrite)
                }
                (_, Verb::Create) => Applied::Classified(vec![self.mutation(w, f)]),
                (_, Verb::Update | Verb::Patch) => self.update(w, f),
                (_, Verb::Delete | Verb::Deletecollection) => Applied::Classified(vec![self.delete_object(w, f)]),
            },
            Target::Scale { uid, uid_text, namespace, name, resource, api_version } => self.scale(w, *uid, uid_text, *namespace, name, *resource, *api_version),
            Target::Gone { uid, uid_text, namespace, name, api_version, kind } => {
                Applied::Classified(vec![self.delete_gone(w, *uid, uid_text, *namespace, name, (*api_version, *kind))])
            }
            Target::Many(items) => Applied::Classified(items.iter().map(|f| self.delete_object(w, f)).collect()),
        }
    }

    /// Learns an object from outside the stream (a parent fetched from the API because the
    /// stream never showed it): its state is filled in without counting any user as a writer.
    pub fn observe(&self, cluster: Sym, f: &ObjectFacts, time_us: i64) {
        let key = ObjKey { cluster, uid: f.uid };
        self.store.upsert(key, || Self::new_state(f), |s| {
            if s.last_resource_version == 0 || f.resource_version.is_some_and(|rv| rv >= s.last_resource_version) {
                let w = Write {
                    seq: 0,
                    cluster,
                    audit_id: Arc::from(""),
                    time_us,
                    stage_timestamp: Arc::from(""),
                    verb: Verb::Update,
                    subresource: Subresource::None,
                    user: Sym::EMPTY,
                    resource_version: f.resource_version,
                    resource: Sym::EMPTY,
                    target: Target::Gone {
                        uid: f.uid,
                        uid_text: f.uid_text.clone(),
                        namespace: f.namespace,
                        name: f.name.clone(),
                        api_version: f.api_version,
                        kind: f.kind,
                    },
                    late: false,
                };
                self.refresh(s, f, &w);
            }
        });
    }

    fn key(w: &Write, uid: Uid) -> ObjKey {
        ObjKey { cluster: w.cluster, uid }
    }

    fn new_state(f: &ObjectFacts) -> ObjectState {
        ObjectState::new(f.api_version, f.kind, f.namespace, f.name.clone())
    }

    /// True when the write is older than what the state already holds: it may still teach who
    /// wrote, but must not roll the state back.
    fn is_stale(s: &ObjectState, f: &ObjectFacts) -> bool {
        f.resource_version.is_some_and(|rv| rv < s.last_resource_version)
    }

    /// Takes the object's facts into its state.
    fn refresh(&self, s: &mut ObjectState, f: &ObjectFacts, w: &Write) {
        s.last_seen_us = s.last_seen_us.max(w.time_us);
        if Self::is_stale(s, f) {
            return;
        }
        s.api_version = f.api_version;
        s.kind = f.kind;
        s.namespace = f.namespace;
        if *s.name != *f.name {
            s.name = f.name.clone();
        }
        if let Some(g) = f.generation {
            s.generation = g;
        }
        s.observed = f.observed;
        s.content_hash = Some(f.content_hash);
        s.status_hash = f.status_hash;
        s.deleting |= f.deleting;
        if let Some(rv) = f.resource_version {
            s.last_resource_version = rv;
        }
        if let Some(o) = &f.owner {
            if s.owner.as_deref() != Some(o) {
                s.owner = Some(Box::new(o.clone()));
            }
        } else {
            s.owner = None;
        }
        match &f.annotations {
            None => s.policy = None,
            Some(a) if s.policy.as_ref().is_some_and(|p| p.source_hash == a.hash) => {}
            Some(a) => s.policy = Some(Arc::new(Policy::parse(a))),
        }
        if !s.initialized {
            s.initialized = self.initialized_now(s, f);
        }
    }

    fn lifecycle(&self, api_version: Sym, kind: Sym) -> u8 {
        if let Some(b) = self.lifecycle_bits.get(&(api_version, kind)) {
            return *b;
        }
        let key = kind_key(&self.interner.resolve(api_version), &self.interner.resolve(kind));
        let bits = self.config.lifecycle_signals(&key).iter().fold(0u8, |acc, s| acc | (1 << *s as u8));
        self.lifecycle_bits.insert((api_version, kind), bits);
        bits
    }

    /// DESIGN §1.4: does the object, as written now, show it has initialized?
    fn initialized_now(&self, s: &ObjectState, f: &ObjectFacts) -> bool {
        let bits = self.lifecycle(f.api_version, f.kind);
        let on = |sig: LifecycleSignal| bits & (1 << sig as u8) != 0;
        let observed = s.observed_generation();
        (on(LifecycleSignal::InitializedCondition) && f.conditions.initialized)
            || (on(LifecycleSignal::ReadyCondition) && f.conditions.ready)
            || (on(LifecycleSignal::AvailableCondition) && f.conditions.available && observed.is_some())
            || (on(LifecycleSignal::PhaseAnnotation) && s.policy.as_ref().is_some_and(|p| p.phase_initialized))
            || (on(LifecycleSignal::ObservedGeneration) && f.observed.is_some_and(|(g, _)| Some(g) == f.generation))
    }

    fn status_write(&self, w: &Write, f: &ObjectFacts) {
        self.store.upsert(Self::key(w, f.uid), || Self::new_state(f), |s| {
            s.status_updaters.push(w.user);
            if !Self::is_stale(s, f) {
                s.status_write_generation = f.generation.or(Some(s.generation));
                self.refresh(s, f, w);
            }
        });
    }

    fn update(&self, w: &Write, f: &ObjectFacts) -> Applied {
        let key = Self::key(w, f.uid);
        let prev = self.store.read(&key, |s| (s.last_resource_version, s.content_hash, s.status_hash, s.generation));
        let spec_changed = match prev {
            Some((rv, ..)) if rv != 0 && f.resource_version == Some(rv) => {
                self.store.update(&key, |s| s.last_seen_us = s.last_seen_us.max(w.time_us));
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
                s.status_updaters.push(w.user);
                if !Self::is_stale(s, f) {
                    s.status_write_generation = f.generation.or(Some(s.generation));
                }
            }
            self.refresh(s, f, w);
        });
        Applied::Ignored(Ignored::NotSpecChange)
    }

    /// A create, or an update that changed the spec.
    fn mutation(&self, w: &Write, f: &ObjectFacts) -> Enriched {
        let key = Self::key(w, f.uid);
        let (updaters, owner, labels) = self.store.upsert(key, || Self::new_state(f), |s| {
            s.updaters.push(w.user);
            self.refresh(s, f, w);
            (s.updaters, s.owner.clone(), trace_labels(s.policy.as_deref()))
        });
        let child = Child {
            uid_text: &f.uid_text,
            api_version: f.api_version,
            kind: f.kind,
            namespace: f.namespace,
            name: &f.name,
            generation: f.generation,
            labels,
        };
        let (event, trace) = self.judge(w, &child, owner.as_deref(), &updaters, None);
        self.store.update(&key, |s| s.trace = Some(trace));
        event
    }

    fn delete_object(&self, w: &Write, f: &ObjectFacts) -> Enriched {
        let key = Self::key(w, f.uid);
        let (updaters, owner, labels) = self.store.upsert(key, || Self::new_state(f), |s| {
            s.updaters.push(w.user);
            self.refresh(s, f, w);
            // Still there (finalizers, graceful deletion) or gone: teardown either way.
            s.deleting = true;
            s.deleted |= !f.deleting;
            (s.updaters, s.owner.clone(), trace_labels(s.policy.as_deref()))
        });
        let child = Child {
            uid_text: &f.uid_text,
            api_version: f.api_version,
            kind: f.kind,
            namespace: f.namespace,
            name: &f.name,
            generation: f.generation,
            labels,
        };
        self.judge(w, &child, owner.as_deref(), &updaters, None).0
    }

    fn delete_gone(&self, w: &Write, uid: Uid, uid_text: &Arc<str>, namespace: Sym, name: &Arc<str>, by_ref: (Sym, Sym)) -> Enriched {
        let key = Self::key(w, uid);
        let known = self.store.update(&key, |s| {
            s.updaters.push(w.user);
            s.deleting = true;
            s.deleted = true;
            s.last_seen_us = s.last_seen_us.max(w.time_us);
            (s.updaters, s.owner.clone(), trace_labels(s.policy.as_deref()), s.api_version, s.kind, s.generation)
        });
        let (updaters, owner, labels, api_version, kind, generation) = known.clone().unwrap_or_else(|| {
            let mut r = Recent::default();
            r.push(w.user);
            (r, None, None, by_ref.0, by_ref.1, 0)
        });
        let child = Child { uid_text, api_version, kind, namespace, name, generation: (generation != 0).then_some(generation), labels };
        let unknown = known.is_none().then_some("the deleted object was never seen and the response carries no owner");
        self.judge(w, &child, owner.as_deref(), &updaters, unknown).0
    }

    #[allow(clippy::too_many_arguments)]
    fn scale(&self, w: &Write, uid: Uid, uid_text: &Arc<str>, namespace: Sym, name: &Arc<str>, resource: Sym, ref_api_version: Sym) -> Applied {
        let key = Self::key(w, uid);
        let rv = w.resource_version;
        if self.store.read(&key, |s| rv.is_some_and(|rv| rv == s.last_resource_version)) == Some(true) {
            return Applied::Ignored(Ignored::NoOp);
        }
        let prior = self.store.read(&key, |s| (s.api_version, s.kind));
        // A scale write changes only `spec.replicas`: when that field is ignored for the kind,
        // the known spec hash still holds and nothing is judged.
        let replicas_ignored = prior.is_some_and(|(av, k)| {
            let kk = kind_key(&self.interner.resolve(av), &self.interner.resolve(k));
            self.config.ignored(&kk).is_some_and(|paths| paths.iter().any(|p| p == &["spec", "replicas"]))
        });
        let known = self.store.update(&key, |s| {
            if s.generation > 0 {
                s.generation += 1;
            }
            if !replicas_ignored {
                s.content_hash = None;
            }
            if let Some(rv) = rv {
                s.last_resource_version = s.last_resource_version.max(rv);
            }
            s.last_seen_us = s.last_seen_us.max(w.time_us);
            (s.api_version, s.kind, s.generation, s.owner.clone(), trace_labels(s.policy.as_deref()))
        });
        if replicas_ignored {
            return Applied::Ignored(Ignored::NotSpecChange);
        }
        let (api_version, kind, generation, owner, labels, unknown) = match known {
            Some((av, k, g, o, l)) => (av, k, g, o, l, None),
            None => {
                let (av, k) = (ref_api_version, self.interner.intern(kind_of_resource(&self.interner.resolve(resource))));
                self.store.upsert(key, || ObjectState::new(av, k, namespace, name.clone()), |s| {
                    s.last_resource_version = rv.unwrap_or(0);
                    s.last_seen_us = w.time_us;
                });
                (av, k, 0, None, None, Some("scaled object never seen: its owner is unknown"))
            }
        };
        let updaters = self.store.update(&key, |s| {
            s.updaters.push(w.user);
            s.updaters
        });
        let child = Child {
            uid_text,
            api_version,
            kind,
            namespace,
            name,
            generation: (generation != 0).then_some(generation),
            labels,
        };
        let (event, trace) = self.judge(w, &child, owner.as_deref(), &updaters.unwrap_or_default(), unknown);
        self.store.update(&key, |s| s.trace = Some(trace));
        Applied::Classified(vec![event])
    }

    fn parent_view(&self, key: &ObjKey) -> Option<ParentView> {
        self.store.read(key, |p| {
            let observed = p.observed_generation();
            ParentView {
                facts: ParentFacts {
                    deleting: p.deleting || p.deleted,
                    initialized: p.initialized,
                    generation: p.generation,
                    observed: observed.map(|(g, _)| g),
                },
                observed,
                status_updaters: p.status_updaters,
                deleted: p.deleted,
                trace: p.trace.clone(),
                policy: p.policy.clone(),
                consumed: p.consumed_approvals.clone(),
                labels: trace_labels(p.policy.as_deref()),
            }
        })
    }

    /// Judges one mutation of `child` by the write's user; returns the enriched event and the
    /// child's new trace.
    fn judge(&self, w: &Write, child: &Child<'_>, owner: Option<&OwnerLink>, updaters: &Recent, unowned_reason: Option<&str>) -> (Enriched, Trace) {
        let hop = Hop {
            api_version: child.api_version,
            kind: child.kind,
            name: child.name.clone(),
            generation: child.generation,
            user: Some(w.user),
            time_us: (w.time_us != 0).then_some(w.time_us),
            labels: child.labels.clone(),
        };
        let user = self.interner.resolve(w.user);
        let mut event = Enriched {
            audit_id: w.audit_id.clone(),
            cluster: self.interner.resolve(w.cluster),
            stage_timestamp: w.stage_timestamp.clone(),
            verb: w.verb,
            user_hash: self.user_hash(w.user),
            user: user.clone(),
            object: ObjectOut {
                api_version: self.interner.resolve(child.api_version),
                kind: self.interner.resolve(child.kind),
                namespace: self.interner.resolve(child.namespace),
                name: child.name.clone(),
                uid: child.uid_text.clone(),
                generation: child.generation,
            },
            class: Class::Unowned,
            reason: String::new(),
            parent: None,
            actor: ActorOut { is_controller: None, controllers: Vec::new() },
            resolution: None,
            freeze_violation: false,
            snoozed: false,
            trace: Vec::new(),
            late: w.late,
        };
        let Some(owner) = owner else {
            event.reason = unowned_reason.unwrap_or("no controller ownerReference: top of a tree").to_string();
            let t = trace::origin(hop);
            event.trace = self.trace_out(&t);
            return (event, t);
        };
        let mut parent_out = ParentOut {
            api_version: self.interner.resolve(owner.api_version),
            kind: self.interner.resolve(owner.kind),
            name: owner.name.clone(),
            uid: owner.uid_text.clone(),
            generation: None,
            observed_generation: None,
            observed_generation_source: None,
            phase: None,
        };
        let Some(p) = self.parent_view(&ObjKey { cluster: w.cluster, uid: owner.uid }) else {
            event.class = Class::UnknownParent;
            event.reason = format!("parent {}/{} has never been seen", parent_out.kind, parent_out.name);
            let unknown_parent = Hop {
                api_version: owner.api_version,
                kind: owner.kind,
                name: owner.name.clone(),
                generation: None,
                user: None,
                time_us: None,
                labels: None,
            };
            let t = trace::extend(trace::origin(unknown_parent), hop);
            event.trace = self.trace_out(&t);
            event.parent = Some(parent_out);
            return (event, t);
        };
        let identity = identify(w.user, updaters, &p.status_updaters);
        let class = decide(&p.facts, &identity);
        parent_out.generation = (p.facts.generation != 0).then_some(p.facts.generation);
        parent_out.observed_generation = p.observed.map(|(g, _)| g);
        parent_out.observed_generation_source = p.observed.map(|(_, s)| s);
        parent_out.phase = Some(if p.facts.deleting {
            Phase::Deleting
        } else if p.facts.initialized {
            Phase::Initialized
        } else {
            Phase::Initializing
        });
        event.actor = ActorOut {
            is_controller: identity.is_controller(),
            controllers: identity.controllers().iter().map(|&u| self.interner.resolve(u)).collect(),
        };
        event.reason = self.reason(class, &p, &identity, &user);
        event.class = class;

        // The trace: a controller acting on a parent's change extends the parent's trace.
        let extends = match class {
            Class::Expected => true,
            Class::Initializing => !matches!(identity, Identity::NotController(_)),
            _ => false,
        };
        let t = if extends {
            let parent_trace = p.trace.clone().unwrap_or_else(|| {
                trace::origin(Hop {
                    api_version: owner.api_version,
                    kind: owner.kind,
                    name: owner.name.clone(),
                    generation: parent_out.generation,
                    user: None,
                    time_us: None,
                    labels: p.labels.clone(),
                })
            });
            trace::extend(parent_trace, hop)
        } else {
            trace::origin(hop)
        };
        event.trace = self.trace_out(&t);

        if let Some(policy) = p.policy.as_deref() {
            let child_ref = ChildRef { api_version: &event.object.api_version, kind: &event.object.kind, name: &event.object.name };
            if class == Class::Drift {
                let (resolution, used) = policy.resolve(child_ref, p.facts.generation, &p.consumed);
                event.resolution = Some(resolution);
                event.snoozed = policy.snoozed_at(w.time_us);
                if let Some(used) = used {
                    self.store.update(&ObjKey { cluster: w.cluster, uid: owner.uid }, |s| {
                        if s.consumed_approvals.len() >= 32 {
                            s.consumed_approvals.remove(0);
                        }
                        s.consumed_approvals.push(used);
                    });
                }
            }
            event.freeze_violation = policy.freeze.is_some()
                && matches!(class, Class::Drift | Class::Expected | Class::Origin | Class::Undetermined);
        } else if class == Class::Drift {
            event.resolution = Some(Resolution::Unresolved);
        }
        event.parent = Some(parent_out);
        (event, t)
    }

    fn reason(&self, class: Class, p: &ParentView, identity: &Identity, user: &str) -> String {
        let controllers = || identity.controllers().iter().map(|&u| self.interner.resolve(u).to_string()).collect::<Vec<_>>().join(", ");
        match class {
            Class::Deleting if p.deleted => "parent was deleted: teardown".to_string(),
            Class::Deleting => "parent is being deleted: teardown".to_string(),
            Class::Initializing => "parent has not finished initializing".to_string(),
            Class::Undetermined => "cannot tell the controller apart yet: several users changed this object and nobody is known to write the parent's status".to_string(),
            Class::Origin => format!("{user} is not the parent's controller ({}): a new causal origin", controllers()),
            Class::Expected => match p.observed {
                Some((o, _)) => format!("controller is reconciling a spec change: parent generation {} != observed {o}", p.facts.generation),
                None => "controller acting on a parent that reports no observed generation".to_string(),
            },
            Class::Drift => format!("controller changed a child while the parent is stable (generation {} == observed)", p.facts.generation),
            Class::Unowned | Class::UnknownParent => String::new(),
        }
    }

    fn user_hash(&self, user: Sym) -> Arc<str> {
        if let Some(h) = self.user_hashes.get(&user) {
            return h.clone();
        }
        let h: Arc<str> = Arc::from(user_hash(&self.interner.resolve(user)));
        self.user_hashes.insert(user, h.clone());
        h
    }

    fn trace_out(&self, t: &Trace) -> Vec<HopOut> {
        trace::hops(t)
            .into_iter()
            .map(|h| HopOut {
                api_version: self.interner.resolve(h.api_version),
                kind: self.interner.resolve(h.kind),
                name: h.name.clone(),
                generation: h.generation,
                user: h.user.map(|u| self.interner.resolve(u)),
                timestamp: h.time_us.map(format_rfc3339_micros),
                labels: h
                    .labels
                    .iter()
                    .flat_map(|l| l.iter())
                    .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
                    .collect(),
            })
            .collect()
    }
}

fn trace_labels(p: Option<&Policy>) -> Option<Arc<[(Box<str>, Box<str>)]>> {
    p.filter(|p| !p.trace_labels.is_empty()).map(|p| Arc::from(p.trace_labels.clone()))
}
