//! The README's table of gauges, checked against what `GET /metrics`
//! shows, so the two cannot drift: for every gauge in the table, one
//! partition is taken through the table's phases (held before any
//! subject, while each gauge's subject exists, after it is gone, after
//! the partition is let go of) and each scrape is compared with the
//! table's cells. Every `prosody.*` gauge the scrape shows is in the
//! table, and every gauge in the table shows. Also: a partition with a
//! backlog that receives nothing shows its lag from the first scrape.
//!
//! A gauge is added by adding its row to the README's table: `scraped as`
//! names its `/metrics` family, and the phases use the standard scenario
//! below (a record deferred after a failure, a record held by its
//! handler with a second one of its key waiting behind it, the partition
//! paused for backpressure, a timer scheduled; then all settled, the
//! deferred record retried with success and the timer cleared; then
//! `unsubscribe()`).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{
    Broker as _, Consumer as _, ConsumerConfig, ConsumerEvent, OutgoingRecord, Producer as _,
    TopicPartition,
};
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient, Timer,
    Timestamp,
};
use prosody_core::clock;
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::withhold::Withholding;
use tokio::sync::Notify;

use crate::support;

/// How long (in real time) a phase may take to show. The paused clock
/// moves on by itself whenever the runtime waits for the scrape's socket,
/// so the deadline is the wall clock's, and the handler's deadline, the
/// stall threshold and the timer are hours away.
const WALL: Duration = Duration::from_secs(60);

/// The phases, in the order of the table's columns after `its subject`.
const PHASES: [&str; 4] = [
    "held, before its subject",
    "while its subject exists",
    "after its subject is gone",
    "after the partition is let go",
];

/// What one cell says a scrape shows for the partition.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    /// No line for the partition.
    NoSeries,
    /// A line with exactly this value.
    Exactly(f64),
    /// A line with the gauge's reading.
    Value,
}

impl Cell {
    fn parse(text: &str) -> Self {
        match text.trim().trim_matches('`') {
            "no series" => Self::NoSeries,
            "value" => Self::Value,
            number => Self::Exactly(
                number
                    .parse()
                    .unwrap_or_else(|_| panic!("a README cell reads {text:?}")),
            ),
        }
    }

    /// Whether the partition's `values` on a page match `gauge`'s cell. A
    /// `value` is above zero, so a gauge stuck at zero fails, except for
    /// the two ages, which may read zero while their subject exists (a
    /// timer not yet due; a record as old as the paused clock's last step).
    fn matches(self, gauge: &str, values: &[f64]) -> bool {
        let ages = ["prosody.timer.lag", "prosody.partition.lag.duration"];
        match (self, values) {
            (Self::NoSeries, []) => true,
            (Self::Exactly(want), [got]) => (want - got).abs() < f64::EPSILON,
            (Self::Value, [got]) if ages.contains(&gauge) => got.is_finite() && *got >= 0.0,
            (Self::Value, [got]) => got.is_finite() && *got > 0.0,
            _ => false,
        }
    }
}

/// One row of the README's gauge table.
#[derive(Debug)]
struct Row {
    gauge: String,
    scraped: String,
    phases: [Cell; 4],
}

/// The README's gauge table (section "Metrics"): the table whose header
/// starts with `| gauge | scraped as |`.
fn table() -> Vec<Row> {
    let readme = include_str!("../../README.md");
    let metrics = readme
        .split_once("### Metrics")
        .expect("a Metrics section")
        .1;
    let mut lines = metrics
        .lines()
        .skip_while(|line| !line.starts_with("| gauge | scraped as |"));
    let header = cells(lines.next().expect("the gauge table"));
    assert_eq!(header[3..], PHASES, "the table's phase columns");
    lines
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells = cells(line);
            assert_eq!(cells.len(), 7, "{line}");
            let name = |cell: &str| cell.trim_matches('`').to_owned();
            Row {
                gauge: name(&cells[0]),
                scraped: name(&cells[1]),
                phases: [3, 4, 5, 6].map(|column| Cell::parse(&cells[column])),
            }
        })
        .collect()
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|cell| cell.trim().to_owned())
        .collect()
}

/// The values of family `scraped` on `page` for partition 0 of `topic`,
/// in group `group`.
fn values(page: &str, scraped: &str, group: &str, topic: &str) -> Vec<f64> {
    let labels = [
        format!(r#"messaging_consumer_group_name="{group}""#),
        format!(r#"messaging_destination_name="{topic}""#),
        r#"messaging_destination_partition_id="0""#.to_owned(),
    ];
    page.lines()
        .filter(|line| line.starts_with(&format!("{scraped}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label.as_str())))
        .map(|line| {
            let value = line.rsplit(' ').next().unwrap_or_default();
            value
                .parse()
                .unwrap_or_else(|_| panic!("a value in {line}"))
        })
        .collect()
}

/// The `prosody_*` gauge families on `page`.
fn gauges(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.strip_suffix(" gauge"))
        .filter(|name| name.starts_with("prosody_"))
        .map(str::to_owned)
        .collect()
}

async fn scrape(address: SocketAddr) -> String {
    let (status, _, body) = support::http::fetch(address, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Scrapes until every row shows what its cell of phase `phase` says;
/// returns the gauge families seen meanwhile.
async fn phase(
    client: &ProsodyClient,
    rows: &[Row],
    phase: usize,
    group: &str,
    topic: &str,
) -> BTreeSet<String> {
    let address = client.probe_address().expect("the probe runs");
    let mut seen = BTreeSet::new();
    let mut last = String::new();
    let wall = std::time::Instant::now() + WALL;
    while std::time::Instant::now() < wall {
        let page = scrape(address).await;
        seen.extend(gauges(&page));
        let wrong: Vec<String> = rows
            .iter()
            .filter_map(|row| {
                let got = values(&page, &row.scraped, group, topic);
                let want = row.phases[phase];
                (!want.matches(&row.gauge, &got))
                    .then(|| format!("{}: {want:?}, scraped {got:?}", row.gauge))
            })
            .collect();
        if wrong.is_empty() {
            return seen;
        }
        last = format!("{wrong:#?}\n{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("phase {:?}: {last}", PHASES[phase]);
}

/// Key `hold` waits until released; key `defer` fails (transiently, so
/// it is deferred) until released; key `timer` schedules a timer six
/// hours ahead, or with payload `{"clear": true}` clears its timers.
#[derive(Clone, Default)]
struct Scripted {
    released: Arc<AtomicBool>,
    release: Arc<Notify>,
}

impl EventHandler for Scripted {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        match message.key.as_str() {
            "hold" => loop {
                let released = self.release.notified();
                if self.released.load(Ordering::Acquire) {
                    break;
                }
                released.await;
            },
            "defer" if !self.released.load(Ordering::Acquire) => {
                return Err(HandlerError::transient("not released yet"));
            }
            "timer" if message.payload["clear"] == Value::Bool(true) => {
                context.clear_scheduled()?;
            }
            "timer" => {
                let due = (clock::now().as_millis() / 1000 + 6 * 3600) * 1000;
                context.schedule(Timestamp::from_millis(due))?;
            }
            _ => {}
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

/// Commits `offset` for partition 0 of `topic` in `group`, as an earlier
/// member of the group did.
async fn commit_before(broker: &MemoryBroker, group: &str, topic: &str, offset: i64) {
    let mut member = broker
        .consumer(&ConsumerConfig {
            group_id: group.to_owned(),
            topics: vec![Arc::from(topic)],
        })
        .await
        .unwrap();
    while !matches!(member.poll().await.unwrap(), ConsumerEvent::Assigned(_)) {}
    member
        .store_offset(&TopicPartition::new(topic, 0), offset)
        .unwrap();
    member.commit().await.unwrap();
    member.close().await;
}

async fn send(broker: &MemoryBroker, topic: &str, key: &str, payload: &str) {
    let mut record = OutgoingRecord::new(topic, key.to_owned(), payload.as_bytes().to_vec());
    record.partition = Some(0);
    broker
        .producer()
        .unwrap()
        .send(record, Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_readmes_gauge_table_is_what_a_scrape_shows() {
    const GROUP: &str = "gauges-table";
    const TOPIC: &str = "gauged";
    let rows = table();
    assert!(!rows.is_empty(), "the README's gauge table has rows");
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 1).unwrap();
    commit_before(&broker, GROUP, TOPIC, 0).await;
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id(GROUP)
        .source_system("gauges-test")
        .subscribed_topics([TOPIC])
        .probe_port(0)
        .max_uncommitted(2)
        .slab_size(Duration::from_secs(24 * 3600))
        .stall_threshold(Duration::from_secs(24 * 3600))
        .timeout(Duration::from_secs(12 * 3600))
        // The deferred record is retried after the timer's six hours.
        .defer_base(Duration::from_secs(8 * 3600))
        .build()
        .await
        .unwrap();
    let handler = Scripted::default();
    client.subscribe(handler.clone()).await.unwrap();
    let mut seen = phase(&client, &rows, 0, GROUP, TOPIC).await;

    send(&broker, TOPIC, "timer", "{}").await;
    send(&broker, TOPIC, "defer", "{}").await;
    send(&broker, TOPIC, "hold", "{}").await;
    send(&broker, TOPIC, "hold", "{}").await;
    seen.extend(phase(&client, &rows, 1, GROUP, TOPIC).await);

    handler.released.store(true, Ordering::Release);
    handler.release.notify_waiters();
    send(&broker, TOPIC, "timer", r#"{"clear": true}"#).await;
    seen.extend(phase(&client, &rows, 2, GROUP, TOPIC).await);

    client.unsubscribe().await.unwrap();
    seen.extend(phase(&client, &rows, 3, GROUP, TOPIC).await);

    let table: BTreeSet<String> = rows.iter().map(|row| row.scraped.clone()).collect();
    assert_eq!(
        seen, table,
        "the prosody gauges scraped, and those of the README's table"
    );
    client.shutdown().await;
}

/// A partition whose group committed offset 4 of 10, held by a member that
/// receives nothing from it, shows a lag of 6 at the first scrape that
/// shows the partition held.
#[tokio::test(start_paused = true)]
async fn a_partition_that_receives_nothing_shows_its_backlog_from_the_first_scrape() {
    const GROUP: &str = "gauges-stalled";
    const TOPIC: &str = "stalled";
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 1).unwrap();
    for n in 0..10 {
        send(&broker, TOPIC, &format!("key-{n}"), "{}").await;
    }
    commit_before(&broker, GROUP, TOPIC, 4).await;
    let withholding = Withholding {
        inner: broker.clone(),
        withheld: Arc::new(HashSet::from([TopicPartition::new(TOPIC, 0)])),
    };
    let client = ProsodyClient::builder()
        .broker(withholding)
        .group_id(GROUP)
        .source_system("gauges-test")
        .subscribed_topics([TOPIC])
        .probe_port(0)
        .build()
        .await
        .unwrap();
    client.subscribe(Scripted::default()).await.unwrap();
    let address = client.probe_address().expect("the probe runs");
    let wall = std::time::Instant::now() + WALL;
    let page = loop {
        let page = scrape(address).await;
        if !values(&page, "prosody_partition_unsettled", GROUP, TOPIC).is_empty() {
            break page;
        }
        assert!(std::time::Instant::now() < wall, "the partition is held");
        tokio::task::yield_now().await;
    };
    assert_eq!(
        values(&page, "prosody_partition_lag", GROUP, TOPIC),
        [6.0],
        "the lag at the first scrape that shows the partition held:\n{page}"
    );
    assert_eq!(
        values(&page, "prosody_partition_unsettled", GROUP, TOPIC),
        [0.0],
        "nothing received"
    );
    client.shutdown().await;
}
