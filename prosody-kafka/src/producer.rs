//! The producer: idempotent, keyed, with headers.

use crate::error::backend;
use prosody_contracts::broker::{BrokerError, Delivery, OutgoingRecord, Producer, Unsent};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use std::time::Duration;

/// How long past its delivery timeout a send waits for librdkafka's
/// verdict. librdkafka looks for records past their timeout about once a
/// second (each time its broker thread serves, which is at least once a
/// second; a broker that is down is tried again at least every second, see
/// [`KafkaConfig::delivery_timeout`](crate::KafkaConfig::delivery_timeout)),
/// so its report comes about a second after the timeout at worst (0.8 to
/// 1.0 s measured across a real outage); the rest is slack for a busy
/// machine. Should the report come later still, the send says
/// [`Unsent::MayArrive`], which stays true.
pub const VERDICT_MARGIN: Duration = Duration::from_secs(2);

/// Sends records to Kafka; clones share one rdkafka producer.
///
/// Idempotence is on (`enable.idempotence`), so librdkafka's own retries
/// neither duplicate nor reorder a partition's records.
///
/// The timeout of [`send`](Producer::send) is what the caller allows; the
/// producer has a delivery timeout of its own (librdkafka's
/// `message.timeout.ms`, one per producer: librdkafka has no timeout per
/// record, see
/// [`KafkaConfig::effective_delivery_timeout`](crate::KafkaConfig::effective_delivery_timeout)).
///
/// Invariant: a send allowed at least the delivery timeout waits for
/// librdkafka's own verdict, at most the delivery timeout plus
/// [`VERDICT_MARGIN`], so a send that reports a failure is never delivered
/// afterwards: the error is [`BrokerError::SendTimeout`] with
/// [`Unsent::GivenUp`] (librdkafka gave the record up) or another error
/// librdkafka reported. A send allowed less (a caller's own short
/// deadline, or a longer `message.timeout.ms` set by the user) stops
/// waiting at its timeout while librdkafka still holds the record, and
/// says so: [`Unsent::MayArrive`].
#[derive(Clone)]
pub struct KafkaProducer {
    pub(crate) producer: FutureProducer,
    /// librdkafka's delivery timeout for this producer.
    pub(crate) delivery: Duration,
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
        // Wait for librdkafka's verdict when the caller allows its delivery
        // timeout; the margin is ours, so the report arrives before we stop.
        let wait = if self.delivery <= timeout {
            self.delivery.saturating_add(VERDICT_MARGIN)
        } else {
            timeout
        };
        // `Timeout::After` bounds only the wait for room in a full queue.
        let sent = self.producer.send(outgoing, Timeout::After(wait));
        match tokio::time::timeout(wait, sent).await {
            Ok(Ok(delivery)) => Ok(Delivery {
                partition: delivery.partition,
                offset: delivery.offset,
            }),
            // librdkafka gave the record up: it never sends it again.
            Ok(Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut), _))) => {
                Err(BrokerError::SendTimeout {
                    topic: record.topic.clone(),
                    timeout: self.delivery,
                    unsent: Unsent::GivenUp,
                })
            }
            Ok(Err((error, _))) => Err(backend(error)),
            // Our wait ended first: librdkafka may still deliver it.
            Err(_) => Err(BrokerError::SendTimeout {
                topic: record.topic.clone(),
                timeout: wait,
                unsent: Unsent::MayArrive,
            }),
        }
    }
}
