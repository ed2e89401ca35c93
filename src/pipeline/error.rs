//! What can keep a pipeline from starting.

use super::snapshot_file;
use crate::shell::ConfigErrors;
use crate::{sinks, sources};

/// Why [`super::start`] failed: the pipeline file, the snapshot, or a part that could not
/// start; each part's error says what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline file has errors (all of them).
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    /// The snapshot cannot be read.
    #[error(transparent)]
    Snapshot(#[from] snapshot_file::Error),
    /// A listener cannot start.
    #[error(transparent)]
    Listen(#[from] crate::listen::Error),
    /// A webhook cannot start.
    #[error(transparent)]
    Webhook(#[from] sources::webhook::Error),
    /// A sink cannot start.
    #[error(transparent)]
    Sink(#[from] sinks::Error),
    /// The query API cannot start.
    #[error(transparent)]
    Query(#[from] crate::query::Error),
    /// The fetcher of unknown parents cannot start.
    #[cfg(feature = "fetch")]
    #[error(transparent)]
    Fetch(#[from] crate::fetch::Error),
    /// A Kafka source cannot start.
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    KafkaSource(#[from] sources::kafka::consumer::Error),
    /// The state changelog cannot be set up or read.
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Changelog(#[from] crate::changelog::Error),
    /// The processor's thread cannot be started.
    #[error("cannot start the processor thread: {0}")]
    Thread(std::io::Error),
}
