//! Polling until something holds: the control plane and kausality-stream are eventually
//! consistent, so every assertion about them waits first, with a deadline and a message that
//! says what was awaited.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// How often a condition is checked.
pub const POLL: Duration = Duration::from_millis(200);

/// Calls `check` every [`POLL`] until it returns `Ok(Some(_))`; an `Err` is remembered and
/// retried (a transient API error must not end a wait). Fails after `timeout` with `what` and
/// the last error.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            match last_error {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what} (last error: {e:#})"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
