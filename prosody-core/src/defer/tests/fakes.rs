//! Small fakes of what the defer stage talks to, and a harness tying them
//! to one defer service.

pub(super) use super::store::FakeStore;
use crate::Response;
use crate::broker::{Record, TopicPartition};
use crate::clock::Timestamp;
use crate::context::Demand;
use crate::defer::{DeferConfig, DeferLayer, DeferService};
use crate::error::{Category, HandlerError};
use crate::event::{Encoded, Event, Headers, Timer};
use crate::handler::EventRequest;
use crate::key::Key;
use crate::loader::{LoadError, Loader};
use crate::store::StoreError;
use crate::store::timer::{TimerKind, round_to_second};
use crate::store::{
    Batch, DeferStore, DeferWrite, Deferred, TimerChange, TimerEntry, TimerWrite, Wrapped,
};
use crate::testkit;
use crate::work::{Rider, UnitOfWork};
use bytes::Bytes;
use prosody_memory::MemoryStores;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::{Future, Ready, ready};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt};

/// More calls of the handler or the loader than any test makes.
const CALLS: usize = 64;

/// The partition every test event belongs to (see `testkit::message`).
pub(super) fn partition() -> TopicPartition {
    TopicPartition::new("topic", 0)
}

/// Store access recording the timer changes of every batch (grouped by key
/// and kind, as `applied`), keeping the timers it wrote, and passing a
/// batch's deferral changes to the defer store.
#[derive(Default)]
pub(super) struct FakeTimers {
    applied: Mutex<Vec<(Key, TimerKind, Vec<TimerChange>)>>,
    stored: Mutex<BTreeMap<(Key, TimerKind), BTreeSet<Timestamp>>>,
    /// Where the batches' deferral changes go.
    pub(super) deferred: Mutex<Option<FakeStore>>,
    /// Makes every write fail.
    pub(super) fail: AtomicBool,
}

impl FakeTimers {
    /// The stored times of `key` and `kind`, ascending.
    pub(super) fn times(&self, key: &str, kind: TimerKind) -> Vec<Timestamp> {
        let stored = self.stored.lock().unwrap();
        stored
            .get(&(Key::from(key), kind))
            .map(|times| times.iter().copied().collect())
            .unwrap_or_default()
    }

    pub(super) fn applied(&self) -> Vec<(Key, TimerKind, Vec<TimerChange>)> {
        self.applied.lock().unwrap().clone()
    }

    /// The timer changes of a batch, as `applied` records them.
    fn record(&self, timers: &[TimerWrite]) {
        let mut applied = self.applied.lock().unwrap();
        let mut groups: Vec<(Key, TimerKind, Vec<TimerChange>)> = Vec::new();
        for write in timers {
            let op = write.change.clone();
            match groups.last_mut() {
                Some((key, kind, ops)) if *key == write.key && *kind == write.kind => ops.push(op),
                _ => groups.push((write.key.clone(), write.kind, vec![op])),
            }
        }
        applied.extend(groups);
    }

    async fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.record(&batch.timers);
        if self.fail.load(Ordering::Relaxed) {
            return Err(StoreError::unavailable("timers down"));
        }
        {
            let mut stored = self.stored.lock().unwrap();
            for write in &batch.timers {
                let times = stored.entry((write.key.clone(), write.kind)).or_default();
                match &write.change {
                    TimerChange::Schedule { time, .. } => {
                        times.insert(round_to_second(*time));
                    }
                    TimerChange::Unschedule { time } => {
                        times.remove(&round_to_second(*time));
                    }
                    TimerChange::Clear => times.clear(),
                }
            }
        }
        let store = self.deferred.lock().unwrap().clone();
        if let Some(store) = store {
            let partition = partition();
            for write in batch.deferrals {
                match write {
                    DeferWrite::Defer {
                        key,
                        offset,
                        deferral,
                    } => store.defer(&partition, &key, offset, deferral).await?,
                    DeferWrite::Complete { key, offset } => {
                        store.complete(&partition, &key, offset).await?;
                    }
                    DeferWrite::Failed { key } => {
                        store.failed(&partition, &key).await?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// [`FakeTimers`] as the partition's stores: the rest of the contract in
/// memory.
#[derive(Clone)]
struct TimerStores {
    inner: MemoryStores,
    timers: Arc<FakeTimers>,
}

impl Wrapped for TimerStores {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    async fn scheduled(
        &self,
        _: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        Ok(self.timers.times(key, kind))
    }

    async fn commit(&self, _: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.timers.write(batch).await
    }

    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }

    async fn load(
        &self,
        _: &TopicPartition,
        _: Timestamp,
        _: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        Ok(Vec::new())
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        let store = self.timers.deferred.lock().unwrap().clone()?;
        store.peek(partition, key)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        let store = self.timers.deferred.lock().unwrap().clone();
        match store {
            Some(store) => store.deferred(partition, key).await,
            None => Ok(None),
        }
    }
}

/// A log of records by (partition, offset); can be made to fail.
#[derive(Clone, Default)]
pub(super) struct FakeLoader {
    records: Arc<Mutex<HashMap<(TopicPartition, i64), Record>>>,
    loads: Arc<AtomicUsize>,
    pub(super) fail: Arc<AtomicBool>,
}

impl FakeLoader {
    /// Appends a record of `key` at `offset`, with payload `{"offset": offset}`.
    pub(super) fn put(&self, key: &str, offset: i64) {
        let payload = serde_json::to_vec(&json!({ "offset": offset })).unwrap();
        self.put_raw(key, offset, Some(Bytes::from(payload)));
    }

    /// Appends a record of `key` at `offset` with `payload` (`None`: a
    /// tombstone).
    pub(super) fn put_raw(&self, key: &str, offset: i64, payload: Option<Bytes>) {
        let record = Record {
            topic: "topic".into(),
            partition: 0,
            offset,
            timestamp: Timestamp::default(),
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            payload,
            headers: Headers::new(),
        };
        self.records
            .lock()
            .unwrap()
            .insert((partition(), offset), record);
    }
}

impl Loader for FakeLoader {
    fn load(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> impl Future<Output = Result<Option<Record>, LoadError>> + Send {
        // A drain that never moves on would loop forever: fail it instead.
        let loads = self.loads.fetch_add(1, Ordering::Relaxed);
        assert!(loads < CALLS, "the loader was called {CALLS} times");
        ready(if self.fail.load(Ordering::Relaxed) {
            Err(LoadError::Timeout {
                partition: partition.clone(),
                offset,
                timeout: Duration::from_secs(1),
            })
        } else {
            let records = self.records.lock().unwrap();
            Ok(records.get(&(partition.clone(), offset)).cloned())
        })
    }
}

/// What the inner service saw of one call.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Seen {
    /// The message's or excise's offset; `None` for a timer.
    pub(super) offset: Option<i64>,
    /// The timer's kind; `None` for a message or excise.
    pub(super) timer: Option<TimerKind>,
    pub(super) payload: Option<Value>,
    pub(super) attempt: u32,
    pub(super) demand: Demand,
    pub(super) ok: bool,
}

/// The inner service: fails as scripted per offset (`None`: timers), else
/// succeeds with `Response::Handled(())`, and records every call.
#[derive(Clone, Default)]
pub(super) struct Handler {
    script: Arc<Mutex<HashMap<Option<i64>, VecDeque<Category>>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Where a success writes its attempt's deferral riders, as the handler
    /// service's commit would.
    store: Arc<Mutex<Option<FakeStore>>>,
}

impl Handler {
    /// The next calls for `offset` fail with `errors`, in order.
    pub(super) fn fail(&self, offset: Option<i64>, errors: &[Category]) {
        let mut script = self.script.lock().unwrap();
        script.entry(offset).or_default().extend(errors);
    }

    pub(super) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The offsets of the calls, in order.
    pub(super) fn offsets(&self) -> Vec<Option<i64>> {
        self.seen().iter().map(|seen| seen.offset).collect()
    }

    /// The offsets handled successfully, in order.
    pub(super) fn handled(&self) -> Vec<i64> {
        let seen = self.seen();
        seen.iter()
            .filter(|s| s.ok)
            .filter_map(|s| s.offset)
            .collect()
    }
}

impl Service<EventRequest<Encoded>> for Handler {
    type Response = Response<()>;
    type Error = HandlerError;
    type Future = Ready<Result<Response<()>, HandlerError>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: EventRequest<Encoded>) -> Self::Future {
        let (offset, timer, payload) = match &request.event {
            Event::Message(m) => (Some(m.offset), None, serde_json::from_slice(&m.raw).ok()),
            Event::Excise(e) => (Some(e.offset), None, None),
            Event::Timer(t) => (None, Some(t.kind), None),
        };
        let error = self
            .script
            .lock()
            .unwrap()
            .get_mut(&offset)
            .and_then(VecDeque::pop_front);
        let mut seen = self.seen.lock().unwrap();
        // A drain that never moves on would loop forever: fail it instead.
        assert!(seen.len() < CALLS, "the handler was called {CALLS} times");
        seen.push(Seen {
            offset,
            timer,
            payload,
            attempt: request.context.attempt(),
            demand: request.context.demand(),
            ok: error.is_none(),
        });
        if error.is_none() {
            let store = self.store.lock().unwrap().clone();
            for rider in request.riders() {
                if let (Some(store), Rider::Defer(DeferWrite::Complete { key, offset })) =
                    (&store, rider)
                {
                    store.complete_now(key, *offset);
                }
            }
        }
        ready(match error {
            Some(category) => Err(HandlerError::new(
                category,
                format!("offset {offset:?} failed"),
            )),
            None => Ok(Response::Handled(())),
        })
    }
}

/// One defer service over fresh fakes.
pub(super) struct Harness {
    pub(super) store: FakeStore,
    pub(super) loader: FakeLoader,
    pub(super) handler: Handler,
    pub(super) timers: Arc<FakeTimers>,
    pub(super) service: DeferService<Handler, Handler, FakeLoader>,
}

impl Harness {
    pub(super) fn new(config: DeferConfig, peeks: bool) -> Self {
        let store = FakeStore::new(peeks);
        let loader = FakeLoader::default();
        let handler = Handler::default();
        let layer = DeferLayer::new(config, loader.clone());
        *handler.store.lock().unwrap() = Some(store.clone());
        let timers = FakeTimers {
            deferred: Mutex::new(Some(store.clone())),
            ..FakeTimers::default()
        };
        Self {
            store,
            loader,
            service: layer.layer(handler.clone()),
            handler,
            timers: Arc::new(timers),
        }
    }

    /// A unit of work over this harness's timer access.
    pub(super) fn access(&self) -> UnitOfWork {
        UnitOfWork::new(testkit::access(TimerStores {
            inner: MemoryStores::new(),
            timers: Arc::clone(&self.timers),
        }))
    }

    /// A message of `key` at `offset` with timers, and its shutdown token.
    pub(super) fn message(
        &self,
        key: &str,
        offset: i64,
    ) -> (EventRequest<Encoded>, CancellationToken) {
        let (mut request, shutdown, _cancel) = testkit::message(key, Encoded::new(), None);
        if let Event::Message(message) = &mut request.event {
            message.offset = offset;
            message.raw = Bytes::from(serde_json::to_vec(&json!({ "offset": offset })).unwrap());
        }
        request.context = request.context.with_work(self.access());
        (request, shutdown)
    }

    /// Sends one request through the service.
    pub(super) async fn send(
        &mut self,
        request: EventRequest<Encoded>,
    ) -> Result<Response<()>, HandlerError> {
        self.service.ready().await?.call(request).await
    }

    /// Fires the key's defer timer at `time`.
    pub(super) async fn fire(
        &mut self,
        key: &str,
        time: Timestamp,
    ) -> Result<Response<()>, HandlerError> {
        let (request, _shutdown) = timer(key, TimerKind::Defer, time, self.access());
        self.send(request).await
    }
}

/// A timer of `kind` for `key` at `time`, firing with `timers`, and its
/// shutdown token.
pub(super) fn timer(
    key: &str,
    kind: TimerKind,
    time: Timestamp,
    timers: UnitOfWork,
) -> (EventRequest<Encoded>, CancellationToken) {
    let (mut request, shutdown, _cancel) = testkit::message(key, Encoded::new(), None);
    request.event = Event::Timer(Timer::new(key, time).with_kind(kind));
    request.context = request.context.with_work(timers);
    (request, shutdown)
}
