//! Signals of work in progress (DESIGN §1.3): what in a parent's status says that its controller
//! is still carrying out the generation it reports as observed. A generation is finished at the
//! first write that reports it observed and shows none of these.
//!
//! The native workload kinds have built-in signals ([`Builtin`]); any kind can be given
//! conditions with reasons and field comparisons, written as short strings that the pipeline
//! file and `replay`'s flags share:
//! - a condition: `Type=Reason` (the condition `Type` has reason `Reason`);
//! - a comparison: `FIELD OP VALUE`, where `FIELD` is a dotted path under `spec.` or `status.`,
//!   `OP` one of `==`, `!=`, `<`, `<=`, `>`, `>=`, and `VALUE` another such path, a number,
//!   `true`/`false`, or a string (bare or in double quotes).
//!
//! A field that is absent shows nothing in progress: a comparison with an absent side, or with
//! sides of different types, does not hold.
//!
//! What finished asks for can be lowered by the spec: comparisons written the same way can say
//! that the spec asks for no progress at all (`spec.suspend == true`); while one holds, none of
//! the kind's signals does. A target lowered by arithmetic (replicas − partition) is not
//! written here; a controller that reports its own target in its status can be compared with
//! it (`status.updatedReplicas < status.expectedUpdatedReplicas`).

use std::fmt;

/// The built-in signals of a native workload kind, read from the typed status (one pass, no
/// allocation). Beside the kind's count of replicas, a counter the status leaves out is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `Progressing` with reason `NewReplicaSetCreated`, `FoundNewReplicaSet` or
    /// `ReplicaSetUpdated`; `updatedReplicas`, `availableReplicas` or `replicas` other than the
    /// desired replicas. None while `spec.paused` is true: a paused Deployment asks for no
    /// progress.
    Deployment,
    /// `currentRevision != updateRevision`; `updatedReplicas`, `readyReplicas` or `replicas`
    /// other than the desired replicas. With `spec.updateStrategy.rollingUpdate.partition` P
    /// above 0, only ordinals ≥ P are asked to move: the revisions are not compared and
    /// `updatedReplicas` need only reach the desired replicas − P. With
    /// `spec.updateStrategy.type: OnDelete` no pod is asked to move: neither the revisions nor
    /// `updatedReplicas` are read.
    StatefulSet,
    /// `updatedNumberScheduled` or `numberAvailable` below `desiredNumberScheduled`.
    DaemonSet,
    /// `replicas`, `readyReplicas` or `availableReplicas` other than the desired replicas.
    ReplicaSet,
    /// Started (`startTime`) and not yet over: no `completionTime`, no `Complete=True` or
    /// `Failed=True` condition. A running Job's spec asks for pods until its completions are
    /// reached (its controller creates them over time, and replaces the ones that go).
    Job,
    /// Always: a CronJob's controller acts on a clock (it creates a Job when the schedule says
    /// so, and deletes finished Jobs beyond the history limits); its spec is never carried out
    /// for good (DESIGN §1.4).
    CronJob,
}

impl Builtin {
    /// The kind key and built-in signals of each native workload kind.
    pub const KINDS: [(&'static str, Builtin); 6] = [
        ("Deployment.apps", Builtin::Deployment),
        ("StatefulSet.apps", Builtin::StatefulSet),
        ("DaemonSet.apps", Builtin::DaemonSet),
        ("ReplicaSet.apps", Builtin::ReplicaSet),
        ("Job.batch", Builtin::Job),
        ("CronJob.batch", Builtin::CronJob),
    ];
}

/// A condition whose reason means work in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionReason {
    /// The condition's type (`Progressing`).
    pub type_: String,
    /// The reason that shows work in progress (`ReplicaSetUpdated`), whatever the condition's status.
    pub reason: String,
}

impl ConditionReason {
    /// Parses `Type=Reason`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once('=') {
            Some((t, r)) if !t.trim().is_empty() && !r.trim().is_empty() && !r.contains('=') => {
                Ok(ConditionReason { type_: t.trim().to_string(), reason: r.trim().to_string() })
            }
            _ => Err(format!("{s:?} is not a condition and reason like Progressing=ReplicaSetUpdated")),
        }
    }
}

impl fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.type_, self.reason)
    }
}

/// The operator of a [`Comparison`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `==`: equal (numbers, booleans or text).
    Eq,
    /// `!=`: not equal.
    Ne,
    /// `<`: less than (numbers only).
    Lt,
    /// `<=`: at most (numbers only).
    Le,
    /// `>`: greater than (numbers only).
    Gt,
    /// `>=`: at least (numbers only).
    Ge,
}

impl Op {
    const ALL: [(&'static str, Op); 6] =
        [("==", Op::Eq), ("!=", Op::Ne), ("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)];

    /// Whether `ord` (left compared with right) satisfies the operator.
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Op::Eq => ord == Equal,
            Op::Ne => ord != Equal,
            Op::Lt => ord == Less,
            Op::Le => ord != Greater,
            Op::Gt => ord == Greater,
            Op::Ge => ord != Less,
        }
    }

    /// `==` and `!=` compare anything; the others only numbers.
    pub fn orders(self) -> bool {
        !matches!(self, Op::Eq | Op::Ne)
    }
}

/// The right side of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// Another field of the object, as a dotted path.
    Field(Vec<String>),
    /// A number (compared as `f64`).
    Number(f64),
    /// `true` or `false`.
    Bool(bool),
    /// A string (quoted, or a bare word).
    Text(String),
}

/// A comparison of a field that holds while the controller is at work.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// A dotted path under `spec` or `status`, split.
    pub field: Vec<String>,
    /// How the field compares with `other`.
    pub op: Op,
    /// The right side: another field or a value.
    pub other: Operand,
    /// As written, for messages.
    pub text: String,
}

impl Comparison {
    /// Parses `FIELD OP VALUE` (see the module's documentation).
    pub fn parse(s: &str) -> Result<Self, String> {
        let hint = "a comparison like \"status.updatedReplicas != spec.replicas\" or \"status.phase == Updating\"";
        let (at, sym, op) = Op::ALL
            .iter()
            .filter_map(|&(sym, op)| s.find(sym).map(|at| (at, sym, op)))
            .min_by_key(|&(at, sym, _)| (at, std::cmp::Reverse(sym.len())))
            .ok_or_else(|| format!("{s:?} has no operator (==, !=, <, <=, >, >=): expected {hint}"))?;
        let (left, right) = (s[..at].trim(), s[at + sym.len()..].trim());
        let field = path(left)
            .ok_or_else(|| format!("{s:?}: {left:?} is not a field under spec. or status.: expected {hint}"))?;
        if right.is_empty() {
            return Err(format!("{s:?} has nothing to compare with: expected {hint}"));
        }
        let other = if let Some(p) = path(right) {
            Operand::Field(p)
        } else if let Ok(n) = right.parse::<f64>() {
            Operand::Number(n)
        } else if let Ok(b) = right.parse::<bool>() {
            Operand::Bool(b)
        } else if let Some(q) = right.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Operand::Text(q.to_string())
        } else if right.starts_with("spec.")
            || right.starts_with("status.")
            || right.contains(['"', ' ', '=', '<', '>', '!'])
        {
            return Err(format!("{s:?}: {right:?} is neither a field path, a number nor a string: expected {hint}"));
        } else {
            Operand::Text(right.to_string())
        };
        if op.orders() && !matches!(other, Operand::Field(_) | Operand::Number(_)) {
            return Err(format!("{s:?}: {sym} compares numbers only"));
        }
        Ok(Comparison { field, op, other, text: s.trim().to_string() })
    }
}

/// A dotted path under `spec.` or `status.` with no empty segment.
fn path(s: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = s.split('.').map(str::to_string).collect();
    let valid = parts.len() >= 2
        && matches!(parts[0].as_str(), "spec" | "status")
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    valid.then_some(parts)
}

/// What shows work in progress for one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindProgress {
    /// The built-in signals of a native kind, when kept.
    pub builtin: Option<Builtin>,
    /// `Type=Reason` conditions that show work in progress.
    pub conditions: Vec<ConditionReason>,
    /// Field comparisons that show work in progress.
    pub fields: Vec<Comparison>,
    /// Comparisons that say the spec asks for no progress (paused, suspended): while one holds,
    /// no signal of the kind shows work in progress, the built-in ones included.
    pub paused: Vec<Comparison>,
}

impl KindProgress {
    /// No signal at all: the kind finishes a generation when it is observed (whatever
    /// [`paused`](Self::paused) says, since nothing can be in progress).
    pub fn is_empty(&self) -> bool {
        self.builtin.is_none() && self.conditions.is_empty() && self.fields.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_as_type_and_reason() {
        assert_eq!(
            ConditionReason::parse("Synced=Reconciling").unwrap(),
            ConditionReason { type_: "Synced".into(), reason: "Reconciling".into() }
        );
        assert_eq!(ConditionReason::parse(" Ready = Creating ").unwrap().to_string(), "Ready=Creating");
        for bad in ["Ready", "=Creating", "Ready=", "Ready=a=b", ""] {
            assert!(ConditionReason::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn comparisons_parse_fields_numbers_booleans_and_strings() {
        let c = Comparison::parse("status.updatedReplicas != spec.replicas").unwrap();
        assert_eq!(c.field, ["status", "updatedReplicas"]);
        assert_eq!((c.op, c.other), (Op::Ne, Operand::Field(vec!["spec".into(), "replicas".into()])));
        assert_eq!(Comparison::parse("status.ready<=3").unwrap().other, Operand::Number(3.0));
        assert_eq!(Comparison::parse("status.ready<=3").unwrap().op, Op::Le);
        assert_eq!(Comparison::parse("status.a >= 2.5").unwrap().op, Op::Ge);
        assert_eq!(Comparison::parse("status.a > -1").unwrap().other, Operand::Number(-1.0));
        assert_eq!(Comparison::parse("status.a < 1").unwrap().op, Op::Lt);
        assert_eq!(Comparison::parse("spec.paused == true").unwrap().other, Operand::Bool(true));
        assert_eq!(Comparison::parse("status.phase == Updating").unwrap().other, Operand::Text("Updating".into()));
        assert_eq!(
            Comparison::parse(r#"status.phase != "In progress""#).unwrap().other,
            Operand::Text("In progress".into())
        );
        for bad in [
            "status.phase",
            "phase == Updating",
            "metadata.name == x",
            "status..a == 1",
            "status.a ==",
            "status.a < Updating",
            "status.a == spec.",
            "status.a == two words",
            "== 1",
        ] {
            assert!(Comparison::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn operators_hold_as_written() {
        use std::cmp::Ordering::*;
        let table = [
            (Op::Eq, [false, true, false]),
            (Op::Ne, [true, false, true]),
            (Op::Lt, [true, false, false]),
            (Op::Le, [true, true, false]),
        ];
        for (op, want) in table.into_iter().chain([(Op::Gt, [false, false, true]), (Op::Ge, [false, true, true])]) {
            assert_eq!([Less, Equal, Greater].map(|o| op.holds(o)), want, "{op:?}");
        }
    }
}
