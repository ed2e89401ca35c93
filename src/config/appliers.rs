//! Appliers (DESIGN §1.9): the tools that apply objects from a source (a GitOps tool, an
//! add-on manager) and mark what they apply with labels or annotations instead of a controller
//! ownerReference. A profile says how to read those markers (which parent the object belongs
//! to), who the applier's users are, and where the parent shows its intent: the source
//! revision it last applied, not its generation.
//!
//! The built-in profiles follow each tool's documented behaviour; docs/model.md says which of
//! them were never run against the tool itself.

use std::sync::Arc;

use serde::Deserialize;

mod intent;
pub use intent::{intent, IntentFacts};

/// Where a parent shows its intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentRule {
    /// Flux: `status.lastAttemptedRevision` / `lastAppliedRevision`, the spec's generation
    /// and a person's `reconcile.fluxcd.io/requestedAt` annotation.
    Flux,
    /// Argo CD: `status.sync.revision`, `status.operationState` and `operation.initiatedBy`.
    ArgoCd,
    /// No revision: the parent's generation and its observed generation, as for any
    /// controller's parent (DESIGN §1.3).
    Generation,
}

/// How an object names the parent that applied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Markers {
    /// Keys (labels or annotations) holding the parent's name and, optionally, its namespace
    /// (else `namespace`: a fixed one, empty for a cluster-scoped parent).
    Keys {
        /// The keys are labels (`true`) or annotations (`false`).
        in_labels: bool,
        /// The key holding the parent's name.
        name: String,
        /// The key holding the parent's namespace, when one does.
        namespace_key: Option<String>,
        /// The parent's namespace when no key holds it; empty for a cluster-scoped parent.
        namespace: String,
        /// A key whose value must be the parent's kind (Sveltos' `owner-kind`).
        kind_key: Option<String>,
    },
    /// Argo CD: the `argocd.argoproj.io/tracking-id` annotation, else the
    /// `app.kubernetes.io/instance` label; `namespace` is Argo's own.
    ArgoCd {
        /// Argo CD's own namespace ([`ARGOCD_NAMESPACE`]): an Application's, unless its name says.
        namespace: String,
    },
}

/// Which cluster a profile's parent applies its members to (DESIGN §1.9, across clusters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetCluster {
    /// Its own (Flux).
    Own,
    /// The cluster named at this path of the parent's spec (Argo CD: `destination.name`),
    /// as this instance names its clusters; its own when the field is absent.
    Field(Vec<String>),
    /// Any cluster (Sveltos' ClusterProfile selects clusters by label): a member in a cluster
    /// without that parent finds it in the cluster that has it.
    Any,
}

/// One applier profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applier {
    /// The profile's name, as the enriched event's `parent.applier` writes it.
    pub name: Arc<str>,
    /// The parent's kind key (`Kind.group`).
    pub parent_kind: String,
    /// The parent's apiVersion, for a parent never seen (the markers name no version).
    pub parent_api_version: String,
    /// How an object names its parent.
    pub markers: Markers,
    /// The applier's users: a full user name, or a service account's name alone
    /// (`kustomize-controller` matches `system:serviceaccount:<any>:kustomize-controller`).
    pub users: Vec<String>,
    /// The field managers its applies name in the request (`?fieldManager=` of a server-side
    /// apply): the applier whoever the request acts as (Flux impersonating a tenant's service
    /// account, `spec.serviceAccountName`; Argo CD's impersonation).
    pub field_managers: Vec<String>,
    /// Where its parents show their intent.
    pub intent: IntentRule,
    /// Where its parents apply their members.
    pub target_cluster: TargetCluster,
}

/// The names of the built-in profiles (metric label values).
pub const BUILTIN_NAMES: &[&str] = &["flux-kustomize", "flux-helm", "argocd", "sveltos"];

/// Argo CD's default namespace.
pub const ARGOCD_NAMESPACE: &str = "argocd";
/// Annotations that appliers read or write, kept by the decoder beside `kausality.io/` ones.
pub const BUILTIN_ANNOTATIONS: &[&str] = &[
    ARGO_TRACKING_ID,
    SVELTOS_OWNER_KIND,
    SVELTOS_OWNER_NAME,
    HELM_RELEASE_NAME,
    HELM_RELEASE_NAMESPACE,
    FLUX_REQUESTED_AT,
];
/// Argo CD's annotation naming the Application that applied an object (see [`argo_tracking`]).
pub const ARGO_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// The label Argo CD sets to the Application's name (so do Helm and others: a weak marker).
pub const ARGO_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Sveltos' annotation naming the kind of the profile that applied an object.
pub const SVELTOS_OWNER_KIND: &str = "projectsveltos.io/owner-kind";
/// Sveltos' annotation naming the profile that applied an object.
pub const SVELTOS_OWNER_NAME: &str = "projectsveltos.io/owner-name";
/// Helm's annotation naming the release an object was installed with.
pub const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// Helm's annotation naming the release's namespace.
pub const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
/// Flux's annotation by which a person asks for a reconcile now (its value: when asked).
pub const FLUX_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

fn keys(in_labels: bool, name: &str, namespace_key: Option<&str>) -> Markers {
    Markers::Keys {
        in_labels,
        name: name.to_string(),
        namespace_key: namespace_key.map(str::to_string),
        namespace: String::new(),
        kind_key: None,
    }
}

/// The built-in profiles, in the order membership is tried.
pub fn builtin() -> Vec<Applier> {
    let users = |u: &[&str]| u.iter().map(|s| s.to_string()).collect();
    vec![
        Applier {
            name: Arc::from("flux-kustomize"),
            parent_kind: "Kustomization.kustomize.toolkit.fluxcd.io".into(),
            parent_api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
            markers: keys(true, "kustomize.toolkit.fluxcd.io/name", Some("kustomize.toolkit.fluxcd.io/namespace")),
            users: users(&["kustomize-controller"]),
            field_managers: users(&["kustomize-controller"]),
            intent: IntentRule::Flux,
            target_cluster: TargetCluster::Own,
        },
        Applier {
            name: Arc::from("flux-helm"),
            parent_kind: "HelmRelease.helm.toolkit.fluxcd.io".into(),
            parent_api_version: "helm.toolkit.fluxcd.io/v2".into(),
            markers: keys(true, "helm.toolkit.fluxcd.io/name", Some("helm.toolkit.fluxcd.io/namespace")),
            users: users(&["helm-controller"]),
            field_managers: users(&["helm-controller"]),
            intent: IntentRule::Flux,
            target_cluster: TargetCluster::Own,
        },
        Applier {
            name: Arc::from("argocd"),
            parent_kind: "Application.argoproj.io".into(),
            parent_api_version: "argoproj.io/v1alpha1".into(),
            markers: Markers::ArgoCd { namespace: ARGOCD_NAMESPACE.into() },
            // In a cluster it was added to (`argocd cluster add`), Argo CD writes as the
            // `argocd-manager` service account.
            users: users(&["argocd-application-controller", "argocd-manager"]),
            // Its server-side applies (`ServerSideApply=true`).
            field_managers: users(&["argocd-controller"]),
            intent: IntentRule::ArgoCd,
            target_cluster: TargetCluster::Field(vec!["destination".into(), "name".into()]),
        },
        sveltos("ClusterProfile"),
        // A namespaced Profile marks what it applies as a ClusterProfile does, with
        // `owner-kind: Profile` and no namespace: it is found by name alone.
        sveltos("Profile"),
    ]
}

/// Sveltos' profile for its parents of `kind` (`ClusterProfile`, `Profile`): annotations
/// naming the parent's kind and name.
fn sveltos(kind: &str) -> Applier {
    Applier {
        name: Arc::from("sveltos"),
        parent_kind: format!("{kind}.config.projectsveltos.io"),
        parent_api_version: "config.projectsveltos.io/v1beta1".into(),
        markers: Markers::Keys {
            in_labels: false,
            name: SVELTOS_OWNER_NAME.into(),
            namespace_key: None,
            namespace: String::new(),
            kind_key: Some(SVELTOS_OWNER_KIND.into()),
        },
        // In a registered cluster Sveltos writes with the kubeconfig it was given,
        // `projectsveltos-sa` where its own script made it.
        users: ["addon-controller", "projectsveltos-sa"].map(String::from).to_vec(),
        // Not known from its source: its users only.
        field_managers: Vec::new(),
        intent: IntentRule::Generation,
        target_cluster: TargetCluster::Any,
    }
}

/// Which parent an object's markers name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The profile, an index into [`Appliers::profiles`].
    pub profile: u16,
    /// The parent's namespace; empty for a cluster-scoped parent.
    pub namespace: Arc<str>,
    /// The parent's name.
    pub name: Arc<str>,
    /// Named only by a label that other tools set too (Argo CD's `app.kubernetes.io/instance`,
    /// also Helm's): a member only when that parent is known.
    pub weak: bool,
}

/// What the object on which markers sit is.
pub struct Member<'a> {
    /// The object's apiVersion.
    pub api_version: &'a str,
    /// The object's kind.
    pub kind: &'a str,
    /// The object's namespace; empty when cluster-scoped.
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
}

impl Applier {
    /// Whether a parent is found by name alone, whatever its namespace: the markers name no
    /// namespace and the profile fixes none (Sveltos' namespaced Profile; a cluster-scoped
    /// parent has none anyway).
    pub fn parent_by_name_alone(&self) -> bool {
        matches!(&self.markers, Markers::Keys { namespace_key: None, namespace, .. } if namespace.is_empty())
    }

    /// The parent's `Kind` alone.
    pub fn parent_kind_name(&self) -> &str {
        self.parent_kind.split_once('.').map_or(&self.parent_kind, |(k, _)| k)
    }

    /// Whether a request naming `manager` as its field manager is this applier's.
    pub fn is_field_manager(&self, manager: &str) -> bool {
        self.field_managers.iter().any(|m| m == manager)
    }

    /// Whether `user` is one of the applier's known users.
    pub fn is_user(&self, user: &str) -> bool {
        self.users.iter().any(|u| {
            u == user
                || (!u.contains(':')
                    && user
                        .strip_prefix("system:serviceaccount:")
                        .and_then(|rest| rest.split_once(':'))
                        .is_some_and(|(_, sa)| sa == u))
        })
    }

    /// The parent that this profile's markers on `member` name, if any.
    fn parent<'a>(
        &self,
        member: &Member<'_>,
        label: &impl Fn(&str) -> Option<&'a str>,
        annotation: &impl Fn(&str) -> Option<&'a str>,
    ) -> Option<(Arc<str>, Arc<str>, bool)> {
        match &self.markers {
            Markers::Keys { in_labels, name, namespace_key, namespace, kind_key } => {
                let get = |k: &str| if *in_labels { label(k) } else { annotation(k) };
                let parent = get(name).filter(|n| !n.is_empty())?;
                if let Some(kk) = kind_key {
                    if get(kk) != Some(self.parent_kind_name()) {
                        return None;
                    }
                }
                let ns = match namespace_key {
                    Some(k) => get(k).filter(|n| !n.is_empty())?,
                    None => namespace.as_str(),
                };
                Some((Arc::from(ns), Arc::from(parent), false))
            }
            Markers::ArgoCd { namespace } => match annotation(ARGO_TRACKING_ID) {
                // An annotation that names another object was copied there: not membership.
                Some(id) => {
                    argo_tracking(id, member, namespace).map(|(ns, app)| (Arc::from(ns), Arc::from(app), false))
                }
                None => label(ARGO_INSTANCE_LABEL)
                    .filter(|v| !v.is_empty())
                    .map(|app| (Arc::from(namespace.as_str()), Arc::from(app), true)),
            },
        }
    }
}

/// Argo CD's tracking id, `<app>:<group>/<kind>:<namespace>/<name>` (`<appNamespace>_<app>`
/// for an Application outside Argo's namespace): the Application's namespace and name when
/// the rest names `member` itself.
pub fn argo_tracking<'a>(id: &'a str, member: &Member<'_>, argo_namespace: &'a str) -> Option<(&'a str, &'a str)> {
    let (app, rest) = id.split_once(':')?;
    let (gk, nsn) = rest.split_once(':')?;
    let (group, kind) = gk.split_once('/')?;
    let (ns, name) = nsn.split_once('/')?;
    let member_group = member.api_version.split_once('/').map_or("", |(g, _)| g);
    if group != member_group || kind != member.kind || ns != member.namespace || name != member.name || app.is_empty() {
        return None;
    }
    Some(match app.split_once('_') {
        Some((app_ns, app)) if !app_ns.is_empty() && !app.is_empty() => (app_ns, app),
        _ => (argo_namespace, app),
    })
}

/// The appliers of a pipeline: the built-in profiles, then its own `[[applier]]` entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appliers {
    /// The profiles, built-in first; a [`Membership`]'s `profile` indexes this.
    pub profiles: Vec<Applier>,
}

impl Default for Appliers {
    fn default() -> Self {
        Appliers { profiles: builtin() }
    }
}

impl Appliers {
    /// Whether `manager` is the field manager of any profile (the others are not kept).
    pub fn knows_field_manager(&self, manager: &str) -> bool {
        self.profiles.iter().any(|p| p.is_field_manager(manager))
    }

    /// The first profile whose markers `member` carries, and the parent they name.
    pub fn membership<'a>(
        &self,
        member: &Member<'_>,
        label: impl Fn(&str) -> Option<&'a str>,
        annotation: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<Membership> {
        self.profiles.iter().enumerate().find_map(|(i, p)| {
            p.parent(member, &label, &annotation).map(|(namespace, name, weak)| Membership {
                profile: i as u16,
                namespace,
                name,
                weak,
            })
        })
    }

    /// The profile whose parents are of kind `kind_key`.
    pub fn of_parent(&self, kind_key: &str) -> Option<u16> {
        self.profiles.iter().position(|p| p.parent_kind == kind_key).map(|i| i as u16)
    }

    /// The profile at index `profile` (as [`Membership::profile`] and [`Appliers::of_parent`] give).
    pub fn get(&self, profile: u16) -> Option<&Applier> {
        self.profiles.get(profile as usize)
    }

    /// Annotation keys that the pipeline's own profiles read (the decoder keeps them).
    pub fn annotation_keys(&self) -> Vec<String> {
        self.profiles
            .iter()
            .filter_map(|p| match &p.markers {
                Markers::Keys { in_labels: false, name, namespace_key, kind_key, .. } => {
                    Some([Some(name.clone()), namespace_key.clone(), kind_key.clone()])
                }
                _ => None,
            })
            .flatten()
            .flatten()
            .collect()
    }
}

/// `[[applier]]`: an applier of the pipeline's own (DESIGN §1.9), beside the built-in
/// profiles (Flux, Argo CD, Sveltos). Its parents' intent is their generation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplierConfig {
    /// The profile's name (written in enriched events). Required.
    pub name: String,
    /// The parent's kind key, `Kind.group`. Required.
    pub parent_kind: String,
    /// The parent's apiVersion, `group/version`. Required.
    pub parent_api_version: String,
    /// The label holding the parent's name (or `name_annotation`; exactly one).
    #[serde(default)]
    pub name_label: Option<String>,
    /// The annotation holding the parent's name (or `name_label`; exactly one).
    #[serde(default)]
    pub name_annotation: Option<String>,
    /// The label (or annotation, where the name is one) holding the parent's namespace.
    /// Default: `parent_namespace`.
    #[serde(default)]
    pub namespace_key: Option<String>,
    /// The parent's namespace when no key holds it. Default: empty, a cluster-scoped parent.
    #[serde(default)]
    pub parent_namespace: String,
    /// The applier's users (full user names, or service account names). Default: none.
    #[serde(default)]
    pub users: Vec<String>,
    /// The field managers its requests name (`?fieldManager=`): the applier whoever the
    /// request acts as. Default: none.
    #[serde(default)]
    pub field_managers: Vec<String>,
    /// The dotted path in the parent's spec naming the cluster it applies its members to
    /// (as this instance names its clusters). Default: its own cluster.
    #[serde(default)]
    pub target_cluster_field: Option<String>,
    /// Its parents apply to any cluster (found in whichever cluster has them). Default: false.
    #[serde(default)]
    pub any_cluster: bool,
}

impl ApplierConfig {
    /// What is wrong with the entry, each as (field, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.name.trim().is_empty() {
            out.push(("name", "must not be empty".to_string()));
        }
        if !self.parent_kind.contains('.') || self.parent_kind.starts_with('.') || self.parent_kind.ends_with('.') {
            out.push((
                "parent_kind",
                format!("{:?} is not a kind key like Bundle.deploy.example.com", self.parent_kind),
            ));
        }
        if !self.parent_api_version.contains('/') {
            out.push((
                "parent_api_version",
                format!("{:?} is not group/version like deploy.example.com/v1", self.parent_api_version),
            ));
        }
        match (&self.name_label, &self.name_annotation) {
            (Some(_), Some(_)) => out.push(("name_label", "give name_label or name_annotation, not both".to_string())),
            (None, None) => {
                out.push(("name_label", "is required (or name_annotation): the key naming the parent".to_string()))
            }
            (Some(k), None) | (None, Some(k)) if k.is_empty() => {
                out.push(("name_label", "must not be empty".to_string()))
            }
            _ => {}
        }
        if self.field_managers.iter().any(|m| m.trim().is_empty()) {
            out.push(("field_managers", "must not hold an empty name".to_string()));
        }
        if self.namespace_key.as_deref().is_some_and(str::is_empty) {
            out.push(("namespace_key", "must not be empty".to_string()));
        }
        match &self.target_cluster_field {
            Some(_) if self.any_cluster => {
                out.push(("target_cluster_field", "give target_cluster_field or any_cluster, not both".to_string()))
            }
            Some(f) if f.split('.').any(str::is_empty) => {
                out.push(("target_cluster_field", format!("{f:?} is not a dotted path like destination.name")))
            }
            _ => {}
        }
        out
    }

    /// The profile (checked with [`ApplierConfig::problems`] first).
    pub fn profile(&self) -> Applier {
        Applier {
            name: Arc::from(self.name.as_str()),
            parent_kind: self.parent_kind.clone(),
            parent_api_version: self.parent_api_version.clone(),
            markers: Markers::Keys {
                in_labels: self.name_label.is_some(),
                name: self.name_label.clone().or_else(|| self.name_annotation.clone()).unwrap_or_default(),
                namespace_key: self.namespace_key.clone(),
                namespace: self.parent_namespace.clone(),
                kind_key: None,
            },
            users: self.users.clone(),
            field_managers: self.field_managers.clone(),
            intent: IntentRule::Generation,
            target_cluster: match (&self.target_cluster_field, self.any_cluster) {
                (Some(f), _) => TargetCluster::Field(f.split('.').map(str::to_string).collect()),
                (None, true) => TargetCluster::Any,
                (None, false) => TargetCluster::Own,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member<'a>(api_version: &'a str, kind: &'a str, namespace: &'a str, name: &'a str) -> Member<'a> {
        Member { api_version, kind, namespace, name }
    }

    #[test]
    fn argo_tracking_id_counts_only_on_the_object_it_names() {
        let d = member("apps/v1", "Deployment", "shop", "web");
        assert_eq!(argo_tracking("shop:apps/Deployment:shop/web", &d, "argocd"), Some(("argocd", "shop")));
        assert_eq!(argo_tracking("team_shop:apps/Deployment:shop/web", &d, "argocd"), Some(("team", "shop")));
        assert_eq!(argo_tracking("shop:apps/Deployment:shop/other", &d, "argocd"), None, "names another object");
        assert_eq!(argo_tracking("shop:/ConfigMap:shop/web", &d, "argocd"), None, "another kind");
        let cm = member("v1", "ConfigMap", "shop", "cfg");
        assert_eq!(argo_tracking("shop:/ConfigMap:shop/cfg", &cm, "argocd"), Some(("argocd", "shop")));
        assert_eq!(argo_tracking("garbage", &cm, "argocd"), None);
    }

    #[test]
    fn builtin_markers_name_their_parents() {
        let a = Appliers::default();
        let d = member("apps/v1", "Deployment", "shop", "web");
        let labels =
            [("kustomize.toolkit.fluxcd.io/name", "apps"), ("kustomize.toolkit.fluxcd.io/namespace", "flux-system")];
        let m = a.membership(&d, |k| labels.iter().find(|(l, _)| *l == k).map(|(_, v)| *v), |_| None).unwrap();
        assert_eq!(
            (&*a.profiles[m.profile as usize].name, &*m.namespace, &*m.name, m.weak),
            ("flux-kustomize", "flux-system", "apps", false)
        );
        let only_name = [("kustomize.toolkit.fluxcd.io/name", "apps")];
        assert!(
            a.membership(&d, |k| only_name.iter().find(|(l, _)| *l == k).map(|(_, v)| *v), |_| None).is_none(),
            "name and namespace both"
        );
        let inst = [(ARGO_INSTANCE_LABEL, "shop")];
        let m = a.membership(&d, |k| inst.iter().find(|(l, _)| *l == k).map(|(_, v)| *v), |_| None).unwrap();
        assert!(m.weak, "the instance label alone is weak");
        let copied = [(ARGO_TRACKING_ID, "shop:apps/Deployment:shop/other")];
        assert!(
            a.membership(
                &d,
                |k| inst.iter().find(|(l, _)| *l == k).map(|(_, v)| *v),
                |k| copied.iter().find(|(l, _)| *l == k).map(|(_, v)| *v)
            )
            .is_none(),
            "a tracking id of another object is no membership, and no fall-back to the label"
        );
        let sveltos = [(SVELTOS_OWNER_KIND, "ClusterProfile"), (SVELTOS_OWNER_NAME, "addons")];
        let m = a.membership(&d, |_| None, |k| sveltos.iter().find(|(l, _)| *l == k).map(|(_, v)| *v)).unwrap();
        assert_eq!((&*a.profiles[m.profile as usize].name, &*m.namespace, &*m.name), ("sveltos", "", "addons"));
        let helm = [(HELM_RELEASE_NAME, "shop"), (HELM_RELEASE_NAMESPACE, "shop")];
        assert!(
            a.membership(&d, |_| None, |k| helm.iter().find(|(l, _)| *l == k).map(|(_, v)| *v)).is_none(),
            "a Helm release is no applier"
        );
    }

    #[test]
    fn known_users_match_by_name_or_service_account() {
        let a = &builtin()[0];
        assert!(a.is_user("system:serviceaccount:flux-system:kustomize-controller"));
        assert!(!a.is_user("system:serviceaccount:flux-system:helm-controller"));
        assert!(!a.is_user("kustomize-controller-fake"));
    }

    #[test]
    fn applier_entries_are_checked() {
        let good = ApplierConfig {
            name: "bundles".into(),
            parent_kind: "Bundle.deploy.example.com".into(),
            parent_api_version: "deploy.example.com/v1".into(),
            name_label: Some("deploy.example.com/bundle".into()),
            name_annotation: None,
            namespace_key: None,
            parent_namespace: "deploy".into(),
            users: vec!["bundle-controller".into()],
            field_managers: vec!["bundle-controller".into()],
            target_cluster_field: None,
            any_cluster: false,
        };
        assert!(good.problems().is_empty());
        assert!(good.profile().is_field_manager("bundle-controller"));
        let blank = ApplierConfig { field_managers: vec![" ".into()], ..good.clone() };
        assert_eq!(blank.problems().iter().map(|(f, _)| *f).collect::<Vec<_>>(), ["field_managers"]);
        assert_eq!(good.profile().target_cluster, TargetCluster::Own);
        let remote = ApplierConfig { target_cluster_field: Some("target.cluster".into()), ..good.clone() };
        assert_eq!(remote.profile().target_cluster, TargetCluster::Field(vec!["target".into(), "cluster".into()]));
        let both = ApplierConfig { any_cluster: true, ..remote.clone() };
        assert_eq!(both.problems().iter().map(|(f, _)| *f).collect::<Vec<_>>(), ["target_cluster_field"]);
        let hollow = ApplierConfig { target_cluster_field: Some("target.".into()), ..good.clone() };
        assert_eq!(hollow.problems().len(), 1);
        let bad = ApplierConfig {
            parent_kind: "Bundle".into(),
            parent_api_version: "v1".into(),
            name_label: None,
            ..good.clone()
        };
        let fields: Vec<&str> = bad.problems().iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, ["parent_kind", "parent_api_version", "name_label"]);
        let p = good.profile();
        assert_eq!(
            p.markers,
            Markers::Keys {
                in_labels: true,
                name: "deploy.example.com/bundle".into(),
                namespace_key: None,
                namespace: "deploy".into(),
                kind_key: None
            }
        );
    }
}
