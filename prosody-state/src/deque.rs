//! A sequence per key, pushed and popped at both ends.

use crate::codec::{Encoding, Json};
use crate::scan::scan;
use bytes::Bytes;
use futures_util::Stream;
use futures_util::stream::{self, StreamExt};
use prosody_core::state::{Slot, StateError};
use prosody_core::store::{Direction, ItemRange};
use std::marker::PhantomData;

/// The deque of one key as stored: slots `head..tail`, each an item named
/// by its position in an order-preserving encoding, and the bounds under
/// the empty item.
///
/// Invariant: `head <= tail`; an empty deque stores nothing (its last pop
/// clears it). A slot whose cell expired (its TTL passed since it was
/// pushed) reads as absent: pops, peeks and scans pass over it (a pop
/// moves the bound past it with one read), and [`DequeState::len`] still
/// counts it until a pop passes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bounds {
    head: i64,
    tail: i64,
}

/// The item of position `at`: its bytes sort as the positions do.
pub(crate) fn slot_item(at: i64) -> Bytes {
    Bytes::copy_from_slice(&(at.cast_unsigned() ^ (1 << 63)).to_be_bytes())
}

/// The position of a slot's item.
fn slot_at(item: &[u8]) -> Option<i64> {
    let bytes = <[u8; 8]>::try_from(item).ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)).cast_signed())
}

/// The deque of one key of one collection, for one attempt: items `T`
/// stored as `E` ([`Json`], or [`Messages`](crate::Messages) for
/// messages).
///
/// Invariant: reads see the committed deque under this attempt's pushes
/// and pops; with a capacity, a push never leaves more than that many
/// slots.
#[derive(Debug)]
pub struct DequeState<'a, T, E = Json> {
    slot: Slot<'a>,
    _item: PhantomData<fn() -> (T, E)>,
}

impl<T, E> Clone for DequeState<'_, T, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E> Copy for DequeState<'_, T, E> {}

impl<'a, T: Send + Sync + 'a, E: Encoding<T>> DequeState<'a, T, E> {
    pub(crate) fn new(slot: Slot<'a>) -> Self {
        Self {
            slot,
            _item: PhantomData,
        }
    }

    fn name(&self) -> &'static str {
        self.slot.spec().name
    }

    async fn bounds(&self) -> Result<Bounds, StateError> {
        let Some(bytes) = self.slot.get(&[]).await? else {
            return Ok(Bounds::default());
        };
        let malformed = StateError::Malformed {
            collection: self.name(),
            reason: "a deque's bounds are not 16 bytes",
        };
        let (head, tail) = bytes.split_at_checked(8).ok_or(malformed)?;
        let read = |half: &[u8]| <[u8; 8]>::try_from(half).map(i64::from_be_bytes);
        match (read(head), read(tail)) {
            (Ok(head), Ok(tail)) if head <= tail => Ok(Bounds { head, tail }),
            _ => Err(StateError::Malformed {
                collection: self.name(),
                reason: "a deque's bounds are not 16 bytes of head <= tail",
            }),
        }
    }

    fn set_bounds(&self, bounds: Bounds) -> Result<(), StateError> {
        if bounds.head == bounds.tail {
            return self.slot.clear();
        }
        let mut bytes = Vec::with_capacity(16);
        bytes.extend_from_slice(&bounds.head.to_be_bytes());
        bytes.extend_from_slice(&bounds.tail.to_be_bytes());
        self.slot.put(Bytes::new(), Bytes::from(bytes))
    }

    fn over_capacity(&self, bounds: Bounds) -> bool {
        self.slot
            .spec()
            .capacity
            .is_some_and(|capacity| bounds.tail.abs_diff(bounds.head) > capacity)
    }

    /// Adds `item` at the back; past the capacity, the front item drops.
    pub async fn push_back(&self, item: &T) -> Result<(), StateError> {
        let bytes = E::encode(self.name(), item)?;
        let mut bounds = self.bounds().await?;
        self.slot.put(slot_item(bounds.tail), bytes)?;
        bounds.tail += 1;
        while self.over_capacity(bounds) {
            self.slot.delete(slot_item(bounds.head))?;
            bounds.head += 1;
        }
        self.set_bounds(bounds)
    }

    /// Adds `item` at the front; past the capacity, the back item drops.
    pub async fn push_front(&self, item: &T) -> Result<(), StateError> {
        let bytes = E::encode(self.name(), item)?;
        let mut bounds = self.bounds().await?;
        bounds.head -= 1;
        self.slot.put(slot_item(bounds.head), bytes)?;
        while self.over_capacity(bounds) {
            bounds.tail -= 1;
            self.slot.delete(slot_item(bounds.tail))?;
        }
        self.set_bounds(bounds)
    }

    /// Removes and returns the front item. For a message that the log no
    /// longer holds the error is [`StateError::MessageGone`], and the item
    /// is removed all the same: a handler that goes on past the error
    /// (instead of failing with it) has skipped it.
    pub async fn pop_front(&self) -> Result<Option<T>, StateError> {
        self.pop(Direction::Forward).await
    }

    /// Removes and returns the back item, as [`pop_front`](Self::pop_front)
    /// does at the front.
    pub async fn pop_back(&self) -> Result<Option<T>, StateError> {
        self.pop(Direction::Backward).await
    }

    /// Removes the first live item from one end: one read finds it, past
    /// any expired slots, and the bound moves past it.
    async fn pop(&self, direction: Direction) -> Result<Option<T>, StateError> {
        let mut bounds = self.bounds().await?;
        let page = self.slot.page(Self::range(bounds), direction, 1).await?;
        let found = page.items.into_iter().next();
        match &found {
            Some((item, _)) => {
                let at = slot_at(item).ok_or(StateError::Malformed {
                    collection: self.name(),
                    reason: "a deque slot's item is not 8 bytes",
                })?;
                self.slot.delete(item.clone())?;
                match direction {
                    Direction::Forward => bounds.head = at + 1,
                    Direction::Backward => bounds.tail = at,
                }
            }
            // Only expired slots, if any: the deque is empty.
            None => bounds.head = bounds.tail,
        }
        self.set_bounds(bounds)?;
        match found {
            Some((_, cell)) => E::decode(self.slot, cell).await.map(Some),
            None => Ok(None),
        }
    }

    async fn peek(&self, direction: Direction) -> Result<Option<T>, StateError> {
        let range = Self::range(self.bounds().await?);
        let page = self.slot.page(range, direction, 1).await?;
        match page.items.into_iter().next() {
            Some((_, cell)) => E::decode(self.slot, cell).await.map(Some),
            None => Ok(None),
        }
    }

    /// The front item.
    pub async fn peek_front(&self) -> Result<Option<T>, StateError> {
        self.peek(Direction::Forward).await
    }

    /// The back item.
    pub async fn peek_back(&self) -> Result<Option<T>, StateError> {
        self.peek(Direction::Backward).await
    }

    /// The item `index` places from the front.
    pub async fn get(&self, index: u64) -> Result<Option<T>, StateError> {
        let bounds = self.bounds().await?;
        let Some(at) = i64::try_from(index)
            .ok()
            .and_then(|index| bounds.head.checked_add(index))
            .filter(|at| *at < bounds.tail)
        else {
            return Ok(None);
        };
        match self.slot.get(&slot_item(at)).await? {
            Some(cell) => E::decode(self.slot, cell).await.map(Some),
            None => Ok(None),
        }
    }

    /// How many slots the deque holds.
    pub async fn len(&self) -> Result<u64, StateError> {
        let bounds = self.bounds().await?;
        Ok(bounds.tail.abs_diff(bounds.head))
    }

    /// Whether the deque holds nothing.
    pub async fn is_empty(&self) -> Result<bool, StateError> {
        Ok(self.len().await? == 0)
    }

    /// The range of the deque's slots, front to back.
    pub(crate) async fn slots(&self) -> Result<ItemRange, StateError> {
        Ok(Self::range(self.bounds().await?))
    }

    fn range(bounds: Bounds) -> ItemRange {
        ItemRange {
            from: slot_item(bounds.head),
            until: Some(slot_item(bounds.tail)),
        }
    }

    /// The items front to back (`Forward`) or back to front, fetched in
    /// chunks.
    pub fn values(
        &self,
        direction: Direction,
    ) -> impl Stream<Item = Result<T, StateError>> + Send + 'a {
        let this = *self;
        stream::once(async move { this.bounds().await }).flat_map(move |bounds| match bounds {
            Ok(bounds) => scan(this.slot, Self::range(bounds), direction, move |_, cell| {
                E::decode(this.slot, cell)
            })
            .left_stream(),
            Err(error) => stream::iter([Err(error)]).right_stream(),
        })
    }

    /// Removes every item.
    pub async fn clear(&self) -> Result<(), StateError> {
        self.slot.clear()
    }

    /// Writes this collection's pending changes now: a later failure of the
    /// attempt does not undo them.
    pub async fn commit(&self) -> Result<(), StateError> {
        self.slot.commit().await
    }

    /// Drops this collection's changes since its last commit.
    pub fn rollback(&self) -> Result<(), StateError> {
        self.slot.rollback()
    }
}
