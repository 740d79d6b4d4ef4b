//! Scenario generators, and the run of one scenario against the model.

use super::landing::Landing;
use super::model::{Model, Op, Script};
use super::{DEADLINE, REAL_DEADLINE, Scripted, Shared, Step, TOPIC, lock};
use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prosody::broker::TopicPartition;
use prosody::store::{Direction, ItemRange, StateStore, Stores};
use prosody::{JsonCodec, Key, MemoryBroker, MemoryStores, ProsodyClient};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

const KEYS: [&str; 3] = ["a", "b", "c"];

pub fn value_op() -> BoxedStrategy<Op> {
    prop_oneof![
        3 => Just(Op::ValueGet),
        3 => (0i64..5).prop_map(Op::ValueSet),
        1 => Just(Op::ValueClear),
        1 => Just(Op::Commit(0)),
        1 => Just(Op::Rollback(0)),
    ]
    .boxed()
}

fn entry() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("x".to_owned()),
        Just("y".to_owned()),
        Just("yz".to_owned())
    ]
}

pub fn map_op() -> BoxedStrategy<Op> {
    prop_oneof![
        2 => entry().prop_map(Op::MapGet),
        1 => proptest::collection::vec(entry(), 0..3).prop_map(Op::MapGetMany),
        1 => entry().prop_map(Op::MapContains),
        4 => (entry(), 0i64..5).prop_map(|(k, v)| Op::MapSet(k, v)),
        2 => entry().prop_map(Op::MapRemove),
        1 => Just(Op::MapClear),
        2 => any::<bool>().prop_map(Op::MapItems),
        1 => any::<bool>().prop_map(Op::MapKeys),
        1 => Just(Op::MapValues),
        1 => Just(Op::Commit(1)),
        1 => Just(Op::Rollback(1)),
    ]
    .boxed()
}

pub fn deque_op() -> BoxedStrategy<Op> {
    prop_oneof![
        4 => (0i64..9).prop_map(Op::PushBack),
        2 => (0i64..9).prop_map(Op::PushFront),
        2 => Just(Op::PopFront),
        1 => Just(Op::PopBack),
        1 => Just(Op::PeekFront),
        1 => Just(Op::PeekBack),
        1 => (0u64..4).prop_map(Op::DequeGet),
        1 => Just(Op::DequeLen),
        2 => any::<bool>().prop_map(Op::DequeValues),
        1 => Just(Op::DequeClear),
        1 => Just(Op::Commit(2)),
        1 => Just(Op::Rollback(2)),
    ]
    .boxed()
}

fn script(op: BoxedStrategy<Op>) -> impl Strategy<Value = Script> {
    (
        proptest::collection::vec(op, 0..7),
        prop_oneof![4 => Just(0u32), 1 => 1u32..3],
    )
        .prop_map(|(ops, failures)| Script { ops, failures })
}

pub fn steps(op: BoxedStrategy<Op>) -> impl Strategy<Value = Vec<Step>> {
    let send = proptest::collection::vec((0u8..3, script(op)), 1..5).prop_map(Step::Send);
    proptest::collection::vec(
        prop_oneof![
            6 => send,
            1 => Just(Step::Crash),
            1 => Just(Step::Join),
            1 => Just(Step::Leave),
        ],
        1..8,
    )
}

type Client = ProsodyClient<JsonCodec<(u64, Script)>>;

struct World<S> {
    broker: MemoryBroker,
    stores: Landing<S>,
    topic: String,
    shared: Shared,
    done: mpsc::UnboundedSender<u64>,
    /// Where each member's disk cache goes, if members have one.
    disk: Option<Disks>,
}

/// A directory of members' disk caches, removed with the scenario.
struct Disks {
    base: std::path::PathBuf,
    made: std::sync::atomic::AtomicU64,
}

impl Drop for Disks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl<S: Stores> World<S> {
    async fn member(&self) -> Client {
        let mut builder = ProsodyClient::builder()
            .codec(JsonCodec::<(u64, Script)>::new())
            .broker(self.broker.clone())
            .stores(self.stores.clone())
            .group_id("g")
            .source_system("upstream")
            .subscribed_topics([self.topic.as_str()])
            .state_collections([super::VALUE.spec(), super::MAP.spec(), super::DEQUE.spec()]);
        if let Some(disks) = &self.disk {
            let n = disks
                .made
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            builder = builder.state_cache_dir(disks.base.join(n.to_string()));
        }
        let client = builder.build().await.expect("client");
        client
            .subscribe(Scripted {
                shared: self.shared.clone(),
                done: self.done.clone(),
            })
            .await
            .expect("subscribe");
        client
    }
}

/// Runs one scenario on the memory stores under a paused clock; the
/// failure names what differed.
pub fn check(steps: &[Step]) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    runtime.block_on(scenario(
        steps,
        MemoryStores::new(),
        TOPIC.to_owned(),
        (None, DEADLINE, false),
    ))
}

/// [`check`] with unsure commits, drawn from `seed`.
pub fn check_faulty(steps: &[Step], seed: u64) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    runtime.block_on(scenario(
        steps,
        MemoryStores::new(),
        TOPIC.to_owned(),
        (Some(seed), DEADLINE, true),
    ))
}

/// Runs one scenario on `stores` (the real Cassandra's, say) in real time,
/// on a topic of its own.
pub fn check_on<S: Stores>(
    steps: &[Step],
    stores: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = S>>>,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    runtime.block_on(async {
        let stores = stores().await;
        scenario(
            steps,
            stores,
            prosody_conformance::services::unique("state_model"),
            (None, REAL_DEADLINE, true),
        )
        .await
    })
}

async fn scenario<S: Stores>(
    steps: &[Step],
    stores: S,
    topic: String,
    (faults, deadline, disk): (Option<u64>, Duration, bool),
) -> Result<(), TestCaseError> {
    let broker = MemoryBroker::new();
    broker.create_topic(&topic, 2).expect("topic");
    let (done, mut succeeded) = mpsc::unbounded_channel();
    let shared = Shared::default();
    let world = World {
        broker,
        stores: Landing {
            inner: stores,
            shared: shared.clone(),
            done: done.clone(),
            faults: faults.map(|seed| Arc::new(Mutex::new(seed))),
            unsure_timers: Arc::default(),
        },
        disk: disk.then(|| Disks {
            base: std::env::temp_dir()
                .join(prosody_conformance::services::unique("prosody_state_disks")),
            made: std::sync::atomic::AtomicU64::new(0),
        }),
        topic,
        shared,
        done,
    };
    let sender = ProsodyClient::builder()
        .codec(JsonCodec::<(u64, Script)>::new())
        .broker(world.broker.clone())
        .stores(MemoryStores::new())
        .group_id("sender")
        .build()
        .await
        .expect("sender");
    let mut members = vec![world.member().await];
    let mut next_id = 0u64;
    for step in steps {
        match step {
            Step::Send(records) => {
                let mut waiting = HashSet::new();
                for (key, script) in records {
                    next_id += 1;
                    waiting.insert(next_id);
                    let payload = (next_id, script.clone());
                    sender
                        .send(&world.topic, KEYS[usize::from(*key)], &payload)
                        .await
                        .expect("send");
                }
                while !waiting.is_empty() {
                    let id = tokio::time::timeout(deadline, succeeded.recv())
                        .await
                        .map_err(|_| {
                            TestCaseError::fail(format!("records {waiting:?} never succeeded"))
                        })?
                        .ok_or_else(|| TestCaseError::fail("the handlers are gone"))?;
                    waiting.remove(&id);
                }
            }
            Step::Crash => {
                members.clear();
                members.push(world.member().await);
            }
            Step::Join if members.len() < 2 => members.push(world.member().await),
            Step::Leave if members.len() > 1 => members.remove(0).shutdown().await,
            Step::Join | Step::Leave => {}
        }
    }
    for member in members {
        member.shutdown().await;
    }
    let errors = lock(&world.shared.errors).clone();
    prop_assert!(errors.is_empty(), "{}", errors.join("\n"));
    let committed = lock(&world.shared.committed).clone();
    let partitions = lock(&world.shared.partitions).clone();
    for (key, model) in committed {
        let p = TopicPartition::new(
            world.topic.as_str(),
            partitions.get(&key).copied().unwrap_or(0),
        );
        let held = stored(&world.stores.inner, &p, &key).await?;
        prop_assert_eq!(&held, &model, "the store's state of {} after the run", key);
    }
    Ok(())
}

/// What the store holds for `key`, read cold (no attempt, no cache).
async fn stored(
    stores: &impl StateStore,
    p: &TopicPartition,
    key: &Key,
) -> Result<Model, TestCaseError> {
    let fail = |e: prosody::store::StoreError| TestCaseError::fail(e.to_string());
    let decode = |bytes: &Bytes| {
        serde_json::from_slice::<i64>(bytes).map_err(|e| TestCaseError::fail(e.to_string()))
    };
    let value = match stores.cell(p, "value", key, &[]).await.map_err(fail)? {
        Some(bytes) => Some(decode(&bytes)?),
        None => None,
    };
    let mut map = BTreeMap::new();
    for (item, bytes) in stores
        .cells(p, "map", key, &ItemRange::all(), Direction::Forward, 1000)
        .await
        .map_err(fail)?
    {
        let entry =
            String::from_utf8(item.to_vec()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        map.insert(entry, decode(&bytes)?);
    }
    // The deque's slots, past its bounds (the empty item).
    let slots = ItemRange {
        from: Bytes::from_static(b"\0"),
        until: None,
    };
    let deque: VecDeque<i64> = stores
        .cells(p, "deque", key, &slots, Direction::Forward, 1000)
        .await
        .map_err(fail)?
        .iter()
        .map(|(_, bytes)| decode(bytes))
        .collect::<Result<_, _>>()?;
    Ok(Model { value, map, deque })
}
