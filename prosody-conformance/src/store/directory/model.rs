//! The property test: generated sequences of registrations, renewals and
//! deregistrations over a few peers, and of publications and retirements
//! over a few (subsystem, collection) pairs, replayed against the store
//! and a model, every peer and every pair looked up after every step. A failing sequence is
//! shrunk (proptest's value trees, driven here because the store is
//! async) to a smallest one that still fails.

use super::{deregister, lookup, pairs, peers, publication, publish, register};
use crate::broker::Failure;
use crate::store::{Checked, ensure_eq};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::{Just, Strategy, any, prop_oneof};
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::PeerDirectory;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Sequences generated per run: few, since a real server answers each
/// step's lookups.
pub const CASES: u32 = 8;

/// The most operations in one sequence.
pub const STEPS: usize = 24;

/// The peers a sequence's operations pick from.
pub const PEERS: usize = 3;

/// The (subsystem, collection) pairs a sequence's operations pick from:
/// two subsystems, each with the same two collection names, so pairs
/// share a subsystem or a collection (each run names its own subsystems).
pub const PAIRS: usize = 4;

/// The most replays spent shrinking a failing sequence.
const SHRINK_RUNS: u32 = 256;

/// One operation on peer number `peer` of the sequence's peers, or on
/// pair number `pair` of its (subsystem, collection) pairs.
///
/// Invariant: `peer < PEERS` and `pair < PAIRS` (the strategy makes no
/// other; a replay reports one as a failure rather than index past them).
#[derive(Clone, Debug)]
enum Op {
    /// Registers the peer with `entry` for `ttl`.
    Register {
        peer: usize,
        entry: PeerEntry,
        ttl: Duration,
    },
    /// Registers the peer again with the entry it holds (renews its
    /// lease); a peer not registered with [`fallback`]'s entry.
    Renew { peer: usize, ttl: Duration },
    /// Deregisters the peer, registered or not.
    Deregister { peer: usize },
    /// Publishes the pair: owned by `group`, held in `topic`, with
    /// `identity`, published or retired.
    Publish {
        pair: usize,
        group: String,
        topic: String,
        identity: String,
        published: bool,
    },
    /// Publishes the pair again as it holds it, retired (`published:
    /// false`); a pair never published with placeholder names.
    Retire { pair: usize },
}

/// The entry a renewal of a peer without one registers.
fn fallback() -> PeerEntry {
    PeerEntry {
        address: "renewed.internal:9099".into(),
        network: None,
        advertised: None,
    }
}

/// Text of `least` to `most` characters from `alphabet`.
fn text(
    alphabet: &'static [char],
    least: usize,
    most: usize,
) -> impl Strategy<Value = String, Tree: Send> {
    vec(select(alphabet), least..=most).prop_map(String::from_iter)
}

/// A `host:port` address.
fn address() -> impl Strategy<Value = String, Tree: Send> {
    (text(HOST, 1, 12), any::<u16>()).prop_map(|(host, port)| format!("{host}:{port}"))
}

/// The characters of generated host names.
const HOST: &[char] = &['a', 'b', 'z', '0', '9', '-', '.'];

/// The characters of generated network names: ASCII and not.
const NAME: &[char] = &['a', 'Z', '7', '_', ' ', 'é', 'ß', '東', '🦀'];

/// Entries with a `host:port` address, and a network (any text, empty and
/// non-ASCII included) and an advertised address each set or not. (No
/// regex strategies: their value trees are not `Send`, and a check's
/// future holds one across its awaits.)
fn entry() -> impl Strategy<Value = PeerEntry, Tree: Send> {
    (
        address(),
        option::of(text(NAME, 0, 8)),
        option::of(address()),
    )
        .prop_map(|(address, network, advertised)| PeerEntry {
            address,
            network,
            advertised,
        })
}

/// Ttls no sequence outlives, with a fraction of a second (which a store
/// of whole seconds rounds), now and then the longest there is.
fn ttl() -> impl Strategy<Value = Duration, Tree: Send> {
    prop_oneof![
        9 => (60u64..3600, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        1 => Just(Duration::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op, Tree: Send> {
    prop_oneof![
        3 => (0..PEERS, entry(), ttl())
            .prop_map(|(peer, entry, ttl)| Op::Register { peer, entry, ttl }),
        2 => (0..PEERS, ttl()).prop_map(|(peer, ttl)| Op::Renew { peer, ttl }),
        2 => (0..PEERS).prop_map(|peer| Op::Deregister { peer }),
        3 => (0..PAIRS, text(NAME, 1, 8), text(NAME, 1, 8), text(NAME, 0, 12), any::<bool>())
            .prop_map(|(pair, group, topic, identity, published)| Op::Publish {
                pair,
                group,
                topic,
                identity,
                published,
            }),
        1 => (0..PAIRS).prop_map(|pair| Op::Retire { pair }),
    ]
}

/// What the store should hold: each peer's entry and each pair's
/// publication.
struct Model {
    peers: Vec<Option<PeerEntry>>,
    publications: Vec<Option<Publication>>,
}

/// Checks that every peer's lookup and every pair's publication is what
/// the model holds.
async fn agree(
    store: &impl PeerDirectory,
    peers: &[PeerId],
    pairs: &[(String, String)],
    model: &Model,
    when: &str,
) -> Checked {
    for (n, (&peer, expected)) in peers.iter().zip(&model.peers).enumerate() {
        let found = lookup(store, peer).await?;
        ensure_eq(&format!("lookup of peer {n} {when}"), expected, &found)?;
    }
    for (n, ((subsystem, collection), expected)) in
        pairs.iter().zip(&model.publications).enumerate()
    {
        let found = publication(store, subsystem, collection).await?;
        ensure_eq(
            &format!("publication of pair {n} ({subsystem}, {collection}) {when}"),
            expected,
            &found,
        )?;
    }
    Ok(())
}

/// Applies one publication operation to the store and the model.
async fn apply_publication(
    store: &impl PeerDirectory,
    (subsystem, collection): &(String, String),
    held: &mut Option<Publication>,
    op: &Op,
) -> Checked {
    let new = match op {
        Op::Publish {
            group,
            topic,
            identity,
            published,
            ..
        } => Publication {
            subsystem: subsystem.clone(),
            collection: collection.clone(),
            group: group.clone(),
            topic: topic.clone(),
            identity: identity.clone(),
            published: *published,
        },
        _ => Publication {
            published: false,
            ..held.clone().unwrap_or_else(|| Publication {
                subsystem: subsystem.clone(),
                collection: collection.clone(),
                group: "retired-group".into(),
                topic: "retired-topic".into(),
                identity: String::new(),
                published: false,
            })
        },
    };
    publish(store, &new).await?;
    *held = Some(new);
    Ok(())
}

/// Replays `ops` on new peers and pairs: first deregisters each peer
/// (never registered) and looks each pair up (never published), last
/// deregisters each peer again (leaving no lease behind; publications
/// stay, as the contract keeps them, under pair names of this replay
/// alone), and compares every peer and pair with the model after each
/// step.
async fn replay(store: &impl PeerDirectory, ops: &[Op]) -> Checked {
    let peers = peers(PEERS)?;
    let pairs = pairs()?;
    let mut model = Model {
        peers: vec![None; PEERS],
        publications: vec![None; PAIRS],
    };
    for &peer in &peers {
        deregister(store, peer).await?;
    }
    agree(
        store,
        &peers,
        &pairs,
        &model,
        "after deregistering peers never registered",
    )
    .await?;
    for (step, op) in ops.iter().enumerate() {
        let unknown = |what: &str, n: usize, of: usize| {
            Failure::new(format!("step {step} names {what} {n} of {of}"))
        };
        match op {
            Op::Register { peer: n, .. }
            | Op::Renew { peer: n, .. }
            | Op::Deregister { peer: n } => {
                let (Some(&peer), Some(held)) = (peers.get(*n), model.peers.get_mut(*n)) else {
                    return Err(unknown("peer", *n, PEERS));
                };
                match op {
                    Op::Register { entry, ttl, .. } => {
                        register(store, peer, entry, *ttl).await?;
                        *held = Some(entry.clone());
                    }
                    Op::Renew { ttl, .. } => {
                        let entry = held.clone().unwrap_or_else(fallback);
                        register(store, peer, &entry, *ttl).await?;
                        *held = Some(entry);
                    }
                    _ => {
                        deregister(store, peer).await?;
                        *held = None;
                    }
                }
            }
            Op::Publish { pair: n, .. } | Op::Retire { pair: n } => {
                let (Some(pair), Some(held)) = (pairs.get(*n), model.publications.get_mut(*n))
                else {
                    return Err(unknown("pair", *n, PAIRS));
                };
                apply_publication(store, pair, held, op).await?;
            }
        }
        let when = format!("after step {step}, {op:?}");
        agree(store, &peers, &pairs, &model, &when).await?;
    }
    for &peer in &peers {
        deregister(store, peer).await?;
    }
    model.peers.fill(None);
    agree(
        store,
        &peers,
        &pairs,
        &model,
        "after deregistering every peer",
    )
    .await
}

/// The seed of this run: `PROPTEST_RNG_SEED` when set, else from the wall
/// clock (only to make runs differ).
fn seed() -> u64 {
    match Config::default().rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
            u64::try_from(d.as_nanos() % u128::from(u64::MAX)).unwrap_or(0)
        }),
    }
}

/// Shrinks a failing sequence: replays simpler ones while they fail, as
/// proptest's runner does, at most [`SHRINK_RUNS`] times. Returns the
/// smallest failing sequence, its failure, and the replays spent.
async fn shrink(
    store: &impl PeerDirectory,
    tree: &mut impl ValueTree<Value = Vec<Op>>,
    failure: Failure,
) -> (Vec<Op>, Failure, u32) {
    let mut smallest = (tree.current(), failure);
    let mut runs = 0;
    if !tree.simplify() {
        return (smallest.0, smallest.1, runs);
    }
    while runs < SHRINK_RUNS {
        runs += 1;
        let ops = tree.current();
        let more = match replay(store, &ops).await {
            Err(failure) => {
                smallest = (ops, failure);
                tree.simplify()
            }
            Ok(()) => tree.complicate(),
        };
        if !more {
            break;
        }
    }
    (smallest.0, smallest.1, runs)
}

/// Any sequence of registrations, renewals and deregistrations over a few
/// peers, and of publications and retirements over a few pairs, leaves
/// each peer's lookup as a model of the contract says: the entry of its
/// last registration, or `None` after a deregistration (or before any);
/// and each pair's publication the last one published (retired or not),
/// or `None` before any. [`CASES`] sequences of up to [`STEPS`] operations
/// over [`PEERS`] peers, all with leases no sequence outlives, and
/// [`PAIRS`] pairs.
pub async fn operations_follow_the_model(store: &impl PeerDirectory) -> Checked {
    let seed = seed();
    let config = Config {
        cases: CASES,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let sequences = vec(op(), 1..=STEPS);
    for case in 0..CASES {
        let mut tree = sequences
            .new_tree(&mut runner)
            .map_err(|reason| Failure::new(format!("generating a sequence: {reason}")))?;
        let Err(failure) = replay(store, &tree.current()).await else {
            continue;
        };
        let (ops, failure, runs) = shrink(store, &mut tree, failure).await;
        let mut shown = String::new();
        for (step, op) in ops.iter().enumerate() {
            let _ = write!(shown, "\n  step {step}: {op:?}");
        }
        return Err(Failure::new(format!(
            "sequence {case} of seed {seed} (PROPTEST_RNG_SEED={seed} replays it), shrunk in \
             {runs} replays to {} operations:{shown}\n{failure}",
            ops.len()
        )));
    }
    Ok(())
}
