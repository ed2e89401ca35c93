//! The scenarios: each builds its own namespace, makes real controllers act, and asserts the
//! exact class kausality-stream gave the writes that matter; each ends with the replay check
//! of the API server's audit log (`Scene::finish`).

mod approvals;
mod cluster_day;
mod deployments;
mod flux;
mod widgets;

use anyhow::{bail, Result};
use kausality_e2e::enriched::Event;
use kausality_e2e::harness::Cluster;
use kausality_e2e::widget::StatusStyle;

pub async fn run(cluster: &Cluster, name: &str) -> Result<()> {
    match name.strip_prefix("dual-").unwrap_or(name) {
        "rollout" => deployments::rollout(cluster).await,
        "manual-scale" => deployments::manual_scale(cluster).await,
        "hpa-scale" => deployments::hpa_scale(cluster).await,
        "deletes" => deployments::deletes(cluster).await,
        "widget-native" => widgets::widget(cluster, "widget-native", StatusStyle::Native).await,
        "widget-conditions" => widgets::widget(cluster, "widget-conditions", StatusStyle::Conditions).await,
        "widget-synthetic" => widgets::widget(cluster, "widget-synthetic", StatusStyle::Synthetic).await,
        "approvals" => approvals::approvals(cluster).await,
        "cluster-day" => cluster_day::cluster_day(cluster).await,
        "flux" => flux::flux(cluster).await,
        "flux-tenant" => flux::flux_tenant(cluster).await,
        other => bail!("no scenario {other}"),
    }
}

/// Fails unless `got` equals `want`, naming what was checked on which event.
pub fn check<T: PartialEq + std::fmt::Debug>(what: &str, ev: &Event, got: T, want: T) -> Result<()> {
    if got != want {
        bail!("{what}: expected {want:?}, got {got:?} — {}", ev.describe());
    }
    Ok(())
}
