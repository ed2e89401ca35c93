//! Deployments, StatefulSets, DaemonSets and Jobs for the scenarios, and waiting for the real controllers to finish with them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, RollingUpdateDeployment,
    StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta};

use crate::wait;

/// A Deployment of `replicas` pods labelled `app=<name>`. Rolling update with one surge pod
/// and one unavailable pod allowed, so the first sync after a template change both creates the
/// new ReplicaSet and scales the old one down.
pub fn deployment(name: &str, replicas: i32, image: &str, annotations: &[(&str, &str)]) -> Deployment {
    rolling_deployment(name, replicas, image, annotations, IntOrString::Int(1), IntOrString::Int(1))
}

/// A Deployment like [`deployment`] with the rolling update's `maxSurge` and `maxUnavailable`
/// given (numbers or percentages).
pub fn rolling_deployment(
    name: &str,
    replicas: i32,
    image: &str,
    annotations: &[(&str, &str)],
    max_surge: IntOrString,
    max_unavailable: IntOrString,
) -> Deployment {
    let labels: BTreeMap<String, String> = [("app".to_string(), name.to_string())].into();
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: (!annotations.is_empty())
                .then(|| annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(max_surge),
                    max_unavailable: Some(max_unavailable),
                }),
            }),
            template: pod_template(&labels, image),
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The pod template of every workload here: one container, labelled `app=<name>`.
fn pod_template(labels: &BTreeMap<String, String>, image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() }),
        spec: Some(PodSpec {
            containers: vec![Container { name: "app".into(), image: Some(image.into()), ..Container::default() }],
            ..PodSpec::default()
        }),
    }
}

fn app_labels(name: &str) -> BTreeMap<String, String> {
    [("app".to_string(), name.to_string())].into()
}

/// A StatefulSet of `replicas` pods (ordered start, rolling update one pod at a time).
pub fn statefulset(name: &str, replicas: i32, image: &str) -> StatefulSet {
    let labels = app_labels(name);
    StatefulSet {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name.into()),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
            template: pod_template(&labels, image),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// A DaemonSet: one pod on every node (rolling update, one node at a time).
pub fn daemonset(name: &str, image: &str) -> DaemonSet {
    let labels = app_labels(name);
    DaemonSet {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
            template: pod_template(&labels, image),
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

/// A Job of `completions` pods, `parallelism` at a time (kwok completes a Job's pods at once).
pub fn job(name: &str, completions: i32, parallelism: i32, image: &str) -> Job {
    let labels = app_labels(name);
    let mut template = pod_template(&labels, image);
    if let Some(spec) = template.spec.as_mut() {
        spec.restart_policy = Some("Never".into());
    }
    Job {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(JobSpec {
            completions: Some(completions),
            parallelism: Some(parallelism),
            template,
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// Waits until the statefulset controller has observed the current generation and every
/// replica runs the update revision and is ready.
pub async fn wait_statefulset_rolled_out(api: &Api<StatefulSet>, name: &str) -> Result<StatefulSet> {
    wait::until(&format!("StatefulSet {name} to be rolled out"), Duration::from_secs(120), || async {
        let o = api.get(name).await?;
        let want = o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = o.status.clone().unwrap_or_default();
        let done = s.observed_generation == o.metadata.generation
            && s.current_revision.is_some()
            && s.current_revision == s.update_revision
            && s.replicas == want
            && s.ready_replicas == Some(want)
            && s.updated_replicas == Some(want);
        Ok(done.then_some(o))
    })
    .await
}

/// Waits until the daemon set controller has observed the current generation and runs an
/// updated, available pod on every node.
pub async fn wait_daemonset_rolled_out(api: &Api<DaemonSet>, name: &str) -> Result<DaemonSet> {
    wait::until(&format!("DaemonSet {name} to be rolled out"), Duration::from_secs(120), || async {
        let o = api.get(name).await?;
        let s = o.status.clone().unwrap_or_default();
        let n = s.desired_number_scheduled;
        let done = s.observed_generation == o.metadata.generation
            && n > 0
            && s.current_number_scheduled == n
            && s.updated_number_scheduled == Some(n)
            && s.number_available == Some(n)
            && s.number_ready == n;
        Ok(done.then_some(o))
    })
    .await
}

/// Waits until the Job has its `Complete` condition.
pub async fn wait_job_complete(api: &Api<Job>, name: &str) -> Result<Job> {
    wait::until(&format!("Job {name} to complete"), Duration::from_secs(120), || async {
        let o = api.get(name).await?;
        let done = o
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True"));
        Ok(done.then_some(o))
    })
    .await
}

/// Waits until the deployment controller has observed the current generation and every
/// replica is updated and available, with no old pod left: the Deployment is stable.
pub async fn wait_rolled_out(api: &Api<Deployment>, name: &str) -> Result<Deployment> {
    wait::until(&format!("Deployment {name} to be rolled out"), Duration::from_secs(90), || async {
        let d = api.get(name).await?;
        let generation = d.metadata.generation.unwrap_or(0);
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = d.status.clone().unwrap_or_default();
        let available = s.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Available" && c.status == "True");
        let done = s.observed_generation == Some(generation)
            && s.updated_replicas == Some(want)
            && s.available_replicas == Some(want)
            && s.replicas == Some(want)
            && available;
        Ok(done.then_some(d))
    })
    .await
}

/// The ReplicaSet of a Deployment that has replicas (the current one, once rolled out).
pub async fn current_replicaset(api: &Api<ReplicaSet>, deployment: &str) -> Result<ReplicaSet> {
    let list = api.list(&ListParams::default().labels(&format!("app={deployment}"))).await?;
    list.items
        .into_iter()
        .find(|rs| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0)
        .with_context(|| format!("no ReplicaSet with replicas of Deployment {deployment}"))
}

/// The pods of a Deployment that are not terminating.
pub async fn live_pods(api: &Api<Pod>, deployment: &str) -> Result<Vec<Pod>> {
    let list = api.list(&ListParams::default().labels(&format!("app={deployment}"))).await?;
    Ok(list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect())
}

/// Waits until nothing labelled `app=<name>` is left (ReplicaSets and pods deleted).
pub async fn wait_gone(rs: &Api<ReplicaSet>, pods: &Api<Pod>, name: &str) -> Result<()> {
    let lp = ListParams::default().labels(&format!("app={name}"));
    wait::until(&format!("the ReplicaSets and pods of {name} to be deleted"), Duration::from_secs(90), || async {
        Ok((rs.list(&lp).await?.items.is_empty() && pods.list(&lp).await?.items.is_empty()).then_some(()))
    })
    .await
}
