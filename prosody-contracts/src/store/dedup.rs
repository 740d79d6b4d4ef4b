//! The dedup store: a persistent set of [`DedupKey`]s, each with an expiry.

use super::StoreError;
use std::fmt;
use std::future::Future;

/// The identity of a handled message for deduplication: a 128-bit hash of
/// the idempotence version, the record key and the payload's `id`.
///
/// Invariant: the value depends only on those three strings and is the same
/// in every process, platform and version of this library, because stores
/// persist it. It is FNV-1a with 128 bits (offset basis
/// `0x6c62272e07bb014262b821756295c58d`, prime `2^88 + 0x13b`) over this
/// framing: for each of version, key and id in that order, its UTF-8 length
/// as 8 little-endian bytes, then its bytes. The length prefixes make the
/// framing unambiguous, so `("ab", "c")` and `("a", "bc")` hash different
/// inputs. Changing any of this invalidates every stored key: don't.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DedupKey(u128);

const FNV_OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// FNV-1a over a sequence of byte slices, as if they were concatenated.
fn fnv1a_128<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u128 {
    parts
        .into_iter()
        .flatten()
        .fold(FNV_OFFSET_BASIS, |hash, byte| {
            (hash ^ u128::from(*byte)).wrapping_mul(FNV_PRIME)
        })
}

impl DedupKey {
    /// The key of the message with payload `id` and record `key`, under the
    /// idempotence `version`.
    #[must_use]
    pub fn new(version: &str, key: &str, id: &str) -> Self {
        let lengths = [version, key, id].map(|field| (field.len() as u64).to_le_bytes());
        let [lv, lk, li] = &lengths;
        Self(fnv1a_128([
            &lv[..],
            version.as_bytes(),
            &lk[..],
            key.as_bytes(),
            &li[..],
            id.as_bytes(),
        ]))
    }

    /// The key as 16 big-endian bytes, the form stores persist.
    #[must_use]
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The key from the 16 bytes [`DedupKey::to_bytes`] gave.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }
}

impl fmt::Debug for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DedupKey({:032x})", self.0)
    }
}

impl fmt::Display for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The reads of a persistent set of dedup keys, each kept for the ttl it
/// was inserted with. Keys are inserted by [`Stores::commit`] alone, as
/// [`DedupWrite`]s.
///
/// Contract (checked by the conformance suite, `prosody_conformance::store::dedup`):
/// a key inserted with ttl `t` is contained from the commit's completion
/// until at least `t` later, and not contained once `t` has passed (give or
/// take the backend's clock granularity, at most a second); a key never
/// inserted is not contained; inserting a key again replaces its expiry with
/// the new ttl; keys are independent of each other. Backends keep ttls in
/// whole seconds at least, so ttls below a second may be rounded up.
///
/// [`Stores::commit`]: super::Stores::commit
/// [`DedupWrite`]: super::DedupWrite
pub trait DedupStore: Send + Sync + 'static {
    /// Whether `key` is present and not expired.
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// What [`contains`](Self::contains) would answer now, when the store
    /// can tell at once, without I/O (a store in memory). `None` means "ask
    /// `contains`"; the default never knows. The dedup stage asks it first
    /// for every message with an `id`, and a store that answers is asked
    /// nothing else and has no cache in front of it: it spares the hot
    /// path an allocation and a wait.
    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        let _ = key;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{DedupKey, fnv1a_128};
    use proptest::prelude::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(
            fnv1a_128([&b""[..]]),
            0x6c62_272e_07bb_0142_62b8_2175_6295_c58d
        );
        assert_eq!(
            fnv1a_128([&b"a"[..]]),
            0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964
        );
        assert_eq!(
            fnv1a_128([&b"foo"[..], &b"bar"[..]]),
            0x343e_1662_793c_64bf_6f0d_3597_ba44_6f18
        );
    }

    /// Pinned: a stored key must hash the same in every later version.
    #[test]
    fn keys_are_stable() {
        let key = DedupKey::new("1", "user-1", "msg-123");
        assert_eq!(key.to_string(), "6abb1a9b0b4d1791a49b8c09a838ec21");
        assert_eq!(DedupKey::from_bytes(key.to_bytes()), key);
    }

    #[test]
    fn framing_is_unambiguous() {
        assert_ne!(DedupKey::new("1", "ab", "c"), DedupKey::new("1", "a", "bc"));
        assert_ne!(DedupKey::new("1a", "b", "c"), DedupKey::new("1", "ab", "c"));
        assert_ne!(DedupKey::new("", "", "x"), DedupKey::new("", "x", ""));
    }

    proptest! {
        /// Different tuples (over a small alphabet, so that concatenations
        /// often coincide) give different keys, equal tuples equal keys.
        #[test]
        fn distinct_tuples_give_distinct_keys(
            a in ("[ab]{0,3}", "[ab]{0,3}", "[ab]{0,3}"),
            b in ("[ab]{0,3}", "[ab]{0,3}", "[ab]{0,3}"),
        ) {
            let ka = DedupKey::new(&a.0, &a.1, &a.2);
            let kb = DedupKey::new(&b.0, &b.1, &b.2);
            prop_assert_eq!(a == b, ka == kb);
        }
    }
}
