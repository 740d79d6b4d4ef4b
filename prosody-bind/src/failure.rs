//! A foreign exception as the engine's handler error.

use prosody::{Category, HandlerError};

/// An error raised in another language: its type name and message.
///
/// Invariant: it displays as `TypeName: message`, so the failure topic,
/// the logs, the error-report hook and request failures all show both.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{type_name}: {message}")]
pub struct Foreign {
    /// The exception's type name (`ValueError`, `app.OrderRejected`).
    pub type_name: String,
    /// Its message.
    pub message: String,
}

/// The handler error of a foreign exception: permanent when the binding's
/// classification says so, else transient (a foreign error is transient
/// unless marked).
#[must_use]
pub fn failure(
    type_name: impl Into<String>,
    message: impl Into<String>,
    permanent: bool,
) -> HandlerError {
    let error = Foreign {
        type_name: type_name.into(),
        message: message.into(),
    };
    let category = if permanent {
        Category::Permanent
    } else {
        Category::Transient
    };
    HandlerError::new(category, error)
}

#[cfg(test)]
mod tests {
    use super::failure;
    use prosody::Category;

    #[test]
    fn keeps_the_type_name_the_message_and_the_category() {
        let error = failure("ValueError", "bad order", true);
        assert_eq!(error.category(), Category::Permanent);
        assert_eq!(error.source().to_string(), "ValueError: bad order");
        assert_eq!(
            failure("KeyError", "x", false).category(),
            Category::Transient
        );
    }
}
