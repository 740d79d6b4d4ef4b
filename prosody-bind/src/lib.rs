//! What every language binding of prosody needs, whatever its language:
//! the engine seen through JSON values and plain data, so a binding holds
//! only what is its language's.
//!
//! - [`JsonHandler`]: a handler over JSON payloads and answers, as a trait
//!   object; [`Handler`] runs it as the engine's
//!   [`EventHandler`](prosody::EventHandler).
//! - [`failure`]: a foreign exception (its type name, message and
//!   category) as the engine's [`HandlerError`](prosody::HandlerError).
//! - [`Answer`]: a request's [`Outcome`](prosody::Outcome) as plain data.
//! - [`Collection`] and [`Op`]: keyed state and published readers by a
//!   collection's object form and an operation's name.
//! - Options by name go through
//!   [`ClientBuilder::options`](prosody::ClientBuilder::options), the one
//!   option table.

mod answer;
mod collection;
mod failure;
mod handler;
mod ops;
mod scan;

pub use answer::{Answer, answers};
pub use collection::Collection;
pub use failure::{Foreign, failure};
pub use handler::{Handler, JsonHandler, Reply as HandlerReply};
pub use ops::{Item, Op, OpError, Reader, Reply};
pub use scan::{Scanned, Sink};
