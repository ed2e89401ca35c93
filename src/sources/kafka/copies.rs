//! The ingest tier's state-only copies (see [`crate::route`]): a message marked
//! `kausality-copy: state` is applied to state and emits nothing; when this member also
//! reads the partition of its judged copy (named in `kausality-judged-partition`), it is left
//! out altogether, since the judged copy brings the same write here.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::{BorrowedHeaders, Headers};

use crate::route::{COPY_HEADER, COPY_STATE, COPY_TRACE, JUDGED_PARTITION_HEADER};

/// What the source does with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Take {
    /// Classified and emitted (every message but a state-only copy).
    Classify,
    /// A state-only copy: classified into the state, nothing emitted.
    Silent,
    /// A state-only copy whose judged copy this member reads too: counted as received, not
    /// decoded (its offset is still tracked and committed with its neighbours').
    Skip,
}

/// What the headers say: `None` for a judged copy (or a message of another producer), else
/// the state-only copy's judged partition, when it names one.
pub(super) fn state_copy(headers: Option<&BorrowedHeaders>) -> Option<Option<i32>> {
    let headers = headers?;
    let value = |key: &str| headers.iter().find(|h| h.key == key).and_then(|h| h.value);
    if value(COPY_HEADER) != Some(COPY_STATE.as_bytes()) {
        return None;
    }
    Some(value(JUDGED_PARTITION_HEADER).and_then(|v| std::str::from_utf8(v).ok()).and_then(|v| v.trim().parse().ok()))
}

/// Whether the headers mark a trace message (see [`crate::classify::forward`]).
pub(super) fn is_trace(headers: Option<&BorrowedHeaders>) -> bool {
    headers.is_some_and(|h| h.iter().any(|h| h.key == COPY_HEADER && h.value == Some(COPY_TRACE.as_bytes())))
}

/// The decision, from [`state_copy`] and whether this member reads a partition of the topic.
pub(super) fn take(state_copy: Option<Option<i32>>, reads: impl Fn(i32) -> bool) -> Take {
    match state_copy {
        None => Take::Classify,
        Some(Some(judged)) if reads(judged) => Take::Skip,
        Some(_) => Take::Silent,
    }
}

/// The partitions this member is assigned, updated after each rebalance.
#[derive(Default)]
pub(super) struct Assigned(Mutex<HashSet<(Arc<str>, i32)>>);

impl Assigned {
    pub(super) fn update<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) {
        let parts = match consumer.assignment() {
            Ok(tpl) => tpl.elements().iter().map(|e| (Arc::from(e.topic()), e.partition())).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "kafka source: cannot read the assignment; state-only copies are applied");
                HashSet::new()
            }
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = parts;
    }

    pub(super) fn holds(&self, topic: &Arc<str>, partition: i32) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).contains(&(topic.clone(), partition))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_copy_is_silent_unless_its_judged_partition_is_read_here() {
        let reads = |p: i32| p == 3;
        assert_eq!(take(None, reads), Take::Classify);
        assert_eq!(take(Some(Some(3)), reads), Take::Skip);
        assert_eq!(take(Some(Some(4)), reads), Take::Silent);
        // A state copy that names no judged partition (another producer): applied.
        assert_eq!(take(Some(None), reads), Take::Silent);
    }

    #[test]
    fn the_headers_tell_a_state_copy_and_its_judged_partition() {
        use rdkafka::message::{Header, OwnedHeaders};
        let h = |pairs: &[(&str, &str)]| {
            pairs.iter().fold(OwnedHeaders::new(), |h, (k, v)| h.insert(Header { key: k, value: Some(*v) }))
        };
        let of = |pairs: &[(&str, &str)]| state_copy(Some(h(pairs).as_borrowed()));
        assert_eq!(state_copy(None), None);
        assert_eq!(of(&[("cluster", "a")]), None);
        assert_eq!(of(&[(COPY_HEADER, "judged")]), None);
        assert_eq!(of(&[("cluster", "a"), (COPY_HEADER, COPY_STATE), (JUDGED_PARTITION_HEADER, "7")]), Some(Some(7)));
        assert_eq!(of(&[(COPY_HEADER, COPY_STATE)]), Some(None));
        assert_eq!(of(&[(COPY_HEADER, COPY_STATE), (JUDGED_PARTITION_HEADER, "x")]), Some(None));
        // A trace message is no state copy, and is told apart by its own value.
        assert_eq!(of(&[(COPY_HEADER, COPY_TRACE)]), None);
        let trace = |pairs: &[(&str, &str)]| is_trace(Some(h(pairs).as_borrowed()));
        assert!(trace(&[("cluster", "a"), (COPY_HEADER, COPY_TRACE)]));
        assert!(!trace(&[(COPY_HEADER, COPY_STATE)]) && !trace(&[("cluster", "trace")]) && !is_trace(None));
    }

    #[test]
    fn assigned_partitions_are_told_by_topic_and_number() {
        let a = Assigned::default();
        a.0.lock().unwrap().insert((Arc::from("audit"), 1));
        assert!(a.holds(&Arc::from("audit"), 1));
        assert!(!a.holds(&Arc::from("audit"), 2));
        assert!(!a.holds(&Arc::from("other"), 1));
    }
}
