//! The output's vocabulary: the class of a classified mutation and how a drift was resolved.
//! The model decides them ([`crate::classify`]); they live here, with the record that carries
//! them, so that the output depends on nothing of the model.

/// The class of a classified mutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// The parent's controller changed a child while the parent is stable.
    Drift,
    /// The controller is catching up with a change of the parent's spec.
    Expected,
    /// Someone other than the controller: a new causal origin.
    Origin,
    /// No controller ownerReference: the top of a tree.
    Unowned,
    /// The parent has not finished initializing: not judged.
    Initializing,
    /// The parent is being (or was) deleted: teardown, not judged.
    Deleting,
    /// The controller cannot be told apart yet.
    Undetermined,
    /// The parent's state has never been seen.
    UnknownParent,
}

impl Class {
    /// Every class, in a fixed order: the history store numbers classes by it (`classes.id`).
    pub const ALL: [Class; 8] = [
        Class::Drift,
        Class::Expected,
        Class::Origin,
        Class::Unowned,
        Class::Initializing,
        Class::Deleting,
        Class::Undetermined,
        Class::UnknownParent,
    ];

    /// As the enriched event writes it (kebab-case: `unknown-parent`).
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Drift => "drift",
            Class::Expected => "expected",
            Class::Origin => "origin",
            Class::Unowned => "unowned",
            Class::Initializing => "initializing",
            Class::Deleting => "deleting",
            Class::Undetermined => "undetermined",
            Class::UnknownParent => "unknown-parent",
        }
    }
}

/// How a drift was resolved: by the parent's annotations or a platform policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolution {
    /// An approval covers the drift: the parent's annotation or a platform policy.
    Approved,
    /// A rejection covers the drift: the parent's annotation or a platform policy (a rejection
    /// wins over an approval).
    Rejected,
    /// Neither an approval nor a rejection covers the drift.
    Unresolved,
}

impl Resolution {
    /// As the enriched event writes it (`approved`, `rejected`, `unresolved`).
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Approved => "approved",
            Resolution::Rejected => "rejected",
            Resolution::Unresolved => "unresolved",
        }
    }
}
