//! An answer as it travels from the answering peer to the waiting one.
//!
//! The form is binary and checked whole before anything is delivered:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | version, `1` |
//! | 16 | the peer the answer is for |
//! | 16 | the request id |
//! | 1 | the subsystem's length `n` (1 to 128) |
//! | `n` | the subsystem, as [`check_subsystem`] allows |
//! | 1 | the kind: `0` a value, `1` a failure |
//! | rest | the value's JSON text, or the failure's UTF-8 message |

use bytes::{BufMut, Bytes, BytesMut};
pub use prosody_contracts::peer::Answer;
use prosody_contracts::peer::{PeerId, RequestId, check_subsystem};

/// The largest answer a peer sends or accepts, in bytes.
pub const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;

const VERSION: u8 = 1;

/// One subsystem's answer to one request, addressed to the peer that
/// waits for it.
///
/// Invariant: `subsystem` passes [`check_subsystem`], and the encoded form
/// is at most [`MAX_REPLY_BYTES`] (a longer value is sent as a failure
/// saying so).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The peer the answer is for.
    pub to: PeerId,
    /// The request answered.
    pub id: RequestId,
    /// The subsystem answering.
    pub subsystem: String,
    /// What it answers.
    pub answer: Answer,
}

/// Bytes that are not an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply: {0}")]
pub struct WireError(&'static str);

impl Reply {
    /// The encoded answer. A value too large to send becomes a failure
    /// that says so, so the requester learns why rather than time out.
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let header = 1 + 16 + 16 + 1 + self.subsystem.len() + 1;
        let (kind, body): (u8, &[u8]) = match &self.answer {
            Answer::Value(json) if header + json.len() <= MAX_REPLY_BYTES => (0, json),
            Answer::Value(_) => (
                1,
                b"the response is larger than the 4 MiB a reply may carry",
            ),
            Answer::Failed(message) => {
                let room = MAX_REPLY_BYTES.saturating_sub(header);
                (1, truncated(message, room).as_bytes())
            }
        };
        let mut out = BytesMut::with_capacity(header + body.len());
        out.put_u8(VERSION);
        out.put_slice(&self.to.to_bytes());
        out.put_slice(&self.id.to_bytes());
        // The subsystem passed `check_subsystem`: at most 128 bytes.
        out.put_u8(u8::try_from(self.subsystem.len()).unwrap_or(u8::MAX));
        out.put_slice(self.subsystem.as_bytes());
        out.put_u8(kind);
        out.put_slice(body);
        out.freeze()
    }

    /// The answer these bytes encode.
    ///
    /// # Errors
    ///
    /// [`WireError`] naming the first field that does not hold.
    pub fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        if bytes.len() > MAX_REPLY_BYTES {
            return Err(WireError("longer than 4 MiB"));
        }
        let mut at = 0;
        let mut take = |n: usize, what: &'static str| {
            let field = bytes.get(at..at + n).ok_or(WireError(what))?;
            at += n;
            Ok::<_, WireError>(field)
        };
        if take(1, "empty")? != [VERSION] {
            return Err(WireError("unknown version"));
        }
        let id = |field: &[u8]| <[u8; 16]>::try_from(field).map_err(|_| WireError("short id"));
        let to = PeerId::from_bytes(id(take(16, "no peer id")?)?);
        let request = RequestId::from_bytes(id(take(16, "no request id")?)?);
        let len = usize::from(take(1, "no subsystem length")?[0]);
        let subsystem = std::str::from_utf8(take(len, "subsystem cut short")?)
            .map_err(|_| WireError("subsystem not UTF-8"))?;
        check_subsystem(subsystem).map_err(|_| WireError("invalid subsystem"))?;
        let subsystem = subsystem.to_owned();
        let kind = take(1, "no kind")?[0];
        let body = bytes.slice(at..);
        let answer = match kind {
            0 => Answer::Value(body),
            1 => Answer::Failed(
                String::from_utf8(body.to_vec()).map_err(|_| WireError("message not UTF-8"))?,
            ),
            _ => return Err(WireError("unknown kind")),
        };
        Ok(Self {
            to,
            id: request,
            subsystem,
            answer,
        })
    }
}

/// At most `room` bytes of `text`, cut at a character boundary.
fn truncated(text: &str, room: usize) -> &str {
    let mut end = text.len().min(room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reply() -> impl Strategy<Value = Reply> {
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            "[a-z0-9._-]{1,20}",
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64)
                    .prop_map(|bytes| Answer::Value(Bytes::from(bytes))),
                ".{0,40}".prop_map(Answer::Failed),
            ],
        )
            .prop_map(|(to, id, subsystem, answer)| Reply {
                to: PeerId::from_bytes(to),
                id: RequestId::from_bytes(id),
                subsystem,
                answer,
            })
    }

    proptest! {
        /// An answer decodes to itself.
        #[test]
        fn a_reply_decodes_to_itself(reply in reply()) {
            prop_assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }

        /// Any bytes decode to an answer or a named error, never a panic;
        /// every cut of a valid answer short of its body is refused.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..96),
            reply in reply(),
            cut in 0usize..40,
        ) {
            let _ = Reply::decode(&Bytes::from(bytes));
            let encoded = reply.encode();
            let header = 1 + 16 + 16 + 1 + reply.subsystem.len() + 1;
            if cut < header {
                prop_assert!(Reply::decode(&encoded.slice(..cut)).is_err());
            }
        }
    }

    #[test]
    fn an_oversized_value_travels_as_a_failure() {
        let reply = Reply {
            to: PeerId::from_bytes([1; 16]),
            id: RequestId::from_bytes([2; 16]),
            subsystem: "billing".into(),
            answer: Answer::Value(Bytes::from(vec![b'1'; MAX_REPLY_BYTES])),
        };
        let decoded = Reply::decode(&reply.encode()).unwrap();
        assert!(matches!(decoded.answer, Answer::Failed(message) if message.contains("4 MiB")));
    }
}
