//! Tests of the unit of work: what an attempt commits, and when.

use super::UnitOfWork;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::TimerChange;
use crate::store::{Batch, StoreError, Wrapped};
use crate::testkit;
use prosody_memory::MemoryStores;
use std::sync::{Arc, Mutex};

/// Keeps every batch committed.
#[derive(Clone, Default)]
struct Recorded {
    inner: MemoryStores,
    batches: Arc<Mutex<Vec<Batch>>>,
}

impl Recorded {
    fn batches(&self) -> Vec<Batch> {
        self.batches.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

impl Wrapped for Recorded {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    async fn commit(&self, _: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.batches
            .lock()
            .map(|mut batches| batches.push(batch))
            .ok();
        Ok(())
    }

    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }
}

/// What a failed attempt staged is not written by the next one, not
/// even what a clone of its unit stages after the next one began; the
/// attempt that succeeds writes exactly its own changes.
#[tokio::test]
async fn only_the_committing_attempt_writes_its_changes() {
    let store = Recorded::default();
    let event = UnitOfWork::new(testkit::access(store.clone()));
    let key = Key::from("k");
    let at = |s: i64| Timestamp::from_millis(s * 1000);
    let failed = event.fresh();
    failed.stage(TimerChange::Schedule {
        time: at(1),
        trace: None,
    });
    let next = event.fresh();
    failed.stage(TimerChange::Schedule {
        time: at(2),
        trace: None,
    });
    next.stage(TimerChange::Schedule {
        time: at(3),
        trace: None,
    });
    assert_eq!(next.scheduled(&key).await.ok(), Some(vec![at(3)]));
    next.commit(&key, &[]).await.ok();
    let batches = store.batches();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].timers.len(), 1, "{:?}", batches[0].timers);
    assert!(next.committed());
    // A later attempt starts with nothing staged.
    let last = event.fresh();
    last.commit(&key, &[]).await.ok();
    assert_eq!(store.batches().len(), 1);
}

/// A store whose commits take `delay`, then fail (retriable or not) or
/// land, recording when.
#[derive(Clone)]
struct Slow {
    inner: MemoryStores,
    delay: std::time::Duration,
    fail: Option<bool>,
    landed: Arc<Mutex<Vec<(tokio::time::Instant, Batch)>>>,
}

impl Wrapped for Slow {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    async fn commit(&self, _: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        tokio::time::sleep(self.delay).await;
        match self.fail {
            Some(true) => Err(StoreError::unavailable("down")),
            Some(false) => Err(StoreError::rejected("refused")),
            None => {
                let now = tokio::time::Instant::now();
                self.landed.lock().map(|mut l| l.push((now, batch))).ok();
                Ok(())
            }
        }
    }

    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }
}

/// Schedules a timer, runs for `run`, then fails with `fail` or succeeds.
struct Sleeper {
    run: std::time::Duration,
    fail: Option<crate::error::Category>,
}

impl crate::handler::EventHandler for Sleeper {
    type Payload = serde_json::Value;
    type Output = ();

    async fn on_message(
        &self,
        context: crate::Context,
        _: crate::event::Message<serde_json::Value>,
    ) -> Result<(), crate::HandlerError> {
        context.schedule(Timestamp::from_millis(1_000_000))?;
        tokio::time::sleep(self.run).await;
        match self.fail {
            Some(category) => Err(crate::HandlerError::new(category, "failed")),
            None => Ok(()),
        }
    }

    async fn on_timer(
        &self,
        _: crate::Context,
        _: crate::event::Timer,
    ) -> Result<(), crate::HandlerError> {
        Ok(())
    }

    async fn on_excise(
        &self,
        _: crate::Context,
        _: crate::event::Excise,
    ) -> Result<(), crate::HandlerError> {
        Ok(())
    }
}

mod commit {
    use super::{Sleeper, Slow, UnitOfWork};
    use crate::error::Category;
    use crate::event::{Encoded, Event};
    use crate::handler::{EventRequest, HandlerService};
    use crate::testkit;
    use crate::timeout::{TimeoutConfig, TimeoutLayer};
    use bytes::Bytes;
    use proptest::prelude::*;
    use prosody_memory::MemoryStores;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;
    use tower::{Layer, ServiceExt};

    const TIMEOUT: Duration = Duration::from_secs(3);

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Invariant 8 and the late-success rule, through the timeout stage
        /// and the handler service: an attempt succeeds exactly when its
        /// handler succeeded before the deadline and its commit landed
        /// before the end of the grace; its batch has landed by the time
        /// the success returns (so before any offset it settles is
        /// committed), even when the commit ended past the deadline; a
        /// failed attempt leaves nothing in the store, and its error keeps
        /// the category of its cause. (Times end in 50 ms, so none ties
        /// with the deadline or the end of the grace.)
        #[test]
        fn an_attempt_commits_before_it_succeeds_and_a_failed_one_leaves_no_trace(
            run in (0u64..40).prop_map(|n| n * 100 + 50),
            commit in (0u64..10).prop_map(|n| n * 100),
            handler_fails in proptest::option::of(prop_oneof![
                Just(Category::Transient), Just(Category::Permanent), Just(Category::Terminal),
            ]),
            store_fails in proptest::option::of(any::<bool>()),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()?;
            let store = Slow {
                inner: MemoryStores::new(),
                delay: Duration::from_millis(commit),
                fail: store_fails,
                landed: Arc::default(),
            };
            let (result, returned, started) = runtime.block_on(async {
                let (request, _shutdown, _cancel) = testkit::message("k", Encoded::new(), None);
                let EventRequest { mut event, context, .. } = request;
                if let Event::Message(message) = &mut event {
                    message.raw = Bytes::from_static(b"{}");
                }
                let work = UnitOfWork::new(testkit::access(store.clone()));
                let request = EventRequest::new(event, context.with_work(work));
                let handler = Sleeper { run: Duration::from_millis(run), fail: handler_fails };
                let config = TimeoutConfig { timeout: TIMEOUT };
                let stack = TimeoutLayer::new(config).layer(HandlerService::new(handler));
                let started = Instant::now();
                let result = stack.oneshot(request).await;
                (result, Instant::now(), started)
            });
            let run = Duration::from_millis(run);
            let end_of_grace = TIMEOUT + config_grace();
            let landed = store.landed.lock().map(|l| l.clone()).unwrap_or_default();
            let in_time = run < TIMEOUT && run + Duration::from_millis(commit) < end_of_grace;
            let expected = if run >= end_of_grace {
                Err(Category::Transient) // dropped after its grace
            } else if let Some(category) = handler_fails {
                Err(category)
            } else if !in_time {
                Err(Category::Transient) // late, or its commit cut off
            } else if let Some(retriable) = store_fails {
                Err(if retriable { Category::Transient } else { Category::Terminal })
            } else {
                Ok(())
            };
            prop_assert_eq!(
                result.as_ref().map(|_| ()).map_err(crate::HandlerError::category),
                expected,
                "{:?}",
                result
            );
            if result.is_ok() {
                prop_assert_eq!(landed.len(), 1, "one batch per successful attempt");
                prop_assert_eq!(landed[0].1.timers.len(), 1);
                prop_assert!(landed[0].0 <= returned, "landed after the success returned");
                prop_assert!(landed[0].0 - started <= end_of_grace);
            } else {
                prop_assert!(landed.is_empty(), "a failed attempt left {:?}", landed);
            }
        }
    }

    fn config_grace() -> Duration {
        TimeoutConfig { timeout: TIMEOUT }.grace()
    }
}
