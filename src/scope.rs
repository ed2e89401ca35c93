//! Scope: which audit events a pipeline looks at, by API group, resource, namespace and the
//! object's labels. Events out of scope are counted as ignored (`excluded`) and feed no state,
//! so excluding a parent's kind also makes its children `unknown-parent`: scope by what
//! cannot be a parent (leases, events) or by whole trees (namespaces, labels).

use std::collections::HashSet;

pub use crate::config::labels::{LabelSelector, Requirement};
use crate::decode::AuditEvent;

/// Include/exclude lists; an empty include list includes everything.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// API groups to classify (`""` for the core group); empty: all.
    pub include_groups: HashSet<String>,
    /// API groups never classified.
    pub exclude_groups: HashSet<String>,
    /// Resources to classify (`deployments`); empty: all.
    pub include_resources: HashSet<String>,
    /// Resources never classified.
    pub exclude_resources: HashSet<String>,
    /// Applies to namespaced objects only: cluster-scoped objects (which may be parents, such
    /// as Crossplane composites) are never excluded by namespace.
    pub include_namespaces: HashSet<String>,
    /// Namespaces whose objects are never classified (namespaced objects only, as above).
    pub exclude_namespaces: HashSet<String>,
    /// The labels an object must have to be classified.
    pub labels: LabelSelector,
}

impl Scope {
    /// True when nothing is filtered (the common case skips all lookups).
    pub fn is_everything(&self) -> bool {
        self.include_groups.is_empty()
            && self.exclude_groups.is_empty()
            && self.include_resources.is_empty()
            && self.exclude_resources.is_empty()
            && self.include_namespaces.is_empty()
            && self.exclude_namespaces.is_empty()
            && self.labels.is_empty()
    }

    /// Is this event in scope? The core API group is named `""` or `core`.
    pub fn admits(&self, ev: &AuditEvent<'_>) -> bool {
        let oref = ev.object_ref.as_ref();
        let group = oref.and_then(|o| o.api_group.as_deref()).unwrap_or("");
        let group = if group.is_empty() { "core" } else { group };
        if !list_admits(&self.include_groups, &self.exclude_groups, group) {
            return false;
        }
        let resource = oref.and_then(|o| o.resource.as_deref()).unwrap_or("");
        if !list_admits(&self.include_resources, &self.exclude_resources, resource) {
            return false;
        }
        let namespace = oref.and_then(|o| o.namespace.as_deref()).unwrap_or("");
        if !namespace.is_empty() && !list_admits(&self.include_namespaces, &self.exclude_namespaces, namespace) {
            return false;
        }
        if !self.labels.is_empty() {
            // An event without a response object (a delete answered with a Status) is matched
            // against an empty label set.
            let labels = ev.response_object.as_ref().map(|o| &o.metadata.labels);
            let get = |k: &str| labels.and_then(|l| l.iter().find(|(lk, _)| lk == k)).map(|(_, v)| v.as_ref());
            return self.labels.matches(get);
        }
        true
    }
}

fn list_admits(include: &HashSet<String>, exclude: &HashSet<String>, v: &str) -> bool {
    (include.is_empty() || include.contains(v)) && !exclude.contains(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> AuditEvent<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn include_exclude_and_labels() {
        let e = r#"{"objectRef":{"apiGroup":"apps","resource":"deployments","namespace":"team-a"},"responseObject":{"metadata":{"labels":{"app":"noise"}}}}"#;
        let core = r#"{"objectRef":{"resource":"leases","namespace":"kube-system"}}"#;
        let cluster_scoped = r#"{"objectRef":{"apiGroup":"example.org","resource":"composites"}}"#;
        let mut s = Scope::default();
        assert!(s.is_everything() && s.admits(&ev(e)));
        s.exclude_resources.insert("leases".into());
        assert!(!s.admits(&ev(core)));
        s.include_namespaces.insert("team-b".into());
        assert!(!s.admits(&ev(e)));
        assert!(s.admits(&ev(cluster_scoped)), "namespace lists never exclude cluster-scoped objects");
        s.include_namespaces.clear();
        s.labels = LabelSelector::parse("app!=noise").unwrap();
        assert!(!s.admits(&ev(e)));
        s.labels = LabelSelector::default();
        s.include_groups.insert("core".into());
        assert!(!s.admits(&ev(e)));
    }
}
