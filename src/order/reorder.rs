//! The reorder buffer (DESIGN §2): batches from several API servers interleave and arrive late;
//! within a cluster the resourceVersion of the written object is the etcd revision, a total
//! order of writes. Writes are held for a window and released in resourceVersion order. A write
//! that arrives after a higher resourceVersion was released is still released, marked late.
//!
//! No write is held longer than its window: once a write is due, it goes with every write of
//! a lower resourceVersion, due or not (those are in order already). A write that arrives late
//! with a low resourceVersion (a no-op update answers with the object's old one) therefore
//! never holds back writes that were due before it came.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use hashbrown::HashTable;

/// A write ready to apply, and whether it came too late to be put in order.
#[derive(Debug)]
pub struct Released<T> {
    /// The write.
    pub item: T,
    /// It came after a write with a higher resourceVersion had gone out.
    pub late: bool,
    /// Its place in resourceVersion order: its own resourceVersion, or, for a write without
    /// one, the resourceVersion it was placed after (where it belongs even when it came late).
    pub at: u64,
}

/// The key of a held write; the write itself waits in the buffer's slots, so the heap moves
/// 40 bytes per step, not the write (300 bytes and more): the service's window in arrival time
/// holds tens of thousands of writes (500 ms at 100,000 events/s).
struct Held {
    rv: u64,
    /// Order among writes at the same resourceVersion: their event time, whichever batch came
    /// first. The write that made a resourceVersion happened before any no-op update that
    /// answers with it (the no-op's client saw it), and two deletes answered with a `Status`
    /// (placed after the latest resourceVersion of their time) keep the order they happened
    /// in. Without an event time: first when the write has the resourceVersion, last when
    /// it was placed there.
    tie: i64,
    seq: u64,
    time_us: i64,
    /// Placed at `rv` for lack of one of its own, by its event time (in `tie`): placed again
    /// when it comes up, with the writes that arrived after it. It goes after every write
    /// that has `rv` as its own (placed there to go after them: the object's own write that
    /// completed before it may have a later event time than its request).
    placed: bool,
    /// Came after a higher resourceVersion was released (see [`ReorderBuffer::push_write`]).
    late: bool,
    /// Where the write waits in [`ReorderBuffer::slots`].
    slot: u32,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.rv, self.placed, self.tie, self.seq) == (o.rv, o.placed, o.tie, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.rv, self.placed, self.tie, self.seq).cmp(&(o.rv, o.placed, o.tie, o.seq))
    }
}

/// Holds writes of one cluster for `window_us` of the buffer's clock (event time in replay,
/// arrival time in the service) and releases them by (resourceVersion, event time, arrival).
pub struct ReorderBuffer<T> {
    window_us: i64,
    /// More than this many held writes are released early (memory bound).
    max_held: usize,
    heap: BinaryHeap<Reverse<Held>>,
    /// The held writes, by slot (`None`: free).
    slots: Vec<Option<T>>,
    /// Free slots, reused first.
    free: Vec<u32>,
    /// (time, resourceVersion, placed) of the held writes, by time: which resourceVersions
    /// are due. Entries of writes released already are dropped as their time comes.
    arrivals: BinaryHeap<Reverse<(i64, u64, bool)>>,
    /// The latest time seen: the buffer's clock.
    now_us: i64,
    /// Highest resourceVersion released so far.
    released_rv: u64,
    /// Highest resourceVersion seen.
    seen_rv: u64,
    /// Recent writes with a resourceVersion, to place a write without one (a delete answered
    /// with a `Status`) after the writes that happened before it rather than after whatever
    /// arrived last (batches from several API servers).
    recent: VecDeque<Recent>,
    /// Of each held write placed for lack of a resourceVersion, by slot: when it completed
    /// (its stageTimestamp), the key of its object, whether it removed it. Rare: a side
    /// table, so that the heap's entries stay small.
    placed_of: HashMap<u32, Placing>,
    /// (resourceVersion, object key) of the objects recent deletecollections listed: a
    /// removal of one of them goes before the deletecollection (see
    /// [`ReorderBuffer::note_listed`]).
    /// With the time its request was received (µs, 0: not known): a write of a listed object
    /// received after it goes after it.
    listed: VecDeque<(u64, u64, i64)>,
    /// (event time, resourceVersion, name key) of recent writes that removed an object named
    /// by name: an eviction of that name that seems to come after one goes before it (see
    /// [`ReorderBuffer::place`]).
    removed_names: VecDeque<(i64, u64, u64)>,
    /// (request time, name key) of recent evictions: a final delete of that name keeps its
    /// resourceVersion (see [`ReorderBuffer::push_write`]).
    evictions: VecDeque<(i64, u64)>,
    /// (latest completion, highest resourceVersion) of the recent writes no longer kept (the
    /// buffer was trimmed while idle, or more came than it keeps): a write without a
    /// resourceVersion whose time is past all of them still goes after them all.
    forgotten: Option<(i64, u64)>,
    /// Of each object with a write in [`ReorderBuffer::recent`], its latest one there: (object
    /// key, resourceVersion, completion). A write answered with that resourceVersion stored
    /// nothing (see [`ReorderBuffer::push_write`]); found in one lookup where a search of the
    /// recent writes took a scan of them for every write.
    latest: HashTable<(u64, u64, i64)>,
    /// The latest completion and the highest resourceVersion of every write taken into
    /// [`ReorderBuffer::recent`] (kept or forgotten since): when none was done after a write's
    /// time, [`ReorderBuffer::place_by_time`] puts it after them all without a search.
    pushed: (i64, u64),
    seq: u64,
}

/// A recent write with a resourceVersion, for placing those without one.
#[derive(Clone, Copy, Debug)]
struct Recent {
    /// When it completed (its stageTimestamp).
    done_us: i64,
    rv: u64,
    /// The key of the object written (0: not known), for writes of the same object.
    object: u64,
    /// When its request was received (0: not known).
    received_us: i64,
    /// Its answer shows the object marked for deletion.
    marked: bool,
    /// A delete that set a graceful mark (answered with the object marked and still there).
    marks: bool,
}

impl Recent {
    /// When its request was received if its answer shows the object marked (0: not marked,
    /// or not known).
    fn marked_at(&self) -> i64 {
        if self.marked {
            self.received_us
        } else {
            0
        }
    }
}

/// Which object a write is of, for placing a write without a resourceVersion.
#[derive(Clone, Copy, Debug, Default)]
pub struct Placing {
    /// A key of the object written (e.g. of its UID); 0 when not known.
    pub object: u64,
    /// When the write completed (its stageTimestamp, µs); 0 when not known.
    pub done_us: i64,
    /// A delete answered without the object (a `Status`): it removed the object.
    pub removed: bool,
    /// A key of the object's namespace and name, for the writes that name an object by name
    /// only and those they must go before; 0 when not needed.
    pub name: u64,
    /// With `name`: the write names its object by name only and starts its deletion (an
    /// eviction); without it, a write with a resourceVersion that removed the object of that
    /// name (its final delete).
    pub evicts: bool,
    /// When the API server received the request (µs); 0 when not known. With `name` and not
    /// `evicts` (a pod's delete answered with the pod, removed), the write is placed where its
    /// request was received (see [`ReorderBuffer::push_write`]).
    pub received_us: i64,
    /// The write's answer shows its object marked for deletion (a `deletionTimestamp`).
    pub marked: bool,
    /// A delete answered with its object marked and still there (a graceful deletion's mark).
    pub marks: bool,
    /// The write's own resourceVersion, when it is placed by its receipt instead: it never
    /// goes after it, and what it placed itself there does not count (set by the buffer).
    pub own_rv: u64,
}

impl Placing {
    /// A pod's delete that removed it, answered with the pod: with grace period 0 (a forced
    /// delete, the kubelet's or kwok's final one) the API server first writes the deletion
    /// mark, then removes the pod; the answer shows the removal's resourceVersion only.
    fn removes_at_once(&self) -> bool {
        self.name != 0 && !self.evicts && !self.removed && self.received_us != 0
    }
}

/// The most two API servers' clocks are taken to differ when an eviction is put before the
/// final delete of its pod (see [`ReorderBuffer::place`]): 2 s, far past what NTP keeps them to.
const EVICTION_SKEW_US: i64 = 2_000_000;

/// How many recent (time, resourceVersion) pairs place writes that have no resourceVersion.
const RECENT: usize = 4096;

/// An object key spread over 64 bits for [`ReorderBuffer::latest`] (keys are hashes already;
/// this keeps a key made of a few bits from crowding one group).
fn mix(object: u64) -> u64 {
    object.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26)
}

impl<T> ReorderBuffer<T> {
    /// A buffer that holds each write `window_us` of its clock, and at most `max_held` writes.
    pub fn new(window_us: i64, max_held: usize) -> Self {
        ReorderBuffer {
            window_us,
            max_held: max_held.max(1),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            arrivals: BinaryHeap::new(),
            now_us: i64::MIN,
            released_rv: 0,
            seen_rv: 0,
            // Grows with the writes: a cluster that sends little costs little.
            recent: VecDeque::new(),
            placed_of: HashMap::new(),
            listed: VecDeque::new(),
            removed_names: VecDeque::new(),
            evictions: VecDeque::new(),
            forgotten: None,
            latest: HashTable::new(),
            pushed: (i64::MIN, 0),
            seq: 0,
        }
    }

    /// Writes held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no write is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Adds a write; releases into `out` whatever is due. `time_us` is the buffer's clock
    /// (event or arrival time); `event_us` the write's own time (0 when unknown): for a write
    /// with a resourceVersion, when it was surely written (its stageTimestamp); for one
    /// without, when it was surely not written yet (its requestReceivedTimestamp), so that it
    /// is placed after the writes that had completed by then.
    pub fn push(&mut self, item: T, rv: Option<u64>, time_us: i64, event_us: i64, out: &mut Vec<Released<T>>) {
        self.push_write(item, rv, time_us, event_us, Placing::default(), out)
    }

    /// [`ReorderBuffer::push`], knowing which object the write is of: a write without a
    /// resourceVersion also goes after every write of the same object that had completed when
    /// it completed (`placing.done_us`). Its request may have come before them (a kubelet's
    /// final delete sent while the controller's delete that started it was still in flight),
    /// but an object's writes after its own completion could not have been acknowledged first.
    pub fn push_write(
        &mut self,
        item: T,
        rv: Option<u64>,
        time_us: i64,
        event_us: i64,
        placing: Placing,
        out: &mut Vec<Released<T>>,
    ) {
        self.seq += 1;
        let placed = rv.is_none() && event_us != 0;
        let tie = match (rv, event_us) {
            (Some(_), 0) => i64::MIN,
            (_, 0) => i64::MAX,
            (_, t) => t,
        };
        let (mut placing, mut placed, mut tie) = (placing, placed, tie);
        let rv = match rv {
            // A delete that marked its pod and removed it in one request: the controllers saw
            // the mark at a resourceVersion below the answer's, and a StatefulSet recreated
            // the pod, a ReplicaSet replaced it (a status write showed it marked) before the
            // removal. Its decision came first: where its request was received, after every
            // write that had completed by then and every write of its pod that had completed
            // when it completed, never after its own resourceVersion. A final delete of a pod
            // marked earlier goes after the mark all the same (the same pod's write).
            //
            // Not the final delete of a pod an eviction of its name marked (received within
            // the skew of two API servers' clocks): that one completes the eviction and keeps
            // its resourceVersion, which the eviction is placed by (see `place`).
            Some(rv)
                if placing.removes_at_once()
                    && !self.eviction_completed(placing.name, placing.received_us)
                    && self.place(placing.received_us, Placing { own_rv: rv, ..placing }) < rv =>
            {
                placing.own_rv = rv;
                let at = self.place(placing.received_us, placing);
                self.seen_rv = self.seen_rv.max(rv);
                if event_us != 0 {
                    if self.recent.len() == RECENT {
                        self.forget_oldest();
                    }
                    // Not as a write of its pod: a delete of the pod answered without a
                    // resourceVersion that completed after it had marked the pod before it
                    // (it lost the race to remove it), and keeps its own place by receipt.
                    self.note_pushed(event_us, rv, 0);
                    self.recent.push_back(Recent {
                        done_us: event_us,
                        rv,
                        object: 0,
                        received_us: placing.received_us,
                        marked: false,
                        marks: false,
                    });
                    self.note_removed_name(event_us, rv, placing);
                }
                (placed, tie) = (true, placing.received_us);
                at
            }
            // A write of an object answered with the resourceVersion of the latest write of
            // that object, done before it, stored nothing (a status written as it was): its
            // version says when the object last changed, not when it was written. It goes by
            // its time: taken in at its version, a status write that observes a new
            // generation would come before the writes its controller made first, and those
            // would read as drift. Deletions keep their version (a pod's final delete answers
            // with the version of its last write).
            Some(rv)
                if rv <= self.seen_rv
                    && event_us != 0
                    && placing.object != 0
                    && self.stored_nothing(rv, event_us, placing) =>
            {
                // Placed again as it comes up only when a write done after it came first
                // (another API server's batch): a write done before it can come later still.
                (placed, tie) = (self.pushed.0 > event_us, event_us);
                self.place(event_us, placing)
            }
            Some(rv) => {
                self.seen_rv = self.seen_rv.max(rv);
                if event_us != 0 {
                    if self.recent.len() == RECENT {
                        self.forget_oldest();
                    }
                    self.note_pushed(event_us, rv, placing.object);
                    self.recent.push_back(Recent {
                        done_us: event_us,
                        rv,
                        object: placing.object,
                        received_us: placing.received_us,
                        marked: placing.marked,
                        marks: placing.marks,
                    });
                    self.note_removed_name(event_us, rv, placing);
                }
                rv
            }
            // After the highest resourceVersion written at or before this write's time; with
            // no time, after everything seen.
            None if event_us != 0 => {
                if placing.evicts && placing.name != 0 {
                    self.note_eviction(event_us, placing.name);
                }
                self.place(event_us, placing)
            }
            None => self.seen_rv,
        };
        let (mut rv, mut placed, mut tie, mut late) = (rv, placed, tie, false);
        if rv < self.released_rv {
            // Later writes were applied already: apply now, flagged; unless writes without a
            // resourceVersion that came before it are held (placed at or past what was
            // released): it goes among them by its event time, not before them all.
            if self.placed_of.is_empty() || event_us == 0 {
                out.push(Released { item, late: true, at: rv });
                return;
            }
            (rv, placed, tie, late) = (self.released_rv, true, event_us, true);
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(item);
                slot
            }
            None => {
                self.slots.push(Some(item));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 held writes")
            }
        };
        if placed {
            self.placed_of.insert(slot, placing);
        }
        self.heap.push(Reverse(Held { rv, tie, seq: self.seq, time_us, placed, late, slot }));
        self.arrivals.push(Reverse((time_us, rv, placed)));
        self.advance(time_us, out);
    }

    /// When the next write is due on the buffer's clock (the earliest held, once its window
    /// is over); `None` when nothing is held.
    pub fn next_due_us(&self) -> Option<i64> {
        if self.heap.is_empty() {
            return None;
        }
        self.arrivals.peek().map(|Reverse((t, ..))| t.saturating_add(self.window_us))
    }

    /// Moves the clock to `now_us` (never backwards) and releases what is due: every write up
    /// to the highest resourceVersion whose window is over.
    pub fn advance(&mut self, now_us: i64, out: &mut Vec<Released<T>>) {
        self.now_us = self.now_us.max(now_us);
        let due = self.now_us.saturating_sub(self.window_us);
        // The highest resourceVersion of a due write with one of its own, and of a due write
        // placed for lack of one. A write placed at the resourceVersion of a due write of its
        // own goes after it, and need not go with it: it waits for its own window (an entry
        // of a write released long ago would otherwise take a write placed at what was
        // released out at once, before the writes that its window would have let it follow).
        let (mut due_rv, mut due_placed) = (None, None);
        while let Some(&Reverse((t, rv, placed))) = self.arrivals.peek() {
            if t > due {
                break;
            }
            self.arrivals.pop();
            if placed {
                due_placed = due_placed.max(Some(rv));
            } else {
                due_rv = due_rv.max(Some(rv));
            }
        }
        while let Some(Reverse(top)) = self.heap.peek() {
            // A write placed below its own resourceVersion (removed at once) is due by that
            // one: a deletecollection that marked its pod may still come within its window.
            let rv = top.rv.max(self.placed_of.get(&top.slot).map_or(0, |p| p.own_rv));
            let taken =
                due_rv.is_some_and(|r| rv < r || (rv == r && !top.placed)) || due_placed.is_some_and(|r| rv <= r);
            if top.time_us > due && self.heap.len() <= self.max_held && !taken {
                break;
            }
            let Reverse(mut h) = self.heap.pop().expect("peeked");
            if self.place_again(&mut h) {
                // Due itself: the writes it now goes after are released first.
                if h.time_us <= due || self.heap.len() >= self.max_held {
                    due_placed = due_placed.max(Some(h.rv));
                }
                self.heap.push(Reverse(h));
                continue;
            }
            self.release(h, out);
        }
        if self.heap.is_empty() {
            self.arrivals.clear();
            self.slots.clear();
            self.free.clear();
            self.placed_of.clear();
        }
    }

    /// Whether a pod's removal of `name` received at `received_us` completes an eviction of
    /// that name received within the skew of two API servers' clocks, and not completed yet
    /// (one eviction, one final delete: kwok's next delete of the name, of the pod created
    /// since, is one of its own). Takes that eviction.
    fn eviction_completed(&mut self, name: u64, received_us: i64) -> bool {
        let skew = self.window_us.min(EVICTION_SKEW_US);
        match self.evictions.iter().position(|&(t, n)| n == name && (t - received_us).abs() <= skew) {
            Some(i) => {
                self.evictions.remove(i);
                true
            }
            None => false,
        }
    }

    /// Notes an eviction of `name` received at `received_us`. A held final delete of that name
    /// placed by its receipt (the first of them) completes it: it goes back to its own
    /// resourceVersion, which the eviction goes before (see [`ReorderBuffer::place`]).
    /// Otherwise the eviction waits for the removal that completes it.
    fn note_eviction(&mut self, received_us: i64, name: u64) {
        let skew = self.window_us.min(EVICTION_SKEW_US);
        let back =
            |p: &Placing| p.own_rv != 0 && p.name == name && !p.evicts && (p.received_us - received_us).abs() <= skew;
        let first =
            self.placed_of.iter().filter(|(_, p)| back(p)).min_by_key(|(_, p)| p.received_us).map(|(&slot, _)| slot);
        let Some(slot) = first else {
            if self.evictions.len() == RECENT {
                self.evictions.pop_front();
            }
            self.evictions.push_back((received_us, name));
            return;
        };
        let held = std::mem::take(&mut self.heap).into_vec();
        self.heap = held
            .into_iter()
            .map(|Reverse(mut h)| {
                if h.slot == slot && h.placed {
                    if let Some(p) = self.placed_of.get_mut(&h.slot) {
                        h.rv = h.rv.max(p.own_rv);
                        p.own_rv = 0;
                    }
                }
                Reverse(h)
            })
            .collect();
    }

    /// Notes a write that removed the object of a name (`placing.name`, not an eviction) at
    /// `rv`, completed at `done_us`. An eviction of that name held already, placed after it,
    /// may have caused it: it is placed again (see [`ReorderBuffer::place`]).
    fn note_removed_name(&mut self, done_us: i64, rv: u64, placing: Placing) {
        if placing.name == 0 || placing.evicts {
            return;
        }
        if self.removed_names.len() == RECENT {
            self.removed_names.pop_front();
        }
        self.removed_names.push_back((done_us, rv, placing.name));
        let evicts = |p: &Placing| p.evicts && p.name == placing.name;
        if !self.placed_of.values().any(evicts) {
            return;
        }
        let held = std::mem::take(&mut self.heap).into_vec();
        self.heap = held
            .into_iter()
            .map(|Reverse(mut h)| {
                if let Some(p) = self.placed_of.get(&h.slot).filter(|p| h.placed && h.rv >= rv && evicts(p)) {
                    h.rv = h.rv.min(self.place(h.tie, *p));
                }
                Reverse(h)
            })
            .collect();
    }

    /// Notes the objects a deletecollection at `rv` lists (their keys). A deletecollection
    /// answers with the list it read before deleting, items that a concurrent request removed
    /// included (the API server skips their NotFound); a delete answered 2xx with a `Status`
    /// did remove its object (had another request removed it first, it would have been
    /// answered 404). So such a delete of a listed object goes before the deletecollection,
    /// whenever its request came: held already, it is moved.
    ///
    /// A deletecollection marks the pods it lists (their grace period) after its request came:
    /// a write of a listed object placed by its receipt (a kubelet's or kwok's final delete,
    /// one answered without a resourceVersion), received after the deletecollection's request,
    /// completes that deletion, and goes after the deletecollection (never after its own
    /// resourceVersion). Taken before it, the final delete would be judged as the deletion's
    /// intent and the namespace's teardown as its completion.
    pub fn note_listed(&mut self, rv: u64, received_us: i64, objects: impl IntoIterator<Item = u64>) {
        let mut new = Vec::new();
        for o in objects.into_iter().filter(|&o| o != 0) {
            if self.listed.len() == RECENT {
                self.listed.pop_front();
            }
            self.listed.push_back((rv, o, received_us));
            new.push(o);
        }
        let moves = |p: &Placing| new.contains(&p.object);
        if rv <= self.released_rv || !self.placed_of.values().any(moves) {
            return;
        }
        let held = std::mem::take(&mut self.heap).into_vec();
        self.heap = held
            .into_iter()
            .map(|Reverse(mut h)| {
                if let Some(p) = self.placed_of.get(&h.slot).filter(|p| h.placed && moves(p)) {
                    if p.removed && h.rv >= rv {
                        h.rv = h.rv.min(self.place(h.tie, *p));
                    } else if !p.removed && h.rv < rv {
                        h.rv = h.rv.max(self.place(h.tie, *p));
                    }
                }
                Reverse(h)
            })
            .collect();
    }

    /// Where a write without a resourceVersion goes: after the highest resourceVersion written
    /// at or before its event time, and not before what was released already. A removal goes
    /// before a deletecollection that lists its object ([`ReorderBuffer::note_listed`]), yet
    /// after the writes of its object that had completed when it completed.
    ///
    /// An eviction goes before the latest removal of the object of its name placed before it
    /// that completed within the window before its request: the removal it caused (the final
    /// delete of the pod it evicted), seen earlier only because another API server's clock
    /// runs behind. Placed after it, it would be taken for an eviction of the object created
    /// under the same name since (a StatefulSet's replacement): one object for another, and
    /// the final delete for a new intent (DESIGN §1.5).
    fn place(&self, event_us: i64, placing: Placing) -> u64 {
        self.place_by_time(event_us, placing).max(self.released_rv)
    }

    /// [`ReorderBuffer::place`] before the writes released already hold it back: where the
    /// write belongs.
    fn place_by_time(&self, event_us: i64, placing: Placing) -> u64 {
        let same = |o: u64| placing.object != 0 && o == placing.object;
        let below_own = |rv: u64| placing.own_rv == 0 || rv < placing.own_rv;
        // A pod removed at once goes after the writes of its pod done before it (its create,
        // the mark another request set, for a final delete), but not after one that shows the
        // pod marked and whose request came after its own: a status write showing the mark
        // this delete set, done a moment before the delete's answer.
        let before_own = |r: i64| placing.own_rv == 0 || r == 0 || r <= placing.received_us;
        // And after a graceful delete of its pod whose request came before its own, below its
        // resourceVersion, however late that delete's answer completed: it marked the live pod
        // first (its answer shows its own mark), and a final delete acted on that mark.
        let marked_first =
            |w: &Recent| w.marks && placing.own_rv != 0 && w.received_us != 0 && w.received_us <= placing.received_us;
        // A delete answered with a `Status` (it removed its object) also goes after a write
        // whose request came before its own and that completed before it did, whatever object
        // it wrote: wholly earlier, it was written first (the job controller's create of a pod
        // received before the admin's delete of its Job and answered before that delete was).
        // Not a pod's delete answered with the pod: one that lost the race to remove it goes by
        // its receipt, before the removal that won.
        let earlier = |w: &Recent| {
            placing.removed
                && w.received_us != 0
                && w.received_us <= event_us
                && placing.done_us != 0
                && w.done_us <= placing.done_us
        };
        let mut at = if placing.own_rv == 0 && self.pushed.0 <= event_us {
            // Every write taken in was done by this write's time (one API server, or batches
            // that came in order): it goes after them all, found without a search.
            self.pushed.1
        } else {
            let kept = self
                .recent
                .iter()
                .filter(|w| {
                    below_own(w.rv)
                        && (w.done_us <= event_us
                            || earlier(w)
                            || (same(w.object)
                                && (w.done_us <= placing.done_us || marked_first(w))
                                && before_own(w.marked_at())))
                })
                .map(|w| w.rv)
                .max()
                .unwrap_or(0);
            // The writes no longer kept: all of them completed by this write's time, so it
            // goes after them all (an eviction after a quiet spell is placed where it belongs,
            // not at 0, which would take it for one that came late: classify's eviction rule).
            match self.forgotten.filter(|&(done, rv)| done <= event_us && below_own(rv)) {
                Some((_, rv)) => kept.max(rv),
                None => kept,
            }
        };
        if placing.evicts && placing.name != 0 {
            // Within the skew two API servers' clocks may have, never more than the window: a
            // window of a day (`replay` of a whole log) would take the removal of an earlier
            // pod of that name for the one this eviction caused.
            let since = event_us.saturating_sub(self.window_us.min(EVICTION_SKEW_US));
            let caused = self
                .removed_names
                .iter()
                .filter(|&&(t, rv, n)| n == placing.name && rv <= at && t >= since)
                .map(|&(_, rv, _)| rv)
                .max();
            if let Some(rv) = caused {
                at = rv.saturating_sub(1);
            }
        }
        if placing.removed {
            if let Some(list_rv) = self.listed.iter().filter(|&&(_, o, _)| same(o)).map(|&(rv, _, _)| rv).min() {
                let own = self
                    .recent
                    .iter()
                    .filter(|w| same(w.object) && w.done_us <= placing.done_us)
                    .map(|w| w.rv)
                    .max()
                    .unwrap_or(0);
                at = at.min(list_rv.saturating_sub(1)).max(own);
            }
        } else if let Some(list_rv) = self
            .listed
            .iter()
            .filter(|&&(rv, o, r)| same(o) && r != 0 && r <= event_us && below_own(rv))
            .map(|&(rv, _, _)| rv)
            .max()
        {
            at = at.max(list_rv);
        }
        if placing.own_rv != 0 {
            at = at.min(placing.own_rv);
        }
        at
    }

    /// A write placed for lack of a resourceVersion, as it comes up: a write of its time may
    /// have arrived after it (another API server's batch), and it goes after that one too.
    /// True when it moved (it is then to be held again at its new place).
    fn place_again(&self, h: &mut Held) -> bool {
        if !h.placed {
            return false;
        }
        let placing = self.placed_of.get(&h.slot).copied().unwrap_or_default();
        let at = self.place(h.tie, placing);
        let moved = at > h.rv;
        h.rv = h.rv.max(at);
        moved
    }

    /// Drops the oldest recent write, keeping its completion and resourceVersion in
    /// [`ReorderBuffer::forgotten`].
    fn forget_oldest(&mut self) {
        if let Some(w) = self.recent.pop_front() {
            let (done, rv) = self.forgotten.unwrap_or((i64::MIN, 0));
            self.forgotten = Some((done.max(w.done_us), rv.max(w.rv)));
            if w.object != 0 {
                if let Ok(e) = self.latest.find_entry(mix(w.object), |&(o, rv, _)| o == w.object && rv == w.rv) {
                    e.remove();
                }
            }
        }
    }

    /// Counts a write taken into [`ReorderBuffer::recent`]: the latest of its object, done at
    /// `done_us` with `rv`.
    fn note_pushed(&mut self, done_us: i64, rv: u64, object: u64) {
        self.pushed = (self.pushed.0.max(done_us), self.pushed.1.max(rv));
        if object != 0 {
            match self.latest.entry(mix(object), |&(o, _, _)| o == object, |&(o, _, _)| mix(o)) {
                hashbrown::hash_table::Entry::Occupied(mut e) => {
                    let latest = e.get_mut();
                    if rv >= latest.1 {
                        *latest = (object, rv, done_us);
                    }
                }
                hashbrown::hash_table::Entry::Vacant(e) => {
                    e.insert((object, rv, done_us));
                }
            }
        }
    }

    /// Whether a write done at `event_us` with `rv` stored nothing: the latest write of its
    /// object kept had that resourceVersion and was done before it. Not a deletion's write.
    fn stored_nothing(&self, rv: u64, event_us: i64, placing: Placing) -> bool {
        !(placing.removed || placing.marked || placing.marks || placing.evicts)
            && self
                .latest
                .find(mix(placing.object), |&(o, _, _)| o == placing.object)
                .is_some_and(|&(_, latest, done_us)| latest == rv && done_us < event_us)
    }

    /// Frees what an empty buffer holds, so an idle cluster costs the struct alone. The recent
    /// (time, resourceVersion) pairs go too: with nothing held, every one of them is at most
    /// the highest resourceVersion released, which places a write without one anyway. Where
    /// such a write belongs (its [`Released::at`]) is kept from them in one pair, the latest
    /// completion and the highest resourceVersion.
    pub fn trim(&mut self) {
        if self.heap.is_empty() {
            self.heap = BinaryHeap::new();
            self.slots = Vec::new();
            self.free = Vec::new();
            self.arrivals = BinaryHeap::new();
            while !self.recent.is_empty() {
                self.forget_oldest();
            }
            self.recent = VecDeque::new();
            self.latest = HashTable::new();
            self.placed_of = HashMap::new();
            self.listed = VecDeque::new();
            self.removed_names = VecDeque::new();
            self.evictions = VecDeque::new();
        }
    }

    /// Every write held.
    pub fn for_each_held(&self, f: impl FnMut(&T)) {
        self.slots.iter().flatten().for_each(f);
    }

    /// Bytes the buffer has allocated (its struct aside).
    pub fn allocated_bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Reverse<Held>>()
            + self.slots.capacity() * std::mem::size_of::<Option<T>>()
            + self.free.capacity() * 4
            + self.arrivals.capacity() * std::mem::size_of::<Reverse<(i64, u64, bool)>>()
            + self.recent.capacity() * std::mem::size_of::<Recent>()
            + self.latest.capacity() * std::mem::size_of::<(u64, u64, i64)>()
            + self.placed_of.capacity() * std::mem::size_of::<(u32, Placing)>()
            + self.listed.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.removed_names.capacity() * std::mem::size_of::<(i64, u64, u64)>()
            + self.evictions.capacity() * std::mem::size_of::<(i64, u64)>()
    }

    /// Releases everything (end of input, shutdown).
    pub fn flush(&mut self, out: &mut Vec<Released<T>>) {
        while let Some(Reverse(mut h)) = self.heap.pop() {
            if self.place_again(&mut h) {
                self.heap.push(Reverse(h));
                continue;
            }
            self.release(h, out);
        }
        self.arrivals.clear();
        self.slots.clear();
        self.free.clear();
        self.placed_of.clear();
    }

    fn release(&mut self, h: Held, out: &mut Vec<Released<T>>) {
        self.released_rv = self.released_rv.max(h.rv);
        let mut at = h.rv;
        if h.placed {
            if let Some(p) = self.placed_of.remove(&h.slot) {
                // Where it belongs, though it came after writes of later resourceVersions.
                at = at.min(self.place_by_time(h.tie, p));
            }
        }
        let item = self.slots[h.slot as usize].take().expect("a held write is in its slot");
        self.free.push(h.slot);
        out.push(Released { item, late: h.late, at });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(out: Vec<Released<u32>>) -> Vec<(u32, bool)> {
        out.into_iter().map(|r| (r.item, r.late)).collect()
    }

    /// A write of `object` done at `done_us`.
    fn write(object: u64, done_us: i64) -> Placing {
        Placing { object, done_us, ..Placing::default() }
    }

    fn items_str(out: Vec<Released<&str>>) -> Vec<(&str, bool)> {
        out.into_iter().map(|r| (r.item, r.late)).collect()
    }

    /// What comes out, in order, when `writes` (name, resourceVersion, event time, placing)
    /// arrive in the order `arrival` names them, after an earlier write of another object.
    fn released_after_an_earlier_write(
        writes: &[(&'static str, u64, i64, Placing)],
        arrival: &[&str],
    ) -> Vec<(&'static str, bool)> {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push_write("earlier", Some(420), 0, 100, Placing { object: 9, done_us: 100, ..Placing::default() }, &mut out);
        for (i, name) in arrival.iter().enumerate() {
            let &(item, rv, event_us, placing) = writes.iter().find(|w| w.0 == *name).expect("a write of that name");
            b.push_write(item, Some(rv), 1 + i as i64, event_us, placing, &mut out);
        }
        b.flush(&mut out);
        items_str(out)
    }

    #[test]
    fn slots_of_released_writes_are_reused_and_the_order_is_kept() {
        // A write every 10 µs, a 1 ms window: about 100 held at a time, 10,000 in all, each
        // pair swapped on arrival.
        let mut b = ReorderBuffer::new(1_000, 100_000);
        let mut out = Vec::new();
        let mut most_slots = 0;
        for i in 0..10_000u32 {
            let rv = (i ^ 1) as u64 + 1;
            b.push(rv as u32, Some(rv), i as i64 * 10, 0, &mut out);
            most_slots = most_slots.max(b.slots.len());
        }
        assert!(most_slots <= 102, "{most_slots} slots for ~100 held writes");
        b.flush(&mut out);
        assert!(b.slots.is_empty() && b.free.is_empty());
        let got: Vec<u32> = out.iter().map(|r| r.item).collect();
        assert_eq!(got, (1..=10_000).collect::<Vec<u32>>());
        assert!(out.iter().all(|r| !r.late));
    }

    #[test]
    fn releases_in_resource_version_order_after_the_window() {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push(3, Some(30), 0, 0, &mut out);
        b.push(1, Some(10), 10, 0, &mut out);
        b.push(2, Some(20), 20, 0, &mut out);
        assert!(out.is_empty(), "held within the window");
        assert_eq!(b.next_due_us(), Some(100), "rv 30 arrived first: due one window after");
        b.advance(99, &mut out);
        assert!(out.is_empty());
        b.advance(100, &mut out);
        assert_eq!(
            items(std::mem::take(&mut out)),
            vec![(1, false), (2, false), (3, false)],
            "rv 30 is due, and takes the lower ones with it, in order"
        );
        assert_eq!(b.next_due_us(), None);
    }

    #[test]
    fn at_one_resource_version_the_earlier_write_goes_first_whichever_arrived_first() {
        // A no-op update (event time 300) answers with the resourceVersion the real update
        // (event time 200) made; its batch came first. A delete answered with a Status, placed
        // at the same resourceVersion (400), and a write without a time come last and first.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push("no-op", Some(7), 0, 300, &mut out);
        b.push("update", Some(7), 1, 200, &mut out);
        b.push("untimed", Some(7), 2, 0, &mut out);
        b.push("placed delete", None, 3, 400, &mut out);
        b.advance(1000, &mut out);
        assert_eq!(
            items_str(out),
            vec![("untimed", false), ("update", false), ("no-op", false), ("placed delete", false)]
        );
    }

    #[test]
    fn a_write_answered_with_the_version_its_object_already_had_goes_by_its_time() {
        // A parent's spec change (version 10), its controller's write of a child (11), then the
        // parent's status written as it was: answered with 10, the version its object had.
        let run = |status: Placing| {
            let mut b = ReorderBuffer::new(1000, 1000);
            let mut out = Vec::new();
            b.push_write("spec change", Some(10), 0, 100, write(7, 100), &mut out);
            b.push_write("child", Some(11), 1, 110, write(9, 110), &mut out);
            b.push_write("status as it was", Some(10), 2, 120, status, &mut out);
            b.flush(&mut out);
            items_str(out)
        };
        let status = write(7, 120);
        assert_eq!(
            run(status),
            vec![("spec change", false), ("child", false), ("status as it was", false)],
            "it stored nothing: it goes by its time, after the child's write done before it"
        );
        // Of another object, or a deletion's mark (a pod's final delete answers with the
        // version of its last write): by the version, as before.
        for other in [Placing { object: 8, ..status }, Placing { marked: true, marks: true, ..status }] {
            assert_eq!(
                run(other),
                vec![("spec change", false), ("status as it was", false), ("child", false)],
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_write_that_stored_nothing_goes_before_a_write_done_after_it_that_came_first() {
        // As above, but a write of another object done after the status write (130, version
        // 12) came first, in another API server's batch: the status write goes by its time,
        // after the child's write and before that one.
        let mut b = ReorderBuffer::new(1000, 1000);
        let mut out = Vec::new();
        b.push_write("spec change", Some(10), 0, 100, write(7, 100), &mut out);
        b.push_write("child", Some(11), 1, 110, write(9, 110), &mut out);
        b.push_write("later write", Some(12), 2, 130, write(8, 130), &mut out);
        b.push_write("status as it was", Some(10), 3, 120, write(7, 120), &mut out);
        b.flush(&mut out);
        assert_eq!(
            items_str(out),
            vec![("spec change", false), ("child", false), ("status as it was", false), ("later write", false)]
        );
    }

    #[test]
    fn a_write_with_the_version_of_a_forgotten_write_goes_by_its_version() {
        // Its object's write with that version is no longer among the recent writes (more came
        // than the buffer keeps): nothing tells it stored nothing, and it goes by its version,
        // released late.
        let mut b = ReorderBuffer::new(0, 1);
        let mut out = Vec::new();
        b.push_write("first", Some(1), 0, 1, write(7, 1), &mut out);
        for i in 0..RECENT as u64 {
            b.push_write("other", Some(2 + i), 1, 2 + i as i64, write(100 + i, 2 + i as i64), &mut out);
        }
        assert!(b.latest.find(mix(7), |&(o, _, _)| o == 7).is_none(), "forgotten with its write");
        b.push_write("again", Some(1), 2, 10_000, write(7, 10_000), &mut out);
        b.flush(&mut out);
        assert_eq!(out.last().map(|r| (r.item, r.late)), Some(("again", true)));
    }

    #[test]
    fn a_write_without_resource_version_goes_after_a_write_of_its_time_that_arrived_later() {
        // A delete answered with a Status (event time 150) from one API server arrives before
        // an update of time 120 from another: placed at 40 when it came, it goes after the
        // update's 50 when it comes up.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push("create", Some(40), 0, 100, &mut out);
        b.push("delete", None, 1, 150, &mut out);
        b.push("update", Some(50), 10, 120, &mut out);
        b.push("later", Some(60), 20, 200, &mut out);
        b.advance(101, &mut out);
        assert_eq!(
            items_str(std::mem::take(&mut out)),
            vec![("create", false), ("update", false), ("delete", false)],
            "the delete is due: the update of before it goes first"
        );
        b.advance(1000, &mut out);
        assert_eq!(items_str(std::mem::take(&mut out)), vec![("later", false)]);

        // The same at the end of input.
        let mut b = ReorderBuffer::new(100, 1000);
        b.push("create", Some(40), 0, 100, &mut out);
        b.push("delete", None, 1, 150, &mut out);
        b.push("update", Some(50), 10, 120, &mut out);
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("create", false), ("update", false), ("delete", false)]);
    }

    #[test]
    fn a_write_without_resource_version_goes_after_a_write_wholly_before_it() {
        // Seed 2230 of 30 steps: the job controller creates a pod of the Job (received at 100,
        // answered at 160, rv 43) while the admin deletes the Job, answered with a Status
        // (received at 110, answered at 170). The create completed after the delete's request
        // came, yet began and ended before the delete: it went first, and the pod was created
        // under a Job not deleted yet. A write of the same time that began after the delete
        // did (received at 120) may have come after it, and does.
        let job = Placing { object: 6, done_us: 170, received_us: 110, removed: true, ..Placing::default() };
        for arrival in [["create", "delete"], ["delete", "create"]] {
            let mut b = ReorderBuffer::new(1000, 1000);
            let mut out = Vec::new();
            let p = Placing { object: 4, done_us: 90, received_us: 80, ..Placing::default() };
            b.push_write("before", Some(40), 0, 90, p, &mut out);
            for (i, what) in arrival.into_iter().enumerate() {
                let t = 1 + i as i64;
                match what {
                    "create" => {
                        let p = Placing { object: 5, done_us: 160, received_us: 100, ..Placing::default() };
                        b.push_write("create", Some(43), t, 160, p, &mut out)
                    }
                    _ => b.push_write("delete", None, t, 110, job, &mut out),
                }
            }
            let p = Placing { object: 8, done_us: 165, received_us: 120, ..Placing::default() };
            b.push_write("begun after", Some(45), 3, 165, p, &mut out);
            b.flush(&mut out);
            assert_eq!(
                items_str(out),
                vec![("before", false), ("create", false), ("delete", false), ("begun after", false)],
                "arrival order {arrival:?}"
            );
        }
    }

    #[test]
    fn a_write_without_resource_version_goes_after_its_own_objects_writes_completed_before_it() {
        // Seen on a control plane with two API servers: the controller's delete of a pod
        // (rv 1213, received at 438, completed at 447) and the kubelet's final delete of it,
        // answered without a resourceVersion, received at 442 (before the first completed)
        // and completed at 455. By its request time alone it went first; the pod's own delete
        // that completed before it did must go first.
        let pod = Placing { object: 7, ..Placing::default() };
        for arrival in [["controller", "kubelet"], ["kubelet", "controller"]] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push_write(
                "earlier",
                Some(1200),
                0,
                400,
                Placing { object: 9, done_us: 400, ..Placing::default() },
                &mut out,
            );
            for (i, who) in arrival.into_iter().enumerate() {
                match who {
                    "controller" => b.push_write(
                        "controller",
                        Some(1213),
                        1 + i as i64,
                        447,
                        Placing { done_us: 447, ..pod },
                        &mut out,
                    ),
                    _ => b.push_write("kubelet", None, 1 + i as i64, 442, Placing { done_us: 455, ..pod }, &mut out),
                }
            }
            // Another object's write that completed between the two: not the pod's, so the
            // final delete keeps its place by request time before it.
            b.push_write(
                "other",
                Some(1214),
                5,
                444,
                Placing { object: 11, done_us: 444, ..Placing::default() },
                &mut out,
            );
            b.flush(&mut out);
            assert_eq!(
                items_str(out),
                vec![("earlier", false), ("controller", false), ("kubelet", false), ("other", false)],
                "arrival order {arrival:?}"
            );
        }
    }

    #[test]
    fn a_pod_removed_at_once_goes_where_its_request_came_before_the_writes_its_mark_caused() {
        // Seen on the real control plane: a delete of a pod with grace period 0, received at
        // 193, answered at 199 with the pod removed at rv 424. The API server wrote the
        // deletion mark first: kwok's status write of the pod showed it at rv 422, and the
        // ReplicaSet created the replacement at rv 423 (received at 196, done at 198). By its
        // resourceVersion the delete came after both: the replacement named no
        // removal it reverts, and the status write made the delete look like the completion
        // of a deletion already marked.
        let delete = Placing { object: 7, name: 5, done_us: 199, received_us: 193, ..Placing::default() };
        // The status write completes a moment before the delete does (done at 198, received at
        // 195): its request came after the delete's, so it showed the mark this delete set.
        let writes = [
            ("delete", 424, 199, delete),
            (
                "status",
                422,
                198,
                Placing { object: 7, done_us: 198, received_us: 195, marked: true, ..Placing::default() },
            ),
            ("create", 423, 198, Placing { object: 8, done_us: 198, received_us: 196, ..Placing::default() }),
        ];
        for arrival in [["delete", "status", "create"], ["create", "delete", "status"], ["status", "create", "delete"]]
        {
            assert_eq!(
                released_after_an_earlier_write(&writes, &arrival),
                vec![("earlier", false), ("delete", false), ("status", false), ("create", false)],
                "arrival order {arrival:?}"
            );
        }

        // A final delete of a pod marked by another request goes after the mark whenever its
        // request came (kwok deleting as soon as it saw the mark, before the marking request's
        // answer completed): the pod's own write done before it was.
        let final_delete = Placing { object: 7, name: 5, done_us: 210, received_us: 203, ..Placing::default() };
        let writes = [
            ("mark", 430, 205, Placing { object: 7, done_us: 205, received_us: 190, ..Placing::default() }),
            ("final", 432, 210, final_delete),
        ];
        for arrival in [["mark", "final"], ["final", "mark"]] {
            assert_eq!(
                released_after_an_earlier_write(&writes, &arrival),
                vec![("earlier", false), ("mark", false), ("final", false)],
                "arrival order {arrival:?}"
            );
        }

        // A graceful delete of the pod (a ReplicaSet scaling down: received at 191, its mark at
        // rv 430) whose answer completed late (at 212), and kwok's final delete acting on that
        // mark (received at 203, removed at rv 432, done at 208): the mark came first, though
        // it completed after the final delete did.
        let mark =
            Placing { object: 7, done_us: 212, received_us: 191, marked: true, marks: true, ..Placing::default() };
        let writes = [("mark", 430, 212, mark), ("final", 432, 208, Placing { done_us: 208, ..final_delete })];
        for arrival in [["mark", "final"], ["final", "mark"]] {
            assert_eq!(
                released_after_an_earlier_write(&writes, &arrival),
                vec![("earlier", false), ("mark", false), ("final", false)],
                "arrival order {arrival:?}"
            );
        }

        // kwok deletes db-0 again (received at 300) a moment before the StatefulSet's create
        // of the new db-0 was received (301, done at 305, rv 440): the delete found, and
        // removed, the new pod (rv 442). It goes after the create of its pod.
        let writes = [
            ("create", 440, 305, Placing { object: 7, done_us: 305, received_us: 301, ..Placing::default() }),
            ("again", 442, 310, Placing { received_us: 300, done_us: 310, ..final_delete }),
        ];
        for arrival in [["create", "again"], ["again", "create"]] {
            assert_eq!(
                released_after_an_earlier_write(&writes, &arrival),
                vec![("earlier", false), ("create", false), ("again", false)],
                "arrival order {arrival:?}"
            );
        }

        // Without the time its request came, the delete keeps its resourceVersion.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push_write("earlier", Some(420), 0, 100, Placing { object: 9, done_us: 100, ..Placing::default() }, &mut out);
        b.push_write("delete", Some(424), 1, 199, Placing { received_us: 0, ..delete }, &mut out);
        b.push_write("create", Some(423), 2, 198, Placing { object: 8, done_us: 198, ..Placing::default() }, &mut out);
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("earlier", false), ("create", false), ("delete", false)]);
    }

    #[test]
    fn one_eviction_is_completed_by_one_final_delete_the_next_delete_of_the_name_is_its_own() {
        // An eviction of db-1 (received at 580); kwok's final delete of the evicted pod (rv
        // 2245, received at 589) completes it and keeps its resourceVersion; the StatefulSet
        // creates db-1 again (rv 2247); kwok deletes db-1 once more (received at 621), the new
        // pod, marked and removed at once (rv 2254), and writes its status showing the mark at
        // 2253: that delete is placed where it was received, before the status write.
        let evict = Placing { name: 5, evicts: true, ..Placing::default() };
        let final_delete = Placing { object: 7, name: 5, done_us: 592, received_us: 589, ..Placing::default() };
        let again = Placing { object: 8, name: 5, done_us: 629, received_us: 621, ..Placing::default() };
        let mut b = ReorderBuffer::new(2000, 1000);
        let mut out = Vec::new();
        b.push_write(
            "earlier",
            Some(2240),
            0,
            500,
            Placing { object: 9, done_us: 500, ..Placing::default() },
            &mut out,
        );
        b.push_write("evict", None, 1, 580, evict, &mut out);
        b.push_write("final", Some(2245), 2, 592, final_delete, &mut out);
        b.push_write(
            "create",
            Some(2247),
            3,
            604,
            Placing { object: 8, done_us: 604, received_us: 600, ..Placing::default() },
            &mut out,
        );
        b.push_write("again", Some(2254), 4, 629, again, &mut out);
        b.push_write(
            "status",
            Some(2253),
            5,
            632,
            Placing { object: 8, done_us: 632, received_us: 621, marked: true, ..Placing::default() },
            &mut out,
        );
        b.flush(&mut out);
        assert_eq!(
            items_str(out),
            vec![
                ("earlier", false),
                ("evict", false),
                ("final", false),
                ("create", false),
                ("again", false),
                ("status", false)
            ]
        );
    }

    #[test]
    fn a_final_delete_received_after_a_deletecollection_that_lists_its_pod_goes_after_it() {
        // Seen in a namespace's teardown: the namespace controller's deletecollection of pods
        // (received at 796, done at 839) read them at rv 2368 and marked db-0; kwok's final
        // deletes of db-0, received at 802 and 816, were answered before it: one without a
        // resourceVersion (another request removed the pod), one at rv 2374. Before the
        // deletecollection, the first was taken for the deletion's intent and the teardown
        // for its completion.
        let kwok = |received_us, done_us| Placing { object: 7, name: 5, done_us, received_us, ..Placing::default() };
        for arrival in [["a", "b", "dc"], ["dc", "a", "b"], ["a", "dc", "b"]] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push_write(
                "other",
                Some(2360),
                0,
                700,
                Placing { object: 11, done_us: 700, ..Placing::default() },
                &mut out,
            );
            for (i, what) in arrival.into_iter().enumerate() {
                let at = 1 + i as i64;
                match what {
                    "dc" => {
                        b.note_listed(2368, 796, [7, 8]);
                        b.push_write(
                            "dc",
                            Some(2368),
                            at,
                            839,
                            Placing { done_us: 839, received_us: 796, ..Placing::default() },
                            &mut out,
                        );
                    }
                    "a" => b.push_write("kwok a", None, at, 802, kwok(802, 828), &mut out),
                    _ => b.push_write("kwok b", Some(2374), at, 830, kwok(816, 830), &mut out),
                }
            }
            b.flush(&mut out);
            assert_eq!(
                items_str(out),
                vec![("other", false), ("dc", false), ("kwok a", false), ("kwok b", false)],
                "arrival order {arrival:?}"
            );
        }
        // The deletecollection's answer may come long after: the final delete, placed where
        // its request came, waits for it as long as it would have at its own resourceVersion.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push_write("early", Some(1400), 50, 50, Placing { object: 11, done_us: 50, ..Placing::default() }, &mut out);
        b.push_write("kwok", Some(1416), 73, 73, kwok(65, 73), &mut out);
        b.advance(160, &mut out);
        assert_eq!(items_str(std::mem::take(&mut out)), vec![("early", false)]);
        b.note_listed(1411, 61, [7]);
        b.push_write(
            "dc",
            Some(1411),
            165,
            165,
            Placing { done_us: 165, received_us: 61, ..Placing::default() },
            &mut out,
        );
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("dc", false), ("kwok", false)]);

        // A person's forced delete marks the pod; kwok, seeing the mark, removes it at once
        // (rv 2458, received at 105, done at 107); the person's delete then finds it gone and is
        // answered with the pod without a resourceVersion (received at 100, done at 108). The
        // person's came first: it is not put after kwok's for having completed later.
        let person = Placing { object: 7, name: 5, done_us: 108, received_us: 100, ..Placing::default() };
        for arrival in [["person", "kwok"], ["kwok", "person"]] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push_write(
                "other",
                Some(2450),
                0,
                95,
                Placing { object: 11, done_us: 95, ..Placing::default() },
                &mut out,
            );
            for (i, what) in arrival.into_iter().enumerate() {
                match what {
                    "person" => b.push_write("person", None, 1 + i as i64, 100, person, &mut out),
                    _ => b.push_write("kwok", Some(2458), 1 + i as i64, 107, kwok(105, 107), &mut out),
                }
            }
            b.flush(&mut out);
            assert_eq!(
                items_str(out),
                vec![("other", false), ("person", false), ("kwok", false)],
                "arrival order {arrival:?}"
            );
        }

        // A delete of the pod received before the deletecollection keeps its place.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push_write("other", Some(2360), 0, 700, Placing { object: 11, done_us: 700, ..Placing::default() }, &mut out);
        b.push_write("forced", Some(2364), 1, 830, kwok(790, 830), &mut out);
        b.note_listed(2368, 796, [7, 8]);
        b.push_write(
            "dc",
            Some(2368),
            2,
            839,
            Placing { done_us: 839, received_us: 796, ..Placing::default() },
            &mut out,
        );
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("other", false), ("forced", false), ("dc", false)]);
    }

    #[test]
    fn a_removal_goes_before_a_deletecollection_that_lists_its_object_in_any_arrival_order() {
        // Seen on a control plane with two API servers, in a namespace's teardown: the
        // namespace controller's deletecollection of ReplicaSets read them at rv 100 (done at
        // 90) and listed rs-7; the garbage collector's delete of rs-7, received at 60 (after
        // the read), was answered with a Status: it removed rs-7. Another write (rv 105) had
        // completed by 60, so by its request time alone the delete went after the list.
        let gc = Placing { object: 7, done_us: 62, removed: true, ..Placing::default() };
        for order in [["dc", "gc"], ["gc", "dc"]] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push_write(
                "other",
                Some(105),
                0,
                50,
                Placing { object: 11, done_us: 50, ..Placing::default() },
                &mut out,
            );
            for (i, what) in order.into_iter().enumerate() {
                let at = 1 + i as i64;
                if what == "dc" {
                    b.note_listed(100, 0, [7, 8]);
                    b.push_write("dc", Some(100), at, 90, Placing::default(), &mut out);
                } else {
                    b.push_write("gc", None, at, 60, gc, &mut out);
                }
            }
            b.flush(&mut out);
            assert_eq!(items_str(out), vec![("gc", false), ("dc", false), ("other", false)], "arrival order {order:?}");
        }
        // A write without a resourceVersion that removed nothing (an eviction) keeps its
        // place; so does a removal of an object the list does not name.
        for (what, placing) in [
            ("eviction", Placing { object: 7, done_us: 62, removed: false, ..Placing::default() }),
            ("gc-9", Placing { object: 9, ..gc }),
        ] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push_write("other", Some(105), 0, 50, Placing::default(), &mut out);
            b.note_listed(100, 0, [7, 8]);
            b.push_write("dc", Some(100), 1, 90, Placing::default(), &mut out);
            b.push_write(what, None, 2, 60, placing, &mut out);
            b.flush(&mut out);
            assert_eq!(items_str(out), vec![("dc", false), ("other", false), (what, false)]);
        }
        // The object's own writes that completed before the removal still go first.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.note_listed(100, 0, [7]);
        b.push_write("dc", Some(100), 0, 90, Placing::default(), &mut out);
        b.push_write(
            "rs-7 status",
            Some(103),
            1,
            55,
            Placing { object: 7, done_us: 55, ..Placing::default() },
            &mut out,
        );
        b.push_write("gc", None, 2, 60, gc, &mut out);
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("dc", false), ("rs-7 status", false), ("gc", false)]);
        // A deletecollection released already: the removal comes after it, no panic on a
        // list at resourceVersion 0.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.note_listed(0, 0, [7]);
        b.push_write("dc0", Some(0), 0, 10, Placing::default(), &mut out);
        b.note_listed(100, 0, [7]);
        b.push_write("dc", Some(100), 1, 90, Placing::default(), &mut out);
        b.advance(500, &mut out);
        b.push_write("gc", None, 501, 60, gc, &mut out);
        b.flush(&mut out);
        assert_eq!(items_str(out), vec![("dc0", false), ("dc", false), ("gc", false)]);
    }

    #[test]
    fn an_eviction_goes_before_the_final_delete_of_its_pod_that_a_slower_clock_put_first() {
        // Two API servers, the second's clock 50 behind: the eviction of pod db-0 (requested at
        // 160 by the first's clock), the kubelet's final delete of it (rv 11, done at 120 by the
        // second's) and the StatefulSet's new db-0 (rv 12, done at 130). By the times alone the
        // eviction came last, and would be taken for an eviction of the new pod.
        let (evict, last) =
            (Placing { name: 5, evicts: true, ..Placing::default() }, Placing { name: 5, ..Placing::default() });
        let arrivals = [
            ["evict", "last", "create"],
            ["last", "create", "evict"],
            ["last", "evict", "create"],
            ["create", "evict", "last"],
            ["create", "last", "evict"],
        ];
        for arrival in arrivals {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            b.push("before", Some(10), 0, 100, &mut out);
            for (i, what) in arrival.into_iter().enumerate() {
                let at = 1 + i as i64;
                match what {
                    "evict" => b.push_write("evict", None, at, 160, evict, &mut out),
                    "last" => b.push_write("last", Some(11), at, 120, last, &mut out),
                    _ => b.push_write("create", Some(12), at, 130, Placing::default(), &mut out),
                }
            }
            b.flush(&mut out);
            assert_eq!(
                items_str(out),
                vec![("before", false), ("evict", false), ("last", false), ("create", false)],
                "arrival order {arrival:?}"
            );
        }
        // A removal of that name longer than the window before the eviction's request, or of
        // another name, is not the one it caused: the eviction keeps its place.
        for (what, removal) in [
            ("old removal", Placing { name: 5, ..Placing::default() }),
            ("other name", Placing { name: 6, ..Placing::default() }),
        ] {
            let mut b = ReorderBuffer::new(100, 1000);
            let mut out = Vec::new();
            let done = if what == "old removal" { 20 } else { 120 };
            b.push_write(what, Some(11), 0, done, removal, &mut out);
            b.push_write("create", Some(12), 1, 130, Placing::default(), &mut out);
            b.push_write("evict", None, 2, 160, evict, &mut out);
            b.flush(&mut out);
            assert_eq!(items_str(out), vec![(what, false), ("create", false), ("evict", false)]);
        }
    }

    #[test]
    fn with_a_window_of_a_day_an_eviction_is_not_put_before_an_earlier_pod_s_removal() {
        // `replay` of a whole log holds a day: db-0 was removed (rv 11) and made again (rv 12)
        // in a rolling update; 9 s later a person evicts the new db-0. That removal is not the
        // one the eviction caused (more than the 2 s two clocks may differ): it keeps its place.
        let (evict, last) =
            (Placing { name: 5, evicts: true, ..Placing::default() }, Placing { name: 5, ..Placing::default() });
        let mut b = ReorderBuffer::new(86_400_000_000, 1000);
        let mut out = Vec::new();
        b.push_write("rolling removal", Some(11), 0, 1_000_000, last, &mut out);
        b.push_write("create", Some(12), 1, 1_100_000, Placing::default(), &mut out);
        b.push_write("evict", None, 2, 10_000_000, evict, &mut out);
        b.push_write("final delete", Some(13), 3, 10_100_000, last, &mut out);
        b.flush(&mut out);
        assert_eq!(
            items_str(out),
            vec![("rolling removal", false), ("create", false), ("evict", false), ("final delete", false)]
        );
    }

    #[test]
    fn a_write_without_resource_version_says_where_it_belongs_when_it_comes_after_later_ones() {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push("rv10", Some(10), 0, 100, &mut out);
        b.push("rv11", Some(11), 1, 200, &mut out);
        b.advance(500, &mut out);
        // An eviction requested at 150 (after rv 10, before rv 11) comes once both are gone: it
        // is released after them, and says it belongs after rv 10.
        b.push("eviction", None, 501, 150, &mut out);
        b.flush(&mut out);
        let got: Vec<(&str, u64)> = out.into_iter().map(|r| (r.item, r.at)).collect();
        assert_eq!(got, vec![("rv10", 10), ("rv11", 11), ("eviction", 10)]);
    }

    #[test]
    fn a_late_write_does_not_overtake_a_held_write_without_resource_version_of_before_it() {
        // rv 100 is released; an eviction (no resourceVersion, requested at 500) is held; a
        // late write (rv 50, done at 600) then comes: it goes after the eviction, by time,
        // still flagged late. A late write of before the eviction goes before it.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push("rv100", Some(100), 0, 400, &mut out);
        b.advance(200, &mut out);
        assert_eq!(items_str(std::mem::take(&mut out)), vec![("rv100", false)]);
        b.push("eviction", None, 210, 500, &mut out);
        b.push("late-after", Some(50), 220, 600, &mut out);
        b.push("late-before", Some(40), 230, 450, &mut out);
        assert!(out.is_empty(), "held with the eviction");
        b.advance(1000, &mut out);
        assert_eq!(
            items_str(std::mem::take(&mut out)),
            vec![("late-before", true), ("eviction", false), ("late-after", true)]
        );
        // With nothing without a resourceVersion held, a late write goes at once.
        b.push("late-alone", Some(60), 1010, 700, &mut out);
        assert_eq!(items_str(out), vec![("late-alone", true)]);
    }

    #[test]
    fn a_low_resource_version_arriving_later_does_not_hold_back_what_is_due() {
        // A no-op update answers with the object's old resourceVersion: it sorts first, but the
        // writes that arrived before it still leave one window after their own arrival.
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push("rv50", Some(50), 0, 0, &mut out);
        b.push("rv60", Some(60), 10, 0, &mut out);
        b.push("noop-rv40", Some(40), 90, 0, &mut out);
        b.push("rv70", Some(70), 95, 0, &mut out);
        b.advance(100, &mut out);
        let got: Vec<&str> = std::mem::take(&mut out).into_iter().map(|r| r.item).collect();
        assert_eq!(got, ["noop-rv40", "rv50"], "rv 50 is due; rv 40 sorts before it and goes too");
        b.advance(110, &mut out);
        let got: Vec<&str> = std::mem::take(&mut out).into_iter().map(|r| r.item).collect();
        assert_eq!(got, ["rv60"]);
        assert_eq!(b.next_due_us(), Some(190), "stale entries of released writes are skipped as they come due");
        b.advance(195, &mut out);
        assert_eq!(items_str(out), vec![("rv70", false)]);
    }

    #[test]
    fn a_write_older_than_what_was_released_is_late() {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push(5, Some(50), 0, 0, &mut out);
        b.advance(200, &mut out);
        b.push(4, Some(40), 210, 0, &mut out);
        assert_eq!(items(out), vec![(5, false), (4, true)]);
    }

    /// A write without a resourceVersion placed right after a write whose window is over
    /// waits for its own window: a deletecollection that marked its object may still come, and
    /// it then goes after that (replay, whose clock moves only as writes come, released it at
    /// once, and the service, whose ticks had released the earlier write long before, did not).
    #[test]
    fn a_write_placed_after_a_due_one_waits_for_its_own_window() {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push_write("earlier", Some(10), 0, 1, Placing { object: 1, done_us: 1, ..Placing::default() }, &mut out);
        let final_delete = Placing { object: 7, done_us: 160, received_us: 155, marked: true, ..Placing::default() };
        b.push_write("final delete", None, 160, 155, final_delete, &mut out);
        assert_eq!(items_str(std::mem::take(&mut out)), [("earlier", false)], "the final delete is held");
        // The deletecollection that marked object 7, requested before the final delete.
        b.push_write("deletecollection", Some(20), 170, 150, Placing::default(), &mut out);
        b.note_listed(20, 150, [7]);
        b.flush(&mut out);
        assert_eq!(items_str(out), [("deletecollection", false), ("final delete", false)]);
    }

    #[test]
    fn a_trimmed_buffer_frees_its_memory_and_orders_as_before() {
        // Two buffers fed the same writes; one is trimmed whenever it is empty.
        let (mut a, mut b) = (ReorderBuffer::new(100, 1000), ReorderBuffer::new(100, 1000));
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        let writes = [
            (1, Some(10), 0, 5),
            (2, Some(30), 10, 20),
            (3, None, 300, 25),
            (4, Some(20), 310, 15),
            (5, Some(5), 320, 0),
            (6, None, 900, 0),
        ];
        for (item, rv, time, event) in writes {
            a.push(item, rv, time, event, &mut out_a);
            b.push(item, rv, time, event, &mut out_b);
            a.advance(time + 150, &mut out_a);
            b.advance(time + 150, &mut out_b);
            if a.is_empty() {
                a.trim();
                assert_eq!(a.allocated_bytes(), 0);
            }
        }
        a.flush(&mut out_a);
        b.flush(&mut out_b);
        let placed = |out: &[Released<u32>]| out.iter().map(|r| (r.item, r.late, r.at)).collect::<Vec<_>>();
        assert_eq!(placed(&out_a), placed(&out_b), "the same order, and each write placed at the same resourceVersion");
        assert!(b.allocated_bytes() > 0);
        b.trim();
        assert_eq!(b.allocated_bytes(), 0);
    }

    #[test]
    fn bounded_by_count_and_flushes() {
        let mut b = ReorderBuffer::new(1_000_000, 2);
        let mut out = Vec::new();
        for (i, rv) in [(1, 30), (2, 10), (3, 20)] {
            b.push(i, Some(rv), 0, 0, &mut out);
        }
        assert_eq!(items(std::mem::take(&mut out)), vec![(2, false)], "over the cap releases the lowest");
        b.flush(&mut out);
        assert_eq!(items(out), vec![(3, false), (1, false)]);
        assert!(b.is_empty());
    }

    #[test]
    fn writes_without_resource_version_sort_after_the_latest_seen() {
        let mut b = ReorderBuffer::new(100, 1000);
        let mut out = Vec::new();
        b.push(1, Some(10), 0, 0, &mut out);
        b.push(2, None, 1, 0, &mut out);
        b.push(3, Some(5), 2, 0, &mut out);
        b.flush(&mut out);
        assert_eq!(items(out), vec![(3, false), (1, false), (2, false)]);
    }

    #[test]
    fn writes_without_resource_version_go_after_what_happened_before_them() {
        // Two API servers: server B's batch (rv 20 at t=200, rv 30 at t=300) arrives before
        // server A's delete answered with a Status (no rv, t=150) and A's rv 10 (t=100).
        let mut b = ReorderBuffer::new(1_000, 1000);
        let mut out = Vec::new();
        b.push("b20", Some(20), 0, 200, &mut out);
        b.push("b30", Some(30), 1, 300, &mut out);
        b.push("a10", Some(10), 2, 100, &mut out);
        b.push("a-delete", None, 3, 150, &mut out);
        b.flush(&mut out);
        let order: Vec<&str> = out.into_iter().map(|r| r.item).collect();
        assert_eq!(order, ["a10", "a-delete", "b20", "b30"]);
    }

    #[test]
    fn writes_without_resource_version_at_the_same_place_keep_their_event_order() {
        // As seen on a real control plane with two API servers (docs/e2e.md): the admin's
        // background delete of a Deployment (server B, t=638) and the garbage collector's
        // delete of its ReplicaSet (server A, t=675) are both answered with a Status; nothing
        // with a resourceVersion was written between them, and A's batch arrives first.
        let mut b = ReorderBuffer::new(10_000, 1000);
        let mut out = Vec::new();
        b.push("a348", Some(348), 0, 500, &mut out);
        b.push("gc-delete-rs", None, 1, 675, &mut out);
        b.push("gc-delete-pod", Some(351), 2, 723, &mut out);
        b.push("b-delete-deployment", None, 3, 638, &mut out);
        b.flush(&mut out);
        let order: Vec<&str> = out.into_iter().map(|r| r.item).collect();
        assert_eq!(order, ["a348", "b-delete-deployment", "gc-delete-rs", "gc-delete-pod"]);
    }
}
