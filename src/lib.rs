#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod client;
mod config;
mod connect;
mod consume;
mod directory;
mod env;
mod erased;
mod error;
mod gate;
mod health;
mod mock;
mod observe;
mod probe;
#[cfg(doctest)]
mod promises;
mod published;
mod reply;
mod request;
mod send;
mod slot;
mod stack;
#[cfg(test)]
mod testing;

/// Telemetry export (feature `otel`, on by default): OTLP, the process's
/// providers and the `PROSODY_LOG` subscriber; see the `prosody-otel` crate.
#[cfg(feature = "otel")]
pub mod otel {
    pub use prosody_otel::{
        OtelError, flush_telemetry, install, layer, meter_provider, shutdown_telemetry,
    };
}
#[cfg(feature = "sentry")]
pub use prosody_otel::sentry;

pub use backend::{Backend, BackendConsumer, BackendProducer};
pub use builder::ClientBuilder;
pub use client::ProsodyClient;
pub use config::ConfigError;
pub use config::spec as state_spec;
pub use config::{
    GroupProtocol, Mode, ProbePort, ReadTtl, SaslMechanism, Secret, SecurityProtocol, SpanLink,
};
pub use error::ClientError;
pub use health::ConsumerState;
pub use prosody_core::{
    Backoff, BoxError, Category, Codec, CodecError, Context, DecodeError, Demand, Encoded, Event,
    EventHandler, EventRequest, EventService, Excise, HandlerError, HandlerService, Headers,
    JsonCodec, Key, Message, Response, ResultExt, Settlement, Timer, Timestamp, Topic, broker,
    dedup, defer, failure, loader, log, metrics, monopolization, report, retry, scheduler,
    shutdown, telemetry, timeout, timers, trace,
};
pub use prosody_core::{peer, store};
#[cfg(feature = "kafka")]
pub use prosody_kafka::{
    AdminClient, AdminError, KafkaBroker, KafkaConfig, TopicDescription, TopicOptions,
};
pub use prosody_memory::{
    MemoryBroker, MemoryDedupStore, MemoryDeferStore, MemoryStateStore, MemoryStores,
    MemoryTimerStore,
};
pub use prosody_request::{Outcome, Outcomes, ResponseError};
pub use prosody_state as state;
pub use published::ClientReads;
pub use stack::{ClientDeferLayer, ClientTelemetry, Layers};
