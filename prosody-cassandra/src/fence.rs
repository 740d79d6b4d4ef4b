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
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::store::StoreError;
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher as _, Hasher as _, RandomState};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The bits of a timestamp that count the writes of one ownership.
const COUNT_BITS: u32 = 40;

/// Added to every epoch, so fenced timestamps lie above every wall-clock
/// microsecond timestamp until the year 2112 (schema version 1 wrote those).
const FLOOR: i64 = 4096;

/// The highest epoch: its timestamps still fit in an `i64`.
const MAX_EPOCH: i64 = (i64::MAX >> COUNT_BITS) - FLOOR - 1;

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
        let conditional = |cql: String| async move {
            let mut statement = session.prepare(cql).await?;
            // Global, as the read: members in two datacenters must not both
            // win one epoch.
            statement.set_serial_consistency(Some(SerialConsistency::Serial));
            Ok::<_, PrepareError>(statement)
        };
        Ok(Self {
            select,
            insert: conditional(format!(
                "INSERT INTO {ks}.partition_owners (group_id, topic, part, epoch, owner) \
                 VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
            ))
            .await?,
            raise: conditional(format!(
                "UPDATE {ks}.partition_owners SET epoch = ?, owner = ? WHERE {PART} IF epoch = ?"
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
///
/// Invariant: only [`Inner::take`] (at `open`) raises the epoch of a
/// partition this client opened or closed before; a write to a partition
/// closed since is refused, so a member that let a partition go can never
/// raise itself above its next owner.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    held: Mutex<Held>,
    /// Makes each raise's owner token unique within the process.
    raises: AtomicU64,
}

#[derive(Debug, Default)]
struct Held {
    fences: HashMap<TopicPartition, Arc<Fence>>,
    closed: HashSet<TopicPartition>,
}

/// What a write finds of its partition.
enum Found {
    Fence(Arc<Fence>),
    /// Never opened here: direct use, outside the runtime.
    Unowned,
    /// Closed here, and not opened again.
    Closed,
}

impl Fences {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, partition: &TopicPartition) -> Found {
        let held = self.lock();
        match held.fences.get(partition) {
            Some(fence) => Found::Fence(Arc::clone(fence)),
            None if held.closed.contains(partition) => Found::Closed,
            None => Found::Unowned,
        }
    }

    /// Installs `fence` unless one with a later base is held (a concurrent
    /// raise of this client's won); returns the one held afterwards.
    fn install(&self, partition: &TopicPartition, fence: Fence) -> Arc<Fence> {
        let mut held = self.lock();
        held.closed.remove(partition);
        if let Some(existing) = held.fences.get(partition)
            && existing.base >= fence.base
        {
            return Arc::clone(existing);
        }
        let fence = Arc::new(fence);
        held.fences.insert(partition.clone(), Arc::clone(&fence));
        fence
    }

    pub(crate) fn forget(&self, partition: &TopicPartition) {
        let mut held = self.lock();
        held.fences.remove(partition);
        held.closed.insert(partition.clone());
    }

    /// A token no other raise shares: the process, the time, a count and
    /// the random keys of the standard library's hasher.
    fn token(&self) -> String {
        let n = self.raises.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let random = RandomState::new().build_hasher().finish();
        format!("{}-{nanos}-{n}-{random:016x}", std::process::id())
    }
}

impl Inner {
    /// The partition's fence: the one `open` took; for a partition this
    /// client never opened (direct use, outside the runtime), a new
    /// ownership's. A partition closed since refuses the write.
    pub(crate) async fn fence(&self, partition: &TopicPartition) -> Result<Arc<Fence>, StoreError> {
        match self.fences.find(partition) {
            Found::Fence(fence) => Ok(fence),
            Found::Unowned => {
                let epoch = self.raise(partition).await?;
                Ok(self.fences.install(partition, Fence::new(epoch)))
            }
            Found::Closed => Err(StoreError::rejected(format!(
                "{partition} was closed: this client no longer owns it, and writes nothing to it"
            ))),
        }
    }

    /// Starts a new ownership of the partition: later than any before it.
    pub(crate) async fn take(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let epoch = self.raise(partition).await?;
        self.fences.install(partition, Fence::new(epoch));
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
            let written = match self.owner(partition).await? {
                None => {
                    self.session
                        .execute_unpaged(
                            &self.statements.owners.insert,
                            (group, topic, part, 1_i64, token.as_str()),
                        )
                        .await
                }
                Some((epoch, _)) if epoch >= MAX_EPOCH => {
                    return Err(StoreError::rejected(format!(
                        "{partition}: its ownership epoch reached {epoch}, the most this schema holds"
                    )));
                }
                Some((epoch, _)) => {
                    self.session
                        .execute_unpaged(
                            &self.statements.owners.raise,
                            (epoch + 1, token.as_str(), group, topic, part, epoch),
                        )
                        .await
                }
            };
            // A conditional write that timed out may have applied: the
            // serial read below tells.
            if let Err(error) = written.map_err(Classify::into_store)
                && !error.is_retriable()
            {
                return Err(error);
            }
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
