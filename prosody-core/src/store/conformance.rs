//! The store conformance suites: one per store trait, generic over the
//! backend, which every backend (memory, Cassandra, any later one) runs.
//!
//! A check reports what differed as a
//! [`Failure`](crate::broker::conformance::Failure) (the broker suite's
//! type); it never panics, and every store call has a deadline.

pub mod dedup;
pub mod defer;
pub mod timer;
