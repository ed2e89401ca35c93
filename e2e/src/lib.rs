//! End-to-end harness of kausality-stream: a real Kubernetes control plane
//! (`scripts/controlplane.sh`: kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
//! kwok) sends its audit events to a real `kausality-stream serve`, and the tests assert the
//! class of every write that matters. docs/e2e.md tells what each scenario shows.
//!
//! The data path of a test, and where each step lives:
//!
//! - [`serve`]: the `kausality-stream serve` process, its pipeline file, its JSON-lines output.
//! - [`controlplane`]: starts and stops the control plane with its audit webhook pointed at it.
//! - [`actors`]: Kubernetes clients for the admin, a person (`alice`, impersonated), the HPA
//!   (an impersonated service account), each recording the `Audit-Id` of its writes.
//! - [`enriched`]: waiting for kausality-stream's enriched event of a given write.
//! - [`audit`]: the API server's audit log: a scenario's namespace cut out of it, replayed with
//!   `kausality-stream replay`, compared with the live classes, recorded as a fixture.
//! - [`widget`]: a custom resource and its tiny controller (kube-runtime), for parents that
//!   report their observed generation in three different ways.
//! - [`workloads`]: Deployments, and waiting for the real controllers to be done with them.
//! - [`truth`]: the ground truth of a scenario from what the test did (its steps, its own
//!   writes), every write of its namespace labelled, compared with kausality-stream's classes.
//! - [`flux`]: Flux's kustomize-controller (`scripts/flux.sh`) on the control plane, and the
//!   tarballs of the source-controller part the test plays.
//! - [`random`]: random cluster days: a seeded catalog of actions on workloads, run against
//!   the cluster, labelled by [`truth`], recorded as fixtures (`scripts/e2e.sh random`).
//! - [`wait`]: polling a condition until it holds.
//! - [`harness`]: all of the above together for one cluster, stopped when dropped.

pub mod actors;
pub mod audit;
pub mod controlplane;
pub mod enriched;
pub mod flux;
pub mod harness;
pub mod random;
pub mod serve;
pub mod truth;
pub mod wait;
pub mod widget;
pub mod workloads;

use std::path::PathBuf;

/// The repository root (the e2e crate lives in `<root>/e2e`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("e2e/ has a parent").to_path_buf()
}

/// The cluster name the API server's webhook posts under (`/audit/e2e`), and that replays use.
pub const CLUSTER: &str = "e2e";

/// The users of the controllers that matter, as they appear in audit events
/// (kube-controller-manager runs with `--use-service-account-credentials=true`).
pub mod users {
    pub const ADMIN: &str = "kubernetes-admin";
    pub const ALICE: &str = "alice";
    pub const DEPLOYMENT_CONTROLLER: &str = "system:serviceaccount:kube-system:deployment-controller";
    pub const REPLICASET_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";
    pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
    pub const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
    /// kwok plays the kubelets: pod status, and the final delete of a terminating pod.
    pub const KWOK: &str = "kwok-controller";
}
