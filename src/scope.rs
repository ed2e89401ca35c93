//! Scope: which audit events a pipeline looks at, by API group, resource, namespace and the
//! object's labels. Events out of scope are counted as ignored (`excluded`) and feed no state,
//! so excluding a parent's kind also makes its children `unknown-parent`: scope by what
//! cannot be a parent (leases, events) or by whole trees (namespaces, labels).

use std::collections::HashSet;

use crate::decode::AuditEvent;

/// One requirement of an equality-based label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` (or `key==value`).
    Equals(String, String),
    /// `key!=value`: true also when the label is absent, as in Kubernetes.
    NotEquals(String, String),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    NotExists(String),
}

/// An equality-based label selector (`app=web,tier!=cache,!canary`); all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses a comma-separated selector; set-based forms (`in`, `notin`) are not supported.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(key(k)?, value(v)?)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(key(k)?, value(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(key(k)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("{part:?}: only equality-based requirements (k=v, k!=v, k, !k) are supported"));
            } else {
                Requirement::Exists(key(part)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector has no requirement (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether labels, looked up by key with `labels`, meet every requirement.
    pub fn matches<'a>(&self, labels: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => labels(k) != Some(v.as_str()),
            Requirement::Exists(k) => labels(k).is_some(),
            Requirement::NotExists(k) => labels(k).is_none(),
        })
    }
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let valid = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(k.to_string())
    } else {
        Err(format!("{k:?} is not a label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
}

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
    fn selector_forms() {
        let s = LabelSelector::parse("app=web, tier!=cache,canary,!debug,env==prod").unwrap();
        assert_eq!(s.0.len(), 5);
        let labels = [("app", "web"), ("canary", ""), ("env", "prod")];
        let get = |k: &str| labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v);
        assert!(s.matches(get));
        assert!(LabelSelector::parse("app in (a,b)").is_err());
        assert!(LabelSelector::parse("=x").is_err());
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
