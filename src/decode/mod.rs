//! Decoding: bytes in, borrowed [`AuditEvent`]s or explained [`Invalid`] records out.
//!
//! Accepts what the API server and the usual shippers write: one event per line (log backend),
//! one object per file, an `EventList` (webhook backend body), a UTF-8 BOM, `audit.k8s.io/v1`
//! and `v1beta1`, events without `apiVersion`. Wrappers (the AKS diagnostic `records` envelope,
//! the GKE Cloud Logging `protoPayload`) are rejected with an explanation, or unwrapped where
//! the source says so. A bad line or item is reported and the good ones around it still come
//! out; nothing here panics on input, and nothing recurses with it (whatever the nesting, the
//! stack used is the same): what is read into types has a fixed shape, the rest is skipped or
//! kept as bytes. A document that cannot be parsed whole is split into its items by a scan, so
//! that each is judged on its own.

mod body;
mod event;
mod object;
mod progress;
mod scan;
pub mod time;

use std::fmt;

pub use body::{decode_body, decode_body_raw, decode_document, parse_document, DecodeOptions, Unwrap};
pub use event::{AuditEvent, Event, EventOrList, NoItems, ObjectRef, ResponseStatus, UserInfo};
pub(crate) use object::CowStr;
pub use object::{keep_annotations, keeps_annotation};
pub use object::{Condition, Metadata, ObjectView, OwnerRef, StatusView, ANNOTATION_PREFIX};
pub use progress::in_progress;

/// Why a record was rejected; the label of `kausality_events_invalid_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InvalidReason {
    /// Not JSON at all, or broken JSON.
    Json,
    /// JSON that ends in the middle of a value: a cut-off line or body.
    Truncated,
    /// A field of the wrong type (e.g. `"verb": 5`).
    InvalidField,
    /// Valid JSON that is not an audit event (another kind or apiVersion).
    NotAuditEvent,
    /// An audit event without a field the pipeline needs (auditID, stage, verb).
    MissingField,
    /// A stage this service does not know.
    UnknownStage,
    /// Larger than the configured limit.
    TooLarge,
    /// A shipper's envelope around the events, not unwrapped by this source.
    Wrapper,
    /// Not UTF-8 (e.g. UTF-16 with a BOM).
    Encoding,
    /// The decoder itself failed on the record (a defect, logged as an error): the record is
    /// skipped and counted, so that it cannot stop the service or be retried forever.
    Internal,
    /// A body of a cluster the service does not take: a new one past `options.max_clusters`,
    /// or a name over 253 bytes (one count per body).
    Cluster,
}

impl InvalidReason {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [InvalidReason; 11] = [
        InvalidReason::Json,
        InvalidReason::Truncated,
        InvalidReason::InvalidField,
        InvalidReason::NotAuditEvent,
        InvalidReason::MissingField,
        InvalidReason::UnknownStage,
        InvalidReason::TooLarge,
        InvalidReason::Wrapper,
        InvalidReason::Encoding,
        InvalidReason::Internal,
        InvalidReason::Cluster,
    ];

    /// The reason as the `reason` label of the invalid-events metric.
    pub fn as_str(self) -> &'static str {
        match self {
            InvalidReason::Json => "json",
            InvalidReason::Truncated => "truncated",
            InvalidReason::InvalidField => "invalid_field",
            InvalidReason::NotAuditEvent => "not_audit_event",
            InvalidReason::MissingField => "missing_field",
            InvalidReason::UnknownStage => "unknown_stage",
            InvalidReason::TooLarge => "too_large",
            InvalidReason::Wrapper => "wrapper",
            InvalidReason::Encoding => "encoding",
            InvalidReason::Internal => "internal",
            InvalidReason::Cluster => "cluster",
        }
    }
}

/// Where in the input a rejected record was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// The whole body or document.
    Body,
    /// 1-based line of a JSON-lines stream.
    Line(usize),
    /// 0-based index in an `EventList`'s `items` (or a JSON array): `items[3]`.
    Item(usize),
    /// An item inside an item: line, then index in that line's EventList.
    LineItem(usize, usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Body => f.write_str("body"),
            Location::Line(l) => write!(f, "line {l}"),
            Location::Item(i) => write!(f, "items[{i}]"),
            Location::LineItem(l, i) => write!(f, "line {l} items[{i}]"),
        }
    }
}

/// A rejected record: where, why, and a message a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", self.path())]
pub struct Invalid {
    /// Where the record was in its body.
    pub location: Location,
    /// The field of the record that is wrong, when one is (`user`).
    pub field: Option<&'static str>,
    /// Why it was rejected.
    pub reason: InvalidReason,
    /// What is wrong, and where it can, what to do about it.
    pub message: String,
}

impl Invalid {
    /// A rejection at `location`, for no field in particular.
    pub fn new(location: Location, reason: InvalidReason, message: impl Into<String>) -> Self {
        Invalid { location, field: None, reason, message: message.into() }
    }

    /// The same, about one field of the record.
    pub fn at_field(self, field: &'static str) -> Self {
        Invalid { field: Some(field), ..self }
    }

    /// Where, as the answers and logs show it: `items[3].user`, `line 7`, `body`.
    pub fn path(&self) -> String {
        match self.field {
            Some(f) => format!("{}.{f}", self.location),
            None => self.location.to_string(),
        }
    }

    pub(crate) fn from_json(location: Location, e: &serde_json::Error) -> Self {
        use serde_json::error::Category;
        let (reason, what) = match e.classify() {
            // serde_json's own limit (128 levels) on what it reads into types; the types read
            // here have a fixed shape, so only a defect would reach it: say so plainly.
            Category::Syntax if e.to_string().starts_with("recursion limit exceeded") => {
                (InvalidReason::Json, "nested too deep")
            }
            Category::Eof => (InvalidReason::Truncated, "truncated JSON"),
            Category::Data => (InvalidReason::InvalidField, "a field has the wrong type"),
            Category::Syntax | Category::Io => (InvalidReason::Json, "not valid JSON"),
        };
        Invalid::new(location, reason, format!("{what}: {e}"))
    }
}

/// The stages an audit event can have. Only `ResponseComplete` is classified.
pub const KNOWN_STAGES: [&str; 4] = ["RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"];

/// Checks that a parsed object is an audit event with the fields the pipeline needs.
pub fn validate<L>(ev: &Event<'_, L>, location: Location) -> Result<(), Invalid> {
    if let Some(kind) = ev.kind.as_deref() {
        if kind != "Event" {
            return Err(Invalid::new(
                location,
                InvalidReason::NotAuditEvent,
                format!("kind {kind:?} is not an audit Event"),
            ));
        }
    }
    if let Some(v) = ev.api_version.as_deref() {
        if !v.starts_with("audit.k8s.io/") {
            return Err(Invalid::new(
                location,
                InvalidReason::NotAuditEvent,
                format!("apiVersion {v:?} is not audit.k8s.io/v1 or v1beta1"),
            ));
        }
    }
    let missing = |field: &str| {
        Invalid::new(
            location,
            InvalidReason::MissingField,
            format!("audit event without {field}; is this an audit log?"),
        )
    };
    if ev.audit_id.as_deref().is_none_or(str::is_empty) {
        return Err(missing("auditID"));
    }
    let stage = ev.stage.as_deref().ok_or_else(|| missing("stage"))?;
    if !KNOWN_STAGES.contains(&stage) {
        return Err(Invalid::new(
            location,
            InvalidReason::UnknownStage,
            format!("unknown stage {stage:?} (known: {})", KNOWN_STAGES.join(", ")),
        ));
    }
    if ev.verb.as_deref().is_none_or(str::is_empty) {
        return Err(missing("verb"));
    }
    Ok(())
}
