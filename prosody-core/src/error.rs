//! Handler errors and their categories.

pub use prosody_contracts::error::{BoxError, Category};
use std::error::Error as StdError;
use std::fmt;

/// A failed handler call, with its category.
///
/// Invariant: every error has exactly one category. An error of unknown
/// origin (converted with `?` or from a boxed error) is
/// [`Category::Transient`] unless the handler's
/// [`classify`](crate::EventHandler::classify) gives one of the errors in
/// its source chain a category; an explicit category (from
/// [`HandlerError::new`], [`ResultExt`], or an error that carries its own,
/// such as a `StateError`) is never reclassified.
///
/// The conversion of any error by `?` (`From<E>`) is implemented beside
/// the one error type it treats apart, `StateError`, in the state module:
/// a blanket conversion can only tell a type apart by naming it, and this
/// way the error categories depend on nothing above them.
pub struct HandlerError {
    category: Category,
    source: BoxError,
    /// The category was assumed (transient), not stated.
    assumed: bool,
}

impl HandlerError {
    /// The failure of an attempt that met a store error, with the store's
    /// [category](prosody_contracts::store::StoreError::category) kept.
    #[must_use]
    pub fn from_store(error: prosody_contracts::store::StoreError) -> Self {
        Self::new(error.category(), error)
    }

    /// An error with an explicit category.
    pub fn new(category: Category, source: impl Into<BoxError>) -> Self {
        Self {
            category,
            source: source.into(),
            assumed: false,
        }
    }

    /// An error of unknown origin: transient until classified.
    pub(crate) fn assumed(source: BoxError) -> Self {
        Self {
            category: Category::Transient,
            source,
            assumed: true,
        }
    }

    /// Gives an error whose category was assumed the first category
    /// `classify` finds for an error of its source chain, outermost first;
    /// an error with a stated category, or one `classify` knows nothing
    /// of, is returned as it is.
    #[must_use]
    pub fn classified(
        mut self,
        classify: impl Fn(&(dyn StdError + 'static)) -> Option<Category>,
    ) -> Self {
        if !self.assumed {
            return self;
        }
        let mut link: Option<&(dyn StdError + 'static)> = Some(&*self.source);
        while let Some(error) = link {
            if let Some(category) = classify(error) {
                self.category = category;
                self.assumed = false;
                break;
            }
            link = error.source();
        }
        self
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
                assumed: categorized.assumed,
            },
            Err(other) => Self::assumed(other),
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
            .field("assumed", &self.assumed)
            .finish()
    }
}

/// A handler error carried through middleware that speaks [`BoxError`];
/// [`HandlerError::from_boxed`] restores its category.
#[derive(Debug)]
struct Categorized {
    category: Category,
    source: BoxError,
    assumed: bool,
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
            assumed: error.assumed,
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

    /// An error of the handler's own, wrapped once by an error whose
    /// source it is.
    #[derive(Debug, thiserror::Error)]
    #[error("bad order")]
    struct BadOrder;

    #[derive(Debug, thiserror::Error)]
    #[error("while handling")]
    struct Wrapper(#[source] BadOrder);

    fn permanent_bad_orders(error: &(dyn std::error::Error + 'static)) -> Option<Category> {
        error.is::<BadOrder>().then_some(Category::Permanent)
    }

    fn fail<E: std::error::Error + Send + Sync + 'static>(error: E) -> HandlerError {
        let result: Result<(), HandlerError> = (|| Err(error)?)();
        result.expect_err("an error")
    }

    #[test]
    fn classify_gives_a_category_through_the_source_chain() {
        let direct = fail(BadOrder).classified(permanent_bad_orders);
        assert_eq!(direct.category(), Category::Permanent);
        let wrapped = fail(Wrapper(BadOrder)).classified(permanent_bad_orders);
        assert_eq!(wrapped.category(), Category::Permanent);
        let boxed: BoxError = Box::new(Wrapper(BadOrder));
        let boxed = HandlerError::from_boxed(boxed).classified(permanent_bad_orders);
        assert_eq!(boxed.category(), Category::Permanent);
        // Through a boxed middleware, an assumed category stays open.
        let through: BoxError = fail(BadOrder).into();
        let back = HandlerError::from_boxed(through).classified(permanent_bad_orders);
        assert_eq!(back.category(), Category::Permanent);
        let other = fail(std::fmt::Error).classified(permanent_bad_orders);
        assert_eq!(other.category(), Category::Transient);
    }

    #[test]
    fn a_stated_category_is_never_reclassified() {
        let stated = HandlerError::transient(BadOrder).classified(permanent_bad_orders);
        assert_eq!(stated.category(), Category::Transient);
        let terminal: Result<(), BadOrder> = Err(BadOrder);
        let terminal = terminal.terminal().expect_err("an error");
        assert_eq!(
            terminal.classified(permanent_bad_orders).category(),
            Category::Terminal
        );
        let once = fail(BadOrder).classified(|_| Some(Category::Terminal));
        assert_eq!(
            once.classified(permanent_bad_orders).category(),
            Category::Terminal,
            "classified once, the category is stated"
        );
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
