//! What a partition's owner knows of its keys' state cells without a read.

use super::disk::{DiskChange, DiskTier};
use bytes::Bytes;
use prosody_core::key::Key;
use prosody_core::store::{StateChange, StateWrite};
use quick_cache::unsync::Cache;
use quick_cache::{Equivalent, Weighter};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// What the cache knows of one cell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing: the store decides.
    Unknown,
    /// Set to a value, or absent (`None`).
    Known(Option<Bytes>),
}

/// The most cells one partition's cache holds.
pub(crate) const CELLS_PER_PARTITION: u64 = 4096;

/// The most unsure slots remembered.
const UNSURE_SLOTS: u64 = 4096;

/// How close to its expiry a cached cell is left to the store: the store
/// counts a TTL from its own clock, in whole seconds.
const EXPIRY_MARGIN: Duration = Duration::from_secs(5);

/// One (collection, key).
type Slot = (Arc<str>, Key);

/// A [`Slot`] borrowed, to look one up without allocating: it hashes and
/// compares as the tuple does (a `str`, then the key's `str`).
#[derive(Hash)]
struct SlotRef<'a>(&'a str, &'a Key);

impl Equivalent<Slot> for SlotRef<'_> {
    fn equivalent(&self, slot: &Slot) -> bool {
        *self.0 == *slot.0 && *self.1 == slot.1
    }
}

/// A cell as known: its value and expiry, or absent.
type Cell = Option<(Bytes, Option<Instant>)>;

/// What is known of one (collection, key): some cells, or (after a clear)
/// every cell.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Whether a cell not in `cells` is absent (the slot was cleared).
    complete: bool,
    cells: BTreeMap<Bytes, Cell>,
}

#[derive(Clone)]
struct ByCells;

impl Weighter<Slot, Known> for ByCells {
    fn weight(&self, _: &Slot, known: &Known) -> u64 {
        u64::try_from(known.cells.len()).unwrap_or(u64::MAX).max(1)
    }
}

/// The state cells a partition's owner wrote since it took the partition,
/// and those it found absent; bounded by [`CELLS_PER_PARTITION`] (the
/// least recently used go first).
///
/// Invariant: an answer equals what the store holds, because the owner is
/// the only writer while it owns the partition and every one of its
/// commits passes here: a landed commit updates the cells it wrote, and a
/// commit that failed or was cut short (it may have landed in part, or
/// land later) forgets them, and keeps no absence for them after. A value
/// read from the store is not kept (its remaining TTL is not known); an
/// absence is, since only a write ends it, unless a commit settled while
/// it was read. A cell near its expiry is left to the store. The cache
/// lives while its partition is open (`CachedStores` opens and closes
/// it), so a partition taken again starts empty.
pub(crate) struct OwnerCache {
    slots: Mutex<Slots>,
}

struct Slots {
    known: Cache<Slot, Known, ByCells>,
    /// Counts every commit's outcome: an absence read across one is not
    /// kept (the commit may have written the cell meanwhile).
    generation: u64,
    /// Slots a commit may yet write (it failed or was cut short, and a
    /// write Cassandra accepted can still land): no absence is kept for
    /// them. Bounded; the least recently touched go first.
    unsure: Cache<Slot, ()>,
    /// How many slots were made unsure since the partition was taken.
    unsure_added: u64,
    /// Everything `known` holds and what it let go, on disk, when the
    /// client has a disk cache; dropped (and deleted) at its first error.
    disk: Option<DiskTier>,
}

impl Slots {
    /// Runs `change` on the disk tier; an error drops the tier, so it can
    /// never answer from a state it failed to record.
    fn on_disk(&mut self, change: impl FnOnce(&DiskTier) -> Result<(), fjall::Error>) {
        if let Some(disk) = &self.disk
            && let Err(error) = change(disk)
        {
            tracing::warn!(%error, "the state disk cache failed; this partition goes on without it");
            self.disk = None;
        }
    }
}

impl Default for OwnerCache {
    fn default() -> Self {
        Self::new(None)
    }
}

impl OwnerCache {
    /// An empty cache, backed by `disk` if given.
    pub(crate) fn new(disk: Option<DiskTier>) -> Self {
        Self::with_capacity(CELLS_PER_PARTITION, disk)
    }

    /// An empty cache of at most `cells` cells in memory.
    pub(crate) fn with_capacity(cells: u64, disk: Option<DiskTier>) -> Self {
        Self {
            slots: Mutex::new(Slots {
                known: Cache::with_weighter(1024, cells, ByCells),
                generation: 0,
                unsure: Cache::new(usize::try_from(UNSURE_SLOTS).unwrap_or(4096)),
                unsure_added: 0,
                disk,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // Nothing panics while holding it: a poisoned cache is consistent.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What is known of the cell.
    pub(crate) fn get(&self, collection: &str, key: &Key, item: &[u8]) -> Seen {
        let mut slots = self.lock();
        let memory = match slots.known.get(&SlotRef(collection, key)) {
            None => Seen::Unknown,
            Some(known) => match known.cells.get(item) {
                Some(Some((value, expiry))) => match expiry {
                    Some(at) if Instant::now() + EXPIRY_MARGIN >= *at => Seen::Unknown,
                    _ => Seen::Known(Some(value.clone())),
                },
                Some(None) => Seen::Known(None),
                None if known.complete => Seen::Known(None),
                None => Seen::Unknown,
            },
        };
        if let Seen::Known(_) = memory {
            return memory;
        }
        let mut seen = Seen::Unknown;
        slots.on_disk(|disk| {
            seen = disk.get(collection, key, item, EXPIRY_MARGIN)?;
            Ok(())
        });
        seen
    }

    /// Where commits stand, for [`absent`](Self::absent): taken before a
    /// store read.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// A store read begun at `generation` found no such cell: kept unless
    /// a commit settled meanwhile or one may still write the slot.
    pub(crate) fn absent(&self, collection: &str, key: &Key, item: &[u8], generation: u64) {
        let mut slots = self.lock();
        // Once more slots were unsure than the set holds, one may have
        // left it while its write can still land: keep no absence.
        if slots.generation != generation
            || slots.unsure_added > UNSURE_SLOTS
            || slots.unsure.get(&SlotRef(collection, key)).is_some()
        {
            return;
        }
        let slot = (Arc::from(collection), key.clone());
        let mut known = slots
            .known
            .remove(&slot)
            .map(|(_, known)| known)
            .unwrap_or_default();
        known.cells.insert(Bytes::copy_from_slice(item), None);
        slots.known.insert(slot, known);
        slots.on_disk(|disk| {
            disk.apply(&[DiskChange::Absent {
                collection,
                key,
                item,
            }])
        });
    }

    /// A commit of `writes`, sent at `sent`, landed. Expiries count from
    /// `sent`, and [`EXPIRY_MARGIN`] covers the store's own clock.
    pub(crate) fn landed(&self, writes: &[StateWrite], sent: Instant) {
        let mut slots = self.lock();
        slots.generation += 1;
        let mut disk = Vec::with_capacity(writes.len());
        for write in writes {
            let slot = (Arc::clone(&write.collection), write.key.clone());
            let mut known = slots
                .known
                .remove(&slot)
                .map(|(_, known)| known)
                .unwrap_or_default();
            let (collection, key) = (&*write.collection, &write.key);
            match &write.change {
                StateChange::Put { item, value } => {
                    let expiry = write.ttl.and_then(|ttl| sent.checked_add(ttl));
                    known
                        .cells
                        .insert(item.clone(), Some((value.clone(), expiry)));
                    disk.push(DiskChange::Put {
                        collection,
                        key,
                        item,
                        value,
                        expiry,
                    });
                }
                StateChange::Delete { item } => {
                    known.cells.insert(item.clone(), None);
                    disk.push(DiskChange::Absent {
                        collection,
                        key,
                        item,
                    });
                }
                StateChange::Clear => {
                    known.cells.clear();
                    known.complete = true;
                    disk.push(DiskChange::Reset {
                        collection,
                        key,
                        cleared: true,
                    });
                }
            }
            slots.known.insert(slot, known);
        }
        slots.on_disk(|tier| tier.apply(&disk));
    }

    /// A commit of `writes` may have landed in part, or land later: what it
    /// touched is no longer known, and no absence is kept for it.
    pub(crate) fn forget(&self, writes: &[StateWrite]) {
        let mut slots = self.lock();
        slots.generation += 1;
        let mut disk = Vec::with_capacity(writes.len());
        for write in writes {
            let slot = (Arc::clone(&write.collection), write.key.clone());
            slots.known.remove(&slot);
            disk.push(DiskChange::Reset {
                collection: &write.collection,
                key: &write.key,
                cleared: false,
            });
            slots.unsure.insert(slot, ());
            slots.unsure_added += 1;
        }
        slots.on_disk(|tier| tier.apply(&disk));
    }
}

#[cfg(test)]
mod tests {
    use super::{OwnerCache, Seen};
    use bytes::Bytes;
    use prosody_core::key::Key;
    use prosody_core::store::{StateChange, StateWrite};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    fn write(change: StateChange, ttl: Option<Duration>) -> StateWrite {
        StateWrite {
            collection: Arc::from("c"),
            key: Key::from("k"),
            change,
            ttl,
        }
    }

    /// The cache answers what the owner's landed writes left, absences it
    /// read, and nothing for a commit that may have landed in part; a cell
    /// near or past its expiry is left to the store.
    #[tokio::test(start_paused = true)]
    async fn answers_follow_landed_writes() {
        let cache = OwnerCache::default();
        let k = Key::from("k");
        assert_eq!(cache.get("c", &k, b"a"), Seen::Unknown, "nothing known");
        cache.absent("c", &k, b"a", cache.generation());
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Known(None),
            "a read absence"
        );
        let put = |item: &'static [u8], value: &'static [u8]| StateChange::Put {
            item: Bytes::from_static(item),
            value: Bytes::from_static(value),
        };
        let ttl = Some(Duration::from_secs(60));
        let sent = Instant::now();
        cache.landed(
            &[write(put(b"a", b"1"), None), write(put(b"b", b"2"), ttl)],
            sent,
        );
        let one = Seen::Known(Some(Bytes::from_static(b"1")));
        assert_eq!(cache.get("c", &k, b"a"), one);
        assert_eq!(
            cache.get("c", &k, b"x"),
            Seen::Unknown,
            "an item never seen"
        );
        tokio::time::advance(Duration::from_secs(56)).await;
        assert_eq!(
            cache.get("c", &k, b"b"),
            Seen::Unknown,
            "near its TTL: the store's"
        );
        cache.landed(&[write(StateChange::Clear, None)], Instant::now());
        assert_eq!(
            cache.get("c", &k, b"x"),
            Seen::Known(None),
            "after a clear, every item"
        );
        cache.forget(&[write(put(b"a", b"3"), None)]);
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Unknown,
            "after an unsure commit"
        );
        cache.absent("c", &k, b"a", cache.generation());
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Unknown,
            "an unsure commit may land yet"
        );
        let j = Key::from("j");
        let before = cache.generation();
        cache.landed(&[write(put(b"z", b"1"), None)], Instant::now());
        cache.absent("c", &j, b"a", before);
        assert_eq!(
            cache.get("c", &j, b"a"),
            Seen::Unknown,
            "read across a commit"
        );
    }
}
