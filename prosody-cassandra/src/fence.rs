//! Ownership epochs: the fence between a partition's old and new owner.
//!
//! A member that takes a partition raises the partition's epoch in
//! `partition_owners` with a lightweight transaction, and writes every
//! timer and deferral cell of the partition with a timestamp whose high
//! bits are that epoch and whose low bits count its writes. So every write
//! of an ownership is later than every write of the ownerships before it,
//! whatever the members' clocks say: an old owner that still writes (a
//! commit in flight when the partition moved, or a member evicted without
//! knowing) can neither remove nor overwrite what a later owner wrote, and
//! what it adds a later owner's writes of the same cells replace.

use crate::Inner;
use crate::error::Classify;
use crate::statements::PART;
use prosody_core::broker::TopicPartition;
use prosody_core::store::StoreError;
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The bits of a timestamp that count the writes of one ownership.
const COUNT_BITS: u32 = 40;

/// Added to every epoch, so fenced timestamps lie above every wall-clock
/// microsecond timestamp until the year 2112 (schema version 1 wrote those).
const FLOOR: i64 = 4096;

/// Attempts at raising an epoch that other members keep raising first.
const ATTEMPTS: usize = 8;

/// The statements of the ownership table: conditional writes (not
/// idempotent: a retry could apply twice, so a raise that fails is tried
/// again from a fresh read) and a serial read.
#[derive(Debug)]
pub(crate) struct Owners {
    select: PreparedStatement,
    insert: PreparedStatement,
    raise: PreparedStatement,
}

impl Owners {
    pub(crate) async fn prepare(session: &Session, ks: &str) -> Result<Self, PrepareError> {
        let mut select = session
            .prepare(format!(
                "SELECT epoch, owner FROM {ks}.partition_owners WHERE {PART}"
            ))
            .await?;
        // After any conditional write in progress.
        select.set_consistency(Consistency::Serial);
        select.set_is_idempotent(true);
        Ok(Self {
            select,
            insert: session
                .prepare(format!(
                    "INSERT INTO {ks}.partition_owners (group_id, topic, part, epoch, owner) \
                     VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
                ))
                .await?,
            raise: session
                .prepare(format!(
                    "UPDATE {ks}.partition_owners SET epoch = ?, owner = ? WHERE {PART} \
                     IF epoch = ?"
                ))
                .await?,
        })
    }
}

/// The write timestamps of one ownership of one partition.
///
/// Invariant: every timestamp it hands out is greater than every one it
/// handed out before, and than every one of an ownership with a lower
/// epoch (up to 2^40 writes per ownership).
#[derive(Debug)]
pub(crate) struct Fence {
    base: i64,
    count: AtomicI64,
}

impl Fence {
    fn new(epoch: i64) -> Self {
        Self {
            base: FLOOR.saturating_add(epoch).saturating_mul(1 << COUNT_BITS),
            count: AtomicI64::new(0),
        }
    }

    /// The next write timestamp.
    pub(crate) fn next(&self) -> i64 {
        self.base
            .saturating_add(self.count.fetch_add(1, Ordering::Relaxed))
            .saturating_add(1)
    }
}

/// The fences of the partitions this client writes.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    held: Mutex<HashMap<TopicPartition, Arc<Fence>>>,
    /// Makes each raise's owner token unique within the process.
    raises: AtomicU64,
}

impl Fences {
    fn get(&self, partition: &TopicPartition) -> Option<Arc<Fence>> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(partition).cloned()
    }

    /// Installs `fence` unless `replace` is false and one is held already;
    /// returns the one held afterwards.
    fn install(&self, partition: &TopicPartition, fence: Fence, replace: bool) -> Arc<Fence> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !replace && let Some(existing) = held.get(partition) {
            return Arc::clone(existing);
        }
        let fence = Arc::new(fence);
        held.insert(partition.clone(), Arc::clone(&fence));
        fence
    }

    pub(crate) fn forget(&self, partition: &TopicPartition) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(partition);
    }

    fn token(&self) -> String {
        let n = self.raises.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}-{nanos}-{n}", std::process::id())
    }
}

impl Inner {
    /// The partition's fence: the one held, else a new ownership's.
    pub(crate) async fn fence(&self, partition: &TopicPartition) -> Result<Arc<Fence>, StoreError> {
        if let Some(fence) = self.fences.get(partition) {
            return Ok(fence);
        }
        let epoch = self.raise(partition).await?;
        Ok(self.fences.install(partition, Fence::new(epoch), false))
    }

    /// Starts a new ownership of the partition: later than any before it.
    pub(crate) async fn take(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let epoch = self.raise(partition).await?;
        self.fences.install(partition, Fence::new(epoch), true);
        Ok(())
    }

    /// Raises the partition's epoch by one, with a compare-and-set, and
    /// returns the new one. The answer of a conditional write is not
    /// parsed: a serial read tells whose raise won.
    async fn raise(&self, partition: &TopicPartition) -> Result<i64, StoreError> {
        let row = || {
            (
                self.group.to_string(),
                partition.topic.to_string(),
                partition.partition,
            )
        };
        for _ in 0..ATTEMPTS {
            let token = self.fences.token();
            let (group, topic, part) = row();
            match self.owner(partition).await? {
                None => self
                    .session
                    .execute_unpaged(
                        &self.statements.owners.insert,
                        (group, topic, part, 1_i64, token.as_str()),
                    )
                    .await
                    .map_err(Classify::into_store)?,
                Some((epoch, _)) => self
                    .session
                    .execute_unpaged(
                        &self.statements.owners.raise,
                        (
                            epoch.saturating_add(1),
                            token.as_str(),
                            group,
                            topic,
                            part,
                            epoch,
                        ),
                    )
                    .await
                    .map_err(Classify::into_store)?,
            };
            if let Some((epoch, owner)) = self.owner(partition).await?
                && owner == token
            {
                return Ok(epoch);
            }
        }
        Err(StoreError::unavailable(format!(
            "taking {partition}: its ownership epoch kept changing ({ATTEMPTS} attempts)"
        )))
    }

    /// The partition's epoch and the token of whoever raised it last, read
    /// at serial consistency (after any conditional write in progress).
    async fn owner(&self, partition: &TopicPartition) -> Result<Option<(i64, String)>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
        );
        let rows = self
            .session
            .execute_unpaged(&self.statements.owners.select, values)
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        rows.maybe_first_row::<(i64, String)>()
            .map_err(StoreError::rejected)
    }
}
