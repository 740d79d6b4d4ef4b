//! Whole-runtime properties over random workloads, on the in-memory broker
//! under a paused clock: every record is handled, per-key order and
//! exclusivity hold, commits never pass an unsettled record, and paused
//! partitions resume.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use crate::support;

use proptest::prelude::*;
use prosody::broker::{Broker, ConsumerConfig, OutgoingRecord, Producer, TopicPartition};
use prosody::{MemoryBroker, MemoryStores};
use prosody_core::scheduler::{SchedulerConfig, SchedulerLayer};
use prosody_core::{Event, EventRequest, HandlerService, Runtime, RuntimeConfig};
use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use support::{Probe, ProbedConsumer, Script, TestHandler};
use tower::{Layer, Service};

const TOPIC: &str = "events";
const GROUP: &str = "group";
const DEADLINE: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Debug)]
struct Workload {
    partitions: i32,
    max_concurrency: usize,
    max_uncommitted: usize,
    records: Vec<Script>,
    /// Records produced after the consumer started.
    late: usize,
    /// A second member joins once this many records were handled; the
    /// first then leaves if the flag is set.
    rebalance: Option<(usize, bool)>,
    /// What sits around the scheduler.
    outer: Outer,
}

/// A stage around the scheduler, to try the runtime with stacks that are
/// not always ready, or that panic in `call`.
#[derive(Clone, Copy, Debug)]
enum Outer {
    None,
    /// `tower`'s concurrency limit, at the scheduler's bound: its readiness
    /// waits whenever that many calls run.
    Limit,
    /// Panics in `call` the first time it sees every third record.
    Panics,
}

fn workload() -> impl Strategy<Value = Workload> {
    (1..=8i32, 1..=16usize, 1..=24usize, 1..=300usize).prop_flat_map(
        |(partitions, conc, unc, keys)| {
            let script =
                (0..keys, 0..40u64, 0..3u32).prop_map(|(key, latency_ms, failures)| Script {
                    key: format!("key-{key}"),
                    latency_ms,
                    failures,
                    id: None,
                });
            proptest::collection::vec(script, 1..400).prop_flat_map(move |records| {
                let n = records.len();
                let rebalance = proptest::option::of((0..n, any::<bool>()));
                let outer = prop_oneof![Just(Outer::None), Just(Outer::Limit), Just(Outer::Panics)];
                (Just(records), 0..=n, rebalance, outer).prop_map(
                    move |(records, late, rebalance, outer)| Workload {
                        partitions,
                        max_concurrency: conc,
                        max_uncommitted: unc,
                        records,
                        late,
                        rebalance,
                        outer,
                    },
                )
            })
        },
    )
}

async fn produce(broker: &MemoryBroker, scripts: &[Script]) {
    let producer = broker.producer().expect("producer");
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

fn run(workload: &Workload) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let broker = MemoryBroker::new();
        broker
            .create_topic(TOPIC, workload.partitions)
            .expect("topic");
        let (early, late) = workload
            .records
            .split_at(workload.records.len() - workload.late);
        produce(&broker, early).await;

        let probe = Probe::default();
        let first = member(&broker, &probe, workload, 0).await;
        produce(&broker, late).await;
        let total = workload.records.len();
        let mut live = vec![(0, first)];
        if let Some((join_after, first_leaves)) = workload.rebalance {
            let reached = tokio::time::timeout(DEADLINE, probe.wait_handled(join_after)).await;
            prop_assert!(
                reached.is_ok(),
                "only {} of {join_after} records handled",
                probe.handled()
            );
            live.push((1, member(&broker, &probe, workload, 1).await));
            if first_leaves {
                let (_, leaving) = live.remove(0);
                leaving.shutdown().await;
            }
        }
        let handled = tokio::time::timeout(DEADLINE, probe.wait_handled(total)).await;
        prop_assert!(
            handled.is_ok(),
            "only {} of {total} records handled",
            probe.handled()
        );
        // A commit interval later, every partition is committed to its end.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for partition in 0..workload.partitions {
            let tp = TopicPartition::new(TOPIC, partition);
            let end = broker.end_offset(&tp).expect("partition");
            let committed = broker.committed_offset(GROUP, &tp).unwrap_or(0);
            prop_assert_eq!(
                committed,
                end,
                "partition {} not committed to its end",
                partition
            );
        }
        let members: Vec<u32> = live.iter().map(|(id, _)| *id).collect();
        probe.check_resumed(&members)?;
        for (_, running) in live {
            running.shutdown().await;
        }
        probe.check(workload.max_concurrency, workload.rebalance.is_some())
    })
}

/// Joins the group as member `id` and starts its runtime.
async fn member(broker: &MemoryBroker, probe: &Probe, workload: &Workload, id: u32) -> Runtime {
    let consumer = broker
        .consumer(&ConsumerConfig {
            group_id: GROUP.to_owned(),
            topics: vec![TOPIC.into()],
        })
        .await
        .expect("consumer");
    let consumer = ProbedConsumer::new(consumer, probe.clone(), id);
    let mut config = RuntimeConfig::new(GROUP);
    config.max_uncommitted = NonZeroUsize::new(workload.max_uncommitted).expect("positive");
    let handler = TestHandler::new(probe.clone(), id);
    // The scheduler bounds the calls running at once, as in every preset.
    let scheduler = SchedulerLayer::new(SchedulerConfig {
        max_concurrency: NonZeroUsize::new(workload.max_concurrency).expect("positive"),
        ..SchedulerConfig::default()
    });
    let stack = scheduler.layer(HandlerService::new(handler));
    match workload.outer {
        Outer::None => Runtime::spawn(consumer, stack, MemoryStores::new(), config),
        Outer::Limit => {
            let limit = tower::limit::ConcurrencyLimitLayer::new(workload.max_concurrency);
            Runtime::spawn(consumer, limit.layer(stack), MemoryStores::new(), config)
        }
        Outer::Panics => {
            let stack = PanicOnce {
                inner: stack,
                seen: Arc::default(),
            };
            Runtime::spawn(consumer, stack, MemoryStores::new(), config)
        }
    }
}

/// Panics in `call` the first time it (and its clones: one member) sees
/// every third offset of a partition; the runtime retries such a record
/// like a transient failure.
#[derive(Clone)]
struct PanicOnce<S> {
    inner: S,
    seen: Arc<Mutex<HashSet<(i32, i64)>>>,
}

impl<S, P> Service<EventRequest<P>> for PanicOnce<S>
where
    S: Service<EventRequest<P>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> S::Future {
        if let Event::Message(message) = &request.event
            && message.offset % 3 == 0
            && self
                .seen
                .lock()
                .expect("seen")
                .insert((message.partition, message.offset))
        {
            // Unwinds without the panic hook: no message per panic.
            std::panic::resume_unwind(Box::new("a stage panicked in call"));
        }
        self.inner.call(request)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_record_is_handled_in_key_order_exclusively_and_committed(w in workload()) {
        run(&w)?;
    }
}

/// Backpressure on a multi-threaded runtime, where the poll loop and the
/// partition tasks race on real threads: with room for one or two unsettled
/// records per partition, every pause is answered by a resume and every
/// record is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tight_backpressure_across_threads_never_stalls() {
    for max_uncommitted in [1, 2] {
        let broker = MemoryBroker::new();
        broker.create_topic(TOPIC, 4).expect("topic");
        let records: Vec<Script> = (0..2_000)
            .map(|n| Script {
                key: format!("key-{}", n % 50),
                latency_ms: 0,
                failures: 0,
                id: None,
            })
            .collect();
        produce(&broker, &records).await;
        let probe = Probe::default();
        let workload = Workload {
            partitions: 4,
            max_concurrency: 8,
            max_uncommitted,
            records,
            late: 0,
            rebalance: None,
            outer: Outer::None,
        };
        let running = member(&broker, &probe, &workload, 0).await;
        let handled =
            tokio::time::timeout(Duration::from_secs(60), probe.wait_handled(2_000)).await;
        assert!(
            handled.is_ok(),
            "stalled at {} of 2000 records",
            probe.handled()
        );
        running.shutdown().await;
        assert!(probe.lock().pauses > 0, "the partitions never paused");
        probe.check(8, false).expect("invariants");
    }
}
