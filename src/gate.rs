//! Whether the client still takes operations.

use crate::error::ClientError;
use std::sync::atomic::{AtomicBool, Ordering};

/// Open until the client's shutdown starts, then closed for good.
///
/// Invariant: once [`Gate::close`] is called, every [`Gate::check`] fails
/// with [`ClientError::ShutDown`]; nothing opens it again.
#[derive(Debug, Default)]
pub(crate) struct Gate(AtomicBool);

impl Gate {
    /// `Ok` while open; [`ClientError::ShutDown`] once closed.
    pub(crate) fn check(&self) -> Result<(), ClientError> {
        if self.0.load(Ordering::Acquire) {
            return Err(ClientError::ShutDown);
        }
        Ok(())
    }

    /// Closes the gate, for good.
    pub(crate) fn close(&self) {
        self.0.store(true, Ordering::Release);
    }
}
