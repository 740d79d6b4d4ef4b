//! The interleaving check: seeded pseudo-random schedules, unschedules and
//! clears on a few keys of two partitions, with times spanning several
//! slabs, compared with a model after every step.

use super::fixture::{Topics, at, at_ms, clear_kind, load, schedule, scheduled, unschedule_kind};
use super::{Checked, HOUR};
use crate::broker::Failure;
use crate::store::ensure_eq;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::Stores;
use prosody_contracts::store::timer::{TimerEntry, TimerKind, round_to_second};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The seeds of the runs; each run uses its own topic.
const SEEDS: [u64; 3] = [0x9e37_79b9_7f4a_7c15, 0x0123_4567_89ab_cdef, 42];

/// Operations per run; the store is checked against the model after each.
const STEPS: usize = 150;

/// The keys operations pick from.
const KEYS: [&str; 3] = ["a", "b", "c"];

/// The partitions (of one topic) operations pick from.
const PARTITIONS: usize = 2;

/// A tiny xorshift64 generator: the same sequence for a seed on every
/// platform, so a failing seed replays.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // Zero is xorshift's one fixed point.
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (`n > 0`); the slight bias is harmless here.
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.next() % n).unwrap_or(0)
    }

    /// A signed number in `low..high` (`low < high`).
    fn between(&mut self, low: i64, high: i64) -> i64 {
        let span = usize::try_from(high.saturating_sub(low)).unwrap_or(1);
        low.saturating_add(i64::try_from(self.below(span)).unwrap_or(0))
    }

    fn key(&mut self) -> Key {
        Key::from(KEYS.get(self.below(KEYS.len())).copied().unwrap_or("a"))
    }

    /// A time from an hour before the base to five after it: a quarter-hour
    /// mark (so slab boundaries of an hour), moved by up to a second either
    /// way, plus a sub-second part that rounds down or up.
    fn time(&mut self) -> Timestamp {
        let seconds = self.between(-4, 20) * 900 + self.between(-1, 2);
        let millis = [0, 400, 500, 600].get(self.below(4)).copied().unwrap_or(0);
        at_ms(seconds * 1000 + millis)
    }
}

/// The timers of one partition: what the store must hold, ordered as
/// `load` returns them.
type Partition = BTreeMap<(Timestamp, Key, TimerKind), Option<Arc<str>>>;

#[derive(Debug)]
enum Op {
    Schedule(usize, TimerEntry),
    Unschedule(usize, Key, TimerKind, Timestamp),
    Clear(usize, Key, TimerKind),
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Schedule(p, e) => write!(f, "schedule(partition {p}, {e:?})"),
            Self::Unschedule(p, key, kind, time) => {
                write!(f, "unschedule(partition {p}, {key:?}, {kind:?}, {time:?})")
            }
            Self::Clear(p, key, kind) => write!(f, "clear(partition {p}, {key:?}, {kind:?})"),
        }
    }
}

/// A timer the model holds, picked at random, its time moved by a
/// sub-second offset that rounds back to it.
fn existing(rng: &mut XorShift, model: &Partition) -> Option<(Key, TimerKind, Timestamp)> {
    let (time, key, kind) = model.keys().nth(rng.below(model.len()))?;
    let offset = rng.between(-400, 500);
    Some((
        key.clone(),
        *kind,
        Timestamp::from_millis(time.as_millis() + offset),
    ))
}

/// A kind: mostly application timers, a quarter defer timers.
fn kind(rng: &mut XorShift) -> TimerKind {
    if rng.below(4) == 0 {
        TimerKind::Defer
    } else {
        TimerKind::Application
    }
}

/// The next operation: mostly schedules (a quarter of them of timers that
/// exist, to exercise idempotence), then unschedules (mostly of timers that
/// exist), and some clears.
fn next_op(rng: &mut XorShift, models: &[Partition], step: usize) -> Op {
    let p = rng.below(PARTITIONS);
    let model = models.get(p);
    let roll = rng.below(20);
    let reuse = rng.below(4) != 0;
    let pick = |rng: &mut XorShift, prefer_existing: bool| {
        model
            .filter(|_| prefer_existing)
            .and_then(|m| existing(rng, m))
            .unwrap_or_else(|| (rng.key(), kind(rng), rng.time()))
    };
    if roll < 11 {
        let (key, kind, time) = pick(rng, !reuse);
        let entry = TimerEntry::new(key, time).with_kind(kind);
        let entry = if step.is_multiple_of(2) {
            entry.with_trace(format!("00-{step:032x}-{roll:016x}-01"))
        } else {
            entry
        };
        Op::Schedule(p, entry)
    } else if roll < 18 {
        let (key, kind, time) = pick(rng, reuse);
        Op::Unschedule(p, key, kind, time)
    } else {
        Op::Clear(p, rng.key(), kind(rng))
    }
}

fn apply(models: &mut [Partition], op: &Op) {
    match op {
        Op::Schedule(p, entry) => {
            if let Some(model) = models.get_mut(*p) {
                let time = round_to_second(entry.time);
                model.insert((time, entry.key.clone(), entry.kind), entry.trace.clone());
            }
        }
        Op::Unschedule(p, key, kind, time) => {
            if let Some(model) = models.get_mut(*p) {
                model.remove(&(round_to_second(*time), key.clone(), *kind));
            }
        }
        Op::Clear(p, key, kind) => {
            if let Some(model) = models.get_mut(*p) {
                model.retain(|(_, k, c), _| k != key || c != kind);
            }
        }
    }
}

fn entries<'a>(
    timers: impl Iterator<Item = (&'a (Timestamp, Key, TimerKind), &'a Option<Arc<str>>)>,
) -> Vec<TimerEntry> {
    timers
        .map(|((time, key, kind), trace)| TimerEntry {
            key: key.clone(),
            time: *time,
            kind: *kind,
            trace: trace.clone(),
        })
        .collect()
}

/// The store agrees with the model: `scheduled` of every key and `load` of
/// the whole span and of a random range of each partition.
async fn verify(
    store: &impl Stores,
    topics: &Topics,
    models: &[Partition],
    rng: &mut XorShift,
) -> Checked {
    for (p, model) in (0..).zip(models) {
        let partition = topics.partition(p);
        for key in KEYS.map(Key::from) {
            for kind in [TimerKind::Application, TimerKind::Defer] {
                let expected: Vec<Timestamp> = model
                    .keys()
                    .filter(|(_, k, c)| *k == key && *c == kind)
                    .map(|(t, _, _)| *t)
                    .collect();
                ensure_eq(
                    &format!("scheduled({partition}, {key:?}, {kind:?})"),
                    &expected,
                    &scheduled(store, &partition, &key, kind).await?,
                )?;
            }
        }
        ensure_eq(
            &format!("load({partition}) of every timer"),
            &entries(model.iter()),
            &load(store, &partition, at(-2 * HOUR), at(6 * HOUR)).await?,
        )?;
        let (from, until) = (rng.time(), rng.time());
        let range = round_to_second(from)..round_to_second(until);
        ensure_eq(
            &format!("load({partition}, {from:?}, {until:?})"),
            &entries(model.iter().filter(|((t, _, _), _)| range.contains(t))),
            &load(store, &partition, from, until).await?,
        )?;
    }
    Ok(())
}

/// A seeded pseudo-random interleaving of schedules, unschedules and clears
/// on three keys of two partitions, of both kinds, at times spanning several slabs, with
/// sub-second parts: after every step, `scheduled` of every key and `load`
/// (of the whole span and of a random range) agree with a model. That is,
/// the slabs and the key index stay consistent with each other.
pub async fn interleaved_operations_keep_slabs_and_keys_consistent(store: &impl Stores) -> Checked {
    for seed in SEEDS {
        let topics = Topics::new("interleaved");
        let mut rng = XorShift::new(seed);
        let mut models = vec![Partition::new(); PARTITIONS];
        for step in 0..STEPS {
            let op = next_op(&mut rng, &models, step);
            let result = match &op {
                Op::Schedule(p, entry) => {
                    schedule(store, &topics.partition(index(*p)), entry.clone()).await
                }
                Op::Unschedule(p, key, kind, time) => {
                    let partition = topics.partition(index(*p));
                    unschedule_kind(store, &partition, key, *kind, *time).await
                }
                Op::Clear(p, key, kind) => {
                    clear_kind(store, &topics.partition(index(*p)), key, *kind).await
                }
            };
            apply(&mut models, &op);
            let checked = match result {
                Ok(()) => verify(store, &topics, &models, &mut rng).await,
                Err(failure) => Err(failure),
            };
            checked.map_err(|failure| {
                Failure::new(format!("seed {seed:#x}, step {step}, {op}: {failure}"))
            })?;
        }
    }
    Ok(())
}

/// A partition number from a model's index.
fn index(p: usize) -> i32 {
    i32::try_from(p).unwrap_or(i32::MAX)
}
