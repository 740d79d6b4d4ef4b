//! The core of prosody: events, the handler contract, error categories, the
//! broker contract, and the partition runtime that calls a handler in offset
//! order per key and concurrently across keys.
//!
//! Every error a handler returns has a category, and an error of unknown
//! origin is transient:
//!
//! ```
//! use prosody_core::{Category, HandlerError, ResultExt};
//!
//! fn parse(text: &str) -> Result<u32, HandlerError> {
//!     let n: u32 = text.parse().permanent()?; // bad input never succeeds
//!     Ok(n)
//! }
//!
//! assert_eq!(parse("x").map_err(|e| e.category()), Err(Category::Permanent));
//! let unknown: HandlerError = std::io::Error::other("timeout").into();
//! assert_eq!(unknown.category(), Category::Transient);
//! ```

mod access;
mod answer;
mod backoff;
pub mod context;
pub use prosody_contracts::{
    Codec, CodecError, DecodeError, Encoded, Event, Excise, Headers, JsonCodec, Key, Message,
    SOURCE_SYSTEM_HEADER, Timer, TimerKind, Timestamp, Topic,
};
pub use prosody_contracts::{broker, clock, codec, event, hash, key, loader, peer, store};
pub mod dedup;
pub mod defer;
pub mod error;
pub mod failure;
pub mod handler;
pub mod log;
pub mod metrics;
pub mod monopolization;
pub mod report;
mod response;
#[cfg(test)]
mod sizes;

pub use backoff::Backoff;
pub use context::{Context, Demand};
pub use error::{BoxError, Category, HandlerError, ResultExt};
pub use handler::{EventHandler, EventRequest, EventService, HandlerService, Panicked, WaitMeter};
pub use response::{Response, Settlement};
pub mod retry;
pub mod runtime;
pub mod scheduler;
pub mod shutdown;
pub mod state;
pub mod telemetry;
#[cfg(test)]
mod testkit;
pub mod timeout;
pub mod timers;
pub mod trace;
mod work;

pub use runtime::{Runtime, RuntimeConfig};
