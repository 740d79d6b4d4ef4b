//! The hash maps of hot paths: foldhash, seeded per process, instead of
//! `SipHash`. Keys come from records, so the seed matters: it keeps
//! collisions out of an attacker's reach.

/// A hash map with the fast, randomly seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
