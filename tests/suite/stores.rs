//! How a client chooses its stores, and what a store error does, on the
//! in-memory broker under a paused clock.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, BrokerError, ConsumerConfig, Record, TopicPartition};
use prosody::store::{Batch, StoreError, Stores, TimerEntry, TimerStore, Wrapped};
use prosody::{
    ClientBuilder, ConfigError, Context, EventHandler, Excise, HandlerError, MemoryBroker,
    MemoryStores, Message, ProsodyClient, Timer, Timestamp,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

const DEADLINE: Duration = Duration::from_secs(3600);

/// Schedules a timer a minute out for every message, and reports it; fails
/// a message whose payload says `"fail": true`, transiently, every time.
#[derive(Clone)]
struct Scheduler(mpsc::UnboundedSender<String>);

impl EventHandler for Scheduler {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        if message.payload["fail"] == json!(true) {
            return Err(HandlerError::transient("asked to fail"));
        }
        let at = Timestamp::from_millis(prosody_core::clock::now().as_millis() + 60_000);
        context.schedule(at).map_err(HandlerError::transient)?;
        let _ = self.0.send(context.key().to_string());
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Memory stores whose commits touching the key `refused` are rejected,
/// whose first `unavailable` commits fail as retriable, whose timer
/// loads are rejected if `refuse_loads`, whose first `failing_opens`
/// opens fail as retriable, and whose commits wait for a permit of `gate`
/// if it is set.
#[derive(Clone, Default)]
struct Picky {
    inner: MemoryStores,
    unavailable: Arc<AtomicUsize>,
    refuse_loads: bool,
    failing_opens: Arc<AtomicUsize>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl Wrapped for Picky {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    async fn open(&self, _: &TopicPartition) -> Result<(), StoreError> {
        let left = self.failing_opens.load(Ordering::SeqCst);
        if left > 0 {
            self.failing_opens.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::unavailable("the store is starting"));
        }
        Ok(())
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        if let Some(gate) = &self.gate {
            gate.acquire()
                .await
                .map_err(|_| StoreError::unavailable("the gate closed"))?
                .forget();
        }
        if batch
            .timers
            .iter()
            .any(|write| write.key.as_str() == "refused")
        {
            return Err(StoreError::rejected(
                "schema version 9 is newer than this client knows",
            ));
        }
        let left = self.unavailable.load(Ordering::SeqCst);
        if left > 0 {
            self.unavailable.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::unavailable("the store timed out"));
        }
        self.inner.commit(partition, batch).await
    }

    /// Every batch goes to `commit`, where the faults are.
    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }

    async fn load(
        &self,
        p: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        if self.refuse_loads {
            return Err(StoreError::rejected("table timer_slabs does not exist"));
        }
        self.inner.load(p, from, until).await
    }
}

/// On Kafka, no store that outlives the process means no client: the
/// build fails naming what to set, before it reaches for the cluster (the
/// servers here answer nothing).
#[cfg(feature = "kafka")]
#[tokio::test]
async fn kafka_without_a_durable_store_does_not_build() {
    let error = ProsodyClient::builder()
        .bootstrap_servers(["127.0.0.1:9"])
        // No Cassandra, whatever PROSODY_CASSANDRA_NODES says.
        .cassandra_nodes(Vec::<String>::new())
        .memory_stores(false)
        .group_id("svc")
        .build()
        .await
        .expect_err("built without a durable store");
    assert_eq!(error, ConfigError::NoDurableStore);
    let message = error.to_string();
    for named in ["cassandra_nodes", "stores(", "memory_stores(true)"] {
        assert!(message.contains(named), "{message:?} does not name {named}");
    }
}

/// The in-memory broker, saying its records outlive the process (as a
/// cluster's do).
#[derive(Clone)]
struct Durable(MemoryBroker);

impl Broker for Durable {
    type Consumer = <MemoryBroker as Broker>::Consumer;
    type Producer = <MemoryBroker as Broker>::Producer;

    fn durable(&self) -> bool {
        true
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<Self::Consumer, BrokerError> {
        self.0.consumer(config).await
    }

    fn producer(&self) -> Result<Self::Producer, BrokerError> {
        self.0.producer()
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.0.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.0.partitions(topic).await
    }
}

/// A broker of the caller's whose records outlive the process needs stores
/// named, or the explicit opt-in to memory; behind one whose records die
/// with the process (the in-memory broker) the stores stay in memory.
#[tokio::test(start_paused = true)]
async fn a_durable_broker_takes_stores_only_when_told() {
    let broker = Durable(MemoryBroker::new());
    let builder = || {
        ProsodyClient::builder()
            .broker(broker.clone())
            .cassandra_nodes(Vec::<String>::new())
            .group_id("svc")
    };
    assert_eq!(
        builder().build().await.expect_err("built without stores"),
        ConfigError::NoDurableStore
    );
    let opted = builder().memory_stores(true).build().await;
    assert!(opted.is_ok(), "memory_stores(true): {opted:?}");
    let given = builder().stores(MemoryStores::new()).build().await;
    assert!(given.is_ok(), "stores(...): {given:?}");
    let in_memory = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .cassandra_nodes(Vec::<String>::new())
        .group_id("svc")
        .build()
        .await;
    assert!(in_memory.is_ok(), "in-memory broker: {in_memory:?}");
}

/// The stores given to the builder are the ones the client writes: a
/// timer scheduled by a handler lands in them.
#[tokio::test(start_paused = true)]
async fn the_given_stores_hold_the_timers() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let stores = MemoryStores::new();
    let client = ProsodyClient::builder()
        .broker(broker)
        .stores(stores.clone())
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .build()
        .await
        .expect("client");
    let (seen, mut handled) = mpsc::unbounded_channel();
    client.subscribe(Scheduler(seen)).await.expect("subscribe");
    client.send("t", "k", &json!({})).await.expect("send");
    tokio::time::timeout(DEADLINE, handled.recv())
        .await
        .expect("handled");
    assert!(
        holds_timers(&stores, 1).await,
        "the timer never reached the given stores"
    );
    client.shutdown().await;
}

/// A client on a broker of its own (topic `t`, one partition) with
/// `stores`, consuming with a [`Scheduler`] that reports to the receiver.
async fn client_with(stores: Picky) -> (ProsodyClient, mpsc::UnboundedReceiver<String>) {
    client_of(stores, |builder| builder).await
}

/// [`client_with`], its builder first passed through `tune`.
async fn client_of(
    stores: Picky,
    tune: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> (ProsodyClient, mpsc::UnboundedReceiver<String>) {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let builder = ProsodyClient::builder()
        .broker(broker)
        .stores(stores)
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"]);
    let client = tune(builder).build().await.expect("client");
    let (seen, handled) = mpsc::unbounded_channel();
    client.subscribe(Scheduler(seen)).await.expect("subscribe");
    (client, handled)
}

/// Waits until `stores` hold at least `timers` timers; `false` past the
/// deadline.
async fn holds_timers(stores: &MemoryStores, timers: usize) -> bool {
    tokio::time::timeout(DEADLINE, async {
        while stores.timers().stored_timers() < timers {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

/// Waits until the client halted a partition; `false` past the deadline.
async fn halts(client: &ProsodyClient) -> bool {
    tokio::time::timeout(DEADLINE, async {
        while client.halted_partitions().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

/// A retriable store error retries the attempt; a refusal halts the
/// partition, and liveness names the store's own words.
#[tokio::test(start_paused = true)]
async fn store_errors_keep_their_category() {
    let stores = Picky {
        inner: MemoryStores::new(),
        unavailable: Arc::new(AtomicUsize::new(2)),
        ..Picky::default()
    };
    let (client, mut handled) = client_with(stores.clone()).await;
    client.send("t", "k", &json!({})).await.expect("send");
    // Two commits fail as retriable: the message is tried again until one
    // lands.
    assert!(
        holds_timers(&stores.inner, 1).await,
        "the message's commit never landed"
    );
    assert_eq!(stores.unavailable.load(Ordering::SeqCst), 0);
    let mut attempts = 0;
    while let Ok(key) = handled.try_recv() {
        assert_eq!(key, "k");
        attempts += 1;
    }
    assert!(attempts >= 2, "handled {attempts} times: not tried again");
    assert!(client.liveness_problems().is_empty());

    client.send("t", "refused", &json!({})).await.expect("send");
    assert!(
        halts(&client).await,
        "a refused commit did not halt the partition"
    );
    assert_eq!(
        client.liveness_problems(),
        [
            "partition t/0 halted: terminal error: store rejected the operation: \
          schema version 9 is newer than this client knows"
        ]
    );
    client.shutdown().await;
}

/// A store that refuses to load a partition's timers (they could never
/// fire) halts the partition at once, naming the refusal.
#[tokio::test(start_paused = true)]
async fn a_refused_timer_load_halts_the_partition() {
    let (client, _handled) = client_with(Picky {
        refuse_loads: true,
        ..Picky::default()
    })
    .await;
    assert!(
        halts(&client).await,
        "a refused timer load did not halt the partition"
    );
    assert_eq!(
        client.liveness_problems(),
        [
            "partition t/0 halted: loading timers: store rejected the operation: \
          table timer_slabs does not exist"
        ]
    );
    client.shutdown().await;
}

/// A deferral the store refuses (pipeline mode defers a record that keeps
/// failing) halts the partition rather than retrying forever.
#[tokio::test(start_paused = true)]
async fn a_refused_deferral_halts_the_partition() {
    let (client, _handled) = client_with(Picky::default()).await;
    client
        .send("t", "refused", &json!({"fail": true}))
        .await
        .expect("send");
    assert!(
        halts(&client).await,
        "a refused deferral did not halt the partition"
    );
    assert_eq!(
        client.liveness_problems(),
        [
            "partition t/0 halted: terminal error: store rejected the operation: \
          schema version 9 is newer than this client knows"
        ]
    );
    client.shutdown().await;
}

/// A partition whose stores do not open yet (they take ownership there)
/// handles nothing until they do: the runtime tries again, and the record
/// waits.
#[tokio::test(start_paused = true)]
async fn a_partition_waits_for_its_stores_to_open() {
    let stores = Picky {
        failing_opens: Arc::new(AtomicUsize::new(3)),
        ..Picky::default()
    };
    let (client, mut handled) = client_with(stores.clone()).await;
    client.send("t", "k", &json!({})).await.expect("send");
    let key = tokio::time::timeout(DEADLINE, handled.recv()).await;
    assert_eq!(key.ok().flatten().as_deref(), Some("k"));
    assert_eq!(
        stores.failing_opens.load(Ordering::SeqCst),
        0,
        "handled before the stores opened"
    );
    client.shutdown().await;
}

/// The scheduler's permit bounds handler calls, not commits: with one
/// permit, a key's commit waiting on the stores does not keep another
/// key's handler from running.
#[tokio::test(start_paused = true)]
async fn a_commit_waiting_on_the_stores_holds_no_handler_slot() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let stores = Picky {
        gate: Some(Arc::clone(&gate)),
        ..Picky::default()
    };
    let (client, mut handled) =
        client_of(stores.clone(), |builder| builder.max_concurrency(1)).await;
    client.send("t", "a", &json!({})).await.expect("send");
    client.send("t", "b", &json!({})).await.expect("send");
    // Both handlers run before any of the calls' deadlines could have
    // freed the permit (the paused clock would jump to the first).
    let both = tokio::time::timeout(Duration::from_secs(1), async {
        let mut keys = vec![handled.recv().await, handled.recv().await];
        keys.sort();
        keys
    })
    .await;
    assert_eq!(
        both.ok(),
        Some(vec![Some("a".to_owned()), Some("b".to_owned())]),
        "the second key's handler waited for the first key's commit"
    );
    assert_eq!(
        stores.inner.timers().stored_timers(),
        0,
        "no commit landed yet"
    );
    gate.add_permits(1_000);
    assert!(
        holds_timers(&stores.inner, 2).await,
        "the commits never landed once the stores answered"
    );
    client.shutdown().await;
}
