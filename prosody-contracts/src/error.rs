//! Error categories: how the library treats a failure, whatever failed.

use std::error::Error as StdError;
use std::fmt;

/// Any error, boxed; what generic tower middleware returns.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// How the library treats a failed event.
///
/// Closed on purpose (not `#[non_exhaustive]`): every mode is defined by
/// what it does with exactly these three, so a `match` over them is
/// complete. The library's error and status enums that may grow are
/// `#[non_exhaustive]` instead.
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
