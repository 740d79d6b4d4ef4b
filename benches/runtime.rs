//! Throughput of the partition runtime in memory mode with a no-op handler:
//! 10,000 keys over 8 partitions.
//!
//! `cargo bench --bench runtime`

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prosody::broker::{Broker, ConsumerConfig, OutgoingRecord, Producer};
use prosody::{
    Context, EventHandler, Excise, HandlerError, HandlerService, MemoryBroker, MemoryStores,
    Message, Timer,
};
use prosody_core::{Runtime, RuntimeConfig};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const RECORDS: usize = 50_000;
const KEYS: usize = 10_000;
const PARTITIONS: i32 = 8;

struct Counter {
    handled: Arc<AtomicUsize>,
    done: Arc<Notify>,
}

impl EventHandler for Counter {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        if self.handled.fetch_add(1, Ordering::AcqRel) + 1 == RECORDS {
            self.done.notify_one();
        }
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn prepared_broker() -> MemoryBroker {
    let broker = MemoryBroker::new();
    broker.create_topic("bench", PARTITIONS).expect("topic");
    let producer = broker.producer().expect("producer");
    for n in 0..RECORDS {
        let payload = format!(
            r#"{{"id":"{n}","type":"bench.event","value":{n},"padding":"xxxxxxxxxxxxxxxxxxxxxxxx"}}"#
        );
        producer
            .send(
                OutgoingRecord::new("bench", format!("key-{}", n % KEYS), payload),
                Duration::from_secs(1),
            )
            .await
            .expect("send");
    }
    broker
}

async fn consume_all(broker: MemoryBroker) -> Duration {
    let done = Arc::new(Notify::new());
    let consumer = broker
        .consumer(&ConsumerConfig {
            group_id: "bench".to_owned(),
            topics: vec!["bench".into()],
        })
        .await
        .expect("consumer");
    let counter = Counter {
        handled: Arc::new(AtomicUsize::new(0)),
        done: Arc::clone(&done),
    };
    let start = Instant::now();
    let runtime = Runtime::spawn(
        consumer,
        HandlerService::new(counter),
        MemoryStores::new(),
        RuntimeConfig::new("bench"),
    );
    done.notified().await;
    let elapsed = start.elapsed();
    runtime.shutdown().await;
    elapsed
}

fn runtime(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let mut group = c.benchmark_group("runtime");
    group.sample_size(10);
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("noop_handler_10k_keys_8_partitions", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let broker = rt.block_on(prepared_broker());
                total += rt.block_on(consume_all(broker));
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, runtime);
criterion_main!(benches);
