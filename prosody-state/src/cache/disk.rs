//! The owner cache's disk tier: what a client's partition owners know of
//! their cells, in a directory of the client's own, so the cache can hold
//! far more than memory does.
//!
//! Never a source of truth: the directory is locked by one live client
//! and emptied when it opens, each partition gets a keyspace of its own
//! when it is taken, and the keyspace is deleted when the partition goes
//! (revoked, or the client closed). So nothing a stale directory or an
//! earlier ownership held is ever served.

use fjall::{Database, KeyspaceCreateOptions};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

mod tier;

pub(crate) use tier::{DiskChange, DiskTier};

/// The journal's bound: unflushed writes, in memory, at most this much.
const JOURNAL: u64 = 64 << 20;

/// Each partition's memtable: small, since the engine's in-memory
/// versions take several times their bytes (8 MiB ones cost 200 MiB of
/// RSS over 8 partitions in the counter benchmark).
const MEMTABLE: u64 = 1 << 20;

/// A disk cache that could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// Another live client holds the directory.
    #[error("state_cache_dir {0} is in use by another live client: give each client its own")]
    InUse(PathBuf),
    /// The directory could not be made, emptied or opened.
    #[error("state_cache_dir {dir}: {reason}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// A client's disk cache of state cells: one directory, locked while the
/// client lives.
///
/// Invariant: only this client writes the directory's database, and the
/// database starts empty at every open.
pub struct StateCache {
    db: Database,
    next: AtomicU64,
    /// Held for the client's life: the directory's lock.
    _lock: File,
    /// A directory of the client's own making: dropped last, after the
    /// database removed its files, it removes the rest.
    #[allow(dead_code, reason = "held for its drop")]
    owned: Option<Owned>,
}

/// What the lock is taken on: the directory itself where it can be opened
/// as a file (so no cleaner can remove the lock from under a live client),
/// else a file in it.
fn lock_file(dir: &Path) -> std::io::Result<File> {
    if cfg!(unix) {
        File::open(dir)
    } else {
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
    }
}

/// A directory this cache made, removed when it goes.
struct Owned(PathBuf);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.join("lock"));
        let _ = std::fs::remove_dir(&self.0);
    }
}

impl std::fmt::Debug for StateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache").finish_non_exhaustive()
    }
}

impl StateCache {
    /// Opens the cache in `dir` (a temporary directory of its own when
    /// `None`), with a block cache of `memory` bytes (fjall's 32 MiB when
    /// `None`).
    ///
    /// # Errors
    ///
    /// [`CacheError::InUse`] when another live client holds `dir`, and
    /// [`CacheError::Io`] when it cannot be made, emptied or opened.
    pub fn open(dir: Option<&Path>, memory: Option<u64>) -> Result<Self, CacheError> {
        let (dir, owned) = if let Some(dir) = dir {
            (dir.to_path_buf(), None)
        } else {
            static MADE: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "prosody-state-{}-{}-{}",
                std::process::id(),
                prosody_core::clock::now().as_millis(),
                MADE.fetch_add(1, Ordering::Relaxed)
            ));
            (dir.clone(), Some(Owned(dir)))
        };
        let io = |reason: std::io::Error| CacheError::Io {
            dir: dir.clone(),
            reason: reason.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let lock = lock_file(&dir).map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(CacheError::InUse(dir)),
            Err(TryLockError::Error(error)) => return Err(io(error)),
        }
        // A directory left by an earlier client holds nothing to trust.
        let cells = dir.join("cells");
        match std::fs::remove_dir_all(&cells) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(io(error)),
            _ => {}
        }
        // Recent writes are flushed once 64 MiB of them are journaled, so
        // memory holds at most that besides the block cache.
        let mut builder = Database::builder(&cells)
            .temporary(true)
            .max_journaling_size(JOURNAL);
        if let Some(bytes) = memory {
            builder = builder.cache_size(bytes);
        }
        let db = builder.open().map_err(|error| CacheError::Io {
            dir: dir.clone(),
            reason: error.to_string(),
        })?;
        Ok(Self {
            db,
            next: AtomicU64::new(0),
            _lock: lock,
            owned,
        })
    }

    /// A new, empty tier for one partition's ownership. It holds the
    /// cache, so the directory stays locked while any tier lives.
    pub(crate) fn partition(self: &Arc<Self>) -> Result<DiskTier, fjall::Error> {
        let name = format!("p{}", self.next.fetch_add(1, Ordering::Relaxed));
        let keyspace = self.db.keyspace(&name, || {
            KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE)
        })?;
        Ok(DiskTier::new(Arc::clone(self), keyspace))
    }
}

#[cfg(test)]
mod tests {
    use super::{CacheError, StateCache};
    use crate::cache::owner::OwnerCache;
    use bytes::Bytes;
    use proptest::prelude::*;
    use prosody_core::key::Key;
    use prosody_core::store::{StateChange, StateWrite};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    fn dir(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "prosody-disk-test-{name}-{}-{}",
            std::process::id(),
            prosody_core::clock::now().as_millis()
        ))
    }

    /// A directory serves one live client; a stale one is emptied when
    /// the next client opens it; a partition's keyspace goes with it.
    #[test]
    fn a_directory_is_locked_emptied_and_cleaned() {
        let dir = dir("lock");
        let first = Arc::new(StateCache::open(Some(&dir), Some(1 << 20)).unwrap());
        let second = StateCache::open(Some(&dir), None);
        assert!(matches!(second, Err(CacheError::InUse(_))), "{second:?}");
        let tier = first.partition().unwrap();
        assert_eq!(first.db.keyspace_count(), 1);
        drop(tier);
        assert_eq!(first.db.keyspace_count(), 0);
        drop(first);
        std::fs::create_dir_all(dir.join("cells")).unwrap();
        std::fs::write(dir.join("cells").join("stale"), b"old").unwrap();
        let again = StateCache::open(Some(&dir), None).unwrap();
        assert!(!dir.join("cells").join("stale").exists());
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A row key longer than the engine takes is an error (which drops
    /// the tier), never a panic.
    #[test]
    fn a_cell_too_long_for_the_engine_is_refused() {
        let cache = Arc::new(StateCache::open(None, None).unwrap());
        let tier = cache.partition().unwrap();
        let key = Key::from("k");
        let item = vec![b'i'; 70_000];
        let put = super::DiskChange::Put {
            collection: "c",
            key: &key,
            item: &item,
            value: b"v",
            expiry: None,
        };
        assert!(tier.apply(&[put]).is_err());
        assert!(tier.get("c", &key, &item, Duration::ZERO).is_err());
    }

    /// A cache of its own leaves no directory behind.
    #[test]
    fn a_temporary_cache_removes_its_directory() {
        let cache = StateCache::open(None, None).unwrap();
        let owned = cache.owned.as_ref().unwrap().0.clone();
        assert!(owned.exists());
        drop(cache);
        assert!(!owned.exists(), "{owned:?}");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Put(u8, u8, u8, Option<u8>),
        Delete(u8, u8),
        Clear(u8),
        Forget(u8),
        Absent(u8, u8, bool),
        Advance(u8),
        Get(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u8, 0..4u8, any::<u8>(), proptest::option::of(1..20u8))
                .prop_map(|(s, i, v, t)| Op::Put(s, i, v, t)),
            (0..3u8, 0..4u8).prop_map(|(s, i)| Op::Delete(s, i)),
            (0..3u8).prop_map(Op::Clear),
            (0..3u8).prop_map(Op::Forget),
            (0..3u8, 0..4u8, any::<bool>()).prop_map(|(s, i, stale)| Op::Absent(s, i, stale)),
            (1..10u8).prop_map(Op::Advance),
            (0..3u8, 0..4u8).prop_map(|(s, i)| Op::Get(s, i)),
            (0..3u8, 0..4u8).prop_map(|(s, i)| Op::Get(s, i)),
        ]
    }

    fn write(slot: u8, change: StateChange, ttl: Option<u8>) -> StateWrite {
        StateWrite {
            collection: Arc::from(["a", "b"][usize::from(slot % 2)]),
            key: Key::from(if slot < 2 { "k" } else { "j" }),
            change,
            ttl: ttl.map(|t| Duration::from_secs(u64::from(t))),
        }
    }

    fn item(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A cache that keeps two cells in memory and the rest on disk
        /// answers every read as one that keeps everything in memory.
        #[test]
        fn the_disk_tier_answers_as_memory_would(ops in proptest::collection::vec(op(), 1..60)) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let reference = OwnerCache::with_capacity(u64::MAX >> 1, None);
                let cache = Arc::new(StateCache::open(None, None).unwrap());
                let tiered = OwnerCache::with_capacity(2, Some(cache.partition().unwrap()));
                for (step, op) in ops.iter().enumerate() {
                    let landed = |writes: &[StateWrite]| {
                        let sent = Instant::now();
                        reference.landed(writes, sent);
                        tiered.landed(writes, sent);
                    };
                    match op.clone() {
                        Op::Put(s, i, v, ttl) => landed(&[write(s, StateChange::Put { item: item(i), value: Bytes::from(vec![v]) }, ttl)]),
                        Op::Delete(s, i) => landed(&[write(s, StateChange::Delete { item: item(i) }, None)]),
                        Op::Clear(s) => landed(&[write(s, StateChange::Clear, None)]),
                        Op::Forget(s) => {
                            let writes = [write(s, StateChange::Clear, None)];
                            reference.forget(&writes);
                            tiered.forget(&writes);
                        }
                        Op::Absent(s, i, stale) => {
                            let w = write(s, StateChange::Clear, None);
                            for cache in [&reference, &tiered] {
                                let generation = cache.generation() + u64::from(stale);
                                cache.absent(&w.collection, &w.key, &item(i), generation);
                            }
                        }
                        Op::Advance(secs) => tokio::time::advance(Duration::from_secs(u64::from(secs))).await,
                        Op::Get(s, i) => {
                            let w = write(s, StateChange::Clear, None);
                            let expected = reference.get(&w.collection, &w.key, &item(i));
                            let got = tiered.get(&w.collection, &w.key, &item(i));
                            prop_assert_eq!(got, expected, "step {} {:?}", step, op);
                        }
                    }
                }
                Ok(())
            })?;
        }
    }
}
