//! The filter: only completed, successful, persisted writes go on (DESIGN §2). Everything else
//! is ignored with a counted reason.

use crate::decode::AuditEvent;

/// The write verbs of an audit event (any other verb is a read, ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// `create`.
    Create,
    /// `update`.
    Update,
    /// `patch`.
    Patch,
    /// `delete`.
    Delete,
    /// `deletecollection`: one audit event for many objects.
    Deletecollection,
}

impl Verb {
    /// The verb as the audit event spells it; `None` for any other.
    pub fn parse(s: &str) -> Option<Verb> {
        Some(match s {
            "create" => Verb::Create,
            "update" => Verb::Update,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            "deletecollection" => Verb::Deletecollection,
            _ => return None,
        })
    }

    /// As the audit event spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Deletecollection => "deletecollection",
        }
    }

    /// `delete` or `deletecollection`.
    pub fn is_delete(self) -> bool {
        matches!(self, Verb::Delete | Verb::Deletecollection)
    }
}

/// The subresources that matter: `status` feeds state, `scale` changes the spec, `eviction`
/// (a `create` of `pods/eviction`) deletes the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subresource {
    /// The object itself.
    None,
    /// `status`.
    Status,
    /// `scale`.
    Scale,
    /// `eviction`.
    Eviction,
}

impl Subresource {
    /// As the audit event's `objectRef.subresource` names it; `None` for the object itself.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Subresource::None => None,
            Subresource::Status => Some("status"),
            Subresource::Scale => Some("scale"),
            Subresource::Eviction => Some("eviction"),
        }
    }
}

/// Why an event was not classified; the label of `kausality_events_ignored_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ignored {
    /// Not `ResponseComplete` (RequestReceived, ResponseStarted, Panic).
    Stage,
    /// Not a 2xx response: nothing was persisted.
    StatusCode,
    /// A dry run: nothing was persisted.
    DryRun,
    /// A read (get, list, watch) or another verb that changes no object.
    ReadVerb,
    /// A subresource other than status, scale and a pod's eviction (exec, log, binding, ...).
    Subresource,
    /// No `responseObject` to learn the object from (audit level below RequestResponse).
    NoObject,
    /// The resourceVersion did not change: nothing was written.
    NoOp,
    /// Only metadata or status changed: feeds state, not a mutation of intent.
    NotSpecChange,
    /// A status write: feeds state (who the controller is, the observed generation).
    StatusWrite,
    /// Out of the pipeline's scope.
    Excluded,
    /// A delete (or eviction) of an object that already carried a `deletionTimestamp`: it
    /// completes a deletion judged at its first delete (the kubelet's final delete of a
    /// terminating pod, a controller's delete after removing its finalizer).
    DeletionCompleted,
    /// An eviction of a pod the state does not know by that cluster, namespace and name: its
    /// UID and owner cannot be told, and are not guessed.
    EvictionUnknownPod,
}

impl Ignored {
    /// Every reason, in the order of the enum (the metrics index them by it).
    pub const ALL: [Ignored; 12] = [
        Ignored::Stage,
        Ignored::StatusCode,
        Ignored::DryRun,
        Ignored::ReadVerb,
        Ignored::Subresource,
        Ignored::NoObject,
        Ignored::NoOp,
        Ignored::NotSpecChange,
        Ignored::StatusWrite,
        Ignored::Excluded,
        Ignored::DeletionCompleted,
        Ignored::EvictionUnknownPod,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::Stage => "stage",
            Ignored::StatusCode => "status_code",
            Ignored::DryRun => "dry_run",
            Ignored::ReadVerb => "read_verb",
            Ignored::Subresource => "subresource",
            Ignored::NoObject => "no_object",
            Ignored::NoOp => "no_op",
            Ignored::NotSpecChange => "not_spec_change",
            Ignored::StatusWrite => "status_write",
            Ignored::Excluded => "excluded",
            Ignored::DeletionCompleted => "deletion_completed",
            Ignored::EvictionUnknownPod => "eviction_unknown_pod",
        }
    }
}

/// What the filter learned about an admitted event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The write's verb.
    pub verb: Verb,
    /// The subresource written, if one that matters.
    pub subresource: Subresource,
}

/// Admits completed, successful, persisted writes; says why anything else is ignored.
pub fn admit(ev: &AuditEvent<'_>) -> Result<Admitted, Ignored> {
    if ev.stage.as_deref() != Some("ResponseComplete") {
        return Err(Ignored::Stage);
    }
    let verb = ev.verb.as_deref().and_then(Verb::parse).ok_or(Ignored::ReadVerb)?;
    match ev.response_status.as_ref().and_then(|s| s.code) {
        Some(200..=299) => {}
        _ => return Err(Ignored::StatusCode),
    }
    if ev.request_uri.as_deref().is_some_and(is_dry_run) {
        return Err(Ignored::DryRun);
    }
    let object_ref = ev.object_ref.as_ref();
    let subresource = match object_ref.and_then(|o| o.subresource.as_deref()) {
        None | Some("") => Subresource::None,
        Some("status") => Subresource::Status,
        Some("scale") => Subresource::Scale,
        // An eviction is a `create` of the core group's `pods/eviction` (DESIGN §1.5).
        Some("eviction")
            if verb == Verb::Create
                && object_ref.is_some_and(|o| {
                    o.resource.as_deref() == Some("pods") && o.api_group.as_deref().unwrap_or("").is_empty()
                }) =>
        {
            Subresource::Eviction
        }
        Some(_) => return Err(Ignored::Subresource),
    };
    if subresource != Subresource::None && verb.is_delete() {
        return Err(Ignored::Subresource);
    }
    if subresource == Subresource::Eviction && ev.request_object.is_some_and(|o| eviction_is_dry_run(o.get())) {
        return Err(Ignored::DryRun);
    }
    Ok(Admitted { verb, subresource })
}

/// True when an `Eviction` request body asks for a dry run (`deleteOptions.dryRun`, which
/// `kubectl drain --dry-run=server` sets instead of the URI's `dryRun` parameter).
fn eviction_is_dry_run(request: &str) -> bool {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Eviction {
        #[serde(default)]
        delete_options: Option<DeleteOptions>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DeleteOptions {
        #[serde(default)]
        dry_run: Option<Vec<String>>,
    }
    serde_json::from_str::<Eviction>(request)
        .ok()
        .and_then(|e| e.delete_options)
        .and_then(|d| d.dry_run)
        .is_some_and(|modes| modes.iter().any(|m| !m.is_empty()))
}

/// True when the request URI carries a `dryRun` query parameter with a value.
fn is_dry_run(uri: &str) -> bool {
    let Some((_, query)) = uri.split_once('?') else { return false };
    query.split('&').any(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        k == "dryRun" && !v.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> AuditEvent<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn admits_only_completed_successful_persisted_writes() {
        let ok = r#"{"stage":"ResponseComplete","verb":"update","responseStatus":{"code":200},"requestURI":"/apis/apps/v1/namespaces/a/deployments/d","objectRef":{"resource":"deployments"}}"#;
        assert_eq!(admit(&ev(ok)), Ok(Admitted { verb: Verb::Update, subresource: Subresource::None }));
        assert_eq!(admit(&ev(&ok.replace("ResponseComplete", "ResponseStarted"))), Err(Ignored::Stage));
        assert_eq!(admit(&ev(&ok.replace("\"update\"", "\"get\""))), Err(Ignored::ReadVerb));
        assert_eq!(admit(&ev(&ok.replace("\"update\"", "\"watch\""))), Err(Ignored::ReadVerb));
        assert_eq!(admit(&ev(&ok.replace("200", "409"))), Err(Ignored::StatusCode));
        assert_eq!(admit(&ev(&ok.replace("deployments/d", "deployments/d?dryRun=All"))), Err(Ignored::DryRun));
        assert_eq!(
            admit(&ev(&ok.replace("deployments/d", "deployments/d?fieldManager=x&dryRun=All"))),
            Err(Ignored::DryRun)
        );
        assert_eq!(
            admit(&ev(&ok.replace("\"deployments\"}", "\"deployments\",\"subresource\":\"status\"}")))
                .unwrap()
                .subresource,
            Subresource::Status
        );
        assert_eq!(
            admit(&ev(&ok.replace("\"deployments\"}", "\"deployments\",\"subresource\":\"scale\"}")))
                .unwrap()
                .subresource,
            Subresource::Scale
        );
        assert_eq!(
            admit(&ev(&ok.replace("\"deployments\"}", "\"pods\",\"subresource\":\"exec\"}"))),
            Err(Ignored::Subresource)
        );
        let no_status = r#"{"stage":"ResponseComplete","verb":"create"}"#;
        assert_eq!(admit(&ev(no_status)), Err(Ignored::StatusCode));
    }

    #[test]
    fn admits_a_pods_eviction_and_only_that_one() {
        let ok = r#"{"stage":"ResponseComplete","verb":"create","responseStatus":{"metadata":{},"status":"Success","code":201},
            "requestURI":"/api/v1/namespaces/a/pods/p/eviction","objectRef":{"resource":"pods","namespace":"a","name":"p","apiVersion":"v1","subresource":"eviction"},
            "requestObject":{"kind":"Eviction","apiVersion":"policy/v1","metadata":{"name":"p","namespace":"a","creationTimestamp":null}}}"#;
        assert_eq!(admit(&ev(ok)), Ok(Admitted { verb: Verb::Create, subresource: Subresource::Eviction }));
        assert_eq!(Subresource::Eviction.as_str(), Some("eviction"));
        let group =
            ok.replace(r#""apiVersion":"v1","subresource""#, r#""apiGroup":"","apiVersion":"v1","subresource""#);
        assert_eq!(admit(&ev(&group)).map(|a| a.subresource), Ok(Subresource::Eviction), "the core group, spelt out");
        // A PodDisruptionBudget refused it, or another failure: nothing was deleted.
        assert_eq!(admit(&ev(&ok.replace("201", "429"))), Err(Ignored::StatusCode));
        assert_eq!(admit(&ev(&ok.replace("201", "500"))), Err(Ignored::StatusCode));
        // A dry run, in the URI or (kubectl drain --dry-run=server) in the body's deleteOptions.
        assert_eq!(admit(&ev(&ok.replace("p/eviction\"", "p/eviction?dryRun=All\""))), Err(Ignored::DryRun));
        let body = |opts: &str| {
            ok.replace(
                r#""creationTimestamp":null}}"#,
                &format!(r#""creationTimestamp":null}},"deleteOptions":{opts}}}"#),
            )
        };
        assert_eq!(admit(&ev(&body(r#"{"dryRun":["All"]}"#))), Err(Ignored::DryRun));
        assert_eq!(admit(&ev(&body(r#"{"dryRun":[]}"#))).map(|a| a.subresource), Ok(Subresource::Eviction));
        assert_eq!(admit(&ev(&body(r#"{"gracePeriodSeconds":0}"#))).map(|a| a.subresource), Ok(Subresource::Eviction));
        assert_eq!(
            admit(&ev(&body(r#""not options""#))).map(|a| a.subresource),
            Ok(Subresource::Eviction),
            "an odd body is not a dry run"
        );
        // Only a create of a pod's eviction is one.
        assert_eq!(admit(&ev(&ok.replace(r#""verb":"create""#, r#""verb":"update""#))), Err(Ignored::Subresource));
        assert_eq!(admit(&ev(&ok.replace(r#""verb":"create""#, r#""verb":"delete""#))), Err(Ignored::Subresource));
        assert_eq!(
            admit(&ev(&ok.replace(r#""resource":"pods""#, r#""resource":"widgets""#))),
            Err(Ignored::Subresource)
        );
        assert_eq!(
            admit(&ev(&ok.replace(
                r#""apiVersion":"v1","subresource""#,
                r#""apiGroup":"example.com","apiVersion":"v1","subresource""#
            ))),
            Err(Ignored::Subresource)
        );
    }
}
