//! One conformance suite per contract of `prosody-contracts`, generic over
//! the backend, and the discovery of the real servers a backend's tests run
//! against.
//!
//! A backend takes this crate as a dev-dependency and runs every suite of
//! the contracts it implements: the suites are the contract; a backend that
//! passes them may replace any other.

pub mod broker;
pub mod services;
pub mod store;
