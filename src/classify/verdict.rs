//! The verdict: what a write by a given user to a child of a given parent would be now, asked
//! of the live state (the query API's `/v1/verdict`: a leaf controller that is about to act
//! outside the cluster asks first). The rules are those of a classified write (`identify`,
//! `decide`, the namespace teardown, the parent's annotations then the platform's policies);
//! nothing changes: no user joins an updater set, no approval is used up, no trace is built.

use std::sync::Arc;

use serde::Serialize;

use super::judge::{format_uid, freeze_violation, ParentView};
use super::{decide, identify, is_person, Class, Engine};
use crate::enriched::{ActorOut, Phase};
use crate::state::policy::{ChildRef, Resolution};
use crate::state::{name_key, ObjKey, Recent, Sym, Ty};
use crate::write::uid_key;

/// The parent asked about.
#[derive(Clone, Copy, Debug)]
pub enum ParentRef<'a> {
    /// By UID, as the API server writes it.
    Uid(&'a str),
    /// By kind, namespace and name.
    Named {
        /// `Kind` (any API group) or `Kind.group` (`Deployment.apps`), case-insensitive.
        kind: &'a str,
        /// The parent's namespace; empty for a cluster-scoped parent.
        namespace: &'a str,
        /// The parent's name.
        name: &'a str,
    },
}

/// The child the write would go to: a kind (as [`ParentRef::Named`]'s), and the name of an
/// existing child whose own recent updaters count; without a name, a new child.
#[derive(Clone, Copy, Debug)]
pub struct ChildQuery<'a> {
    /// `Kind` or `Kind.group`, case-insensitive.
    pub kind: &'a str,
    /// The existing child's name; `None` for a new child.
    pub name: Option<&'a str>,
    /// Default: the parent's namespace.
    pub namespace: Option<&'a str>,
}

/// A question to [`Engine::verdict`]: what would `user`'s write to a child of `parent` be now.
#[derive(Clone, Copy, Debug)]
pub struct VerdictQuery<'a> {
    /// The cluster whose live state is asked.
    pub cluster: &'a str,
    /// The parent the write's child belongs to.
    pub parent: ParentRef<'a>,
    /// The user who would write.
    pub user: &'a str,
    /// The child; `None`: any new child of the parent.
    pub child: Option<ChildQuery<'a>>,
    /// Event time the verdict is for (snoozes, the revert horizon), µs since the epoch.
    pub now_us: i64,
}

/// An object the live state holds, as a verdict names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Its apiVersion.
    pub api_version: Arc<str>,
    /// Its kind.
    pub kind: Arc<str>,
    /// Its namespace; empty when cluster-scoped.
    pub namespace: Arc<str>,
    /// `None` when the state keeps no name for it (objects never seen as an owner).
    pub name: Option<String>,
    /// Its UID, as the API server wrote it.
    pub uid: String,
}

/// Why [`Engine::verdict`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    /// The live state holds no such parent (or child).
    #[error("{0}")]
    NotFound(String),
    /// More than one object answers to the name.
    #[error("{message}")]
    Ambiguous {
        /// How many answer to what, and how to ask so that one does.
        message: String,
        /// The objects that answer to the name.
        candidates: Vec<Candidate>,
    },
}

/// The parent as the verdict reports it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictParent {
    /// The parent's identity.
    #[serde(flatten)]
    pub object: Candidate,
    /// The parent's generation (an applier's parent: its intent's epoch); `None` when unknown.
    pub generation: Option<i64>,
    /// The generation its controller last reported observed; `None` when never.
    pub observed_generation: Option<i64>,
    /// Whether the controller has finished the observed generation; `None` without one.
    pub finished: Option<bool>,
    /// Where the parent is in its life.
    pub phase: Phase,
}

/// What a write would be now.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The class the write would have.
    pub class: Class,
    /// Why, in words.
    pub reason: String,
    /// Drift only: how it would be resolved.
    pub resolution: Option<Resolution>,
    /// Drift only: what would resolve it (an annotation or a platform policy's name).
    pub policy: Option<Arc<str>>,
    /// The parent is frozen and the write would not be teardown.
    pub freeze_violation: bool,
    /// Drift only: the parent's snooze silences its report.
    pub snoozed: bool,
    /// The write would stand against a person's recent write (DESIGN §1.8), as far as the
    /// state tells without the write's content: a person's standing write to the child, or,
    /// for a new child, a sibling a person removed.
    pub reverts_person: bool,
    /// The parent as the live state holds it.
    pub parent: VerdictParent,
    /// Whether the user would be the parent's controller, and who that is.
    pub actor: ActorOut,
    /// The existing child asked about.
    pub child: Option<Candidate>,
}

/// Whether an object of (`api_version`, `kind`) answers to `asked`: `Kind` or `Kind.group`,
/// case-insensitive (the core group is empty: `Pod` or `Pod.`).
pub fn kind_matches(api_version: &str, kind: &str, asked: &str) -> bool {
    let (k, group) = match asked.split_once('.') {
        Some((k, g)) => (k, Some(g)),
        None => (asked, None),
    };
    let own_group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    kind.eq_ignore_ascii_case(k) && group.is_none_or(|g| g.eq_ignore_ascii_case(own_group))
}

impl Engine {
    /// The verdict on a write by `q.user` to a child of `q.parent` (see the module's doc).
    pub fn verdict(&self, q: &VerdictQuery<'_>) -> Result<Verdict, VerdictError> {
        let scopes = self.scopes(q.cluster);
        if scopes.is_empty() {
            return Err(VerdictError::NotFound(format!("cluster {:?} has no state", q.cluster)));
        }
        let (keys, asked_uid) = self.find_parent(&scopes, &q.parent).map_err(|e| self.where_kept(q.cluster, e))?;
        let user = self.interner.lookup(q.user).unwrap_or(Sym::UNSEEN);
        let since = self.revert_since(q.now_us);
        let person = |u: Sym| u != Sym::UNSEEN && is_person(&self.interner.resolve(u));
        let stands = |w: &crate::state::OriginWrite| w.time_us >= since && person(w.user);

        // The parent in the scope to judge in, and the child: an existing one's updaters and
        // standing origin writes, or a new one's. With a changelog the parent is kept in each
        // partition its writes reach, with the same facts (each applies all its writes), and
        // its children where they are judged: the scope holding the asked child, else one
        // where a child's removal stands, else the first.
        let (key, child) = self.judging_scope(&keys, q.child, stands)?;
        let cluster = key.cluster;
        let parent = self.candidate(&key, asked_uid.map(str::to_string)).ok_or_else(|| not_found_parent(q))?;
        let mut p = self.store.read(&key, ParentView::of).ok_or_else(|| not_found_parent(q))?;
        let (parent_ty, parent_ns) =
            self.store.read(&key, |s| (s.ty, s.namespace)).ok_or_else(|| not_found_parent(q))?;
        let (mut updaters, child_ty, child_ns, reverts_person) = match child {
            Some(ck) => self
                .store
                .read(&ck, |s| (s.updaters(), Some(s.ty), s.namespace, s.origin_writes().iter().any(stands)))
                .ok_or_else(|| VerdictError::NotFound("the child was removed meanwhile".into()))?,
            None => {
                let namespace = match q.child.and_then(|c| c.namespace) {
                    Some(ns) => self.interner.lookup(ns).unwrap_or(Sym::UNSEEN),
                    None => parent_ns,
                };
                let removed = self.store.read(&key, |s| s.removed_children().iter().any(stands)).unwrap_or(false);
                (Recent::default(), None, namespace, removed)
            }
        };
        updaters.push(user);
        let child_out = child.and_then(|ck| self.candidate(&ck, None));

        let resolve = |u: Sym| if u == Sym::UNSEEN { Arc::from(q.user) } else { self.interner.resolve(u) };
        let mut verdict = Verdict {
            class: Class::Unowned,
            reason: String::new(),
            resolution: None,
            policy: None,
            freeze_violation: false,
            snoozed: false,
            reverts_person,
            parent: VerdictParent {
                object: parent,
                generation: (p.facts.generation != 0).then_some(p.facts.generation),
                observed_generation: p.facts.observed,
                finished: p.finished(),
                phase: p.phase(),
            },
            actor: ActorOut { is_controller: None, controllers: Vec::new() },
            child: child_out,
        };
        // An object that names itself as its controller owner is the top of its own tree.
        if child.is_some_and(|ck| ck == key) {
            verdict.reason = "the object names itself as its controller owner: top of a tree".to_string();
            return Ok(verdict);
        }
        let teardown = child_ns != Sym::UNSEEN && self.namespace_teardown(cluster, child_ns, &mut p);
        verdict.parent.phase = p.phase();
        let identity = identify(user, &updaters, &p.status_updaters);
        let class = decide(&p.facts, &identity);
        verdict.class = class;
        verdict.actor = ActorOut {
            is_controller: identity.is_controller(),
            controllers: identity.controllers().iter().map(|&u| resolve(u)).collect(),
        };
        verdict.reason =
            if teardown { self.teardown_reason(child_ns) } else { self.reason(class, &p, &identity, q.user) };
        verdict.freeze_violation = freeze_violation(&p, class);
        if class == Class::Drift {
            let (api_version, kind) = match child_ty {
                Some(ty) => self.parts(ty),
                None => (Arc::from(""), Arc::from(q.child.map_or("", |c| c.kind))),
            };
            let name = verdict.child.as_ref().and_then(|c| c.name.clone()).unwrap_or_default();
            let child_ref = ChildRef { api_version: &api_version, kind: &kind, name: &name };
            let child_kind =
                child_ty.map_or_else(|| q.child.map_or(String::new(), |c| c.kind.to_string()), |ty| self.kind_key(ty));
            let namespace = if child_ns == Sym::UNSEEN {
                Arc::from(q.child.and_then(|c| c.namespace).unwrap_or(""))
            } else {
                self.interner.resolve(child_ns)
            };
            let resolved = self.resolve_drift(&p, child_ref, || {
                self.platform_policy(parent_ty, &child_kind, q.user, &namespace, p.selectors, reverts_person)
            });
            verdict.resolution = Some(resolved.resolution);
            verdict.policy = resolved.policy;
            verdict.snoozed = p.policy.as_deref().is_some_and(|policy| policy.snoozed_at(q.now_us));
        }
        Ok(verdict)
    }

    /// Whether a drift of `child` (UID `child_uid`) under the parent `parent_uid` of
    /// `cluster`, reported while the parent was at generation `generation`, is still open in
    /// the live state (the drift report's `Resolved` phase). It is over once the child is gone
    /// or being deleted, once the parent is gone, being deleted or past that generation, or
    /// once the parent's annotations approve the child. A parent the state does not hold (a
    /// cluster it no longer knows) leaves it open; with a changelog the first scope holding
    /// each object is read.
    pub fn drift_open(
        &self,
        cluster: &str,
        parent_uid: &str,
        child_uid: &str,
        child: ChildRef<'_>,
        generation: i64,
    ) -> bool {
        let child_gone =
            self.read_in_cluster(cluster, uid_key(child_uid), |s| s.deleted() || s.deleting()).unwrap_or(false);
        if child_gone {
            return false;
        }
        let parent = self.read_in_cluster(cluster, uid_key(parent_uid), |s| {
            (s.generation(), s.deleted() || s.deleting(), s.policy().cloned(), s.consumed_approvals().to_vec())
        });
        let Some((now, gone, policy, consumed)) = parent else { return true };
        if gone || now > generation {
            return false;
        }
        !policy.is_some_and(|p| p.resolve(child, now, &consumed).0 == Resolution::Approved)
    }

    fn parts(&self, ty: Ty) -> (Arc<str>, Arc<str>) {
        let (api_version, kind) = self.interner.parts(ty);
        (self.interner.resolve(api_version), self.interner.resolve(kind))
    }

    /// The object at `key` as a verdict names it; `uid` the text it was asked by, if any.
    fn candidate(&self, key: &ObjKey, uid: Option<String>) -> Option<Candidate> {
        let (ty, namespace, name) = self.store.read(key, |s| (s.ty, s.namespace, s.name().map(|n| n.to_string())))?;
        let (api_version, kind) = self.parts(ty);
        Some(Candidate {
            api_version,
            kind,
            namespace: self.interner.resolve(namespace),
            name,
            uid: uid.unwrap_or_else(|| format_uid(key.uid())),
        })
    }

    /// The parent's key in each of `scopes` that holds it (one object: one UID), and the UID
    /// text it was asked by.
    fn find_parent<'q>(
        &self,
        scopes: &[Sym],
        parent: &ParentRef<'q>,
    ) -> Result<(Vec<ObjKey>, Option<&'q str>), VerdictError> {
        match *parent {
            ParentRef::Uid(uid) => {
                let keys: Vec<ObjKey> = scopes
                    .iter()
                    .map(|&s| ObjKey::new(s, uid_key(uid)))
                    .filter(|k| self.store.read(k, |_| ()).is_some())
                    .collect();
                if keys.is_empty() {
                    return Err(VerdictError::NotFound(format!("no object of UID {uid} in the live state")));
                }
                Ok((keys, Some(uid)))
            }
            ParentRef::Named { kind, namespace, name } => {
                let shown =
                    if namespace.is_empty() { format!("{kind} {name}") } else { format!("{kind} {namespace}/{name}") };
                let found = self.find_by_name(scopes, kind, namespace, name, |_| true);
                let mut objects: Vec<ObjKey> = Vec::new();
                for key in &found {
                    if !objects.iter().any(|o| o.uid() == key.uid()) {
                        objects.push(*key);
                    }
                }
                match objects.len() {
                    1 => Ok((found, None)),
                    0 => Err(VerdictError::NotFound(format!(
                        "no {shown} in the live state (deleted objects are asked for by UID)"
                    ))),
                    n => Err(self.ambiguous(
                        &objects,
                        format!("{n} objects answer to {shown}: ask by parentUid, or name the kind with its group"),
                    )),
                }
            }
        }
    }

    /// A parent not found, when the cluster's state is kept by partition: says which
    /// partitions this process keeps (each process of a classify tier answers for its own).
    fn where_kept(&self, cluster: &str, e: VerdictError) -> VerdictError {
        let VerdictError::NotFound(m) = e else { return e };
        let Some(ps) = self.partition_scopes.get(cluster).filter(|ps| !ps.is_empty()).map(|ps| ps.clone()) else {
            return VerdictError::NotFound(m);
        };
        let list = ps.iter().map(i32::to_string).collect::<Vec<_>>().join(", ");
        VerdictError::NotFound(format!(
            "{m}; this process keeps cluster {cluster:?}'s state by Kafka partition, for partitions {list}: an object on another partition is asked of the process holding it"
        ))
    }

    /// Of the parent's keys (one per scope holding it), the one to judge in, and the asked
    /// existing child's key (see [`Engine::verdict`]).
    fn judging_scope(
        &self,
        keys: &[ObjKey],
        child: Option<ChildQuery<'_>>,
        stands: impl Fn(&crate::state::OriginWrite) -> bool,
    ) -> Result<(ObjKey, Option<ObjKey>), VerdictError> {
        match child {
            Some(c @ ChildQuery { name: Some(name), .. }) => {
                let mut missing = None;
                for key in keys {
                    let Some(parent_ns) = self.store.read(key, |s| s.namespace) else { continue };
                    match self.find_child(*key, parent_ns, c, name) {
                        Ok(ck) => return Ok((*key, Some(ck))),
                        Err(e @ VerdictError::NotFound(_)) => missing = missing.or(Some(e)),
                        Err(e) => return Err(e),
                    }
                }
                Err(missing
                    .unwrap_or_else(|| VerdictError::NotFound("the parent left the live state meanwhile".into())))
            }
            _ => {
                let removed =
                    |k: &ObjKey| self.store.read(k, |s| s.removed_children().iter().any(&stands)).unwrap_or(false);
                Ok((keys.iter().find(|k| removed(k)).copied().unwrap_or(keys[0]), None))
            }
        }
    }

    /// The existing child `name` of the parent at `parent`: of the asked kind, in the asked
    /// namespace (default the parent's), with the parent as its controller owner, in the
    /// parent's scope.
    fn find_child(
        &self,
        parent: ObjKey,
        parent_ns: Sym,
        c: ChildQuery<'_>,
        name: &str,
    ) -> Result<ObjKey, VerdictError> {
        let namespace = match c.namespace {
            Some(ns) => ns.to_string(),
            None => self.interner.resolve(parent_ns).to_string(),
        };
        let owned = |s: &crate::state::ObjectState| s.owner.is_some_and(|o| o.uid() == parent.uid());
        let found = self.find_by_name(&[parent.cluster], c.kind, &namespace, name, owned);
        match &found[..] {
            [key] => Ok(*key),
            [] => Err(VerdictError::NotFound(format!(
                "no {} {namespace}/{name} of this parent in the live state (leave childName out to ask about a new child)",
                c.kind
            ))),
            _ => Err(self.ambiguous(&found, format!("{} children answer to {} {namespace}/{name}: name the kind with its group", found.len(), c.kind))),
        }
    }

    /// Live objects of `kind` named `name` in `namespace` for which `keep` holds. The state
    /// keeps 32 bits of a name's hash, and the name itself only for owners: a kept name that
    /// differs is a clash of hashes, left out.
    fn find_by_name(
        &self,
        scopes: &[Sym],
        kind: &str,
        namespace: &str,
        name: &str,
        keep: impl Fn(&crate::state::ObjectState) -> bool,
    ) -> Vec<ObjKey> {
        let Some(namespace) = (if namespace.is_empty() { Some(Sym::EMPTY) } else { self.interner.lookup(namespace) })
        else {
            return Vec::new();
        };
        let of_kind = |ty: Ty| {
            let (api_version, k) = self.parts(ty);
            kind_matches(&api_version, &k, kind)
        };
        let found = self.store.find_named_in(scopes, of_kind, namespace, name_key(name));
        found
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| self.store.read(key, |s| keep(s) && s.name().is_none_or(|n| n == name)).unwrap_or(false))
            .collect()
    }

    fn ambiguous(&self, found: &[ObjKey], message: String) -> VerdictError {
        VerdictError::Ambiguous { message, candidates: found.iter().filter_map(|k| self.candidate(k, None)).collect() }
    }
}

fn not_found_parent(q: &VerdictQuery<'_>) -> VerdictError {
    VerdictError::NotFound(format!("the parent {:?} left the live state meanwhile", q.parent))
}

#[cfg(test)]
mod tests;
