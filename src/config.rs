//! Options of the model: which fields do not count as a spec change, how each kind of parent
//! shows that it has finished initializing, and what in its status shows its controller still at
//! work ([`progress`]). Pipelines set these; the defaults here are what `replay` and the embedded
//! pipeline use.

pub mod appliers;
pub mod labels;
pub mod progress;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::intern::FastBuild;
use crate::redact::Sensitive;
use labels::LabelSelector;
use progress::{Builtin, Comparison, ConditionReason, KindProgress};

/// How a kind of parent shows it has initialized (DESIGN §1.4). Any signal that holds marks
/// the parent initialized for good (a high-water mark).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LifecycleSignal {
    /// Condition `Initialized=True`.
    InitializedCondition,
    /// Condition `Ready=True`.
    ReadyCondition,
    /// An observed generation exists and `Available=True` (Deployments).
    AvailableCondition,
    /// Annotation `kausality.io/phase: initialized`.
    PhaseAnnotation,
    /// The controller reported observing the current generation: for kinds without a
    /// ready-like condition (ReplicaSet, StatefulSet, DaemonSet, ReplicationController).
    ObservedGeneration,
    /// The status carries `startTime`: a Job, whose controller writes it at its first status
    /// write, when it starts running the Job.
    StartTime,
    /// Any status write: a CronJob, whose controller has nothing else to report before its
    /// schedule first comes.
    StatusWrite,
}

/// The signals of DESIGN §1.4, for every kind without its own rule.
pub const DEFAULT_LIFECYCLE: &[LifecycleSignal] = &[
    LifecycleSignal::InitializedCondition,
    LifecycleSignal::ReadyCondition,
    LifecycleSignal::AvailableCondition,
    LifecycleSignal::PhaseAnnotation,
];

/// Kinds that have no ready-like condition: their controller's first report of the current
/// generation ends initialization.
const OBSERVED_GENERATION_KINDS: &[&str] =
    &["ReplicaSet.apps", "StatefulSet.apps", "DaemonSet.apps", "ReplicationController"];

/// Kinds with neither a ready-like condition nor an observed generation (DESIGN §1.4), and the
/// signal that ends their initialization: a Job at its controller's first status write (it
/// carries `startTime`), a CronJob at its controller's first status write.
const STATUS_KINDS: &[(&str, LifecycleSignal)] =
    &[("Job.batch", LifecycleSignal::StartTime), ("CronJob.batch", LifecycleSignal::StatusWrite)];

/// The model's options ([`crate::classify`] and [`crate::write`] read them); `Default` is what
/// `replay` and the embedded pipeline use.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Field paths left out of the spec hash, by kind key (`Kind.group`, or `Kind` for the
    /// core group): e.g. `spec.replicas` of Deployments that an HPA scales.
    pub ignored_fields: HashMap<String, Vec<Vec<String>>>,
    /// Lifecycle signals by kind key; kinds not listed use [`DEFAULT_LIFECYCLE`].
    pub lifecycle: HashMap<String, Vec<LifecycleSignal>>,
    /// Signals of work in progress by kind key (DESIGN §1.3); by default the built-in ones of
    /// Deployment, StatefulSet, DaemonSet and ReplicaSet. Kinds not listed finish a generation
    /// when it is observed.
    progress: HashMap<String, KindProgress, FastBuild>,
    /// The rule before DESIGN §1.3 was revised: a generation is finished as soon as it is
    /// observed, whatever its status shows. Default: `false`.
    pub observed_is_finished: bool,
    /// Kind keys whose field changes are not tracked for reverts (DESIGN §1.8): their origin
    /// writes and reverts are still named, without fields. Default: `["Pod"]` (pods are the
    /// bulk of all writes, their spec is nearly immutable, and a controller replaces a pod
    /// instead of reverting an edit of it: keeping their contents would only crowd the others
    /// out of the cache of recent contents).
    pub untracked_field_kinds: Vec<String>,
    /// Platform policies (DESIGN §1.7), in the order of the pipeline file.
    pub policies: Vec<PlatformPolicy>,
    /// The distinct label selectors of the policies: an object keeps, as one bit per selector,
    /// which of them its labels matched at its latest write (only what the selectors need,
    /// never the labels themselves). At most 64.
    pub policy_selectors: Vec<LabelSelector>,
    /// Fields whose values are never kept (a Secret's `data`, passwords, tokens, and what a
    /// pipeline's `[[sensitive]]` adds): an object's content is redacted before anything keeps
    /// it ([`crate::redact`]).
    pub sensitive: Sensitive,
    /// The appliers whose markers make an object a member of a parent without an
    /// ownerReference (DESIGN §1.9): the built-in profiles, then the pipeline's `[[applier]]`.
    pub appliers: appliers::Appliers,
}

/// What a platform policy does to the drift it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyAction {
    /// Approves the drift (`resolution: approved`).
    Approve,
    /// Rejects the drift (`resolution: rejected`); a matching rejection wins over an approval.
    Reject,
}

/// A named rule of the platform that approves or rejects drift (DESIGN §1.7). Every criterion
/// given must hold; an empty list or an absent value matches anything.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformPolicy {
    /// The policy's name, written as the enriched event's `policy`.
    pub name: Arc<str>,
    /// Whether it approves or rejects.
    pub action: PolicyAction,
    /// Kind keys of the parent (`Kind.group`, or `Kind` for the core group).
    pub parent_kinds: Vec<String>,
    /// Kind keys of the drifting child.
    pub child_kinds: Vec<String>,
    /// Users: the drift's actor (the controller) must be one of them.
    pub controllers: Vec<String>,
    /// Namespaces of the drifting child.
    pub namespaces: Vec<String>,
    /// Index into [`ModelConfig::policy_selectors`] of the selector the parent's labels must
    /// match.
    pub parent_selector: Option<usize>,
    /// Whether the drift reverts a person's write (DESIGN §1.8).
    pub reverts_person: Option<bool>,
}

/// How many distinct label selectors the policies may use (one bit each per object).
pub const MAX_POLICY_SELECTORS: usize = 64;

impl Default for ModelConfig {
    fn default() -> Self {
        let mut lifecycle = HashMap::new();
        for kind in OBSERVED_GENERATION_KINDS {
            let mut signals = DEFAULT_LIFECYCLE.to_vec();
            signals.push(LifecycleSignal::ObservedGeneration);
            lifecycle.insert((*kind).to_string(), signals);
        }
        for &(kind, signal) in STATUS_KINDS {
            let mut signals = DEFAULT_LIFECYCLE.to_vec();
            signals.push(signal);
            lifecycle.insert(kind.to_string(), signals);
        }
        let progress = Builtin::KINDS
            .iter()
            .map(|&(kind, b)| (kind.to_string(), KindProgress { builtin: Some(b), ..KindProgress::default() }))
            .collect();
        ModelConfig {
            ignored_fields: HashMap::new(),
            lifecycle,
            progress,
            observed_is_finished: false,
            untracked_field_kinds: vec!["Pod".to_string()],
            policies: Vec::new(),
            policy_selectors: Vec::new(),
            sensitive: Sensitive::default(),
            appliers: appliers::Appliers::default(),
        }
    }
}

impl ModelConfig {
    /// Leaves `path` (dotted, e.g. `spec.replicas`) out of the spec hash of `kind_key`.
    pub fn ignore_field(&mut self, kind_key: &str, path: &str) {
        self.ignored_fields
            .entry(kind_key.to_string())
            .or_default()
            .push(path.split('.').map(str::to_string).collect());
    }

    /// The field paths (split at dots) left out of `kind_key`'s spec hash; `None` when none are.
    pub fn ignored(&self, kind_key: &str) -> Option<&[Vec<String>]> {
        self.ignored_fields.get(kind_key).map(Vec::as_slice)
    }

    /// Adds a platform policy; its label selector joins the distinct selectors. Fails past
    /// [`MAX_POLICY_SELECTORS`] distinct selectors.
    pub fn add_policy(
        &mut self,
        mut policy: PlatformPolicy,
        parent_labels: Option<LabelSelector>,
    ) -> Result<(), String> {
        policy.parent_selector = match parent_labels.filter(|s| !s.is_empty()) {
            None => None,
            Some(sel) => Some(match self.policy_selectors.iter().position(|s| *s == sel) {
                Some(i) => i,
                None if self.policy_selectors.len() < MAX_POLICY_SELECTORS => {
                    self.policy_selectors.push(sel);
                    self.policy_selectors.len() - 1
                }
                None => return Err(format!("more than {MAX_POLICY_SELECTORS} distinct label selectors")),
            }),
        };
        self.policies.push(policy);
        Ok(())
    }

    /// Which policy selectors the labels match, one bit each.
    pub fn selector_bits<'a>(&self, labels: impl Fn(&str) -> Option<&'a str>) -> u64 {
        self.policy_selectors
            .iter()
            .enumerate()
            .filter(|(_, s)| s.matches(&labels))
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }

    /// Whether the field changes of `kind_key` are tracked for reverts.
    pub fn tracks_fields(&self, kind_key: &str) -> bool {
        !self.untracked_field_kinds.iter().any(|k| k == kind_key)
    }

    /// The signals that end `kind_key`'s initialization (DESIGN §1.4); [`DEFAULT_LIFECYCLE`] for a
    /// kind not configured.
    pub fn lifecycle_signals(&self, kind_key: &str) -> &[LifecycleSignal] {
        self.lifecycle.get(kind_key).map_or(DEFAULT_LIFECYCLE, Vec::as_slice)
    }

    /// What shows `kind_key`'s controller at work; `None` when nothing can (no signal, or the
    /// old rule: observed is finished).
    pub fn progress(&self, kind_key: &str) -> Option<&KindProgress> {
        if self.observed_is_finished {
            return None;
        }
        self.progress.get(kind_key).filter(|p| !p.is_empty())
    }

    /// Adds signals of work in progress to a kind; `keep_builtin: false` turns the built-in
    /// signals of a native kind off.
    pub fn add_progress(
        &mut self,
        kind_key: &str,
        conditions: Vec<ConditionReason>,
        fields: Vec<Comparison>,
        keep_builtin: bool,
    ) {
        let p = self.progress.entry(kind_key.to_string()).or_default();
        if !keep_builtin {
            p.builtin = None;
        }
        p.conditions.extend(conditions);
        p.fields.extend(fields);
    }

    /// Adds comparisons that say `kind_key`'s spec asks for no progress: while one holds, none
    /// of the kind's signals (built-in or added) shows work in progress.
    pub fn add_paused(&mut self, kind_key: &str, paused: Vec<Comparison>) {
        self.progress.entry(kind_key.to_string()).or_default().paused.extend(paused);
    }
}

/// The key a kind is configured under: `Kind.group`, or `Kind` for the core group.
pub fn kind_key(api_version: &str, kind: &str) -> String {
    kind_key_in(api_version, kind, &mut [0; KIND_KEY_BYTES]).into_owned()
}

/// Room for a kind key written by [`kind_key_in`] without an allocation.
pub const KIND_KEY_BYTES: usize = 128;

/// [`kind_key`] written into `buf` when it fits (the key of every object decoded: no
/// allocation for it), a new `String` when it does not.
pub fn kind_key_in<'k>(api_version: &str, kind: &'k str, buf: &'k mut [u8; KIND_KEY_BYTES]) -> Cow<'k, str> {
    match api_version.split_once('/') {
        Some((group, _)) if !group.is_empty() => {
            let len = kind.len() + 1 + group.len();
            if len > buf.len() {
                return Cow::Owned(format!("{kind}.{group}"));
            }
            buf[..kind.len()].copy_from_slice(kind.as_bytes());
            buf[kind.len()] = b'.';
            buf[kind.len() + 1..len].copy_from_slice(group.as_bytes());
            Cow::Borrowed(std::str::from_utf8(&buf[..len]).expect("two strings and a dot"))
        }
        _ => Cow::Borrowed(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_key_is_the_same_in_a_buffer_or_not_whatever_its_length() {
        let long_group = format!("{}.example.com/v1", "g".repeat(KIND_KEY_BYTES));
        for (api_version, kind, key) in [
            ("apps/v1", "Deployment", "Deployment.apps"),
            ("v1", "Pod", "Pod"),
            ("/v1", "Odd", "Odd"),
            ("", "", ""),
            ("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "Kustomization.kustomize.toolkit.fluxcd.io"),
        ] {
            assert_eq!(kind_key(api_version, kind), key);
            assert_eq!(kind_key_in(api_version, kind, &mut [0; KIND_KEY_BYTES]), key);
        }
        let mut buf = [0; KIND_KEY_BYTES];
        let long = kind_key_in(&long_group, "Widget", &mut buf);
        assert!(matches!(long, Cow::Owned(_)), "past the buffer: a string of its own");
        assert_eq!(long, format!("Widget.{}.example.com", "g".repeat(KIND_KEY_BYTES)));
        let exact = "k".repeat(KIND_KEY_BYTES - 2);
        assert_eq!(kind_key_in("a/v1", &exact, &mut [0; KIND_KEY_BYTES]), format!("{exact}.a"), "filling it exactly");
    }
}
