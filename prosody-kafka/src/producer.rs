//! The producer: idempotent, keyed, with headers.

use crate::error::backend;
use prosody_core::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use std::time::Duration;

/// Sends records to Kafka; clones share one rdkafka producer.
///
/// Idempotence is on (`enable.idempotence`), so librdkafka's own retries
/// neither duplicate nor reorder a partition's records.
#[derive(Clone)]
pub struct KafkaProducer {
    pub(crate) producer: FutureProducer,
}

impl std::fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProducer").finish_non_exhaustive()
    }
}

impl Producer for KafkaProducer {
    async fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in record.headers.iter() {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_ref()),
            });
        }
        let mut outgoing: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&record.topic).headers(headers);
        if let Some(key) = record.key.as_deref() {
            outgoing = outgoing.key(key);
        }
        if let Some(payload) = record.payload.as_deref() {
            outgoing = outgoing.payload(payload);
        }
        if let Some(partition) = record.partition {
            outgoing = outgoing.partition(partition);
        }
        if let Some(timestamp) = record.timestamp {
            outgoing = outgoing.timestamp(timestamp.as_millis());
        }
        let sent = self.producer.send(outgoing, Timeout::After(timeout));
        match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(delivery)) => Ok(Delivery {
                partition: delivery.partition,
                offset: delivery.offset,
            }),
            Ok(Err((error, _))) => Err(backend(error)),
            Err(_) => Err(BrokerError::SendTimeout {
                topic: record.topic.clone(),
                timeout,
            }),
        }
    }
}
