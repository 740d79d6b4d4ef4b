//! How a collection's cells spread over Cassandra partitions (buckets), so
//! that no partition holds a whole big map or deque.
//!
//! The layout follows the collection's kind, as this client identified it:
//! - a value is one cell, in bucket 0 ([`Layout::Single`]; so is a
//!   collection this client never identified, as in the conformance suite);
//! - a map's entries are hashed over [`MAP_BUCKETS`] buckets
//!   ([`Layout::Hashed`]): a point read or write touches one, a page merges
//!   the pages of all of them;
//! - a deque's items stay in order, 1,024 positions per bucket
//!   ([`Layout::Ranged`]): a page walks the buckets of its range in order,
//!   listed by the bucket index (`state_buckets`), which every put marks
//!   and a clear empties.
//!
//! Invariant: [`Layout::bucket`] is a pure function of the item (a stable
//! hash, or a prefix), so every client finds a cell where any other wrote
//! it; for [`Layout::Ranged`] it never decreases as the item grows in byte
//! order, so buckets in order hold items in order.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// The buckets of a map.
pub(crate) const MAP_BUCKETS: i64 = 16;

/// Log2 of the positions of a deque in one bucket (1,024).
const SLOT_BITS: u32 = 10;

/// Where the cells of one collection live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Every cell in bucket 0.
    #[default]
    Single,
    /// Cells hashed over [`MAP_BUCKETS`] buckets.
    Hashed,
    /// Cells in byte order, bucketed by their first eight bytes.
    Ranged,
}

impl Layout {
    /// The layout of a collection with the recorded `identity`
    /// (`kind/payload`).
    pub(crate) fn of_identity(identity: &str) -> Self {
        match identity.split_once('/').map(|(kind, _)| kind) {
            Some("map") => Self::Hashed,
            Some("deque") => Self::Ranged,
            _ => Self::Single,
        }
    }

    /// The bucket that holds `item`.
    pub(crate) fn bucket(self, item: &[u8]) -> i64 {
        match self {
            Self::Single => 0,
            Self::Hashed => {
                let buckets = MAP_BUCKETS.cast_unsigned();
                (fnv1a(item) % buckets).cast_signed()
            }
            Self::Ranged => {
                let mut word = [0_u8; 8];
                for (to, from) in word.iter_mut().zip(item) {
                    *to = *from;
                }
                (u64::from_be_bytes(word) >> SLOT_BITS).cast_signed()
            }
        }
    }
}

/// 64-bit FNV-1a: stable across processes, versions and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The layout of each collection this client identified.
#[derive(Debug, Default)]
pub(crate) struct Layouts(RwLock<HashMap<String, Layout>>);

impl Layouts {
    /// Records the layout of `name`, whose recorded identity is `identity`.
    pub(crate) fn learn(&self, name: &str, identity: &str) {
        let mut layouts = self.0.write().unwrap_or_else(PoisonError::into_inner);
        layouts.insert(name.to_owned(), Layout::of_identity(identity));
    }

    /// The layout of `name`.
    pub(crate) fn of(&self, name: &str) -> Layout {
        let layouts = self.0.read().unwrap_or_else(PoisonError::into_inner);
        layouts.get(name).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identities_choose_layouts() {
        assert_eq!(Layout::of_identity("map/json"), Layout::Hashed);
        assert_eq!(Layout::of_identity("map/message"), Layout::Hashed);
        assert_eq!(Layout::of_identity("deque/message"), Layout::Ranged);
        assert_eq!(Layout::of_identity("value/json"), Layout::Single);
        assert_eq!(Layout::of_identity("other"), Layout::Single);
    }

    #[test]
    fn the_map_hash_is_stable() {
        // Fixed values: a change of hash would move every stored entry.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Layout::Hashed.bucket(b"a"), 12);
    }

    #[test]
    fn a_bucket_holds_a_run_of_deque_positions() {
        const SLOTS_PER_BUCKET: u64 = 1 << SLOT_BITS;
        let slot = |at: u64| (at ^ (1 << 63)).to_be_bytes();
        let first = Layout::Ranged.bucket(&slot(0));
        assert_eq!(Layout::Ranged.bucket(&slot(SLOTS_PER_BUCKET - 1)), first);
        assert_eq!(Layout::Ranged.bucket(&slot(SLOTS_PER_BUCKET)), first + 1);
        assert_eq!(Layout::Ranged.bucket(b""), 0);
    }

    proptest! {
        /// Buckets in order hold items in order.
        #[test]
        fn ranged_buckets_follow_byte_order(
            a in proptest::collection::vec(any::<u8>(), 0..12),
            b in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(Layout::Ranged.bucket(&low) <= Layout::Ranged.bucket(&high));
        }

        #[test]
        fn map_buckets_are_in_range(item in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert!((0..MAP_BUCKETS).contains(&Layout::Hashed.bucket(&item)));
        }
    }
}
