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
}

impl Kind {
    /// The kind as the API names it, and the name of the workload's object.
    pub fn object(self) -> (&'static str, &'static str) {
        match self {
            Kind::Deployment => ("Deployment", "app"),
            Kind::StatefulSet => ("StatefulSet", "db"),
            Kind::Job => ("Job", "batch"),
            Kind::Widget => ("Widget", "w"),
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
    CreateStatefulSet {
        replicas: i32,
    },
    /// A new image with a RollingUpdate `partition` (0: none).
    StatefulImage {
        partition: i32,
    },
    ScaleStatefulSet {
        replicas: i32,
    },
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
            Action::CreateDeployment { .. } | Action::CreateStatefulSet { .. } | Action::CreateJob { delete_mid_run: false, .. } | Action::CreateWidget => {
                "create"
            }
            Action::CreateJob { delete_mid_run: true, .. } => "job-deleted-mid-run",
            Action::Image => "image",
            Action::Undo => "rollout-undo",
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
            Action::DeleteJob => "delete-job",
            Action::WidgetSpec => "widget-spec",
            Action::WidgetDrift => "widget-drift",
            Action::PersonEditsChild => "person-edits-child",
        }
    }
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
    /// deleted mid-run.
    long: bool,
}

impl State {
    /// The first action of a workload of `kind`.
    fn create(kind: Kind, long: bool, rng: &mut Rng) -> (State, Action) {
        let mut s = State { kind, replicas: 0, revisions: 1, paused: false, orphaned: false, job_ran: false, job_gone: false, long };
        let a = match kind {
            Kind::Deployment => {
                s.replicas = rng.range(1, 6);
                let bound = |rng: &mut Rng| if rng.chance(30) { Bound::Percent(rng.weighted(&[(1, 25), (1, 50)])) } else { Bound::Count(rng.range(0, 2)) };
                let surge = bound(rng);
                let mut unavailable = bound(rng);
                // The API refuses a rolling update that may neither add nor remove a pod.
                if matches!((&surge, &unavailable), (Bound::Count(0), Bound::Count(0))) {
                    unavailable = Bound::Count(1);
                }
                Action::CreateDeployment { replicas: s.replicas, surge, unavailable }
            }
            Kind::StatefulSet => {
                s.replicas = rng.range(1, 4);
                Action::CreateStatefulSet { replicas: s.replicas }
            }
            Kind::Job => {
                let delete_mid_run = rng.chance(if long { 50 } else { 40 });
                s.job_ran = true;
                s.job_gone = delete_mid_run;
                let completions = if delete_mid_run { rng.range(6, 12) } else { rng.range(1, 6) };
                Action::CreateJob { completions, parallelism: rng.range(1, 3), delete_mid_run }
            }
            Kind::Widget => Action::CreateWidget,
        };
        (s, a)
    }

    /// The next action, or `None` when nothing more can happen to the workload.
    fn next(&mut self, rng: &mut Rng) -> Option<Action> {
        let removal = |rng: &mut Rng| rng.weighted(&[(3, Removal::Delete), (1, Removal::GracePeriodZero), (1, Removal::Evict)]);
        let a = match self.kind {
            Kind::Deployment if self.orphaned => {
                if self.replicas > 0 && rng.chance(50) {
                    Action::RemovePod { how: removal(rng) }
                } else {
                    Action::ScaleOrphan { replicas: other(rng, 1, 5, self.replicas) }
                }
            }
            Kind::Deployment => self.next_deployment(rng),
            Kind::StatefulSet => match rng.weighted(&[(3, 0), (2, 1), (3, 2)]) {
                0 => Action::StatefulImage { partition: if rng.chance(50) { 0 } else { rng.range(1, self.replicas) } },
                1 => Action::ScaleStatefulSet { replicas: other(rng, 1, 5, self.replicas) },
                _ => Action::RemovePod { how: removal(rng) },
            },
            Kind::Job if self.job_gone => return None,
            Kind::Job => Action::DeleteJob,
            Kind::Widget => rng.weighted(&[(2, Action::WidgetSpec), (2, Action::WidgetDrift), (2, Action::PersonEditsChild)]),
        };
        self.apply(&a);
        Some(a)
    }

    fn next_deployment(&self, rng: &mut Rng) -> Action {
        let twice = if self.long { 2 } else { 1 };
        let mut choices: Vec<(u64, u8)> = vec![(3, 0), (if self.long { 5 } else { 2 }, 5)];
        if self.paused {
            choices.push((4, 4));
        } else {
            choices.extend([(2, 3), (twice, 10)]);
            if self.revisions >= 2 {
                choices.push((2 * twice, 1));
            }
            choices.push((2, 2));
        }
        if self.replicas > 0 {
            choices.extend([(twice, 6), (2, 7), (twice, 8), (3, 9)]);
        }
        match rng.weighted(&choices) {
            0 => Action::Image,
            1 => Action::Undo,
            2 => Action::Restart,
            3 => Action::PauseAndChange,
            4 => Action::Resume,
            5 => Action::Scale { replicas: other(rng, 1, 6, self.replicas), by: rng.weighted(&[(1, Scaler::Spec), (1, Scaler::Kubectl), (1, Scaler::Hpa)]) },
            6 => Action::ScaleToZeroAndBack { replicas: rng.range(1, 6) },
            7 => Action::PersonScalesReplicaSet { replicas: self.replicas + rng.range(1, 3) },
            8 => Action::PersonEditsReplicaSet { replicas: (self.replicas - rng.range(1, 2)).max(0) },
            9 => Action::RemovePod { how: rng.weighted(&[(3, Removal::Delete), (1, Removal::GracePeriodZero), (1, Removal::Evict)]) },
            _ => Action::OrphanDelete,
        }
    }

    fn apply(&mut self, a: &Action) {
        match a {
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
            _ => {}
        }
    }
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
    let mut rng = Rng::new(seed);
    // A long day (20 steps or more) holds more workloads, and more Jobs and Widgets (a Job has
    // at most two steps, a Widget one workload per namespace): over 50 long days every action
    // is drawn at least 20 times. Shorter days draw as they always did (their seeds stay).
    let long = steps >= LONG_DAY;
    let n = rng.range(1, steps.clamp(1, if long { 5 } else { 3 }) as i32) as usize;
    let kinds: &[(u64, Kind)] = if long {
        &[(5, Kind::Deployment), (3, Kind::StatefulSet), (4, Kind::Job), (3, Kind::Widget)]
    } else {
        &[(4, Kind::Deployment), (2, Kind::StatefulSet), (1, Kind::Job), (1, Kind::Widget)]
    };
    let mut states = Vec::new();
    let mut workloads = Vec::new();
    for _ in 0..n {
        let kind = rng.weighted(kinds);
        let (s, a) = State::create(kind, long, &mut rng);
        states.push(s);
        workloads.push(Workload { kind, actions: vec![a] });
    }
    let mut left = steps.saturating_sub(n);
    while left > 0 {
        let open: Vec<usize> = (0..n).filter(|&i| !(states[i].kind == Kind::Job && states[i].job_gone)).collect();
        if open.is_empty() {
            break;
        }
        let i = open[(rng.next_u64() % open.len() as u64) as usize];
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
        for (seed, steps, most) in (0..500).map(|s| (s, 12, 3)).chain((0..200).map(|s| (s, 30, 5))) {
            let d = day(seed, steps);
            assert!(d.steps() <= steps && !d.workloads.is_empty() && d.workloads.len() <= most);
            for w in &d.workloads {
                let created = matches!(
                    w.actions[0],
                    Action::CreateDeployment { .. } | Action::CreateStatefulSet { .. } | Action::CreateJob { .. } | Action::CreateWidget
                );
                assert!(created, "seed {seed}: {:?} first", w.actions[0]);
                let mut paused = false;
                let mut orphaned = false;
                let mut replicas = match w.actions[0] {
                    Action::CreateDeployment { replicas, .. } | Action::CreateStatefulSet { replicas } => replicas,
                    _ => 0,
                };
                for a in &w.actions[1..] {
                    if let Action::Scale { replicas: n, .. } | Action::ScaleOrphan { replicas: n } | Action::ScaleStatefulSet { replicas: n } = a {
                        assert_ne!(*n, replicas, "seed {seed}: {a:?} changes nothing");
                        replicas = *n;
                    }
                    if let Action::ScaleToZeroAndBack { replicas: n } = a {
                        assert!(replicas > 0, "seed {seed}: {a:?} of nothing");
                        replicas = *n;
                    }
                    match a {
                        Action::Undo | Action::Restart => assert!(!paused, "seed {seed}: {a:?} of a paused Deployment"),
                        Action::PauseAndChange => paused = true,
                        Action::Resume => paused = false,
                        Action::OrphanDelete => orphaned = true,
                        Action::ScaleOrphan { .. } | Action::RemovePod { .. } => {}
                        _ => assert!(!orphaned, "seed {seed}: {a:?} after the Deployment was deleted"),
                    }
                }
            }
        }
    }
}
