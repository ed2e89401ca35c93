//! Splitting a body into audit events: JSON lines, a single document, an EventList, a JSON
//! array, or a known wrapper.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

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

#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub unwrap: Unwrap,
    /// Largest single event or line accepted, in bytes.
    pub max_record_bytes: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { unwrap: Unwrap::None, max_record_bytes: 8 << 20 }
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes a body of any supported shape, calling `out` once per event or rejected record, in
/// input order.
pub fn decode_body<F>(body: &[u8], opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
    if body.starts_with(b"\xFF\xFE") || body.starts_with(b"\xFE\xFF") {
        out(Err(Invalid::new(Location::Body, InvalidReason::Encoding, "UTF-16 input; audit events are UTF-8 JSON")));
        return;
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
    let mut de = serde_json::Deserializer::from_slice(bytes).into_iter::<serde::de::IgnoredAny>();
    match de.next() {
        Some(Ok(_)) => trim_ascii(&bytes[de.byte_offset()..]).is_empty(),
        // Broken first value: a single broken document unless a later line holds a value.
        Some(Err(_)) => !bytes.contains(&b'\n'),
        None => true,
    }
}

fn decode_lines<F>(body: &[u8], opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
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
pub fn decode_document<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    let doc = trim_ascii(doc.strip_prefix(UTF8_BOM).unwrap_or(doc));
    if doc.len() > opts.max_record_bytes {
        out(Err(Invalid::new(
            location,
            InvalidReason::TooLarge,
            format!("{} bytes is over the limit of {} bytes per record", doc.len(), opts.max_record_bytes),
        )));
        return;
    }
    match doc.first() {
        Some(b'{') => {}
        Some(b'[') => return decode_array(doc, location, opts, out),
        Some(&c) => {
            let shown = if c.is_ascii_graphic() { format!("{:?}", c as char) } else { format!("byte 0x{c:02x}") };
            out(Err(Invalid::new(location, InvalidReason::Json, format!("not JSON: starts with {shown}; audit events are JSON objects"))));
            return;
        }
        None => return,
    }
    // UTF-8 is checked once for the whole document (faster than string by string).
    let Ok(text) = std::str::from_utf8(doc) else {
        return out(Err(Invalid::new(location, InvalidReason::Encoding, "not UTF-8; audit events are UTF-8 JSON")));
    };
    // One pass: an event, an EventList with its items decoded in place, or an envelope noticed.
    match serde_json::from_str::<AuditEvent>(text) {
        Ok(mut ev) => {
            if let Some(items) = ev.items.take() {
                if let Err(e) = check_list_kind(&ev.kind, &ev.api_version, location) {
                    return out(Err(e));
                }
                for (i, item) in items.into_iter().enumerate() {
                    let loc = item_location(location, i);
                    out(validate(&item, loc).map(|()| item));
                }
            } else if let Some(records) = ev.records {
                decode_aks(records.get().as_bytes(), location, opts, out);
            } else if ev.properties.is_some() && ev.audit_id.is_none() {
                decode_aks_record(doc, location, opts, out);
            } else if ev.proto_payload.is_some() && ev.audit_id.is_none() {
                out(Err(Invalid::new(
                    location,
                    InvalidReason::Wrapper,
                    "a Cloud Logging entry (protoPayload), not an audit event; export the API server's audit log instead",
                )));
            } else {
                out(validate(&ev, location).map(|()| ev));
            }
        }
        Err(e) if e.is_data() => {
            // A type error somewhere: decode item by item so the good items survive.
            match serde_json::from_str::<RawList>(text) {
                Ok(RawList { kind, api_version, items: Some(items) }) => {
                    if let Err(e) = check_list_kind(&kind, &api_version, location) {
                        return out(Err(e));
                    }
                    for (i, raw) in items.into_iter().enumerate() {
                        decode_event(raw.get().as_bytes(), item_location(location, i), out);
                    }
                }
                _ => out(Err(Invalid::from_json(location, &e))),
            }
        }
        Err(e) => out(Err(Invalid::from_json(location, &e))),
    }
}

fn decode_event<F>(doc: &[u8], location: Location, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    match serde_json::from_slice::<AuditEvent>(doc) {
        Ok(ev) => out(validate(&ev, location).map(|()| ev)),
        Err(e) => out(Err(Invalid::from_json(location, &e))),
    }
}

fn decode_array<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    match serde_json::from_slice::<Vec<&RawValue>>(doc) {
        Ok(items) => {
            for (i, raw) in items.into_iter().enumerate() {
                let bytes = raw.get().as_bytes();
                if bytes.first() == Some(&b'{') {
                    decode_event(bytes, item_location(location, i), out);
                } else {
                    decode_document(bytes, item_location(location, i), opts, out);
                }
            }
        }
        Err(e) => out(Err(Invalid::from_json(location, &e))),
    }
}

const AKS_HINT: &str = "read the events inside with `--unwrap aks` (replay) or `unwrap = \"aks\"` on a pipeline source";

/// The Azure diagnostic-settings envelope `{"records": [record, ...]}`; `records` is the list.
fn decode_aks<F>(records: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    if opts.unwrap != Unwrap::Aks {
        return out(Err(Invalid::new(location, InvalidReason::Wrapper, format!("an Azure diagnostic envelope ({{\"records\":[...]}}); {AKS_HINT}"))));
    }
    match serde_json::from_slice::<Vec<AksRecord>>(records) {
        Ok(records) => {
            for (i, rec) in records.into_iter().enumerate() {
                unwrap_aks_record(rec, item_location(location, i), opts, out);
            }
        }
        Err(e) => out(Err(Invalid::from_json(location, &e))),
    }
}

/// One Azure record on its own (Event Hubs delivers them so): `{"properties": {"log": "<event>"}}`.
fn decode_aks_record<F>(doc: &[u8], location: Location, opts: &DecodeOptions, out: &mut F)
where
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    if opts.unwrap != Unwrap::Aks {
        return out(Err(Invalid::new(
            location,
            InvalidReason::Wrapper,
            format!("an Azure diagnostic record ({{\"properties\":{{\"log\":...}}}}); {AKS_HINT}"),
        )));
    }
    match serde_json::from_slice::<AksRecord>(doc) {
        Ok(rec) => unwrap_aks_record(rec, location, opts, out),
        Err(e) => out(Err(Invalid::from_json(location, &e))),
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
    F: FnMut(Result<AuditEvent<'_>, Invalid>),
{
    match rec.properties.and_then(|p| p.log) {
        Some(log) => decode_document(trim_ascii(log.as_bytes()), location, opts, out),
        None => out(Err(Invalid::new(location, InvalidReason::MissingField, "Azure record without properties.log"))),
    }
}

fn check_list_kind(kind: &Option<Cow<'_, str>>, api_version: &Option<Cow<'_, str>>, location: Location) -> Result<(), Invalid> {
    if let Some(k) = kind.as_deref() {
        if k != "EventList" {
            return Err(Invalid::new(location, InvalidReason::NotAuditEvent, format!("a {k:?} is not an audit EventList")));
        }
    }
    if let Some(v) = api_version.as_deref() {
        if !v.starts_with("audit.k8s.io/") {
            return Err(Invalid::new(location, InvalidReason::NotAuditEvent, format!("apiVersion {v:?} is not audit.k8s.io")));
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawList<'a> {
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
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
        decode_body(body, opts, &mut |r: Result<AuditEvent<'_>, Invalid>| {
            v.push(r.map(|e| e.audit_id.unwrap().into_owned()).map_err(|e| (e.reason, e.to_string())))
        });
        v
    }

    const EV: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a1","stage":"ResponseComplete","verb":"create"}"#;

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
        assert!(r[1].as_ref().unwrap_err().1.starts_with("item 1:"));
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
        assert_eq!(collect(b"apiVersion: audit.k8s.io/v1\nkind: Event\n", &o)[0].as_ref().unwrap_err().0, InvalidReason::Json);
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
}
