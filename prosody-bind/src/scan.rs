//! Scans by name (`items`, `keys`, `values`), streamed in order into a
//! bounded channel: the collection is read in chunks as the binding
//! consumes it, never all at once.

use crate::collection::Collection;
use crate::ops::{Args, Form, Item, Op, OpError, Reader, usage};
use futures_util::{Stream, StreamExt};
use prosody::Context;
use prosody::state::{DequeState, Encoding, MapState, StateError};
use serde_json::Value;
use tokio::sync::mpsc;

/// One element of a scan.
#[derive(Debug)]
pub enum Scanned {
    /// A value (`values`).
    Item(Item),
    /// A map key (`keys`).
    Key(String),
    /// A map entry (`items`).
    Entry(String, Item),
}

/// Where a scan sends its elements, then at most one error; it stops
/// when the receiver is dropped.
pub type Sink = mpsc::Sender<Result<Scanned, OpError>>;

async fn drain<T>(
    stream: impl Stream<Item = Result<T, StateError>>,
    out: &Sink,
    wrap: impl Fn(T) -> Scanned,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(next) = stream.next().await {
        let failed = next.is_err();
        if out
            .send(next.map(&wrap).map_err(OpError::from))
            .await
            .is_err()
            || failed
        {
            return;
        }
    }
}

fn entry<T: Form>((key, value): (String, T)) -> Scanned {
    Scanned::Entry(key, value.into_item())
}

fn item<T: Form>(value: T) -> Scanned {
    Scanned::Item(value.into_item())
}

async fn map<T: Form, E: Encoding<T>>(
    handle: MapState<'_, T, E>,
    mut args: Args,
    out: &Sink,
) -> Result<(), OpError> {
    match args.op.as_str() {
        "items" => drain(handle.items(args.direction()?), out, entry).await,
        "keys" => drain(handle.keys(args.direction()?), out, Scanned::Key).await,
        "values" => drain(handle.values(), out, item).await,
        _ => return Err(args.unknown("map scan")),
    }
    Ok(())
}

async fn deque<T: Form, E: Encoding<T>>(
    handle: DequeState<'_, T, E>,
    mut args: Args,
    out: &Sink,
) -> Result<(), OpError> {
    match args.op.as_str() {
        "values" => drain(handle.values(args.direction()?), out, item).await,
        _ => return Err(args.unknown("deque scan")),
    }
    Ok(())
}

async fn published(mut args: Args, reader: &Reader, key: &str, out: &Sink) -> Result<(), OpError> {
    match (reader, args.op.as_str()) {
        (Reader::Map(reader), "items") => {
            drain(reader.items(key, args.direction()?), out, entry::<Value>).await;
        }
        (Reader::Map(reader), "keys") => {
            drain(reader.keys(key, args.direction()?), out, Scanned::Key).await;
        }
        (Reader::Map(reader), "values") => drain(reader.values(key), out, item::<Value>).await,
        (Reader::Deque(reader), "values") => {
            drain(reader.values(key, args.direction()?), out, item::<Value>).await;
        }
        _ => return Err(args.unknown("published scan")),
    }
    Ok(())
}

impl Op {
    /// Streams a scan of the current key's `collection` into `out`, in
    /// the attempt `context` belongs to; an error is sent last.
    pub async fn scan(self, context: &Context, collection: &Collection, out: &Sink) {
        let args = self.args();
        let scanned = match collection {
            Collection::Map(def) => match context.state(def) {
                Ok(handle) => map(handle, args, out).await,
                Err(error) => Err(error.into()),
            },
            Collection::MessageMap(def) => match context.state(def) {
                Ok(handle) => map(handle, args, out).await,
                Err(error) => Err(error.into()),
            },
            Collection::Deque(def) => match context.state(def) {
                Ok(handle) => deque(handle, args, out).await,
                Err(error) => Err(error.into()),
            },
            Collection::MessageDeque(def) => match context.state(def) {
                Ok(handle) => deque(handle, args, out).await,
                Err(error) => Err(error.into()),
            },
            Collection::Value(_) | Collection::MessageValue(_) => {
                Err(usage(format!("a value has no scan `{}`", args.op)))
            }
        };
        if let Err(error) = scanned {
            let _ = out.send(Err(error)).await;
        }
    }

    /// Streams a scan of `key`'s published collection into `out`; an
    /// error is sent last.
    pub async fn scan_published(self, reader: &Reader, key: &str, out: &Sink) {
        if let Err(error) = published(self.args(), reader, key, out).await {
            let _ = out.send(Err(error)).await;
        }
    }
}
