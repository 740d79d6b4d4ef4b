//! The hash maps of hot paths: foldhash, seeded per process, instead of
//! `SipHash`. Keys come from records, so the seed matters: it keeps
//! collisions out of an attacker's reach.

/// A hash map with the fast, randomly seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A bounded concurrent cache with the same hasher: `quick_cache`'s sharded
/// cache, which evicts by recency and frequency (CLOCK-Pro), each shard
/// behind its own lock.
pub(crate) type BoundedCache<K, V> =
    quick_cache::sync::Cache<K, V, quick_cache::UnitWeighter, foldhash::fast::RandomState>;

/// An empty cache of about `capacity` entries: each of its shards holds at
/// most its share of `capacity`, rounded up.
pub(crate) fn bounded<K, V>(capacity: std::num::NonZeroUsize) -> BoundedCache<K, V>
where
    K: Eq + std::hash::Hash,
    V: Clone,
{
    BoundedCache::with(
        capacity.get(),
        u64::try_from(capacity.get()).unwrap_or(u64::MAX),
        quick_cache::UnitWeighter,
        foldhash::fast::RandomState::default(),
        quick_cache::sync::DefaultLifecycle::default(),
    )
}
