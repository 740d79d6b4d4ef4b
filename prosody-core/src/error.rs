//! Handler errors and their categories.

use std::error::Error as StdError;
use std::fmt;

/// Any error, boxed; what generic tower middleware returns.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// How the library treats a failed event.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// May succeed if tried again: retried (or deferred) as the mode says.
    Transient,
    /// Will never succeed: not retried; dropped, routed or logged as the
    /// mode says.
    Permanent,
    /// The partition cannot go on: it stops handling and is not committed
    /// past the event.
    Terminal,
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Terminal => "terminal",
        })
    }
}

/// A failed handler call, with its category.
///
/// Invariant: every error has exactly one category, and an error of unknown
/// origin (converted with `?` or from a boxed error) is [`Category::Transient`].
pub struct HandlerError {
    category: Category,
    source: BoxError,
}

impl HandlerError {
    /// An error with an explicit category.
    pub fn new(category: Category, source: impl Into<BoxError>) -> Self {
        Self {
            category,
            source: source.into(),
        }
    }

    /// A transient error: the event is tried again.
    pub fn transient(source: impl Into<BoxError>) -> Self {
        Self::new(Category::Transient, source)
    }

    /// A permanent error: the event is not tried again.
    pub fn permanent(source: impl Into<BoxError>) -> Self {
        Self::new(Category::Permanent, source)
    }

    /// A terminal error: the partition stops.
    pub fn terminal(source: impl Into<BoxError>) -> Self {
        Self::new(Category::Terminal, source)
    }

    /// Recovers a handler error that went through a boxed-error middleware;
    /// any other boxed error is transient.
    #[must_use]
    pub fn from_boxed(error: BoxError) -> Self {
        match error.downcast::<Categorized>() {
            Ok(categorized) => Self {
                category: categorized.category,
                source: categorized.source,
            },
            Err(other) => Self::transient(other),
        }
    }

    /// The error's category.
    #[must_use]
    pub fn category(&self) -> Category {
        self.category
    }

    /// The underlying error.
    #[must_use]
    pub fn source(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error: {}", self.category, self.source)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("category", &self.category)
            .field("source", &self.source)
            .finish()
    }
}

/// Any standard error converts with `?` as a transient error, but for a
/// [`StateError`](crate::state::StateError), which keeps its own category.
impl<E: StdError + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        let any: &dyn std::any::Any = &error;
        match any.downcast_ref::<crate::state::StateError>() {
            Some(state) => Self::new(state.category(), error),
            None => Self::transient(error),
        }
    }
}

/// A handler error carried through middleware that speaks [`BoxError`];
/// [`HandlerError::from_boxed`] restores its category.
#[derive(Debug)]
struct Categorized {
    category: Category,
    source: BoxError,
}

impl fmt::Display for Categorized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error: {}", self.category, self.source)
    }
}

impl StdError for Categorized {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl From<HandlerError> for BoxError {
    fn from(error: HandlerError) -> Self {
        Box::new(Categorized {
            category: error.category,
            source: error.source,
        })
    }
}

/// Marks the error of a `Result` with a category.
pub trait ResultExt<T> {
    /// The error is transient.
    fn transient(self) -> Result<T, HandlerError>;
    /// The error is permanent.
    fn permanent(self) -> Result<T, HandlerError>;
    /// The error is terminal.
    fn terminal(self) -> Result<T, HandlerError>;
}

impl<T, E: Into<BoxError>> ResultExt<T> for Result<T, E> {
    fn transient(self) -> Result<T, HandlerError> {
        self.map_err(HandlerError::transient)
    }

    fn permanent(self) -> Result<T, HandlerError> {
        self.map_err(HandlerError::permanent)
    }

    fn terminal(self) -> Result<T, HandlerError> {
        self.map_err(HandlerError::terminal)
    }
}

#[cfg(test)]
mod tests {
    use super::{BoxError, Category, HandlerError, ResultExt};

    fn parse(text: &str) -> Result<i32, HandlerError> {
        Ok(text.parse::<i32>()?)
    }

    #[test]
    fn unknown_errors_are_transient() {
        assert_eq!(
            parse("x").err().map(|e| e.category()),
            Some(Category::Transient)
        );
        let boxed: BoxError = "plain".into();
        assert_eq!(
            HandlerError::from_boxed(boxed).category(),
            Category::Transient
        );
    }

    #[test]
    fn category_survives_a_boxed_middleware() {
        for category in [Category::Transient, Category::Permanent, Category::Terminal] {
            let boxed: BoxError = HandlerError::new(category, "bad").into();
            let back = HandlerError::from_boxed(boxed);
            assert_eq!(back.category(), category);
            assert_eq!(back.source().to_string(), "bad");
        }
    }

    #[test]
    fn result_marks_its_error() {
        let failed: Result<(), &str> = Err("no");
        assert_eq!(
            failed.permanent().err().map(|e| e.category()),
            Some(Category::Permanent)
        );
        let failed: Result<(), &str> = Err("no");
        assert_eq!(
            failed.terminal().err().map(|e| e.category()),
            Some(Category::Terminal)
        );
    }
}
