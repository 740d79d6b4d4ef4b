//! Scans: a range of a collection's items, fetched a chunk at a time.

use crate::CHUNK;
use bytes::Bytes;
use futures_util::Stream;
use futures_util::stream::{self, StreamExt};
use prosody_core::state::{Slot, StateError};
use prosody_core::store::{Direction, ItemRange};

/// The items of `range` in `direction`, [`CHUNK`] at a time from the store
/// under the attempt's changes; `map` turns each into the stream's item.
/// A failed fetch ends the stream after its error.
pub(crate) fn scan<'a, T: Send + 'a>(
    slot: Slot<'a>,
    range: ItemRange,
    direction: Direction,
    map: impl Fn(Bytes, Bytes) -> Result<T, StateError> + Send + 'a,
) -> impl Stream<Item = Result<T, StateError>> + Send + 'a {
    let pages = stream::unfold(Some(range), move |range| async move {
        let range = range?;
        match slot.page(range, direction, CHUNK).await {
            Ok(page) => Some((Ok(page.items), page.next)),
            Err(error) => Some((Err(error), None)),
        }
    });
    pages.flat_map(move |page| {
        let items: Vec<Result<T, StateError>> = match page {
            Ok(items) => items
                .into_iter()
                .map(|(item, value)| map(item, value))
                .collect(),
            Err(error) => vec![Err(error)],
        };
        stream::iter(items)
    })
}
