//! The timers of one assigned partition: loaded from the store up to a
//! horizon, kept in a due queue, and rung when their second comes.

use crate::clock::{self, Timestamp};
use crate::key::Key;
use crate::timers::{DueQueue, Notice, TimerAccess};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tracing::warn;

/// How long to wait before loading again after the store failed.
const RELOAD_DELAY: Duration = Duration::from_secs(1);

/// The partition's alarm clock.
///
/// Invariant: every stored timer of the partition before `horizon` is in
/// `due` (or fired, or being handled), because it was loaded or a notice
/// added it; timers at or after the horizon stay in the store until the
/// horizon moves past them, half a slab before it is reached. `wake` is set
/// for the earliest of the next due timer and that move.
pub(crate) struct Alarm {
    pub(crate) access: Arc<dyn TimerAccess>,
    pub(crate) notices: mpsc::UnboundedReceiver<Notice>,
    due: DueQueue,
    /// Seconds since the epoch; `None` until the first load succeeded.
    horizon: Option<i64>,
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
    Instant::now()
        .checked_add(wait)
        .unwrap_or_else(Instant::now)
}

impl Alarm {
    pub(crate) fn new(
        access: Arc<dyn TimerAccess>,
        notices: mpsc::UnboundedReceiver<Notice>,
        slab: Duration,
    ) -> Self {
        Self {
            access,
            notices,
            due: DueQueue::default(),
            horizon: None,
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
        let loaded = self
            .access
            .load(
                Timestamp::from_millis(from.saturating_mul(1000)),
                Timestamp::from_millis(until.saturating_mul(1000)),
            )
            .await;
        match loaded {
            Ok(timers) => {
                for (key, second) in timers {
                    self.due.insert(key, second);
                }
                self.horizon = Some(until);
            }
            Err(error) => warn!(%error, "loading timers failed; trying again"),
        }
    }

    /// Applies a handler's change to what is held.
    pub(crate) fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Scheduled(key, second) => {
                if self.horizon.is_some_and(|horizon| second < horizon) {
                    self.due.insert(key, second);
                }
            }
            Notice::Unscheduled(key, second) => self.due.remove(&key, second),
            Notice::Cleared(key) => self.due.clear(&key),
        }
        self.arm();
    }

    /// Sets `wake` for the next due timer or horizon move.
    pub(crate) fn arm(&mut self) {
        let at = match self.horizon {
            None => Instant::now() + RELOAD_DELAY,
            Some(horizon) => {
                let refresh = instant_of(horizon.saturating_sub(self.slab / 2));
                match self.due.next() {
                    Some(second) => instant_of(second).min(refresh),
                    None => refresh,
                }
            }
        };
        self.wake.as_mut().reset(at);
    }

    /// Called when `wake` fired: moves the horizon if due, and takes every
    /// timer whose second has come.
    pub(crate) async fn ring(&mut self) -> Vec<(Key, i64)> {
        let now = now_second();
        let refresh = self
            .horizon
            .is_none_or(|horizon| now >= horizon.saturating_sub(self.slab / 2));
        if refresh {
            self.load().await;
        }
        let mut due = Vec::new();
        while let Some(timer) = self.due.pop_due(now_second()) {
            due.push(timer);
        }
        self.arm();
        due
    }

    /// The first load, before the partition handles anything.
    pub(crate) async fn start(&mut self) {
        self.load().await;
        self.arm();
    }
}
