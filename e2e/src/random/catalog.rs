//! The catalog of what happens to a workload in a day, and the day drawn from a seed.
//!
//! Each workload is one object at the top of a tree (a Deployment, a StatefulSet, a Job, a
//! Widget), in a namespace of its own. Its actions are drawn one after another from what makes
//! sense in the state the earlier ones left (no `rollout undo` before a second revision, no
//! restart of a paused Deployment, nothing but the orphaned ReplicaSet after
//! `delete --cascade=orphan`). The workloads of a day run at the same time.

use super::Rng;

/// The top of a workload's tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    StatefulSet,
    Job,
    Widget,
    /// Long days only: one pod on every node, rolled with a surge or with pods unavailable.
    DaemonSet,
    /// Long days only: a Job every minute, created and cleaned up by its controller.
    CronJob,
}

impl Kind {
    /// The kind as the API names it, and the name of the workload's object.
    pub fn object(self) -> (&'static str, &'static str) {
        match self {
            Kind::Deployment => ("Deployment", "app"),
            Kind::StatefulSet => ("StatefulSet", "db"),
            Kind::Job => ("Job", "batch"),
            Kind::Widget => ("Widget", "w"),
            Kind::DaemonSet => ("DaemonSet", "agent"),
            Kind::CronJob => ("CronJob", "tick"),
        }
    }
}

/// How a person removes a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// `kubectl delete pod` (the pod's grace period).
    Delete,
    /// `kubectl delete pod --grace-period=0 --force`: gone at once.
    GracePeriodZero,
    /// `kubectl drain` of that one pod: `pods/eviction`.
    Evict,
}

/// Who scales a Deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaler {
    /// The admin patches `spec.replicas` (an applied manifest).
    Spec,
    /// A person: `kubectl scale` (a patch of `/scale`).
    Kubectl,
    /// The horizontal-pod-autoscaler: an update of `/scale`.
    Hpa,
}

/// What happens to a node of a DaemonSet workload's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeChange {
    /// A new node: the DaemonSet's controller runs a pod there.
    Add,
    /// The newest node deleted: the pod garbage collector deletes its pod.
    Remove,
    /// The newest node not cordoned yet is cordoned (a DaemonSet's pods tolerate it).
    Cordon,
    /// The newest node not tainted yet is tainted `NoExecute`: the taint manager evicts the
    /// pod, and the DaemonSet runs none there any more.
    TaintNoExecute,
}

/// `maxSurge` / `maxUnavailable` of a Deployment's rolling update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Count(i32),
    Percent(i32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateDeployment {
        replicas: i32,
        surge: Bound,
        unavailable: Bound,
    },
    /// The admin changes the pod template's image: a new revision.
    Image,
    /// `kubectl rollout undo`: the template of the previous revision again.
    Undo,
    /// `kubectl rollout undo --to-revision`: the revision `back` revisions before the current
    /// one (2: the one before the previous; fewer when the history is shorter).
    UndoTo {
        back: i32,
    },
    /// An image change, and a second one as soon as the first has started its new ReplicaSet.
    InterruptedRollout,
    /// A template whose pods never become ready (a node selector no node matches) with
    /// `progressDeadlineSeconds: deadline`: the controller reports `ProgressDeadlineExceeded`;
    /// then `rollout undo` to the revision before it (and the deadline back to 600 s).
    StuckRollout {
        deadline: i32,
    },
    /// `kubectl delete deployment` with `--cascade=foreground` or the default (background);
    /// the next action creates it again.
    DeleteDeployment {
        foreground: bool,
    },
    /// `kubectl drain` of two pods under a PodDisruptionBudget allowing one unavailable (made
    /// at the first drain): the second eviction is refused (429) until the first one's
    /// replacement is ready, and retried.
    DrainWithPdb,
    /// `kubectl rollout restart`: a template annotation.
    Restart,
    /// `kubectl rollout pause`, then an image change while paused.
    PauseAndChange,
    /// `kubectl rollout resume`.
    Resume,
    Scale {
        replicas: i32,
        by: Scaler,
    },
    /// Scaled to 0, rolled out, and back to `replicas`.
    ScaleToZeroAndBack {
        replicas: i32,
    },
    /// A person scales the Deployment's current ReplicaSet through `/scale`.
    PersonScalesReplicaSet {
        replicas: i32,
    },
    /// A person edits the current ReplicaSet's `spec.replicas`.
    PersonEditsReplicaSet {
        replicas: i32,
    },
    /// A person removes one pod of the workload.
    RemovePod {
        how: Removal,
    },
    /// `kubectl delete deployment --cascade=orphan`: the ReplicaSet stays, on its own.
    OrphanDelete,
    /// The admin scales the orphaned ReplicaSet (now the top of its tree).
    ScaleOrphan {
        replicas: i32,
    },
    /// `parallel`: `podManagementPolicy: Parallel`; `on_delete`: `updateStrategy: OnDelete`
    /// (both only in long days).
    CreateStatefulSet {
        replicas: i32,
        parallel: bool,
        on_delete: bool,
    },
    /// A new image with a RollingUpdate `partition` (0: none).
    StatefulImage {
        partition: i32,
    },
    ScaleStatefulSet {
        replicas: i32,
    },
    /// A new image under `updateStrategy: OnDelete`: no pod moves until someone deletes it.
    StatefulImageOnDelete,
    /// The RollingUpdate `partition` lowered (no new image): more ordinals move.
    LowerPartition {
        partition: i32,
    },
    /// `surge` / `unavailable`: the rolling update's `maxSurge` and `maxUnavailable` (one of them 0).
    CreateDaemonSet {
        surge: Bound,
        unavailable: Bound,
    },
    /// The admin changes the DaemonSet's image.
    DaemonSetImage,
    /// The admin changes a kwok node of the workload's own (a DaemonSet's: only its pods may
    /// run there).
    Node {
        change: NodeChange,
    },
    /// A CronJob scheduled every minute (the smallest schedule there is), keeping `history`
    /// finished Jobs. `replace`: `concurrencyPolicy: Replace` with Jobs whose pods never run
    /// (each tick replaces the running Job); else `Allow` with Jobs that finish at once.
    CreateCronJob {
        replace: bool,
        history: i32,
    },
    /// The CronJob's next scheduled Job, waited for until its controller is done with it (the
    /// Job replaced, or finished and the history trimmed).
    CronJobTick,
    /// `delete_mid_run`: the admin deletes it as soon as its first pod is there.
    CreateJob {
        completions: i32,
        parallelism: i32,
        delete_mid_run: bool,
    },
    /// The admin deletes the finished Job (background propagation).
    DeleteJob,
    CreateWidget,
    /// The admin changes the Widget's spec.
    WidgetSpec,
    /// The Widget controller changes its child with nothing asked (external state).
    WidgetDrift,
    /// A person edits the Widget's child; its controller puts it back.
    PersonEditsChild,
}

impl Action {
    /// One word for the action, the step's name and the grouping of mismatches.
    pub fn tag(&self) -> &'static str {
        match self {
            Action::CreateDeployment { .. }
            | Action::CreateStatefulSet { .. }
            | Action::CreateJob { delete_mid_run: false, .. }
            | Action::CreateWidget
            | Action::CreateDaemonSet { .. }
            | Action::CreateCronJob { .. } => "create",
            Action::CreateJob { delete_mid_run: true, .. } => "job-deleted-mid-run",
            Action::Image => "image",
            Action::Undo => "rollout-undo",
            Action::UndoTo { .. } => "rollout-undo-to-revision",
            Action::InterruptedRollout => "rollout-interrupted",
            Action::StuckRollout { .. } => "rollout-stuck",
            Action::DeleteDeployment { foreground: true } => "delete-foreground",
            Action::DeleteDeployment { foreground: false } => "delete-background",
            Action::DrainWithPdb => "drain-pdb-refused",
            Action::Restart => "rollout-restart",
            Action::PauseAndChange => "pause-and-change",
            Action::Resume => "resume",
            Action::Scale { by: Scaler::Spec, .. } => "scale",
            Action::Scale { by: Scaler::Kubectl, .. } => "kubectl-scale",
            Action::Scale { by: Scaler::Hpa, .. } => "hpa-scale",
            Action::ScaleToZeroAndBack { .. } => "scale-to-zero-and-back",
            Action::PersonScalesReplicaSet { .. } => "person-scales-replicaset",
            Action::PersonEditsReplicaSet { .. } => "person-edits-replicaset",
            Action::RemovePod { how: Removal::Delete } => "delete-pod",
            Action::RemovePod { how: Removal::GracePeriodZero } => "delete-pod-grace-0",
            Action::RemovePod { how: Removal::Evict } => "evict-pod",
            Action::OrphanDelete => "delete-cascade-orphan",
            Action::ScaleOrphan { .. } => "scale-orphaned-replicaset",
            Action::StatefulImage { partition: 0 } => "statefulset-image",
            Action::StatefulImage { .. } => "statefulset-image-partition",
            Action::ScaleStatefulSet { .. } => "statefulset-scale",
            Action::StatefulImageOnDelete => "statefulset-image-ondelete",
            Action::LowerPartition { .. } => "statefulset-lower-partition",
            Action::DaemonSetImage => "daemonset-image",
            Action::CronJobTick => "cronjob-tick",
            Action::Node { change: NodeChange::Add } => "node-added",
            Action::Node { change: NodeChange::Remove } => "node-removed",
            Action::Node { change: NodeChange::Cordon } => "node-cordoned",
            Action::Node { change: NodeChange::TaintNoExecute } => "node-tainted-noexecute",
            Action::DeleteJob => "delete-job",
            Action::WidgetSpec => "widget-spec",
            Action::WidgetDrift => "widget-drift",
            Action::PersonEditsChild => "person-edits-child",
        }
    }
}

/// The weights a long day draws with. Short days draw as they always did, whichever.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mix {
    /// As the catalog first grew: the long days recorded with it (seeds 2200–2259, 642, ...)
    /// draw the same day again with it (`--mix grown`).
    Grown,
    /// The rarer actions drawn more often, the ones drawn most less often: 50 days of 30 steps
    /// draw every action at least 20 times (docs/e2e.md, "The catalog").
    #[default]
    Even,
}

/// What a workload's earlier actions left, for drawing the next one.
#[derive(Clone, Debug)]
struct State {
    kind: Kind,
    replicas: i32,
    /// Distinct templates a Deployment rolled out (an undo needs two).
    revisions: u32,
    paused: bool,
    orphaned: bool,
    /// A Job ran (and can be deleted), or was deleted (nothing more to do).
    job_ran: bool,
    job_gone: bool,
    /// A long day ([`LONG_DAY`]): the rarer Deployment actions drawn more often, half the Jobs
    /// deleted mid-run, and the actions short days never draw.
    long: bool,
    /// A long day of [`Mix::Even`].
    even: bool,
    /// The Deployment was deleted (foreground or background): it is created again next.
    deleted: bool,
    /// A StatefulSet's RollingUpdate partition, and whether it updates `OnDelete`.
    partition: i32,
    on_delete: bool,
    /// A CronJob's ticks so far (a minute each: at most [`CRONJOB_TICKS`]).
    ticks: u32,
    /// A DaemonSet workload's own nodes, oldest first: (cordoned, tainted).
    nodes: Vec<(bool, bool)>,
    /// Actions drawn after the creation.
    drawn: u32,
}

/// The most steps of a CronJob after its creation (each waits up to a minute for the schedule).
const CRONJOB_TICKS: u32 = 3;

/// Under [`Mix::Even`]: a CronJob's most ticks (a minute each), and a Widget's most actions
/// after its creation (its three actions would take a fifth of a day's steps otherwise).
const EVEN_CRONJOB_TICKS: u32 = 2;
const EVEN_WIDGET_STEPS: u32 = 4;

impl State {
    /// The first action of a workload of `kind`.
    fn create(kind: Kind, long: bool, even: bool, rng: &mut Rng) -> (State, Action) {
        let mut s = State {
            kind,
            replicas: 0,
            revisions: 1,
            paused: false,
            orphaned: false,
            job_ran: false,
            job_gone: false,
            long,
            even: long && even,
            deleted: false,
            partition: 0,
            on_delete: false,
            ticks: 0,
            nodes: Vec::new(),
            drawn: 0,
        };
        let a = match kind {
            Kind::Deployment => create_deployment(rng),
            Kind::StatefulSet => {
                s.replicas = rng.range(1, 4);
                // Short days draw nothing more (their seeds draw the days they always did).
                let (parallel, on_delete) = match (long, s.even) {
                    (true, true) => (rng.chance(40), rng.chance(30)),
                    (true, false) => (rng.chance(40), rng.chance(30)),
                    _ => (false, false),
                };
                s.on_delete = on_delete;
                Action::CreateStatefulSet { replicas: s.replicas, parallel, on_delete }
            }
            Kind::Job => {
                let delete_mid_run = rng.chance(if long { 50 } else { 40 });
                s.job_ran = true;
                s.job_gone = delete_mid_run;
                let completions = if delete_mid_run { rng.range(6, 12) } else { rng.range(1, 6) };
                Action::CreateJob { completions, parallelism: rng.range(1, 3), delete_mid_run }
            }
            Kind::Widget => Action::CreateWidget,
            Kind::DaemonSet => {
                // maxSurge with no pod unavailable, or pods unavailable and no surge.
                let n = if rng.chance(30) { Bound::Percent(50) } else { Bound::Count(rng.range(1, 2)) };
                let (surge, unavailable) = if rng.chance(50) { (n, Bound::Count(0)) } else { (Bound::Count(0), n) };
                Action::CreateDaemonSet { surge, unavailable }
            }
            Kind::CronJob => Action::CreateCronJob { replace: rng.chance(50), history: rng.range(1, 2) },
        };
        s.apply(&a);
        (s, a)
    }

    /// How many shares of a long day's steps the workload is dealt under [`Mix::Even`].
    fn share(&self) -> u64 {
        if self.kind == Kind::Deployment && !self.orphaned {
            3
        } else {
            1
        }
    }

    /// Nothing more can happen to the workload: a Job deleted, a CronJob that ticked its last.
    fn done(&self) -> bool {
        let ticks = if self.even { EVEN_CRONJOB_TICKS } else { CRONJOB_TICKS };
        (self.kind == Kind::Job && self.job_gone)
            || (self.kind == Kind::CronJob && self.ticks >= ticks)
            || (self.even && self.kind == Kind::Widget && self.drawn >= EVEN_WIDGET_STEPS)
    }

    /// The next action, or `None` when nothing more can happen to the workload.
    fn next(&mut self, rng: &mut Rng) -> Option<Action> {
        if self.done() {
            return None;
        }
        self.drawn += 1;
        let rw = if self.even { 1 } else { 3 };
        let removal =
            |rng: &mut Rng| rng.weighted(&[(rw, Removal::Delete), (1, Removal::GracePeriodZero), (1, Removal::Evict)]);
        let a = match self.kind {
            Kind::Deployment if self.orphaned => {
                if self.replicas > 0 && rng.chance(50) {
                    Action::RemovePod { how: removal(rng) }
                } else {
                    Action::ScaleOrphan { replicas: other(rng, 1, 5, self.replicas) }
                }
            }
            Kind::Deployment if self.deleted => create_deployment(rng),
            Kind::Deployment => self.next_deployment(rng),
            Kind::StatefulSet => {
                let mut choices: Vec<(u64, u8)> =
                    if self.even { vec![(3, 0), (1, 1), (1, 2)] } else { vec![(3, 0), (2, 1), (3, 2)] };
                if self.long {
                    if self.partition > 0 {
                        choices.push((if self.even { 12 } else { 3 }, 3));
                    }
                    if self.replicas >= 2 {
                        choices.push((if self.even { 1 } else { 2 }, 4));
                    }
                }
                match rng.weighted(&choices) {
                    0 if self.on_delete => Action::StatefulImageOnDelete,
                    0 => Action::StatefulImage {
                        partition: if rng.chance(50) { 0 } else { rng.range(1, self.replicas) },
                    },
                    1 => Action::ScaleStatefulSet { replicas: other(rng, 1, 5, self.replicas) },
                    3 => Action::LowerPartition { partition: rng.range(0, self.partition - 1) },
                    4 => Action::DrainWithPdb,
                    _ => Action::RemovePod { how: removal(rng) },
                }
            }
            Kind::CronJob => Action::CronJobTick,
            Kind::DaemonSet => {
                // (image, pod removal, node added, removed, cordoned, tainted)
                let w: [u64; 6] = if self.even { [1, 1, 2, 2, 6, 6] } else { [3, 3, 2, 1, 1, 1] };
                let mut choices: Vec<(u64, u8)> = vec![(w[0], 0), (w[1], 1)];
                if self.nodes.len() < 2 {
                    choices.push((w[2], 2));
                }
                if !self.nodes.is_empty() {
                    choices.push((w[3], 3));
                }
                if self.nodes.iter().any(|n| !n.0) {
                    choices.push((w[4], 4));
                }
                if self.nodes.iter().any(|n| !n.1) {
                    choices.push((w[5], 5));
                }
                match rng.weighted(&choices) {
                    0 => Action::DaemonSetImage,
                    2 => Action::Node { change: NodeChange::Add },
                    3 => Action::Node { change: NodeChange::Remove },
                    4 => Action::Node { change: NodeChange::Cordon },
                    5 => Action::Node { change: NodeChange::TaintNoExecute },
                    _ => Action::RemovePod { how: removal(rng) },
                }
            }
            Kind::Job if self.job_gone => return None,
            Kind::Job => Action::DeleteJob,
            Kind::Widget => {
                rng.weighted(&[(2, Action::WidgetSpec), (2, Action::WidgetDrift), (2, Action::PersonEditsChild)])
            }
        };
        self.apply(&a);
        Some(a)
    }

    fn next_deployment(&self, rng: &mut Rng) -> Action {
        // The weight of each action by its number below (image 0 ... drain 15, orphan 10).
        let w: [u64; 16] = if self.even {
            [5, 10, 5, 7, 40, 14, 5, 5, 5, 1, 5, 26, 7, 6, 10, 1]
        } else if self.long {
            [3, 4, 2, 2, 4, 5, 2, 2, 2, 3, 2, 3, 2, 2, 2, 2]
        } else {
            [3, 2, 2, 2, 4, 2, 1, 2, 1, 3, 1, 0, 0, 0, 0, 0]
        };
        let mut choices: Vec<(u64, u8)> = vec![(w[0], 0), (w[5], 5)];
        if self.paused {
            choices.push((w[4], 4));
        } else {
            choices.extend([(w[3], 3), (w[10], 10)]);
            if self.revisions >= 2 {
                choices.push((w[1], 1));
            }
            choices.push((w[2], 2));
        }
        if self.replicas > 0 {
            choices.extend([(w[6], 6), (w[7], 7), (w[8], 8), (w[9], 9)]);
        }
        if self.long {
            if !self.paused {
                if self.revisions >= 3 {
                    choices.push((w[11], 11));
                }
                choices.extend([(w[12], 12), (w[13], 13)]);
            }
            choices.push((w[14], 14));
            if self.replicas >= 2 {
                choices.push((w[15], 15));
            }
        }
        match rng.weighted(&choices) {
            0 => Action::Image,
            1 => Action::Undo,
            2 => Action::Restart,
            3 => Action::PauseAndChange,
            4 => Action::Resume,
            5 => Action::Scale {
                replicas: other(rng, 1, 6, self.replicas),
                by: rng.weighted(&[(1, Scaler::Spec), (1, Scaler::Kubectl), (1, Scaler::Hpa)]),
            },
            6 => Action::ScaleToZeroAndBack { replicas: rng.range(1, 6) },
            7 => Action::PersonScalesReplicaSet { replicas: self.replicas + rng.range(1, 3) },
            8 => Action::PersonEditsReplicaSet { replicas: (self.replicas - rng.range(1, 2)).max(0) },
            9 => Action::RemovePod {
                how: rng.weighted(&[
                    (if self.even { 1 } else { 3 }, Removal::Delete),
                    (1, Removal::GracePeriodZero),
                    (1, Removal::Evict),
                ]),
            },
            11 => Action::UndoTo { back: rng.range(2, (self.revisions as i32 - 1).min(4)) },
            12 => Action::InterruptedRollout,
            13 => Action::StuckRollout { deadline: rng.range(3, 8) },
            14 => Action::DeleteDeployment { foreground: rng.chance(50) },
            15 => Action::DrainWithPdb,
            _ => Action::OrphanDelete,
        }
    }

    fn apply(&mut self, a: &Action) {
        match a {
            Action::CreateDeployment { replicas, .. } => {
                self.replicas = *replicas;
                self.revisions = 1;
                self.paused = false;
                self.deleted = false;
            }
            Action::DeleteDeployment { .. } => self.deleted = true,
            Action::InterruptedRollout => self.revisions += 2,
            Action::StatefulImage { partition } | Action::LowerPartition { partition } => self.partition = *partition,
            Action::Image | Action::Restart => self.revisions += 1,
            Action::PauseAndChange => self.paused = true,
            Action::Resume => {
                self.paused = false;
                self.revisions += 1;
            }
            Action::Scale { replicas, .. }
            | Action::ScaleToZeroAndBack { replicas }
            | Action::ScaleOrphan { replicas }
            | Action::ScaleStatefulSet { replicas } => self.replicas = *replicas,
            Action::OrphanDelete => self.orphaned = true,
            Action::DeleteJob => self.job_gone = true,
            Action::CronJobTick => self.ticks += 1,
            Action::Node { change } => {
                apply_node(&mut self.nodes, *change);
            }
            _ => {}
        }
    }
}

/// A node change on a workload's own nodes, oldest first: (cordoned, tainted). What
/// [`super::act`] does to the nodes it made, in the same order.
pub fn apply_node(nodes: &mut Vec<(bool, bool)>, change: NodeChange) -> Option<usize> {
    match change {
        NodeChange::Add => {
            nodes.push((false, false));
            Some(nodes.len() - 1)
        }
        NodeChange::Remove => {
            nodes.pop();
            Some(nodes.len())
        }
        NodeChange::Cordon => {
            let i = nodes.iter().rposition(|n| !n.0)?;
            nodes[i].0 = true;
            Some(i)
        }
        NodeChange::TaintNoExecute => {
            let i = nodes.iter().rposition(|n| !n.1)?;
            nodes[i].1 = true;
            Some(i)
        }
    }
}

/// A Deployment of 1–6 replicas, `maxSurge` and `maxUnavailable` 0–2 or 25 %/50 % (not both 0).
fn create_deployment(rng: &mut Rng) -> Action {
    let replicas = rng.range(1, 6);
    let bound = |rng: &mut Rng| {
        if rng.chance(30) {
            Bound::Percent(rng.weighted(&[(1, 25), (1, 50)]))
        } else {
            Bound::Count(rng.range(0, 2))
        }
    };
    let surge = bound(rng);
    let mut unavailable = bound(rng);
    // The API refuses a rolling update that may neither add nor remove a pod.
    if matches!((&surge, &unavailable), (Bound::Count(0), Bound::Count(0))) {
        unavailable = Bound::Count(1);
    }
    Action::CreateDeployment { replicas, surge, unavailable }
}

/// A number in `lo..=hi` other than `current`: a write that changes nothing is no intent.
fn other(rng: &mut Rng, lo: i32, hi: i32, current: i32) -> i32 {
    let n = rng.range(lo, hi - 1);
    if n >= current {
        n + 1
    } else {
        n
    }
}

/// One workload of a day: its kind and its actions, the first one its creation.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: Kind,
    pub actions: Vec<Action>,
}

/// A day drawn from a seed.
#[derive(Clone, Debug)]
pub struct Day {
    pub seed: u64,
    pub workloads: Vec<Workload>,
}

impl Day {
    pub fn steps(&self) -> usize {
        self.workloads.iter().map(|w| w.actions.len()).sum()
    }
}

/// From this many steps a day is long: up to 5 workloads, a mix richer in Jobs and Widgets.
pub const LONG_DAY: usize = 20;

/// The day of `seed`: 1 to 3 workloads (5 in a long day; fewer when `steps` is smaller), each created, and
/// `steps` actions in all, dealt to the workloads at random.
pub fn day(seed: u64, steps: usize) -> Day {
    day_of(seed, steps, Mix::default())
}

/// The day of `seed` drawn with the weights of `mix` (short days: the same with either).
pub fn day_of(seed: u64, steps: usize, mix: Mix) -> Day {
    let mut rng = Rng::new(seed);
    // A long day (20 steps or more) holds more workloads, and more Jobs and Widgets (a Job has
    // at most two steps, a Widget one workload per namespace): over 50 long days every action
    // is drawn at least 20 times. Shorter days draw as they always did (their seeds stay).
    let long = steps >= LONG_DAY;
    let even = long && mix == Mix::Even;
    let n = if even { rng.range(4, 6) } else { rng.range(1, steps.clamp(1, if long { 5 } else { 3 }) as i32) } as usize;
    let kinds: &[(u64, Kind)] = if even {
        &[
            (11, Kind::Deployment),
            (5, Kind::StatefulSet),
            (9, Kind::Job),
            (5, Kind::Widget),
            (5, Kind::DaemonSet),
            (5, Kind::CronJob),
        ]
    } else if long {
        &[
            (5, Kind::Deployment),
            (3, Kind::StatefulSet),
            (4, Kind::Job),
            (3, Kind::Widget),
            (2, Kind::DaemonSet),
            (1, Kind::CronJob),
        ]
    } else {
        &[(4, Kind::Deployment), (2, Kind::StatefulSet), (1, Kind::Job), (1, Kind::Widget)]
    };
    let mut states = Vec::new();
    let mut workloads = Vec::new();
    for _ in 0..n {
        let kind = rng.weighted(kinds);
        let (s, a) = State::create(kind, long, even, &mut rng);
        states.push(s);
        workloads.push(Workload { kind, actions: vec![a] });
    }
    let mut left = steps.saturating_sub(n);
    while left > 0 {
        let open: Vec<usize> = (0..n).filter(|&i| !states[i].done()).collect();
        if open.is_empty() {
            break;
        }
        let i = if even {
            // A Deployment has the most actions to draw: it is dealt more of the steps.
            let by: Vec<(u64, usize)> = open.iter().map(|&i| (states[i].share(), i)).collect();
            rng.weighted(&by)
        } else {
            open[(rng.next_u64() % open.len() as u64) as usize]
        };
        if let Some(a) = states[i].next(&mut rng) {
            workloads[i].actions.push(a);
            left -= 1;
        }
    }
    Day { seed, workloads }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_day_again() {
        for seed in [0, 1, 42, u64::MAX] {
            let (a, b) = (day(seed, 10), day(seed, 10));
            assert_eq!(format!("{:?}", a.workloads), format!("{:?}", b.workloads));
        }
        assert_ne!(format!("{:?}", day(1, 10).workloads), format!("{:?}", day(2, 10).workloads));
    }

    #[test]
    fn every_workload_starts_with_its_creation_and_follows_its_state() {
        for (seed, steps, most) in (0..500).map(|s| (s, 12, 3)).chain((0..200).map(|s| (s, 30, 6))) {
            let d = day(seed, steps);
            assert!(d.steps() <= steps && !d.workloads.is_empty() && d.workloads.len() <= most);
            for w in &d.workloads {
                let created = matches!(
                    w.actions[0],
                    Action::CreateDeployment { .. }
                        | Action::CreateStatefulSet { .. }
                        | Action::CreateJob { .. }
                        | Action::CreateWidget
                        | Action::CreateDaemonSet { .. }
                        | Action::CreateCronJob { .. }
                );
                assert!(created, "seed {seed}: {:?} first", w.actions[0]);
                let mut paused = false;
                let mut orphaned = false;
                let mut deleted = false;
                let mut partition = 0;
                let on_delete = matches!(w.actions[0], Action::CreateStatefulSet { on_delete: true, .. });
                let mut replicas = match w.actions[0] {
                    Action::CreateDeployment { replicas, .. } | Action::CreateStatefulSet { replicas, .. } => replicas,
                    _ => 0,
                };
                for a in &w.actions[1..] {
                    // A deleted Deployment is created again, and nothing else happens to it.
                    assert_eq!(
                        deleted,
                        matches!(a, Action::CreateDeployment { .. }),
                        "seed {seed}: {a:?} after a delete"
                    );
                    if let Action::CreateDeployment { replicas: n, .. } = a {
                        (deleted, paused, replicas) = (false, false, *n);
                        continue;
                    }
                    if steps < LONG_DAY {
                        let new = matches!(
                            a,
                            Action::UndoTo { .. }
                                | Action::InterruptedRollout
                                | Action::StuckRollout { .. }
                                | Action::DeleteDeployment { .. }
                                | Action::DrainWithPdb
                                | Action::StatefulImageOnDelete
                                | Action::LowerPartition { .. }
                                | Action::DaemonSetImage
                                | Action::CronJobTick
                                | Action::Node { .. }
                        );
                        assert!(!new, "seed {seed}: {a:?} in a short day");
                    }
                    match a {
                        Action::StatefulImage { .. } => {
                            assert!(!on_delete, "seed {seed}: a rolling image change of an OnDelete StatefulSet")
                        }
                        Action::StatefulImageOnDelete => {
                            assert!(on_delete, "seed {seed}: {a:?} of a RollingUpdate StatefulSet")
                        }
                        Action::LowerPartition { partition: p } => {
                            assert!(*p < partition, "seed {seed}: {a:?} lowers nothing from {partition}")
                        }
                        Action::DrainWithPdb => assert!(replicas >= 2, "seed {seed}: {a:?} of {replicas} replicas"),
                        Action::DeleteDeployment { .. } => deleted = true,
                        _ => {}
                    }
                    if let Action::StatefulImage { partition: p } | Action::LowerPartition { partition: p } = a {
                        partition = *p;
                    }
                    if let Action::Scale { replicas: n, .. }
                    | Action::ScaleOrphan { replicas: n }
                    | Action::ScaleStatefulSet { replicas: n } = a
                    {
                        assert_ne!(*n, replicas, "seed {seed}: {a:?} changes nothing");
                        replicas = *n;
                    }
                    if let Action::ScaleToZeroAndBack { replicas: n } = a {
                        assert!(replicas > 0, "seed {seed}: {a:?} of nothing");
                        replicas = *n;
                    }
                    match a {
                        Action::Undo
                        | Action::UndoTo { .. }
                        | Action::Restart
                        | Action::InterruptedRollout
                        | Action::StuckRollout { .. } => {
                            assert!(!paused, "seed {seed}: {a:?} of a paused Deployment")
                        }
                        Action::PauseAndChange => paused = true,
                        Action::Resume => paused = false,
                        Action::OrphanDelete => orphaned = true,
                        Action::ScaleOrphan { .. } | Action::RemovePod { .. } | Action::DeleteDeployment { .. } => {}
                        _ => assert!(!orphaned, "seed {seed}: {a:?} after the Deployment was deleted"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_short_day_draws_what_it_drew_before_the_catalog_grew() {
        // Seed 4327553608411769848 of 12 steps, as docs/e2e.md lists it.
        let d = day(4327553608411769848, 12);
        let tags: Vec<Vec<&str>> = d.workloads.iter().map(|w| w.actions.iter().map(Action::tag).collect()).collect();
        assert_eq!(
            tags,
            [
                vec!["create", "person-scales-replicaset", "delete-cascade-orphan"],
                vec!["create", "delete-pod", "delete-pod-grace-0", "evict-pod", "delete-pod"],
                vec!["create", "person-scales-replicaset", "delete-pod", "delete-cascade-orphan"],
            ]
        );
        assert!(matches!(
            d.workloads[1].actions[0],
            Action::CreateStatefulSet { replicas: 1, parallel: false, on_delete: false }
        ));
    }

    /// What a recorded day's `about` says it drew: one line per workload.
    fn about(d: &Day) -> Vec<String> {
        d.workloads
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let (kind, name) = w.kind.object();
                let actions: Vec<String> = w.actions.iter().map(|a| format!("{a:?}")).collect();
                format!("day-{:016x}-{i}: {kind} {name}: {}", d.seed, actions.join(", "))
            })
            .collect()
    }

    #[test]
    fn the_long_days_recorded_before_the_even_mix_draw_the_same_with_the_grown_one() {
        // Days recorded since the catalog grew, before its weights were evened out (their
        // `about`): the long run's seeds 2200–2259 (30 steps) and seed 642 (20 steps).
        let dir = crate::repo_root().join("tests/fixtures/random-days");
        let mut checked = 0;
        for (seed, steps) in (2200..2260).map(|s| (s, 30)).chain([(642, 20)]) {
            let Some(text) = ["failing", "passing"]
                .iter()
                .find_map(|sub| std::fs::read_to_string(dir.join(sub).join(format!("seed-{seed}.expected.json"))).ok())
            else {
                continue;
            };
            let recorded: serde_json::Value = serde_json::from_str(&text).unwrap();
            let recorded: Vec<&str> = recorded["about"].as_str().unwrap().lines().collect();
            assert_eq!(about(&day_of(seed, steps, Mix::Grown)), recorded, "seed {seed}");
            assert_ne!(about(&day_of(seed, steps, Mix::Even)), recorded, "seed {seed}: the even mix draws another day");
            checked += 1;
        }
        assert!(checked >= 9, "the failing days of the long run are kept: {checked}");
        // A short day draws the same with either.
        for seed in 0..200 {
            assert_eq!(about(&day_of(seed, 15, Mix::Grown)), about(&day_of(seed, 15, Mix::Even)));
        }
    }

    #[test]
    fn fifty_even_long_days_draw_every_action_twenty_times() {
        // The long run's seeds (docs/e2e.md): 50 days of 30 steps from 6391.
        let mut n: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for seed in 6391..6441 {
            for w in day(seed, 30).workloads {
                for a in &w.actions {
                    let tag = if a.tag() == "create" { format!("create {:?}", w.kind) } else { a.tag().to_string() };
                    *n.entry(tag).or_default() += 1;
                }
            }
        }
        assert_eq!(n.len(), 44, "every action and creation drawn: {n:?}");
        let rare: Vec<_> = n.iter().filter(|(_, &k)| k < 20).collect();
        assert!(rare.is_empty(), "drawn fewer than 20 times: {rare:?}");
    }

    #[test]
    fn long_days_draw_the_whole_catalog() {
        let mut tags = std::collections::BTreeSet::new();
        for seed in 0..100 {
            for w in day(seed, 30).workloads {
                tags.extend(w.actions.iter().map(Action::tag));
            }
        }
        for t in [
            "rollout-undo-to-revision",
            "rollout-interrupted",
            "rollout-stuck",
            "delete-foreground",
            "delete-background",
            "drain-pdb-refused",
            "statefulset-image-ondelete",
            "statefulset-lower-partition",
            "daemonset-image",
            "cronjob-tick",
            "node-added",
            "node-removed",
            "node-cordoned",
            "node-tainted-noexecute",
        ] {
            assert!(tags.contains(t), "{t} never drawn in 100 long days");
        }
    }
}
