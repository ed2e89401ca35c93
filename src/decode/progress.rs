//! Reads the signals of work in progress ([`crate::config::progress`]) from an object as a write's
//! response shows it: the built-in ones from the typed status already parsed, the configured
//! ones by seeking their fields in the raw `spec` and `status`. Nothing is allocated unless a
//! string needs unescaping.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::object::{CowStr, ObjectView, StatusView};
use crate::config::progress::{Builtin, Comparison, KindProgress, Operand};

/// Does the object show its controller still at work on the generation it reports observed?
/// Never while its spec asks for no progress ([`KindProgress::paused`]).
pub fn in_progress(p: &KindProgress, obj: &ObjectView<'_>, status: &StatusView<'_>) -> bool {
    if p.paused.iter().any(|c| compare(c, obj)) {
        return false;
    }
    p.builtin.is_some_and(|b| builtin(b, obj, status))
        || p.conditions
            .iter()
            .any(|c| status.condition(&c.type_).is_some_and(|s| s.reason.as_deref() == Some(c.reason.as_str())))
        || p.fields.iter().any(|c| compare(c, obj))
}

/// The desired replicas: `spec.replicas`, which Kubernetes defaults to 1 when the spec leaves
/// it out. `None` without a spec.
fn desired_replicas(obj: &ObjectView<'_>) -> Option<i64> {
    #[derive(Deserialize)]
    struct Spec {
        #[serde(default, deserialize_with = "super::object::lenient_i64")]
        replicas: Option<i64>,
    }
    let spec = obj.spec?;
    serde_json::from_str::<Spec>(spec.get()).ok().map(|s| s.replicas.unwrap_or(1))
}

/// The built-in signals (DESIGN §1.3), as far as the spec asks for work.
///
/// Kubernetes leaves a counter out of a status when it is 0 (`omitempty`): when the status
/// carries the kind's count of replicas (`replicas`; `desiredNumberScheduled` of a DaemonSet),
/// a counter it leaves out is read as 0 (a rollback's first report has no `updatedReplicas`).
/// Without that count an absent counter shows nothing (a producer that does not write it, or
/// a Deployment scaled to 0, whose `replicas` is 0 and left out too).
///
/// What finished asks for is lowered by the spec: a paused Deployment asks for no progress; a
/// StatefulSet with `partition: P` asks only ordinals ≥ P to move to the update revision, so
/// `updatedReplicas` must reach the desired replicas − P and `currentRevision` stays behind;
/// one with `updateStrategy: OnDelete` asks no pod to move (a pod moves when someone deletes
/// it), so neither the revisions nor `updatedReplicas` are read, only the ready counts.
fn builtin(b: Builtin, obj: &ObjectView<'_>, st: &StatusView<'_>) -> bool {
    let differs = |counters: &[Option<i64>], desired: i64| counters.iter().flatten().any(|&c| c != desired);
    let counted = st.replicas.is_some();
    let or_zero = |c: Option<i64>| if counted { Some(c.unwrap_or(0)) } else { c };
    match b {
        Builtin::Deployment => {
            const UNDER_WAY: [&str; 3] = ["NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"];
            if paused(obj) {
                return false;
            }
            let rolling =
                st.condition("Progressing").and_then(|c| c.reason.as_deref()).is_some_and(|r| UNDER_WAY.contains(&r));
            let counters = [or_zero(st.updated_replicas), or_zero(st.available_replicas), st.replicas];
            rolling
                || (counters.iter().any(Option::is_some)
                    && desired_replicas(obj).is_some_and(|d| differs(&counters, d)))
        }
        Builtin::StatefulSet => {
            let on_delete =
                field(obj, &["spec", "updateStrategy", "type"]) == Some(Scalar::Text(Cow::Borrowed("OnDelete")));
            let partition = partition(obj);
            let revisions = !on_delete
                && partition == 0
                && matches!((&st.current_revision, &st.update_revision), (Some(c), Some(u)) if c != u);
            let updated = if on_delete { None } else { or_zero(st.updated_replicas) };
            let ready = [or_zero(st.ready_replicas), st.replicas];
            revisions
                || ((updated.is_some() || ready.iter().any(Option::is_some))
                    && desired_replicas(obj)
                        .is_some_and(|d| differs(&ready, d) || updated.is_some_and(|u| updated_short(u, d, partition))))
        }
        Builtin::DaemonSet => st
            .desired_number_scheduled
            .is_some_and(|d| [st.updated_number_scheduled, st.number_available].iter().any(|c| c.unwrap_or(0) < d)),
        Builtin::ReplicaSet => {
            let counters = [st.replicas, or_zero(st.ready_replicas), or_zero(st.available_replicas)];
            counters.iter().any(Option::is_some) && desired_replicas(obj).is_some_and(|d| differs(&counters, d))
        }
        Builtin::Job => {
            st.start_time.is_some()
                && st.completion_time.is_none()
                && !st.condition_true("Complete")
                && !st.condition_true("Failed")
        }
        Builtin::CronJob => true,
    }
}

/// Whether a StatefulSet's `updated` replicas fall short of what its spec asks: all `desired`
/// without a partition (more is a scale-down under way), else at least `desired − partition`.
fn updated_short(updated: i64, desired: i64, partition: i64) -> bool {
    if partition == 0 {
        updated != desired
    } else {
        updated < desired.saturating_sub(partition).max(0)
    }
}

/// `spec.paused: true` (a Deployment whose rollout is held).
fn paused(obj: &ObjectView<'_>) -> bool {
    field(obj, &["spec", "paused"]) == Some(Scalar::Bool(true))
}

/// A StatefulSet's `spec.updateStrategy.rollingUpdate.partition`: 0 when absent or not a
/// positive integer (the API server's default).
fn partition(obj: &ObjectView<'_>) -> i64 {
    match field(obj, &["spec", "updateStrategy", "rollingUpdate", "partition"]) {
        Some(Scalar::Number(n)) if n >= 1.0 => n as i64,
        _ => 0,
    }
}

/// A configured comparison: holds only when both sides are there and comparable.
fn compare(c: &Comparison, obj: &ObjectView<'_>) -> bool {
    let Some(left) = field(obj, &c.field) else { return false };
    let right = match &c.other {
        Operand::Field(p) => match field(obj, p) {
            Some(v) => v,
            None => return false,
        },
        Operand::Number(n) => Scalar::Number(*n),
        Operand::Bool(b) => Scalar::Bool(*b),
        Operand::Text(t) => Scalar::Text(Cow::Borrowed(t.as_str())),
    };
    let ord = match (&left, &right) {
        (Scalar::Number(a), Scalar::Number(b)) => a.partial_cmp(b),
        (Scalar::Text(a), Scalar::Text(b)) if !c.op.orders() => Some(a.cmp(b)),
        (Scalar::Bool(a), Scalar::Bool(b)) if !c.op.orders() => Some(a.cmp(b)),
        _ => None,
    };
    ord.is_some_and(|o| c.op.holds(o))
}

/// The value at a `spec.`/`status.` path, when it is a number, a string or a boolean.
fn field<'a, S: AsRef<str>>(obj: &ObjectView<'a>, path: &[S]) -> Option<Scalar<'a>> {
    let (first, rest) = path.split_first()?;
    let mut raw: &'a RawValue = match first.as_ref() {
        "spec" => obj.spec?,
        "status" => obj.status?,
        _ => return None,
    };
    for key in rest {
        if !may_hold_key(raw.get(), key.as_ref()) {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(raw.get());
        raw = Seek(key.as_ref()).deserialize(&mut de).ok().flatten()?;
    }
    serde_json::from_str::<Scalar<'a>>(raw.get()).ok()
}

/// Whether `text` may hold the key `key`: it holds `"key"`, or a backslash (an escaped key
/// could spell it otherwise). A spec without `"paused"` is not parsed to learn so.
fn may_hold_key(text: &str, key: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memchr(b'\\', bytes).is_some()
        || memchr::memmem::find_iter(bytes, key.as_bytes())
            .any(|at| at > 0 && bytes[at - 1] == b'"' && bytes.get(at + key.len()) == Some(&b'"'))
}

/// A JSON scalar as a comparison reads it.
#[derive(Debug, PartialEq)]
enum Scalar<'a> {
    Number(f64),
    Bool(bool),
    Text(Cow<'a, str>),
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, a string or a boolean")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::Number(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Number(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Text(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// Finds one key of a JSON object, skipping the others: its value, raw.
struct Seek<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Option<&'de RawValue>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<&'de RawValue>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(CowStr(k)) = map.next_key::<CowStr<'de>>()? {
            if found.is_none() && k == self.0 {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests;
