//! The verdict on one mutation: the parent as of this write, who the controller is, the class
//! and its reason, the trace, and what the parent's policy says. Builds the enriched event.

use std::num::NonZeroI64;
use std::sync::Arc;

use super::child::Child;
use super::platform::{self, DriftFacts};
use super::{decide, identify, Class, Engine, Identity, ParentFacts};
use crate::config::{kind_key, PlatformPolicy, PolicyAction};
use crate::decode::time::rfc3339_micros_arc;
use crate::enriched::{user_hash, ActorOut, ApplierOut, Enriched, HopOut, ObjectOut, ParentOut, Phase};
use crate::state::policy::{ChildRef, Policy, Resolution};
use crate::state::{Intent, ObjKey, ObjectState, OwnerKey, Recent, Sym, TraceState, Ty};
use crate::trace::{self, Hop, HopName, HopRef, Labels, Trace};
use crate::write::{Name, OwnerLink, Uid, Write};

/// A copy of the parent's state, taken so no two map entries are ever locked at once.
pub(super) struct ParentView {
    pub facts: ParentFacts,
    pub observed: Option<(i64, crate::write::ObservedSource)>,
    pub status_updaters: Recent,
    pub deleted: bool,
    /// The parent's trace node; only the judgement of a write builds it.
    pub trace: Option<Trace>,
    pub policy: Option<Arc<Policy>>,
    pub consumed: Vec<u64>,
    pub labels: Option<Labels>,
    /// Which platform-policy selectors the parent's labels matched.
    pub selectors: u64,
    /// The parent's own `metadata.generation` (`facts.generation` is its intent's epoch for
    /// an applier's parent).
    pub generation: i64,
    /// The intents of an applier's parent (DESIGN §1.9).
    pub intent: Option<Intent>,
    /// The applier profile's name, for an applier's parent.
    pub applier: Option<Arc<str>>,
}

impl ParentView {
    /// What the judgement of a child's write reads of its parent `p`, but its trace.
    pub(super) fn of(p: &ObjectState) -> ParentView {
        let observed = p.observed_generation();
        let intent = p.intent().cloned();
        // An applier's parent: its intents are its generations (DESIGN §1.9), each finished
        // once shown applied.
        let (generation, observed_generation, finished) = match &intent {
            Some(i) => (i.epoch, (i.applied > 0).then_some(i.applied), true),
            None => (p.generation(), observed.map(|(g, _)| g), p.finished()),
        };
        ParentView {
            facts: ParentFacts {
                deleting: p.deleting() || p.deleted(),
                initialized: p.initialized(),
                generation,
                observed: observed_generation,
                finished,
            },
            generation: p.generation(),
            intent,
            applier: None,
            observed,
            status_updaters: p.status_updaters(),
            deleted: p.deleted(),
            trace: None,
            policy: p.policy().cloned(),
            consumed: p.consumed_approvals().to_vec(),
            labels: trace_labels(p.policy()),
            selectors: p.selector_bits(),
        }
    }

    /// The parent's phase as the enriched event writes it.
    pub(super) fn phase(&self) -> Phase {
        if self.facts.deleting {
            Phase::Deleting
        } else if self.facts.initialized {
            Phase::Initialized
        } else {
            Phase::Initializing
        }
    }

    /// Whether the controller has finished the observed generation; `None` without one.
    pub(super) fn finished(&self) -> Option<bool> {
        self.observed.map(|_| self.facts.finished)
    }

    /// The parent is frozen (`kausality.io/freeze`): its annotations win over every platform
    /// policy.
    pub(super) fn frozen(&self) -> bool {
        self.policy.as_deref().is_some_and(|policy| policy.freeze.is_some())
    }
}

/// How a drift is resolved: by the parent's annotations, else by a platform policy.
pub(super) struct Resolved {
    pub resolution: Resolution,
    /// What resolved it: the annotation, or the platform policy's name.
    pub policy: Option<Arc<str>>,
    /// A `once` approval this drift uses up (the judgement of a write consumes it).
    pub used: Option<u64>,
}

impl Engine {
    /// The full owner link of an owner kept as a key in state (for writes whose response has no
    /// ownerReferences: scale, Status-answered deletes); its name from the owner's own state.
    pub(super) fn owner_link(&self, cluster: Sym, o: OwnerKey) -> OwnerLink {
        let uid = o.uid();
        let name =
            self.store.read(&ObjKey::new(cluster, uid), |p| p.name().map(Name::from)).flatten().unwrap_or_default();
        OwnerLink { uid, uid_text: Arc::from(format_uid(uid)), ty: o.ty, name }
    }

    /// What judging a child needs of its parent `owner`. The parent keeps the owner link's name
    /// when it had none (it may not have been known as an owner when it was last written).
    fn parent_view(&self, key: &ObjKey, owner: &OwnerLink) -> Option<ParentView> {
        self.note_owner_kind(owner.ty);
        // A write lock: the parent's trace node is built here on first use and kept in place of
        // its producing write.
        self.store.update(key, |p| {
            if p.name().is_none() {
                p.set_name(&owner.name);
            }
            let view = ParentView::of(p);
            let labels = view.labels.clone();
            let trace = match p.trace() {
                TraceState::Node(node) => Some(node),
                TraceState::Write { prev, user, time_us } if !user.is_empty() => {
                    let hop = HopRef {
                        ty: p.ty,
                        name: p.name().unwrap_or(&owner.name),
                        generation: NonZeroI64::new(p.generation()),
                        user: Some(user),
                        timestamp: NonZeroI64::new(time_us),
                        labels: labels.as_ref(),
                    };
                    let node = Trace::new(hop, prev.map(|prev| trace::bounded(&prev, hop, self.max_trace_hops)));
                    p.set_trace(TraceState::Node(node.clone()));
                    Some(node)
                }
                TraceState::Write { .. } | TraceState::Unknown => None,
            };
            ParentView { trace, ..view }
        })
    }

    /// Judges one mutation of `child` by the write's user; returns the enriched event and the
    /// child's new trace.
    pub(super) fn judge(
        &self,
        w: &Write,
        child: &Child<'_>,
        owner: Option<&OwnerLink>,
        updaters: &Recent,
        unowned_reason: Option<&str>,
    ) -> (Enriched, TraceState) {
        let origin_state = TraceState::Write { prev: None, user: w.user, time_us: w.time_us };
        let hop = Hop {
            ty: child.ty,
            name: child.name.clone(),
            generation: child.generation.and_then(NonZeroI64::new),
            user: Some(w.user),
            // Written out from the stageTimestamp text (see `trace_out`).
            timestamp: NonZeroI64::new(w.time_us),
            labels: child.labels.clone(),
        };
        let user = self.interner.resolve(w.user);
        let (api_version, kind) = self.interner.parts(child.ty);
        let mut event = Enriched {
            audit_id: w.audit_id.clone(),
            cluster: self.interner.resolve(w.cluster),
            stage_timestamp: w.stage_timestamp.clone(),
            verb: w.verb,
            subresource: w.subresource.as_str(),
            user_hash: self.user_hash(w.user),
            user: user.clone(),
            object: ObjectOut {
                api_version: self.interner.resolve(api_version),
                kind: self.interner.resolve(kind),
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
            policy: None,
            reverts: None,
            freeze_violation: false,
            snoozed: false,
            trace: Vec::new(),
            trace_truncated: false,
            late: w.late,
        };
        // An object that names itself as its controller owner is the top of its own tree
        // (docs/model.md): judged against itself, each write would extend its own trace.
        let self_owned = owner.is_some_and(|o| o.uid == child.uid);
        let owner = owner.filter(|_| !self_owned);
        let Some(owner) = owner else {
            event.reason = match unowned_reason {
                Some(r) => r.to_string(),
                None if self_owned => "the object names itself as its controller owner: top of a tree".to_string(),
                None => "no controller ownerReference and no applier's markers: top of a tree".to_string(),
            };
            let t = trace::origin(hop);
            self.trace_out(&t, &w.stage_timestamp, &mut event);
            event.reverts = self.track_top_level(w, child);
            return (event, origin_state);
        };
        let (owner_api_version, owner_kind) = self.interner.parts(owner.ty);
        let mut parent_out = ParentOut::named(
            self.interner.resolve(owner_api_version),
            self.interner.resolve(owner_kind),
            owner.name.clone(),
            owner.uid_text.clone(),
        );
        let Some(mut p) = self.parent_view(&self.owner_key(w.scope, owner.uid), owner) else {
            event.class = Class::UnknownParent;
            event.reason = format!("parent {}/{} has never been seen", parent_out.kind, parent_out.name);
            let unknown_parent = Hop {
                ty: owner.ty,
                name: owner.name.clone(),
                generation: None,
                user: None,
                timestamp: None,
                labels: None,
            };
            let t = trace::extend(trace::origin(unknown_parent), hop);
            self.trace_out(&t, &w.stage_timestamp, &mut event);
            event.parent = Some(parent_out);
            return (event, origin_state);
        };
        let parent_key = self.owner_key(w.scope, owner.uid);
        p.applier = self.applier_view(owner.ty, w, updaters, parent_key.cluster != w.scope, &mut p);
        let namespace_teardown = self.namespace_teardown(w.scope, child.namespace, &mut p);
        let identity = identify(w.user, updaters, &p.status_updaters);
        let class = decide(&p.facts, &identity);
        // A controller deleting its own history past the spec's limit, as a CronJob deletes
        // its finished Jobs (DESIGN §1.4): it carries the spec out, even after it reported the
        // spec finished (the StatefulSet and DaemonSet controllers trim in the same sync).
        let trims_history = class == Class::Drift && w.verb == crate::filter::Verb::Delete && self.is_history(child.ty);
        let class = if trims_history { Class::Expected } else { class };
        parent_out.generation = (p.generation != 0).then_some(p.generation);
        parent_out.applier = p.applier.clone().map(|name| {
            let (revision, target_revision) =
                p.intent.as_ref().map_or((None, None), |i| (i.revision.clone(), i.target.clone()));
            Box::new(ApplierOut { name, revision, target_revision })
        });
        parent_out.observed_generation = p.observed.map(|(g, _)| g);
        parent_out.observed_generation_source = p.observed.map(|(_, s)| s);
        parent_out.finished = p.finished();
        parent_out.phase = Some(p.phase());
        event.actor = ActorOut {
            is_controller: identity.is_controller(),
            controllers: identity.controllers().iter().map(|&u| self.interner.resolve(u)).collect(),
        };
        event.reason = if namespace_teardown {
            self.teardown_reason(child.namespace)
        } else if trims_history {
            format!("{user} trims the parent's history: an old revision past its revisionHistoryLimit")
        } else {
            self.reason(class, &p, &identity, &user)
        };
        event.class = class;
        event.reverts = self.track_origins(w, child, owner.uid, class, &identity);

        // The trace: a controller acting on a parent's change extends the parent's trace.
        let extends = match class {
            Class::Expected => true,
            Class::Initializing => !matches!(identity, Identity::NotController(_)),
            _ => false,
        };
        let (t, state) = if extends {
            let parent_trace = p.trace.clone().unwrap_or_else(|| {
                trace::origin(Hop {
                    ty: owner.ty,
                    name: owner.name.clone(),
                    generation: parent_out.generation.and_then(NonZeroI64::new),
                    user: None,
                    timestamp: None,
                    labels: p.labels.clone(),
                })
            });
            // Without this object (an ownership cycle) and within the bound on hops.
            let parent_trace = trace::bounded(&parent_trace, hop.as_ref(), self.max_trace_hops);
            let state = TraceState::Write { prev: Some(parent_trace.clone()), user: w.user, time_us: w.time_us };
            (trace::extend(parent_trace, hop), state)
        } else {
            (trace::origin(hop), origin_state)
        };
        self.trace_out(&t, &w.stage_timestamp, &mut event);

        event.freeze_violation = freeze_violation(&p, class);
        if class == Class::Drift {
            let child_ref =
                ChildRef { api_version: &event.object.api_version, kind: &event.object.kind, name: &event.object.name };
            let resolved = self.resolve_drift(&p, child_ref, || {
                let reverts_person = event.reverts.iter().flatten().any(|r| r.person);
                self.platform_policy(
                    owner.ty,
                    &self.kind_key(child.ty),
                    &event.user,
                    &event.object.namespace,
                    p.selectors,
                    reverts_person,
                )
            });
            event.resolution = Some(resolved.resolution);
            event.policy = resolved.policy;
            event.snoozed = p.policy.as_deref().is_some_and(|policy| policy.snoozed_at(w.time_us));
            if let Some(used) = resolved.used {
                self.store.update(&self.owner_key(w.scope, owner.uid), |s| s.consume_approval(used));
            }
        }
        event.parent = Some(parent_out);
        (event, state)
    }

    /// The namespace teardown (DESIGN §1.4): a namespace being deleted takes its children down
    /// before their parents, so a parent not deleting itself is taken as deleting. True when
    /// that made the difference.
    pub(super) fn namespace_teardown(&self, cluster: Sym, namespace: Sym, p: &mut ParentView) -> bool {
        let teardown = !p.facts.deleting && self.namespace_terminating(cluster, namespace);
        if teardown {
            p.facts.deleting = true;
        }
        teardown
    }

    pub(super) fn teardown_reason(&self, namespace: Sym) -> String {
        format!("namespace {} is being deleted: teardown", self.interner.resolve(namespace))
    }

    /// How a drift on `child` is resolved (DESIGN §1.7): the parent's annotations first; where
    /// they leave it unresolved and the parent is not frozen (its annotations win), the
    /// platform's policies (`platform` finds the one that applies, only when there are any).
    pub(super) fn resolve_drift<'a>(
        &'a self,
        p: &ParentView,
        child: ChildRef<'_>,
        platform: impl FnOnce() -> Option<&'a PlatformPolicy>,
    ) -> Resolved {
        let (resolution, used) = match p.policy.as_deref() {
            Some(policy) => policy.resolve(child, p.facts.generation, &p.consumed),
            None => (Resolution::Unresolved, None),
        };
        let policy = match resolution {
            Resolution::Approved => Some(Arc::from(crate::state::policy::APPROVALS)),
            Resolution::Rejected => Some(Arc::from(crate::state::policy::REJECTIONS)),
            Resolution::Unresolved => None,
        };
        let mut resolved = Resolved { resolution, policy, used };
        if resolution == Resolution::Unresolved && !p.frozen() && !self.config.policies.is_empty() {
            if let Some(found) = platform() {
                resolved.resolution = match found.action {
                    PolicyAction::Approve => Resolution::Approved,
                    PolicyAction::Reject => Resolution::Rejected,
                };
                resolved.policy = Some(found.name.clone());
            }
        }
        resolved
    }

    /// The kind key (`Kind.group`, `Kind` for the core group) of a type.
    /// Whether objects of `ty` are a controller's record of its parent's past specs
    /// (`ControllerRevision`, which StatefulSets and DaemonSets keep up to their
    /// `revisionHistoryLimit`).
    fn is_history(&self, ty: Ty) -> bool {
        self.kind_key(ty) == "ControllerRevision.apps"
    }

    pub(super) fn kind_key(&self, ty: Ty) -> String {
        let (api_version, kind) = self.interner.parts(ty);
        kind_key(&self.interner.resolve(api_version), &self.interner.resolve(kind))
    }

    /// The platform policy that resolves a drift (DESIGN §1.7), if any.
    pub(super) fn platform_policy(
        &self,
        parent: Ty,
        child_kind: &str,
        controller: &str,
        namespace: &str,
        parent_selectors: u64,
        reverts_person: bool,
    ) -> Option<&PlatformPolicy> {
        let parent_kind = self.kind_key(parent);
        let facts = DriftFacts {
            parent_kind: &parent_kind,
            child_kind,
            controller,
            namespace,
            parent_selectors,
            reverts_person,
        };
        platform::resolve(&self.config.policies, &facts)
    }

    pub(super) fn reason(&self, class: Class, p: &ParentView, identity: &Identity, user: &str) -> String {
        let controllers = || {
            identity.controllers().iter().map(|&u| self.interner.resolve(u).to_string()).collect::<Vec<_>>().join(", ")
        };
        match class {
            Class::Deleting if p.deleted => "parent was deleted: teardown".to_string(),
            Class::Deleting => "parent is being deleted: teardown".to_string(),
            Class::Initializing => "parent has not finished initializing".to_string(),
            Class::Undetermined => {
                "cannot tell the controller apart yet: several users changed this object and nobody is known to write the parent's status".to_string()
            }
            Class::Origin if p.applier.is_some() => format!("{user} is not the parent's applier ({}): a new causal origin", controllers()),
            Class::Origin => format!("{user} is not the parent's controller ({}): a new causal origin", controllers()),
            Class::Expected | Class::Drift if p.intent.is_some() => self.intent_reason(class, p),
            Class::Expected => match p.observed {
                Some((o, _)) if o == p.facts.generation => {
                    format!("controller is still carrying out generation {o}: the parent's status shows work in progress since it was observed")
                }
                Some((o, _)) => format!("controller is reconciling a spec change: parent generation {} != observed {o}", p.facts.generation),
                None => "controller acting on a parent that reports no observed generation".to_string(),
            },
            Class::Drift => format!(
                "controller changed a child while the parent is stable (generation {} == observed, and finished: no work in progress)",
                p.facts.generation
            ),
            Class::Unowned | Class::UnknownParent => String::new(),
        }
    }

    /// Why an applier's write is expected or drift: its parent's intent (DESIGN §1.9).
    fn intent_reason(&self, class: Class, p: &ParentView) -> String {
        let text = |r: Option<&Arc<str>>| r.map_or_else(|| "none".to_string(), |r| r.to_string());
        let (revision, target) = p.intent.as_ref().map_or((None, None), |i| (i.revision.as_ref(), i.target.as_ref()));
        if class == Class::Drift {
            return format!(
                "applier changed a member while its parent is at the revision it last applied ({}): no new intent",
                text(revision)
            );
        }
        match p.facts.observed {
            None => format!("applier is carrying out its parent's first intent (revision {})", text(target)),
            Some(_) => format!(
                "applier is carrying out a new intent of its parent (revision {}, applied {}; or a spec change, a requested reconcile, a person's sync)",
                text(target),
                text(revision)
            ),
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

    /// The hops of `t` for the output event, root first, and whether older hops were cut. Its
    /// head is the write being judged, whose time is written as the API server wrote it
    /// (`stage_timestamp`; empty when it wrote none); the other hops' times are formatted from µs.
    fn trace_out(&self, t: &Trace, stage_timestamp: &Arc<str>, event: &mut Enriched) {
        let (hops, truncated) = trace::hops(t);
        let head = hops.len() - 1;
        event.trace_truncated = truncated;
        event.trace = hops
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                let (name, h) = (HopName::Node(h.clone()), h.head());
                let (api_version, kind) = self.interner.parts(h.ty);
                HopOut {
                    api_version: self.interner.resolve(api_version),
                    kind: self.interner.resolve(kind),
                    name,
                    generation: h.generation.map(NonZeroI64::get),
                    user: h.user.map(|u| self.interner.resolve(u)),
                    timestamp: if i == head {
                        (!stage_timestamp.is_empty()).then(|| stage_timestamp.clone())
                    } else {
                        h.timestamp.map(|us| rfc3339_micros_arc(us.get()))
                    },
                    labels: h
                        .labels
                        .iter()
                        .flat_map(|l| l.iter())
                        .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
                        .collect(),
                }
            })
            .collect();
    }
}

/// A UID key as text: the UUID it was parsed from (UIDs that are not UUIDs were hashed, and
/// read as the hash in UUID form).
pub(super) fn format_uid(uid: Uid) -> String {
    let h = format!("{uid:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub(super) fn trace_labels(p: Option<&Arc<Policy>>) -> Option<Labels> {
    p.and_then(|p| p.trace_labels.clone())
}

/// As Kausality checks it: a frozen parent's children may not change in any phase but
/// teardown (an initializing parent's child included).
pub(super) fn freeze_violation(p: &ParentView, class: Class) -> bool {
    p.frozen() && class != Class::Deleting
}
