//! A request's outcomes as plain data.

use prosody::{Outcome, Outcomes, ResponseError};
use serde_json::Value;

/// One subsystem's outcome, as a binding hands it to its language.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The subsystem's handler answered this value.
    Success(Value),
    /// Its handler failed; the error's message.
    HandlerError(String),
    /// No answer arrived before the deadline.
    Timeout(String),
    /// The answer is not of the type asked for.
    FormatMismatch(String),
    /// The answer is not JSON.
    MalformedResponse(String),
}

impl Answer {
    /// The kind's name: `success`, `handler`, `timeout`, `format` or
    /// `malformed`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Success(_) => "success",
            Self::HandlerError(_) => "handler",
            Self::Timeout(_) => "timeout",
            Self::FormatMismatch(_) => "format",
            Self::MalformedResponse(_) => "malformed",
        }
    }
}

impl From<Outcome<Value>> for Answer {
    fn from(outcome: Outcome<Value>) -> Self {
        match outcome {
            Outcome::Success(value) => Self::Success(value),
            Outcome::Failure(error) => {
                let text = error.to_string();
                match error {
                    ResponseError::HandlerFailed { message } => Self::HandlerError(message),
                    ResponseError::Timeout => Self::Timeout(text),
                    ResponseError::FormatMismatch { .. } => Self::FormatMismatch(text),
                    ResponseError::MalformedResponse { .. } => Self::MalformedResponse(text),
                    _ => Self::HandlerError(text),
                }
            }
        }
    }
}

/// Every subsystem's answer, by subsystem.
#[must_use]
pub fn answers(outcomes: Outcomes<Value>) -> Vec<(String, Answer)> {
    outcomes
        .into_iter()
        .map(|(subsystem, outcome)| (subsystem, Answer::from(outcome)))
        .collect()
}
