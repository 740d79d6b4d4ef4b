//! The [`DedupStore`] conformance suite: keys inserted through
//! [`Stores::commit`] (a batch of one [`DedupWrite`], named an insert) and
//! looked up through [`DedupStore::contains`].
//!
//! Run each check against a backend, one test per check, or all with
//! [`run_all`]. Every lookup asks [`DedupStore::contains_now`] too, which must
//! agree with [`DedupStore::contains`] whenever it answers. Checks use keys no other check or run uses, so they can
//! share one store (and one Cassandra table). Every store call has a
//! deadline ([`DEADLINE`]).
//!
//! The expiry checks wait with `tokio::time::sleep` past short ttls
//! ([`SHORT_TTL`] plus [`EXPIRY_SLACK`]): expiry is the behaviour under
//! test, not a synchronisation. Under a paused tokio clock (the memory
//! store) the waits take no real time; against a real backend the whole
//! suite waits about nine seconds.

pub use super::DEADLINE;
use super::{Checked, call, commit, ensure_eq};
use crate::broker::Failure;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::store::dedup::{DedupKey, DedupStore};
use prosody_contracts::store::{Batch, DedupWrite, Stores};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::sleep;

/// The ttl of the keys the expiry checks watch expire.
pub const SHORT_TTL: Duration = Duration::from_secs(2);

/// How far past a ttl a backend may still report the key (clock
/// granularity of a backend that keeps ttls in whole seconds).
pub const EXPIRY_SLACK: Duration = Duration::from_secs(1);

/// A ttl no check outlives.
const LONG_TTL: Duration = Duration::from_secs(3600);

/// A namespace of keys no other check, process or run uses.
struct Keys {
    namespace: String,
}

impl Keys {
    fn new(check: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Wall-clock nanoseconds only make runs distinct; no time is measured.
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            namespace: format!("conformance-{check}-{}-{run}-{n}", std::process::id()),
        }
    }

    fn key(&self, i: usize) -> DedupKey {
        DedupKey::new(&self.namespace, "key", &i.to_string())
    }
}

/// Whether the store holds `key`; a store that can tell at once ([`contains_now`]) must tell the
/// same at the same moment, in every check.
///
/// [`contains_now`]: DedupStore::contains_now
async fn contains(store: &impl Stores, key: DedupKey) -> Result<bool, Failure> {
    let held = call(
        &format!("contains({key})"),
        DedupStore::contains(store, key),
    )
    .await?;
    if let Some(peeked) = DedupStore::contains_now(store, key) {
        ensure_eq(
            &format!("contains_now({key}) beside contains"),
            &held,
            &peeked,
        )?;
    }
    Ok(held)
}

/// Inserts `key` for `ttl`: commits a batch of that one dedup write (for
/// a partition of its own: dedup records belong to none).
async fn insert(store: &impl Stores, key: DedupKey, ttl: Duration) -> Checked {
    let batch = Batch {
        dedup: vec![DedupWrite { key, ttl }],
        ..Batch::default()
    };
    let partition = TopicPartition::new(format!("conformance-dedup-{key}"), 0);
    commit(
        store,
        &format!("an insert of ({key}, {ttl:?})"),
        &partition,
        batch,
    )
    .await
}

/// An inserted key is contained, and inserting it twice is no error.
pub async fn insert_then_contains(store: &impl Stores) -> Checked {
    let keys = Keys::new("insert");
    let key = keys.key(0);
    insert(store, key, LONG_TTL).await?;
    ensure_eq("an inserted key", &true, &contains(store, key).await?)?;
    insert(store, key, LONG_TTL).await?;
    ensure_eq("a key inserted twice", &true, &contains(store, key).await?)
}

/// Keys never inserted are absent, including keys that differ from an
/// inserted one only in their version, record key or id.
pub async fn absent_keys_are_absent(store: &impl Stores) -> Checked {
    let keys = Keys::new("absent");
    ensure_eq(
        "a key never inserted",
        &false,
        &contains(store, keys.key(0)).await?,
    )?;
    let ns = &keys.namespace;
    insert(store, DedupKey::new(ns, "k", "id"), LONG_TTL).await?;
    for (what, other) in [
        (
            "another version",
            DedupKey::new(&format!("{ns}-2"), "k", "id"),
        ),
        ("another record key", DedupKey::new(ns, "k2", "id")),
        ("another id", DedupKey::new(ns, "k", "id2")),
    ] {
        ensure_eq(
            &format!("a key with {what} than an inserted one"),
            &false,
            &contains(store, other).await?,
        )?;
    }
    Ok(())
}

/// A key is gone once its ttl has passed; a key with a longer ttl stays.
pub async fn entries_expire_after_their_ttl(store: &impl Stores) -> Checked {
    let keys = Keys::new("expiry");
    let (short, long) = (keys.key(0), keys.key(1));
    insert(store, short, SHORT_TTL).await?;
    insert(store, long, LONG_TTL).await?;
    ensure_eq(
        "a key within its ttl",
        &true,
        &contains(store, short).await?,
    )?;
    sleep(SHORT_TTL + EXPIRY_SLACK).await;
    ensure_eq(
        &format!("a key {EXPIRY_SLACK:?} past its ttl of {SHORT_TTL:?}"),
        &false,
        &contains(store, short).await?,
    )?;
    ensure_eq(
        "a key with a long ttl after another expired",
        &true,
        &contains(store, long).await?,
    )
}

/// Inserting a key again replaces its expiry: it outlives its first ttl and
/// expires after the second.
pub async fn reinsert_refreshes_the_ttl(store: &impl Stores) -> Checked {
    let keys = Keys::new("refresh");
    let key = keys.key(0);
    // t = 0: expires at 2 s.
    insert(store, key, SHORT_TTL).await?;
    // t = 1 s: expires at 5 s instead.
    sleep(EXPIRY_SLACK).await;
    let second = SHORT_TTL * 2;
    insert(store, key, second).await?;
    // t = 3 s: past the first expiry by the slack.
    sleep(SHORT_TTL).await;
    ensure_eq(
        "a key re-inserted with a longer ttl, past its first ttl",
        &true,
        &contains(store, key).await?,
    )?;
    // t = 6 s: past the second expiry by the slack.
    sleep(second.saturating_sub(SHORT_TTL) + EXPIRY_SLACK).await;
    ensure_eq(
        "a re-inserted key past its second ttl",
        &false,
        &contains(store, key).await?,
    )
}

/// Many keys are each contained, and as many others each absent.
pub async fn many_keys(store: &impl Stores) -> Checked {
    const COUNT: usize = 200;
    let keys = Keys::new("many");
    for i in 0..COUNT {
        insert(store, keys.key(i), LONG_TTL).await?;
    }
    for i in 0..COUNT {
        ensure_eq(
            &format!("inserted key {i} of {COUNT}"),
            &true,
            &contains(store, keys.key(i)).await?,
        )?;
        ensure_eq(
            &format!("absent key {} beside {COUNT} inserted", COUNT + i),
            &false,
            &contains(store, keys.key(COUNT + i)).await?,
        )?;
    }
    Ok(())
}

/// Runs every check; the failure names each check that failed.
pub async fn run_all(store: &impl Stores) -> Checked {
    let mut failures = Vec::new();
    let mut record = |name: &str, result: Checked| {
        if let Err(failure) = result {
            failures.push(format!("{name}: {failure}"));
        }
    };
    record("insert_then_contains", insert_then_contains(store).await);
    record(
        "absent_keys_are_absent",
        absent_keys_are_absent(store).await,
    );
    record(
        "entries_expire_after_their_ttl",
        entries_expire_after_their_ttl(store).await,
    );
    record(
        "reinsert_refreshes_the_ttl",
        reinsert_refreshes_the_ttl(store).await,
    );
    record("many_keys", many_keys(store).await);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("\n")))
    }
}
