//! Requests across processes on real Kafka and Cassandra (from
//! `scripts/services`): two answering members in OS processes of their own
//! (subsystems `billing` and `inventory`) and a requester in this one.
//!
//! - Both subsystems answer, each from its own process.
//! - A handler's permanent failure is a failure carrying its message.
//! - A rebalance of `billing` while a request waits still gives one outcome.
//! - With `inventory` killed (SIGKILL), its outcome is a timeout within the
//!   request's timeout, while `billing` still answers.
//! - Published state, read from this third process, shows the members'
//!   committed counts within the cache window; a deployment with
//!   `published(false)` retires it, and the open reader fails.
//! - A change a member's handler holds pending is never read; a requester
//!   that restarts on the same address drops its earlier life's answer.
//! - A requester killed with SIGKILL, its directory entry left behind, drops
//!   out of the directory within its lease.
//!
//! Its own harness (`harness = false`), so that it can run as a member or a
//! requester: with `REQUESTS_MEMBER` (or `REQUESTS_CALLER`) set it is one.
//! Without the servers it prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod world;

use prosody::peer::PeerId;
use prosody::state::{MapDef, PublishedMap, StateError};
use prosody::store::PeerDirectory;
use prosody::{ClientError, Outcome, ProsodyClient, ResponseError};
use prosody::{ClientReads, ReadTtl};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use world::{CALLER, HANDLED, LEASE, MEMBER, World, group, line, member};

/// The members' collection, as a deployment that retires it defines it.
static RETIRED: MapDef<u64> = MapDef::new("handled");

/// A requester process: registers by making one request, prints its peer
/// id, and waits to be killed.
async fn caller() -> ExitCode {
    let client = ProsodyClient::builder()
        .group_id(services::unique("caller"))
        // The first send to a new topic waits for its metadata: on a
        // loaded machine that took over the default second. The suite
        // proves requests across processes, not their latency.
        .send_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let topic = std::env::var("PROSODY_SUBSCRIBED_TOPICS").unwrap();
    let outcomes = client
        .request::<Value>(
            &topic,
            "order-c",
            &json!({}),
            &["billing"],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert!(outcomes["billing"].is_success(), "{outcomes:?}");
    println!("peer {}", client.peer_id().unwrap());
    std::future::pending::<ExitCode>().await
}

async fn ask(
    client: &ProsodyClient,
    world: &World,
    key: &str,
    names: &[&str],
    timeout: Duration,
) -> prosody::Outcomes<Value> {
    client
        .request::<Value>(&world.topic, key, &json!({}), names, timeout)
        .await
        .unwrap()
}

fn answered_by(outcome: &Outcome<Value>, subsystem: &str) -> u64 {
    match outcome {
        Outcome::Success(value) if value["by"] == subsystem => value["pid"].as_u64().unwrap(),
        other => panic!("expected an answer of {subsystem}, got {other:?}"),
    }
}

/// Published state, read from this third process: the members' committed
/// counts, at most one cache window (5 s) old.
async fn published_state(
    client: &ProsodyClient,
    world: &World,
    timeout: Duration,
) -> PublishedMap<u64, ClientReads> {
    let handled = client.state("billing", &HANDLED).await.unwrap();
    assert_eq!(handled.get("order-1", "count").await.unwrap(), Some(1));
    ask(client, world, "order-1", &["billing"], timeout).await;
    let asked_again = Instant::now();
    while handled.get("order-1", "count").await.unwrap() != Some(2) {
        assert!(
            asked_again.elapsed() < Duration::from_secs(8),
            "a committed count not seen within the window"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    handled
}

/// A change held pending in a member's handler is never read by this
/// process; once the record settles (its answer came), it is.
async fn pending_is_never_read(client: &ProsodyClient, world: &World) {
    let direct = ProsodyClient::builder()
        .group_id(services::unique("readers"))
        .cassandra_keyspace(world.keyspace.as_str())
        .state_read_cache(ReadTtl::Off)
        .disable_probe()
        .build()
        .await
        .unwrap();
    let handled = direct.state("billing", &HANDLED).await.unwrap();
    let asked = ask(
        client,
        world,
        "order-hold",
        &["billing"],
        Duration::from_secs(30),
    );
    let watched = async {
        // The handler holds its write pending for 3 s after it starts.
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            let seen = handled.get("order-hold", "count").await.unwrap();
            assert_eq!(seen, None, "a pending change was read");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (outcomes, ()) = tokio::join!(asked, watched);
    answered_by(&outcomes["billing"], "billing");
    assert_eq!(handled.get("order-hold", "count").await.unwrap(), Some(1));
}

/// A requester that restarts on the same address never receives an
/// answer meant for its earlier life: that answer reaches the new
/// endpoint and is dropped there, counted.
async fn a_restarted_requester_drops_its_earlier_lifes_answers(world: &World) {
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let earlier = world.requester_on(address).await;
    // Built now, bound at its first request: the answer comes within the
    // earlier entry's lease, so the later life must bind at once.
    let later = world.requester_on(address).await;
    let outcomes = ask(
        &earlier,
        world,
        "slow-r",
        &["billing"],
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        outcomes["billing"],
        Outcome::Failure(ResponseError::Timeout)
    );
    // Gone without deregistering, as a crash leaves it; its answer is on
    // its way (the handler takes 4 s, within the earlier entry's 5 s lease).
    drop(earlier);
    // The earlier endpoint lets the address go as its task ends.
    let bound_by = Instant::now() + Duration::from_secs(5);
    let outcomes = loop {
        let asked = later
            .request::<Value>(
                &world.topic,
                "order-r",
                &json!({}),
                &["billing"],
                Duration::from_secs(30),
            )
            .await;
        match asked {
            Err(ClientError::Peer(error)) if Instant::now() < bound_by => {
                eprintln!("the address is not free yet: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other.unwrap(),
        }
    };
    answered_by(&outcomes["billing"], "billing");
    let until = Instant::now() + Duration::from_secs(20);
    while later.dropped_answers() == 0 {
        assert!(
            Instant::now() < until,
            "the earlier life's answer never arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(later.dropped_answers(), 1);
    later.shutdown().await;
}

/// A deployment of billing with `published(false)` retires the
/// collection: the open reader fails within its window, naming it.
async fn retire(world: &World, handled: &PublishedMap<u64, ClientReads>) {
    let _retiring = ProsodyClient::builder()
        .group_id(group("billing", &world.keyspace))
        .subsystem("billing")
        .subscribed_topics([world.topic.as_str()])
        .cassandra_keyspace(world.keyspace.as_str())
        .state_collections([RETIRED.spec()])
        .disable_probe()
        .build()
        .await
        .unwrap();
    let retired_at = Instant::now();
    loop {
        match handled.get("order-1", "count").await {
            Err(StateError::Unpublished { reason, .. }) if reason.contains("retired") => break,
            other => assert!(
                retired_at.elapsed() < Duration::from_secs(8),
                "still read after the retirement: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn requests_across_processes() -> Option<()> {
    let world = World::new(4).await?;
    let (mut billing, billing_lines) = world.spawn((MEMBER, "billing"));
    let (mut inventory, inventory_lines) = world.spawn((MEMBER, "inventory"));
    line(&billing_lines, "ready");
    line(&inventory_lines, "ready");
    let client = world.requester().await;
    let timeout = Duration::from_secs(30);

    // Both answer, each from its own process.
    let outcomes = ask(
        &client,
        &world,
        "order-1",
        &["billing", "inventory"],
        timeout,
    )
    .await;
    assert_eq!(outcomes.len(), 2);
    let pids = (
        answered_by(&outcomes["billing"], "billing"),
        answered_by(&outcomes["inventory"], "inventory"),
    );
    assert_ne!(pids.0, pids.1);
    assert_ne!(pids.0, u64::from(std::process::id()));

    let handled = published_state(&client, &world, timeout).await;

    // A permanent failure carries the handler's message.
    let outcomes = ask(&client, &world, "refuse", &["billing"], timeout).await;
    assert_eq!(
        outcomes["billing"],
        Outcome::Failure(ResponseError::HandlerFailed {
            message: "refused by policy".into()
        })
    );

    // A second billing member joins while a slow request waits: one
    // outcome, from whichever member settled the record.
    let slow = ask(&client, &world, "slow-1", &["billing"], timeout);
    let joining = async {
        let (second, second_lines) = world.spawn((MEMBER, "billing"));
        tokio::task::spawn_blocking(move || line(&second_lines, "ready"))
            .await
            .unwrap();
        second
    };
    let (outcomes, mut second) = tokio::join!(slow, joining);
    assert_eq!(outcomes.len(), 1);
    answered_by(&outcomes["billing"], "billing");

    // Inventory killed: a timeout within the request's, billing answers.
    inventory.kill();
    let short = Duration::from_secs(5);
    let started = Instant::now();
    let outcomes = ask(&client, &world, "order-2", &["billing", "inventory"], short).await;
    let took = started.elapsed();
    answered_by(&outcomes["billing"], "billing");
    assert_eq!(
        outcomes["inventory"],
        Outcome::Failure(ResponseError::Timeout)
    );
    assert!(
        took >= short && took < short + Duration::from_secs(3),
        "took {took:?}"
    );

    pending_is_never_read(&client, &world).await;
    a_restarted_requester_drops_its_earlier_lifes_answers(&world).await;
    retire(&world, &handled).await;

    // A requester killed with its entry left behind drops out of the
    // directory within its lease.
    let (mut killed, killed_lines) = world.spawn((CALLER, "1"));
    let peer: PeerId = tokio::task::spawn_blocking(move || line(&killed_lines, "peer "))
        .await
        .unwrap()
        .parse()
        .unwrap();
    let directory = world.directory().await;
    assert!(directory.lookup(peer).await.unwrap().is_some());
    killed.kill();
    let killed_at = Instant::now();
    while directory.lookup(peer).await.unwrap().is_some() {
        assert!(
            killed_at.elapsed() < LEASE + Duration::from_secs(2),
            "still registered {:?} after the kill",
            killed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A clean shutdown deletes the entry at once.
    let mine = client.peer_id().unwrap();
    assert!(directory.lookup(mine).await.unwrap().is_some());
    client.shutdown().await;
    assert_eq!(directory.lookup(mine).await.unwrap(), None);

    second.kill();
    billing.kill();
    Some(())
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(subsystem) = std::env::var(MEMBER) {
        return runtime.block_on(member(subsystem));
    }
    if std::env::var(CALLER).is_ok() {
        return runtime.block_on(caller());
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(requests_across_processes())
    }));
    let name = "requests_across_processes";
    match outcome {
        Ok(Some(())) => {
            println!("test {name} ... ok");
            println!("test result: ok. 1 passed; 0 failed");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(_) => {
            println!("test {name} ... FAILED");
            println!("test result: FAILED. 0 passed; 1 failed");
            ExitCode::FAILURE
        }
    }
}
