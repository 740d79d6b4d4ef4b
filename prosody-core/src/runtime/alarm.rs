//! The timers of one assigned partition: loaded from the store up to a
//! horizon, kept in a due queue, and rung when their second comes.

use crate::access::{Notice, PartitionStores};
use crate::clock::{self, Timestamp};
use crate::key::Key;
use crate::store::timer::TimerKind;
use crate::timers::{Due, DueQueue};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tracing::warn;

/// How long to wait before loading again after the store failed.
const RELOAD_DELAY: Duration = Duration::from_secs(1);

/// How long one load may take before it counts as failed.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Timers taken per ring; more due ones are taken at the next, immediate,
/// ring, so a backlog does not start all at once.
const RING_LIMIT: usize = 1024;

/// A timer to run: which, and how many times the defer stage already put
/// it off.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Fire {
    pub(crate) due: Due,
    pub(crate) deferrals: u32,
}

/// Timers the defer stage put off, one entry per timer.
///
/// Invariant: `by_time` and `by_due` hold the same timers, each once: a
/// timer put off again replaces its entry. Removal path: an entry leaves
/// when it rings, when its timer is unscheduled or cleared, and when its
/// timer is taken to fire afresh; so it holds at most the partition's
/// failing timers.
#[derive(Debug, Default)]
struct Delayed {
    by_time: BTreeSet<(i64, Due)>,
    by_due: HashMap<Due, (i64, u32)>,
}

impl Delayed {
    fn insert(&mut self, fire: Fire, second: i64) {
        let entry = (second, fire.deferrals);
        if let Some((old, _)) = self.by_due.insert(fire.due.clone(), entry) {
            self.by_time.remove(&(old, fire.due.clone()));
        }
        self.by_time.insert((second, fire.due));
    }

    fn remove(&mut self, due: &Due) {
        if let Some((second, _)) = self.by_due.remove(due) {
            self.by_time.remove(&(second, due.clone()));
        }
    }

    /// Removes the key's put-off timers of `kind` (a scan: put-off timers
    /// are the failing few).
    fn clear(&mut self, key: &Key, kind: TimerKind) {
        let gone: Vec<Due> = self
            .by_due
            .keys()
            .filter(|due| due.key == *key && due.kind == kind)
            .cloned()
            .collect();
        for due in gone {
            self.remove(&due);
        }
    }

    fn next(&self) -> Option<i64> {
        self.by_time.first().map(|(second, _)| *second)
    }

    /// Takes the earliest put-off timer if it is due at `now`.
    fn pop_due(&mut self, now: i64) -> Option<Fire> {
        let (second, due) = self.by_time.first().cloned()?;
        if second > now {
            return None;
        }
        self.by_time.remove(&(second, due.clone()));
        let (_, deferrals) = self.by_due.remove(&due)?;
        Some(Fire { due, deferrals })
    }
}

/// The partition's alarm clock.
///
/// Invariant: every stored timer of the partition before `horizon` is in
/// `due` or in `taken` (queued on its key, running, or put off by the defer
/// stage, so never loaded into `due` a second time), because it was loaded
/// or a notice added it; timers at or after the horizon stay in the store
/// until the horizon moves past them, half a slab before it is reached. A
/// timer in `taken` that a handler unschedules or clears leaves `taken`,
/// and is skipped when its turn comes. A put-off timer is in `delayed` (by
/// the second it runs again) and in `taken`. `wake` is set for the earliest
/// of the next due or put-off timer, that move, and a retry after a failed
/// load.
pub(crate) struct Alarm {
    pub(crate) access: Arc<PartitionStores>,
    pub(crate) notices: mpsc::UnboundedReceiver<Notice>,
    due: DueQueue,
    /// Timers taken from `due` and not yet settled.
    taken: HashSet<Due>,
    /// Timers the defer stage put off, by the second they run again.
    delayed: Delayed,
    /// Seconds since the epoch; `None` until the first load succeeded.
    horizon: Option<i64>,
    /// After a failed load, when to try again.
    retry_at: Option<Instant>,
    /// Why the store refused a load (not retriable): the partition halts.
    pub(crate) refused: Option<Arc<str>>,
    slab: i64,
    pub(crate) wake: Pin<Box<Sleep>>,
}

fn now_second() -> i64 {
    clock::now().as_millis().div_euclid(1000)
}

/// The tokio instant of a wall-clock second.
fn instant_of(second: i64) -> Instant {
    let wait = second
        .saturating_mul(1000)
        .saturating_sub(clock::now().as_millis());
    let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0));
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
        .unwrap_or(now)
}

impl Alarm {
    pub(crate) fn new(
        access: Arc<PartitionStores>,
        notices: mpsc::UnboundedReceiver<Notice>,
        slab: Duration,
    ) -> Self {
        Self {
            access,
            notices,
            due: DueQueue::default(),
            taken: HashSet::new(),
            delayed: Delayed::default(),
            horizon: None,
            retry_at: None,
            refused: None,
            slab: i64::try_from(slab.as_secs()).unwrap_or(i64::MAX).max(1),
            wake: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Loads what the horizon now covers; on a store error, tries again
    /// later and keeps what it has.
    async fn load(&mut self) {
        let now = now_second();
        let from = self.horizon.unwrap_or(0);
        let until = now.saturating_add(self.slab);
        let load = self.access.load(
            Timestamp::from_millis(from.saturating_mul(1000)),
            Timestamp::from_millis(until.saturating_mul(1000)),
        );
        match tokio::time::timeout(LOAD_TIMEOUT, load).await {
            Ok(Ok(timers)) => {
                for due in timers {
                    if !self.taken.contains(&due) {
                        self.due.insert(due);
                    }
                }
                self.horizon = Some(until);
                self.retry_at = None;
            }
            Ok(Err(error)) if !error.is_retriable() => {
                self.refused = Some(Arc::from(format!("loading timers: {error}")));
                self.retry_at = Some(Instant::now() + RELOAD_DELAY);
            }
            Ok(Err(error)) => {
                warn!(%error, "loading timers failed; trying again");
                self.retry_at = Some(Instant::now() + RELOAD_DELAY);
            }
            Err(_) => {
                warn!(timeout = ?LOAD_TIMEOUT, "loading timers timed out; trying again");
                self.retry_at = Some(Instant::now() + RELOAD_DELAY);
            }
        }
    }

    /// Applies a handler's change to what is held.
    pub(crate) fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Scheduled(due) => {
                let held = self.horizon.is_some_and(|horizon| due.second < horizon);
                if held && !self.taken.contains(&due) {
                    self.due.insert(due);
                }
            }
            Notice::Unscheduled(key, second, kind) => {
                let due = Due::new(second, key, kind);
                self.due.remove(&due);
                self.delayed.remove(&due);
                self.taken.remove(&due);
            }
            Notice::Cleared(key, kind) => {
                self.due.clear(&key, kind);
                self.delayed.clear(&key, kind);
                self.taken
                    .retain(|taken| taken.key != key || taken.kind != kind);
            }
            Notice::Resync => {
                // Everything up to the horizon is loaded again at once;
                // taken and put-off timers stay as they are.
                self.due = DueQueue::default();
                self.horizon = None;
                self.retry_at = Some(Instant::now());
            }
        }
        self.arm();
    }

    /// Sets `wake` for the next due timer or horizon move.
    pub(crate) fn arm(&mut self) {
        let refresh = match (self.retry_at, self.horizon) {
            (Some(retry), _) => retry,
            (None, None) => Instant::now() + RELOAD_DELAY,
            (None, Some(horizon)) => instant_of(horizon.saturating_sub(self.slab / 2)),
        };
        let next = match (self.due.next(), self.delayed.next()) {
            (Some(due), Some(delayed)) => Some(due.min(delayed)),
            (due, delayed) => due.or(delayed),
        };
        let at = match next {
            Some(second) => instant_of(second).min(refresh),
            None => refresh,
        };
        self.wake.as_mut().reset(at);
    }

    /// The second of the earliest timer waiting to be taken, due or not.
    pub(crate) fn next_due(&self) -> Option<i64> {
        self.due.next()
    }

    /// A taken timer's turn came: whether it is still scheduled (and so
    /// should run).
    pub(crate) fn still_scheduled(&self, due: &Due) -> bool {
        self.taken.contains(due)
    }

    /// A taken timer finished (settled or not): loads and notices may hold
    /// it again.
    pub(crate) fn finish(&mut self, due: &Due) {
        self.taken.remove(due);
    }

    /// The defer stage put a taken timer off until `second`: it stays taken
    /// (so loads do not ring it sooner) and rings again then, unless a
    /// handler unschedules or clears it first.
    pub(crate) fn delay(&mut self, fire: Fire, second: i64) {
        if self.taken.contains(&fire.due) {
            self.delayed.insert(fire, second);
            self.arm();
        }
    }

    /// Called when `wake` fired: moves the horizon if due, and takes every
    /// timer whose second has come.
    pub(crate) async fn ring(&mut self) -> Vec<Fire> {
        let now = now_second();
        let retry_due = self.retry_at.is_some_and(|at| Instant::now() >= at);
        let refresh = self
            .horizon
            .is_none_or(|horizon| now >= horizon.saturating_sub(self.slab / 2));
        if retry_due || (refresh && self.retry_at.is_none()) {
            self.load().await;
        }
        let now = now_second();
        let mut fires = Vec::new();
        while fires.len() < RING_LIMIT {
            let Some(fire) = self.delayed.pop_due(now) else {
                break;
            };
            // Unscheduled or cleared while put off: it is gone.
            if self.taken.contains(&fire.due) {
                fires.push(fire);
            }
        }
        while fires.len() < RING_LIMIT {
            let Some(due) = self.due.pop_due(now) else {
                break;
            };
            // Scheduled afresh: an older put-off entry of it is stale.
            self.delayed.remove(&due);
            self.taken.insert(due.clone());
            fires.push(Fire { due, deferrals: 0 });
        }
        self.arm();
        fires
    }

    /// The first load, before the partition handles anything.
    pub(crate) async fn start(&mut self) {
        self.load().await;
        self.arm();
    }
}

#[cfg(test)]
mod tests {
    use super::{Alarm, Fire, now_second};
    use crate::access::Notice;
    use crate::broker::TopicPartition;
    use crate::clock::Timestamp;
    use crate::key::Key;
    use crate::store::timer::TimerKind;
    use crate::store::{StoreError, TimerEntry, Wrapped};
    use crate::testkit;
    use crate::timers::Due;
    use prosody_memory::MemoryStores;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;
    use tokio::sync::mpsc;

    /// A store holding its timers until its first load, then nothing new.
    #[derive(Clone)]
    struct Once {
        inner: MemoryStores,
        first: Arc<Mutex<Vec<TimerEntry>>>,
    }

    impl Wrapped for Once {
        type Inner = MemoryStores;

        fn inner(&self) -> &MemoryStores {
            &self.inner
        }

        async fn load(
            &self,
            _: &TopicPartition,
            _: Timestamp,
            _: Timestamp,
        ) -> Result<Vec<TimerEntry>, StoreError> {
            Ok(std::mem::take(
                &mut *self.first.lock().unwrap_or_else(PoisonError::into_inner),
            ))
        }
    }

    /// A put-off timer that a handler clears and schedules again, and that
    /// is put off again, rings once, at its latest second: the first put-off
    /// entry does not ring it a second time.
    #[tokio::test(start_paused = true)]
    async fn a_timer_put_off_twice_rings_once_at_its_latest_second() {
        let s = Due::new(now_second() - 1, Key::from("k"), TimerKind::Application);
        let (notify, notices) = mpsc::unbounded_channel::<Notice>();
        drop(notify);
        let entry = TimerEntry::new(s.key.clone(), Timestamp::from_millis(s.second * 1000))
            .with_kind(s.kind);
        let access = testkit::access(Once {
            inner: MemoryStores::new(),
            first: Arc::new(Mutex::new(vec![entry])),
        });
        let mut alarm = Alarm::new(access, notices, Duration::from_secs(3600));
        alarm.start().await;
        let fire = |deferrals| Fire {
            due: s.clone(),
            deferrals,
        };
        assert_eq!(alarm.ring().await, [fire(0)]);
        alarm.delay(fire(1), now_second() + 10);
        alarm.notice(Notice::Cleared(s.key.clone(), s.kind));
        alarm.notice(Notice::Scheduled(s.clone()));
        assert_eq!(alarm.ring().await, [fire(0)], "scheduled afresh, it rings");
        alarm.delay(fire(1), now_second() + 20);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(alarm.ring().await, [], "the stale put-off entry rang");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(alarm.ring().await, [fire(1)]);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(alarm.ring().await, []);
    }
}
