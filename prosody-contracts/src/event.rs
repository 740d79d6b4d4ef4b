//! The events a handler receives: messages, timer triggers and excise records.

use crate::clock::Timestamp;
use crate::key::Key;
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;

/// A topic name; cheap to clone.
pub type Topic = Arc<str>;

/// The name of the header that carries the producing system's identifier.
pub const SOURCE_SYSTEM_HEADER: &str = "source-system";

/// Record headers in the order the producer wrote them.
///
/// Invariant: order and duplicates are kept exactly as produced, as Kafka does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, Bytes)>);

impl Headers {
    /// No headers.
    #[must_use]
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    /// Appends a header.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<Bytes>) {
        self.0.push((name.into(), value.into()));
    }

    /// The value of the last header with this name, if any.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The value of the last header with this name, if it is UTF-8.
    #[must_use]
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// All headers in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The number of headers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no headers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: Into<String>, V: Into<Bytes>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

/// The payload type of the events a stack carries: a message whose payload
/// is not decoded yet. Its bytes are in [`Message::raw`].
///
/// The handler service decodes the key and the payload just before the
/// handler runs, so a record that does not decode is a permanent failure of
/// that call, and every stage above sees it as one: it takes the failure
/// path of its mode like any other permanent error.
///
/// It may hold the payload parsed as JSON already: the runtime parses a
/// JSON object once to read its `id`, and keeps the parse for a codec that
/// takes one ([`Codec::takes_parsed`](crate::codec::Codec::takes_parsed)),
/// so the handler service does not parse the bytes again. Invariant: a
/// parse, when held, is of [`Message::raw`], and it is used at most once:
/// a clone holds none, so a retried or deferred attempt decodes the bytes.
#[derive(Default)]
pub struct Encoded(Option<serde_json::Value>);

impl fmt::Debug for Encoded {
    /// Never the payload's content: it is [`Message::raw`]'s, and a
    /// request's debug output may reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Encoded(parsed)"
        } else {
            "Encoded"
        })
    }
}

impl Encoded {
    /// A payload to decode from its bytes.
    #[must_use]
    pub const fn new() -> Self {
        Self(None)
    }

    /// A payload with its JSON parse.
    pub(crate) const fn parsed(value: serde_json::Value) -> Self {
        Self(Some(value))
    }

    /// Takes the parse, if any.
    pub(crate) fn take(&mut self) -> Option<serde_json::Value> {
        self.0.take()
    }
}

impl Clone for Encoded {
    /// A clone holds no parse: the parse is used at most once.
    fn clone(&self) -> Self {
        Self(None)
    }
}

/// A consumed message with its payload: decoded for the handler
/// (`Message<P>`), still encoded in the stack (`Message<Encoded>`).
#[derive(Clone, Debug)]
pub struct Message<P> {
    /// The topic it was read from.
    pub topic: Topic,
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset within the partition.
    pub offset: i64,
    /// The record's timestamp.
    pub timestamp: Timestamp,
    /// The record's key as text (the empty key when it had none).
    pub key: Key,
    /// The record's key exactly as it was on the wire; `None` when it had
    /// none.
    pub raw_key: Option<Bytes>,
    /// The payload: decoded for the handler, [`Encoded`] in the stack.
    pub payload: P,
    /// The payload exactly as it was on the wire.
    pub raw: Bytes,
    /// The payload's `id` field, when it is a JSON object with a string or
    /// number `id`: what deduplication keys on.
    pub id: Option<Arc<str>>,
    /// The record's headers.
    pub headers: Headers,
}

impl Message<Encoded> {
    /// The message with its payload decoded to `payload`.
    #[must_use]
    pub fn with_payload<P>(self, payload: P) -> Message<P> {
        Message {
            topic: self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key,
            raw_key: self.raw_key,
            payload,
            raw: self.raw,
            id: self.id,
            headers: self.headers,
        }
    }
}

/// A timer that came due for a key.
///
/// A handler's `on_timer` sees only [`TimerKind::Application`] timers: the
/// defer stage consumes its own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timer {
    /// The key the timer belongs to.
    pub key: Key,
    /// The time the timer was scheduled for (second precision).
    pub time: Timestamp,
    /// Who the timer is for.
    pub kind: TimerKind,
    /// The W3C `traceparent` of the span that scheduled it, if any.
    pub trace: Option<Arc<str>>,
}

impl Timer {
    /// An application timer of `key` at `time` (to test a handler's
    /// `on_timer`).
    #[must_use]
    pub fn new(key: impl Into<Key>, time: Timestamp) -> Self {
        Self {
            key: key.into(),
            time,
            kind: TimerKind::Application,
            trace: None,
        }
    }

    /// The same timer, for `kind`.
    #[must_use]
    pub fn with_kind(mut self, kind: TimerKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same timer, caused by the span whose W3C `traceparent` is
    /// `trace`.
    #[must_use]
    pub fn with_trace(mut self, trace: Option<Arc<str>>) -> Self {
        self.trace = trace;
        self
    }
}

/// An excise record: a key with no payload, asking the consumer to delete
/// everything it holds for that key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excise {
    /// The topic it was read from.
    pub topic: Topic,
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset within the partition.
    pub offset: i64,
    /// The record's timestamp.
    pub timestamp: Timestamp,
    /// The key to excise.
    pub key: Key,
    /// The record's key exactly as it was on the wire; `None` when it had
    /// none.
    pub raw_key: Option<Bytes>,
    /// The record's headers.
    pub headers: Headers,
}

/// Anything a handler is called for.
#[derive(Clone, Debug)]
pub enum Event<P> {
    /// A message with a payload.
    Message(Message<P>),
    /// A due timer.
    Timer(Timer),
    /// A tombstone for a key.
    Excise(Excise),
}

impl<P> Event<P> {
    /// The key the event belongs to.
    #[must_use]
    pub fn key(&self) -> &Key {
        match self {
            Self::Message(m) => &m.key,
            Self::Timer(t) => &t.key,
            Self::Excise(e) => &e.key,
        }
    }

    /// A short name of the event's kind, for logs and spans.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Message(_) => "message",
            Self::Timer(_) => "timer",
            Self::Excise(_) => "excise",
        }
    }
}

/// Who a timer is for: the handler, or the defer stage.
///
/// Timers of different kinds are independent: a key may have a timer of
/// each kind at the same second, and clearing one kind leaves the other.
/// Only [`TimerKind::Application`] timers reach `on_timer`; a handler's
/// `scheduled()` and `clear_scheduled()` see only those.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum TimerKind {
    /// Scheduled by a handler through its context.
    #[default]
    Application,
    /// Scheduled by the defer stage to retry a key's deferred messages.
    Defer,
}

#[cfg(test)]
mod tests {
    use super::Headers;

    #[test]
    fn last_header_of_a_name_wins_and_order_is_kept() {
        let headers: Headers = [("a", "1"), ("b", "2"), ("a", "3")]
            .into_iter()
            .map(|(n, v)| (n, v.as_bytes().to_vec()))
            .collect();
        assert_eq!(headers.get_str("a"), Some("3"));
        assert_eq!(headers.get_str("missing"), None);
        let names: Vec<_> = headers.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b", "a"]);
    }
}
