//! Keyed state written by timers and excises.

use super::Shared;
use super::landing::Landing;
use prosody::broker::TopicPartition;
use prosody::state::{StateError, ValueDef};
use prosody::store::StateStore;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryStores, Message,
    ProsodyClient, Timer, Timestamp,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

static FIRED: ValueDef<u64> = ValueDef::new("fired");

/// Schedules a timer a second out per message, counts the key's fired
/// timers in state, and forgets the key on an excise.
struct Ticker {
    calls: Arc<AtomicUsize>,
    seen: mpsc::UnboundedSender<&'static str>,
}

impl EventHandler for Ticker {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        let at = Timestamp::from_millis(prosody_core::clock::now().as_millis() + 1_000);
        context.schedule(at)?;
        let fired = context.state(&FIRED)?;
        fired.set(&fired.get().await?.unwrap_or(0)).await?;
        let _ = self.seen.send("message");
        Ok(())
    }

    async fn on_timer(&self, context: Context, _: Timer) -> Result<(), HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fired = context.state(&FIRED)?;
        fired.set(&(fired.get().await?.unwrap_or(0) + 1)).await?;
        let _ = self.seen.send("timer");
        Ok(())
    }

    async fn on_excise(&self, context: Context, _: Excise) -> Result<(), HandlerError> {
        context.clear_state().map_err(StateError::into_handler)?;
        let _ = self.seen.send("excise");
        Ok(())
    }
}

async fn client(
    broker: &MemoryBroker,
    stores: Landing<MemoryStores>,
    ticker: Ticker,
) -> ProsodyClient {
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .stores(stores)
        .group_id("g")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .state_collections([FIRED.spec()])
        .build()
        .await
        .unwrap();
    client.subscribe(ticker).await.unwrap();
    client
}

fn world() -> (MemoryBroker, Landing<MemoryStores>) {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let (done, _) = mpsc::unbounded_channel();
    let stores = Landing {
        inner: MemoryStores::new(),
        shared: Shared::default(),
        done,
        faults: None,
        unsure_timers: Arc::default(),
    };
    (broker, stores)
}

async fn next(seen: &mut mpsc::UnboundedReceiver<&'static str>) -> &'static str {
    tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .unwrap()
        .unwrap()
}

/// A timer whose commit landed but returned an error (a timeout) is not
/// run again: its retry finds it gone from the store, so its state change
/// counts once.
#[tokio::test(start_paused = true)]
async fn a_timer_whose_commit_landed_runs_once() {
    let (broker, stores) = world();
    stores.unsure_timers.store(1, Ordering::SeqCst);
    let state = stores.inner.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let client = client(
        &broker,
        stores,
        Ticker {
            calls: Arc::clone(&calls),
            seen: tx,
        },
    )
    .await;
    client.send("t", "k", &json!({})).await.unwrap();
    assert_eq!(next(&mut seen).await, "message");
    assert_eq!(next(&mut seen).await, "timer");
    // On the paused clock: time for every retry (20 ms apart) to run.
    tokio::time::sleep(Duration::from_secs(10)).await;
    client.shutdown().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "timer handler calls");
    let p = TopicPartition::new("t", 0);
    let fired = state.cell(&p, "fired", &"k".into(), &[]).await.unwrap();
    assert_eq!(fired.as_deref(), Some(&b"1"[..]), "the fired count");
}

/// An excise that clears the key's state leaves nothing of the key in
/// the store, its applied marker included; another key keeps its state.
#[tokio::test(start_paused = true)]
async fn an_excise_forgets_the_key() {
    let (broker, stores) = world();
    let state = stores.inner.clone();
    let (tx, mut seen) = mpsc::unbounded_channel();
    let calls = Arc::default();
    let client = client(&broker, stores, Ticker { calls, seen: tx }).await;
    client.send("t", "k", &json!({})).await.unwrap();
    client.send("t", "j", &json!({})).await.unwrap();
    let mut events = Vec::new();
    while events.iter().filter(|e| **e == "timer").count() < 2 {
        events.push(next(&mut seen).await);
    }
    client.excise("t", "k").await.unwrap();
    while next(&mut seen).await != "excise" {}
    client.shutdown().await;
    let p = TopicPartition::new("t", 0);
    for collection in ["fired", ""] {
        let k = state.cell(&p, collection, &"k".into(), &[]).await.unwrap();
        assert_eq!(k, None, "k's {collection:?} cell after the excise");
        let j = state.cell(&p, collection, &"j".into(), &[]).await.unwrap();
        assert!(j.is_some(), "j's {collection:?} cell");
    }
}
