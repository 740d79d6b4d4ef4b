//! The producer of the memory broker.

use crate::Shared;
use prosody_contracts::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
use std::sync::Arc;
use std::time::Duration;

/// Appends records to a [`MemoryBroker`](crate::MemoryBroker)'s logs.
///
/// Invariant: a send is acknowledged only once the record is in its
/// partition's log and waiting consumers were woken, so a record is readable
/// by the time its [`Delivery`] is returned.
#[derive(Clone, Debug)]
pub struct MemoryProducer {
    shared: Arc<Shared>,
}

impl MemoryProducer {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl Producer for MemoryProducer {
    /// Appends at once; the timeout is never reached.
    async fn send(
        &self,
        record: OutgoingRecord,
        _timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        let delivery = self.shared.lock().produce(record)?;
        self.shared.changed();
        Ok(delivery)
    }
}
