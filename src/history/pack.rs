//! The enriched events' JSON, compressed (docs/history.md, "Events"): zstd, with a dictionary
//! trained on the store's own first events and kept in the `dictionaries` table. The events of
//! consecutive mutations of a transaction are one block (`event_blocks`): their JSON, each
//! followed by a newline, in one zstd frame; the view `mutations` shows such a row's `event` as
//! the mutation's id, which [`Unpacker::json`] reads in its block. A row of schema 2 holds its
//! own event: a BLOB of [`PACKED`], the dictionary's id (4 bytes, little endian; 0: none), then
//! one zstd frame; a row whose `event` is TEXT (schema 1, or written by hand) holds the JSON
//! itself and is read as it is.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};

/// The first byte of a compressed event.
pub const PACKED: u8 = 1;

/// zstd's level for a block: in blocks, the levels above 3 find what repeats from one event to
/// the next; 9 keeps 2 bytes a mutation less than 7 but takes a tenth more CPU of the whole
/// `replay` (docs/history.md has the measurements).
pub const LEVEL: i32 = 7;

/// Most events in one block: past a few dozen a block gains little, and a reader
/// decompresses a whole block for one event.
pub const BLOCK_EVENTS: usize = 128;

/// The first byte of an event in a block whose random identifiers were left out because the
/// rows hold them (a JSON event starts with `{`): a set of [`LEFT_OUT_AUDIT_ID`] and
/// [`LEFT_OUT_UID`]. A random UUID costs about 17 bytes compressed, as much as the rest of an
/// event; its row keeps it anyway (`mutation_rows.audit_id`, `object_rows.uid`).
pub const LEFT_OUT_AUDIT_ID: u8 = 1;
/// The object's `uid` (the event's `object.uid`, the row's `object_rows.uid`) was left out.
pub const LEFT_OUT_UID: u8 = 2;
/// The trace's last hop was left out: it was this write itself, made of the event's own
/// fields (the object's apiVersion, kind, name and generation, the user, the stageTimestamp)
/// and nothing else (no labels), about a seventh of an event's JSON. zstd finds it again in
/// the same event, but searching for it took a fifth of the compression's time.
pub const LEFT_OUT_LAST_HOP: u8 = 4;

/// How an event's JSON starts: its auditID is the first field.
const AUDIT_ID_AT: &[u8] = b"{\"auditID\":\"";
/// Where the object's fields start, and its `uid` in them (the first after `apiVersion`, `kind`,
/// `namespace` and `name`): outside a string a `"` is JSON's own, never a name's.
const OBJECT_AT: &[u8] = b",\"object\":{";
const UID_AT: &[u8] = b",\"uid\":\"";

/// Whether `s` is written in JSON as it is (no byte escaped).
fn plain(s: &str) -> bool {
    !s.bytes().any(|c| c == b'"' || c == b'\\' || c < 0x20)
}

/// Where the value of the object's `uid` starts in `json`.
fn uid_at(json: &[u8]) -> Option<usize> {
    let object = find(json, OBJECT_AT)?;
    Some(object + find(&json[object..], UID_AT)? + UID_AT.len())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// Where the value of `key` (`"name":`, quoted, with its colon) found first at or after `from`
/// starts and ends. Outside a string a `"` is JSON's own, so the first such key after a field
/// is the next field's, never a part of a value.
fn value(json: &[u8], from: usize, key: &[u8]) -> Option<(usize, usize)> {
    let at = from + find(json.get(from..)?, key)? + key.len();
    Some((at, value_end(json, at)?))
}

/// Where a scalar value starting at `at` ends: a string's closing quote (after it), else the
/// `,`, `}` or `]` after a number, `null`, `true` or `false`.
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    if *json.get(at)? == b'"' {
        let mut i = at + 1;
        loop {
            match *json.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    }
    json[at..].iter().position(|&c| c == b',' || c == b'}' || c == b']').map(|p| at + p)
}

/// The trace's last hop as the event's own fields make it, as `write_json` writes a hop: the
/// object's apiVersion, kind, name and generation, the user, the stageTimestamp.
fn own_hop(json: &[u8]) -> Option<Vec<u8>> {
    let time = value(json, 0, b"\"stageTimestamp\":")?;
    let user = value(json, time.1, b",\"user\":")?;
    let object = find(json, OBJECT_AT)? + OBJECT_AT.len();
    let api_version = value(json, object, b"\"apiVersion\":")?;
    let kind = value(json, api_version.1, b",\"kind\":")?;
    let name = value(json, kind.1, b",\"name\":")?;
    let generation = value(json, name.1, b",\"generation\":")?;
    let text = |(from, to): (usize, usize)| &json[from..to];
    let mut hop = Vec::with_capacity(160);
    for (key, v) in [
        (&b"{\"apiVersion\":"[..], api_version),
        (b",\"kind\":", kind),
        (b",\"name\":", name),
        (b",\"generation\":", generation),
        (b",\"user\":", user),
        (b",\"timestamp\":", time),
    ] {
        hop.extend_from_slice(key);
        hop.extend_from_slice(text(v));
    }
    hop.push(b'}');
    Some(hop)
}

/// Where the trace's closing `]` is: the event's last fields are the trace, `traceTruncated`
/// when true, and `late`.
fn trace_end(json: &[u8]) -> Option<usize> {
    let mut end =
        json.len() - [&b",\"late\":false}"[..], b",\"late\":true}"].into_iter().find(|s| json.ends_with(s))?.len();
    const TRUNCATED: &[u8] = b",\"traceTruncated\":true";
    if json[..end].ends_with(TRUNCATED) {
        end -= TRUNCATED.len();
    }
    (end > 0 && json[end - 1] == b']').then(|| end - 1)
}

/// The bytes of the trace's last hop, with the comma before it, when the hop is the event's
/// own ([`own_hop`]).
fn own_last_hop(json: &[u8]) -> Option<(usize, usize)> {
    let close = trace_end(json)?;
    let hop = own_hop(json)?;
    let from = close.checked_sub(hop.len())?;
    if &json[from..close] != hop.as_slice() {
        return None;
    }
    match json.get(from.checked_sub(1)?)? {
        b',' => Some((from - 1, close)),
        b'[' => Some((from, close)),
        _ => None,
    }
}

/// Appends an event's `json` to a block's `out`, without its auditID when it is `audit_id`
/// and without its object's UID when it is `uid`, each written plain (what the reader puts
/// back from the rows, [`restore`]), and without the trace's last hop when it is made of the
/// event's own fields; the first byte then says what was left out.
pub fn strip_into(out: &mut Vec<u8>, json: &[u8], audit_id: &str, uid: &str) {
    let mut cuts: [Option<(usize, usize)>; 3] = [None, None, None];
    let mut flags = 0;
    let a = AUDIT_ID_AT.len();
    if !audit_id.is_empty()
        && plain(audit_id)
        && json.starts_with(AUDIT_ID_AT)
        && json[a..].starts_with(audit_id.as_bytes())
        && json.get(a + audit_id.len()) == Some(&b'"')
    {
        cuts[0] = Some((a, a + audit_id.len()));
        flags |= LEFT_OUT_AUDIT_ID;
    }
    if let Some(u) = uid_at(json).filter(|_| !uid.is_empty() && plain(uid)) {
        if json[u..].starts_with(uid.as_bytes()) && json.get(u + uid.len()) == Some(&b'"') {
            cuts[1] = Some((u, u + uid.len()));
            flags |= LEFT_OUT_UID;
        }
    }
    if let Some(hop) = own_last_hop(json) {
        cuts[2] = Some(hop);
        flags |= LEFT_OUT_LAST_HOP;
    }
    if flags != 0 {
        out.push(flags);
    }
    let mut at = 0;
    for (from, to) in cuts.into_iter().flatten() {
        out.extend_from_slice(&json[at..from]);
        at = to;
    }
    out.extend_from_slice(&json[at..]);
}

/// An event of a block as it was written: the auditID and the object's UID put back from the
/// rows (`audit_id`, `uid`: their text, asked for only then) and the trace's last hop from the
/// event's own fields, when its first byte says they were left out.
pub fn restore(event: &[u8], ids: impl FnOnce() -> Option<(String, String)>) -> Option<Vec<u8>> {
    let Some((&flags, rest)) = event.split_first().filter(|(&f, _)| f != b'{' && f < 0x20) else {
        return Some(event.to_vec());
    };
    let (audit_id, uid) = if flags & (LEFT_OUT_AUDIT_ID | LEFT_OUT_UID) != 0 { ids()? } else { Default::default() };
    let mut out = Vec::with_capacity(rest.len() + 240);
    if flags & LEFT_OUT_AUDIT_ID != 0 {
        let a = AUDIT_ID_AT.len();
        out.extend_from_slice(rest.get(..a)?);
        out.extend_from_slice(audit_id.as_bytes());
        out.extend_from_slice(&rest[a..]);
    } else {
        out.extend_from_slice(rest);
    }
    if flags & LEFT_OUT_UID != 0 {
        let u = uid_at(&out)?;
        out.splice(u..u, uid.bytes());
    }
    if flags & LEFT_OUT_LAST_HOP != 0 {
        let close = trace_end(&out)?;
        let mut hop = own_hop(&out)?;
        if out[close - 1] != b'[' {
            hop.insert(0, b',');
        }
        out.splice(close..close, hop);
    }
    Some(out)
}

/// Events taken as samples before a dictionary is trained, and the most bytes of them.
const SAMPLE_EVENTS: usize = 2000;
const SAMPLE_BYTES: usize = 4 << 20;

/// A dictionary's size: 64 KiB.
const DICTIONARY_BYTES: usize = 64 << 10;

/// Compresses the events a writer stores.
pub struct Packer {
    /// The dictionary in use (`dictionaries.id`; 0: none yet) and a context that holds it.
    id: u32,
    compressor: zstd::bulk::Compressor<'static>,
    /// The JSON of the first events written, while no dictionary is trained.
    samples: Vec<u8>,
    sizes: Vec<usize>,
    /// One compressed block, reused.
    frame: Vec<u8>,
}

impl Packer {
    /// The packer of the store on `conn`: with its newest dictionary, or none yet (then the
    /// first events written are the samples of one).
    pub fn load(conn: &Connection) -> rusqlite::Result<Packer> {
        let newest: Option<(u32, Vec<u8>)> = conn
            .query_row("SELECT id, dictionary FROM dictionaries ORDER BY id DESC LIMIT 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let (id, compressor) = match newest {
            Some((id, dict)) => (id, zstd::bulk::Compressor::with_dictionary(LEVEL, &dict).map_err(io_err)?),
            None => (0, zstd::bulk::Compressor::new(LEVEL).map_err(io_err)?),
        };
        Ok(Packer { id, compressor, samples: Vec::new(), sizes: Vec::new(), frame: Vec::with_capacity(64 << 10) })
    }

    /// Whether the samples are enough to train a dictionary.
    pub fn ready_to_train(&self) -> bool {
        self.id == 0 && (self.sizes.len() >= SAMPLE_EVENTS || self.samples.len() >= SAMPLE_BYTES)
    }

    /// Trains a dictionary on the samples, stores it (its own transaction, so that no event
    /// names a dictionary the file does not hold) and compresses with it from now on. A
    /// failure leaves events compressed without one (and the samples are dropped).
    pub fn train(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let samples = std::mem::take(&mut self.samples);
        let sizes = std::mem::take(&mut self.sizes);
        let Ok(dict) = zstd::dict::from_continuous(&samples, &sizes, DICTIONARY_BYTES) else {
            tracing::debug!(
                samples = sizes.len(),
                "history store: no dictionary could be trained; events are compressed without one"
            );
            return Ok(());
        };
        conn.execute("INSERT INTO dictionaries (dictionary) VALUES (?1)", params![dict])?;
        let id = u32::try_from(conn.last_insert_rowid()).unwrap_or(0);
        if id == 0 {
            return Ok(());
        }
        self.compressor = zstd::bulk::Compressor::with_dictionary(LEVEL, &dict).map_err(io_err)?;
        self.id = id;
        Ok(())
    }

    /// Notes `json` (one event) as a sample for the dictionary, while there is none yet.
    pub fn sample(&mut self, json: &[u8]) {
        if self.id == 0 && self.sizes.len() < SAMPLE_EVENTS && self.samples.len() < SAMPLE_BYTES {
            self.samples.extend_from_slice(json);
            self.sizes.push(json.len());
        }
    }

    /// The dictionary the next block is compressed with (`dictionaries.id`; 0: none).
    pub fn dictionary(&self) -> u32 {
        self.id
    }

    /// A block's events (each followed by a newline) compressed: one zstd frame.
    pub fn pack_block(&mut self, events: &[u8]) -> rusqlite::Result<&[u8]> {
        self.frame.clear();
        self.frame.reserve(zstd::zstd_safe::compress_bound(events.len()));
        self.compressor.compress_to_buffer(events, &mut self.frame).map_err(io_err)?;
        Ok(&self.frame)
    }
}

fn io_err(e: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

/// Reads the stored events of one store: its dictionaries, each loaded when first needed, and
/// the block read last.
pub struct Unpacker<'c> {
    conn: &'c Connection,
    contexts: RefCell<HashMap<u32, Option<zstd::bulk::Decompressor<'static>>>>,
    block: RefCell<Option<Block>>,
}

/// A block decompressed: its first and last mutation ids, its events, where each starts.
struct Block {
    first: i64,
    last: i64,
    events: Vec<u8>,
    starts: Vec<usize>,
}

impl Block {
    fn event(&self, id: i64) -> Option<Vec<u8>> {
        let slot = usize::try_from(id.checked_sub(self.first)?).ok()?;
        let start = *self.starts.get(slot)?;
        // Each event is followed by a newline.
        let end = match self.starts.get(slot + 1) {
            Some(&next) => next - 1,
            None => self.events.len().checked_sub(1)?,
        };
        self.events.get(start..end).map(<[u8]>::to_vec)
    }
}

/// Most bytes of one decompressed block (its events and their newlines).
const BLOCK_BYTES_MAX: usize = 256 << 20;

impl<'c> Unpacker<'c> {
    /// A reader of the events of the store on `conn`.
    pub fn new(conn: &'c Connection) -> Unpacker<'c> {
        Unpacker { conn, contexts: RefCell::default(), block: RefCell::default() }
    }

    /// The JSON of an `event` column (of the view `mutations`): TEXT as it is, a BLOB holding
    /// JSON as it is, a packed BLOB decompressed, an integer (the mutation's id) read in its
    /// block. `None`: NULL, a real, or an event that cannot be read (its block or dictionary
    /// missing, the bytes damaged).
    pub fn json(&self, value: ValueRef<'_>) -> Option<Vec<u8>> {
        let bytes = match value {
            ValueRef::Text(b) => return Some(b.to_vec()),
            ValueRef::Blob(b) => b,
            ValueRef::Integer(id) => return self.in_block(id),
            ValueRef::Null | ValueRef::Real(_) => return None,
        };
        let Some((&PACKED, rest)) = bytes.split_first() else { return Some(bytes.to_vec()) };
        let (id, frame) = rest.split_at_checked(4)?;
        let id = u32::from_le_bytes(id.try_into().ok()?);
        let size = usize::try_from(zstd::zstd_safe::get_frame_content_size(frame).ok()??).ok()?;
        self.decompress(id, frame, size)
    }

    fn decompress(&self, dictionary: u32, frame: &[u8], size: usize) -> Option<Vec<u8>> {
        let conn = self.conn;
        let mut contexts = self.contexts.borrow_mut();
        let context = contexts.entry(dictionary).or_insert_with(|| Self::context(conn, dictionary)).as_mut()?;
        context.decompress(frame, size).ok()
    }

    /// The event of mutation `id`, in its block (the block read last is kept), with what was
    /// left out of it put back from its rows ([`restore`]).
    fn in_block(&self, id: i64) -> Option<Vec<u8>> {
        let raw = self.raw_in_block(id)?;
        restore(&raw, || self.ids(id))
    }

    /// The text of mutation `id`'s auditID and of its object's UID, as the rows keep them.
    fn ids(&self, id: i64) -> Option<(String, String)> {
        self.conn
            .query_row(
                "SELECT m.audit_id, o.uid FROM mutation_rows m JOIN object_rows o ON o.id = m.object_id WHERE m.id = ?1",
                [id],
                |r| Ok((super::schema::id_text(r.get_ref(0)?), super::schema::id_text(r.get_ref(1)?))),
            )
            .ok()
            .and_then(|(a, u)| Some((a?, u?)))
    }

    /// The event of mutation `id` as its block holds it.
    fn raw_in_block(&self, id: i64) -> Option<Vec<u8>> {
        if let Some(b) = self.block.borrow().as_ref().filter(|b| b.first <= id && id <= b.last) {
            return b.event(id);
        }
        let (first, last, dictionary, data): (i64, i64, u32, Vec<u8>) = self
            .conn
            .query_row(
                "SELECT id, last_id, dictionary, data FROM event_blocks WHERE id <= ?1 ORDER BY id DESC LIMIT 1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .ok()?;
        if id > last {
            return None;
        }
        let size = usize::try_from(zstd::zstd_safe::get_frame_content_size(&data).ok()??).ok()?.min(BLOCK_BYTES_MAX);
        let events = self.decompress(dictionary, &data, size)?;
        let mut starts = vec![0];
        starts.extend(
            events.iter().enumerate().filter(|(_, &c)| c == b'\n').map(|(i, _)| i + 1).filter(|&i| i < events.len()),
        );
        let block = Block { first, last, events, starts };
        let event = block.event(id);
        *self.block.borrow_mut() = Some(block);
        event
    }

    fn context(conn: &Connection, id: u32) -> Option<zstd::bulk::Decompressor<'static>> {
        if id == 0 {
            return zstd::bulk::Decompressor::new().ok();
        }
        let dict: Vec<u8> =
            conn.query_row("SELECT dictionary FROM dictionaries WHERE id = ?1", [id], |r| r.get(0)).ok()?;
        zstd::bulk::Decompressor::with_dictionary(&dict).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUDIT: &str = "0b6c2f1e-5d1a-4c3b-9e8f-7a6b5c4d3e2f";
    const UID: &str = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a";

    fn event(audit_id: &str, name: &str, uid: &str) -> Vec<u8> {
        format!(
            r#"{{"auditID":"{audit_id}","cluster":"c","verb":"update","user":"u","object":{{"apiVersion":"v1","kind":"Pod","namespace":"ns","name":"{name}","uid":"{uid}","generation":1}},"parent":{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"{UID}","generation":2}},"reverts":[{{"auditID":"{AUDIT}"}}]}}"#
        )
        .into_bytes()
    }

    fn round_trip(json: &[u8], audit_id: &str, uid: &str) -> Vec<u8> {
        let mut block = Vec::new();
        strip_into(&mut block, json, audit_id, uid);
        let back = restore(&block, || Some((audit_id.to_string(), uid.to_string()))).expect("restored");
        assert_eq!(String::from_utf8(back).unwrap(), String::from_utf8(json.to_vec()).unwrap());
        block
    }

    #[test]
    fn the_auditid_and_the_object_s_uid_are_left_out_and_put_back() {
        let json = event(AUDIT, "web-1", UID);
        let block = round_trip(&json, AUDIT, UID);
        assert_eq!(block[0], LEFT_OUT_AUDIT_ID | LEFT_OUT_UID);
        assert_eq!(block.len(), 1 + json.len() - AUDIT.len() - UID.len());
        // The parent's UID and the reverts' auditIDs stay: the rows do not hold them.
        let text = String::from_utf8(block[1..].to_vec()).unwrap();
        assert!(text.starts_with(r#"{"auditID":"","cluster""#), "{text}");
        assert!(text.contains(r#""name":"web-1","uid":"","generation""#), "{text}");
        assert_eq!(text.matches(UID).count(), 1, "{text}");
        assert_eq!(text.matches(AUDIT).count(), 1, "{text}");
    }

    #[test]
    fn what_the_rows_do_not_hold_exactly_stays_in_the_event() {
        // The rows' auditID or UID other than the event's: the event is kept whole.
        let json = event(AUDIT, "web-1", UID);
        let block = round_trip(&json, "another", "");
        assert_eq!(block, json);
        let block = round_trip(&json, AUDIT, "9f8e7d6c");
        assert_eq!(block[0], LEFT_OUT_AUDIT_ID);
        // A name that looks like the fields is escaped in JSON: the real ones are found.
        let name = r#"x\",\"uid\":\"y"#;
        let json = event(AUDIT, name, UID);
        let block = round_trip(&json, AUDIT, UID);
        assert_eq!(block[0], LEFT_OUT_AUDIT_ID | LEFT_OUT_UID);
        // An ID that JSON escapes is not left out.
        let odd = r#"a"b"#;
        let json = event(r#"a\"b"#, "web-1", UID);
        let block = round_trip(&json, odd, UID);
        assert_eq!(block[0], LEFT_OUT_UID);
    }

    /// An event whose trace ends with `last` (its JSON text), `truncated` and `late` as given.
    fn traced(trace: &str, truncated: bool, late: bool) -> Vec<u8> {
        let truncated = if truncated { r#","traceTruncated":true"# } else { "" };
        format!(
            r#"{{"auditID":"{AUDIT}","cluster":"c","stageTimestamp":"2026-11-27T10:00:00.5Z","verb":"patch","subresource":"scale","user":"al\"ice","userHash":"x","object":{{"apiVersion":"apps/v1","kind":"ReplicaSet","namespace":"ns","name":"web-1","uid":"{UID}","generation":null}},"class":"origin","reason":"r","actor":{{"isController":false,"controllers":[]}},"freezeViolation":false,"snoozed":false,"trace":[{trace}]{truncated},"late":{late}}}"#
        )
        .into_bytes()
    }

    const OWN: &str = r#"{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":null,"user":"al\"ice","timestamp":"2026-11-27T10:00:00.5Z"}"#;
    const ROOT: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":3,"user":"bob","timestamp":"2026-11-27T09:00:00Z","labels":{"t":"]"}}"#;

    #[test]
    fn the_trace_s_last_hop_made_of_the_event_s_own_fields_is_left_out_and_put_back() {
        for truncated in [false, true] {
            for late in [false, true] {
                // The hop alone, and after another (whose labels hold a `]`).
                for (trace, cut) in [(OWN.to_string(), OWN.len()), (format!("{ROOT},{OWN}"), OWN.len() + 1)] {
                    let json = traced(&trace, truncated, late);
                    let block = round_trip(&json, AUDIT, UID);
                    assert_eq!(block[0], LEFT_OUT_AUDIT_ID | LEFT_OUT_UID | LEFT_OUT_LAST_HOP);
                    assert_eq!(block.len(), 1 + json.len() - AUDIT.len() - UID.len() - cut, "{trace}");
                    // With the IDs kept, the hop alone is put back without asking the rows.
                    let mut alone = Vec::new();
                    strip_into(&mut alone, &json, "", "");
                    assert_eq!(alone[0], LEFT_OUT_LAST_HOP);
                    assert_eq!(restore(&alone, || None), Some(json.clone()));
                }
            }
        }
    }

    #[test]
    fn a_last_hop_that_is_not_the_event_s_own_stays() {
        let other = [
            // Labels, another generation, user, time or name, the root's hop: kept.
            OWN.replace('}', r#","labels":{"a":"b"}}"#),
            OWN.replace("null", "2"),
            OWN.replace(r#"al\"ice"#, "alice"),
            OWN.replace(":00.5Z", ":00.6Z"),
            OWN.replace("web-1", "web-2"),
            ROOT.to_string(),
            String::new(),
        ];
        for trace in other {
            let json = traced(&trace, false, false);
            let block = round_trip(&json, AUDIT, UID);
            assert_eq!(block[0], LEFT_OUT_AUDIT_ID | LEFT_OUT_UID, "{trace}");
        }
        // An event that does not end as write_json ends one: kept whole.
        let mut json = traced(OWN, false, false);
        json.truncate(json.len() - 1);
        assert_eq!(round_trip(&json, "", "")[..], json[..]);
    }

    proptest::proptest! {
        /// Any text in every field, as `write_json` writes it: the event comes back whole, its
        /// last hop left out when it is the event's own.
        #[test]
        fn any_enriched_event_comes_back_whole(text in proptest::prelude::any::<String>(), own in proptest::prelude::any::<bool>(), gen in proptest::prelude::any::<Option<i64>>(), late in proptest::prelude::any::<bool>()) {
            let mut e = crate::enriched::testing::event(&text);
            e.object.generation = gen;
            e.late = late;
            e.trace_truncated = !late;
            if own {
                e.trace.push(crate::enriched::HopOut {
                    api_version: e.object.api_version.clone(),
                    kind: e.object.kind.clone(),
                    name: e.object.name.clone().into(),
                    generation: e.object.generation,
                    user: Some(e.user.clone()),
                    timestamp: Some(e.stage_timestamp.clone()),
                    labels: serde_json::Map::new(),
                });
            }
            let mut json = Vec::new();
            e.write_json(&mut json);
            let block = round_trip(&json, &e.audit_id, &e.object.uid);
            proptest::prop_assert_eq!(block.first().is_some_and(|&f| f < 0x20 && f & LEFT_OUT_LAST_HOP != 0), own);
        }
    }

    #[test]
    fn an_event_kept_whole_reads_as_it_is() {
        let json = event(AUDIT, "web-1", UID);
        assert_eq!(restore(&json, || None), Some(json.clone()));
        // Left out, but the rows cannot be read: nothing, not a wrong event.
        let mut block = Vec::new();
        strip_into(&mut block, &json, AUDIT, UID);
        assert_eq!(restore(&block, || None), None);
    }
}
