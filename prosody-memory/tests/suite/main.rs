//! The in-memory backends' suites, as one test binary (one link instead of
//! one per suite): the shared conformance suites on the memory broker and
//! stores, and what they do beyond them. Each module is one suite.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod broker;
mod conformance;
mod dedup;
mod defer;
mod directory;
mod loader;
mod state;
mod stores;
mod timer;
