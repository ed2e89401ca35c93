//! Platform policies (DESIGN §1.7): named rules of the pipeline that approve or reject drift by
//! parent kind, child kind, controller, namespace, the parent's labels and whether the drift
//! reverts a person's write. The parent's own annotations win over them; among the policies a
//! rejection wins over an approval, and within each action the first in the file names the
//! resolution.

use crate::config::{PlatformPolicy, PolicyAction};

/// What a platform policy is matched against.
#[derive(Clone, Copy, Debug)]
pub struct DriftFacts<'a> {
    /// Kind key of the parent (`Kind.group`, `Kind` for the core group).
    pub parent_kind: &'a str,
    /// Kind key of the drifting child.
    pub child_kind: &'a str,
    /// The drift's actor: the controller.
    pub controller: &'a str,
    /// The child's namespace (empty for a cluster-scoped child).
    pub namespace: &'a str,
    /// Which policy selectors the parent's labels matched at its latest write.
    pub parent_selectors: u64,
    /// The drift reverts at least one person's write.
    pub reverts_person: bool,
}

fn listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|v| v == value)
}

/// Whether every criterion of `p` holds for the drift.
pub fn matches(p: &PlatformPolicy, d: &DriftFacts<'_>) -> bool {
    listed(&p.parent_kinds, d.parent_kind)
        && listed(&p.child_kinds, d.child_kind)
        && listed(&p.controllers, d.controller)
        && listed(&p.namespaces, d.namespace)
        && p.parent_selector.is_none_or(|i| d.parent_selectors & (1 << i) != 0)
        && p.reverts_person.is_none_or(|want| want == d.reverts_person)
}

/// The policy that resolves the drift: the first matching rejection, else the first matching
/// approval; `None` when no policy matches.
pub fn resolve<'p>(policies: &'p [PlatformPolicy], d: &DriftFacts<'_>) -> Option<&'p PlatformPolicy> {
    let first = |action| policies.iter().find(|p| p.action == action && matches(p, d));
    first(PolicyAction::Reject).or_else(|| first(PolicyAction::Approve))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, action: PolicyAction) -> PlatformPolicy {
        PlatformPolicy {
            name: name.into(),
            action,
            parent_kinds: Vec::new(),
            child_kinds: Vec::new(),
            controllers: Vec::new(),
            namespaces: Vec::new(),
            parent_selector: None,
            reverts_person: None,
        }
    }

    const DRIFT: DriftFacts<'static> = DriftFacts {
        parent_kind: "ReplicaSet.apps",
        child_kind: "Pod",
        controller: "system:serviceaccount:kube-system:replicaset-controller",
        namespace: "shop",
        parent_selectors: 0b10,
        reverts_person: true,
    };

    #[test]
    fn each_criterion_must_hold_and_an_empty_one_matches_anything() {
        let any = policy("any", PolicyAction::Approve);
        assert!(matches(&any, &DRIFT));
        type Case = (fn(&mut PlatformPolicy), bool);
        let cases: [Case; 12] = [
            (|p| p.parent_kinds = vec!["ReplicaSet.apps".into(), "StatefulSet.apps".into()], true),
            (|p| p.parent_kinds = vec!["ReplicaSet".into()], false),
            (|p| p.child_kinds = vec!["Pod".into()], true),
            (|p| p.child_kinds = vec!["ConfigMap".into()], false),
            (|p| p.controllers = vec![DRIFT.controller.into()], true),
            (|p| p.controllers = vec!["system:serviceaccount:kube-system:deployment-controller".into()], false),
            (|p| p.namespaces = vec!["shop".into()], true),
            (|p| p.namespaces = vec!["other".into()], false),
            (|p| p.parent_selector = Some(1), true),
            (|p| p.parent_selector = Some(0), false),
            (|p| p.reverts_person = Some(true), true),
            (|p| p.reverts_person = Some(false), false),
        ];
        for (i, (set, want)) in cases.iter().enumerate() {
            let mut p = any.clone();
            set(&mut p);
            assert_eq!(matches(&p, &DRIFT), *want, "case {i}: {p:?}");
        }
        let cluster_scoped = DriftFacts { namespace: "", ..DRIFT };
        let mut in_shop = any.clone();
        in_shop.namespaces = vec!["shop".into()];
        assert!(!matches(&in_shop, &cluster_scoped));
    }

    #[test]
    fn a_rejection_wins_and_the_first_of_each_action_names_it() {
        let mut narrow_approve = policy("narrow", PolicyAction::Approve);
        narrow_approve.child_kinds = vec!["Pod".into()];
        let broad_approve = policy("broad", PolicyAction::Approve);
        let mut reject_person = policy("no-person-reverts", PolicyAction::Reject);
        reject_person.reverts_person = Some(true);
        let mut reject_other = policy("other-ns", PolicyAction::Reject);
        reject_other.namespaces = vec!["other".into()];
        let all = [narrow_approve.clone(), broad_approve.clone(), reject_other.clone(), reject_person.clone()];
        assert_eq!(
            resolve(&all, &DRIFT).map(|p| &*p.name),
            Some("no-person-reverts"),
            "a later rejection beats an earlier approval"
        );
        let nobody = DriftFacts { reverts_person: false, ..DRIFT };
        assert_eq!(resolve(&all, &nobody).map(|p| &*p.name), Some("narrow"), "the first approval in order");
        let swapped = [broad_approve, narrow_approve];
        assert_eq!(resolve(&swapped, &nobody).map(|p| &*p.name), Some("broad"));
        assert_eq!(resolve(&[reject_other], &nobody), None);
        assert_eq!(resolve(&[], &DRIFT), None);
    }
}
