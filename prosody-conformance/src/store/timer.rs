//! The [`TimerStore`] conformance suite: timers written through
//! [`Stores::commit`] (one [`TimerChange`] a commit, named after the single
//! write it stands for: schedule, unschedule, clear) and read back through
//! [`TimerStore::scheduled`] and [`TimerStore::load`].
//!
//! [`TimerStore`]: prosody_contracts::store::TimerStore
//! [`TimerStore::scheduled`]: prosody_contracts::store::TimerStore::scheduled
//! [`TimerStore::load`]: prosody_contracts::store::TimerStore::load
//! [`TimerChange`]: prosody_contracts::store::TimerChange
//!
//! Run each check against a backend, one test per check, or all with
//! [`run_all`]. Each check uses topics no other check or run uses, so checks
//! can share one store (and one Cassandra keyspace). Every store call has a
//! deadline ([`DEADLINE`]); nothing waits for time to pass, so the suite
//! runs the same under a paused clock and against a real backend.
//!
//! Times lie around [`BASE`], a day boundary, so they fall on and beside the
//! slab boundaries of every slab size that divides a day (the default hour
//! included) and span several one-hour slabs.

mod fixture;
mod interleaved;

pub use interleaved::interleaved_operations_keep_slabs_and_keys_consistent;

pub use super::DEADLINE;
use super::{Checked, ensure_eq};
use crate::broker::Failure;
use fixture::{
    Topics, at, at_ms, clear, clear_kind, ensure_scheduled, load, schedule, scheduled, trace,
    unschedule, unschedule_kind,
};
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::Stores;
use prosody_contracts::store::timer::{TimerEntry, TimerKind};

/// The time the checks' timers lie around: 2030-01-01T00:00:00Z.
pub const BASE: Timestamp = Timestamp::from_millis(1_893_456_000_000);

/// An hour in seconds: the default slab size.
const HOUR: i64 = 3600;

/// Scheduling the same timer twice leaves one timer.
pub async fn schedule_is_idempotent(store: &impl Stores) -> Checked {
    let topics = Topics::new("idempotent");
    let p = topics.partition(0);
    let key = Key::from("k");
    let entry = TimerEntry::new(key.clone(), at(60)).with_trace(trace(1));
    schedule(store, &p, entry.clone()).await?;
    schedule(store, &p, entry.clone()).await?;
    let when = "after scheduling one timer twice";
    ensure_scheduled(store, &p, &key, &[at(60)], when).await?;
    ensure_eq(
        &format!("load of the hour {when}"),
        &vec![entry],
        &load(store, &p, at(0), at(HOUR)).await?,
    )
}

/// Every method rounds times to the nearest second, halves up: 12:00:00.4
/// and 12:00:00.0 are one timer.
pub async fn times_round_to_the_second(store: &impl Stores) -> Checked {
    let topics = Topics::new("rounding");
    let p = topics.partition(0);
    let key = Key::from("k");
    for millis in [60_400, 60_000, 61_500, 63_600] {
        schedule(store, &p, TimerEntry::new(key.clone(), at_ms(millis))).await?;
    }
    let when = "after scheduling 60.4 s, 60 s, 61.5 s and 63.6 s";
    ensure_scheduled(store, &p, &key, &[at(60), at(62), at(64)], when).await?;
    let entries = |seconds: &[i64]| -> Vec<TimerEntry> {
        seconds
            .iter()
            .map(|&s| TimerEntry::new(key.clone(), at(s)))
            .collect()
    };
    for (from, until, expected) in [
        // [60 s, 64 s)
        (59_600, 63_700, entries(&[60, 62])),
        // [60 s, 61 s)
        (60_499, 60_500, entries(&[60])),
        // [61 s, 61 s)
        (60_500, 61_499, entries(&[])),
    ] {
        ensure_eq(
            &format!("load from {from} ms to {until} ms past the base {when}"),
            &expected,
            &load(store, &p, at_ms(from), at_ms(until)).await?,
        )?;
    }
    unschedule(store, &p, &key, at_ms(61_700)).await?;
    ensure_scheduled(
        store,
        &p,
        &key,
        &[at(60), at(64)],
        "after unscheduling 61.7 s",
    )
    .await?;
    unschedule(store, &p, &key, at_ms(60_300)).await?;
    ensure_scheduled(store, &p, &key, &[at(64)], "after unscheduling 60.3 s").await
}

/// Scheduling an existing timer again replaces its trace, and no other
/// timer's.
pub async fn schedule_replaces_the_trace(store: &impl Stores) -> Checked {
    let topics = Topics::new("trace");
    let p = topics.partition(0);
    let (a, b) = (Key::from("a"), Key::from("b"));
    let timer = |key: &Key| TimerEntry::new(key.clone(), at(60));
    schedule(store, &p, timer(&a).with_trace(trace(1))).await?;
    schedule(store, &p, timer(&b).with_trace(trace(2))).await?;
    for (entry, what) in [
        (timer(&a).with_trace(trace(3)), "another trace"),
        (timer(&a), "no trace"),
        (
            TimerEntry::new(a.clone(), at_ms(60_300)).with_trace(trace(4)),
            "a time that rounds to it and another trace",
        ),
    ] {
        let expected = vec![entry.clone(), timer(&b).with_trace(trace(2))];
        let expected = expected
            .into_iter()
            .map(|e| TimerEntry { time: at(60), ..e })
            .collect::<Vec<_>>();
        schedule(store, &p, entry).await?;
        ensure_eq(
            &format!("load after scheduling a's timer again with {what}"),
            &expected,
            &load(store, &p, at(0), at(HOUR)).await?,
        )?;
    }
    Ok(())
}

/// `unschedule` removes exactly one timer: not the key's others, not
/// another key's at the same time, not the same timer in another partition
/// or topic. Removing a timer that is not there is no error.
pub async fn unschedule_removes_exactly_one_timer(store: &impl Stores) -> Checked {
    let topics = Topics::new("unschedule");
    let (p0, p1, other) = (
        topics.partition(0),
        topics.partition(1),
        topics.other_topic(),
    );
    let (a, b) = (Key::from("a"), Key::from("b"));
    for t in [10, 20, HOUR + 30] {
        schedule(store, &p0, TimerEntry::new(a.clone(), at(t))).await?;
    }
    schedule(store, &p0, TimerEntry::new(b.clone(), at(20))).await?;
    for p in [&p1, &other] {
        schedule(store, p, TimerEntry::new(a.clone(), at(20))).await?;
    }
    let verify = async |when: &str| -> Checked {
        ensure_scheduled(store, &p0, &a, &[at(10), at(HOUR + 30)], when).await?;
        ensure_scheduled(store, &p0, &b, &[at(20)], when).await?;
        for p in [&p1, &other] {
            ensure_scheduled(store, p, &a, &[at(20)], when).await?;
        }
        ensure_eq(
            &format!("load of {p0} {when}"),
            &vec![
                TimerEntry::new(a.clone(), at(10)),
                TimerEntry::new(b.clone(), at(20)),
                TimerEntry::new(a.clone(), at(HOUR + 30)),
            ],
            &load(store, &p0, at(-HOUR), at(3 * HOUR)).await?,
        )
    };
    unschedule(store, &p0, &a, at(20)).await?;
    verify("after unscheduling a at 20 s").await?;
    unschedule(store, &p0, &a, at(20)).await?;
    unschedule(store, &p0, &a, at(25)).await?;
    unschedule(store, &p0, &Key::from("nobody"), at(10)).await?;
    verify("after unscheduling absent timers").await
}

/// `clear` removes every timer of the key, across slabs, and nothing else;
/// the key can be scheduled again afterwards.
pub async fn clear_removes_every_timer_of_the_key(store: &impl Stores) -> Checked {
    let topics = Topics::new("clear");
    let (p0, p1, other) = (
        topics.partition(0),
        topics.partition(1),
        topics.other_topic(),
    );
    let (a, b) = (Key::from("a"), Key::from("b"));
    for t in [-1, 0, 1, HOUR - 1, HOUR, 3 * HOUR + 7] {
        schedule(store, &p0, TimerEntry::new(a.clone(), at(t))).await?;
    }
    for t in [0, HOUR] {
        schedule(store, &p0, TimerEntry::new(b.clone(), at(t))).await?;
    }
    for p in [&p1, &other] {
        schedule(store, p, TimerEntry::new(a.clone(), at(0))).await?;
    }
    let verify = async |when: &str| -> Checked {
        ensure_scheduled(store, &p0, &a, &[], when).await?;
        ensure_scheduled(store, &p0, &b, &[at(0), at(HOUR)], when).await?;
        for p in [&p1, &other] {
            ensure_scheduled(store, p, &a, &[at(0)], when).await?;
        }
        ensure_eq(
            &format!("load of {p0} {when}"),
            &vec![
                TimerEntry::new(b.clone(), at(0)),
                TimerEntry::new(b.clone(), at(HOUR)),
            ],
            &load(store, &p0, at(-HOUR), at(4 * HOUR)).await?,
        )
    };
    clear(store, &p0, &a).await?;
    verify("after clearing a").await?;
    clear(store, &p0, &a).await?;
    clear(store, &p0, &Key::from("nobody")).await?;
    verify("after clearing keys with no timers").await?;
    schedule(store, &p0, TimerEntry::new(a.clone(), at(5))).await?;
    ensure_scheduled(store, &p0, &a, &[at(5)], "after scheduling a cleared key").await
}

/// `scheduled` lists a key's times ascending, whatever order they were
/// scheduled in, and only that key's; a key with no timers has none.
pub async fn scheduled_is_ascending(store: &impl Stores) -> Checked {
    let topics = Topics::new("ascending");
    let p = topics.partition(0);
    let (a, a2, b) = (Key::from("a"), Key::from("a2"), Key::from("b"));
    let times = [
        3 * HOUR + 1,
        5,
        -HOUR,
        HOUR,
        HOUR - 1,
        2 * HOUR + 30,
        0,
        2 * HOUR,
    ];
    for (i, &t) in times.iter().enumerate() {
        schedule(store, &p, TimerEntry::new(a.clone(), at(t))).await?;
        let other = if i % 2 == 0 { &a2 } else { &b };
        schedule(store, &p, TimerEntry::new(other.clone(), at(t + 1))).await?;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let expected: Vec<Timestamp> = sorted.into_iter().map(at).collect();
    ensure_scheduled(store, &p, &a, &expected, "after scheduling out of order").await?;
    ensure_scheduled(
        store,
        &p,
        &Key::from("nobody"),
        &[],
        "of a key never scheduled",
    )
    .await?;
    ensure_scheduled(store, &topics.partition(1), &a, &[], "of another partition").await
}

/// `load` returns exactly the timers with `from <= time < until`, ordered
/// by (time, key), across slabs and on slab boundaries, and none of other
/// partitions or topics.
pub async fn load_returns_exactly_the_range(store: &impl Stores) -> Checked {
    let topics = Topics::new("load");
    let (p0, p1, other) = (
        topics.partition(0),
        topics.partition(1),
        topics.other_topic(),
    );
    let times = [
        -1,
        0,
        1,
        HOUR - 1,
        HOUR,
        HOUR + 1,
        2 * HOUR,
        3 * HOUR - 1,
        3 * HOUR,
        5 * HOUR + 17,
    ];
    let keys = [Key::from("b"), Key::from("a"), Key::from("c")];
    let mut expected_all = Vec::new();
    for ((n, &t), rotating) in (0u64..).zip(&times).zip(keys.iter().cycle()) {
        // One key per time, and every key at the hour: ties order by key.
        let chosen: Vec<&Key> = if t == HOUR {
            keys.iter().collect()
        } else {
            vec![rotating]
        };
        for key in chosen {
            let mut entry = TimerEntry::new(key.clone(), at(t));
            if n % 2 == 0 {
                entry = entry.with_trace(trace(n));
            }
            schedule(store, &p0, entry.clone()).await?;
            expected_all.push(entry);
        }
        for p in [&p1, &other] {
            for key in [&keys[1], &Key::from("noise")] {
                schedule(store, p, TimerEntry::new(key.clone(), at(t))).await?;
            }
        }
    }
    expected_all.sort_by(|x, y| (x.time, &x.key).cmp(&(y.time, &y.key)));
    for (from, until) in [
        (-HOUR, 6 * HOUR),
        (0, HOUR),
        (HOUR, 3 * HOUR),
        (-1, 1),
        (1, HOUR + 1),
        (HOUR - 1, HOUR),
        (HOUR, HOUR + 1),
        (HOUR + 2, 2 * HOUR),
        (3 * HOUR, 5 * HOUR + 17),
        (5 * HOUR + 17, 5 * HOUR + 18),
        (HOUR, HOUR),
        (3 * HOUR, HOUR),
        (6 * HOUR, 9 * HOUR),
    ] {
        let expected: Vec<TimerEntry> = expected_all
            .iter()
            .filter(|e| (at(from)..at(until)).contains(&e.time))
            .cloned()
            .collect();
        ensure_eq(
            &format!("load({p0}) from {from} s to {until} s past the base"),
            &expected,
            &load(store, &p0, at(from), at(until)).await?,
        )?;
    }
    Ok(())
}

/// Kinds are independent: a key's application and defer timers at the same
/// second are two timers; `scheduled`, `unschedule` and `clear` of one kind
/// leave the other; `load` returns both, ordered by (time, key, kind).
pub async fn kinds_are_independent(store: &impl Stores) -> Checked {
    let topics = Topics::new("kinds");
    let p = topics.partition(0);
    let key = Key::from("k");
    let app = |t: i64| TimerEntry::new(key.clone(), at(t));
    let defer = |t: i64| app(t).with_kind(TimerKind::Defer);
    for entry in [defer(10), app(10), app(20), defer(30)] {
        schedule(store, &p, entry).await?;
    }
    let kinds = async |when: &str, application: &[Timestamp], deferred: &[Timestamp]| {
        ensure_scheduled(store, &p, &key, application, when).await?;
        ensure_eq(
            &format!("scheduled({p}, {key:?}, Defer) {when}"),
            &deferred.to_vec(),
            &scheduled(store, &p, &key, TimerKind::Defer).await?,
        )
    };
    kinds(
        "after scheduling both kinds",
        &[at(10), at(20)],
        &[at(10), at(30)],
    )
    .await?;
    ensure_eq(
        "load of both kinds at one second",
        &vec![app(10), defer(10), app(20), defer(30)],
        &load(store, &p, at(0), at(HOUR)).await?,
    )?;
    unschedule_kind(store, &p, &key, TimerKind::Defer, at(10)).await?;
    kinds(
        "after unscheduling the defer timer at 10 s",
        &[at(10), at(20)],
        &[at(30)],
    )
    .await?;
    clear(store, &p, &key).await?;
    kinds("after clearing the application timers", &[], &[at(30)]).await?;
    schedule(store, &p, app(30)).await?;
    clear_kind(store, &p, &key, TimerKind::Defer).await?;
    kinds("after clearing the defer timers", &[at(30)], &[]).await?;
    unschedule(store, &p, &key, at(30)).await?;
    ensure_eq(
        "load after removing every timer",
        &Vec::new(),
        &load(store, &p, at(0), at(HOUR)).await?,
    )
}

/// Runs every check; the failure names each check that failed.
pub async fn run_all(store: &impl Stores) -> Checked {
    let mut failures = Vec::new();
    let mut record = |name: &str, result: Checked| {
        if let Err(failure) = result {
            failures.push(format!("{name}: {failure}"));
        }
    };
    record(
        "schedule_is_idempotent",
        schedule_is_idempotent(store).await,
    );
    record(
        "times_round_to_the_second",
        times_round_to_the_second(store).await,
    );
    record(
        "schedule_replaces_the_trace",
        schedule_replaces_the_trace(store).await,
    );
    record(
        "unschedule_removes_exactly_one_timer",
        unschedule_removes_exactly_one_timer(store).await,
    );
    record(
        "clear_removes_every_timer_of_the_key",
        clear_removes_every_timer_of_the_key(store).await,
    );
    record(
        "scheduled_is_ascending",
        scheduled_is_ascending(store).await,
    );
    record(
        "load_returns_exactly_the_range",
        load_returns_exactly_the_range(store).await,
    );
    record("kinds_are_independent", kinds_are_independent(store).await);
    record(
        "interleaved_operations_keep_slabs_and_keys_consistent",
        interleaved_operations_keep_slabs_and_keys_consistent(store).await,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("\n")))
    }
}
