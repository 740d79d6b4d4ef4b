//! One partition's cells on disk: the rows of its keyspace, and the
//! batches that change them.

use super::StateCache;
use crate::cache::owner::Seen;
use fjall::Keyspace;
use prosody_core::key::Key;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The longest row key the engine takes.
const MAX_KEY: usize = u16::MAX as usize;

/// One partition's cells on disk, for as long as its owner has it.
pub(crate) struct DiskTier {
    cache: Arc<StateCache>,
    keyspace: Option<Keyspace>,
    /// Expiries count in milliseconds from here.
    base: Instant,
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        let Some(keyspace) = self.keyspace.take() else {
            return;
        };
        let cache = Arc::clone(&self.cache);
        let delete = move || {
            if let Err(error) = cache.db.delete_keyspace(keyspace) {
                tracing::warn!(%error, "deleting a partition's state cache failed");
            }
        };
        // Off the runtime's threads where there is one: it writes.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(delete)),
            Err(_) => delete(),
        }
    }
}

/// A change of the tier, as a landed commit, a forget or an absence makes
/// it.
#[derive(Debug)]
pub(crate) enum DiskChange<'a> {
    /// The cell holds `value` until `expiry`.
    Put {
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
        value: &'a [u8],
        expiry: Option<Instant>,
    },
    /// The cell is absent.
    Absent {
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
    },
    /// Nothing of the slot is known any more; with `cleared`, every cell
    /// of it is absent.
    Reset {
        collection: &'a str,
        key: &'a Key,
        cleared: bool,
    },
}

fn too_long() -> fjall::Error {
    fjall::Error::Io(std::io::Error::other(
        "a state cell's collection, key and item are too long for the disk cache",
    ))
}

/// A (collection, key)'s rows: lengths first, so no slot's prefix is
/// another's.
fn slot(collection: &str, key: &Key) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + collection.len() + key.len());
    for part in [collection.as_bytes(), key.as_bytes()] {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(part);
    }
    bytes
}

/// The row of one cell: absent, or a value and its expiry.
fn cell(slot: &[u8], item: &[u8]) -> Result<Vec<u8>, fjall::Error> {
    if slot.len() + 1 + item.len() > MAX_KEY {
        return Err(too_long());
    }
    let mut bytes = Vec::with_capacity(slot.len() + 1 + item.len());
    bytes.extend_from_slice(slot);
    bytes.push(1);
    bytes.extend_from_slice(item);
    Ok(bytes)
}

/// The row that says every cell of the slot not in a row is absent.
fn complete(slot: &[u8]) -> Result<Vec<u8>, fjall::Error> {
    if slot.len() + 1 > MAX_KEY {
        return Err(too_long());
    }
    let mut bytes = slot.to_vec();
    bytes.push(0);
    Ok(bytes)
}

impl DiskTier {
    /// The tier over a fresh `keyspace` of `cache`.
    pub(super) fn new(cache: Arc<StateCache>, keyspace: Keyspace) -> Self {
        Self {
            cache,
            keyspace: Some(keyspace),
            base: Instant::now(),
        }
    }

    fn keyspace(&self) -> Result<&Keyspace, fjall::Error> {
        self.keyspace
            .as_ref()
            .ok_or(fjall::Error::Io(std::io::Error::other("the tier is gone")))
    }

    fn millis(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(i64::MAX)
    }

    /// What the tier knows of a cell; one within `margin` of its expiry is
    /// unknown.
    pub(crate) fn get(
        &self,
        collection: &str,
        key: &Key,
        item: &[u8],
        margin: Duration,
    ) -> Result<Seen, fjall::Error> {
        let keyspace = self.keyspace()?;
        let slot = slot(collection, key);
        let Some(row) = keyspace.get(cell(&slot, item)?)? else {
            return Ok(if keyspace.get(complete(&slot)?)?.is_some() {
                Seen::Known(None)
            } else {
                Seen::Unknown
            });
        };
        let Some((&tag, rest)) = row.split_first() else {
            return Ok(Seen::Unknown);
        };
        let Some((expiry, value)) = rest.split_first_chunk::<8>() else {
            return Ok(if tag == 0 {
                Seen::Known(None)
            } else {
                Seen::Unknown
            });
        };
        let expiry = i64::from_be_bytes(*expiry);
        if expiry >= 0 && self.millis(Instant::now() + margin) >= expiry {
            return Ok(Seen::Unknown);
        }
        Ok(Seen::Known(Some(bytes::Bytes::copy_from_slice(value))))
    }

    /// Applies `changes` in order, in as few atomic batches as the
    /// resets allow (a reset reads the slot's rows as written so far).
    pub(crate) fn apply(&self, changes: &[DiskChange<'_>]) -> Result<(), fjall::Error> {
        let keyspace = self.keyspace()?;
        let db = &self.cache.db;
        let mut batch = db.batch();
        for change in changes {
            match *change {
                DiskChange::Put {
                    collection,
                    key,
                    item,
                    value,
                    expiry,
                } => {
                    let expiry = expiry.map_or(-1, |at| self.millis(at));
                    let mut row = Vec::with_capacity(9 + value.len());
                    row.push(1);
                    row.extend_from_slice(&expiry.to_be_bytes());
                    row.extend_from_slice(value);
                    batch.insert(keyspace, cell(&slot(collection, key), item)?, row);
                }
                DiskChange::Absent {
                    collection,
                    key,
                    item,
                } => batch.insert(keyspace, cell(&slot(collection, key), item)?, vec![0_u8]),
                DiskChange::Reset {
                    collection,
                    key,
                    cleared,
                } => {
                    std::mem::replace(&mut batch, db.batch()).commit()?;
                    let slot = slot(collection, key);
                    let marker = complete(&slot)?;
                    for row in keyspace.prefix(&slot) {
                        batch.remove(keyspace, row.key()?);
                    }
                    if cleared {
                        batch.insert(keyspace, marker, Vec::new());
                    }
                }
            }
        }
        batch.commit()
    }
}
