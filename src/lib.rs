#![doc = include_str!("../README.md")]

mod client;
mod config;
mod env;
mod slot;

pub use client::{ClientBuilder, ClientError, ConsumerState, ProsodyClient};
pub use config::ConfigError;
pub use prosody_core::{
    BoxError, Category, Codec, CodecError, Context, Demand, Event, EventHandler, EventRequest,
    EventService, Excise, HandlerError, HandlerService, Headers, JsonCodec, Key, Message,
    ResultExt, Timer, Timestamp, Topic, broker,
};
pub use prosody_memory::MemoryBroker;
