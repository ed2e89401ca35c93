//! The `why` command: one object's story (module [`crate::history::story`]), read from the
//! history store on disk or from the query API of a running service, rendered for the terminal
//! (`render`) or as JSON. docs/why.md shows what it tells.

mod render;
mod server;

use std::path::PathBuf;

use crate::decode::time::{parse_rfc3339_given, GivenTimeError};
use crate::history::story::{self, Story, StoryQuery};
use crate::history::{self, Mode};

pub use render::{render, Style};
pub use server::{ClientTls, Server};

/// The store `why` reads when neither a file nor a server is given: where the embedded default
/// pipeline writes it (the working directory).
pub const DEFAULT_STORE: &str = "kausality-history.db";

/// Where the story comes from.
pub enum Source {
    /// A history store file.
    Store(PathBuf),
    /// The query API of a running service (`GET /v1/why`).
    Server(Server),
}

/// Why a story could not be told.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The question has no single story: not found, ambiguous, older than the store, or not
    /// naming an object. The message says which and what to do.
    #[error("{0}")]
    NoStory(String),
    /// The store cannot be opened (missing, not a history store, another schema version).
    #[error(transparent)]
    Store(#[from] history::Error),
    /// A query of the store failed.
    #[error("{0}")]
    Read(String),
    /// The server cannot be reached or answered something else than a story.
    #[error("{0}")]
    Server(String),
}

/// The story `q` asks for.
pub fn story(source: &Source, q: &StoryQuery) -> Result<Story, Error> {
    match source {
        Source::Store(path) => {
            let conn = history::open(path, Mode::Read)?;
            story::build(&conn, q).map_err(|e| match e {
                story::StoryError::Store(e) => {
                    Error::Read(format!("reading the history store {}: {e}", path.display()))
                }
                e => Error::NoStory(story::explain(&conn, q, &e)),
            })
        }
        Source::Server(server) => server.story(q),
    }
}

/// `KIND/NAME` (`pod/web-1`, `replicasets.apps/web-7d9f`) into its kind and name.
pub fn parse_object(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((kind.to_string(), name.to_string()))
        }
        _ => {
            Err(format!("{s:?}: expected KIND/NAME, e.g. pod/web-1 or replicaset/web-7d9f (the namespace goes in -n)"))
        }
    }
}

/// The earliest `--at`: 0000-01-01T00:00:00Z, the first time RFC 3339 can write (a year has
/// four digits). The query API reads `at` as RFC 3339, so an earlier one could not be asked
/// of a server at all.
pub const EARLIEST_AT_US: i64 = -62_167_219_200_000_000;

/// `--at`: an RFC 3339 time, or how long before `now_us` (`90s`, `30m`, `2h`, `1d`). A time
/// with an offset or a day that does not exist, or a duration that reaches before
/// [`EARLIEST_AT_US`], is refused: it is a mistake, not a question about then.
pub fn parse_at(s: &str, now_us: i64) -> Result<i64, String> {
    let s = s.trim();
    match parse_rfc3339_given(s) {
        Ok(us) => return Ok(us),
        Err(GivenTimeError::NotRfc3339) => {}
        Err(e) => return Err(format!("{s:?} {e}")),
    }
    let bad = || format!("{s:?}: expected an RFC 3339 time (2026-11-20T10:00:00Z) or how long ago (90s, 30m, 2h, 1d)");
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let unit_us: f64 = match unit {
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        "d" => 86_400e6,
        _ => return Err(bad()),
    };
    let at = now_us as f64 - n * unit_us;
    if at < EARLIEST_AT_US as f64 {
        return Err(format!(
            "{s:?} is too long ago: --at reaches back to 0000-01-01T00:00:00Z at most; give a time (2026-11-20T10:00:00Z) or a shorter duration"
        ));
    }
    Ok(at as i64)
}

#[cfg(test)]
mod tests;
