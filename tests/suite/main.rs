//! The facade's whole-system suites, as one test binary: one link of the
//! library and its drivers instead of one per suite. Each module is one
//! suite (its own documentation says what it proves); a suite that needs a
//! backend is compiled with its feature.
//!
//! Run one suite by its module path, e.g. `cargo test --test suite
//! simulation::`. Suites that cannot share a process stay binaries of
//! their own: `durable` and `requests_real` (crash tests that run their
//! own binary again as members), `kafka_outage` (it stops and starts the
//! Kafka server) and `sentry` (its feature).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod support;

mod client;
mod codec;
mod defer;
mod duplicates;
mod handoff;
mod metrics;
mod modes;
mod probe;
mod published;
mod requests;
mod runtime;
mod shutdown;
mod simulation;
mod spans;
mod stores;
mod timeout;
mod timers;
mod variables;

// Suites that read `/metrics`, which the `otel` feature serves.
#[cfg(feature = "otel")]
mod backlog;
#[cfg(feature = "otel")]
mod gauges;

#[cfg(all(feature = "kafka", feature = "cassandra"))]
mod cassandra_slab_size;
#[cfg(all(feature = "kafka", feature = "cassandra"))]
mod kafka;
#[cfg(all(feature = "kafka", feature = "otel"))]
mod kafka_lag;
#[cfg(all(feature = "kafka", feature = "cassandra"))]
mod kafka_real;
#[cfg(all(feature = "tls", feature = "cassandra"))]
mod kafka_secure;
#[cfg(feature = "kafka")]
mod rebalance;
#[cfg(all(feature = "kafka", feature = "cassandra"))]
mod state;
