use super::{DedupConfig, DedupLayer};
use crate::clock::Timestamp;
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::event::{Event, Excise, Headers, Message, Timer};
use crate::handler::EventRequest;
use crate::testkit;
use crate::work::{Rider, UnitOfWork};
use crate::{Response, Settlement};
use proptest::prelude::*;
use std::collections::HashSet;
use std::future::ready;
use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower::util::MapRequest;
use tower::{Layer, Service, ServiceExt};

mod cache;
mod store;

use store::TestStore;

/// `layer` over `inner`, each request reaching `store` through its unit of
/// work, as the runtime hands a partition's stores to its stages.
fn over<S>(
    layer: &DedupLayer,
    store: &TestStore,
    inner: S,
) -> impl Service<EventRequest<bool>, Response = S::Response, Error = HandlerError, Future: Send>
+ Clone
+ use<S>
where
    S: Service<EventRequest<bool>, Error = HandlerError, Future: Send> + Clone + Send,
    S::Response: Settlement,
{
    let stores = testkit::access(store.clone());
    MapRequest::new(layer.layer(inner), move |request: EventRequest<bool>| {
        let work = UnitOfWork::new(Arc::clone(&stores));
        EventRequest {
            context: request.context.with_work(work),
            ..request
        }
    })
}

/// What the inner handler saw: `(key, id)` of each call, in order.
type Calls = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A handler whose payload says whether it fails; on success it writes
/// its attempt's dedup riders to `store`, as the handler service's commit
/// would (failing the attempt if the store does).
fn handler(
    calls: &Calls,
    store: &TestStore,
) -> impl Service<
    EventRequest<bool>,
    Response = Response<&'static str>,
    Error = HandlerError,
    Future: Send,
> + Clone
+ Send
+ use<> {
    let calls = Arc::clone(calls);
    let store = store.clone();
    tower::service_fn(move |request: EventRequest<bool>| {
        let (id, fail) = match &request.event {
            Event::Message(m) => (m.id.as_deref().map(str::to_owned), m.payload),
            Event::Timer(_) | Event::Excise(_) => (None, false),
        };
        calls
            .lock()
            .unwrap()
            .push((request.event.key().to_string(), id));
        if fail {
            return ready(Err(HandlerError::transient("handler failed")));
        }
        for rider in request.riders() {
            if let Rider::Dedup(write) = rider {
                if store.fail_inserts.load(Ordering::Relaxed) {
                    return ready(Err(HandlerError::transient("batch failed")));
                }
                store.keys.lock().unwrap().insert(write.key);
            }
        }
        ready(Ok(Response::Handled("handled")))
    })
}

fn context(key: &str) -> Context {
    Context::new(
        key.into(),
        "topic".into(),
        0,
        CancellationToken::new(),
        CancellationToken::new(),
    )
}

fn message(key: &str, id: Option<&str>, fail: bool) -> EventRequest<bool> {
    EventRequest {
        event: Event::Message(Message {
            topic: "topic".into(),
            partition: 0,
            offset: 0,
            timestamp: Timestamp::from_millis(0),
            key: key.into(),
            raw_key: None,
            payload: fail,
            raw: bytes::Bytes::new(),
            id: id.map(Into::into),
            headers: Headers::new(),
        }),
        context: context(key),
        extensions: crate::handler::Extensions::default(),
    }
}

fn config(version: &str, cache_size: usize) -> DedupConfig {
    DedupConfig {
        version: version.to_owned(),
        cache_size: NonZeroUsize::new(cache_size).unwrap(),
        ..DedupConfig::default()
    }
}

async fn send<S>(
    service: &mut S,
    request: EventRequest<bool>,
) -> Result<Response<&'static str>, HandlerError>
where
    S: Service<EventRequest<bool>, Response = Response<&'static str>, Error = HandlerError>,
{
    service.ready().await?.call(request).await
}

/// One message of a generated workload.
#[derive(Clone, Debug)]
struct Op {
    version: usize,
    key: u8,
    id: Option<u8>,
    fail: bool,
    /// Whether the process restarts (a fresh cache) before this message.
    restart: bool,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0usize..2,
        0u8..3,
        proptest::option::weighted(0.85, 0u8..4),
        proptest::bool::weighted(0.25),
        proptest::bool::weighted(0.05),
    )
        .prop_map(|(version, key, id, fail, restart)| Op {
            version,
            key,
            id,
            fail,
            restart,
        })
}

/// Runs `ops` through one layer per version and checks each message
/// against the model: a message is handled unless an earlier message with
/// the same version, key and id was handled successfully. With `store`, a
/// restart makes fresh layers over the same store; without, the layers'
/// caches (big enough for every distinct message) are all that dedups.
fn check_against_model(ops: &[Op], cache_size: usize, store: Option<&TestStore>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let calls = Calls::default();
        let build = |store: Option<&TestStore>| {
            (0..2)
                .map(|version| {
                    let config = config(&version.to_string(), cache_size);
                    match store {
                        Some(store) => Either::Persistent(over(
                            &DedupLayer::new(config),
                            store,
                            handler(&calls, store),
                        )),
                        None => Either::Cache(
                            DedupLayer::new(config).layer(handler(&calls, &TestStore::default())),
                        ),
                    }
                })
                .collect::<Vec<_>>()
        };
        let mut services = build(store);
        let mut succeeded: HashSet<(usize, u8, u8)> = HashSet::new();
        for (n, op) in ops.iter().enumerate() {
            if op.restart && store.is_some() {
                services = build(store);
            }
            let key = format!("key-{}", op.key);
            let id = op.id.map(|id| format!("id-{id}"));
            let duplicate = op
                .id
                .is_some_and(|id| succeeded.contains(&(op.version, op.key, id)));
            let before = calls.lock().unwrap().len();
            let outcome = services[op.version]
                .send(message(&key, id.as_deref(), op.fail))
                .await;
            let handled = calls.lock().unwrap().len() > before;
            assert_eq!(
                handled, !duplicate,
                "message {n} {op:?}: handled {handled}, expected {}",
                !duplicate
            );
            if duplicate {
                assert_eq!(
                    outcome.unwrap(),
                    Response::Unhandled,
                    "a skipped duplicate succeeds with the default"
                );
            } else if op.fail {
                assert_eq!(outcome.unwrap_err().category(), Category::Transient);
            } else {
                assert_eq!(outcome.unwrap(), Response::Handled("handled"));
                if let Some(id) = op.id {
                    succeeded.insert((op.version, op.key, id));
                }
            }
        }
    });
}

/// The dedup service over either store, so one vector holds both.
enum Either<A, B> {
    Cache(A),
    Persistent(B),
}

impl<A, B> Either<A, B>
where
    A: Service<EventRequest<bool>, Response = Response<&'static str>, Error = HandlerError>,
    B: Service<EventRequest<bool>, Response = Response<&'static str>, Error = HandlerError>,
{
    async fn send(
        &mut self,
        request: EventRequest<bool>,
    ) -> Result<Response<&'static str>, HandlerError> {
        match self {
            Self::Cache(service) => send(service, request).await,
            Self::Persistent(service) => send(service, request).await,
        }
    }
}

proptest! {
    /// Within the cache's capacity, a duplicate (same version, key and id)
    /// is never handled twice; a failed attempt records nothing, so its
    /// retry is handled; a message without id, or under another version,
    /// always passes.
    #[test]
    fn the_cache_never_handles_a_duplicate_twice(ops in proptest::collection::vec(op(), 1..80)) {
        // 2 versions x 3 keys x 4 ids distinct messages fit in 24 entries.
        check_against_model(&ops, 24, None);
    }

    /// The same holds with a cache far too small, across restarts, because
    /// the store remembers what the cache evicted or lost, whether it
    /// answers at once (`contains_now`) or when asked (`contains`).
    #[test]
    fn the_store_catches_what_the_cache_forgot(
        ops in proptest::collection::vec(op(), 1..80),
        cache_size in 1usize..4,
        peeks in any::<bool>(),
    ) {
        let store = if peeks { TestStore::peeking() } else { TestStore::default() };
        check_against_model(&ops, cache_size, Some(&store));
        if peeks {
            prop_assert_eq!(store.lookups.load(Ordering::Relaxed), 0, "a store that tells at once is never asked");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_version_handles_a_message_again() {
    let calls = Calls::default();
    let store = TestStore::default();
    let mut v1 = over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    );
    send(&mut v1, message("k", Some("a"), false)).await.unwrap();
    // A restarted process with the same version: the store knows it.
    let mut v1_again = over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    );
    assert_eq!(
        send(&mut v1_again, message("k", Some("a"), false))
            .await
            .unwrap(),
        Response::Unhandled
    );
    assert_eq!(calls.lock().unwrap().len(), 1);
    let mut v2 = over(
        &DedupLayer::new(config("2", 8)),
        &store,
        handler(&calls, &store),
    );
    assert_eq!(
        send(&mut v2, message("k", Some("a"), false)).await.unwrap(),
        Response::Handled("handled")
    );
    assert_eq!(calls.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn messages_without_id_timers_and_excises_always_pass() {
    let calls = Calls::default();
    let store = TestStore::default();
    let mut service = over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    );
    let timer = || EventRequest {
        event: Event::Timer(Timer::new("k", Timestamp::from_millis(1000))),
        context: context("k"),
        extensions: crate::handler::Extensions::default(),
    };
    let excise = || EventRequest {
        event: Event::Excise(Excise {
            topic: "topic".into(),
            partition: 0,
            offset: 1,
            timestamp: Timestamp::from_millis(0),
            key: "k".into(),
            raw_key: None,
            headers: Headers::new(),
        }),
        context: context("k"),
        extensions: crate::handler::Extensions::default(),
    };
    for _ in 0..3 {
        send(&mut service, message("k", None, false)).await.unwrap();
        send(&mut service, timer()).await.unwrap();
        send(&mut service, excise()).await.unwrap();
    }
    assert_eq!(calls.lock().unwrap().len(), 9);
    assert_eq!(
        store.lookups.load(Ordering::Relaxed),
        0,
        "no store call without an id"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_records_nothing() {
    let calls = Calls::default();
    let store = TestStore::default();
    let mut service = over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    );
    send(&mut service, message("k", Some("a"), true))
        .await
        .unwrap_err();
    assert!(store.keys.lock().unwrap().is_empty());
    send(&mut service, message("k", Some("a"), false))
        .await
        .unwrap();
    send(&mut service, message("k", Some("a"), false))
        .await
        .unwrap();
    assert_eq!(
        calls.lock().unwrap().len(),
        2,
        "the retry ran once, the duplicate never"
    );
    assert_eq!(store.keys.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn store_errors_never_lose_a_message() {
    let calls = Calls::default();
    let store = TestStore::default();
    store.fail_lookups.store(true, Ordering::Relaxed);
    store.fail_inserts.store(true, Ordering::Relaxed);
    let mut service = over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    );
    // A failed lookup handles the message; a batch that cannot record it
    // fails the attempt (the mode tries again), and nothing is cached.
    let failed = send(&mut service, message("k", Some("a"), false)).await;
    assert_eq!(
        failed.err().map(|e| e.category()),
        Some(Category::Transient)
    );
    // The store back, the retry is handled and recorded.
    store.fail_inserts.store(false, Ordering::Relaxed);
    assert_eq!(
        send(&mut service, message("k", Some("a"), false))
            .await
            .unwrap(),
        Response::Handled("handled")
    );
    assert_eq!(calls.lock().unwrap().len(), 2);
    assert_eq!(
        send(&mut service, message("k", Some("a"), false))
            .await
            .unwrap(),
        Response::Unhandled
    );
    assert_eq!(calls.lock().unwrap().len(), 2);
}

#[test]
fn defaults_follow_the_configuration_table() {
    let config = DedupConfig::default();
    assert_eq!(config.version, "1");
    assert_eq!(config.cache_size.get(), 8192);
    assert_eq!(config.ttl, Duration::from_secs(604_800));
    assert!(config.validate().is_ok());
    let short = DedupConfig {
        ttl: Duration::from_millis(10),
        ..DedupConfig::default()
    };
    assert_eq!(short.validate().unwrap_err().option, "idempotence_ttl");
}

#[test]
fn the_service_fits_a_runtime_stack() {
    fn is_event_service<S: crate::handler::EventService<bool>>(_: &S) {}
    let calls = Calls::default();
    let store = TestStore::default();
    is_event_service(&over(
        &DedupLayer::new(config("1", 8)),
        &store,
        handler(&calls, &store),
    ));
}
