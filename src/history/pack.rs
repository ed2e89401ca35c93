//! The enriched event's JSON in `mutations.event`, compressed (docs/history.md, "Events"):
//! zstd, with a dictionary trained on the store's own first events and kept in the
//! `dictionaries` table. An event is a BLOB: [`PACKED`], the dictionary's id (4 bytes, little
//! endian; 0: none), then one zstd frame. A row whose `event` is TEXT (written by a build of
//! schema 1, or by hand) holds the JSON itself and is read as it is.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};

/// The first byte of a compressed event.
pub const PACKED: u8 = 1;

/// zstd's level: 3 (its default) is within 2 % of 9 in size on these events, with a dictionary,
/// and several times as fast (docs/history.md).
const LEVEL: i32 = 3;

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
    /// One compressed frame, reused.
    frame: Vec<u8>,
}

impl Packer {
    /// The packer of the store on `conn`: with its newest dictionary, or none yet (then the
    /// first events written are the samples of one).
    pub fn load(conn: &Connection) -> rusqlite::Result<Packer> {
        let newest: Option<(u32, Vec<u8>)> =
            conn.query_row("SELECT id, dictionary FROM dictionaries ORDER BY id DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
        let (id, compressor) = match newest {
            Some((id, dict)) => (id, zstd::bulk::Compressor::with_dictionary(LEVEL, &dict).map_err(io_err)?),
            None => (0, zstd::bulk::Compressor::new(LEVEL).map_err(io_err)?),
        };
        Ok(Packer { id, compressor, samples: Vec::new(), sizes: Vec::new(), frame: Vec::with_capacity(4096) })
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
            tracing::debug!(samples = sizes.len(), "history store: no dictionary could be trained; events are compressed without one");
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

    /// `json` compressed into `out` (emptied first).
    pub fn pack(&mut self, json: &[u8], out: &mut Vec<u8>) -> rusqlite::Result<()> {
        if self.id == 0 && self.sizes.len() < SAMPLE_EVENTS && self.samples.len() < SAMPLE_BYTES {
            self.samples.extend_from_slice(json);
            self.sizes.push(json.len());
        }
        // The compressor writes from the start of a buffer: the frame first, then the header
        // and the frame into `out`.
        self.frame.clear();
        self.frame.reserve(zstd::zstd_safe::compress_bound(json.len()));
        self.compressor.compress_to_buffer(json, &mut self.frame).map_err(io_err)?;
        out.clear();
        out.push(PACKED);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.frame);
        Ok(())
    }
}

fn io_err(e: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

/// Reads the stored events of one store: its dictionaries, each loaded when first needed.
pub struct Unpacker<'c> {
    conn: &'c Connection,
    contexts: RefCell<HashMap<u32, Option<zstd::bulk::Decompressor<'static>>>>,
}

impl<'c> Unpacker<'c> {
    pub fn new(conn: &'c Connection) -> Unpacker<'c> {
        Unpacker { conn, contexts: RefCell::default() }
    }

    /// The JSON of an `event` column: TEXT as it is, a BLOB holding JSON as it is, a packed
    /// BLOB decompressed. `None`: NULL, a number, or a packed event that cannot be read (its
    /// dictionary missing, the bytes damaged).
    pub fn json(&self, value: ValueRef<'_>) -> Option<Vec<u8>> {
        let conn = self.conn;
        let bytes = match value {
            ValueRef::Text(b) => return Some(b.to_vec()),
            ValueRef::Blob(b) => b,
            ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) => return None,
        };
        let Some((&PACKED, rest)) = bytes.split_first() else { return Some(bytes.to_vec()) };
        let (id, frame) = rest.split_at_checked(4)?;
        let id = u32::from_le_bytes(id.try_into().ok()?);
        let size = usize::try_from(zstd::zstd_safe::get_frame_content_size(frame).ok()??).ok()?;
        let mut contexts = self.contexts.borrow_mut();
        let context = contexts.entry(id).or_insert_with(|| Self::context(conn, id)).as_mut()?;
        context.decompress(frame, size).ok()
    }

    fn context(conn: &Connection, id: u32) -> Option<zstd::bulk::Decompressor<'static>> {
        if id == 0 {
            return zstd::bulk::Decompressor::new().ok();
        }
        let dict: Vec<u8> = conn.query_row("SELECT dictionary FROM dictionaries WHERE id = ?1", [id], |r| r.get(0)).ok()?;
        zstd::bulk::Decompressor::with_dictionary(&dict).ok()
    }
}
