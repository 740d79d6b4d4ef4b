//! The Cassandra stores' suites on the real Cassandra of `scripts/services`,
//! as one test binary (one link instead of one per suite). Each module is
//! one suite; without `PROSODY_CASSANDRA_NODES` each prints one line and
//! does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod conformance;
mod directory;
mod slab_size;
mod smoke;
mod state;
