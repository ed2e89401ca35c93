//! Splitting a body into audit events: JSON lines, a single document, an EventList, a JSON
//! array, or a known wrapper.

use std::borrow::Cow;

use serde::Deserialize;

use super::event::{Event, EventOrList};
use super::scan;
use super::{validate, AuditEvent, Invalid, InvalidReason, Location};

/// What to do with shippers' envelopes around audit events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unwrap {
    /// Reject envelopes with a counted, explained error.
    #[default]
    None,
    /// Unwrap the Azure/AKS diagnostic-settings envelope `{"records":[{"properties":{"log":"<event>"}}]}`.
    Aks,
}

/// How to decode: envelopes and the size limit.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// Whether to read the events inside shippers' envelopes (Azure's) or refuse them.
    pub unwrap: Unwrap,
    /// Largest event accepted, in bytes: each one, also inside an EventList (whose body may be
    /// larger: 400 events of 23 KB are 9.4 MB).
    pub max_record_bytes: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { unwrap: Unwrap::None, max_record_bytes: 8 << 20 }
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes a body of any supported shape, calling `out` once per event (with where it was) or
/// rejected record, in input order.
pub fn decode_body<F>(body: &[u8], opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
    if body.starts_with(b"\xFF\xFE") || body.starts_with(b"\xFE\xFF") {
        return reject(
            out,
            Invalid::new(Location::Body, InvalidReason::Encoding, "UTF-16 input; audit events are UTF-8 JSON"),
        );
    }
    let trimmed = trim_ascii(body);
    if trimmed.is_empty() {
        return;
    }
    if is_single_document(trimmed) {
        decode_document(trimmed, Location::Body, opts, out);
    } else {
        decode_lines(body, opts, out);
    }
}

fn reject<F>(out: &mut F, invalid: Invalid)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    out(invalid.location, Err(invalid));
}

/// True when the input holds exactly one JSON value (a document), false for several (lines).
fn is_single_document(bytes: &[u8]) -> bool {
    if bytes[0] != b'{' && bytes[0] != b'[' {
        return false;
    }
    // A JSON string holds no raw newline, so input without one is a single line: read as a
    // document without a second pass over it (the API server's webhook bodies are compact).
    if !bytes.contains(&b'\n') {
        return true;
    }
    // Skipping a value (`IgnoredAny`) does not recurse in serde_json, whatever its depth.
    let mut de = serde_json::Deserializer::from_slice(bytes).into_iter::<serde::de::IgnoredAny>();
    match de.next() {
        Some(Ok(_)) => trim_ascii(&bytes[de.byte_offset()..]).is_empty(),
        // Broken first value: JSON lines with a bad first line (a later line may be good).
        Some(Err(_)) => false,
        None => true,
    }
}

fn decode_lines<F>(body: &[u8], opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = trim_ascii(line);
        if line.is_empty() {
            continue;
        }
        decode_document(line, Location::Line(i + 1), opts, out);
    }
}

/// Decodes one JSON document: an Event, an EventList, a JSON array of events, or a wrapper.
///
/// [`DecodeOptions::max_record_bytes`] applies to each event, not to the document (an
/// EventList of 400 events may be larger). Nothing here recurses with the input: what serde
/// reads into types has a fixed shape (an item's own `items` is skipped), everything else is
/// skipped or kept as bytes by serde_json without recursion, and an array inside an array or
/// an envelope inside an envelope is reported, not followed.
pub fn decode_document<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    let doc = trim_ascii(doc.strip_prefix(UTF8_BOM).unwrap_or(doc));
    match doc.first() {
        Some(b'{') => {}
        Some(b'[') => return decode_array(doc, location, opts, out),
        Some(&c) => {
            let shown = if c.is_ascii_graphic() { format!("{:?}", c as char) } else { format!("byte 0x{c:02x}") };
            return reject(
                out,
                Invalid::new(
                    location,
                    InvalidReason::Json,
                    format!("not JSON: starts with {shown}; audit events are JSON objects"),
                ),
            );
        }
        None => return,
    }
    // The fast path, one pass: an event, an EventList with its items decoded in place, or an
    // envelope noticed. Taken when nothing can be over a limit and the text is UTF-8 (checked
    // once for the whole document, faster than string by string).
    let fast = doc.len() <= opts.max_record_bytes;
    let parsed = if fast { std::str::from_utf8(doc).ok().map(serde_json::from_str::<EventOrList>) } else { None };
    let err = match parsed {
        Some(Ok(ev)) => return decode_parsed(ev, doc, location, opts, out),
        Some(Err(e)) => Some(e),
        None => None,
    };
    // Something is wrong somewhere: split the document into its items, so that each bad item
    // is reported on its own and the good ones are read.
    let parts = scan::split_object(doc);
    match parts.items {
        Some(ref items) => {
            if let Err(e) = check_list_kind(
                parts.kind.map(raw_text).as_deref(),
                parts.api_version.map(raw_text).as_deref(),
                location,
            ) {
                return reject(out, e);
            }
            decode_items(items, location, opts, out);
            if let Some(b) = parts.broken {
                reject(out, broken(location, b, "after its items"));
            }
        }
        _ => reject(out, document_error(doc, location, opts, err.as_ref())),
    }
}

/// The one error of a document that is not a list (or whose framing is broken outside it).
fn document_error(doc: &[u8], location: Location, opts: &DecodeOptions, err: Option<&serde_json::Error>) -> Invalid {
    if let Some(e) = err {
        return Invalid::from_json(location, e);
    }
    record_error(doc, location, opts).unwrap_or_else(|| {
        match std::str::from_utf8(doc).map(serde_json::from_str::<serde::de::IgnoredAny>) {
            Ok(Err(e)) => Invalid::from_json(location, &e),
            _ => Invalid::new(location, InvalidReason::Internal, "unreadable for no reason found; skipped"),
        }
    })
}

/// Why one record cannot even be parsed: over the size limit, not UTF-8.
fn record_error(bytes: &[u8], location: Location, opts: &DecodeOptions) -> Option<Invalid> {
    if bytes.len() > opts.max_record_bytes {
        let msg = format!(
            "{} bytes is over the limit of {} bytes per event (max_record_bytes)",
            bytes.len(),
            opts.max_record_bytes
        );
        return Some(Invalid::new(location, InvalidReason::TooLarge, msg));
    }
    if std::str::from_utf8(bytes).is_err() {
        return Some(Invalid::new(location, InvalidReason::Encoding, "not UTF-8; audit events are UTF-8 JSON"));
    }
    None
}

/// What a document parsed whole in one pass turned out to be.
enum Shape<'a> {
    /// An EventList (its own kind and apiVersion checked here) and its items.
    List(AuditEvent<'a>, Vec<AuditEvent<'a>>),
    /// Azure's `{"records": [...]}` envelope: the list.
    AksRecords(&'a serde_json::value::RawValue),
    /// One Azure record on its own.
    AksRecord,
    /// A Cloud Logging entry.
    CloudLogging,
    /// One audit event.
    Event(AuditEvent<'a>),
}

impl<'a> Shape<'a> {
    fn of(doc_ev: EventOrList<'a>) -> Self {
        let (ev, items) = doc_ev.split_items();
        if let Some(items) = items {
            Shape::List(ev, items)
        } else if let Some(records) = ev.records {
            Shape::AksRecords(records)
        } else if Self::aks_record(&ev) {
            Shape::AksRecord
        } else if Self::cloud_logging(&ev) {
            Shape::CloudLogging
        } else {
            Shape::Event(ev)
        }
    }

    /// Whether [`Shape::of`] `doc_ev` is [`Shape::Event`], told without moving it.
    fn is_event(doc_ev: &EventOrList<'_>) -> bool {
        doc_ev.items.is_none() && doc_ev.records.is_none() && !Self::aks_record(doc_ev) && !Self::cloud_logging(doc_ev)
    }

    fn aks_record<L>(ev: &Event<'_, L>) -> bool {
        ev.properties.is_some() && ev.audit_id.is_none()
    }

    fn cloud_logging<L>(ev: &Event<'_, L>) -> bool {
        ev.proto_payload.is_some() && ev.audit_id.is_none()
    }
}

/// A list's items, each validated, with where each was; or why the list is refused.
fn list_items<'a>(
    list: &AuditEvent<'_>,
    items: Vec<AuditEvent<'a>>,
    location: Location,
) -> Result<impl Iterator<Item = (Location, Result<AuditEvent<'a>, Invalid>)>, Invalid> {
    check_list_kind(list.kind.as_deref(), list.api_version.as_deref(), location)?;
    Ok(items.into_iter().enumerate().map(move |(i, item)| {
        let loc = item_location(location, i);
        (loc, validate(&item, loc).map(|()| item))
    }))
}

/// A document parsed whole in one pass.
fn decode_parsed<'a, F>(doc_ev: EventOrList<'a>, doc: &'a [u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    match Shape::of(doc_ev) {
        Shape::List(list, items) => match list_items(&list, items, location) {
            Ok(items) => items.for_each(|(loc, r)| out(loc, r)),
            Err(e) => reject(out, e),
        },
        Shape::AksRecords(records) => decode_aks(records.get().as_bytes(), location, opts, out),
        Shape::AksRecord => decode_aks_record(doc, location, opts, out),
        Shape::CloudLogging => reject(
            out,
            Invalid::new(
                location,
                InvalidReason::Wrapper,
                "a Cloud Logging entry (protoPayload), not an audit event; export the API server's audit log instead",
            ),
        ),
        Shape::Event(ev) => out(location, validate(&ev, location).map(|()| ev)),
    }
}

/// Reads one document on the one-pass path alone, for a caller that reads many documents
/// before taking their events in (so that reading and taking in each keep their code in the
/// processor's caches): a single event, or an EventList's items, pushed to `into` in input
/// order with where each was. Returns false, with nothing pushed, for anything else (an array,
/// an envelope, a document over the limit, not UTF-8 or not valid JSON): [`decode_document`]
/// then reads it, and says what is wrong, as it always does.
pub fn parse_document<'a>(
    doc: &'a [u8],
    location: Location,
    opts: &DecodeOptions,
    into: &mut Vec<(Location, Result<AuditEvent<'a>, Invalid>)>,
) -> bool {
    let doc = trim_ascii(doc.strip_prefix(UTF8_BOM).unwrap_or(doc));
    if doc.first() != Some(&b'{') || doc.len() > opts.max_record_bytes {
        return false;
    }
    let Ok(text) = std::str::from_utf8(doc) else {
        return false;
    };
    // `serde_json::from_str`, spelled out: the event is not moved through its `Result`s.
    let mut de = serde_json::Deserializer::from_str(text);
    let Ok(doc_ev) = EventOrList::deserialize(&mut de) else {
        return false;
    };
    if de.end().is_err() {
        return false;
    }
    if Shape::is_event(&doc_ev) {
        // One event, the common case: checked where it lies and moved once, into its place
        // (an event read is about 900 bytes, each move of it a copy).
        let checked = validate(&doc_ev, location);
        into.push((location, checked.map(|()| doc_ev.split_items().0)));
        return true;
    }
    match Shape::of(doc_ev) {
        Shape::List(list, items) => match list_items(&list, items, location) {
            Ok(items) => into.extend(items),
            Err(e) => into.push((location, Err(e))),
        },
        // A single event was taken above; an envelope is read by `decode_document`.
        Shape::Event(_) | Shape::AksRecords(_) | Shape::AksRecord | Shape::CloudLogging => return false,
    }
    true
}

/// The items found by a scan, each decoded on its own; then where the framing broke, if it did.
fn decode_items<F>(items: &scan::Items<'_>, location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    for (i, item) in items.items.iter().enumerate() {
        let loc = item_location(location, i);
        match item.first() {
            Some(b'{') => decode_event(item, loc, opts, out),
            Some(b'[') => reject(
                out,
                Invalid::new(loc, InvalidReason::NotAuditEvent, "an array inside the list; expected audit events"),
            ),
            _ => reject(out, Invalid::new(loc, InvalidReason::NotAuditEvent, "not an object; expected an audit event")),
        }
    }
    if let Some((i, b)) = items.broken {
        reject(out, broken(item_location(location, i), b, "here; nothing after it was read"));
    }
}

fn broken(location: Location, b: scan::Broken, what: &str) -> Invalid {
    match b {
        scan::Broken::Truncated => {
            Invalid::new(location, InvalidReason::Truncated, "truncated JSON: the input ends in the middle of a value")
        }
        scan::Broken::Syntax(at) => {
            Invalid::new(location, InvalidReason::Json, format!("not valid JSON at byte {} {what}", at + 1))
        }
    }
}

/// One event (an item of a list or array) on its own.
fn decode_event<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    if let Some(e) = record_error(doc, location, opts) {
        return reject(out, e);
    }
    match serde_json::from_slice::<AuditEvent>(doc) {
        Ok(ev) => out(location, validate(&ev, location).map(|()| ev)),
        Err(e) => reject(out, Invalid::from_json(location, &e)),
    }
}

/// A JSON array of events. Its items are found by a scan, so one bad item (not UTF-8, too
/// large, broken) costs only itself; an array inside is not read (so nothing here
/// recurses).
fn decode_array<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    let items = scan::split_array(doc, 0);
    if items.broken.is_none() && !trim_ascii(&doc[items.end..]).is_empty() {
        return reject(out, Invalid::new(location, InvalidReason::Json, "not valid JSON: more after the array"));
    }
    if items.items.is_empty() && items.broken.is_none() {
        return reject(
            out,
            Invalid::new(
                location,
                InvalidReason::NotAuditEvent,
                "an empty JSON array holds no audit event; expected an audit.k8s.io/v1 EventList or Event",
            ),
        );
    }
    decode_items(&items, location, opts, out);
}

const AKS_HINT: &str = "read the events inside with `--unwrap aks` (replay) or `unwrap = \"aks\"` on a pipeline source";

/// An Azure envelope met without `unwrap = "aks"`: refused, saying how to read it.
fn aks_refused(location: Location, what: &str) -> Invalid {
    Invalid::new(location, InvalidReason::Wrapper, format!("an Azure diagnostic {what}; {AKS_HINT}"))
}

/// The Azure diagnostic-settings envelope `{"records": [record, ...]}`; `records` is the list.
fn decode_aks<F>(records: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    if opts.unwrap != Unwrap::Aks {
        return reject(out, aks_refused(location, "envelope ({\"records\":[...]})"));
    }
    match serde_json::from_slice::<Vec<AksRecord>>(records) {
        Ok(records) => {
            for (i, rec) in records.into_iter().enumerate() {
                unwrap_aks_record(rec, item_location(location, i), opts, out);
            }
        }
        Err(e) => reject(out, Invalid::from_json(location, &e)),
    }
}

/// One Azure record on its own (Event Hubs delivers them so): `{"properties": {"log": "<event>"}}`.
fn decode_aks_record<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    if opts.unwrap != Unwrap::Aks {
        return reject(out, aks_refused(location, "record ({\"properties\":{\"log\":...}})"));
    }
    match serde_json::from_slice::<AksRecord>(doc) {
        Ok(rec) => unwrap_aks_record(rec, location, opts, out),
        Err(e) => reject(out, Invalid::from_json(location, &e)),
    }
}

#[derive(Deserialize)]
struct AksRecord<'a> {
    #[serde(borrow, default)]
    properties: Option<AksProperties<'a>>,
}

#[derive(Deserialize)]
struct AksProperties<'a> {
    #[serde(borrow, default)]
    log: Option<Cow<'a, str>>,
}

fn unwrap_aks_record<F>(rec: AksRecord<'_>, location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<AuditEvent<'_>, Invalid>),
{
    match rec.properties.and_then(|p| p.log) {
        // The event inside is not unwrapped again: an envelope in an envelope is reported, so
        // nothing here recurses more than once.
        Some(log) => decode_document(
            trim_ascii(log.as_bytes()),
            location,
            &DecodeOptions { unwrap: Unwrap::None, ..opts.clone() },
            out,
        ),
        None => reject(out, Invalid::new(location, InvalidReason::MissingField, "Azure record without properties.log")),
    }
}

/// Like [`decode_body`], with each event's own bytes as they are in the body (an item of an
/// EventList or array, a line, the document): for a stage that forwards events unchanged (the
/// ingest tier). Envelopes are not unwrapped (an envelope is one rejected record). Every
/// item is found by a scan and parsed on its own, so a bad item costs only itself.
pub fn decode_body_raw<F>(body: &[u8], opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<(&[u8], AuditEvent<'_>), Invalid>),
{
    let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
    if body.starts_with(b"\xFF\xFE") || body.starts_with(b"\xFE\xFF") {
        let invalid =
            Invalid::new(Location::Body, InvalidReason::Encoding, "UTF-16 input; audit events are UTF-8 JSON");
        return out(invalid.location, Err(invalid));
    }
    let trimmed = trim_ascii(body);
    if trimmed.is_empty() {
        return;
    }
    if is_single_document(trimmed) {
        raw_document(trimmed, Location::Body, opts, out);
    } else {
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            let line = trim_ascii(line);
            if !line.is_empty() {
                raw_document(line, Location::Line(i + 1), opts, out);
            }
        }
    }
}

/// One document of [`decode_body_raw`]: an EventList's or an array's items, or one event.
fn raw_document<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<(&[u8], AuditEvent<'_>), Invalid>),
{
    let reject = |out: &mut F, invalid: Invalid| out(invalid.location, Err(invalid));
    let items = match doc.first() {
        Some(b'[') => scan::split_array(doc, 0),
        Some(b'{') => {
            let parts = scan::split_object(doc);
            match parts.items {
                Some(items) => {
                    if let Err(e) = check_list_kind(
                        parts.kind.map(raw_text).as_deref(),
                        parts.api_version.map(raw_text).as_deref(),
                        location,
                    ) {
                        return reject(out, e);
                    }
                    if let Some(b) = parts.broken {
                        raw_items(&items, location, opts, out);
                        return reject(out, broken(location, b, "after its items"));
                    }
                    items
                }
                None => return raw_event(doc, location, opts, out),
            }
        }
        _ => {
            return reject(out, Invalid::new(location, InvalidReason::Json, "not JSON; audit events are JSON objects"))
        }
    };
    raw_items(&items, location, opts, out);
}

fn raw_items<F>(items: &scan::Items<'_>, location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<(&[u8], AuditEvent<'_>), Invalid>),
{
    for (i, item) in items.items.iter().enumerate() {
        let loc = item_location(location, i);
        match item.first() {
            Some(b'{') => raw_event(item, loc, opts, out),
            _ => {
                out(loc, Err(Invalid::new(loc, InvalidReason::NotAuditEvent, "not an object; expected an audit event")))
            }
        }
    }
    if let Some((i, b)) = items.broken {
        let invalid = broken(item_location(location, i), b, "here; nothing after it was read");
        out(invalid.location, Err(invalid));
    }
}

fn raw_event<F>(bytes: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Location, Result<(&[u8], AuditEvent<'_>), Invalid>),
{
    if let Some(e) = record_error(bytes, location, opts) {
        return out(location, Err(e));
    }
    match serde_json::from_slice::<AuditEvent>(bytes) {
        Ok(ev)
            if ev.records.is_some()
                || (ev.audit_id.is_none() && (ev.properties.is_some() || ev.proto_payload.is_some())) =>
        {
            out(
                location,
                Err(Invalid::new(
                    location,
                    InvalidReason::Wrapper,
                    "a shipper's envelope, not an audit event; the ingest tier takes the API server's own events",
                )),
            )
        }
        Ok(ev) => out(location, validate(&ev, location).map(|()| (bytes, ev))),
        Err(e) => out(location, Err(Invalid::from_json(location, &e))),
    }
}

/// A raw JSON value as text: a string's content, anything else as it is written.
fn raw_text(raw: &[u8]) -> String {
    serde_json::from_slice::<String>(raw).unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

fn check_list_kind(kind: Option<&str>, api_version: Option<&str>, location: Location) -> Result<(), Invalid> {
    if let Some(k) = kind {
        if k != "EventList" {
            return Err(Invalid::new(
                location,
                InvalidReason::NotAuditEvent,
                format!("a {k:?} is not an audit EventList"),
            ));
        }
    }
    if let Some(v) = api_version {
        if !v.starts_with("audit.k8s.io/") {
            return Err(Invalid::new(
                location,
                InvalidReason::NotAuditEvent,
                format!("apiVersion {v:?} is not audit.k8s.io"),
            ));
        }
    }
    Ok(())
}

fn item_location(outer: Location, i: usize) -> Location {
    match outer {
        Location::Line(l) => Location::LineItem(l, i),
        _ => Location::Item(i),
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(body: &[u8], opts: &DecodeOptions) -> Vec<Result<String, (InvalidReason, String)>> {
        let mut v = Vec::new();
        decode_body(body, opts, &mut |_, r: Result<AuditEvent<'_>, Invalid>| {
            v.push(r.map(|e| e.audit_id.unwrap().into_owned()).map_err(|e| (e.reason, e.to_string())))
        });
        v
    }

    const EV: &str =
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a1","stage":"ResponseComplete","verb":"create"}"#;

    /// `decode_body_raw`'s events as (location, bytes, auditID) or the reasons of rejections.
    fn raw(body: &[u8]) -> Vec<Result<(Location, String, String), InvalidReason>> {
        let mut v = Vec::new();
        decode_body_raw(body, &DecodeOptions::default(), &mut |loc, r| {
            v.push(
                r.map(|(b, ev)| (loc, String::from_utf8(b.to_vec()).unwrap(), ev.audit_id.unwrap().into_owned()))
                    .map_err(|e| e.reason),
            )
        });
        v
    }

    #[test]
    fn raw_events_come_with_their_own_bytes() {
        let (a, b) = (ev("a"), ev("b"));
        let listed = list(&[a.clone(), "5".to_string(), b.clone()]);
        let got = raw(listed.as_bytes());
        assert_eq!(got[0], Ok((Location::Item(0), a.clone(), "a".to_string())));
        assert_eq!(got[1], Err(InvalidReason::NotAuditEvent));
        assert_eq!(got[2], Ok((Location::Item(2), b.clone(), "b".to_string())));
        // JSON lines with a broken line; a single event; an array.
        let lines = format!("{a}\n{{\"kind\":\n{b}\n");
        let got = raw(lines.as_bytes());
        assert_eq!(
            (got.len(), got[0].as_ref().map(|x| x.2.as_str()), got[2].as_ref().map(|x| x.1.as_str())),
            (3, Ok("a"), Ok(b.as_str()))
        );
        assert!(got[1].is_err());
        assert_eq!(raw(a.as_bytes()), vec![Ok((Location::Body, a.clone(), "a".to_string()))]);
        assert_eq!(raw(format!("[{a},{b}]").as_bytes()).len(), 2);
        // A cut list keeps the items before the cut.
        let cut = &listed[..listed.len() - 10];
        let got = raw(cut.as_bytes());
        assert_eq!(got[0].as_ref().map(|x| x.2.as_str()), Ok("a"));
        assert!(got.last().unwrap().is_err());
        // Not a list of audit events, an envelope, UTF-16, nothing.
        assert_eq!(raw(br#"{"kind":"PodList","items":[]}"#), vec![Err(InvalidReason::NotAuditEvent)]);
        assert_eq!(raw(br#"{"records":[]}"#), vec![Err(InvalidReason::Wrapper)]);
        assert_eq!(raw(b"\xFF\xFEx"), vec![Err(InvalidReason::Encoding)]);
        assert!(raw(b"  ").is_empty());
    }

    #[test]
    fn json_lines_with_a_bad_line_in_the_middle() {
        let body = format!("{EV}\n{{\"auditID\": oops\n{}\n", EV.replace("a1", "a2"));
        let r = collect(body.as_bytes(), &DecodeOptions::default());
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], Ok("a1".into()));
        assert_eq!(r[1].as_ref().unwrap_err().0, InvalidReason::Json);
        assert!(r[1].as_ref().unwrap_err().1.starts_with("line 2:"));
        assert_eq!(r[2], Ok("a2".into()));
    }

    #[test]
    fn event_list_with_bom_and_a_bad_item() {
        let body = format!(
            "\u{feff}{{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[{EV},{{\"auditID\":\"x\",\"verb\":7}},{{\"kind\":\"Pod\"}}]}}"
        );
        let r = collect(body.as_bytes(), &DecodeOptions::default());
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(r[0], Ok("a1".into()));
        assert_eq!(r[1].as_ref().unwrap_err().0, InvalidReason::InvalidField);
        assert!(r[1].as_ref().unwrap_err().1.starts_with("items[1]:"));
        assert_eq!(r[2].as_ref().unwrap_err().0, InvalidReason::NotAuditEvent);
    }

    #[test]
    fn pretty_printed_single_event() {
        let body = "{\n  \"auditID\": \"p\",\n  \"stage\": \"ResponseComplete\",\n  \"verb\": \"delete\"\n}\n";
        assert_eq!(collect(body.as_bytes(), &DecodeOptions::default()), vec![Ok("p".to_string())]);
    }

    #[test]
    fn truncated_and_oversized_and_non_json() {
        let o = DecodeOptions { max_record_bytes: 200, ..Default::default() };
        assert_eq!(collect(&EV.as_bytes()[..40], &o)[0].as_ref().unwrap_err().0, InvalidReason::Truncated);
        let big = format!("{{\"auditID\":\"{}\"}}", "x".repeat(300));
        assert_eq!(collect(big.as_bytes(), &o)[0].as_ref().unwrap_err().0, InvalidReason::TooLarge);
        assert_eq!(
            collect(b"apiVersion: audit.k8s.io/v1\nkind: Event\n", &o)[0].as_ref().unwrap_err().0,
            InvalidReason::Json
        );
        assert_eq!(collect(b"\xFF\xFEx\x00", &o)[0].as_ref().unwrap_err().0, InvalidReason::Encoding);
    }

    #[test]
    fn unknown_stage_and_missing_fields() {
        let r = collect(EV.replace("ResponseComplete", "Weird").as_bytes(), &DecodeOptions::default());
        assert_eq!(r[0].as_ref().unwrap_err().0, InvalidReason::UnknownStage);
        let r = collect(br#"{"kind":"Event","stage":"ResponseComplete","verb":"get"}"#, &DecodeOptions::default());
        assert_eq!(r[0].as_ref().unwrap_err().0, InvalidReason::MissingField);
    }

    #[test]
    fn aks_envelope_rejected_or_unwrapped() {
        let inner = serde_json::to_string(EV).unwrap();
        let body = format!("\u{feff}{{\"records\":[{{\"properties\":{{\"log\":{inner}}}}}]}}");
        let r = collect(body.as_bytes(), &DecodeOptions::default());
        assert_eq!(r[0].as_ref().unwrap_err().0, InvalidReason::Wrapper);
        let r = collect(body.as_bytes(), &DecodeOptions { unwrap: Unwrap::Aks, ..Default::default() });
        assert_eq!(r, vec![Ok("a1".to_string())]);
    }

    #[test]
    fn json_array_of_events() {
        let body = format!("[{EV},{}]", EV.replace("a1", "a2"));
        let r = collect(body.as_bytes(), &DecodeOptions::default());
        assert_eq!(r, vec![Ok("a1".to_string()), Ok("a2".to_string())]);
    }

    fn list(items: &[String]) -> String {
        format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}]}}"#, items.join(","))
    }

    fn ev(id: &str) -> String {
        EV.replace("a1", id)
    }

    fn reasons(r: &[Result<String, (InvalidReason, String)>]) -> Vec<String> {
        r.iter()
            .map(|x| match x {
                Ok(id) => id.clone(),
                Err((reason, msg)) => format!("{}@{}", reason.as_str(), msg.split(':').next().unwrap()),
            })
            .collect()
    }

    #[test]
    fn deep_nesting_is_never_recursed_into() {
        // Run on a stack smaller than any thread that decodes (tokio's blocking pool has
        // 2 MiB), in every shape: arrays in arrays, objects in skipped fields, lists in lists,
        // in the fields read into types (annotations, labels, owner references, status).
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let o = DecodeOptions::default();
                let ev = |field: &str, open: &str, close: &str, n: usize| {
                    format!(
                        r#"{{"auditID":"x","stage":"ResponseComplete","verb":"get",{field}{}1{}}}"#,
                        open.repeat(n),
                        close.repeat(n)
                    )
                };
                for n in [400, 3_000, 100_000] {
                    let arrays = format!("{}{}", "[".repeat(n), "]".repeat(n));
                    assert_eq!(
                        reasons(&collect(arrays.as_bytes(), &o)),
                        ["not_audit_event@items[0]"],
                        "an array in an array is not read"
                    );
                    let lists = format!("{}1{}", r#"{"items":["#.repeat(n), "]}".repeat(n));
                    assert_eq!(
                        reasons(&collect(lists.as_bytes(), &o)),
                        ["missing_field@items[0]"],
                        "an item's own items are skipped"
                    );
                    let cut = "[".repeat(n);
                    assert_eq!(reasons(&collect(cut.as_bytes(), &o)), ["truncated@items[0]"]);
                    let body = [
                        ev(r#""x":"#, r#"{"a":"#, "}", n),
                        ev(r#""items":"#, r#"[{"items":"#, "}]", n),
                        ev(r#""responseObject":{"metadata":{"annotations":{"kausality.io/a":"#, "[", "]", n) + "}}}",
                        ev(r#""responseObject":{"metadata":{"labels":{"a":"#, r#"{"a":"#, "}", n) + "}}}",
                        ev(r#""responseObject":{"metadata":{"ownerReferences":[{"x":"#, "[", "]", n) + "]}}}",
                        ev(r#""responseObject":{"status":"#, r#"{"a":["#, "]}", n) + "}",
                        ev(r#""user":"#, "[", "]", n),
                    ]
                    .join("\n");
                    let r = reasons(&collect(body.as_bytes(), &o));
                    assert_eq!(r, ["x", "missing_field@line 2 items[0]", "x", "x", "x", "x", "invalid_field@line 7"]);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn the_record_limit_applies_to_each_event_not_to_the_body() {
        // 400 events of 23 KB (9.4 MB): what kube-apiserver sends with its default batch size.
        let pad = "x".repeat(23_000);
        let items: Vec<String> =
            (0..400).map(|i| ev(&format!("e{i}")).replacen('{', &format!(r#"{{"pad":"{pad}","#), 1)).collect();
        let body = list(&items);
        assert!(body.len() > 9_000_000);
        let r = collect(body.as_bytes(), &DecodeOptions::default());
        assert_eq!(r.len(), 400);
        assert!(r.iter().all(Result::is_ok), "{:?}", r.iter().find(|x| x.is_err()));
        // One event over the limit costs only itself.
        let o = DecodeOptions { max_record_bytes: 1000, ..Default::default() };
        let big = ev("big").replacen('{', &format!(r#"{{"pad":"{}","#, "y".repeat(2000)), 1);
        let r = collect(list(&[ev("s1"), big, ev("s2")]).as_bytes(), &o);
        assert_eq!(reasons(&r), ["s1", "too_large@items[1]", "s2"]);
        assert!(r[1].as_ref().unwrap_err().1.contains("per event"), "{r:?}");
        // A single event over the limit.
        let r = collect(ev("z").replacen('{', &format!(r#"{{"pad":"{}","#, "y".repeat(2000)), 1).as_bytes(), &o);
        assert_eq!(reasons(&r), ["too_large@body"]);
    }

    #[test]
    fn a_bad_item_costs_only_itself() {
        let o = DecodeOptions::default();
        let out_of_range = ev("n").replace(r#""verb""#, r#""responseStatus":{"code":1e400},"verb""#);
        let mut bytes = list(&[ev("g1"), out_of_range, ev("bad-utf8"), ev("g2"), "[]".into(), "7".into()]).into_bytes();
        let at = bytes.windows(8).position(|w| w == b"bad-utf8").unwrap();
        bytes[at + 3] = 0xff;
        let r = collect(&bytes, &o);
        assert_eq!(
            reasons(&r),
            ["g1", "json@items[1]", "encoding@items[2]", "g2", "not_audit_event@items[4]", "not_audit_event@items[5]"]
        );
        assert!(r[1].as_ref().unwrap_err().1.contains("number out of range"), "{r:?}");
        // In a JSON array too.
        let mut bytes = format!("[{},{}]", ev("a"), ev("bad-utf8")).into_bytes();
        let at = bytes.windows(8).position(|w| w == b"bad-utf8").unwrap();
        bytes[at] = 0xc3;
        assert_eq!(reasons(&collect(&bytes, &o)), ["a", "encoding@items[1]"]);
        // A list of another kind is rejected whole, also on the slow path.
        let other = list(&[ev("g1"), "{\"verb\":5}".into()]).replace("EventList", "PodList");
        assert_eq!(reasons(&collect(other.as_bytes(), &o)), ["not_audit_event@body"]);
        // A single event with a number out of range is rejected as such.
        let one = ev("n").replace(r#""verb""#, r#""responseStatus":{"code":1e400},"verb""#);
        assert_eq!(reasons(&collect(one.as_bytes(), &o)), ["json@body"]);
    }

    #[test]
    fn a_cut_or_broken_list_keeps_the_items_before_the_break() {
        let o = DecodeOptions::default();
        let whole = list(&[ev("c1"), ev("c2"), ev("c3")]);
        let cut = &whole[..whole.find("c3").unwrap()];
        assert_eq!(reasons(&collect(cut.as_bytes(), &o)), ["c1", "c2", "truncated@items[2]"]);
        let broken = whole.replace(&format!(",{}", ev("c2")), &format!(" x{}", ev("c2")));
        assert_eq!(reasons(&collect(broken.as_bytes(), &o)), ["c1", "json@items[1]"]);
        let after = format!("{}x", &whole[..whole.len() - 1]);
        assert_eq!(reasons(&collect(after.as_bytes(), &o)), ["c1", "c2", "c3", "json@body"]);
    }

    #[test]
    fn empty_array_is_not_an_audit_body_but_an_empty_event_list_is() {
        let o = DecodeOptions::default();
        let r = collect(b"[]", &o);
        assert_eq!(reasons(&r), ["not_audit_event@body"]);
        assert!(r[0].as_ref().unwrap_err().1.contains("empty JSON array"), "{r:?}");
        assert_eq!(reasons(&collect(b" [ ] ", &o)), ["not_audit_event@body"]);
        assert!(collect(list(&[]).as_bytes(), &o).is_empty());
    }

    #[test]
    fn an_envelope_inside_an_envelope_is_not_unwrapped_again() {
        let inner = serde_json::to_string(EV).unwrap();
        let record = format!("{{\"properties\":{{\"log\":{inner}}}}}");
        let twice =
            format!("{{\"records\":[{{\"properties\":{{\"log\":{}}}}}]}}", serde_json::to_string(&record).unwrap());
        let r = collect(twice.as_bytes(), &DecodeOptions { unwrap: Unwrap::Aks, ..Default::default() });
        assert_eq!(reasons(&r), ["wrapper@items[0]"]);
    }
}
