//! The Kafka broker's suites, as one test binary (one link instead of one
//! per suite): librdkafka's in-process mock cluster, and the real Kafka of
//! `scripts/services`. Each module is one suite.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod admin;
mod conformance;
mod delivery;
mod reads;
mod real;
