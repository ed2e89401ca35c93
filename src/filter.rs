//! The filter: only completed, successful, persisted writes go on (DESIGN §2). Everything else
//! is ignored with a counted reason.

use crate::decode::AuditEvent;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Create,
    Update,
    Patch,
    Delete,
    Deletecollection,
}

impl Verb {
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

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Deletecollection => "deletecollection",
        }
    }

    pub fn is_delete(self) -> bool {
        matches!(self, Verb::Delete | Verb::Deletecollection)
    }
}

/// The subresources that matter: `status` feeds state, `scale` changes the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subresource {
    None,
    Status,
    Scale,
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
    /// A subresource other than status and scale (exec, log, binding, eviction, ...).
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
}

impl Ignored {
    pub const ALL: [Ignored; 10] = [
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
    ];

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
        }
    }
}

/// What the filter learned about an admitted event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub verb: Verb,
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
    let subresource = match ev.object_ref.as_ref().and_then(|o| o.subresource.as_deref()) {
        None | Some("") => Subresource::None,
        Some("status") => Subresource::Status,
        Some("scale") => Subresource::Scale,
        Some(_) => return Err(Ignored::Subresource),
    };
    if subresource != Subresource::None && verb.is_delete() {
        return Err(Ignored::Subresource);
    }
    Ok(Admitted { verb, subresource })
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
        assert_eq!(admit(&ev(&ok.replace("deployments/d", "deployments/d?fieldManager=x&dryRun=All"))), Err(Ignored::DryRun));
        assert_eq!(admit(&ev(&ok.replace("\"deployments\"}", "\"deployments\",\"subresource\":\"status\"}"))).unwrap().subresource, Subresource::Status);
        assert_eq!(admit(&ev(&ok.replace("\"deployments\"}", "\"deployments\",\"subresource\":\"scale\"}"))).unwrap().subresource, Subresource::Scale);
        assert_eq!(admit(&ev(&ok.replace("\"deployments\"}", "\"pods\",\"subresource\":\"exec\"}"))), Err(Ignored::Subresource));
        let no_status = r#"{"stage":"ResponseComplete","verb":"create"}"#;
        assert_eq!(admit(&ev(no_status)), Err(Ignored::StatusCode));
    }
}
