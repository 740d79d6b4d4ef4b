//! The hash maps of hot paths: foldhash, seeded per process, instead of
//! `SipHash`. Keys come from records, so the seed matters: it keeps
//! collisions out of an attacker's reach.

/// A hash map with the fast, randomly seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set with the fast, randomly seeded hasher.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A bounded concurrent cache with the same hasher: `quick_cache`'s sharded
/// cache, each shard behind its own lock; [`bounded`] and [`recent`] say
/// which entries it keeps.
pub type BoundedCache<K, V> =
    quick_cache::sync::Cache<K, V, quick_cache::UnitWeighter, foldhash::fast::RandomState>;

/// An empty cache of about `capacity` entries: each of its shards holds at
/// most its share of `capacity`, rounded up. Keys seen again are kept over
/// keys seen once (for keys looked up again and again).
#[must_use]
pub fn bounded<K, V>(capacity: std::num::NonZeroUsize) -> BoundedCache<K, V>
where
    K: Eq + std::hash::Hash,
    V: Clone,
{
    with_hot_share(capacity, 0.97)
}

/// An empty cache of about `capacity` entries that keeps the latest:
/// entries leave in the order they came (for keys mostly seen once, such as
/// message ids, where keeping the first ones seen would be waste).
#[must_use]
pub fn recent<K, V>(capacity: std::num::NonZeroUsize) -> BoundedCache<K, V>
where
    K: Eq + std::hash::Hash,
    V: Clone,
{
    with_hot_share(capacity, 0.0)
}

/// A cache of about `capacity` entries, `hot` of it for entries seen twice.
fn with_hot_share<K, V>(capacity: std::num::NonZeroUsize, hot: f64) -> BoundedCache<K, V>
where
    K: Eq + std::hash::Hash,
    V: Clone,
{
    let weight = u64::try_from(capacity.get()).unwrap_or(u64::MAX);
    let options = quick_cache::OptionsBuilder::new()
        .estimated_items_capacity(capacity.get())
        .weight_capacity(weight)
        .hot_allocation(hot)
        .build();
    match options {
        Ok(options) => BoundedCache::with_options(
            options,
            quick_cache::UnitWeighter,
            foldhash::fast::RandomState::default(),
            quick_cache::sync::DefaultLifecycle::default(),
        ),
        // Every option is set: the builder has nothing to refuse.
        Err(_) => BoundedCache::with(
            capacity.get(),
            weight,
            quick_cache::UnitWeighter,
            foldhash::fast::RandomState::default(),
            quick_cache::sync::DefaultLifecycle::default(),
        ),
    }
}
