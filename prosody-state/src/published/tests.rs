use super::*;
use crate::deque::slot_item;
use crate::{DequeDef, MapDef, ValueDef};
use futures_util::TryStreamExt;
use prosody_core::store::{Batch, StateChange, StateWrite, Stores};
use prosody_memory::MemoryStores;
use std::time::Duration;

static COUNT: ValueDef<u64> = ValueDef::new("count").published(true);
static TOTALS: MapDef<u64> = MapDef::new("totals").published(true);
static RECENT: DequeDef<String> = DequeDef::new("recent").published(true);

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 4;

fn put(collection: &str, key: &str, item: impl Into<Bytes>, value: &str) -> StateWrite {
    StateWrite {
        collection: Arc::from(collection),
        key: Key::from(key),
        change: StateChange::Put {
            item: item.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
        },
        ttl: None,
    }
}

/// The partition `key` lands on, as the owner's consumer sees it.
fn partition_of(key: &str) -> TopicPartition {
    TopicPartition::new(TOPIC, partition_for_key(key.as_bytes(), PARTITIONS))
}

async fn commit(stores: &MemoryStores, key: &str, writes: Vec<StateWrite>) {
    let batch = Batch {
        state: writes,
        ..Batch::default()
    };
    stores.commit(&partition_of(key), batch).await.unwrap();
}

fn source(stores: &MemoryStores, ttl: Duration) -> Source<CachedReads<MemoryStores>> {
    let shared = SharedReads::new(1 << 20);
    Source::new(
        CachedReads::new(stores.clone(), &shared, ttl),
        TOPIC,
        PARTITIONS,
    )
}

/// Each reader reads what the owner committed for the key, in the key's
/// partition of the owner's topic, through the typed handles' layout.
#[tokio::test]
async fn readers_read_each_kind_as_committed() {
    let stores = MemoryStores::new();
    commit(
        &stores,
        "alice",
        vec![put("count", "alice", Bytes::new(), "7")],
    )
    .await;
    commit(
        &stores,
        "alice",
        vec![
            put("totals", "alice", "b", "2"),
            put("totals", "alice", "a", "1"),
            put("totals", "alice", "c", "3"),
        ],
    )
    .await;
    let mut bounds = 0i64.cast_unsigned().to_be_bytes().to_vec();
    bounds.extend(2i64.to_be_bytes());
    let deque = vec![
        StateWrite {
            change: StateChange::Put {
                item: Bytes::new(),
                value: Bytes::from(bounds),
            },
            ..put("recent", "alice", Bytes::new(), "")
        },
        put("recent", "alice", slot_item(0), "\"/home\""),
        put("recent", "alice", slot_item(1), "\"/cart\""),
    ];
    commit(&stores, "alice", deque).await;
    // Another key, and the same key in another partition, are not alice's.
    commit(&stores, "bob", vec![put("count", "bob", Bytes::new(), "1")]).await;
    let elsewhere = TopicPartition::new(TOPIC, (partition_of("alice").partition + 1) % PARTITIONS);
    let batch = Batch {
        state: vec![put("count", "carol", Bytes::new(), "9")],
        ..Batch::default()
    };
    stores.commit(&elsewhere, batch).await.unwrap();

    let source = source(&stores, Duration::ZERO);
    let count = PublishedValue::<u64, _>::new(source.clone(), COUNT.spec());
    assert_eq!(count.get("alice").await.unwrap(), Some(7));
    assert_eq!(count.get("bob").await.unwrap(), Some(1));
    assert_eq!(count.get("dave").await.unwrap(), None);
    if partition_of("carol") != elsewhere {
        assert_eq!(
            count.get("carol").await.unwrap(),
            None,
            "another partition's cell"
        );
    }

    let totals = PublishedMap::<u64, _>::new(source.clone(), TOTALS.spec());
    assert_eq!(totals.get("alice", "b").await.unwrap(), Some(2));
    assert_eq!(
        totals.get_many("alice", &["c", "x", "a"]).await.unwrap(),
        vec![Some(3), None, Some(1)]
    );
    assert!(totals.contains("alice", "a").await.unwrap());
    assert!(!totals.contains("alice", "x").await.unwrap());
    let items: Vec<(String, u64)> = totals
        .items("alice", Direction::Backward)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        items,
        vec![("c".into(), 3), ("b".into(), 2), ("a".into(), 1)]
    );
    let keys: Vec<String> = totals
        .keys("alice", Direction::Forward)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(keys, ["a", "b", "c"]);
    let values: Vec<u64> = totals.values("alice").try_collect().await.unwrap();
    assert_eq!(values, [1, 2, 3]);

    let recent = PublishedDeque::<String, _>::new(source, RECENT.spec());
    assert_eq!(recent.len("alice").await.unwrap(), 2);
    assert!(!recent.is_empty("alice").await.unwrap());
    assert!(recent.is_empty("bob").await.unwrap());
    assert_eq!(
        recent.peek_front("alice").await.unwrap().as_deref(),
        Some("/home")
    );
    assert_eq!(
        recent.peek_back("alice").await.unwrap().as_deref(),
        Some("/cart")
    );
    assert_eq!(
        recent.get("alice", 1).await.unwrap().as_deref(),
        Some("/cart")
    );
    assert_eq!(recent.get("alice", 2).await.unwrap(), None);
    let pages: Vec<String> = recent
        .values("alice", Direction::Backward)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(pages, ["/cart", "/home"]);
}

/// A read is served from the cache for its ttl, never longer: a commit
/// shows once the ttl passed; a zero ttl reads the store every time.
#[tokio::test(start_paused = true)]
async fn the_cache_serves_a_read_for_its_ttl_and_no_longer() {
    let stores = MemoryStores::new();
    commit(
        &stores,
        "alice",
        vec![put("count", "alice", Bytes::new(), "1")],
    )
    .await;
    let cached =
        PublishedValue::<u64, _>::new(source(&stores, Duration::from_secs(5)), COUNT.spec());
    let direct = PublishedValue::<u64, _>::new(source(&stores, Duration::ZERO), COUNT.spec());
    assert_eq!(cached.get("alice").await.unwrap(), Some(1));
    commit(
        &stores,
        "alice",
        vec![put("count", "alice", Bytes::new(), "2")],
    )
    .await;
    assert_eq!(direct.get("alice").await.unwrap(), Some(2));
    tokio::time::advance(Duration::from_millis(4_900)).await;
    assert_eq!(
        cached.get("alice").await.unwrap(),
        Some(1),
        "within the ttl"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(cached.get("alice").await.unwrap(), Some(2), "past the ttl");
}

/// A map longer than a scan's chunk is read whole, in pages.
#[tokio::test]
async fn scans_page_through_long_maps() {
    let stores = MemoryStores::new();
    let n = CHUNK * 2 + 5;
    let writes = (0..n)
        .map(|i| put("totals", "alice", format!("{i:04}"), &i.to_string()))
        .collect();
    commit(&stores, "alice", writes).await;
    let totals =
        PublishedMap::<u64, _>::new(source(&stores, Duration::from_secs(5)), TOTALS.spec());
    let values: Vec<u64> = totals.values("alice").try_collect().await.unwrap();
    assert_eq!(values, (0..n as u64).collect::<Vec<_>>());
}

/// A gate that says the collection was retired.
struct Retired;

impl Gate for Retired {
    fn check(&self) -> futures_util::future::BoxFuture<'_, Result<(), StateError>> {
        Box::pin(std::future::ready(Err(StateError::Unpublished {
            collection: "totals",
            reason: "retired".into(),
        })))
    }
}

/// Every read passes the gate first: point reads and scans of a retired
/// collection fail, naming it, rather than read what is left.
#[tokio::test]
async fn a_closed_gate_fails_every_read() {
    let stores = MemoryStores::new();
    commit(&stores, "alice", vec![put("totals", "alice", "a", "1")]).await;
    let gated = source(&stores, Duration::ZERO).gated(Arc::new(Retired));
    let totals = PublishedMap::<u64, _>::new(gated, TOTALS.spec());
    let error = totals.get("alice", "a").await.unwrap_err();
    assert!(
        matches!(
            error,
            StateError::Unpublished {
                collection: "totals",
                ..
            }
        ),
        "{error}"
    );
    let scanned: Result<Vec<u64>, _> = totals.values("alice").try_collect().await;
    assert!(
        matches!(scanned, Err(StateError::Unpublished { .. })),
        "{scanned:?}"
    );
}

/// Each read through the cache counts once: a hit when the cache answered
/// within the ttl, a miss when the store did; a zero ttl counts nothing.
#[tokio::test(start_paused = true)]
async fn each_read_through_the_cache_counts_a_hit_or_a_miss() {
    let stores = MemoryStores::new();
    commit(
        &stores,
        "alice",
        vec![put("count", "alice", Bytes::new(), "1")],
    )
    .await;
    let shared = SharedReads::new(1 << 20);
    let reads = |ttl| {
        Source::new(
            CachedReads::new(stores.clone(), &shared, ttl),
            TOPIC,
            PARTITIONS,
        )
    };
    let cached = PublishedValue::<u64, _>::new(reads(Duration::from_secs(5)), COUNT.spec());
    let direct = PublishedValue::<u64, _>::new(reads(Duration::ZERO), COUNT.spec());
    let lookups = || (shared.lookups().hits(), shared.lookups().misses());
    assert_eq!(direct.get("alice").await.unwrap(), Some(1));
    assert_eq!(lookups(), (0, 0), "a zero ttl bypasses the cache");
    assert_eq!(cached.get("alice").await.unwrap(), Some(1));
    assert_eq!(lookups(), (0, 1), "the first read goes to the store");
    assert_eq!(cached.get("alice").await.unwrap(), Some(1));
    assert_eq!(lookups(), (1, 1), "the second is answered by the cache");
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(cached.get("alice").await.unwrap(), Some(1));
    assert_eq!(lookups(), (1, 2), "past the ttl, the store again");
}
