//! Keyed state for prosody handlers: per key, values, maps and deques of
//! a serde type, read and written through the handler's context.
//!
//! A definition names a collection and fixes what it holds; it is a
//! `const`, so it can live in a `static`:
//!
//! ```
//! use prosody_state::{DequeDef, MapDef, ValueDef};
//! use std::time::Duration;
//!
//! static COUNT: ValueDef<u64> = ValueDef::new("count").ttl(Duration::from_secs(30 * 86_400));
//! static TOTALS: MapDef<f64> = MapDef::new("totals");
//! static RECENT: DequeDef<String> = DequeDef::new("recent").capacity(100);
//! ```
//!
//! The client registers each definition (`state_collections`), and a
//! handler binds its key's collection with `context.state(&COUNT)?`. What a
//! handler writes is pending until it succeeds, then lands in one write
//! with its timers and the marker that its record was applied; a failed
//! attempt leaves no trace, and its retry does not see its writes. The
//! facade's `ClientBuilder::state_collections` has a runnable handler that
//! uses a deque in mock mode.
//!
//! What a definition fixes is its [`Spec`]. Its name, kind and payload are
//! the collection's durable identity: the store keeps the first identity
//! it sees under a name, so a changed collection needs a new name.
//!
//! ```
//! use prosody_state::{DequeDef, Kind, MessageMapDef};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Order {
//!     total: f64,
//! }
//!
//! static RECENT: DequeDef<String> = DequeDef::new("recent").capacity(100);
//! // Keeps each order's position in the log and reads it back from there.
//! static OPEN_ORDERS: MessageMapDef<Order> = MessageMapDef::new("open_orders");
//!
//! let spec = RECENT.spec();
//! assert_eq!((spec.name, spec.kind, spec.capacity), ("recent", Kind::Deque, Some(100)));
//! assert_eq!(spec.identity(), "deque/json");
//! assert_eq!(OPEN_ORDERS.spec().identity(), "map/message");
//! ```
//!
//! Invariant of every handle: a read sees the attempt's earlier writes,
//! and a handle cannot outlive its handler (it borrows the context).

// Every operation is async, as the seeds' API is: a write may need a read
// or a store round trip in a later version without changing its callers.
#![allow(
    clippy::unused_async,
    reason = "every state operation is async by contract"
)]

mod cache;
mod codec;
mod definition;
mod deque;
mod map;
mod published;
mod scan;
mod value;

pub use cache::{CacheError, CacheLookups, CachedStores, StateCache};
pub use codec::{Encoding, Json, Messages};
pub use definition::{DequeDef, MapDef, MessageDequeDef, MessageMapDef, MessageValueDef, ValueDef};
pub use deque::DequeState;
pub use map::MapState;
pub use prosody_core::state::{Kind, Payload, ReadCache, Spec, SpecError, StateError};
pub use prosody_core::store::Direction;
pub use published::{
    CachedReads, Gate, Publishable, PublishedDeque, PublishedMap, PublishedValue, SharedReads,
    Source,
};
pub use value::ValueState;

/// How many items a scan fetches from the store at a time.
pub const CHUNK: usize = 64;
