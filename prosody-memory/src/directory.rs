//! An in-memory [`PeerDirectory`] on tokio's clock: leased peers and
//! publications.

use crate::MemoryStores;
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::{PeerDirectory, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// When a lease runs out; `Never` for a ttl past the clock's range.
///
/// Invariant: ordered so that every `At` comes before `Never`, and `At`s
/// by their instant: the order in which leases run out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Deadline {
    At(Instant),
    Never,
}

impl Deadline {
    fn after(now: Instant, ttl: Duration) -> Self {
        now.checked_add(ttl).map_or(Self::Never, Self::At)
    }

    /// A lease runs strictly before its deadline.
    fn is_past(self, now: Instant) -> bool {
        match self {
            Self::At(at) => now >= at,
            Self::Never => false,
        }
    }
}

/// The registered peers and their leases.
///
/// Invariant: `deadlines` holds exactly one pair `(deadline, peer)` for
/// each entry of `leases`, with that entry's deadline, and nothing else; so
/// its first pair is the lease that runs out first.
///
/// Removal path (what keeps memory bounded by live leases): every call
/// (register, lookup, deregister) first sweeps, removing every lease
/// whose deadline has passed, from the front of `deadlines`; a
/// registration replaces the peer's lease and pair, and a deregistration
/// removes them. So after any call the directory holds only running
/// leases, and between calls it holds at most the leases that ran at the
/// last one.
#[derive(Debug, Default)]
struct Leases {
    leases: HashMap<PeerId, (Deadline, PeerEntry), foldhash::fast::RandomState>,
    deadlines: BTreeSet<(Deadline, PeerId)>,
}

/// What the directory holds, under one lock: the leases, and the
/// publications beside them.
///
/// Removal path of the publications: none is needed. There is one per
/// (subsystem, collection) pair ever published, replaced by each later
/// `publish` of the pair and never removed (a publication has no lease),
/// so they are bounded by the number of pairs published.
#[derive(Debug, Default)]
struct Directory {
    leases: Leases,
    publications: HashMap<(String, String), Publication, foldhash::fast::RandomState>,
}

impl Leases {
    /// Removes every lease that has run out by `now`: each step pops the
    /// first pair, so a sweep costs a logarithm per lease removed.
    fn sweep(&mut self, now: Instant) {
        while let Some(&(deadline, peer)) = self.deadlines.first() {
            if !deadline.is_past(now) {
                break;
            }
            self.deadlines.pop_first();
            self.leases.remove(&peer);
        }
    }

    fn register(&mut self, peer: PeerId, entry: PeerEntry, ttl: Duration, now: Instant) {
        self.sweep(now);
        let deadline = Deadline::after(now, ttl);
        if let Some((old, _)) = self.leases.insert(peer, (deadline, entry)) {
            self.deadlines.remove(&(old, peer));
        }
        self.deadlines.insert((deadline, peer));
    }

    fn lookup(&mut self, peer: PeerId, now: Instant) -> Option<PeerEntry> {
        self.sweep(now);
        self.leases.get(&peer).map(|(_, entry)| entry.clone())
    }

    fn deregister(&mut self, peer: PeerId, now: Instant) {
        self.sweep(now);
        if let Some((deadline, _)) = self.leases.remove(&peer) {
            self.deadlines.remove(&(deadline, peer));
        }
    }
}

/// A peer directory in memory; clones share the same peers.
///
/// Invariant: `lookup` finds a peer's entry exactly while its last
/// registration's lease runs (strictly before `ttl` after it, on tokio's
/// clock) and it has not deregistered since. Leases run out on tokio's
/// clock, so under a paused clock advancing time ends them. Memory holds
/// the leases that ran at the last call and no more: every call first
/// removes the leases that have run out (the removal path on the
/// internal `Leases` type). Publications are kept until replaced (no
/// lease, as the contract says): one per (subsystem, collection) pair
/// published, so their memory is bounded by the number of pairs.
///
/// [`MemoryStores`](crate::MemoryStores) holds one, shared by its clones
/// as a real directory is shared by every group; those stores pass the
/// shared conformance suite (`prosody_conformance::store::directory`, see
/// `tests/suite/directory.rs`).
#[derive(Clone, Debug, Default)]
pub struct MemoryPeerDirectory {
    directory: Arc<Mutex<Directory>>,
}

impl MemoryPeerDirectory {
    /// An empty directory.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks the leases and publications. Nothing panics while holding
    /// the lock, so a poisoned lock still guards a consistent directory
    /// and is recovered.
    fn lock(&self) -> MutexGuard<'_, Directory> {
        self.directory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many leases the directory holds, running or run out but not
    /// yet removed: what its memory is proportional to.
    #[must_use]
    pub fn stored_leases(&self) -> usize {
        self.lock().leases.leases.len()
    }

    /// How many publications the directory holds: one per (subsystem,
    /// collection) pair ever published.
    #[must_use]
    pub fn stored_publications(&self) -> usize {
        self.lock().publications.len()
    }
}

impl PeerDirectory for MemoryPeerDirectory {
    /// Never fails.
    fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.lock()
            .leases
            .register(peer, entry.clone(), ttl, Instant::now());
        ready(Ok(()))
    }

    /// Never fails.
    fn lookup(
        &self,
        peer: PeerId,
    ) -> impl Future<Output = Result<Option<PeerEntry>, StoreError>> + Send {
        ready(Ok(self.lock().leases.lookup(peer, Instant::now())))
    }

    /// Never fails.
    fn deregister(&self, peer: PeerId) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.lock().leases.deregister(peer, Instant::now());
        ready(Ok(()))
    }

    /// Never fails.
    fn publish(
        &self,
        publication: &Publication,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let pair = (
            publication.subsystem.clone(),
            publication.collection.clone(),
        );
        self.lock().publications.insert(pair, publication.clone());
        ready(Ok(()))
    }

    /// Never fails.
    fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> impl Future<Output = Result<Option<Publication>, StoreError>> + Send {
        let pair = (subsystem.to_owned(), collection.to_owned());
        ready(Ok(self.lock().publications.get(&pair).cloned()))
    }
}

/// The directory the stores hold ([`MemoryStores::peers`]), shared by
/// their clones.
impl PeerDirectory for MemoryStores {
    fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.peers().register(peer, entry, ttl)
    }

    fn lookup(
        &self,
        peer: PeerId,
    ) -> impl Future<Output = Result<Option<PeerEntry>, StoreError>> + Send {
        self.peers().lookup(peer)
    }

    fn deregister(&self, peer: PeerId) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.peers().deregister(peer)
    }

    fn publish(
        &self,
        publication: &Publication,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.peers().publish(publication)
    }

    fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> impl Future<Output = Result<Option<Publication>, StoreError>> + Send {
        self.peers().publication(subsystem, collection)
    }
}

#[cfg(test)]
mod tests {
    use super::Leases;
    use prosody_contracts::peer::{PeerEntry, PeerId};
    use std::time::Duration;
    use tokio::time::Instant;

    fn entry() -> PeerEntry {
        PeerEntry {
            address: "a:1".into(),
            network: None,
            advertised: None,
        }
    }

    /// Renewals replace a peer's pair, so the index never outgrows the
    /// leases, whatever the order of deadlines.
    #[test]
    fn renewals_keep_one_pair_per_lease() {
        let mut leases = Leases::default();
        let now = Instant::now();
        for n in 0..1000u64 {
            let peer = PeerId::from_bytes([u8::try_from(n % 7).unwrap(); 16]);
            let ttl = Duration::from_secs(1 + (n * 37) % 100);
            leases.register(peer, entry(), ttl, now);
            assert_eq!(leases.deadlines.len(), leases.leases.len());
        }
        assert_eq!(leases.leases.len(), 7);
        for (peer, (deadline, _)) in &leases.leases {
            assert!(leases.deadlines.contains(&(*deadline, *peer)));
        }
        // A ttl past the clock's range never runs out, and sorts last.
        let forever = PeerId::from_bytes([9; 16]);
        leases.register(forever, entry(), Duration::MAX, now);
        leases.sweep(now + Duration::from_secs(10_000));
        assert_eq!(leases.leases.len(), 1);
        assert_eq!(leases.lookup(forever, now), Some(entry()));
    }
}
