//! The client on real Kafka and real Cassandra (from `scripts/services`):
//! deferred records, timers and dedup records outlive their member.
//!
//! - A member in a separate OS process (this binary, run again as a
//!   member) defers records and schedules timers, and is killed with
//!   SIGKILL; the next member handles every record, in key order, fires
//!   every timer once and none early, and skips a duplicate of a record
//!   the dead member handled.
//! - A member defers a record, commits past it and hands its partition
//!   over; the next member handles the record (the loss this suite guards
//!   against).
//!
//! - A counter per key counts each record once across a SIGKILL and a
//!   rebalance (`counter.rs`).
//! - A deque of messages reads its messages back from the log, whole and
//!   in order, across a hand-off (`window.rs`).
//!
//! Its own harness (`harness = false`), so that it can run as a member:
//! with `DURABLE_MEMBER` set it is one, printing what it handles as JSON
//! lines. Without the servers it prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod counter;
mod member;
mod window;

use member::{MEMBER, Seen, World, builder, member_main, spawn_member};
use prosody::Timestamp;
use prosody::broker::TopicPartition;
use prosody::store::TimerStore;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(180);

/// Waits for `done`, polling, within the deadline.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let wait = async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"));
}

fn handled(log: &[Seen], event: &str) -> BTreeSet<u64> {
    log.iter()
        .filter(|seen| seen.event == event)
        .filter_map(|seen| seen.n)
        .collect()
}

/// Per key: a record with a timer 30 s out (even keys), one member A fails
/// (keys 0 to 3), one behind it; and on key-5 a record with an id. Returns
/// the records, every record's number, and those A fails.
fn workload() -> (Vec<(String, Value)>, BTreeSet<u64>, BTreeSet<u64>) {
    let mut records = Vec::new();
    let mut n = 0;
    for k in 0..6 {
        let key = format!("key-{k}");
        let mut first = json!({"n": n});
        if k % 2 == 0 {
            first["timer_in"] = json!(30);
        }
        records.push((key.clone(), first));
        n += 1;
        if k < 4 {
            records.push((key.clone(), json!({"n": n, "fail_at": "A"})));
            n += 1;
        }
        records.push((key.clone(), json!({"n": n})));
        n += 1;
    }
    records.push(("key-5".to_owned(), json!({"n": 100, "id": "order-1"})));
    let all = records
        .iter()
        .filter_map(|(_, p)| p["n"].as_u64())
        .collect();
    let failing = records
        .iter()
        .filter(|(_, p)| p["fail_at"] == "A")
        .filter_map(|(_, p)| p["n"].as_u64())
        .collect();
    (records, all, failing)
}

/// What A and then B handled: everything, the duplicate not, each key in
/// order, each timer once at B and none early.
fn check_killed(by_a: &[Seen], by_b: &[Seen], all: &BTreeSet<u64>) {
    let mut every = handled(by_a, "message");
    every.extend(handled(by_b, "message"));
    assert!(
        all.is_subset(&every),
        "not handled: {:?}",
        all.difference(&every)
    );
    assert!(!every.contains(&200), "the duplicate was handled: {by_b:?}");
    // Per key, the records handled in order: A's, then B's.
    for k in 0..6 {
        let key = format!("key-{k}");
        let sequence: Vec<u64> = by_a
            .iter()
            .chain(by_b)
            .filter(|seen| seen.event == "message" && seen.key == key)
            .filter_map(|seen| seen.n)
            .collect();
        assert!(
            sequence.windows(2).all(|w| w[0] < w[1]),
            "{key}: {sequence:?}"
        );
    }
    let fired: Vec<&Seen> = by_b.iter().filter(|seen| seen.event == "timer").collect();
    assert_eq!(fired.len(), 3, "timers fired: {fired:?}");
    let keys: BTreeSet<&str> = fired.iter().map(|seen| seen.key.as_str()).collect();
    assert_eq!(keys, BTreeSet::from(["key-0", "key-2", "key-4"]));
    for seen in fired {
        let time = seen.time.unwrap();
        assert!(
            seen.at >= time,
            "fired {} ms early: {seen:?}",
            time - seen.at
        );
    }
}

/// 300 records over 20 keys, each taking 100 ms: one in seven fails at A
/// (so A defers it and the rest of its key waits), each key's fifth
/// schedules a timer 20 s out. Returns the records and the numbers of the
/// timer records.
fn busy_workload() -> (Vec<(String, Value)>, BTreeSet<u64>) {
    let mut records = Vec::new();
    let mut timers = BTreeSet::new();
    for n in 0..300_u64 {
        let mut payload = json!({"n": n, "sleep_ms": 100});
        if n % 7 == 3 {
            payload["fail_at"] = json!("A");
        }
        if n / 20 == 5 {
            payload["timer_in"] = json!(20);
            timers.insert(n);
        }
        records.push((format!("key-{}", n % 20), payload));
    }
    (records, timers)
}

/// Member A (a process) is killed with SIGKILL while it is busy (deferred
/// retries running, commits to Kafka and Cassandra in flight), once it
/// committed past a record it deferred. Member B handles
/// every record, each key's first handlings in offset order, and fires at
/// least one timer per timer record (A's or its own), none early.
async fn a_member_killed_while_busy_loses_nothing() -> Option<()> {
    let world = World::new("busy", 4).await?;
    let (records, timer_records) = busy_workload();
    let delivered = world.deliver(&records).await;
    let deferred: Vec<(i32, i64)> = records
        .iter()
        .zip(&delivered)
        .filter(|((_, payload), _)| payload["fail_at"] == "A")
        .map(|(_, at)| *at)
        .collect();
    let log_a = Arc::new(Mutex::new(Vec::new()));
    let mut a = spawn_member(&world, "A", &log_a);
    // Killed once it committed past a record it deferred (so only the
    // stores remember that record), with its retries still running.
    until("A committed past a deferred record", async || {
        let committed = world.committed();
        handled(&log_a.lock().unwrap(), "message").len() >= 30
            && deferred
                .iter()
                .any(|(p, offset)| committed.get(p).is_some_and(|c| c > offset))
    })
    .await;
    a.kill();
    let by_a = log_a.lock().unwrap().clone();
    let log_b = Arc::new(Mutex::new(Vec::new()));
    let b = world.member("B", &log_b).await;
    let every = |log_b: &[Seen]| {
        let mut every = handled(&by_a, "message");
        every.extend(handled(log_b, "message"));
        every
    };
    until("B handled the rest and fired the timers", async || {
        let log = log_b.lock().unwrap();
        every(&log).len() == records.len()
            && log.iter().filter(|seen| seen.event == "timer").count() >= timer_records.len()
    })
    .await;
    b.shutdown().await;
    let by_b = log_b.lock().unwrap().clone();
    for k in 0..20 {
        let key = format!("key-{k}");
        let mut firsts: Vec<u64> = Vec::new();
        for seen in by_a.iter().chain(&by_b) {
            if seen.event == "message" && seen.key == key {
                let n = seen.n.unwrap();
                if !firsts.contains(&n) {
                    firsts.push(n);
                }
            }
        }
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{key}: {firsts:?}");
    }
    for seen in by_b.iter().filter(|seen| seen.event == "timer") {
        let time = seen.time.unwrap();
        assert!(
            seen.at >= time,
            "fired {} ms early: {seen:?}",
            time - seen.at
        );
    }
    Some(())
}

/// Member A (a process) defers records and schedules timers, and is killed;
/// member B takes its partitions.
async fn a_killed_member_loses_nothing() -> Option<()> {
    let world = World::new("killed", 2).await?;
    let (records, all, failing) = workload();
    let ends = world.send(&records).await;
    let log_a = Arc::new(Mutex::new(Vec::new()));
    let mut a = spawn_member(&world, "A", &log_a);
    let stores = world.stores().await;
    // A handled what it could, deferred the rest, committed past all of
    // it, and its timers and deferrals are in Cassandra.
    until("A deferred and committed", async || {
        let failed = handled(&log_a.lock().unwrap(), "failed");
        if failed != failing || !world.committed_to(&ends) {
            return false;
        }
        let mut deferred_keys = 0;
        let mut timers = 0;
        for p in world.partitions() {
            deferred_keys += stores.deferred_keys(&p).await.unwrap().len();
            timers += stores
                .load(
                    &p,
                    Timestamp::from_millis(0),
                    Timestamp::from_millis(i64::MAX / 2),
                )
                .await
                .unwrap()
                .iter()
                .filter(|t| t.kind == prosody::store::TimerKind::Application)
                .count();
        }
        deferred_keys == 4 && timers == 3
    })
    .await;
    a.kill();
    let by_a = log_a.lock().unwrap().clone();
    assert!(
        by_a.iter().all(|seen| seen.event != "timer"),
        "a timer fired at A, before it was due: {by_a:?}"
    );

    let log_b = Arc::new(Mutex::new(Vec::new()));
    let b = world.member("B", &log_b).await;
    until(
        "B handled the deferred records and fired the timers",
        async || {
            let log = log_b.lock().unwrap();
            failing.is_subset(&handled(&log, "message"))
                && log.iter().filter(|seen| seen.event == "timer").count() >= 3
        },
    )
    .await;
    // A duplicate of the record A handled (same key and id), then a marker.
    world
        .send(&[
            ("key-5".to_owned(), json!({"n": 200, "id": "order-1"})),
            ("key-5".to_owned(), json!({"n": 201})),
        ])
        .await;
    until("B handled the marker", async || {
        handled(&log_b.lock().unwrap(), "message").contains(&201)
    })
    .await;
    b.shutdown().await;

    let by_b = log_b.lock().unwrap().clone();
    check_killed(&by_a, &by_b, &all);
    Some(())
}

/// Member A defers a record and commits past it, then hands the partition
/// over gracefully; member B handles the record.
async fn a_deferred_record_moves_with_its_partition() -> Option<()> {
    let world = World::new("moved", 1).await?;
    let ends = world
        .send(&[("key".to_owned(), json!({"n": 1, "fail_at": "A"}))])
        .await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = world.member("A", &log).await;
    let stores = world.stores().await;
    let p = TopicPartition::new(world.topic.as_str(), 0);
    until("A deferred the record and committed past it", async || {
        world.committed_to(&ends) && !stores.deferred_keys(&p).await.unwrap().is_empty()
    })
    .await;
    a.shutdown().await;
    let b = world.member("B", &log).await;
    until("B handled the record A deferred", async || {
        handled(&log.lock().unwrap(), "message").contains(&1)
    })
    .await;
    b.shutdown().await;
    until("the backlog drained", async || {
        stores.deferred_keys(&p).await.unwrap().is_empty()
    })
    .await;
    Some(())
}

/// A wrong Cassandra password fails `build()`, naming authentication, and
/// the password shows in neither the error nor its `Debug`.
async fn a_wrong_cassandra_password_fails_the_build() -> Option<()> {
    let world = World::new("login", 1).await?;
    let wrong = "not-the-password-7731";
    let error = builder()
        .group_id(world.group.as_str())
        .cassandra_keyspace(world.keyspace.as_str())
        .cassandra_password(wrong)
        .disable_probe()
        .build()
        .await
        .expect_err("a wrong password is refused");
    let shown = format!("{error} {error:?}");
    assert!(
        matches!(
            error,
            prosody::ConfigError::Cassandra {
                retriable: false,
                ..
            }
        ),
        "{shown}"
    );
    assert!(shown.contains("authentication"), "{shown}");
    assert!(!shown.contains(wrong), "the password shows: {shown}");
    Some(())
}

/// A scenario: `None` when the servers are absent.
type Scenario = fn() -> std::pin::Pin<Box<dyn Future<Output = Option<()>>>>;

fn main() -> ExitCode {
    if let Ok(name) = std::env::var(MEMBER) {
        return member_main(name);
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scenarios: [(&str, Scenario); 6] = [
        ("a_wrong_cassandra_password_fails_the_build", || {
            Box::pin(a_wrong_cassandra_password_fails_the_build())
        }),
        ("a_killed_member_loses_nothing", || {
            Box::pin(a_killed_member_loses_nothing())
        }),
        ("a_member_killed_while_busy_loses_nothing", || {
            Box::pin(a_member_killed_while_busy_loses_nothing())
        }),
        ("a_deferred_record_moves_with_its_partition", || {
            Box::pin(a_deferred_record_moves_with_its_partition())
        }),
        ("a_counter_counts_each_record_once", || {
            Box::pin(counter::a_counter_counts_each_record_once())
        }),
        ("a_message_deque_reads_back_from_the_log", || {
            Box::pin(window::a_message_deque_reads_back_from_the_log())
        }),
    ];
    let mut failed = 0;
    for (name, scenario) in scenarios {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(scenario())
        }));
        match outcome {
            Ok(Some(())) => println!("test {name} ... ok"),
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
