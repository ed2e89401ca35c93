//! Going back to the last commit (exactly-once with a state changelog): after the processor
//! aborted a transaction because the group moved on while it was open, the polling thread
//! drops what it gathered, brings the state of every partition it holds back to the
//! changelog's (the last commit's), and moves each partition back to its committed offset
//! (docs/scale-out.md, "A transaction the group left behind").

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{names, Partition, Progress, SourceContext};
use crate::shell::Rewind;

impl SourceContext {
    /// Exactly-once with a changelog, after the processor aborted a transaction (the group
    /// moved on while it was open): goes back to the last commit, then waits until the
    /// processor has dropped every batch sent before ([`Rewind`]).
    pub(super) fn rewind(&self, consumer: &BaseConsumer<Self>, r: Rewind) {
        let ok = self.go_back(consumer);
        let _ = r.rewound.send(ok);
        if ok {
            // An error: the processor is gone (stopping); nothing more is sent anyway.
            let _ = r.resume.recv();
        }
    }

    /// Drops what was gathered and not sent; throws the state of every partition held away
    /// (it holds the writes of the aborted transaction) and restores it from the changelog
    /// (`read_committed`: as of the last commit); moves each held partition back to its
    /// committed offset. False when the positions could not be moved back: the processor then
    /// stops, and the restart resumes from the last commit.
    fn go_back(&self, consumer: &BaseConsumer<Self>) -> bool {
        let started = Instant::now();
        drop(self.outbox.lock().expect("outbox lock").gather.seal());
        let held = match consumer.assignment() {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "kafka source: cannot read the assignment to go back to the last commit");
                return false;
            }
        };
        let parts: Vec<Partition> = held.elements().iter().map(|e| (Arc::from(e.topic()), e.partition())).collect();
        let mut dropped = 0;
        if let Some(changelog) = &self.changelog {
            // The changes not written yet are the aborted transaction's.
            changelog.discard_unwritten();
            let numbers: Vec<i32> = parts.iter().map(|(_, p)| *p).collect();
            dropped = changelog.give_up(&numbers);
            self.restore(&held);
            if *self.stop.borrow() {
                return false;
            }
        }
        // Where each partition goes back to: the group's committed offset; else the last
        // commit's as this process knows it; else (never committed) the start.
        let committed = consumer.committed_offsets(held.clone(), Duration::from_secs(10)).ok();
        let mut seek = TopicPartitionList::new();
        for (topic, partition) in &parts {
            let group =
                committed.as_ref().and_then(|c| c.find_partition(topic, *partition)).and_then(|e| match e.offset() {
                    Offset::Offset(n) => Some(n),
                    _ => None,
                });
            let known = self.transaction.as_ref().and_then(|t| t.committed_offset(topic, *partition));
            let to = group.or(known).map_or(Offset::Beginning, Offset::Offset);
            let _ = seek.add_partition_offset(topic, *partition, to);
        }
        if seek.count() > 0 && !seek_all(consumer, &seek) {
            return false;
        }
        let mut offsets = self.offsets.lock().expect("offsets lock");
        offsets.collect();
        for p in &parts {
            offsets.parts.insert(p.clone(), Progress { consumed: -1, done: -1, stored: -1 });
        }
        drop(offsets);
        tracing::info!(
            partitions = %names(&parts),
            objects_dropped = dropped,
            millis = started.elapsed().as_millis() as u64,
            "kafka source: back at the last commit (state restored from the changelog, positions moved back)"
        );
        true
    }
}

/// Moves partitions to the offsets of `tpl`; tried a few times (a partition whose fetcher is
/// still starting may refuse). False when one could not be moved.
fn seek_all(consumer: &BaseConsumer<SourceContext>, tpl: &TopicPartitionList) -> bool {
    let mut last = String::new();
    for attempt in 0..5u32 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        match consumer.seek_partitions(tpl.clone(), Duration::from_secs(10)) {
            Ok(result) => {
                let failed: Vec<String> = result
                    .elements()
                    .iter()
                    .filter_map(|e| e.error().err().map(|err| format!("{}[{}]: {err}", e.topic(), e.partition())))
                    .collect();
                if failed.is_empty() {
                    return true;
                }
                last = failed.join(", ");
            }
            Err(e) => last = e.to_string(),
        }
    }
    tracing::error!(error = %last, "kafka source: cannot move the partitions back to the last commit");
    false
}
