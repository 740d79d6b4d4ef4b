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

pub mod broker;
pub mod clock;
pub mod codec;
pub mod context;
pub mod dedup;
pub mod defer;
mod envelope;
pub mod error;
pub mod event;
pub mod failure;
pub mod handler;
pub mod hash;
pub mod key;
pub mod loader;
pub mod log;
pub mod monopolization;

pub use clock::Timestamp;
pub use codec::{Codec, CodecError, DecodeError, JsonCodec};
pub use context::{Context, Demand, WaitMeter};
pub use error::{BoxError, Category, HandlerError, ResultExt};
pub use event::{Encoded, Event, Excise, Headers, Message, SOURCE_SYSTEM_HEADER, Timer, Topic};
pub use handler::{EventHandler, EventRequest, EventService, HandlerService, Panicked, Settlement};
pub use key::Key;
pub mod retry;
pub mod runtime;
pub mod scheduler;
#[cfg(feature = "conformance")]
pub mod services;
pub mod shutdown;
pub mod state;
pub mod store;
pub mod telemetry;
#[cfg(test)]
mod testkit;
pub mod timeout;
pub mod timers;
pub mod trace;

pub use runtime::{Runtime, RuntimeConfig};
