//! The model of the defer contract, and the replay of store writes against
//! it.

use super::{Checked, Queue, Topics, expect_counts, reopen};
use crate::broker::Failure;
use crate::store::ensure_eq;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::store::Stores;
use prosody_contracts::store::defer::Deferral::{self, AfterFailure, Behind};
use prosody_contracts::store::defer::{DeferCounts, Deferred};
use std::collections::{BTreeMap, BTreeSet};

/// Partitions of the model universe (see [`Op`]).
pub const PARTITIONS: usize = 3;

/// Keys of the model universe (see [`Op`]).
pub const KEYS: usize = 3;

/// One write (a commit of one [`DeferWrite`](prosody_contracts::store::DeferWrite)) of a [`replay`], on the queue of key `key % KEYS` in
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

/// The write of an [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`DeferWrite::Defer`](prosody_contracts::store::DeferWrite::Defer) of an offset.
    Defer(i64, Deferral),
    /// [`DeferWrite::Complete`](prosody_contracts::store::DeferWrite::Complete) of the queue's head (of offset 0 if the
    /// queue is empty).
    CompleteHead,
    /// [`DeferWrite::Complete`](prosody_contracts::store::DeferWrite::Complete) of an offset.
    Complete(i64),
    /// [`DeferWrite::Failed`](prosody_contracts::store::DeferWrite::Failed).
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

    /// The partition's keys with deferred offsets, and their offsets.
    fn counts(&self, partition: usize) -> DeferCounts {
        let queues = self.queues.iter().filter(|((p, _), _)| *p == partition);
        queues.fold(DeferCounts::default(), |counts, (_, (offsets, _))| {
            counts.changed(0, offsets.len())
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

/// Every queue of the universe (so every key that may have deferred
/// offsets), and every partition's counts, store against model.
async fn compare(store: &impl Stores, topics: &Topics, model: &Model) -> Checked {
    for p in 0..PARTITIONS {
        let tp = universe(topics, p);
        expect_counts(store, &tp, model.counts(p)).await?;
        for k in 0..KEYS {
            let queue = Queue::new(store, &tp, universe_key(k));
            let what = format!("deferred({tp}, {:?})", queue.key);
            ensure_eq(&what, &model.deferred((p, k)), &queue.deferred().await?)?;
        }
    }
    Ok(())
}

/// Steps between two reopens of a [`replay`]'s partitions.
const REOPEN_EVERY: usize = 25;

/// Runs `ops` against the store (in topics of its own, opened first, as an
/// owner does) and the model of the contract; after every step, what the
/// write's single call once returned (the head after a completion, the
/// count after a failure), then every queue and every partition's counts,
/// must match the model's. Every 25 steps and at the end,
/// the partitions are closed and opened again (a new owner reads them),
/// and everything must still match.
pub async fn replay(store: &impl Stores, ops: &[Op]) -> Checked {
    let topics = Topics::new("model");
    let mut model = Model::default();
    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| universe(&topics, p)).collect();
    for tp in &partitions {
        super::call(&format!("open({tp})"), store.open(tp)).await?;
    }
    for (step, op) in ops.iter().enumerate() {
        if step > 0 && step % REOPEN_EVERY == 0 {
            let in_step =
                |failure: Failure| Failure::new(format!("reopened before step {step}: {failure}"));
            reopen(store, &partitions).await.map_err(in_step)?;
            compare(store, &topics, &model).await.map_err(in_step)?;
        }
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
    reopen(store, &partitions).await?;
    compare(store, &topics, &model)
        .await
        .map_err(|failure| Failure::new(format!("reopened after the last step: {failure}")))
}

/// Seeded pseudo-random sequences of [`Op`]s over few offsets, so that
/// duplicates, out-of-order defers, drained and refilled keys all occur,
/// match the model ([`replay`]).
pub async fn random_interleaving_matches_the_model(store: &impl Stores) -> Checked {
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
