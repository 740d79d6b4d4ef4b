//! How rdkafka's errors become the broker contract's.

use prosody_contracts::broker::BrokerError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Whether an rdkafka error may go away if the same call is tried again:
/// librdkafka's own verdict where it gives one, and the transport and
/// leadership codes that clear up by themselves.
pub(crate) fn retriable(error: &KafkaError) -> bool {
    let Some(code) = error.rdkafka_error_code() else {
        return false;
    };
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::QueueFull
            | RDKafkaErrorCode::LeaderNotAvailable
            | RDKafkaErrorCode::NotLeaderForPartition
            | RDKafkaErrorCode::NotEnoughReplicas
            | RDKafkaErrorCode::NotEnoughReplicasAfterAppend
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::CoordinatorLoadInProgress
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::RebalanceInProgress
            | RDKafkaErrorCode::UnknownTopicOrPartition
    )
}

/// A failure that may clear up if the call is tried again (a thread that
/// could not start or finish, a deadline that ran out).
pub(crate) fn retriable_failure(
    source: impl Into<prosody_contracts::error::BoxError>,
) -> BrokerError {
    BrokerError::Backend {
        retriable: true,
        source: source.into(),
    }
}

/// An rdkafka error as a broker error, classified.
pub(crate) fn backend(error: KafkaError) -> BrokerError {
    BrokerError::Backend {
        retriable: retriable(&error),
        source: Box::new(error),
    }
}
