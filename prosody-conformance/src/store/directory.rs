//! The [`PeerDirectory`] conformance suite: peers registered, renewed and
//! deregistered, and looked up, and publications published, replaced and
//! retired, and read, checked against every clause of the contract.
//!
//! - [`operations_follow_the_model`] is a property test: generated
//!   sequences of registrations (each with an entry and a long ttl),
//!   renewals and deregistrations over a few peers, with every peer looked
//!   up after every step and compared with a model. It covers register then
//!   lookup, a later registration replacing the entry, deregistration
//!   (of a peer never registered too), and the peers' independence (their
//!   ids differ in one byte). A failing sequence is shrunk to a smallest
//!   one, which the failure shows with the seed that replays it. The same
//!   sequences publish and retire over a few (subsystem, collection) pairs
//!   (two subsystems sharing two collection names), every pair read after
//!   every step: publish then read, a later publication replacing the
//!   earlier (`published` flipped either way), a pair never published
//!   (`None`), the pairs' independence, and publications and peers left
//!   alone by each other.
//! - [`publications_replace_and_stay_apart`] walks the same clauses as
//!   fixed examples: publish, retire, publish again, each pair read.
//! - [`leases_run_out`] and [`a_renewed_lease_outlasts_the_first`] watch
//!   leases of a few seconds run out: a lease runs out `ttl` after its
//!   registration, give or take the store's clock granularity
//!   ([`GRANULARITY`]); a registration replaces the lease, longer or
//!   shorter; deregistering a peer that is gone succeeds.
//!
//! Run each check against a backend, one test per check, or all with
//! [`run_all`]. Every check uses peer ids and subsystem names of its own
//! (random), so checks can share one directory (and one Cassandra table)
//! with each other and with other runs; the publications they leave are
//! kept (a publication has no TTL), one per pair a check used. Every store call has a deadline ([`DEADLINE`]).
//!
//! Time: the expiry checks take `pass`, how the backend's time passes:
//! `tokio::time::advance` under a paused clock (the memory store), whose
//! waits take no real time, or `tokio::time::sleep` in real time (a real
//! server, where the suite waits about eight seconds). They never wait a
//! fixed time for a state: they poll `lookup` every [`POLL`] until the
//! lease is gone, and judge each answer by when it was given (on tokio's
//! clock): the entry must be found until `ttl - GRANULARITY` after the
//! registration began, and gone `ttl + GRANULARITY` after it returned;
//! between the two either answer is right.

mod model;

pub use super::DEADLINE;
use super::{Checked, call, ensure_eq};
use crate::broker::Failure;
pub use model::{CASES, PAIRS, PEERS, STEPS, operations_follow_the_model};
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::PeerDirectory;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// The ttl of the leases the expiry checks watch run out.
pub const SHORT_TTL: Duration = Duration::from_secs(2);

/// How far a lease may run out before or after its ttl: the clock
/// granularity the contract allows (a backend that keeps ttls in whole
/// seconds).
pub const GRANULARITY: Duration = Duration::from_secs(1);

/// How often the expiry checks look a watched peer up.
pub const POLL: Duration = Duration::from_millis(100);

/// A ttl no check outlives.
const LONG_TTL: Duration = Duration::from_secs(3600);

/// `count` new peer ids, differing from each other in their last byte
/// only (so a store that keeps part of an id mixes them up).
pub(crate) fn peers(count: usize) -> Result<Vec<PeerId>, Failure> {
    let base = PeerId::random()
        .map_err(|error| Failure::new(format!("making peer ids: {error}")))?
        .to_bytes();
    (0..count)
        .map(|n| {
            let mut bytes = base;
            let n = u8::try_from(n)
                .map_err(|_| Failure::new(format!("{count} peers differ in more than a byte")))?;
            bytes[15] ^= n;
            Ok(PeerId::from_bytes(bytes))
        })
        .collect()
}

/// The (subsystem, collection) pairs of [`PAIRS`]: two subsystems new to
/// this call (random), each with collections `orders` and `stock`, in the
/// order (a, orders), (a, stock), (b, orders), (b, stock); so a pair
/// shares its subsystem with one and its collection with another.
pub(crate) fn pairs() -> Result<Vec<(String, String)>, Failure> {
    let base = PeerId::random()
        .map_err(|error| Failure::new(format!("making subsystem names: {error}")))?;
    let pairs: Vec<(String, String)> = ["a", "b"]
        .iter()
        .flat_map(|subsystem| {
            ["orders", "stock"]
                .map(|collection| (format!("sub-{base}-{subsystem}"), collection.to_owned()))
        })
        .collect();
    if pairs.len() == PAIRS {
        Ok(pairs)
    } else {
        Err(Failure::new(format!(
            "{} pairs made, not {PAIRS}",
            pairs.len()
        )))
    }
}

/// An entry that names `name` in each of its fields; `network` and
/// `advertised` set or not.
fn entry(name: &str, network: bool, advertised: bool) -> PeerEntry {
    PeerEntry {
        address: format!("{name}.internal:9099"),
        network: network.then(|| format!("net-{name}")),
        advertised: advertised.then(|| format!("{name}.example:443")),
    }
}

pub(crate) async fn register(
    store: &impl PeerDirectory,
    peer: PeerId,
    entry: &PeerEntry,
    ttl: Duration,
) -> Checked {
    let what = format!("register({peer}, {entry:?}, {ttl:?})");
    call(&what, store.register(peer, entry, ttl)).await
}

pub(crate) async fn lookup(
    store: &impl PeerDirectory,
    peer: PeerId,
) -> Result<Option<PeerEntry>, Failure> {
    call(&format!("lookup({peer})"), store.lookup(peer)).await
}

pub(crate) async fn deregister(store: &impl PeerDirectory, peer: PeerId) -> Checked {
    call(&format!("deregister({peer})"), store.deregister(peer)).await
}

pub(crate) async fn publish(store: &impl PeerDirectory, publication: &Publication) -> Checked {
    call(
        &format!("publish({publication:?})"),
        store.publish(publication),
    )
    .await
}

pub(crate) async fn publication(
    store: &impl PeerDirectory,
    subsystem: &str,
    collection: &str,
) -> Result<Option<Publication>, Failure> {
    let what = format!("publication({subsystem:?}, {collection:?})");
    call(&what, store.publication(subsystem, collection)).await
}

/// A publication of `pair` naming `name` in each of its fields.
fn publication_of(
    (subsystem, collection): &(String, String),
    name: &str,
    published: bool,
) -> Publication {
    Publication {
        subsystem: subsystem.clone(),
        collection: collection.clone(),
        group: format!("group-{name}"),
        topic: format!("topic-{name}"),
        identity: format!("keyed:{name}"),
        published,
    }
}

/// Reads every pair and compares each with what it should hold.
async fn read_pairs(
    store: &impl PeerDirectory,
    pairs: &[(String, String)],
    expected: &[Option<Publication>],
    when: &str,
) -> Checked {
    for ((subsystem, collection), expected) in pairs.iter().zip(expected) {
        ensure_eq(
            &format!("publication of ({subsystem}, {collection}) {when}"),
            expected,
            &publication(store, subsystem, collection).await?,
        )?;
    }
    Ok(())
}

/// Publications as examples: a pair never published is `None`; publish
/// then read back; a later publication replaces the earlier whole, also
/// retiring it (`published: false`) and publishing it again; pairs that
/// share a subsystem or a collection stay apart; a peer registered
/// meanwhile is left alone, and leaves the publications alone.
pub async fn publications_replace_and_stay_apart(store: &impl PeerDirectory) -> Checked {
    let pairs = pairs()?;
    let [peer] =
        <[PeerId; 1]>::try_from(peers(1)?).map_err(|_| Failure::new("one peer was asked for"))?;
    let mut held: Vec<Option<Publication>> = vec![None; pairs.len()];
    read_pairs(store, &pairs, &held, "before any publication").await?;
    let peer_entry = entry("publisher", true, false);
    register(store, peer, &peer_entry, LONG_TTL).await?;
    // Each step publishes one pair: (pair, name, published).
    let steps = [
        (0, "first", true),
        (1, "beside", true),
        (2, "other-subsystem", true),
        (0, "retired", false),
        (0, "again", true),
        (3, "retired-at-once", false),
    ];
    for (n, name, published) in steps {
        let pair = pairs
            .get(n)
            .ok_or_else(|| Failure::new(format!("pair {n} of {}", pairs.len())))?;
        let new = publication_of(pair, name, published);
        publish(store, &new).await?;
        if let Some(slot) = held.get_mut(n) {
            *slot = Some(new);
        }
        let when = format!("after publishing pair {n} as {name:?} (published: {published})");
        read_pairs(store, &pairs, &held, &when).await?;
        ensure_eq(
            &format!("lookup of a registered peer {when}"),
            &Some(peer_entry.clone()),
            &lookup(store, peer).await?,
        )?;
    }
    deregister(store, peer).await?;
    read_pairs(store, &pairs, &held, "after deregistering a peer").await
}

/// A lease under watch: the peer, the entry its registration wrote, the
/// ttl, and when (on tokio's clock) the registration began and returned.
///
/// Invariant: `began <= returned`, and between the two one registration
/// of `peer` with `entry` for `ttl` ran (and none of the peer since).
struct Lease {
    name: &'static str,
    peer: PeerId,
    entry: PeerEntry,
    ttl: Duration,
    began: Instant,
    returned: Instant,
}

impl Lease {
    /// Registers `peer` and records when.
    async fn take(
        store: &impl PeerDirectory,
        name: &'static str,
        peer: PeerId,
        entry: PeerEntry,
        ttl: Duration,
    ) -> Result<Self, Failure> {
        let began = Instant::now();
        register(store, peer, &entry, ttl).await?;
        Ok(Self {
            name,
            peer,
            entry,
            ttl,
            began,
            returned: Instant::now(),
        })
    }

    /// Judges one lookup, asked at `asked` and answered at `answered`:
    /// `Ok(true)` once the lease is rightly gone.
    fn judge(
        &self,
        found: Option<&PeerEntry>,
        asked: Instant,
        answered: Instant,
    ) -> Result<bool, Failure> {
        let (name, ttl) = (self.name, self.ttl);
        let runs_until = self.began + ttl.saturating_sub(GRANULARITY);
        let ends_by = self.returned + ttl + GRANULARITY;
        match found {
            None if answered < runs_until => Err(Failure::new(format!(
                "lease {name} (ttl {ttl:?}): lookup found nothing {:?} after the registration \
                 began; the lease must run {:?} at least (its ttl less the granularity)",
                answered - self.began,
                ttl.saturating_sub(GRANULARITY),
            ))),
            None => Ok(true),
            Some(_) if asked >= ends_by => Err(Failure::new(format!(
                "lease {name} (ttl {ttl:?}): lookup still found the entry {:?} after the \
                 registration returned; the lease must have run out by {:?} (its ttl plus the \
                 granularity)",
                asked - self.returned,
                ttl + GRANULARITY,
            ))),
            Some(entry) => {
                ensure_eq(
                    &format!("lookup of lease {name} while it runs"),
                    &self.entry,
                    entry,
                )?;
                Ok(false)
            }
        }
    }
}

/// Looks up every watched peer each [`POLL`], letting time pass with
/// `pass` between rounds, until every lease is gone; each answer is judged
/// by when it was given ([`Lease::judge`]). Then, one poll later, each is
/// still gone.
async fn watch<P, F>(store: &impl PeerDirectory, leases: &[&Lease], pass: &P) -> Checked
where
    P: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let mut running: Vec<&Lease> = leases.to_vec();
    while !running.is_empty() {
        let mut still = Vec::with_capacity(running.len());
        for lease in running {
            let asked = Instant::now();
            let found = lookup(store, lease.peer).await?;
            if !lease.judge(found.as_ref(), asked, Instant::now())? {
                still.push(lease);
            }
        }
        running = still;
        pass(POLL).await;
    }
    for lease in leases {
        ensure_eq(
            &format!("lookup of lease {} a poll after it ran out", lease.name),
            &None,
            &lookup(store, lease.peer).await?,
        )?;
    }
    Ok(())
}

/// A lease runs out after its ttl, and then `lookup` returns `None`; a
/// later registration with a shorter ttl replaces a longer lease; a peer
/// with a long lease stays meanwhile; deregistering a peer that is gone
/// succeeds and changes nothing.
pub async fn leases_run_out<P, F>(store: &impl PeerDirectory, pass: P) -> Checked
where
    P: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let [short, shortened, long] = <[PeerId; 3]>::try_from(peers(3)?)
        .map_err(|_| Failure::new("three peers were asked for"))?;
    register(store, long, &entry("long", true, true), LONG_TTL).await?;
    register(store, shortened, &entry("before", true, false), LONG_TTL).await?;
    let leases = [
        Lease::take(
            store,
            "short",
            short,
            entry("short", false, false),
            SHORT_TTL,
        )
        .await?,
        Lease::take(
            store,
            "shortened (a long lease, then a short one)",
            shortened,
            entry("after", false, true),
            SHORT_TTL,
        )
        .await?,
    ];
    watch(store, &leases.iter().collect::<Vec<_>>(), &pass).await?;
    ensure_eq(
        "lookup of a peer with a long lease after others ran out",
        &Some(entry("long", true, true)),
        &lookup(store, long).await?,
    )?;
    deregister(store, short).await?;
    ensure_eq(
        "lookup after deregistering a peer whose lease ran out",
        &None,
        &lookup(store, short).await?,
    )?;
    deregister(store, long).await?;
    ensure_eq(
        "lookup after deregistering a peer with a long lease",
        &None,
        &lookup(store, long).await?,
    )
}

/// A lease renewed before it runs out (with another entry and a longer
/// ttl) does not run out at the first lease's end, and runs out after its
/// own ttl.
pub async fn a_renewed_lease_outlasts_the_first<P, F>(
    store: &impl PeerDirectory,
    pass: P,
) -> Checked
where
    P: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let [peer] =
        <[PeerId; 1]>::try_from(peers(1)?).map_err(|_| Failure::new("one peer was asked for"))?;
    let first = entry("first", true, false);
    register(store, peer, &first, SHORT_TTL).await?;
    ensure_eq(
        "lookup right after registering",
        &Some(first),
        &lookup(store, peer).await?,
    )?;
    pass(SHORT_TTL / 4).await;
    // The renewal must run past the first lease's latest end, and past
    // the first's ttl by more than the granularity.
    let renewed = Lease::take(
        store,
        "renewed",
        peer,
        entry("renewed", false, true),
        SHORT_TTL * 2,
    )
    .await?;
    watch(store, &[&renewed], &pass).await
}

/// Runs every check, with `pass` letting the backend's time go by; the
/// failure names each check that failed.
pub async fn run_all<P, F>(store: &impl PeerDirectory, pass: P) -> Checked
where
    P: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let mut failures = Vec::new();
    let mut record = |name: &str, result: Checked| {
        if let Err(failure) = result {
            failures.push(format!("{name}: {failure}"));
        }
    };
    record(
        "operations_follow_the_model",
        operations_follow_the_model(store).await,
    );
    record(
        "publications_replace_and_stay_apart",
        publications_replace_and_stay_apart(store).await,
    );
    record("leases_run_out", leases_run_out(store, &pass).await);
    record(
        "a_renewed_lease_outlasts_the_first",
        a_renewed_lease_outlasts_the_first(store, &pass).await,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("\n")))
    }
}
