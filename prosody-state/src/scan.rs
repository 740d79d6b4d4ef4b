//! Scans: a range of a collection's items, fetched a chunk at a time.

use crate::CHUNK;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use futures_util::{FutureExt, Stream, future};
use prosody_core::state::{Slot, StateError};
use prosody_core::store::{Direction, ItemRange};
use std::future::Future;

/// The items of `range` in `direction`, [`CHUNK`] at a time from the store
/// under the attempt's changes; `map` turns each into the stream's item,
/// one at a time. A failed fetch ends the stream after its error; a failed
/// `map` is that item's error, and the stream goes on.
pub(crate) fn scan<'a, T: Send + 'a, F>(
    slot: Slot<'a>,
    range: ItemRange,
    direction: Direction,
    map: impl Fn(Bytes, Bytes) -> F + Send + 'a,
) -> impl Stream<Item = Result<T, StateError>> + Send + 'a
where
    F: Future<Output = Result<T, StateError>> + Send + 'a,
{
    let pages = stream::unfold(Some(range), move |range| async move {
        let range = range?;
        match slot.page(range, direction, CHUNK).await {
            Ok(page) => Some((Ok(page.items), page.next)),
            Err(error) => Some((Err(error), None)),
        }
    });
    pages
        .flat_map(|page| {
            let entries: Vec<Result<(Bytes, Bytes), StateError>> = match page {
                Ok(items) => items.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error)],
            };
            stream::iter(entries)
        })
        .then(move |entry| match entry {
            Ok((item, value)) => map(item, value).left_future(),
            Err(error) => future::ready(Err(error)).right_future(),
        })
}
