//! What can keep a pipeline from starting.

use super::snapshot_file;
use crate::shell::ConfigErrors;
use crate::{sinks, sources};

/// Why [`super::start`] failed: the pipeline file, the snapshot, or a part that could not
/// start; each part's error says what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Snapshot(#[from] snapshot_file::Error),
    #[error(transparent)]
    Listen(#[from] crate::listen::Error),
    #[error(transparent)]
    Webhook(#[from] sources::webhook::Error),
    #[error(transparent)]
    Sink(#[from] sinks::Error),
    #[error(transparent)]
    Query(#[from] crate::query::Error),
    #[cfg(feature = "fetch")]
    #[error(transparent)]
    Fetch(#[from] crate::fetch::Error),
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    KafkaSource(#[from] sources::kafka::consumer::Error),
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Changelog(#[from] crate::changelog::Error),
    #[error("cannot start the processor thread: {0}")]
    Thread(std::io::Error),
}
