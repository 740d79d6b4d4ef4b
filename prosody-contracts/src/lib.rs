//! The contracts of prosody: what the runtime and every backend agree on.
//!
//! Events, keys and timestamps; the categories every failure carries; the
//! codec that turns a record's payload into a handler's value; the broker
//! contract (a consumer in a group and a producer); and the store contracts
//! (timers, dedup, defer, keyed-state cells and the loader that reads a
//! message back), each with reads beside one commit of an attempt's batch;
//! and what peers agree on to answer requests (request headers, the peer
//! directory).
//!
//! A backend depends on this crate alone: it names no layer, no runtime
//! and no telemetry SDK. Each contract has one conformance suite, in
//! `prosody-conformance`, that every backend runs.
//!
//! ```
//! use prosody_contracts::{Category, Key, Timestamp};
//! use prosody_contracts::store::StoreError;
//!
//! let key = Key::from("order-17");
//! assert_eq!(&*key, "order-17");
//! // A store that cannot be reached fails an attempt transiently; one that
//! // refuses the write halts the partition rather than retry in silence.
//! assert_eq!(StoreError::unavailable("timed out").category(), Category::Transient);
//! assert_eq!(StoreError::rejected("bad schema").category(), Category::Terminal);
//! assert!(Timestamp::from_millis(1_000) < Timestamp::from_millis(2_000));
//! ```

pub mod broker;
pub mod clock;
pub mod codec;
mod envelope;
pub mod error;
pub mod event;
pub mod hash;
pub mod key;
pub mod loader;
pub mod peer;
pub mod store;

pub use clock::Timestamp;
pub use codec::{Codec, CodecError, DecodeError, JsonCodec};
pub use error::{BoxError, Category};
pub use event::{
    Encoded, Event, Excise, Headers, Message, SOURCE_SYSTEM_HEADER, Timer, TimerKind, Topic,
};
pub use key::Key;
