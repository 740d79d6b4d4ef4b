//! Keyed state through the whole client, on the memory backends under a
//! paused clock: random scripts of state operations per record, attempts
//! that fail, members that crash, join and leave, against a model.
//!
//! Invariants checked: every read inside an attempt equals the model's
//! (the store under the attempt's own writes, never a failed attempt's);
//! an attempt that succeeded is applied once, even when its record is
//! delivered again after a crash or its commit timed out after it landed;
//! and the store holds what the model's committed state says once the
//! run settles.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod errors;
mod landing;
mod messages;
mod model;
mod timers;

use futures_util::TryStreamExt;
use model::{CAPACITY, Model, Op, Read, Script};
use proptest::prelude::*;
use prosody::state::{DequeDef, Direction, MapDef, ValueDef};
use prosody::{Context, EventHandler, Excise, HandlerError, Key, Message, Timer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

static VALUE: ValueDef<i64> = ValueDef::new("value");
static MAP: MapDef<i64> = MapDef::new("map");
static DEQUE: DequeDef<i64> = DequeDef::new("deque").capacity(CAPACITY as u64);

const TOPIC: &str = "t";
/// How long a record may take to succeed: on the paused clock a day (a
/// record whose commits keep failing is deferred, with doubling delays);
/// on the real Cassandra two minutes.
const DEADLINE: Duration = Duration::from_secs(86_400);
const REAL_DEADLINE: Duration = Duration::from_secs(120);

/// A record's id, and its key's state once its commit lands.
type Tentative = (u64, Model);

/// What the handlers of every member share.
#[derive(Clone, Default)]
struct Shared {
    /// Each key's committed state, as the model says.
    committed: Arc<Mutex<HashMap<Key, Model>>>,
    /// Attempts per record id.
    attempts: Arc<Mutex<HashMap<u64, u32>>>,
    /// Records (by id) whose commit landed after writing state.
    applied: Arc<Mutex<HashMap<u64, u32>>>,
    /// What a key's state becomes once the commit of its record at an
    /// offset lands: (record id, state).
    tentative: Arc<Mutex<HashMap<(Key, i64), Tentative>>>,
    /// Each key's partition.
    partitions: Arc<Mutex<HashMap<Key, i32>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Scripted {
    shared: Shared,
    done: mpsc::UnboundedSender<u64>,
}

/// Whether an operation changes state (a pop of an empty deque too: it
/// clears it).
fn writes(op: &Op) -> bool {
    !matches!(
        op,
        Op::ValueGet
            | Op::MapGet(_)
            | Op::MapGetMany(_)
            | Op::MapContains(_)
            | Op::MapItems(_)
            | Op::MapKeys(_)
            | Op::MapValues
            | Op::PeekBack
            | Op::PeekFront
            | Op::DequeGet(_)
            | Op::DequeLen
            | Op::DequeValues(_)
            | Op::Commit(_)
            | Op::Rollback(_)
    )
}

fn direction(backward: bool) -> Direction {
    if backward {
        Direction::Backward
    } else {
        Direction::Forward
    }
}

/// Runs one operation on the store through the handles.
async fn run(context: &Context, op: &Op) -> Result<Read, HandlerError> {
    let (value, map, deque) = (
        context.state(&VALUE)?,
        context.state(&MAP)?,
        context.state(&DEQUE)?,
    );
    Ok(match op {
        Op::ValueGet => Read::Value(value.get().await?),
        Op::ValueSet(v) => {
            value.set(v).await?;
            Read::None
        }
        Op::ValueClear => {
            value.clear().await?;
            Read::None
        }
        Op::MapGet(k) => Read::Value(map.get(k).await?),
        Op::MapGetMany(ks) => {
            let ks: Vec<&str> = ks.iter().map(String::as_str).collect();
            Read::Values(map.get_many(&ks).await?)
        }
        Op::MapContains(k) => Read::Flag(map.contains(k).await?),
        Op::MapSet(k, v) => {
            map.set(k, v).await?;
            Read::None
        }
        Op::MapRemove(k) => {
            map.remove(k).await?;
            Read::None
        }
        Op::MapClear => {
            map.clear().await?;
            Read::None
        }
        Op::MapItems(back) => Read::Items(map.items(direction(*back)).try_collect().await?),
        Op::MapKeys(back) => Read::Keys(map.keys(direction(*back)).try_collect().await?),
        Op::MapValues => Read::List(map.values().try_collect().await?),
        Op::PushBack(v) => {
            deque.push_back(v).await?;
            Read::None
        }
        Op::PushFront(v) => {
            deque.push_front(v).await?;
            Read::None
        }
        Op::PopBack => Read::Value(deque.pop_back().await?),
        Op::PopFront => Read::Value(deque.pop_front().await?),
        Op::PeekBack => Read::Value(deque.peek_back().await?),
        Op::PeekFront => Read::Value(deque.peek_front().await?),
        Op::DequeGet(i) => Read::Value(deque.get(*i).await?),
        Op::DequeLen => Read::Len(deque.len().await?),
        Op::DequeValues(back) => Read::List(deque.values(direction(*back)).try_collect().await?),
        Op::DequeClear => {
            deque.clear().await?;
            Read::None
        }
        Op::Commit(0) => {
            value.commit().await?;
            Read::None
        }
        Op::Commit(1) => {
            map.commit().await?;
            Read::None
        }
        Op::Commit(_) => {
            deque.commit().await?;
            Read::None
        }
        Op::Rollback(0) => {
            value.rollback()?;
            Read::None
        }
        Op::Rollback(1) => {
            map.rollback()?;
            Read::None
        }
        Op::Rollback(_) => {
            deque.rollback()?;
            Read::None
        }
    })
}

impl EventHandler for Scripted {
    type Payload = (u64, Script);
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<(u64, Script)>,
    ) -> Result<(), HandlerError> {
        let (id, script) = message.payload;
        let key = context.key().clone();
        let shared = &self.shared;
        lock(&shared.partitions).insert(key.clone(), message.partition);
        let attempt = {
            let mut attempts = lock(&shared.attempts);
            let count = attempts.entry(id).or_default();
            *count += 1;
            *count
        };
        let committed = lock(&shared.committed)
            .get(&key)
            .cloned()
            .unwrap_or_default();
        let (mut pending, mut base) = (committed.clone(), committed);
        for (step, op) in script.ops.iter().enumerate() {
            let expected = match op {
                Op::Commit(which) => {
                    let mut all = lock(&shared.committed);
                    all.entry(key.clone()).or_default().take(&pending, *which);
                    base.take(&pending, *which);
                    Read::None
                }
                Op::Rollback(which) => {
                    pending.take(&base, *which);
                    Read::None
                }
                other => pending.apply(other),
            };
            let got = run(&context, op).await?;
            if got != expected {
                lock(&shared.errors).push(format!(
                    "record {id} ({key}) attempt {attempt} step {step} {op:?}: model {expected:?}, store {got:?}"
                ));
            }
        }
        if attempt <= script.failures {
            return Err(HandlerError::transient("a scripted failure"));
        }
        if script.ops.iter().any(writes) {
            // The stores promote it once the commit lands (`landing.rs`).
            lock(&shared.tentative).insert((key, message.offset), (id, pending));
        } else {
            let _ = self.done.send(id);
        }
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// What a scenario does, step by step.
#[derive(Clone, Debug)]
enum Step {
    /// Sends these records (key, script) and waits until each succeeded.
    Send(Vec<(u8, Script)>),
    /// Every member dies without draining; one new member starts.
    Crash,
    /// Another member joins (at most two run).
    Join,
    /// The oldest member leaves, draining (if another runs).
    Leave,
}

mod scenario;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn values_match_the_model(steps in scenario::steps(scenario::value_op())) {
        scenario::check(&steps)?;
    }

    #[test]
    fn maps_match_the_model(steps in scenario::steps(scenario::map_op())) {
        scenario::check(&steps)?;
    }

    #[test]
    fn deques_match_the_model(steps in scenario::steps(scenario::deque_op())) {
        scenario::check(&steps)?;
    }

    /// Every kind at once, with commits that fail before they write, or
    /// time out after they landed.
    #[test]
    fn unsure_commits_apply_once(
        steps in scenario::steps(prop_oneof![scenario::value_op(), scenario::map_op(), scenario::deque_op()].boxed()),
        seed in 1u64..,
    ) {
        scenario::check_faulty(&steps, seed)?;
    }
}

const SUITE: &str = "tests/suite/state (real Cassandra)";

/// The real Cassandra's stores, or `None` (after one line) without one.
async fn cassandra() -> Option<prosody_cassandra::CassandraStores> {
    let nodes =
        prosody_conformance::services::server(prosody_conformance::services::CASSANDRA, SUITE)?;
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let config = prosody_cassandra::CassandraConfig::new(nodes.split(','))
        .keyspace("prosody_state_model")
        .credentials(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        );
    Some(
        prosody_cassandra::CassandraStores::connect(&config, "g")
            .await
            .expect("Cassandra"),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// The same scenarios, every kind at once, on the real Cassandra.
    #[test]
    fn every_kind_matches_the_model_on_cassandra(
        steps in scenario::steps(prop_oneof![scenario::value_op(), scenario::map_op(), scenario::deque_op()].boxed()),
    ) {
        if prosody_conformance::services::server(prosody_conformance::services::CASSANDRA, SUITE).is_some() {
            scenario::check_on(&steps, || Box::pin(async { cassandra().await.expect("Cassandra") }))?;
        }
    }
}
