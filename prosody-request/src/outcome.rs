//! What a requester learns of each subsystem it asked.

use bytes::Bytes;
use serde::de::DeserializeOwned;

/// One subsystem's outcome of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The subsystem's handler succeeded and answered this value.
    Success(T),
    /// No value: the handler failed, no answer came in time, or the answer
    /// did not decode.
    Failure(ResponseError),
}

impl<T> Outcome<T> {
    /// Whether this is a [`Success`](Outcome::Success).
    #[must_use]
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success(_))
    }

    /// The outcome as a `Result`.
    ///
    /// # Errors
    ///
    /// The [`ResponseError`] of a failure.
    pub fn into_result(self) -> Result<T, ResponseError> {
        match self {
            Self::Success(value) => Ok(value),
            Self::Failure(error) => Err(error),
        }
    }
}

/// Why a subsystem gave no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    /// The subsystem's handler failed and the record settled with that
    /// failure (permanent, routed to the failure topic, or dropped in
    /// best-effort mode); its error's message.
    #[error("the subsystem's handler failed: {message}")]
    HandlerFailed {
        /// The handler's error, as it displayed.
        message: String,
    },
    /// No answer arrived before the deadline.
    #[error("no response arrived before the deadline")]
    Timeout,
    /// The answer is JSON, but not of the type asked for.
    #[error("the response does not have the requested format: {message}")]
    FormatMismatch {
        /// What the decoder said.
        message: String,
    },
    /// The answer is not JSON.
    #[error("the response is malformed: {message}")]
    MalformedResponse {
        /// What the parser said.
        message: String,
    },
}

/// An answer's JSON text as a `T`: [`ResponseError::MalformedResponse`] if
/// it is not JSON, [`ResponseError::FormatMismatch`] if it is JSON of
/// another shape.
pub(crate) fn decode<T: DeserializeOwned>(json: &Bytes) -> Outcome<T> {
    match serde_json::from_slice::<T>(json) {
        Ok(value) => Outcome::Success(value),
        Err(error) => match serde_json::from_slice::<serde::de::IgnoredAny>(json) {
            Ok(_) => Outcome::Failure(ResponseError::FormatMismatch {
                message: error.to_string(),
            }),
            Err(error) => Outcome::Failure(ResponseError::MalformedResponse {
                message: error.to_string(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_decodes_or_says_why_not() {
        let json = Bytes::from_static(br#"{"accepted":"order-7"}"#);
        let value: Outcome<serde_json::Value> = decode(&json);
        assert_eq!(
            value,
            Outcome::Success(serde_json::json!({"accepted": "order-7"}))
        );
        assert!(matches!(
            decode::<u32>(&json),
            Outcome::Failure(ResponseError::FormatMismatch { .. })
        ));
        assert!(matches!(
            decode::<u32>(&Bytes::from_static(b"{not json")),
            Outcome::Failure(ResponseError::MalformedResponse { .. })
        ));
    }
}
