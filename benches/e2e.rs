//! End-to-end throughput on Kafka: a raw rdkafka consumer loop against the
//! library in best-effort and pipeline modes, printed as records per second
//! from the first record to the last (the group join left out), as a ratio
//! to the raw loop, with the CPU used meanwhile and the process's peak RSS
//! during the case (reset before it, so it still counts what was resident
//! then). Two raw loops: rdkafka's stream as it comes, and the least a
//! correct consumer does (decode each payload, store its offset, commit
//! every second). The bench first checks that the topic holds every
//! record produced.
//!
//! `cargo bench --bench e2e` (release) runs on librdkafka's mock cluster, in
//! process; `E2E_BROKER=real` on the Kafka that `PROSODY_BOOTSTRAP_SERVERS`
//! names (`scripts/services start`), in a topic of its own. `E2E_RECORDS`,
//! `E2E_KEYS` and `E2E_PARTITIONS` change the defaults (200,000, 10,000, 8);
//! `E2E_CASES=best-effort,pipeline,sleep` picks the library's cases;
//! `cassandra` adds the pipeline on the Cassandra stores of
//! `PROSODY_CASSANDRA_NODES`; `state` and `state-cassandra` a handler that
//! counts its key's records in keyed state, on memory and on Cassandra
//! (`E2E_DISK=true` with the owner cache's disk tier). `E2E_IDS=false`
//! produces records without an `id`, which dedup lets pass without asking
//! its store.

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::cast_precision_loss,
    reason = "bench code fails loudly and prints approximate figures"
)]

#[path = "support/counting.rs"]
mod counting;
#[path = "support/memory.rs"]
mod memory;
#[path = "support/raw.rs"]
mod raw;

use counting::{Counting, READS};
use memory::{cpu_line, cpu_seconds};
use std::cell::Cell;

use futures_util::StreamExt;
use prosody::broker::{Broker, OutgoingRecord, Producer};
use prosody::state::ValueDef;
use prosody::{
    AdminClient, Context, EventHandler, Excise, HandlerError, KafkaBroker, KafkaConfig,
    MemoryStores, Message, Mode, ProsodyClient, Timer, TopicOptions,
};
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_kafka::mock::MockKafka;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Where the bench runs: its servers and topic (and the mock cluster,
/// kept alive, when it runs on one).
struct Target {
    servers: String,
    topic: String,
    _mock: Option<MockKafka>,
}

impl Target {
    async fn start(partitions: i32) -> Self {
        if std::env::var("E2E_BROKER").is_ok_and(|b| b == "real") {
            let servers = std::env::var("PROSODY_BOOTSTRAP_SERVERS")
                .expect("E2E_BROKER=real needs PROSODY_BOOTSTRAP_SERVERS");
            let topic = format!("bench-{}", std::process::id());
            let options = TopicOptions {
                partitions: Some(partitions),
                replication_factor: Some(1),
                ..TopicOptions::default()
            };
            let config = KafkaConfig::new(servers.split(',')).unwrap();
            AdminClient::with_config(&config)
                .unwrap()
                .create_topic(&topic, &options)
                .await
                .unwrap();
            println!("on real Kafka at {servers}, topic {topic}");
            return Self {
                servers,
                topic,
                _mock: None,
            };
        }
        let cluster = MockKafka::start(1).unwrap();
        cluster.create_topic("bench", partitions).unwrap();
        println!("on librdkafka's mock cluster");
        Self {
            servers: cluster.bootstrap_servers().to_owned(),
            topic: "bench".to_owned(),
            _mock: Some(cluster),
        }
    }
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counts handled records and wakes the waiter at the target.
#[derive(Clone)]
struct Counter {
    handled: Arc<AtomicUsize>,
    /// Nanoseconds spent inside `on_message`, summed over all calls.
    busy: Arc<AtomicU64>,
    /// When the first call began: the clock starts there, not at subscribe,
    /// so the group join is not counted.
    first: Arc<OnceLock<(Instant, f64)>>,
    done: Arc<Notify>,
    target: usize,
    sleep: Option<Duration>,
    /// Whether each record adds one to its key's [`COUNT`].
    counts: bool,
    /// Nanoseconds of each `get` of the count: `[cache hits, misses]`
    /// (a miss read the store).
    gets: Arc<Mutex<[Vec<u64>; 2]>>,
}

/// Records per key, for the keyed-state cases.
static COUNT: ValueDef<u64> = ValueDef::new("count");

impl Counter {
    fn new(target: usize, sleep: Option<Duration>) -> Self {
        Self {
            handled: Arc::default(),
            busy: Arc::default(),
            first: Arc::default(),
            done: Arc::default(),
            target,
            sleep,
            counts: false,
            gets: Arc::default(),
        }
    }

    fn count(&self) {
        if self.handled.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.notify_one();
        }
    }
}

impl EventHandler for Counter {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        self.first.get_or_init(|| (Instant::now(), cpu_seconds()));
        if self.counts {
            let count = context.state(&COUNT)?;
            let (got, reads, took) = READS
                .scope(Cell::new(0), async {
                    let start = Instant::now();
                    let got = count.get().await;
                    (got, READS.with(Cell::get), start.elapsed())
                })
                .await;
            let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
            self.gets.lock().unwrap()[usize::from(reads > 0)].push(nanos);
            let next = got?.unwrap_or(0) + 1;
            count.set(&next).await?;
        }
        if let Some(sleep) = self.sleep {
            let start = Instant::now();
            tokio::time::sleep(sleep).await;
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.busy.fetch_add(nanos, Ordering::Relaxed);
        }
        self.count();
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        self.count();
        Ok(())
    }
}

async fn produce(broker: &KafkaBroker, topic: &str, records: usize, keys: usize, ids: bool) {
    let producer = broker.producer().unwrap();
    let start = Instant::now();
    let mut sends = futures_util::stream::iter(0..records)
        .map(|n| {
            let producer = producer.clone();
            async move {
                // About 100 bytes of JSON with `type`, and `id` if asked.
                let payload = if ids {
                    format!(
                        r#"{{"id":"event-{n:010}","type":"bench.event.created","amount":{n},"note":"throughput"}}"#
                    )
                } else {
                    format!(
                        r#"{{"ref":"event-{n:010}","type":"bench.event.created","amount":{n},"note":"throughput"}}"#
                    )
                };
                let record = OutgoingRecord::new(topic, format!("key-{}", n % keys), payload);
                producer.send(record, Duration::from_secs(60)).await
            }
        })
        .buffer_unordered(1 << 16);
    while let Some(sent) = sends.next().await {
        sent.unwrap();
    }
    println!(
        "produced {records} records over {keys} keys in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// The stores of a case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    Cassandra,
}

/// The Cassandra stores of `PROSODY_CASSANDRA_NODES` for `group`, in a
/// keyspace of this run's own.
async fn cassandra(group: &str) -> CassandraStores {
    let nodes = std::env::var("PROSODY_CASSANDRA_NODES")
        .expect("the cassandra case needs PROSODY_CASSANDRA_NODES");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let config = CassandraConfig::new(nodes.split(','))
        .keyspace(format!("bench_{}", std::process::id()))
        .credentials(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        );
    CassandraStores::connect(&config, group).await.unwrap()
}

async fn library(
    target: &Target,
    mode: Mode,
    (group, backend): (&str, Backend),
    records: usize,
    (sleep, counts): (Option<Duration>, bool),
) -> f64 {
    let group = format!("{group}-{}", target.topic);
    let calls = Arc::new(AtomicU64::new(0));
    let builder = ProsodyClient::builder().bootstrap_servers([target.servers.as_str()]);
    // The case's stores, whatever PROSODY_CASSANDRA_NODES says, counted.
    let mut builder = match backend {
        Backend::Memory => builder.stores(Counting {
            inner: MemoryStores::new(),
            calls: calls.clone(),
        }),
        Backend::Cassandra => builder.stores(Counting {
            inner: cassandra(&group).await,
            calls: calls.clone(),
        }),
    };
    // `E2E_KAFKA=key=value,...` tries librdkafka settings.
    for setting in std::env::var("E2E_KAFKA").unwrap_or_default().split(',') {
        if let Some((key, value)) = setting.split_once('=') {
            builder = builder.kafka_property(key, value);
        }
    }
    if counts {
        builder = builder.state_collections([COUNT.spec()]);
        // `E2E_DISK=true` gives the owner cache its disk tier.
        if std::env::var("E2E_DISK").is_ok_and(|on| on == "true") {
            builder =
                builder.state_cache_dir(std::env::temp_dir().join(format!("e2e-disk-{group}")));
        }
    }
    let client = builder
        .group_id(group)
        .subscribed_topics([target.topic.as_str()])
        .mode(mode)
        // Lifecycle events would share the producer and the CPU.
        .telemetry_enabled(false)
        .build()
        .await
        .unwrap();
    let mut counter = Counter::new(records, sleep);
    counter.counts = counts;
    let done = counter.done.notified();
    client.subscribe(counter.clone()).await.unwrap();
    done.await;
    let (start, cpu) = *counter.first.get().unwrap();
    let wall = start.elapsed().as_secs_f64();
    println!(
        "  {}, {:.2} store calls per record",
        cpu_line(cpu_seconds() - cpu, wall, records),
        calls.load(Ordering::Relaxed) as f64 / records as f64
    );
    let rate = records as f64 / wall;
    for (what, took) in ["cache hit", "cache miss"]
        .iter()
        .zip(counter.gets.lock().unwrap().iter_mut())
    {
        if took.is_empty() {
            continue;
        }
        took.sort_unstable();
        let at = |q: usize| took[(took.len() * q / 1000).min(took.len() - 1)] as f64 / 1e3;
        println!(
            "  get, {what}: p50 {:.1} us, p99 {:.1} us ({} calls)",
            at(500),
            at(990),
            took.len()
        );
    }
    if sleep.is_some() {
        // Whether the handlers, not the library, were the limit: the mean
        // time a sleeping handler took, and how many were busy on average.
        let busy = counter.busy.load(Ordering::Relaxed) as f64 / 1e9;
        println!(
            "  mean handler time {:.2} ms, mean handlers busy {:.1}",
            busy * 1e3 / records as f64,
            busy / wall
        );
    }
    client.shutdown().await;
    rate
}

/// The bare loop's rate (printed with its peak) and the correct loop's.
async fn raw_loops(target: &Target, records: usize) -> (f64, f64) {
    memory::reset_peak();
    let (raw, cpu) = raw::raw(&target.servers, &target.topic, records, false).await;
    let raw_peak = memory::status_mib("VmHWM");
    println!("  {cpu}");
    println!(
        "{:<34} {raw:>9.0} records/s  peak RSS {raw_peak:.0} MiB",
        "raw rdkafka StreamConsumer"
    );
    memory::reset_peak();
    let (correct, cpu) = raw::raw(&target.servers, &target.topic, records, true).await;
    println!("  {cpu}");
    (raw, correct)
}

fn main() {
    let records = setting("E2E_RECORDS", 200_000);
    let keys = setting("E2E_KEYS", 10_000);
    let partitions = i32::try_from(setting("E2E_PARTITIONS", 8)).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let target = Target::start(partitions).await;
        // The producer batches as a busy producer does (`E2E_LINGER_MS`,
        // default 100): librdkafka's mock cluster answers a fetch with one
        // message set per partition and finds it by walking the partition's
        // sets from the first, so many small sets make every consumer's
        // fetches cost the mock time that grows with the log.
        let linger = setting("E2E_LINGER_MS", 100).to_string();
        let broker = KafkaBroker::new(
            KafkaConfig::new([target.servers.as_str()])
                .unwrap()
                .with("linger.ms", linger),
        );
        let ids = std::env::var("E2E_IDS").map_or(true, |ids| ids != "false");
        produce(&broker, &target.topic, records, keys, ids).await;
        let with = if ids { "with" } else { "without" };
        println!("{records} records {with} id, {keys} keys, {partitions} partitions");
        raw::check_holds(&target.servers, &target.topic, partitions, records);
        // Each case's peak RSS is its own: the peak is reset before it (it
        // still counts what was resident then, such as the mock cluster's
        // copy of the topic, and what earlier cases freed but the allocator
        // kept). `E2E_RAW=false` skips the raw loops, so a case alone in its
        // process can be compared with the raw loop alone in another.
        let raws = std::env::var("E2E_RAW").map_or(true, |raw| raw != "false");
        let (raw, correct) = if raws {
            raw_loops(&target, records).await
        } else {
            (f64::NAN, f64::NAN)
        };
        let report = |name: &str, rate: f64| {
            println!(
                "{name:<34} {:>9.0} records/s  {:>5.2} of raw  {:>5.2} of correct  peak RSS {:.0} MiB",
                rate,
                rate / raw,
                rate / correct,
                memory::status_mib("VmHWM")
            );
        };
        if raws {
            report("raw, decoding, storing offsets", correct);
        }
        // `E2E_CASES=best-effort,pipeline,sleep` picks cases (for profiling).
        let cases =
            std::env::var("E2E_CASES").unwrap_or_else(|_| "best-effort,pipeline,sleep".into());
        let run = |case: &str| cases.split(',').any(|c| c == case);
        if run("best-effort") {
            memory::reset_peak();
            let rate = library(
                &target,
                Mode::BestEffort,
                ("best-effort", Backend::Memory),
                records,
                (None, false),
            )
            .await;
            report("best-effort, no-op handler", rate);
        }
        if run("pipeline") {
            memory::reset_peak();
            let rate = library(
                &target,
                Mode::Pipeline,
                ("pipeline", Backend::Memory),
                records,
                (None, false),
            )
            .await;
            report("pipeline, no-op handler", rate);
        }
        if run("cassandra") {
            memory::reset_peak();
            let case = ("pipeline-cassandra", Backend::Cassandra);
            let rate = library(&target, Mode::Pipeline, case, records, (None, false)).await;
            report("pipeline, Cassandra stores", rate);
        }
        // A counter per key in keyed state, on each backend.
        if run("state") {
            memory::reset_peak();
            let case = ("pipeline-state", Backend::Memory);
            let rate = library(&target, Mode::Pipeline, case, records, (None, true)).await;
            report("pipeline, counter in keyed state, memory", rate);
        }
        if run("state-cassandra") {
            memory::reset_peak();
            let case = ("pipeline-state-cassandra", Backend::Cassandra);
            let rate = library(&target, Mode::Pipeline, case, records, (None, true)).await;
            report("pipeline, counter in keyed state, Cassandra", rate);
        }
        if run("sleep") {
            memory::reset_peak();
            let sleep = Some(Duration::from_millis(1));
            let rate = library(
                &target,
                Mode::Pipeline,
                ("pipeline-sleep", Backend::Memory),
                records,
                (sleep, false),
            )
            .await;
            report("pipeline, handler sleeping 1 ms", rate);
        }
    });
}
