//! Published state in mock mode: an owning subsystem's handlers keep a
//! map per account; a client of another group reads it by key.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::state::StateError;
use prosody::state::{MapDef, ValueDef};
use prosody::{
    ClientError, Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient,
    ReadTtl, Timer,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

static BALANCES: MapDef<i64> = MapDef::new("balances").published(true);
static RETIRED: MapDef<i64> = MapDef::new("balances");
static OTHER: ValueDef<i64> = ValueDef::new("other").published(true);
static AS_VALUE: ValueDef<i64> = ValueDef::new("balances").published(true);
const TOPIC: &str = "payments";
const DEADLINE: Duration = Duration::from_secs(60);

/// Adds each payment's amount to its account's `total`; a payment marked
/// `hold` says so once its change is staged, then waits to be released.
struct Ledger {
    staged: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
    done: mpsc::UnboundedSender<()>,
}

impl EventHandler for Ledger {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        payment: Message<Value>,
    ) -> Result<(), HandlerError> {
        let balances = context.state(&BALANCES)?;
        let total = balances.get("total").await?.unwrap_or(0);
        let amount = payment.payload["amount"].as_i64().unwrap_or(0);
        balances.set("total", &(total + amount)).await?;
        if payment.payload["hold"] == true {
            self.staged.send(()).ok();
            self.release.notified().await;
        }
        self.done.send(()).ok();
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn owner(broker: &MemoryBroker, definition: &MapDef<i64>) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("ledger-owners")
        .subsystem("ledger")
        .subscribed_topics([TOPIC])
        .state_collections([definition.spec()])
        .build()
        .await
        .expect("owner")
}

async fn reader(broker: &MemoryBroker, ttl: ReadTtl) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("ledger-readers")
        .state_read_cache(ttl)
        .build()
        .await
        .expect("reader")
}

async fn next(rx: &mut mpsc::UnboundedReceiver<()>) {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("within the deadline")
        .expect("the handler is alive");
}

/// A reader sees what the owners committed, never a handler's pending
/// change; a cached reader sees a commit once its window passed; a
/// retired collection, one never published, and one read as another kind
/// fail with `Unpublished`.
#[tokio::test(start_paused = true)]
async fn a_reader_sees_committed_state_within_its_window() {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 4).unwrap();
    let owners = owner(&broker, &BALANCES).await;
    let (staged, mut staged_rx) = mpsc::unbounded_channel();
    let (done, mut done_rx) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    owners
        .subscribe(Ledger {
            staged,
            release: Arc::clone(&release),
            done,
        })
        .await
        .unwrap();
    let client = reader(&broker, ReadTtl::Off).await;
    let direct = client.state("ledger", &BALANCES).await.unwrap();
    let cached = reader(&broker, ReadTtl::For(Duration::from_secs(5)))
        .await
        .state("ledger", &BALANCES)
        .await
        .unwrap();
    assert_eq!(direct.get("a1", "total").await.unwrap(), None);

    client
        .send(TOPIC, "a1", &json!({ "amount": 5 }))
        .await
        .unwrap();
    next(&mut done_rx).await;
    // The commit lands before the handler's success returns: poll briefly.
    let until = tokio::time::Instant::now() + DEADLINE;
    while direct.get("a1", "total").await.unwrap() != Some(5) {
        assert!(
            tokio::time::Instant::now() < until,
            "the commit never showed"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(cached.get("a1", "total").await.unwrap(), Some(5));

    // Staged but not committed: no reader sees it.
    client
        .send(TOPIC, "a1", &json!({ "amount": 3, "hold": true }))
        .await
        .unwrap();
    next(&mut staged_rx).await;
    assert_eq!(
        direct.get("a1", "total").await.unwrap(),
        Some(5),
        "a pending change"
    );
    release.notify_one();
    next(&mut done_rx).await;
    let until = tokio::time::Instant::now() + DEADLINE;
    while direct.get("a1", "total").await.unwrap() != Some(8) {
        assert!(
            tokio::time::Instant::now() < until,
            "the commit never showed"
        );
        tokio::task::yield_now().await;
    }
    // The cached reader serves its earlier read until its window passed.
    assert_eq!(cached.get("a1", "total").await.unwrap(), Some(5));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(cached.get("a1", "total").await.unwrap(), Some(8));
    let items: Vec<(String, i64)> = {
        use futures_util::TryStreamExt;
        direct
            .items("a1", prosody::state::Direction::Forward)
            .try_collect()
            .await
            .unwrap()
    };
    assert_eq!(items, vec![("total".to_owned(), 8)]);

    // Nothing published under these names.
    let error = client.state("ledger", &OTHER).await.unwrap_err();
    assert!(
        matches!(error, ClientError::State(StateError::Unpublished { .. })),
        "{error}"
    );
    let error = client.state("nobody", &BALANCES).await.unwrap_err();
    assert!(
        matches!(error, ClientError::State(StateError::Unpublished { .. })),
        "{error}"
    );
    // Read as another kind.
    let error = client.state("ledger", &AS_VALUE).await.unwrap_err();
    assert!(error.to_string().contains("map/json"), "{error}");

    // A deployment with `published(false)` retires it: the open reader
    // and a new one fail, rather than read what is left.
    let _retiring = owner(&broker, &RETIRED).await;
    let error = direct.get("a1", "total").await.unwrap_err();
    assert!(matches!(error, StateError::Unpublished { .. }), "{error}");
    assert!(error.to_string().contains("retired"), "{error}");
    let error = client.state("ledger", &BALANCES).await.unwrap_err();
    assert!(
        matches!(error, ClientError::State(StateError::Unpublished { .. })),
        "{error}"
    );
}

/// The reading client's metrics count its readers' cache: the first read
/// of a key goes to the owners' store (a miss), the next two within the
/// window are answered by the cache (hits).
#[cfg(feature = "otel")]
#[tokio::test]
async fn the_readers_cache_hits_and_misses_are_measured() {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 4).unwrap();
    // A subsystem of its own: publications are per process, and the
    // other tests publish `ledger`.
    let _owners = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("audit-owners")
        .subsystem("audit")
        .subscribed_topics([TOPIC])
        .state_collections([BALANCES.spec()])
        .build()
        .await
        .expect("owner");
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("ledger-metered")
        .subscribed_topics([TOPIC])
        .state_read_cache(ReadTtl::For(Duration::from_secs(3600)))
        .probe_port(0)
        .build()
        .await
        .expect("reader");
    let reader = client.state("audit", &BALANCES).await.unwrap();
    for _ in 0..3 {
        assert_eq!(reader.get("a1", "total").await.unwrap(), None);
    }
    // The probe server starts with the first subscription.
    let (staged, _staged) = mpsc::unbounded_channel();
    let (done, _done) = mpsc::unbounded_channel();
    client
        .subscribe(Ledger {
            staged,
            release: Arc::new(Notify::new()),
            done,
        })
        .await
        .unwrap();
    let (_, _, page) =
        crate::support::http::fetch(client.probe_address().expect("probe"), "/metrics").await;
    let count = |name: &str| {
        page.lines()
            .find(|line| {
                line.starts_with(&format!("{name}{{"))
                    && line.contains(r#"messaging_consumer_group_name="ledger-metered""#)
            })
            .map(|line| line.rsplit(' ').next().unwrap_or_default().to_owned())
    };
    assert_eq!(
        count("prosody_published_cache_misses_total").as_deref(),
        Some("1"),
        "{page}"
    );
    assert_eq!(
        count("prosody_published_cache_hits_total").as_deref(),
        Some("2"),
        "{page}"
    );
    client.shutdown().await;
}
