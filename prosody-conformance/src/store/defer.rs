//! The [`DeferStore`] conformance suite: deferrals written through
//! [`Stores::commit`] (one [`DeferWrite`] a commit) and read back through
//! [`DeferStore::deferred`] (and [`DeferStore::peek`], which must agree
//! with it whenever it answers). What the single writes once returned is
//! read after the commit: the head after a completion, the head's failure
//! count after a failure.
//!
//! Run each check against a backend, one test per check, or all with
//! [`run_all`]. Checks use topics no other check or run uses, so they can
//! share one store (and one Cassandra table). Every store call has a
//! deadline ([`DEADLINE`]).
//!
//! Besides the named checks, [`replay`] runs any sequence of [`Op`]s against
//! the store and a model of the contract, comparing results and the whole
//! state after every step; [`random_interleaving_matches_the_model`] replays
//! seeded pseudo-random sequences, and a backend may replay its own (a
//! property test with shrinking, say).

mod replay;

pub use super::DEADLINE;
use super::{Checked, call, commit, ensure_eq};
use crate::broker::Failure;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::Deferral::{self, AfterFailure, Behind};
use prosody_contracts::store::defer::{DeferCounts, DeferStore, Deferred};
use prosody_contracts::store::{Batch, DeferWrite, Stores};
pub use replay::{Call, KEYS, Op, PARTITIONS, random_interleaving_matches_the_model, replay};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Topics no other check, process or run uses.
struct Topics {
    namespace: String,
}

impl Topics {
    fn new(check: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Wall-clock nanoseconds only make runs distinct; no time is measured.
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let pid = std::process::id();
        Self {
            namespace: format!("conformance-defer-{check}-{pid}-{run}-{n}"),
        }
    }

    fn partition(&self, topic: &str, number: i32) -> TopicPartition {
        TopicPartition::new(format!("{}-{topic}", self.namespace), number)
    }
}

/// Checks which of `keys` have deferred offsets in the partition: exactly
/// those in `expected`.
async fn expect_keys(
    store: &impl Stores,
    tp: &TopicPartition,
    keys: &[&str],
    expected: &[&str],
) -> Checked {
    for &key in keys {
        let deferred = Queue::new(store, tp, key).deferred().await?;
        let what = format!("whether {key:?} has deferred offsets in {tp}");
        ensure_eq(&what, &expected.contains(&key), &deferred.is_some())?;
    }
    Ok(())
}

/// Checks the partition's counts (and `counts_now`, when it answers).
async fn expect_counts(store: &impl Stores, tp: &TopicPartition, expected: DeferCounts) -> Checked {
    let what = format!("counts({tp})");
    let got = call(&what, DeferStore::counts(store, tp)).await?;
    ensure_eq(&what, &expected, &got)?;
    if let Some(now) = DeferStore::counts_now(store, tp) {
        ensure_eq(&format!("counts_now({tp})"), &expected, &now)?;
    }
    Ok(())
}

/// Closes the partitions and opens them again: what a new owner reads.
async fn reopen(store: &impl Stores, partitions: &[TopicPartition]) -> Checked {
    for tp in partitions {
        store.close(tp);
    }
    for tp in partitions {
        call(&format!("open({tp}) again"), store.open(tp)).await?;
    }
    Ok(())
}

/// One key of one partition of the store under test.
struct Queue<'a, S> {
    store: &'a S,
    tp: TopicPartition,
    key: Key,
}

impl<'a, S: Stores> Queue<'a, S> {
    fn new(store: &'a S, tp: &TopicPartition, key: &str) -> Self {
        let (tp, key) = (tp.clone(), Key::from(key));
        Self { store, tp, key }
    }

    /// Commits one write of the queue.
    async fn write(&self, what: &str, write: DeferWrite) -> Checked {
        let batch = Batch::default().deferral(write);
        commit(self.store, what, &self.tp, batch).await
    }

    async fn defer(&self, offsets: &[i64], deferral: Deferral) -> Checked {
        let key = &self.key;
        for &offset in offsets {
            let what = format!("a defer of ({key:?}, {offset}, {deferral:?})");
            let write = DeferWrite::Defer {
                key: key.clone(),
                offset,
                deferral,
            };
            self.write(&what, write).await?;
        }
        Ok(())
    }

    /// The queue, after checking that `peek`, when it answers, agrees.
    async fn deferred(&self) -> Result<Option<Deferred>, Failure> {
        let Self { store, tp, key } = self;
        let deferred = call(
            &format!("deferred({tp}, {key:?})"),
            DeferStore::deferred(*store, tp, key),
        )
        .await?;
        if let Some(peeked) = DeferStore::peek(*store, tp, key) {
            let what = format!("peek({tp}, {key:?}) against deferred");
            ensure_eq(&what, &deferred.is_some(), &peeked)?;
        }
        Ok(deferred)
    }

    /// Checks the queue: `None` for nothing deferred, else the offsets and
    /// the head's failure count.
    async fn holds(&self, what: &str, expected: Option<(&[i64], u32)>) -> Checked {
        let expected = expected.map(|(offsets, failures)| Deferred {
            offsets: offsets.to_vec(),
            failures,
        });
        let what = format!("{what}: deferred({}, {:?})", self.tp, self.key);
        ensure_eq(&what, &expected, &self.deferred().await?)
    }

    /// Completes `offset`, then checks the queue's head (`None` for an
    /// empty queue).
    async fn complete(&self, offset: i64, head: Option<i64>) -> Checked {
        let key = &self.key;
        let what = format!("a complete of ({key:?}, {offset})");
        let write = DeferWrite::Complete {
            key: key.clone(),
            offset,
        };
        self.write(&what, write).await?;
        let got = self.deferred().await?.and_then(|queue| queue.head());
        ensure_eq(&format!("the head after {what}"), &head, &got)
    }

    /// Counts a failure, then checks the head's failure count (zero for a
    /// key with nothing deferred).
    async fn failed(&self, count: u32) -> Checked {
        let key = &self.key;
        let what = format!("a failure of ({key:?})");
        self.write(&what, DeferWrite::Failed { key: key.clone() })
            .await?;
        let got = self.deferred().await?.map_or(0, |queue| queue.failures);
        ensure_eq(&format!("the failure count after {what}"), &count, &got)
    }
}

/// Offsets deferred out of order and more than once read back ascending,
/// each once; deferring a queued offset again keeps the failure count; a
/// key never deferred has nothing deferred.
pub async fn offsets_are_ascending_and_unique(store: &impl Stores) -> Checked {
    let tp = Topics::new("ascending").partition("t", 0);
    let queue = Queue::new(store, &tp, "k");
    queue.holds("never deferred", None).await?;
    expect_keys(store, &tp, &["k"], &[]).await?;
    queue.defer(&[30, 10, 20, 10, 30, 20], Behind).await?;
    let what = "deferred as 30, 10, 20, 10, 30, 20";
    queue.holds(what, Some((&[10, 20, 30], 0))).await?;
    expect_keys(store, &tp, &["k"], &["k"]).await?;
    queue.failed(1).await?;
    queue.defer(&[10], AfterFailure).await?;
    queue.defer(&[20], Behind).await?;
    let what = "10 and 20 deferred again after a failure";
    queue.holds(what, Some((&[10, 20, 30], 1))).await
}

/// Completing the head removes it and leaves the next head, until the
/// queue is empty.
pub async fn complete_removes_the_head_and_returns_the_next(store: &impl Stores) -> Checked {
    let tp = Topics::new("complete").partition("t", 0);
    let queue = Queue::new(store, &tp, "k");
    queue.defer(&[5], AfterFailure).await?;
    queue.defer(&[7, 9], Behind).await?;
    queue.complete(5, Some(7)).await?;
    queue.holds("5 completed", Some((&[7, 9], 0))).await?;
    queue.complete(7, Some(9)).await?;
    queue.holds("7 completed", Some((&[9], 0))).await?;
    queue.complete(9, None).await
}

/// Completing an offset that is not the head, queued or not, changes
/// nothing (not even the failure count) and leaves the head; completing
/// for a key with nothing deferred leaves it with nothing deferred.
pub async fn complete_of_another_offset_changes_nothing(store: &impl Stores) -> Checked {
    let tp = Topics::new("non-head").partition("t", 0);
    let (queue, other) = (Queue::new(store, &tp, "k"), Queue::new(store, &tp, "o"));
    queue.defer(&[1], AfterFailure).await?;
    queue.defer(&[2, 3], Behind).await?;
    queue.failed(2).await?;
    for offset in [2, 3, 0, 4] {
        queue.complete(offset, Some(1)).await?;
        let what = format!("{offset}, not the head, completed");
        queue.holds(&what, Some((&[1, 2, 3], 2))).await?;
    }
    other.complete(1, None).await?;
    other.holds("completed, never deferred", None).await?;
    expect_keys(store, &tp, &["k", "o"], &["k"]).await
}

/// The failure count grows by one per failure and belongs to the head: a
/// failed deferral into an empty queue starts at one, a deferral behind
/// the head keeps it, the next head after a completion starts at zero (it
/// has not run), and an offset deferred in front starts with its
/// deferral's count; a failure of a key with nothing deferred leaves it
/// with nothing deferred.
pub async fn failure_count_follows_the_head(store: &impl Stores) -> Checked {
    let tp = Topics::new("failures").partition("t", 0);
    let queue = Queue::new(store, &tp, "k");
    queue.failed(0).await?;
    queue.holds("failed, never deferred", None).await?;
    expect_keys(store, &tp, &["k"], &[]).await?;
    queue.defer(&[10], AfterFailure).await?;
    queue
        .holds("10 deferred as failed", Some((&[10], 1)))
        .await?;
    for count in 2..=3 {
        queue.failed(count).await?;
    }
    queue.defer(&[20], Behind).await?;
    let what = "20 deferred behind a head that failed 3 times";
    queue.holds(what, Some((&[10, 20], 3))).await?;
    queue.defer(&[30], AfterFailure).await?;
    let what = "30 deferred as failed behind the head";
    queue.holds(what, Some((&[10, 20, 30], 3))).await?;
    queue.complete(10, Some(20)).await?;
    queue
        .holds("the head completed", Some((&[20, 30], 0)))
        .await?;
    queue.failed(1).await?;
    queue.defer(&[15], Behind).await?;
    let what = "15 deferred behind, in front of a head that failed once";
    queue.holds(what, Some((&[15, 20, 30], 0))).await?;
    queue.defer(&[5], AfterFailure).await?;
    let what = "5 deferred as failed in front of the head";
    queue.holds(what, Some((&[5, 15, 20, 30], 1))).await
}

/// A key whose last offset completes is gone from `deferred` (and `peek`);
/// deferring for it again starts a fresh queue.
pub async fn drained_keys_disappear(store: &impl Stores) -> Checked {
    let tp = Topics::new("drained").partition("t", 0);
    let (a, b) = (Queue::new(store, &tp, "a"), Queue::new(store, &tp, "b"));
    a.defer(&[1], AfterFailure).await?;
    b.defer(&[2], AfterFailure).await?;
    a.failed(2).await?;
    expect_keys(store, &tp, &["a", "b"], &["a", "b"]).await?;
    a.complete(1, None).await?;
    a.holds("drained", None).await?;
    expect_keys(store, &tp, &["a", "b"], &["b"]).await?;
    a.defer(&[3], Behind).await?;
    a.holds("drained, then deferred again", Some((&[3], 0)))
        .await?;
    a.complete(3, None).await?;
    b.complete(2, None).await?;
    expect_keys(store, &tp, &["a", "b"], &[]).await
}

/// The same key in another partition of the topic or the same partition of
/// another topic, and another key (the empty key among them), are separate
/// queues with separate failure counts.
pub async fn partitions_and_keys_are_independent(store: &impl Stores) -> Checked {
    let topics = Topics::new("independent");
    let [a0, a1, b0, b1] = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
        .map(|(topic, number)| topics.partition(topic, number));
    let queues =
        [(&a0, ""), (&a0, "k"), (&a1, ""), (&b0, "")].map(|(tp, key)| Queue::new(store, tp, key));
    // Queue i holds i + 1 offsets from 100 i, whose head failed i times.
    let offsets = |i: u32| (0..=i).map(|j| i64::from(100 * i + j)).collect::<Vec<_>>();
    for (queue, i) in queues.iter().zip(0..) {
        queue.defer(&offsets(i), Behind).await?;
        for count in 1..=i {
            queue.failed(count).await?;
        }
    }
    let check = |what: &'static str, skip: usize| {
        let queues = &queues;
        async move {
            for (queue, i) in queues.iter().zip(0..).skip(skip) {
                let what = format!("{what}, queue {i} of 0 to 3");
                queue.holds(&what, Some((&offsets(i), i))).await?;
            }
            Ok::<(), Failure>(())
        }
    };
    check("all deferred", 0).await?;
    expect_keys(store, &a0, &["", "k"], &["", "k"]).await?;
    for tp in [&a1, &b0] {
        expect_keys(store, tp, &["", "k"], &[""]).await?;
    }
    expect_keys(store, &b1, &["", "k"], &[]).await?;
    for (queue, i) in queues.iter().zip(0..).skip(1) {
        queue
            .complete(i64::from(100 * i + 1), Some(i64::from(100 * i)))
            .await?;
    }
    let [first, ..] = &queues;
    first.complete(0, None).await?;
    first.holds("drained", None).await?;
    check("another drained", 1).await
}

/// The counts follow every kind of write (a partition opened first, as
/// its owner does): a new offset adds a record, a new key a key; an
/// offset queued again, a completion of another offset than the head and
/// a failure change nothing; completing the head removes a record, the
/// last one a key. A reopened partition (a new owner) reads the same
/// counts.
pub async fn counts_follow_the_writes_and_survive_a_reopen(store: &impl Stores) -> Checked {
    let tp = Topics::new("counts").partition("t", 0);
    call(&format!("open({tp})"), store.open(&tp)).await?;
    let (a, b) = (Queue::new(store, &tp, "a"), Queue::new(store, &tp, "b"));
    let expect = |keys, records| expect_counts(store, &tp, DeferCounts { keys, records });
    expect(0, 0).await?;
    a.defer(&[10], AfterFailure).await?;
    expect(1, 1).await?;
    a.defer(&[12, 11], Behind).await?;
    expect(1, 3).await?;
    a.defer(&[11, 10], Behind).await?;
    a.failed(2).await?;
    expect(1, 3).await?;
    b.defer(&[20], AfterFailure).await?;
    expect(2, 4).await?;
    a.complete(12, Some(10)).await?;
    b.complete(21, Some(20)).await?;
    expect(2, 4).await?;
    reopen(store, std::slice::from_ref(&tp)).await?;
    expect(2, 4).await?;
    a.complete(10, Some(11)).await?;
    expect(2, 3).await?;
    b.complete(20, None).await?;
    expect(1, 2).await?;
    reopen(store, std::slice::from_ref(&tp)).await?;
    expect(1, 2).await?;
    a.complete(11, Some(12)).await?;
    a.complete(12, None).await?;
    expect(0, 0).await?;
    reopen(store, std::slice::from_ref(&tp)).await?;
    expect(0, 0).await
}

/// Runs every check; the failure names each check that failed.
pub async fn run_all(store: &impl Stores) -> Checked {
    let mut failures = Vec::new();
    macro_rules! run {
        ($($check:ident),* $(,)?) => {$(
            if let Err(failure) = $check(store).await {
                failures.push(format!("{}: {failure}", stringify!($check)));
            }
        )*};
    }
    run!(
        offsets_are_ascending_and_unique,
        complete_removes_the_head_and_returns_the_next,
        complete_of_another_offset_changes_nothing,
        failure_count_follows_the_head,
        drained_keys_disappear,
        partitions_and_keys_are_independent,
        counts_follow_the_writes_and_survive_a_reopen,
        random_interleaving_matches_the_model,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("\n")))
    }
}
