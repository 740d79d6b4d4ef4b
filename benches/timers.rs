//! Timer figures, printed (a bench binary, not criterion):
//! the in-memory store's schedule rate, the memory of 1,000,000 pending
//! timers over 100,000 keys, and firing lateness at 10,000 due timers per
//! second through a running client.
//!
//! `cargo bench --bench timers`

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    reason = "bench code fails loudly and prints approximate figures"
)]

#[path = "support/memory.rs"]
mod memory;

use prosody::broker::TopicPartition;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryDedupStore, MemoryDeferStore,
    MemoryStores, MemoryTimerStore, Message, ProsodyClient, Timer, Timestamp,
};
use prosody_core::clock;
use prosody_core::store::timer::TimerEntry;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

fn schedule_rate_and_memory() {
    const TIMERS: u64 = 1_000_000;
    const KEYS: u64 = 100_000;
    let before = memory::status_mib("VmRSS");
    let store = MemoryTimerStore::new();
    let partitions: Vec<TopicPartition> = (0..8).map(|p| TopicPartition::new("bench", p)).collect();
    let keys: Vec<prosody::Key> = (0..KEYS).map(|k| format!("key-{k}").into()).collect();
    let base = clock::now().as_millis();
    let start = Instant::now();
    for n in 0..TIMERS {
        let key = &keys[(n % KEYS) as usize];
        let partition = &partitions[(n % KEYS % 8) as usize];
        // 10 timers per key, spread over two days.
        let time = Timestamp::from_millis(
            base + ((n / KEYS) as i64 * 17_280 + (n % 17_280) as i64) * 1000,
        );
        store.schedule(partition, TimerEntry::new(key.clone(), time));
    }
    let elapsed = start.elapsed();
    println!(
        "schedule: {TIMERS} timers over {KEYS} keys in {:.2} s: {:.0} timers/s",
        elapsed.as_secs_f64(),
        TIMERS as f64 / elapsed.as_secs_f64()
    );
    println!(
        "memory: {} timers stored; RSS {:.0} MiB (store about {:.0} MiB)",
        store.stored_timers(),
        memory::status_mib("VmRSS"),
        memory::status_mib("VmRSS") - before
    );
}

struct Recorder {
    lateness: Arc<Mutex<Vec<i64>>>,
    done: mpsc::UnboundedSender<()>,
}

impl EventHandler for Recorder {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_timer(&self, _: Context, timer: Timer) -> Result<(), HandlerError> {
        let late = clock::now().as_millis() - timer.time.as_millis();
        self.lateness.lock().unwrap().push(late);
        let _ = self.done.send(());
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn firing_lateness() {
    const PER_SECOND: i64 = 10_000;
    const SECONDS: i64 = 5;
    let broker = MemoryBroker::new();
    broker.create_topic("bench", 8).expect("topic");
    let store = MemoryTimerStore::new();
    // Timers due from 3 s from now, PER_SECOND each second, on 10,000 keys.
    let first = clock::now().as_millis() / 1000 + 3;
    for n in 0..PER_SECOND * SECONDS {
        let key = format!("key-{}", n % 10_000);
        let partition = prosody::broker::partition_for_key(key.as_bytes(), 8);
        let time = Timestamp::from_millis((first + n / PER_SECOND) * 1000);
        store.schedule(
            &TopicPartition::new("bench", partition),
            TimerEntry::new(key, time),
        );
    }
    let client = ProsodyClient::builder()
        .broker(broker)
        .stores(MemoryStores::from_parts(
            store,
            MemoryDeferStore::new(),
            MemoryDedupStore::new(),
        ))
        .group_id("bench")
        .subscribed_topics(["bench"])
        .build()
        .await
        .expect("client");
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let (done, mut fired) = mpsc::unbounded_channel();
    client
        .subscribe(Recorder {
            lateness: Arc::clone(&lateness),
            done,
        })
        .await
        .expect("subscribe");
    for _ in 0..PER_SECOND * SECONDS {
        tokio::time::timeout(Duration::from_secs(60), fired.recv())
            .await
            .expect("every timer fires")
            .expect("open");
    }
    client.shutdown().await;
    let mut late = lateness.lock().unwrap().clone();
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize];
    println!(
        "lateness: {} timers at {PER_SECOND}/s: p50 {} ms, p99 {} ms, max {} ms, min {} ms",
        late.len(),
        at(0.5),
        at(0.99),
        late[late.len() - 1],
        late[0]
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async { schedule_rate_and_memory() });
    rt.block_on(firing_lateness());
}
