//! The stores of the state scenarios: memory (or any) stores that tell the
//! model when an attempt's commit lands, and may make it unsure.

use super::{Shared, lock};
use prosody::Key;
use prosody::broker::TopicPartition;
use prosody::store::{Batch, StoreError, Stores, Wrapped};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// `inner`, promoting an attempt's model state once its commit (the one
/// with its key's applied marker) lands. With `faults`, such a commit
/// fails one time in four before it writes anything, and one time in four
/// after it landed (a timeout whose write went through).
#[derive(Clone)]
pub struct Landing<S> {
    pub inner: S,
    pub shared: Shared,
    pub done: mpsc::UnboundedSender<u64>,
    pub faults: Option<Arc<Mutex<u64>>>,
    /// How many commits of a fired timer with state changes still to make
    /// unsure: each lands, then fails as a timeout would.
    pub unsure_timers: Arc<AtomicUsize>,
}

/// The key and offset of a batch's record marker (the empty item of the
/// empty collection; a timer's marker is item `t`).
fn marker(batch: &Batch) -> Option<(Key, i64)> {
    batch.state.iter().find_map(|write| {
        let prosody::store::StateChange::Put { item, value } = &write.change else {
            return None;
        };
        if !write.collection.is_empty() || !item.is_empty() {
            return None;
        }
        let offset = i64::from_be_bytes(value.as_ref().try_into().ok()?);
        Some((write.key.clone(), offset))
    })
}

impl<S: Stores> Landing<S> {
    fn fault(&self) -> u64 {
        let Some(state) = &self.faults else {
            return 3;
        };
        let mut state = lock(state);
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state % 4
    }

    fn landed(&self, key: &Key, offset: i64) {
        let shared = &self.shared;
        let Some((id, model)) = lock(&shared.tentative).remove(&(key.clone(), offset)) else {
            lock(&shared.errors).push(format!(
                "{key}@{offset}: a commit landed that no success made"
            ));
            return;
        };
        lock(&shared.committed).insert(key.clone(), model);
        let mut applied = lock(&shared.applied);
        let count = applied.entry(id).or_default();
        *count += 1;
        if *count > 1 {
            lock(&shared.errors).push(format!("record {id} ({key}) was applied {count} times"));
        }
        let _ = self.done.send(id);
    }
}

impl<S: Stores> Wrapped for Landing<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Every batch goes to `commit`, which tells the model what landed.
    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        let Some((key, offset)) = marker(&batch) else {
            let fired = batch.timers.iter().any(|write| {
                matches!(write.change, prosody::store::TimerChange::Unschedule { .. })
            });
            let unsure = fired
                && !batch.state.is_empty()
                && self
                    .unsure_timers
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            self.inner.commit(partition, batch).await?;
            if unsure {
                return Err(StoreError::unavailable(
                    "injected: the timer's commit timed out, and landed",
                ));
            }
            return Ok(());
        };
        let fault = self.fault();
        if fault == 0 {
            return Err(StoreError::unavailable("injected: the commit failed"));
        }
        self.inner.commit(partition, batch).await?;
        self.landed(&key, offset);
        if fault == 1 {
            return Err(StoreError::unavailable(
                "injected: the commit timed out, and landed",
            ));
        }
        Ok(())
    }
}
