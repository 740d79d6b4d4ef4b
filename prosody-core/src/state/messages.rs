//! Message collections: a cell holds a message's position in the log, and
//! a read brings the message back through the client's loader (the one
//! the defer stage reads with, and its cache).

use super::StateError;
use crate::broker::{BrokerError, Record, TopicPartition};
use crate::codec;
use crate::event::{Encoded, Event, Message};
use crate::loader::{LoadError, Loader};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use std::fmt;
use std::sync::Arc;

/// The first byte of a message cell: its format.
const FORMAT: u8 = 1;

/// The cell of `message` in a message collection: its position (format
/// byte, partition, offset, topic), never its payload.
#[must_use]
pub fn message_cell<P>(message: &Message<P>) -> Bytes {
    let mut cell = BytesMut::with_capacity(13 + message.topic.len());
    cell.put_u8(FORMAT);
    cell.put_i32(message.partition);
    cell.put_i64(message.offset);
    cell.put_slice(message.topic.as_bytes());
    cell.freeze()
}

/// The position a message cell holds, if it is one.
fn position(cell: &[u8]) -> Option<(TopicPartition, i64)> {
    let (&format, rest) = cell.split_first()?;
    let (partition, rest) = rest.split_first_chunk::<4>()?;
    let (offset, topic) = rest.split_first_chunk::<8>()?;
    if format != FORMAT {
        return None;
    }
    let topic = std::str::from_utf8(topic).ok()?;
    let partition = TopicPartition::new(topic, i32::from_be_bytes(*partition));
    Some((partition, i64::from_be_bytes(*offset)))
}

type ReadFuture<'a> = BoxFuture<'a, Result<Option<Record>, LoadError>>;

/// A [`Loader`] behind a pointer: message reads leave the store for the
/// broker, so one dynamic call is nothing beside them.
trait ReadBack: Send + Sync {
    fn read<'a>(&'a self, partition: &'a TopicPartition, offset: i64) -> ReadFuture<'a>;
}

impl<L: Loader> ReadBack for L {
    fn read<'a>(&'a self, partition: &'a TopicPartition, offset: i64) -> ReadFuture<'a> {
        Box::pin(self.load(partition, offset))
    }
}

/// How message collections read their messages back.
#[derive(Clone)]
pub(crate) struct Reader(Arc<dyn ReadBack>);

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reader")
    }
}

impl Reader {
    pub(crate) fn new(loader: impl Loader) -> Self {
        Self(Arc::new(loader))
    }

    /// The message a cell of `collection` names.
    ///
    /// # Errors
    ///
    /// [`StateError::Malformed`] for a cell that is no position or names
    /// a tombstone, [`StateError::MessageGone`] when the log no longer
    /// holds the record (or its topic or partition is gone), and [`StateError::MessageRead`] when reading it
    /// failed.
    pub(crate) async fn message(
        &self,
        collection: &'static str,
        cell: &[u8],
    ) -> Result<Message<Encoded>, StateError> {
        let (partition, offset) = position(cell).ok_or(StateError::Malformed {
            collection,
            reason: "a message cell is not a message's position",
        })?;
        match self.0.read(&partition, offset).await {
            Ok(Some(record)) => match codec::encoded(&codec::record_key(&record), &record) {
                Event::Message(message) => Ok(message),
                _ => Err(StateError::Malformed {
                    collection,
                    reason: "a message cell names a tombstone",
                }),
            },
            // No such record, or no such topic or partition any more.
            Ok(None)
            | Err(LoadError::Broker {
                source: BrokerError::UnknownTopic(_) | BrokerError::UnknownPartition(_),
                ..
            }) => Err(StateError::MessageGone {
                collection,
                partition,
                offset,
            }),
            Err(source) => Err(StateError::MessageRead { collection, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Reader, message_cell, position};
    use crate::broker::{BrokerError, Record, TopicPartition};
    use crate::event::{Encoded, Message};
    use crate::loader::{LoadError, Loader};
    use crate::state::StateError;
    use proptest::prelude::*;

    /// A loader whose topic was deleted, or that cannot reach the broker.
    #[derive(Clone)]
    struct Failing(bool);

    impl Loader for Failing {
        async fn load(
            &self,
            partition: &TopicPartition,
            offset: i64,
        ) -> Result<Option<Record>, LoadError> {
            let source = if self.0 {
                BrokerError::UnknownTopic(partition.topic.clone())
            } else {
                BrokerError::Invalid("the broker is down".into())
            };
            Err(LoadError::Broker {
                partition: partition.clone(),
                offset,
                source,
            })
        }
    }

    /// A deleted topic is gone for good (permanent); a broker failure may
    /// pass (transient).
    #[tokio::test]
    async fn a_deleted_topic_is_gone_and_a_failed_read_is_not() {
        let cell = message_cell(&message("t", 0, 5));
        let gone = Reader::new(Failing(true)).message("c", &cell).await;
        assert!(
            matches!(gone, Err(StateError::MessageGone { offset: 5, .. })),
            "{gone:?}"
        );
        let failed = Reader::new(Failing(false)).message("c", &cell).await;
        assert!(
            matches!(failed, Err(StateError::MessageRead { .. })),
            "{failed:?}"
        );
    }

    fn message(topic: &str, partition: i32, offset: i64) -> Message<Encoded> {
        Message {
            topic: topic.into(),
            partition,
            offset,
            timestamp: crate::Timestamp::from_millis(0),
            key: "k".into(),
            raw_key: None,
            payload: Encoded::new(),
            raw: bytes::Bytes::new(),
            id: None,
            headers: crate::Headers::default(),
        }
    }

    proptest! {
        /// A cell holds exactly its message's position.
        #[test]
        fn a_cell_names_its_message(topic in "[a-zA-Z0-9._-]{1,40}", partition in any::<i32>(), offset in any::<i64>()) {
            let cell = message_cell(&message(&topic, partition, offset));
            prop_assert_eq!(position(&cell), Some((TopicPartition::new(topic.as_str(), partition), offset)));
        }

        /// A cell cut short, or of another format, is no position.
        #[test]
        fn a_damaged_cell_is_refused(cut in 0usize..13, format in 2u8..) {
            let cell = message_cell(&message("t", 1, 2));
            prop_assert_eq!(position(&cell[..cut]), None);
            let mut other = cell.to_vec();
            other[0] = format;
            prop_assert_eq!(position(&other), None);
        }
    }
}
