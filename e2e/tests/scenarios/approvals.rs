//! Scenario 6: drift resolution by the parent's annotations (DESIGN §1.7): a `once` approval,
//! a rejection, a freeze.

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use super::check;
use super::widgets::{next_child_write, stable_widget};
use kausality_e2e::harness::{Cluster, Scene};
use kausality_e2e::widget::{child_name, StatusStyle, Widget};

/// Sets (or, with `Value::Null`, removes) annotations of Widget `w` as the admin: a
/// metadata-only write, no new generation.
async fn annotate(s: &Scene<'_>, annotations: Value) -> Result<()> {
    let widgets: Api<Widget> = Api::namespaced(s.admin.client.clone(), &s.ns);
    widgets
        .patch("w", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": annotations}})))
        .await?;
    Ok(())
}

pub async fn approvals(cluster: &Cluster) -> Result<()> {
    let mut s = Scene::new(
        cluster,
        "approvals",
        "a once approval approves the next drift only, a rejection rejects, a freeze makes every child change a freeze violation",
    )
    .await?;
    let (ctl, user, child) = stable_widget(&mut s, StatusStyle::Native).await?;
    ctl.wait_reconciled(1).await?;

    let approval =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": child_name("w"), "mode": "once", "generation": 1}])
            .to_string();
    annotate(&s, json!({"kausality.io/approvals": approval})).await?;
    ctl.set_knob("1");
    let first = next_child_write(&s, &user, &child).await?;
    s.expect("drift under a once approval at the current generation", &first, "drift")?;
    check("resolution", &first, first.resolution.as_deref(), Some("approved"))?;
    ctl.set_knob("2");
    let second = next_child_write(&s, &user, &first).await?;
    s.expect("the next drift: the once approval is used up", &second, "drift")?;
    check("resolution", &second, second.resolution.as_deref(), Some("unresolved"))?;

    let rejection =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": child_name("w"), "reason": "e2e"}]).to_string();
    annotate(&s, json!({"kausality.io/approvals": null, "kausality.io/rejections": rejection})).await?;
    ctl.set_knob("3");
    let third = next_child_write(&s, &user, &second).await?;
    s.expect("drift under a rejection", &third, "drift")?;
    check("resolution", &third, third.resolution.as_deref(), Some("rejected"))?;

    annotate(&s, json!({"kausality.io/rejections": null, "kausality.io/freeze": json!({"user": "alice", "message": "e2e freeze"}).to_string()})).await?;
    ctl.set_knob("4");
    let frozen = next_child_write(&s, &user, &third).await?;
    s.expect("drift under a freeze", &frozen, "drift")?;
    check("freezeViolation", &frozen, frozen.freeze_violation, true)?;
    check("resolution", &frozen, frozen.resolution.as_deref(), Some("unresolved"))?;

    // A person edits the frozen child; the controller puts it back.
    let cms: Api<ConfigMap> = Api::namespaced(s.alice.client.clone(), &s.ns);
    let (_, id) = s
        .alice
        .audited(cms.patch(
            &child_name("w"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"knob": "by-hand"}})),
        ))
        .await?;
    let by_hand = s.event("alice's edit of the frozen child", &id).await?;
    s.expect("alice edits the child under a freeze", &by_hand, "origin")?;
    check("freezeViolation", &by_hand, by_hand.freeze_violation, true)?;
    let revert = next_child_write(&s, &user, &by_hand).await?;
    s.expect("the controller reverts alice's edit under a freeze", &revert, "drift")?;
    check("freezeViolation", &revert, revert.freeze_violation, true)?;
    ctl.stop();
    s.finish().await
}
