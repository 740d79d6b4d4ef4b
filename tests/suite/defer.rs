//! Deferred retry end to end, in pipeline mode on the in-memory broker and
//! stores under a paused clock: a property over random workloads with
//! transient failures and rebalances, and the failure-rate gate.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use crate::support;

use proptest::prelude::*;
use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::{
    MemoryBroker, MemoryDedupStore, MemoryDeferStore, MemoryStores, MemoryTimerStore, Mode,
    ProsodyClient,
};
use prosody_core::JsonCodec;
use std::time::Duration;
use support::{Probe, Script, TestHandler};

const TOPIC: &str = "events";
const GROUP: &str = "group";
const DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// What the members of one group share.
#[derive(Clone)]
struct Backends {
    broker: MemoryBroker,
    timers: MemoryTimerStore,
    deferred: MemoryDeferStore,
}

impl Backends {
    fn new(partitions: i32) -> Self {
        let broker = MemoryBroker::new();
        broker.create_topic(TOPIC, partitions).expect("topic");
        Self {
            broker,
            timers: MemoryTimerStore::new(),
            deferred: MemoryDeferStore::new(),
        }
    }

    async fn produce(&self, scripts: &[Script]) {
        let producer = self.broker.producer().expect("producer");
        for script in scripts {
            let payload = serde_json::to_vec(script).expect("encode");
            producer
                .send(
                    OutgoingRecord::new(TOPIC, script.key.clone(), payload),
                    Duration::from_secs(1),
                )
                .await
                .expect("send");
        }
    }

    /// A pipeline member consuming with a [`TestHandler`].
    async fn member(
        &self,
        probe: &Probe,
        id: u32,
        max_concurrency: usize,
    ) -> ProsodyClient<JsonCodec<Script>> {
        self.member_in(Mode::Pipeline, probe, id, max_concurrency)
            .await
    }

    /// A member of `mode` consuming with a [`TestHandler`].
    async fn member_in(
        &self,
        mode: Mode,
        probe: &Probe,
        id: u32,
        max_concurrency: usize,
    ) -> ProsodyClient<JsonCodec<Script>> {
        let client = ProsodyClient::builder()
            .mode(mode)
            .codec(JsonCodec::<Script>::new())
            .broker(self.broker.clone())
            .stores(MemoryStores::from_parts(
                self.timers.clone(),
                self.deferred.clone(),
                MemoryDedupStore::new(),
            ))
            .group_id(GROUP)
            .subscribed_topics([TOPIC])
            .max_concurrency(max_concurrency)
            .max_uncommitted(16)
            .defer_failure_threshold(0.9)
            .build()
            .await
            .expect("client");
        client
            .subscribe(TestHandler::new(probe.clone(), id))
            .await
            .expect("subscribe");
        client
    }

    /// The committed offset of each partition, and its end.
    fn commits(&self, partitions: i32) -> Vec<(Option<i64>, i64)> {
        (0..partitions)
            .map(|p| {
                let tp = TopicPartition::new(TOPIC, p);
                let end = self.broker.end_offset(&tp).expect("partition");
                (self.broker.committed_offset(GROUP, &tp), end)
            })
            .collect()
    }
}

#[derive(Clone, Debug)]
struct Workload {
    partitions: i32,
    max_concurrency: usize,
    records: Vec<Script>,
    /// A second member joins once this many records were handled; the
    /// first then leaves if the flag is set.
    rebalance: Option<(usize, bool)>,
}

fn workload() -> impl Strategy<Value = Workload> {
    (1..=4i32, 1..=8usize, 1..=16usize).prop_flat_map(|(partitions, conc, keys)| {
        // Most records succeed at once; a third fail one to three times.
        let failures = prop_oneof![6 => Just(0u32), 1 => Just(1), 1 => Just(2), 1 => Just(3)];
        let script = (0..keys, 0..20u64, failures).prop_map(|(key, latency_ms, failures)| Script {
            key: format!("key-{key}"),
            latency_ms,
            failures,
            id: None,
        });
        proptest::collection::vec(script, 1..120).prop_flat_map(move |records| {
            let n = records.len();
            proptest::option::of((0..n, any::<bool>())).prop_map(move |rebalance| Workload {
                partitions,
                max_concurrency: conc,
                records: records.clone(),
                rebalance,
            })
        })
    })
}

fn run(workload: &Workload) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let backends = Backends::new(workload.partitions);
        backends.produce(&workload.records).await;
        let probe = Probe::default();
        let conc = workload.max_concurrency;
        let mut live = vec![backends.member(&probe, 0, conc).await];
        let total = workload.records.len();
        if let Some((join_after, first_leaves)) = workload.rebalance {
            let reached = tokio::time::timeout(DEADLINE, probe.wait_handled(join_after)).await;
            prop_assert!(
                reached.is_ok(),
                "only {} of {join_after} handled",
                probe.handled()
            );
            live.push(backends.member(&probe, 1, conc).await);
            if first_leaves {
                live.remove(0).shutdown().await;
            }
        }
        let handled = tokio::time::timeout(DEADLINE, probe.wait_handled(total)).await;
        prop_assert!(
            handled.is_ok(),
            "only {} of {total} handled",
            probe.handled()
        );
        // The last backlog's timer is removed once its drain settles, and
        // a commit interval later every partition is committed to its end.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for (partition, (committed, end)) in
            backends.commits(workload.partitions).iter().enumerate()
        {
            let committed = committed.unwrap_or(0);
            prop_assert_eq!(
                committed,
                *end,
                "partition {} not committed to its end",
                partition
            );
        }
        probe.check(conc, workload.rebalance.is_some())?;
        prop_assert_eq!(
            backends.deferred.stored_keys(),
            0,
            "deferred offsets left behind"
        );
        prop_assert_eq!(
            backends.timers.stored_timers(),
            0,
            "defer timers left behind"
        );
        for member in live {
            member.shutdown().await;
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// With random per-key transient failures (and a member joining, and
    /// maybe the first leaving): every record succeeds, exactly once
    /// without a rebalance; the first successes of each key follow offset
    /// order; no key runs twice at once; every partition is committed to
    /// its end; and no deferred offset or defer timer is left behind.
    #[test]
    fn deferred_records_are_all_handled_in_key_order(workload in workload()) {
        run(&workload)?;
    }
}

/// A key failing for a while does not hold its partition: the committed
/// offset passes its deferred record while it waits, other keys' records
/// are handled, and the record itself succeeds later, after its key's
/// earlier records and before its later ones.
#[tokio::test(start_paused = true)]
async fn the_partition_advances_past_a_deferred_record() {
    let backends = Backends::new(1);
    let script = |key: &str, failures| Script {
        key: key.into(),
        latency_ms: 0,
        failures,
        id: None,
    };
    // Offset 0 fails four times (retried after 1, 2, 4 and 8 seconds).
    let mut records = vec![script("slow", 4)];
    records.extend((0..20).map(|n| script(&format!("fast-{n}"), 0)));
    records.push(script("slow", 0));
    backends.produce(&records).await;
    let probe = Probe::default();
    let member = backends.member(&probe, 0, 4).await;
    tokio::time::timeout(DEADLINE, probe.wait_handled(20))
        .await
        .expect("the other keys are handled");
    // A commit interval later; the slow key's retries are due at 1, 3, 7
    // and 15 seconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (committed, end) = backends.commits(1)[0];
    assert_eq!(committed, Some(end), "the partition did not advance");
    let waiting = probe.lock().succeeded.len();
    assert_eq!(waiting, 20, "the slow key ran before its retries were due");
    tokio::time::timeout(DEADLINE, probe.wait_handled(records.len()))
        .await
        .expect("the deferred records are handled");
    let successes = probe.lock().successes.clone();
    let slow: Vec<i64> = successes
        .iter()
        .filter(|(key, _, _)| key == "slow")
        .map(|(_, _, offset)| *offset)
        .collect();
    assert_eq!(slow, [0, 21], "the slow key's records out of order");
    assert_eq!(probe.lock().attempts[&(0, 0)], 5);
    probe.check(4, false).expect("invariants");
    member.shutdown().await;
}

/// Above the failure-rate threshold deferral stops: failures are retried
/// in place and the partition stops advancing until they stop.
#[tokio::test(start_paused = true)]
async fn above_the_failure_threshold_the_partition_stops_until_failures_stop() {
    let backends = Backends::new(1);
    let failing = 1_000;
    // Distinct keys: each failure is a new one, for the gate to weigh.
    let records: Vec<Script> = (0..30)
        .map(|n| Script {
            key: format!("key-{n}"),
            latency_ms: 0,
            failures: failing,
            id: None,
        })
        .collect();
    backends.produce(&records).await;
    let probe = Probe::default();
    let member = backends.member(&probe, 0, 8).await;
    // Everything fails: after a long while the partition still has not
    // reached its end, and a few records at most were deferred before the
    // gate closed.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let (committed, end) = backends.commits(1)[0];
    assert!(
        committed.unwrap_or(0) < end,
        "committed {committed:?} of {end} while every record fails"
    );
    assert!(
        backends.deferred.stored_keys() <= 10,
        "{} keys deferred past the gate",
        backends.deferred.stored_keys()
    );
    let stalled = committed;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(backends.commits(1)[0].0, stalled, "the partition moved");
    assert!(probe.handled() == 0);
    // Failures stop: every record is handled and committed.
    probe.lock().healed = true;
    tokio::time::timeout(DEADLINE, probe.wait_handled(records.len()))
        .await
        .expect("handled once failures stop");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (committed, end) = backends.commits(1)[0];
    assert_eq!(committed, Some(end));
    probe.check(8, false).expect("invariants");
    member.shutdown().await;
}

fn script(key: &str, failures: u32, id: Option<&str>) -> Script {
    Script {
        key: key.into(),
        latency_ms: 0,
        failures,
        id: id.map(str::to_owned),
    }
}

/// A record retried from a backlog passes the dedup stage: a duplicate of
/// it (same key and `id`) deferred behind it is skipped, not handled twice.
#[tokio::test(start_paused = true)]
async fn a_duplicate_behind_a_deferred_record_is_skipped() {
    let backends = Backends::new(1);
    let records = [
        script("k", 1, Some("x")),
        script("k", 0, Some("x")),
        script("k", 0, Some("y")),
    ];
    backends.produce(&records).await;
    let probe = Probe::default();
    let member = backends.member(&probe, 0, 4).await;
    tokio::time::timeout(DEADLINE, probe.wait_handled(2))
        .await
        .expect("handled");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let successes = probe.lock().successes.clone();
    let offsets: Vec<i64> = successes.iter().map(|(_, _, offset)| *offset).collect();
    assert_eq!(offsets, [0, 2], "the duplicate of x was handled");
    assert_eq!(backends.commits(1)[0], (Some(3), 3));
    assert_eq!(backends.deferred.stored_keys(), 0);
    member.shutdown().await;
}

/// A stack without the defer stage leaves a deferred backlog and its timer
/// in the stores (a defer timer reaching the handler fails permanently and
/// is logged, not removed); back in pipeline mode the backlog drains.
#[tokio::test(start_paused = true)]
async fn a_backlog_outlives_a_switch_to_a_mode_without_deferral() {
    let backends = Backends::new(1);
    backends.produce(&[script("k", 1, None)]).await;
    let probe = Probe::default();
    let first = backends.member(&probe, 0, 4).await;
    tokio::time::timeout(DEADLINE, async {
        while backends.deferred.stored_keys() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("deferred");
    first.shutdown().await;
    let best_effort = backends.member_in(Mode::BestEffort, &probe, 1, 4).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(probe.handled(), 0);
    assert_eq!(
        backends.deferred.stored_keys(),
        1,
        "the backlog was dropped"
    );
    assert_eq!(
        backends.timers.stored_timers(),
        1,
        "the defer timer was removed"
    );
    best_effort.shutdown().await;
    let again = backends.member(&probe, 2, 4).await;
    tokio::time::timeout(DEADLINE, probe.wait_handled(1))
        .await
        .expect("the backlog drains back in pipeline mode");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(backends.deferred.stored_keys(), 0);
    assert_eq!(backends.timers.stored_timers(), 0);
    again.shutdown().await;
}

/// One call: offset, attempt, demand, second of the clock.
type Call = (i64, u32, prosody::Demand, i64);

/// Records each call and fails the first attempt of every record.
#[derive(Clone, Default)]
struct FirstAttemptFails {
    calls: std::sync::Arc<std::sync::Mutex<Vec<Call>>>,
}

impl prosody::EventHandler for FirstAttemptFails {
    type Payload = serde_json::Value;
    type Output = ();

    async fn on_message(
        &self,
        context: prosody::Context,
        message: prosody::Message<serde_json::Value>,
    ) -> Result<(), prosody::HandlerError> {
        let now = prosody_core::clock::now().as_millis() / 1000;
        let call = (message.offset, context.attempt(), context.demand(), now);
        self.calls.lock().expect("calls").push(call);
        if context.attempt() == 1 {
            return Err(prosody::HandlerError::transient("first attempts fail"));
        }
        Ok(())
    }

    async fn on_timer(
        &self,
        _: prosody::Context,
        _: prosody::Timer,
    ) -> Result<(), prosody::HandlerError> {
        Ok(())
    }

    async fn on_excise(
        &self,
        _: prosody::Context,
        _: prosody::Excise,
    ) -> Result<(), prosody::HandlerError> {
        Ok(())
    }
}

/// A record set aside behind a deferred record of its key is fresh work
/// when its turn comes: attempt 1, normal demand, and if it fails, its
/// retry waits `defer_base`, as any first deferral does.
#[tokio::test(start_paused = true)]
async fn a_record_behind_a_deferral_starts_fresh() {
    use prosody::Demand::{Failure, Normal};
    let backends = Backends::new(1);
    let client = ProsodyClient::builder()
        .broker(backends.broker.clone())
        .group_id(GROUP)
        .source_system("upstream")
        .subscribed_topics([TOPIC])
        .defer_base(Duration::from_secs(3))
        .build()
        .await
        .expect("client");
    let handler = FirstAttemptFails::default();
    client.subscribe(handler.clone()).await.expect("subscribe");
    // Start on a whole second, so the second of each call is exact.
    let now = u64::try_from(prosody_core::clock::now().as_millis()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(1000 - now % 1000)).await;
    let start = prosody_core::clock::now().as_millis() / 1000;
    for n in 0..2 {
        client
            .send(TOPIC, "k", &serde_json::json!({ "n": n }))
            .await
            .expect("send");
    }
    // Until the second record succeeded (an attempt after its first).
    let done = async {
        while !handler
            .calls
            .lock()
            .expect("calls")
            .iter()
            .any(|c| c.0 == 1 && c.1 > 1)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, done)
        .await
        .expect("the second record succeeded");
    client.shutdown().await;
    let calls: Vec<_> = handler
        .calls
        .lock()
        .expect("calls")
        .iter()
        .map(|&(offset, attempt, demand, at)| (offset, attempt, demand, at - start))
        .collect();
    // Each retry comes 3 s after its failure, rounded up to the second.
    assert_eq!(
        calls,
        [
            (0, 1, Normal, 0),
            (0, 2, Failure, 3),
            (1, 1, Normal, 3),
            (1, 2, Failure, 6)
        ]
    );
}
