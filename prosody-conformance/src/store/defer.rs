//! The [`DeferStore`] conformance suite.
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

pub use super::DEADLINE;
use super::{Checked, call, ensure_eq};
use crate::broker::Failure;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::Deferral::{self, AfterFailure, Behind};
use prosody_contracts::store::defer::{DeferStore, Deferred};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
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

/// The partition's keys, sorted (the contract leaves the order open).
async fn keys(store: &impl DeferStore, tp: &TopicPartition) -> Result<Vec<Key>, Failure> {
    let mut keys = call(&format!("keys({tp})"), store.keys(tp)).await?;
    keys.sort();
    Ok(keys)
}

/// Checks the partition's keys against `expected`, given in order.
async fn expect_keys(store: &impl DeferStore, tp: &TopicPartition, expected: &[&str]) -> Checked {
    let expected: Vec<Key> = expected.iter().map(|&key| Key::from(key)).collect();
    ensure_eq(&format!("keys({tp})"), &expected, &keys(store, tp).await?)
}

/// One key of one partition of the store under test.
struct Queue<'a, S> {
    store: &'a S,
    tp: TopicPartition,
    key: Key,
}

impl<'a, S: DeferStore> Queue<'a, S> {
    fn new(store: &'a S, tp: &TopicPartition, key: &str) -> Self {
        let (tp, key) = (tp.clone(), Key::from(key));
        Self { store, tp, key }
    }

    async fn defer(&self, offsets: &[i64], deferral: Deferral) -> Checked {
        let Self { store, tp, key } = self;
        for &offset in offsets {
            let what = format!("defer({tp}, {key:?}, {offset}, {deferral:?})");
            call(&what, store.defer(tp, key, offset, deferral)).await?;
        }
        Ok(())
    }

    /// The queue, after checking that `peek`, when it answers, agrees.
    async fn deferred(&self) -> Result<Option<Deferred>, Failure> {
        let Self { store, tp, key } = self;
        let deferred = call(&format!("deferred({tp}, {key:?})"), store.deferred(tp, key)).await?;
        if let Some(peeked) = store.peek(tp, key) {
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

    /// Completes `offset` and checks the head it returns.
    async fn complete(&self, offset: i64, head: Option<i64>) -> Checked {
        let Self { store, tp, key } = self;
        let what = format!("complete({tp}, {key:?}, {offset})");
        let got = call(&what, store.complete(tp, key, offset)).await?;
        ensure_eq(&what, &head, &got)
    }

    /// Counts a failure and checks the count it returns.
    async fn failed(&self, count: u32) -> Checked {
        let Self { store, tp, key } = self;
        let what = format!("failed({tp}, {key:?})");
        ensure_eq(&what, &count, &call(&what, store.failed(tp, key)).await?)
    }
}

/// Offsets deferred out of order and more than once read back ascending,
/// each once; deferring a queued offset again keeps the failure count; a
/// key never deferred has nothing deferred.
pub async fn offsets_are_ascending_and_unique(store: &impl DeferStore) -> Checked {
    let tp = Topics::new("ascending").partition("t", 0);
    let queue = Queue::new(store, &tp, "k");
    queue.holds("never deferred", None).await?;
    expect_keys(store, &tp, &[]).await?;
    queue.defer(&[30, 10, 20, 10, 30, 20], Behind).await?;
    let what = "deferred as 30, 10, 20, 10, 30, 20";
    queue.holds(what, Some((&[10, 20, 30], 0))).await?;
    expect_keys(store, &tp, &["k"]).await?;
    queue.failed(1).await?;
    queue.defer(&[10], AfterFailure).await?;
    queue.defer(&[20], Behind).await?;
    let what = "10 and 20 deferred again after a failure";
    queue.holds(what, Some((&[10, 20, 30], 1))).await
}

/// Completing the head removes it and returns the next head, until the
/// queue is empty.
pub async fn complete_removes_the_head_and_returns_the_next(store: &impl DeferStore) -> Checked {
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
/// nothing (not even the failure count) and returns the head; completing
/// for a key with nothing deferred returns `None` and leaves no trace.
pub async fn complete_of_another_offset_changes_nothing(store: &impl DeferStore) -> Checked {
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
    expect_keys(store, &tp, &["k"]).await
}

/// The failure count grows by one per `failed` and belongs to the head: a
/// failed deferral into an empty queue starts at one, a deferral behind
/// the head keeps it, the next head after a completion starts at zero (it
/// has not run), and an offset deferred in front starts with its
/// deferral's count; `failed` for a key with nothing deferred returns zero
/// and leaves no trace.
pub async fn failure_count_follows_the_head(store: &impl DeferStore) -> Checked {
    let tp = Topics::new("failures").partition("t", 0);
    let queue = Queue::new(store, &tp, "k");
    queue.failed(0).await?;
    queue.holds("failed, never deferred", None).await?;
    expect_keys(store, &tp, &[]).await?;
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

/// A key whose last offset completes is gone from `deferred` and `keys`;
/// deferring for it again starts a fresh queue.
pub async fn drained_keys_disappear(store: &impl DeferStore) -> Checked {
    let tp = Topics::new("drained").partition("t", 0);
    let (a, b) = (Queue::new(store, &tp, "a"), Queue::new(store, &tp, "b"));
    a.defer(&[1], AfterFailure).await?;
    b.defer(&[2], AfterFailure).await?;
    a.failed(2).await?;
    expect_keys(store, &tp, &["a", "b"]).await?;
    a.complete(1, None).await?;
    a.holds("drained", None).await?;
    expect_keys(store, &tp, &["b"]).await?;
    a.defer(&[3], Behind).await?;
    a.holds("drained, then deferred again", Some((&[3], 0)))
        .await?;
    a.complete(3, None).await?;
    b.complete(2, None).await?;
    expect_keys(store, &tp, &[]).await
}

/// The same key in another partition of the topic or the same partition of
/// another topic, and another key (the empty key among them), are separate
/// queues with separate failure counts.
pub async fn partitions_and_keys_are_independent(store: &impl DeferStore) -> Checked {
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
    expect_keys(store, &a0, &["", "k"]).await?;
    for tp in [&a1, &b0] {
        expect_keys(store, tp, &[""]).await?;
    }
    expect_keys(store, &b1, &[]).await?;
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

/// Partitions of the model universe (see [`Op`]).
pub const PARTITIONS: usize = 3;

/// Keys of the model universe (see [`Op`]).
pub const KEYS: usize = 3;

/// One store call of a [`replay`], on the queue of key `key % KEYS` in
/// partition `partition % PARTITIONS` of the replay's universe: partitions
/// 0 and 1 are two partitions of one topic, partition 2 is partition 0 of
/// another topic; key 0 is the empty key, key 2 is not ASCII.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The partition's index.
    pub partition: usize,
    /// The key's index.
    pub key: usize,
    /// The call.
    pub call: Call,
}

/// The store call of an [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`DeferStore::defer`] of an offset.
    Defer(i64, Deferral),
    /// [`DeferStore::complete`] of the queue's head (of offset 0 if the
    /// queue is empty).
    CompleteHead,
    /// [`DeferStore::complete`] of an offset.
    Complete(i64),
    /// [`DeferStore::failed`].
    Failed,
}

/// The contract, executed: queues by (partition index, key index), with
/// their heads' failure counts; never an empty queue.
#[derive(Debug, Default)]
struct Model {
    queues: BTreeMap<(usize, usize), (BTreeSet<i64>, u32)>,
}

impl Model {
    fn head(&self, at: (usize, usize)) -> Option<i64> {
        let (offsets, _) = self.queues.get(&at)?;
        offsets.first().copied()
    }

    fn defer(&mut self, at: (usize, usize), offset: i64, deferral: Deferral) {
        let (offsets, failures) = self.queues.entry(at).or_default();
        if offsets.insert(offset) && offsets.first() == Some(&offset) {
            *failures = deferral.failures();
        }
    }

    fn complete(&mut self, at: (usize, usize), offset: i64) -> Option<i64> {
        if let Some((offsets, failures)) = self.queues.get_mut(&at)
            && offsets.first() == Some(&offset)
        {
            offsets.pop_first();
            *failures = 0;
            if offsets.is_empty() {
                self.queues.remove(&at);
            }
        }
        self.head(at)
    }

    fn failed(&mut self, at: (usize, usize)) -> u32 {
        self.queues.get_mut(&at).map_or(0, |(_, failures)| {
            *failures = failures.saturating_add(1);
            *failures
        })
    }

    fn deferred(&self, at: (usize, usize)) -> Option<Deferred> {
        self.queues.get(&at).map(|(offsets, failures)| Deferred {
            offsets: offsets.iter().copied().collect(),
            failures: *failures,
        })
    }
}

/// The partitions of a replay's universe (see [`Op`]).
fn universe(topics: &Topics, index: usize) -> TopicPartition {
    match index % PARTITIONS {
        0 => topics.partition("a", 0),
        1 => topics.partition("a", 1),
        _ => topics.partition("b", 0),
    }
}

/// The keys of a replay's universe (see [`Op`]).
fn universe_key(index: usize) -> &'static str {
    match index % KEYS {
        0 => "",
        1 => "user-1",
        _ => "ключ-2",
    }
}

/// Every queue and every partition's keys, store against model.
async fn compare(store: &impl DeferStore, topics: &Topics, model: &Model) -> Checked {
    for p in 0..PARTITIONS {
        let tp = universe(topics, p);
        let mut expected = Vec::new();
        for k in 0..KEYS {
            let queue = Queue::new(store, &tp, universe_key(k));
            let modelled = model.deferred((p, k));
            if modelled.is_some() {
                expected.push(universe_key(k));
            }
            let what = format!("deferred({tp}, {:?})", queue.key);
            ensure_eq(&what, &modelled, &queue.deferred().await?)?;
        }
        expected.sort_unstable();
        expect_keys(store, &tp, &expected).await?;
    }
    Ok(())
}

/// Runs `ops` against the store (in topics of its own) and the model of the
/// contract; after every step, the call's result and then every queue and
/// every partition's keys must match the model's.
pub async fn replay(store: &impl DeferStore, ops: &[Op]) -> Checked {
    let topics = Topics::new("model");
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let at = (op.partition % PARTITIONS, op.key % KEYS);
        let queue = Queue::new(store, &universe(&topics, at.0), universe_key(at.1));
        let in_step = |failure: Failure| Failure::new(format!("step {step}, {op:?}: {failure}"));
        // The model first: its results are what the store must return.
        let checked = match op.call {
            Call::Defer(offset, deferral) => {
                model.defer(at, offset, deferral);
                queue.defer(&[offset], deferral).await
            }
            Call::CompleteHead => {
                let offset = model.head(at).unwrap_or(0);
                queue.complete(offset, model.complete(at, offset)).await
            }
            Call::Complete(offset) => queue.complete(offset, model.complete(at, offset)).await,
            Call::Failed => queue.failed(model.failed(at)).await,
        };
        checked.map_err(in_step)?;
        compare(store, &topics, &model).await.map_err(in_step)?;
    }
    Ok(())
}

/// Seeded pseudo-random sequences of [`Op`]s over few offsets, so that
/// duplicates, out-of-order defers, drained and refilled keys all occur,
/// match the model ([`replay`]).
pub async fn random_interleaving_matches_the_model(store: &impl DeferStore) -> Checked {
    const STEPS: usize = 200;
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x2545_f491_4f6c_dd1d, 42] {
        // xorshift64: deterministic, and enough to shuffle store calls.
        let mut state = seed;
        let mut next = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let ops: Vec<Op> = (0..STEPS)
            .map(|_| {
                let kind = next(10);
                let [partition, key] = [next(3), next(3)].map(|i| usize::try_from(i).unwrap_or(0));
                let offset = i64::try_from(next(8)).unwrap_or(0);
                let call = match kind {
                    0 | 1 => Call::Defer(offset, AfterFailure),
                    2 | 3 => Call::Defer(offset, Behind),
                    4..=6 => Call::CompleteHead,
                    7 => Call::Complete(offset),
                    _ => Call::Failed,
                };
                Op {
                    partition,
                    key,
                    call,
                }
            })
            .collect();
        replay(store, &ops)
            .await
            .map_err(|failure| Failure::new(format!("seed {seed:#x}: {failure}")))?;
    }
    Ok(())
}

/// Runs every check; the failure names each check that failed.
pub async fn run_all(store: &impl DeferStore) -> Checked {
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
        random_interleaving_matches_the_model,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("\n")))
    }
}
