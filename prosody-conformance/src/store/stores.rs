//! The [`Stores`] conformance suite: what one batch does, whatever the
//! backend.
//!
//! Run each check against a backend, one test per check, or all with
//! [`run_all`]. Checks use topics and dedup keys no other check or run
//! uses, so they can share one store (and one Cassandra keyspace). Every
//! store call has a deadline ([`DEADLINE`]).

pub use super::DEADLINE;
use super::{Checked, call, ensure_eq};
use crate::broker::Failure;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::dedup::DedupKey;
use prosody_contracts::store::defer::{Deferral, Deferred};
use prosody_contracts::store::timer::{TimerEntry, TimerKind};
use prosody_contracts::store::{Batch, DedupWrite, DeferWrite, Stores, TimerChange};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time the checks' timers lie around: 2030-01-01T00:00:00Z.
const BASE: i64 = 1_893_456_000;

/// A dedup ttl no check outlives.
const TTL: Duration = Duration::from_secs(3600);

/// `seconds` after [`BASE`].
fn at(seconds: i64) -> Timestamp {
    Timestamp::from_millis((BASE + seconds) * 1000)
}

/// A name no other check, process or run uses.
fn unique(check: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Wall-clock nanoseconds only make runs distinct; no time is measured.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "conformance-stores-{check}-{}-{run}-{n}",
        std::process::id()
    )
}

fn schedule(time: Timestamp) -> TimerChange {
    TimerChange::Schedule { time, trace: None }
}

/// Commits as the runtime does: at once when the store takes the batch
/// ([`Stores::commit_now`]), else through [`Stores::commit`]. A batch given
/// back must be the batch given.
async fn commit(stores: &impl Stores, partition: &TopicPartition, batch: Batch) -> Checked {
    let what = format!("commit({partition}, {batch:?})");
    match stores.commit_now(partition, batch.clone()) {
        Ok(written) => {
            written.map_err(|error| Failure::new(format!("{what} at once failed: {error}")))
        }
        Err(back) => {
            ensure_eq(&format!("{what}: the batch given back"), &batch, &back)?;
            call(&what, stores.commit(partition, batch)).await
        }
    }
}

async fn scheduled(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    kind: TimerKind,
) -> Result<Vec<Timestamp>, Failure> {
    let what = format!("scheduled({partition}, {key:?}, {kind:?})");
    call(&what, stores.scheduled(partition, key, kind)).await
}

async fn deferred(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
) -> Result<Option<Deferred>, Failure> {
    let what = format!("deferred({partition}, {key:?})");
    call(&what, stores.deferred(partition, key)).await
}

async fn contains(stores: &impl Stores, key: DedupKey) -> Result<bool, Failure> {
    call(&format!("contains({key})"), stores.contains(key)).await
}

/// Once a commit returns, each of its writes is visible to the reads of
/// its store: timers of two keys and both kinds, a deferral, a dedup key.
/// Checked through [`Stores::commit`], then as the runtime commits (at
/// once first): a store that takes batches at once still writes others
/// through `commit`.
pub async fn a_commit_lands_whole(stores: &impl Stores) -> Checked {
    lands_whole(stores, false).await?;
    lands_whole(stores, true).await
}

async fn lands_whole(stores: &impl Stores, at_once: bool) -> Checked {
    let p = TopicPartition::new(unique("whole"), 0);
    let (a, b) = (Key::from("a"), Key::from("b"));
    let dedup = DedupKey::new(&unique("whole"), "a", "id-1");
    let batch = Batch::default()
        .timer(&a, TimerKind::Application, schedule(at(10)))
        .timer(&a, TimerKind::Application, schedule(at(20)))
        .timer(&b, TimerKind::Defer, schedule(at(30)))
        .deferral(DeferWrite::Defer {
            key: b.clone(),
            offset: 7,
            deferral: Deferral::AfterFailure,
        });
    let batch = Batch {
        dedup: vec![DedupWrite {
            key: dedup,
            ttl: TTL,
        }],
        ..batch
    };
    if at_once {
        commit(stores, &p, batch).await?;
    } else {
        let what = format!("commit({p}, {batch:?})");
        call(&what, stores.commit(&p, batch)).await?;
    }
    let when = if at_once {
        "after one commit, at once if taken"
    } else {
        "after one commit"
    };
    ensure_eq(
        &format!("a's application timers {when}"),
        &vec![at(10), at(20)],
        &scheduled(stores, &p, &a, TimerKind::Application).await?,
    )?;
    ensure_eq(
        &format!("b's defer timers {when}"),
        &vec![at(30)],
        &scheduled(stores, &p, &b, TimerKind::Defer).await?,
    )?;
    ensure_eq(
        &format!("b's deferred offsets {when}"),
        &Some(Deferred {
            offsets: vec![7],
            failures: 1,
        }),
        &deferred(stores, &p, &b).await?,
    )?;
    ensure_eq(
        &format!("the dedup key {when}"),
        &true,
        &contains(stores, dedup).await?,
    )?;
    let loaded = call("load", stores.load(&p, at(0), at(60))).await?;
    ensure_eq(
        &format!("the partition's timers {when}"),
        &vec![
            TimerEntry::new(a.clone(), at(10)),
            TimerEntry::new(a.clone(), at(20)),
            TimerEntry::new(b.clone(), at(30)).with_kind(TimerKind::Defer),
        ],
        &loaded,
    )
}

/// A batch's timer writes apply in order: a clear then a schedule of the
/// key keeps the schedule; a schedule then its unschedule leaves nothing;
/// an unschedule then a schedule of the same time keeps it.
pub async fn timer_writes_apply_in_order(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("order"), 0);
    let key = Key::from("k");
    let kind = TimerKind::Application;
    let before =
        Batch::default()
            .timer(&key, kind, schedule(at(1)))
            .timer(&key, kind, schedule(at(2)));
    commit(stores, &p, before).await?;
    let batch = Batch::default()
        .timer(&key, kind, TimerChange::Clear)
        .timer(&key, kind, schedule(at(3)))
        .timer(&key, kind, schedule(at(4)))
        .timer(&key, kind, TimerChange::Unschedule { time: at(4) })
        .timer(&key, kind, TimerChange::Unschedule { time: at(5) })
        .timer(&key, kind, schedule(at(5)));
    commit(stores, &p, batch).await?;
    ensure_eq(
        "timers after clear, schedule 3, schedule and unschedule 4, unschedule and schedule 5",
        &vec![at(3), at(5)],
        &scheduled(stores, &p, &key, kind).await?,
    )?;
    let loaded = call("load", stores.load(&p, at(0), at(60))).await?;
    ensure_eq(
        "the partition's timers after the same batch",
        &vec![
            TimerEntry::new(key.clone(), at(3)),
            TimerEntry::new(key, at(5)),
        ],
        &loaded,
    )
}

/// A batch's deferral writes apply in order, as one commit each would:
/// a head deferred, failed, completed, then a later offset deferred behind
/// into the emptied queue.
pub async fn deferral_writes_apply_in_order(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("deferrals"), 0);
    let key = Key::from("k");
    let first = Batch::default()
        .deferral(DeferWrite::Defer {
            key: key.clone(),
            offset: 5,
            deferral: Deferral::AfterFailure,
        })
        .deferral(DeferWrite::Defer {
            key: key.clone(),
            offset: 6,
            deferral: Deferral::Behind,
        })
        .deferral(DeferWrite::Failed { key: key.clone() });
    commit(stores, &p, first).await?;
    ensure_eq(
        "after deferring 5 (failed), 6 behind it, and one more failure",
        &Some(Deferred {
            offsets: vec![5, 6],
            failures: 2,
        }),
        &deferred(stores, &p, &key).await?,
    )?;
    let second = Batch::default()
        .deferral(DeferWrite::Complete {
            key: key.clone(),
            offset: 5,
        })
        .deferral(DeferWrite::Complete {
            key: key.clone(),
            offset: 6,
        })
        .deferral(DeferWrite::Defer {
            key: key.clone(),
            offset: 9,
            deferral: Deferral::Behind,
        });
    commit(stores, &p, second).await?;
    ensure_eq(
        "after completing 5 and 6, then deferring 9 behind",
        &Some(Deferred {
            offsets: vec![9],
            failures: 0,
        }),
        &deferred(stores, &p, &key).await?,
    )?;
    let third = Batch::default().deferral(DeferWrite::Complete {
        key: key.clone(),
        offset: 9,
    });
    commit(stores, &p, third).await?;
    ensure_eq(
        "after completing the last offset",
        &None,
        &deferred(stores, &p, &key).await?,
    )?;
    ensure_eq(
        "peek of the key once drained, when it answers",
        &false,
        &stores.peek(&p, &key).unwrap_or(false),
    )
}

/// A batch without failure counts, written twice, leaves what writing it
/// once does: a caller that cannot tell whether a commit landed writes it
/// again.
pub async fn a_batch_written_twice_is_written_once(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("twice"), 0);
    let key = Key::from("k");
    let dedup = DedupKey::new(&unique("twice"), "k", "id");
    let batch = Batch::default()
        .timer(&key, TimerKind::Application, TimerChange::Clear)
        .timer(&key, TimerKind::Application, schedule(at(8)))
        .deferral(DeferWrite::Defer {
            key: key.clone(),
            offset: 3,
            deferral: Deferral::AfterFailure,
        });
    let batch = Batch {
        dedup: vec![DedupWrite {
            key: dedup,
            ttl: TTL,
        }],
        ..batch
    };
    commit(stores, &p, batch.clone()).await?;
    commit(stores, &p, batch).await?;
    let when = "after the same batch twice";
    ensure_eq(
        &format!("timers {when}"),
        &vec![at(8)],
        &scheduled(stores, &p, &key, TimerKind::Application).await?,
    )?;
    ensure_eq(
        &format!("deferred offsets {when}"),
        &Some(Deferred {
            offsets: vec![3],
            failures: 1,
        }),
        &deferred(stores, &p, &key).await?,
    )?;
    ensure_eq(
        &format!("the dedup key {when}"),
        &true,
        &contains(stores, dedup).await?,
    )
}

/// An empty batch commits and changes nothing.
pub async fn an_empty_batch_changes_nothing(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("empty"), 0);
    commit(stores, &p, Batch::default()).await?;
    ensure_eq(
        "timers after an empty batch",
        &Vec::<TimerEntry>::new(),
        &call("load", stores.load(&p, at(0), at(60))).await?,
    )?;
    let key = Key::from("k");
    ensure_eq(
        "deferred offsets of a key after an empty batch",
        &None,
        &deferred(stores, &p, &key).await?,
    )?;
    ensure_eq(
        "peek of a key after an empty batch, when it answers",
        &false,
        &stores.peek(&p, &key).unwrap_or(false),
    )
}

/// Two instances of one backend for two consumer groups (`mine` and
/// `theirs`, say on one Cassandra keyspace) never see each other's timers,
/// deferrals or dedup records, even on the same topic, partition and key.
pub async fn groups_are_isolated(mine: &impl Stores, theirs: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("groups"), 0);
    let key = Key::from("k");
    let dedup = DedupKey::new(&unique("groups"), "k", "id");
    let batch = Batch::default()
        .timer(&key, TimerKind::Application, schedule(at(1)))
        .deferral(DeferWrite::Defer {
            key: key.clone(),
            offset: 4,
            deferral: Deferral::AfterFailure,
        });
    let batch = Batch {
        dedup: vec![DedupWrite {
            key: dedup,
            ttl: TTL,
        }],
        ..batch
    };
    commit(mine, &p, batch).await?;
    let when = "of another group that committed";
    ensure_eq(
        &format!("timers {when}"),
        &Vec::<TimerEntry>::new(),
        &call("load", theirs.load(&p, at(0), at(60))).await?,
    )?;
    ensure_eq(
        &format!("deferred offsets {when}"),
        &None,
        &deferred(theirs, &p, &key).await?,
    )?;
    ensure_eq(
        &format!("the dedup key {when}"),
        &false,
        &contains(theirs, dedup).await?,
    )?;
    // And back: the other group's clear leaves this group's timers.
    commit(
        theirs,
        &p,
        Batch::default().timer(&key, TimerKind::Application, TimerChange::Clear),
    )
    .await?;
    ensure_eq(
        "timers after another group cleared the key",
        &vec![at(1)],
        &scheduled(mine, &p, &key, TimerKind::Application).await?,
    )
}

/// Runs every check on one instance (and [`groups_are_isolated`] on it and
/// `theirs`, an instance of another group); the failure names each check
/// that failed.
pub async fn run_all(stores: &impl Stores, theirs: &impl Stores) -> Checked {
    let mut failures = Vec::new();
    let mut record = |name: &str, result: Checked| {
        if let Err(failure) = result {
            failures.push(format!("{name}: {failure}"));
        }
    };
    record("a_commit_lands_whole", a_commit_lands_whole(stores).await);
    record(
        "timer_writes_apply_in_order",
        timer_writes_apply_in_order(stores).await,
    );
    record(
        "deferral_writes_apply_in_order",
        deferral_writes_apply_in_order(stores).await,
    );
    record(
        "a_batch_written_twice_is_written_once",
        a_batch_written_twice_is_written_once(stores).await,
    );
    record(
        "an_empty_batch_changes_nothing",
        an_empty_batch_changes_nothing(stores).await,
    );
    record(
        "groups_are_isolated",
        groups_are_isolated(stores, theirs).await,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("; ")))
    }
}
