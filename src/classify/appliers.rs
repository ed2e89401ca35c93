//! Appliers as parents (DESIGN §1.9): an object without a controller ownerReference whose
//! markers name an applier's parent (a Flux Kustomization, an Argo CD Application, a Sveltos
//! ClusterProfile) is judged as that parent's child. The parent is found by kind, namespace
//! and name among the parents seen; its intent is its source revision ([`crate::state::Intent`]).

use std::borrow::Cow;
use std::sync::Arc;

use super::judge::{format_uid, ParentView};
use super::Engine;
use crate::config::appliers::Applier;
use crate::state::{ObjKey, ObjectState, Recent, Sym, Ty};
use crate::write::{uid_key, Name, ObjectFacts, OwnerLink, Write};

/// An applier's parent by where it is: (scope, profile, namespace, name). Strings, not symbols:
/// an entry outlives a sweep of the interner.
pub(super) type ParentAt = (Arc<str>, u16, Arc<str>, Name);

impl Engine {
    /// The applier profile whose parents are of type `ty`, computed once per type.
    pub(super) fn applier_of_parent(&self, ty: Ty) -> Option<u16> {
        if self.config.appliers.profiles.is_empty() {
            return None;
        }
        if let Some(p) = self.applier_kinds.get(&ty) {
            return *p;
        }
        let profile = self.config.appliers.of_parent(&self.kind_key(ty));
        self.applier_kinds.insert(ty, profile);
        profile
    }

    pub(super) fn applier(&self, profile: u16) -> Option<&Applier> {
        self.config.appliers.get(profile)
    }

    /// Notes an applier's parent where its members' markers find it (its latest incarnation
    /// by name wins); it keeps its name in state, as every object known to own others does.
    pub(super) fn note_applier_parent(&self, scope: Sym, s: &mut ObjectState, f: &ObjectFacts) {
        let Some(profile) = self.applier_of_parent(s.ty) else { return };
        let uid = f.uid;
        self.note_owner_kind(s.ty);
        if s.name().is_none() && !f.name.is_empty() {
            s.set_name(&f.name);
        }
        let Some(name) = s.name() else { return };
        let cluster = self.interner.resolve(scope);
        let namespace = match self.applier(profile).is_some_and(Applier::parent_by_name_alone) {
            true => Arc::from(""),
            false => self.interner.resolve(s.namespace),
        };
        let at: ParentAt = (cluster.clone(), profile, namespace, Name::from(name));
        if let Some(target) = f.target_cluster.as_ref().filter(|t| t[..] != cluster[..]) {
            let remote: ParentAt = (target.clone(), profile, at.2.clone(), Name::from(name));
            if self.remote_parents.get(&remote).is_none_or(|p| p.1 != uid || p.0 != cluster) {
                self.remote_parents.insert(remote, (cluster, uid));
            }
        }
        if self.applier_parents.get(&at).is_none_or(|u| *u != uid) {
            self.applier_parents.insert(at, uid);
        }
    }

    /// Where the owner `uid` of a write in `scope` is kept: in the write's cluster, unless it
    /// is an applier's parent found in another cluster (DESIGN §1.9, across clusters).
    pub(super) fn owner_key(&self, scope: Sym, uid: crate::write::Uid) -> ObjKey {
        if let Some(cluster) = self.remote_owners.get(&ObjKey::new(scope, uid)) {
            return ObjKey::new(self.interner.intern(&cluster), uid);
        }
        ObjKey::new(scope, uid)
    }

    /// A parent of `at` (named in the member's cluster) kept in another cluster whose parent
    /// applies to the member's cluster by name, else to any.
    fn remote_parent(&self, at: &ParentAt) -> Option<(Arc<str>, crate::write::Uid)> {
        if self.remote_parents.is_empty() {
            return None;
        }
        let any: ParentAt = (Arc::from("*"), at.1, at.2.clone(), at.3.clone());
        self.remote_parents.get(at).or_else(|| self.remote_parents.get(&any)).map(|p| p.clone())
    }

    /// The facts with the owner link that the object's markers make (a controller
    /// ownerReference wins: then there is no membership). A parent never seen gets a link to a
    /// UID nobody has, so the write is judged `unknown-parent`, unless only a weak marker
    /// named it (Argo CD's instance label, which Helm sets too): then it is no member.
    pub(super) fn with_applier<'f>(&self, w: &Write, f: &'f ObjectFacts) -> Cow<'f, ObjectFacts> {
        let (Some(m), None) = (f.applier.as_deref(), f.owner.as_ref()) else { return Cow::Borrowed(f) };
        let Some(profile) = self.applier(m.profile) else { return Cow::Borrowed(f) };
        let at: ParentAt = (self.interner.resolve(w.scope), m.profile, m.namespace.clone(), Name::from(&*m.name));
        let found = self.applier_parents.get(&at).map(|u| *u);
        let mut found = found.and_then(|uid| self.store.read(&ObjKey::new(w.scope, uid), |p| (uid, p.ty)));
        if found.is_none() {
            if let Some((cluster, uid)) = self.remote_parent(&at) {
                found = self.store.read(&ObjKey::new(self.interner.intern(&cluster), uid), |p| (uid, p.ty));
                let key = ObjKey::new(w.scope, uid);
                if found.is_some() && self.remote_owners.get(&key).is_none_or(|c| *c != cluster) {
                    self.remote_owners.insert(key, cluster);
                }
            }
        }
        let (uid, ty) = match found {
            Some(found) => found,
            None if m.weak => return Cow::Borrowed(f),
            None => {
                let (group_version, kind) = (profile.parent_api_version.as_str(), profile.parent_kind_name());
                let ty = self.interner.ty(self.interner.intern(group_version), self.interner.intern(kind));
                (uid_key(&format!("applier:{}/{}/{}", profile.parent_kind, m.namespace, m.name)), ty)
            }
        };
        let mut out = f.clone();
        out.owner = Some(OwnerLink { uid, uid_text: Arc::from(format_uid(uid)), ty, name: Name::from(&*m.name) });
        Cow::Owned(out)
    }

    /// The judgement of a member reads its applier's parent: initialized from the start (its
    /// first apply carries out its first intent), and, when nobody is seen writing its status,
    /// the profile's known users among the member's updaters are its applier. A parent in
    /// another cluster (`remote`) writes its status there as another user than the one that
    /// applies here: then the profile's users here are its applier. A write that names the
    /// profile's field manager (`w.field_manager`) is the applier's, whoever it acts as.
    pub(super) fn applier_view(
        &self,
        owner: Ty,
        w: &Write,
        updaters: &Recent,
        remote: bool,
        p: &mut ParentView,
    ) -> Option<Arc<str>> {
        let profile = self.applier(self.applier_of_parent(owner)?)?;
        p.facts.initialized = true;
        if remote {
            p.status_updaters = Recent::default();
        }
        if p.status_updaters.is_empty() {
            for &u in updaters.as_slice().iter().rev() {
                if profile.is_user(&self.interner.resolve(u)) {
                    p.status_updaters.push(u);
                }
            }
        }
        // None of them seen yet: the applier is still who the profile names, not whoever
        // wrote the member first.
        if p.status_updaters.is_empty() {
            if let Some(first) = profile.users.first() {
                p.status_updaters.push(self.interner.intern(first));
            }
        }
        if w.field_manager.is_some_and(|m| profile.is_field_manager(&self.interner.resolve(m))) {
            p.status_updaters.push(w.user);
        }
        Some(profile.name.clone())
    }
}
