//! Traces across partitions (docs/scale-out.md, "Traces across partitions"). On the classify
//! tier a ReplicaSet's write is judged on its Deployment's partition, where its trace runs
//! from the Deployment; its state-only copy, on the ReplicaSet's own partition, is judged
//! there without the Deployment, so the traces of its Pods, judged on that partition, would
//! start at the ReplicaSet. The process that judged the write sends the trace the write
//! extended to the object's own partition, as a *trace message* on the input topic (marked
//! `kausality-copy: trace`), written with the changelog at the next commit (by a producer of
//! its own, outside any transaction); the process holding that partition puts it under the
//! object's own hop ([`Engine::complete_trace`]). Children written there after it has arrived
//! have the whole trace.
//!
//! Only objects of a kind that owns something are sent: a Pod's trace on its own partition
//! has no reader. The kinds that own are learnt from the children's writes (their
//! ownerReferences, judged copies and state-only copies alike) and from a restore, so the
//! sending process knows them once it has seen one child of the kind: the first parents of a
//! kind after a start with no state are not sent. The receiving process keeps a message only
//! for a kind it knows owns something too (`Completion::Leaf` otherwise).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use super::Engine;
use crate::state::{encode_trace_message, ObjKey, TraceState, Ty};
use crate::trace::{self, Trace};
use crate::write::{Uid, Write};

/// A trace message waiting for the next commit: where it goes and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The input partition of the object's own UID.
    pub partition: i32,
    /// The message key: the object's UID as the API server writes it.
    pub key: String,
    /// [`encode_trace_message`].
    pub value: Vec<u8>,
}

/// The trace messages of the writes judged since the last commit.
#[derive(Default)]
pub struct Forwards {
    /// The input topic's partition count; 0 while traces are not sent (no changelog).
    partitions: AtomicI32,
    queue: Mutex<Vec<Forward>>,
}

impl Forwards {
    /// Sends traces from now on, to an input topic of `partitions` partitions.
    pub fn enable(&self, partitions: i32) {
        self.partitions.store(partitions.max(0), Ordering::Relaxed);
    }

    /// The messages waiting, taken (a commit writes them).
    pub fn take(&self) -> Vec<Forward> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts back messages a failed write did not send, before those queued since.
    pub fn put_back(&self, mut unsent: Vec<Forward>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        unsent.append(&mut q);
        *q = unsent;
    }

    fn push(&self, f: Forward) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }
}

/// What a trace message did (`kausality_trace_messages_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Written to the input topic (by the judging process).
    Sent,
    /// Not delivered to the input topic (warned): a trace then lacks its parent's hops.
    Unsent,
    /// The object's own hop now follows the trace.
    Applied,
    /// The object's state had that trace already.
    Already,
    /// The object's state has moved on from that write (or never reached it): left as it is.
    Stale,
    /// The object is not in this partition's state.
    Unknown,
    /// The object's kind owns nothing that this process has judged: not kept.
    Leaf,
}

impl Completion {
    /// Every outcome: the label values of `kausality_trace_messages_total`.
    pub const ALL: [Completion; 7] = [
        Completion::Sent,
        Completion::Unsent,
        Completion::Applied,
        Completion::Already,
        Completion::Stale,
        Completion::Unknown,
        Completion::Leaf,
    ];

    /// As the `result` label of `kausality_trace_messages_total` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Completion::Sent => "sent",
            Completion::Unsent => "unsent",
            Completion::Applied => "applied",
            Completion::Already => "already",
            Completion::Stale => "stale",
            Completion::Unknown => "unknown",
            Completion::Leaf => "leaf",
        }
    }
}

/// The same hops, newest first (a hop keeps no pointer identity across processes).
fn same_hops(a: &Trace, b: &Trace) -> bool {
    let (mut a, mut b) = (Some(a), Some(b));
    loop {
        match (a, b) {
            (None, None) => return true,
            (Some(x), Some(y)) if Trace::ptr_eq(x, y) => return true,
            (Some(x), Some(y)) if x.hop() == y.hop() => (a, b) = (x.prev(), y.prev()),
            _ => return false,
        }
    }
}

impl Engine {
    /// Keeps `trace` as how the object `uid` came about, and queues its trace message when the
    /// write was judged on another partition than the object's own (see the module).
    pub(super) fn keep_trace(&self, w: &Write, uid: Uid, uid_text: &str, ty: Ty, trace: TraceState) {
        let forward = match (&trace, w.partition) {
            (TraceState::Write { prev: Some(prev), user, time_us }, Some(judged)) if !w.silent => {
                Some((prev.clone(), *user, *time_us, judged))
            }
            _ => None,
        };
        self.store.update(&ObjKey::new(w.scope, uid), |s| s.set_trace(trace));
        let Some((prev, user, time_us, judged)) = forward else { return };
        let partitions = self.forwards.partitions.load(Ordering::Relaxed);
        if partitions <= 0 || uid_text.is_empty() || !self.owner_kinds.contains_key(&ty) {
            return;
        }
        let own = crate::partition::partition_of(uid_text.as_bytes(), partitions);
        if own == judged {
            return;
        }
        let cluster = self.interner.resolve(w.cluster);
        let value = encode_trace_message(&self.interner, &cluster, uid, &w.audit_id, user, time_us, &prev);
        self.forwards.push(Forward { partition: own, key: uid_text.to_string(), value });
    }

    /// Applies a trace message: when the object's state still holds the producing write it
    /// names (the same user and time), that write's trace is `prev`, and the object's own hop,
    /// when built already, is built again on it (children that extended the old one keep it).
    pub(super) fn complete_trace(&self, w: &Write, uid: Uid, prev: &Trace) -> Completion {
        let key = ObjKey::new(w.scope, uid);
        // Read first: a message that changes nothing leaves the object out of the changelog.
        let found = self.store.read(&key, |s| {
            if !self.owner_kinds.contains_key(&s.ty) {
                return Completion::Leaf;
            }
            let (_, user, time_us) = s.trace_parts();
            if user.is_empty() || user != w.user || time_us != w.time_us {
                return Completion::Stale;
            }
            match s.trace() {
                TraceState::Write { prev: Some(p), .. } if same_hops(&p, prev) => Completion::Already,
                TraceState::Node(node) if node.prev().is_some_and(|p| same_hops(p, prev)) => Completion::Already,
                TraceState::Write { .. } | TraceState::Node(_) => Completion::Applied,
                TraceState::Unknown => Completion::Stale,
            }
        });
        match found {
            None => return Completion::Unknown,
            Some(Completion::Applied) => {}
            Some(other) => return other,
        }
        self.store.update(&key, |s| match s.trace() {
            TraceState::Write { user, time_us, .. } => {
                s.set_trace(TraceState::Write { prev: Some(prev.clone()), user, time_us })
            }
            TraceState::Node(node) => {
                let hop = node.hop();
                s.set_trace(TraceState::Node(Trace::new(hop, Some(trace::bounded(prev, hop, self.max_trace_hops)))));
            }
            TraceState::Unknown => {}
        });
        Completion::Applied
    }
}

#[cfg(test)]
mod tests;
