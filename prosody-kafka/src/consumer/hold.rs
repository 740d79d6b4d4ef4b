//! What the consumer holds for the partitions its owner paused: the
//! records fetched after the pause, delivered first once the partition
//! resumes, bounded in bytes.

use bytes::Bytes;
use prosody_contracts::broker::{Record, TopicPartition};
use prosody_contracts::hash::{FastMap, FastSet};
use std::collections::VecDeque;

/// The bytes held for every paused partition together, about: each
/// assigned partition may hold its share (at least [`MIN_HOLD`]) before
/// rdkafka itself pauses it. Most pauses are short (backpressure until the
/// partition's work halves), and rdkafka's pause drops what it prefetched
/// for the partition, to fetch and decode again on resume (on real Kafka,
/// several times the consumer's own cost per record when pauses come
/// often: BENCHMARKS.md), so a pause first only holds what arrives.
/// Counted in bytes, as rdkafka bounds its prefetch, so smaller records do
/// not make a longer hold of the same memory.
pub(super) const HELD_BYTES: usize = 32 << 20;

/// The least a partition may hold, whatever the number assigned.
const MIN_HOLD: usize = 1 << 20;

/// What a held record counts for besides its key, payload and headers:
/// its own fields and a share of the allocator's and the queue's overhead,
/// about; records of a few bytes cost somewhat more than they count.
const RECORD_COST: usize = size_of::<Record>() + 64;

/// A partition's share of `budget` among `assigned` partitions: an equal
/// part, but never under [`MIN_HOLD`] unless the whole budget is.
fn share(budget: usize, assigned: usize) -> usize {
    (budget / assigned.max(1)).max(MIN_HOLD.min(budget))
}

/// The bytes a held record counts for.
pub(super) fn held_size(record: &Record) -> usize {
    let data = record.key.as_ref().map_or(0, Bytes::len)
        + record.payload.as_ref().map_or(0, Bytes::len)
        + record
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum::<usize>();
    data + RECORD_COST
}

/// The records held for one partition, and their size.
///
/// Invariant: `bytes` is the sum of [`held_size`] over `records`.
#[derive(Debug, Default)]
pub(super) struct Held {
    records: VecDeque<Record>,
    bytes: usize,
}

impl Held {
    pub(super) fn push(&mut self, record: Record) {
        self.bytes = self.bytes.saturating_add(held_size(&record));
        self.records.push_back(record);
    }

    pub(super) fn pop(&mut self) -> Option<Record> {
        let record = self.records.pop_front()?;
        self.bytes = self.bytes.saturating_sub(held_size(&record));
        Some(record)
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Every paused partition's held records, and the resumed partitions whose
/// records go first.
///
/// Invariant: a partition's records leave in the order they were held, and
/// only while it is not paused; a partition holds past its share of
/// `budget` (see [`Holds::hold`]) only by the record that crossed it, or,
/// when more partitions were assigned since, until its next record.
#[derive(Debug)]
pub(super) struct Holds {
    by_partition: FastMap<TopicPartition, Held>,
    /// Resumed partitions with held records, to deliver first.
    ready: VecDeque<TopicPartition>,
    /// The bytes all paused partitions may hold together: [`HELD_BYTES`]
    /// (less in tests).
    pub(super) budget: usize,
}

impl Default for Holds {
    fn default() -> Self {
        Self {
            by_partition: FastMap::default(),
            ready: VecDeque::new(),
            budget: HELD_BYTES,
        }
    }
}

impl Holds {
    /// Holds `record` of its paused `partition`; whether the partition now
    /// holds its share of the budget among `assigned` partitions, or more:
    /// then rdkafka should stop fetching it.
    pub(super) fn hold(
        &mut self,
        partition: &TopicPartition,
        record: Record,
        assigned: usize,
    ) -> bool {
        let share = share(self.budget, assigned);
        let held = match self.by_partition.get_mut(partition) {
            Some(held) => held,
            None => self.by_partition.entry(partition.clone()).or_default(),
        };
        held.push(record);
        held.bytes() >= share
    }

    /// The next held record of a resumed partition that is not `paused`
    /// again, if any.
    pub(super) fn take(&mut self, paused: &FastSet<TopicPartition>) -> Option<Record> {
        while let Some(partition) = self.ready.front() {
            let paused = paused.contains(partition);
            let record = match self.by_partition.get_mut(partition) {
                Some(held) if !paused => held.pop(),
                _ => None,
            };
            if record.is_some() {
                return record;
            }
            if let Some(partition) = self.ready.pop_front()
                && !paused
            {
                self.by_partition.remove(&partition);
            }
        }
        None
    }

    /// `partition` resumed: what it holds goes first.
    pub(super) fn resume(&mut self, partition: &TopicPartition) {
        if self.by_partition.contains_key(partition) {
            self.ready.push_back(partition.clone());
        }
    }

    /// Drops what `partition` holds: it left this member, and its next
    /// owner reads it again from the committed offset.
    pub(super) fn forget(&mut self, partition: &TopicPartition) {
        self.by_partition.remove(partition);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, reason = "test code fails loudly")]

    use super::{HELD_BYTES, Held, Holds, MIN_HOLD, RECORD_COST, held_size, share};
    use bytes::Bytes;
    use prosody_contracts::Timestamp;
    use prosody_contracts::broker::{Record, TopicPartition};
    use prosody_contracts::event::Headers;
    use prosody_contracts::hash::FastSet;
    use std::collections::VecDeque;

    fn record(n: usize) -> Record {
        let mut headers = Headers::new();
        if n.is_multiple_of(5) {
            headers.push(format!("h{n}"), vec![b'v'; n]);
        }
        Record {
            topic: "t".into(),
            partition: 0,
            offset: i64::try_from(n).expect("a small offset"),
            timestamp: Timestamp::default(),
            key: Some(Bytes::from(vec![b'k'; n % 7])),
            payload: (!n.is_multiple_of(3)).then(|| Bytes::from(vec![b'p'; n * 13])),
            headers,
        }
    }

    /// What a partition holds is counted in bytes as records come and go,
    /// so its share of the budget bounds its memory, not its record count.
    #[test]
    fn held_bytes_follow_the_records_held() {
        let mut held = Held::default();
        let mut sizes = VecDeque::new();
        for n in 0..200 {
            let record = record(n);
            sizes.push_back(held_size(&record));
            held.push(record);
            if n % 4 == 3 {
                held.pop().expect("a record held");
                sizes.pop_front();
            }
            assert_eq!(
                held.bytes(),
                sizes.iter().sum::<usize>(),
                "after record {n}"
            );
        }
        while held.pop().is_some() {}
        assert_eq!(held.bytes(), 0, "nothing held, nothing counted");
    }

    /// A partition is full at its share of the budget, never below, and
    /// its share is never under the floor however many are assigned; a
    /// resumed partition gives its records back in the order held, and
    /// none while it is paused again.
    #[test]
    fn holds_fill_at_the_share_and_give_back_in_order() {
        let partition = TopicPartition::new("t", 0);
        let mut holds = Holds {
            budget: 2 * held_size(&record(1)),
            ..Holds::default()
        };
        assert!(
            !holds.hold(&partition, record(1), 1),
            "one record is half the share"
        );
        assert!(holds.hold(&partition, record(1), 1), "two fill it");
        // A thousand partitions assigned of 64 MiB: each still holds 1 MiB.
        let mut floor = Holds {
            budget: 64 << 20,
            ..Holds::default()
        };
        let mut big = record(1);
        big.payload = Some(Bytes::from(vec![b'p'; 600 << 10]));
        assert!(
            !floor.hold(&partition, big.clone(), 1000),
            "600 KiB is under the floor"
        );
        assert!(floor.hold(&partition, big, 1000), "1.2 MiB is past it");
        let mut paused = FastSet::default();
        paused.insert(partition.clone());
        holds.resume(&partition);
        assert!(holds.take(&paused).is_none(), "paused again: nothing");
        paused.clear();
        holds.resume(&partition);
        let offsets: Vec<i64> = std::iter::from_fn(|| holds.take(&paused))
            .map(|record| record.offset)
            .collect();
        assert_eq!(offsets, [1, 1]);
        holds.forget(&partition);
        holds.resume(&partition);
        assert!(holds.take(&paused).is_none(), "forgotten: nothing");
    }

    /// The budget divides equally among the partitions assigned, down to
    /// the floor; none assigned, or fewer bytes than the floor, is the
    /// whole budget.
    #[test]
    fn shares_divide_the_budget_above_the_floor() {
        assert_eq!(share(HELD_BYTES, 8), 4 << 20);
        assert_eq!(share(HELD_BYTES, 1), HELD_BYTES);
        assert_eq!(share(HELD_BYTES, 0), HELD_BYTES);
        assert_eq!(share(HELD_BYTES, 64), MIN_HOLD);
        assert_eq!(share(256 << 10, 64), 256 << 10);
    }

    /// A record counts its key, its payload, each header's name and value,
    /// and its own cost.
    #[test]
    fn a_record_counts_its_key_payload_and_headers() {
        let mut record = record(1);
        record.key = Some(Bytes::from_static(b"key"));
        record.payload = Some(Bytes::from_static(b"0123456789"));
        record.headers = Headers::new();
        record.headers.push("ab", Bytes::from_static(b"xyz"));
        assert_eq!(held_size(&record), RECORD_COST + 3 + 10 + 2 + 3);
    }
}
