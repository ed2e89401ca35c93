//! Deployments for the scenarios, and waiting for the real controllers to finish with them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta};

use crate::wait;

/// A Deployment of `replicas` pods labelled `app=<name>`. Rolling update with one surge pod
/// and one unavailable pod allowed, so the first sync after a template change both creates the
/// new ReplicaSet and scales the old one down.
pub fn deployment(name: &str, replicas: i32, image: &str, annotations: &[(&str, &str)]) -> Deployment {
    let labels: BTreeMap<String, String> = [("app".to_string(), name.to_string())].into();
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: (!annotations.is_empty()).then(|| annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment { max_surge: Some(IntOrString::Int(1)), max_unavailable: Some(IntOrString::Int(1)) }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container { name: "app".into(), image: Some(image.into()), ..Container::default() }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
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
