//! Test support shared by the whole-system tests: a scripted handler and a
//! consumer wrapper that check the runtime's invariants as they happen.

#![allow(dead_code, clippy::missing_panics_doc)]

pub mod http;
pub mod withhold;

use prosody::broker::{BrokerError, Consumer, ConsumerEvent, TopicPartition};
use prosody_core::{Context, EventHandler, Excise, HandlerError, Message, Timer};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// What the handler does with one record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Script {
    pub key: String,
    pub latency_ms: u64,
    /// Transient failures before the record succeeds.
    pub failures: u32,
    /// The payload's `id`, for deduplication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Default, Debug)]
pub struct Observed {
    pub in_flight: HashSet<String>,
    /// Handler calls running now, by member.
    pub running: HashMap<u32, usize>,
    pub max_running: usize,
    pub attempts: HashMap<(i32, i64), u32>,
    pub successes: Vec<(String, i32, i64)>,
    pub succeeded: HashSet<(i32, i64)>,
    pub stored: HashMap<i32, i64>,
    /// Partitions paused and not resumed or revoked since, by member.
    pub paused: HashSet<(u32, i32)>,
    pub pauses: u32,
    pub violations: Vec<String>,
    /// Set to stop every scripted failure from now on.
    pub healed: bool,
}

/// Shared observations of handler calls and consumer operations.
#[derive(Clone, Default)]
pub struct Probe {
    observed: Arc<Mutex<Observed>>,
    progress: Arc<Notify>,
}

impl Probe {
    pub fn lock(&self) -> MutexGuard<'_, Observed> {
        self.observed.lock().expect("probe lock")
    }

    pub fn handled(&self) -> usize {
        self.lock().succeeded.len()
    }

    /// Completes once `total` distinct records have succeeded.
    pub async fn wait_handled(&self, total: usize) {
        loop {
            let notified = self.progress.notified();
            if self.handled() >= total {
                return;
            }
            notified.await;
        }
    }

    /// Checks what was observed once everything was handled. Without a
    /// rebalance every record succeeds exactly once; with one, a record the
    /// old owner handled past its last commit may be handled again
    /// (at-least-once), so only first successes are checked for order.
    pub fn check(
        &self,
        max_concurrency: usize,
        rebalanced: bool,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        use proptest::prop_assert;
        let observed = self.lock();
        prop_assert!(
            observed.violations.is_empty(),
            "violations: {:?}",
            observed.violations
        );
        prop_assert!(
            observed.max_running <= max_concurrency,
            "{} handlers ran at once, limit {max_concurrency}",
            observed.max_running
        );
        prop_assert!(
            rebalanced || observed.successes.len() == observed.succeeded.len(),
            "a record succeeded twice without a rebalance"
        );
        let mut first = HashSet::new();
        let mut last: HashMap<&str, (i32, i64)> = HashMap::new();
        for (key, partition, offset) in &observed.successes {
            if !first.insert((*partition, *offset)) {
                continue;
            }
            if let Some(&(p, o)) = last.get(key.as_str()) {
                prop_assert!(
                    p == *partition && o < *offset,
                    "key {key}: offset {offset} handled after {o}"
                );
            }
            last.insert(key, (*partition, *offset));
        }
        Ok(())
    }

    /// Checks that no live member has a partition left paused.
    pub fn check_resumed(&self, live: &[u32]) -> Result<(), proptest::test_runner::TestCaseError> {
        let observed = self.lock();
        let stuck: Vec<_> = observed
            .paused
            .iter()
            .filter(|(m, _)| live.contains(m))
            .collect();
        proptest::prop_assert!(stuck.is_empty(), "paused and never resumed: {stuck:?}");
        Ok(())
    }
}

/// A handler that follows each record's script and reports to the probe.
pub struct TestHandler {
    probe: Probe,
    member: u32,
}

impl TestHandler {
    pub fn new(probe: Probe, member: u32) -> Self {
        Self { probe, member }
    }
}

impl EventHandler for TestHandler {
    type Payload = Script;
    type Output = ();

    fn on_message(
        &self,
        context: Context,
        message: Message<Script>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let probe = self.probe.clone();
        let member = self.member;
        async move {
            let key = context.key().to_string();
            let id = (message.partition, message.offset);
            let attempt = {
                let mut observed = probe.lock();
                if !observed.in_flight.insert(key.clone()) {
                    observed
                        .violations
                        .push(format!("key {key} ran twice at once"));
                }
                let running = observed.running.entry(member).or_default();
                *running += 1;
                let running = *running;
                observed.max_running = observed.max_running.max(running);
                let attempt = observed.attempts.entry(id).or_default();
                *attempt += 1;
                *attempt
            };
            tokio::time::sleep(Duration::from_millis(message.payload.latency_ms)).await;
            let mut observed = probe.lock();
            observed.in_flight.remove(&key);
            *observed.running.entry(member).or_default() -= 1;
            if attempt <= message.payload.failures && !observed.healed {
                return Err(HandlerError::transient("scripted failure"));
            }
            observed.succeeded.insert(id);
            observed
                .successes
                .push((key, message.partition, message.offset));
            drop(observed);
            probe.progress.notify_waiters();
            Ok(())
        }
    }

    async fn on_timer(&self, _context: Context, _timer: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _context: Context, _excise: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// A consumer that checks every stored offset against what succeeded, and
/// counts pauses and resumes.
pub struct ProbedConsumer<C> {
    inner: C,
    probe: Probe,
    member: u32,
}

impl<C> ProbedConsumer<C> {
    pub fn new(inner: C, probe: Probe, member: u32) -> Self {
        Self {
            inner,
            probe,
            member,
        }
    }
}

impl<C: Consumer> Consumer for ProbedConsumer<C> {
    fn poll(&mut self) -> impl Future<Output = Result<ConsumerEvent, BrokerError>> + Send {
        let probe = self.probe.clone();
        let member = self.member;
        let next = self.inner.poll();
        async move {
            let event = next.await;
            if let Ok(ConsumerEvent::Revoked(tps)) = &event {
                let mut observed = probe.lock();
                for tp in tps {
                    observed.paused.remove(&(member, tp.partition));
                }
            }
            event
        }
    }

    fn store_offset(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        let mut observed = self.probe.lock();
        let from = observed.stored.get(&tp.partition).copied().unwrap_or(0);
        for earlier in from..offset {
            if !observed.succeeded.contains(&(tp.partition, earlier)) {
                observed.violations.push(format!(
                    "offset {offset} stored for {tp} before {earlier} settled"
                ));
            }
        }
        observed.stored.insert(tp.partition, offset);
        drop(observed);
        self.inner.store_offset(tp, offset)
    }

    fn commit(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send {
        self.inner.commit()
    }

    fn pause(&mut self, tp: &TopicPartition) -> Result<(), BrokerError> {
        let mut observed = self.probe.lock();
        observed.pauses += 1;
        observed.paused.insert((self.member, tp.partition));
        drop(observed);
        self.inner.pause(tp)
    }

    fn resume(&mut self, tp: &TopicPartition) -> Result<(), BrokerError> {
        self.probe
            .lock()
            .paused
            .remove(&(self.member, tp.partition));
        self.inner.resume(tp)
    }

    fn committed(
        &mut self,
        tp: &TopicPartition,
    ) -> impl Future<Output = Result<Option<i64>, BrokerError>> + Send {
        self.inner.committed(tp)
    }

    fn committed_offsets(
        &mut self,
        tps: &[TopicPartition],
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<Option<i64>>, BrokerError>> + Send {
        self.inner.committed_offsets(tps, timeout)
    }

    fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.inner.high_watermark(tp)
    }

    fn close(self) -> impl Future<Output = ()> + Send {
        self.inner.close()
    }
}

/// Makes `subscriber` this thread's default until the guard drops, for a
/// test that reads what was logged.
///
/// First, once per process, a bare registry becomes the global default.
/// Tracing caches each callsite's interest for the whole process, and
/// while one dispatcher alone is registered it asks the registering
/// thread's: a callsite that another suite of this binary first reaches
/// on a thread with no subscriber would be cached as never, and this
/// test's line lost. With a global default there are always two.
pub fn capture<S>(subscriber: S) -> tracing::subscriber::DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        // Another suite may have set one already; any will do.
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    tracing::subscriber::set_default(subscriber)
}
