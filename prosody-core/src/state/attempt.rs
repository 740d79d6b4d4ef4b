//! One attempt's view of its key's state: the store under the attempt's
//! pending changes.

use super::overlay::{Pending, Seen, merge};
use super::{APPLIED, Registry, Spec, StateError};
use crate::access::PartitionStores;
use crate::event::{Encoded, Message};
use crate::key::Key;
use crate::store::{Batch, Direction, ItemRange, StateChange, StateWrite};
use bytes::Bytes;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The state of one attempt at one key's event.
///
/// Invariant: pending changes reach the store only by
/// [`Slot::commit`] while the attempt runs, or by [`AttemptState::seal`]
/// once its handler returned; after the seal every operation fails with
/// [`StateError::AttemptEnded`], so a context kept past its handler can
/// neither read nor write. Each attempt has its own (`fresh`), so a retry
/// never sees a failed attempt's changes.
pub(crate) struct AttemptState {
    access: Arc<PartitionStores>,
    registry: Arc<Registry>,
    key: Key,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sealed: bool,
    /// Whether the attempt changed any state (committed or pending).
    wrote: bool,
    /// Whether it cleared every collection (an excise).
    cleared_all: bool,
    pending: Vec<(Spec, Pending)>,
}

impl Inner {
    fn pending(&mut self, spec: &Spec) -> &mut Pending {
        let at = self.pending.iter().position(|(seen, _)| seen == spec);
        let at = at.unwrap_or_else(|| {
            self.pending.push((*spec, Pending::default()));
            self.pending.len() - 1
        });
        &mut self.pending[at].1
    }
}

impl std::fmt::Debug for AttemptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptState")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// What an attempt leaves to write once its handler succeeded.
#[derive(Debug, Default)]
pub(crate) struct Sealed {
    /// The `read_uncommitted` collections' changes: written first.
    pub(crate) uncommitted: Vec<StateWrite>,
    /// The other collections' changes: written with the attempt's batch.
    pub(crate) transactional: Vec<StateWrite>,
    /// Whether the attempt changed any state.
    pub(crate) wrote: bool,
    /// Whether the attempt cleared every collection of the key (an
    /// excise): the markers go too, so nothing of the key stays.
    pub(crate) forget: bool,
}

impl AttemptState {
    pub(crate) fn new(
        access: Arc<PartitionStores>,
        registry: Arc<Registry>,
        key: Key,
    ) -> Arc<Self> {
        Arc::new(Self {
            access,
            registry,
            key,
            inner: Mutex::default(),
        })
    }

    /// The same key's state for a new attempt: nothing pending.
    pub(crate) fn fresh(&self) -> Arc<Self> {
        Self::new(
            Arc::clone(&self.access),
            Arc::clone(&self.registry),
            self.key.clone(),
        )
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding it: a poisoned state is consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds a collection of the key.
    pub(crate) fn slot(&self, spec: &Spec) -> Result<Slot<'_>, StateError> {
        self.registry.check(spec)?;
        if self.lock().sealed {
            return Err(StateError::AttemptEnded {
                collection: spec.name,
            });
        }
        Ok(Slot {
            attempt: self,
            spec: *spec,
        })
    }

    /// Stages a clear of every registered collection of the key.
    pub(crate) fn clear_all(&self) -> Result<(), StateError> {
        let mut inner = self.lock();
        if inner.sealed {
            return Err(StateError::AttemptEnded {
                collection: "(every collection)",
            });
        }
        for spec in self.registry.specs() {
            inner.pending(spec).clear();
        }
        inner.wrote = true;
        inner.cleared_all = true;
        Ok(())
    }

    /// What the key's marker of `event`'s kind holds: the offset of its
    /// last applied record, or the time of its last applied timer.
    pub(crate) async fn applied(&self, event: Marker) -> Result<Option<i64>, StateError> {
        let stored = self.access.cell(APPLIED, &self.key, event.item()).await?;
        match stored.map(|bytes| <[u8; 8]>::try_from(bytes.as_ref())) {
            None => Ok(None),
            Some(Ok(bytes)) => Ok(Some(i64::from_be_bytes(bytes))),
            Some(Err(_)) => Err(StateError::Malformed {
                collection: "(applied marker)",
                reason: "an applied marker is not 8 bytes",
            }),
        }
    }

    /// The writes that mark `event` applied, or remove both markers when
    /// the attempt forgot the key. A marker lives as long as the
    /// longest-lived registered collection (for ever if one has no TTL),
    /// whichever the record changed.
    pub(crate) fn markers(&self, event: Marker, sealed: &Sealed) -> Vec<StateWrite> {
        let write = |change| StateWrite {
            collection: Arc::from(APPLIED),
            key: self.key.clone(),
            change,
            ttl: self.registry.marker_ttl(),
        };
        if sealed.forget {
            return [Marker::Record(0), Marker::Timer(0)]
                .map(|marker| {
                    write(StateChange::Delete {
                        item: Bytes::from_static(marker.item()),
                    })
                })
                .into();
        }
        let value = match event {
            Marker::Record(at) | Marker::Timer(at) => at,
        };
        vec![write(StateChange::Put {
            item: Bytes::from_static(event.item()),
            value: Bytes::copy_from_slice(&value.to_be_bytes()),
        })]
    }

    /// Ends the attempt: takes what is pending, and refuses every later
    /// operation.
    pub(crate) fn seal(&self) -> Sealed {
        let mut inner = self.lock();
        inner.sealed = true;
        let mut sealed = Sealed {
            wrote: inner.wrote,
            forget: inner.cleared_all,
            ..Sealed::default()
        };
        for (spec, pending) in std::mem::take(&mut inner.pending) {
            let writes = pending.writes(&Arc::from(spec.name), &self.key, spec.ttl);
            if spec.read_uncommitted {
                sealed.uncommitted.extend(writes);
            } else {
                sealed.transactional.extend(writes);
            }
        }
        sealed
    }
}

/// What an applied marker marks: a record at its offset, or a timer at
/// its time (milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    Record(i64),
    Timer(i64),
}

impl Marker {
    /// The marker's item in the key's marker cells.
    fn item(self) -> &'static [u8] {
        match self {
            Self::Record(_) => b"",
            Self::Timer(_) => b"t",
        }
    }
}

/// Seals an attempt's state when dropped: however its call ends (an
/// error, a panic, a deadline), nothing pending is written later.
pub(crate) struct StateGuard(pub(crate) Option<Arc<AttemptState>>);

impl Drop for StateGuard {
    fn drop(&mut self) {
        if let Some(state) = &self.0 {
            state.seal();
        }
    }
}

/// A page of an ordered read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The items, in the read's direction.
    pub items: Vec<(Bytes, Bytes)>,
    /// The rest of the range, if the store had more.
    pub next: Option<ItemRange>,
}

/// One collection of one key, bound for one attempt: bytes in, bytes out.
/// `prosody-state` builds the typed handles on it.
///
/// Invariant: a read sees the store under the attempt's pending changes
/// (its own writes); writes stay pending until the attempt succeeds or
/// [`Slot::commit`] writes them.
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a> {
    attempt: &'a AttemptState,
    spec: Spec,
}

impl<'a> Slot<'a> {
    /// The collection's spec.
    #[must_use]
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &'a Key {
        &self.attempt.key
    }

    fn with_pending<R>(&self, f: impl FnOnce(&mut Pending) -> R) -> Result<R, StateError> {
        let mut inner = self.attempt.lock();
        if inner.sealed {
            return Err(StateError::AttemptEnded {
                collection: self.spec.name,
            });
        }
        Ok(f(inner.pending(&self.spec)))
    }

    /// The message a cell of this (message) collection names, read back
    /// from the log.
    ///
    /// # Errors
    ///
    /// [`StateError::MessageGone`] when the log no longer holds it (it will
    /// not come back), [`StateError::MessageRead`] when the read failed,
    /// and [`StateError::Malformed`] for a cell that names no message.
    pub async fn message(&self, cell: &[u8]) -> Result<Message<Encoded>, StateError> {
        let reader = self
            .attempt
            .registry
            .reader()
            .ok_or(StateError::Unreadable {
                collection: self.spec.name,
            })?;
        reader.message(self.spec.name, cell).await
    }

    /// The value of `item`.
    pub async fn get(&self, item: &[u8]) -> Result<Option<Bytes>, StateError> {
        match self.with_pending(|pending| pending.seen(item))? {
            Seen::Known(value) => Ok(value),
            Seen::Unknown => Ok(self
                .attempt
                .access
                .cell(self.spec.name, self.key(), item)
                .await?),
        }
    }

    /// The first items of `range` in `direction`: at least `limit` of them
    /// when there are (some pending ones may add to them), and where to go
    /// on.
    pub async fn page(
        &self,
        range: ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Page, StateError> {
        let limit = limit.max(1);
        let (cleared, pending) =
            self.with_pending(|pending| (pending.cleared, pending.range(&range, direction)))?;
        let stored = if cleared {
            Vec::new()
        } else {
            self.attempt
                .access
                .cells(self.spec.name, self.key(), &range, direction, limit)
                .await?
        };
        // A full page covers the range only as far as its last item.
        let edge = (stored.len() >= limit)
            .then(|| stored.last().map(|(item, _)| item.clone()))
            .flatten();
        let pending = pending
            .into_iter()
            .filter(|(item, _)| match (&edge, direction) {
                (None, _) => true,
                (Some(edge), Direction::Forward) => item <= edge,
                (Some(edge), Direction::Backward) => item >= edge,
            })
            .collect();
        let next = edge.map(|edge| match direction {
            Direction::Forward => {
                let mut after = edge.to_vec();
                after.push(0);
                ItemRange {
                    from: Bytes::from(after),
                    until: range.until.clone(),
                }
            }
            Direction::Backward => ItemRange {
                from: range.from.clone(),
                until: Some(edge),
            },
        });
        Ok(Page {
            items: merge(stored, pending, direction),
            next,
        })
    }

    /// Sets `item` to `value`.
    pub fn put(&self, item: Bytes, value: Bytes) -> Result<(), StateError> {
        self.change(|pending| pending.put(item, Some(value)))
    }

    /// Removes `item`.
    pub fn delete(&self, item: Bytes) -> Result<(), StateError> {
        self.change(|pending| pending.put(item, None))
    }

    /// Removes every item.
    pub fn clear(&self) -> Result<(), StateError> {
        self.change(Pending::clear)
    }

    fn change(&self, f: impl FnOnce(&mut Pending)) -> Result<(), StateError> {
        let mut inner = self.attempt.lock();
        if inner.sealed {
            return Err(StateError::AttemptEnded {
                collection: self.spec.name,
            });
        }
        inner.wrote = true;
        f(inner.pending(&self.spec));
        Ok(())
    }

    /// Writes the collection's pending changes now: a later failure of the
    /// attempt does not undo them. If the write fails, they stay pending.
    pub async fn commit(&self) -> Result<(), StateError> {
        let taken = self.with_pending(std::mem::take)?;
        let writes = taken
            .clone()
            .writes(&Arc::from(self.spec.name), self.key(), self.spec.ttl);
        if writes.is_empty() {
            return Ok(());
        }
        let batch = Batch {
            state: writes,
            ..Batch::default()
        };
        if let Err(error) = self.attempt.access.commit(batch).await {
            // Changes made meanwhile are newer: they stay on top.
            let mut inner = self.attempt.lock();
            let pending = inner.pending(&self.spec);
            *pending = std::mem::take(pending).over(taken);
            return Err(error.into());
        }
        Ok(())
    }

    /// Drops the collection's changes since its last commit.
    pub fn rollback(&self) -> Result<(), StateError> {
        self.with_pending(|pending| *pending = Pending::default())
    }
}
