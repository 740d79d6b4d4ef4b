//! What a handler gets wrong with its state, and what it is told.

use prosody::state::{MapDef, StateError, ValueDef};
use prosody::{
    Category, Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryStores, Message,
    ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

static COUNT: ValueDef<u64> = ValueDef::new("count");
/// Another kind under the same durable name.
static COUNT_AS_MAP: MapDef<u64> = MapDef::new("count");
static NOTES: ValueDef<Value> = ValueDef::new("notes");
static UNREGISTERED: ValueDef<u64> = ValueDef::new("unregistered");

/// Tries each mistake once per message and reports what it got.
#[derive(Clone)]
struct Mistakes {
    kept: Arc<Mutex<Option<Context>>>,
    seen: mpsc::UnboundedSender<Vec<(String, Category)>>,
}

fn outcome<T>(result: Result<T, StateError>) -> (String, Category) {
    match result {
        Ok(_) => ("ok".to_owned(), Category::Transient),
        Err(error) => (error.to_string(), error.category()),
    }
}

impl EventHandler for Mistakes {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        let mut seen = Vec::new();
        seen.push(outcome(context.state(&UNREGISTERED)));
        seen.push(outcome(context.state(&COUNT_AS_MAP)));
        let notes = context.state(&NOTES)?;
        seen.push(outcome(notes.set(&Value::Null).await));
        let count = context.state(&COUNT)?;
        count.set(&1).await?;
        // A context kept past its handler: what it does later is refused.
        if let Some(old) = self.kept.lock().unwrap().replace(context.clone()) {
            seen.push(outcome(old.state(&COUNT)));
            seen.push(outcome(old.clear_state()));
        }
        let _ = self.seen.send(seen);
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// An unregistered definition and one whose kind differs from the stored
/// one are permanent; a JSON `null` is transient; a context kept past its
/// attempt binds nothing and writes nothing.
#[tokio::test(start_paused = true)]
async fn each_mistake_is_named_with_its_category() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .stores(MemoryStores::new())
        .group_id("g")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .state_collections([COUNT.spec(), COUNT_AS_MAP.spec(), NOTES.spec()])
        .build()
        .await;
    // Two specs of one name cannot both be registered.
    let Err(error) = client else {
        panic!("two definitions of `count` were registered");
    };
    assert!(error.to_string().contains("registered twice"), "{error}");
    let (tx, mut seen) = mpsc::unbounded_channel();
    let client = ProsodyClient::builder()
        .broker(broker)
        .stores(MemoryStores::new())
        .group_id("g")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .state_collections([COUNT.spec(), NOTES.spec()])
        .build()
        .await
        .unwrap();
    client
        .subscribe(Mistakes {
            kept: Arc::default(),
            seen: tx,
        })
        .await
        .unwrap();
    for _ in 0..2 {
        client.send("t", "k", &json!({})).await.unwrap();
    }
    let first = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .unwrap()
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .unwrap()
        .unwrap();
    client.shutdown().await;
    let expect = |got: &(String, Category), says: &str, category: Category| {
        assert!(got.0.contains(says), "{:?} does not say {says:?}", got.0);
        assert_eq!(got.1, category, "{}", got.0);
    };
    expect(
        &first[0],
        "unregistered is not registered",
        Category::Permanent,
    );
    expect(&first[1], "count is not registered", Category::Permanent);
    expect(&first[2], "JSON null", Category::Transient);
    expect(&second[3], "after its attempt ended", Category::Permanent);
    expect(&second[4], "after its attempt ended", Category::Permanent);
}

/// A definition whose kind differs from the one the store recorded for its
/// name cannot bind: the mismatch names both.
#[tokio::test(start_paused = true)]
async fn a_changed_kind_does_not_bind() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let stores = MemoryStores::new();
    let earlier = ProsodyClient::builder()
        .broker(broker.clone())
        .stores(stores.clone())
        .group_id("g")
        .state_collections([COUNT_AS_MAP.spec()])
        .build()
        .await
        .unwrap();
    earlier.shutdown().await;
    let client = ProsodyClient::builder()
        .broker(broker)
        .stores(stores)
        .group_id("g")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .state_collections([COUNT.spec(), NOTES.spec()])
        .build()
        .await
        .unwrap();
    let (tx, mut seen) = mpsc::unbounded_channel();
    client.subscribe(Binder(tx)).await.unwrap();
    client.send("t", "k", &json!({})).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .unwrap()
        .unwrap();
    client.shutdown().await;
    assert_eq!(got.1, Category::Permanent, "{}", got.0);
    assert!(
        got.0
            .contains("stored as map/json but defined as value/json"),
        "{}",
        got.0
    );
}

struct Binder(mpsc::UnboundedSender<(String, Category)>);

impl EventHandler for Binder {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        let _ = self.0.send(outcome(context.state(&COUNT)));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}
