//! The record loader over the in-memory broker: exact offsets, absent
//! records, errors, the seek timeout, and a cache that spares repeated
//! reads.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_contracts::broker::{
    Broker, BrokerError, ConsumerConfig, OutgoingRecord, Producer, Record, TopicPartition,
};
use prosody_contracts::loader::{BrokerLoader, LoadError, Loader, LoaderConfig};
use prosody_memory::MemoryBroker;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The memory broker, counting reads, and able to hang them.
#[derive(Clone)]
struct Counted {
    inner: MemoryBroker,
    reads: Arc<AtomicUsize>,
    hang: Arc<AtomicBool>,
}

impl Broker for Counted {
    type Consumer = <MemoryBroker as Broker>::Consumer;
    type Producer = <MemoryBroker as Broker>::Producer;

    fn durable(&self) -> bool {
        false
    }

    fn consumer(
        &self,
        config: &ConsumerConfig,
    ) -> impl Future<Output = Result<Self::Consumer, BrokerError>> + Send {
        self.inner.consumer(config)
    }

    fn producer(&self) -> Result<Self::Producer, BrokerError> {
        self.inner.producer()
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.inner.partitions(topic).await
    }
}

async fn setup(cache: usize) -> (Counted, BrokerLoader<Counted>, TopicPartition) {
    let inner = MemoryBroker::new();
    inner.create_topic("t", 1).unwrap();
    let producer = inner.producer().unwrap();
    for n in 0..5 {
        let record = OutgoingRecord::new("t", format!("k{n}"), format!("{{\"n\":{n}}}"));
        producer.send(record, Duration::from_secs(1)).await.unwrap();
    }
    let broker = Counted {
        inner,
        reads: Arc::default(),
        hang: Arc::default(),
    };
    let config = LoaderConfig {
        cache_size: NonZeroUsize::new(cache).unwrap(),
        seek_timeout: Duration::from_secs(5),
        ..LoaderConfig::default()
    };
    let loader = BrokerLoader::new(broker.clone(), &config);
    (broker, loader, TopicPartition::new("t", 0))
}

#[tokio::test(start_paused = true)]
async fn reads_the_record_at_exactly_the_offset() {
    let (_, loader, tp) = setup(4).await;
    let record = loader.load(&tp, 3).await.unwrap().unwrap();
    assert_eq!(record.offset, 3);
    assert_eq!(record.key.as_deref(), Some(&b"k3"[..]));
    assert_eq!(record.payload.as_deref(), Some(&b"{\"n\":3}"[..]));
    assert!(loader.load(&tp, 5).await.unwrap().is_none(), "past the end");
    let unknown = loader.load(&TopicPartition::new("nope", 0), 0).await;
    assert!(matches!(unknown, Err(LoadError::Broker { offset: 0, .. })));
}

/// A record read once is served from the cache; the cache holds at most
/// its size, so of more records some are read again; absent records are
/// not cached.
#[tokio::test(start_paused = true)]
async fn the_cache_spares_repeated_reads_within_its_size() {
    let (broker, loader, tp) = setup(2).await;
    let reads = || broker.reads.load(Ordering::SeqCst);
    loader.load(&tp, 0).await.unwrap();
    loader.load(&tp, 0).await.unwrap();
    assert_eq!(reads(), 1, "a cached record was read again");
    for offset in 1..=4 {
        loader.load(&tp, offset).await.unwrap();
    }
    assert_eq!(reads(), 5);
    loader.load(&tp, 4).await.unwrap();
    assert_eq!(reads(), 5, "the latest record was evicted");
    for offset in 0..=4 {
        loader.load(&tp, offset).await.unwrap();
    }
    assert!(reads() >= 8, "five records in a cache of two: {}", reads());
    let before = reads();
    loader.load(&tp, 9).await.unwrap();
    loader.load(&tp, 9).await.unwrap();
    assert_eq!(reads(), before + 2, "an absent record was cached");
}

#[tokio::test(start_paused = true)]
async fn a_read_that_hangs_times_out_naming_the_offset() {
    let (broker, loader, tp) = setup(2).await;
    broker.hang.store(true, Ordering::SeqCst);
    let error = loader.load(&tp, 2).await.unwrap_err();
    assert!(
        matches!(error, LoadError::Timeout { offset: 2, timeout, .. } if timeout == Duration::from_secs(5)),
        "{error}"
    );
    assert!(error.to_string().contains("offset 2"), "{error}");
}
