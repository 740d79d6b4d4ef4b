//! What the timer checks share: unique topics, times around the base, and
//! store calls with deadlines that report failures: each write a commit of
//! one timer change.

use super::BASE;
use crate::broker::Failure;
use crate::store::{Checked, call, commit, ensure_eq};
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::{TimerEntry, TimerKind};
use prosody_contracts::store::{Batch, Stores, TimerChange};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `millis` milliseconds after [`BASE`].
pub(super) fn at_ms(millis: i64) -> Timestamp {
    Timestamp::from_millis(BASE.as_millis() + millis)
}

/// `seconds` seconds after [`BASE`].
pub(super) fn at(seconds: i64) -> Timestamp {
    at_ms(seconds * 1000)
}

/// Topics no other check, process or run uses.
pub(super) struct Topics {
    name: String,
}

impl Topics {
    pub(super) fn new(check: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Wall-clock nanoseconds only make runs distinct; no time is measured.
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            name: format!("conformance-timer-{check}-{}-{run}-{n}", std::process::id()),
        }
    }

    /// Partition `n` of the check's topic.
    pub(super) fn partition(&self, n: i32) -> TopicPartition {
        TopicPartition::new(self.name.as_str(), n)
    }

    /// Partition 0 of another topic of the check.
    pub(super) fn other_topic(&self) -> TopicPartition {
        TopicPartition::new(format!("{}-other", self.name), 0)
    }
}

/// Commits one timer change of `key`.
async fn change(
    stores: &impl Stores,
    what: &str,
    partition: &TopicPartition,
    key: &Key,
    kind: TimerKind,
    change: TimerChange,
) -> Checked {
    let batch = Batch::default().timer(key, kind, change);
    commit(stores, what, partition, batch).await
}

pub(super) async fn schedule(
    stores: &impl Stores,
    partition: &TopicPartition,
    entry: TimerEntry,
) -> Checked {
    let what = format!("a schedule of {entry:?}");
    let TimerEntry {
        key,
        time,
        kind,
        trace,
    } = entry;
    let schedule = TimerChange::Schedule { time, trace };
    change(stores, &what, partition, &key, kind, schedule).await
}

pub(super) async fn unschedule(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    time: Timestamp,
) -> Checked {
    unschedule_kind(stores, partition, key, TimerKind::Application, time).await
}

pub(super) async fn unschedule_kind(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    kind: TimerKind,
    time: Timestamp,
) -> Checked {
    let what = format!("an unschedule of ({key:?}, {kind:?}, {time:?})");
    let unschedule = TimerChange::Unschedule { time };
    change(stores, &what, partition, key, kind, unschedule).await
}

pub(super) async fn clear(stores: &impl Stores, partition: &TopicPartition, key: &Key) -> Checked {
    clear_kind(stores, partition, key, TimerKind::Application).await
}

pub(super) async fn clear_kind(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    kind: TimerKind,
) -> Checked {
    let what = format!("a clear of ({key:?}, {kind:?})");
    change(stores, &what, partition, key, kind, TimerChange::Clear).await
}

pub(super) async fn scheduled(
    store: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    kind: TimerKind,
) -> Result<Vec<Timestamp>, Failure> {
    let what = format!("scheduled({partition}, {key:?}, {kind:?})");
    call(&what, store.scheduled(partition, key, kind)).await
}

pub(super) async fn load(
    store: &impl Stores,
    partition: &TopicPartition,
    from: Timestamp,
    until: Timestamp,
) -> Result<Vec<TimerEntry>, Failure> {
    let what = format!("load({partition}, {from:?}, {until:?})");
    call(&what, store.load(partition, from, until)).await
}

/// Checks that `scheduled` of `key`'s application timers in `partition` is
/// `expected`.
pub(super) async fn ensure_scheduled(
    store: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    expected: &[Timestamp],
    when: &str,
) -> Checked {
    ensure_eq(
        &format!("scheduled({partition}, {key:?}) {when}"),
        &expected.to_vec(),
        &scheduled(store, partition, key, TimerKind::Application).await?,
    )
}

/// A `traceparent` for test entries.
pub(super) fn trace(n: u64) -> String {
    format!("00-{n:032x}-{n:016x}-01")
}
