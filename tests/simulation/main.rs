//! The whole system under faults, simulated: each scenario comes from one
//! `u64` seed (see `scenario.rs`) and runs the real runtime, stack and
//! in-memory broker and stores under a paused clock, with members joining,
//! leaving and crashing (dropped without draining) while records fail,
//! panic, schedule timers and repeat. A checker then compares what happened
//! with what the library promises.
//!
//! `SIM_SCENARIOS=n` runs seeds `0..n` (default 1,000); `SIM_SEED=s` runs one
//! seed. A failing seed prints the command that replays it.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::cast_possible_truncation,
    reason = "test code fails loudly"
)]

mod handler;
mod scenario;

use handler::{Observed, Probe, SimHandler};
use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::{MemoryBroker, MemoryDedupStore, MemoryDeferStore, MemoryTimerStore, ProsodyClient};
use prosody_core::JsonCodec;
use scenario::{Change, Scenario, Script};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const TOPIC: &str = "events";
const GROUP: &str = "group";
/// Virtual time a scenario may take: its timers are at most a minute out
/// and its retries back off for minutes at most.
const DEADLINE: Duration = Duration::from_secs(3600);

/// Failing scenarios reported before the run stops.
const REPORTED: usize = 5;

type Client = ProsodyClient<JsonCodec<Script>>;

struct World {
    broker: MemoryBroker,
    timers: MemoryTimerStore,
    deferred: MemoryDeferStore,
    dedup: MemoryDedupStore,
    probe: Probe,
    max_concurrency: usize,
}

impl World {
    async fn member(&self) -> Client {
        let client = ProsodyClient::builder()
            .codec(JsonCodec::<Script>::new())
            .memory_broker(self.broker.clone())
            .memory_timer_store(self.timers.clone())
            .memory_defer_store(self.deferred.clone())
            .memory_dedup_store(self.dedup.clone())
            .group_id(GROUP)
            .subscribed_topics([TOPIC])
            .max_concurrency(self.max_concurrency)
            .max_uncommitted(16)
            .build()
            .await
            .expect("client");
        let handler = SimHandler {
            probe: self.probe.clone(),
        };
        client.subscribe(handler).await.expect("subscribe");
        client
    }
}

/// Whether every record has reached its end: succeeded, failed for good,
/// or skipped as the duplicate (by id) of one that succeeded.
fn settled(records: &[Script], observed: &Observed) -> usize {
    let succeeded_ids: HashSet<&str> = records
        .iter()
        .filter(|r| observed.succeeded.contains(&r.n))
        .filter_map(|r| r.id.as_deref())
        .collect();
    records
        .iter()
        .filter(|r| {
            observed.succeeded.contains(&r.n)
                || observed.failed_for_good.contains(&r.n)
                || r.id.as_deref().is_some_and(|id| succeeded_ids.contains(id))
        })
        .count()
}

/// The timers that must fire: kept by a successful attempt.
fn all_fired(observed: &Observed) -> bool {
    let fired: HashSet<(&str, i64)> = observed
        .fired
        .iter()
        .map(|(key, at, _)| (key.as_str(), *at))
        .collect();
    observed
        .timers_kept
        .iter()
        .all(|(key, at)| fired.contains(&(key.as_str(), *at)))
}

async fn simulate(seed: u64) -> Result<(), String> {
    let scenario = Scenario::generate(seed);
    let world = World {
        broker: MemoryBroker::new(),
        timers: MemoryTimerStore::new(),
        deferred: MemoryDeferStore::new(),
        dedup: MemoryDedupStore::new(),
        probe: Probe::default(),
        max_concurrency: scenario.max_concurrency,
    };
    world
        .broker
        .create_topic(TOPIC, scenario.partitions)
        .expect("topic");
    let producer = world.broker.producer().expect("producer");
    for script in &scenario.records {
        let payload = serde_json::to_vec(script).expect("encode");
        producer
            .send(
                OutgoingRecord::new(TOPIC, script.key.clone(), payload),
                Duration::from_secs(1),
            )
            .await
            .expect("send");
    }

    let records = &scenario.records;
    let mut live = vec![world.member().await];
    for &(after, change) in &scenario.changes {
        let reached = tokio::time::timeout(
            DEADLINE,
            world.probe.until(|o| settled(records, o) >= after),
        )
        .await;
        if reached.is_err() {
            return Err(format!("stuck before a {change:?} after {after} records"));
        }
        match change {
            Change::Join => live.push(world.member().await),
            Change::Leave if live.len() > 1 => live.remove(0).shutdown().await,
            Change::Leave => {}
            Change::Crash => {
                drop(live.remove(0));
                live.push(world.member().await);
            }
        }
    }
    let done = tokio::time::timeout(
        DEADLINE,
        world
            .probe
            .until(|o| settled(records, o) == records.len() && all_fired(o)),
    )
    .await;
    // A commit interval, for the last offsets to be committed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let result = check(&scenario, &world, done.is_ok());
    for member in live {
        member.shutdown().await;
    }
    result
}

/// The promises, against what was observed.
fn check(scenario: &Scenario, world: &World, finished: bool) -> Result<(), String> {
    let observed = world.probe.lock();
    let records = &scenario.records;
    if !observed.violations.is_empty() {
        return Err(format!("violations: {:?}", observed.violations));
    }
    if !finished {
        let left: Vec<u64> = records
            .iter()
            .map(|r| r.n)
            .filter(|n| !observed.succeeded.contains(n) && !observed.failed_for_good.contains(n))
            .collect();
        return Err(format!(
            "not everything settled: records {left:?} (duplicates by id aside), timers kept {:?}, fired {:?}",
            observed.timers_kept, observed.fired
        ));
    }
    // Per key, the first success of each record follows offset order.
    let mut first = HashSet::new();
    let mut last: HashMap<&str, (i32, i64)> = HashMap::new();
    for (key, partition, offset, _) in &observed.successes {
        if !first.insert((*partition, *offset)) {
            continue;
        }
        if let Some(&(p, o)) = last.get(key.as_str()) {
            if p != *partition || o >= *offset {
                let history: Vec<_> = observed
                    .successes
                    .iter()
                    .filter(|(k, ..)| k == key)
                    .map(|(_, p, o, n)| (*p, *o, *n))
                    .collect();
                return Err(format!(
                    "key {key}: offset {offset} handled first after {o}; successes (partition, offset, record) {history:?}"
                ));
            }
        }
        last.insert(key, (*partition, *offset));
    }
    // Timers fire at or after their time, and a failed attempt's never.
    for (key, at, fired_at) in &observed.fired {
        if fired_at < at {
            return Err(format!("timer {key}@{at} fired early, at {fired_at}"));
        }
        let kept = observed.timers_kept.contains(&(key.clone(), *at));
        if !kept && observed.timers_dropped.contains(&(key.clone(), *at)) {
            return Err(format!("timer {key}@{at} of a failed attempt fired"));
        }
    }
    // Every partition is committed to its end.
    for partition in 0..scenario.partitions {
        let tp = TopicPartition::new(TOPIC, partition);
        let end = world.broker.end_offset(&tp).expect("partition");
        let committed = world.broker.committed_offset(GROUP, &tp).unwrap_or(0);
        if committed != end {
            return Err(format!(
                "partition {partition} committed to {committed} of {end}"
            ));
        }
    }
    Ok(())
}

fn run(seed: u64) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(simulate(seed))
}

fn setting(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn scenarios_keep_every_promise() {
    let seeds: Vec<u64> = match setting("SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..setting("SIM_SCENARIOS").unwrap_or(1_000)).collect(),
    };
    // Scripted panics are expected: keep them out of the output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures: Vec<(u64, String)> = Vec::new();
    for &seed in &seeds {
        if failures.len() == REPORTED {
            break;
        }
        if let Err(problem) = run(seed) {
            failures.push((seed, problem));
        }
    }
    std::panic::set_hook(hook);
    let Some(&(first, _)) = failures.first() else {
        return;
    };
    let report: Vec<String> = failures
        .iter()
        .map(|(seed, problem)| {
            format!(
                "seed {seed}: {problem}\n  replay: SIM_SEED={seed} cargo test --test simulation"
            )
        })
        .collect();
    panic!(
        "{} failing scenarios (a run stops at {REPORTED}):\n{}\nthe first one: {:#?}",
        failures.len(),
        report.join("\n"),
        Scenario::generate(first)
    );
}
