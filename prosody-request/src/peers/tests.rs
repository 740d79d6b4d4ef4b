use super::*;
use crate::endpoint::Endpoint;
use crate::wire::Answer;
use prosody_contracts::peer::{Asked, RequestId};
use prosody_memory::MemoryPeerDirectory;
use std::net::SocketAddr;

const TIMEOUT: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(30);

fn route(directory: &MemoryPeerDirectory) -> Peers<MemoryPeerDirectory> {
    Peers::new(Some(directory.clone()), None, NonZeroUsize::MIN, TIMEOUT)
}

fn reply(asked: &Asked, value: &'static str) -> Reply {
    Reply {
        to: asked.reply_to(),
        id: asked.id(),
        subsystem: "billing".into(),
        answer: Answer::Value(value.into()),
    }
}

/// An endpoint on loopback for `inbox`, registered under its peer.
async fn listening(directory: &MemoryPeerDirectory, inbox: &Arc<Inbox>) -> Endpoint {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint = Endpoint::bind(loopback, Arc::clone(inbox)).await.unwrap();
    let entry = PeerEntry {
        address: endpoint.local_addr().to_string(),
        network: None,
        advertised: None,
    };
    directory
        .register(inbox.peer(), &entry, LEASE)
        .await
        .unwrap();
    endpoint
}

/// A reply reaches a requester in another process (an inbox this process
/// does not list) through its directory entry and endpoint; one whose
/// endpoint went away fails, is forgotten, and the next reply reads the
/// directory again and reaches the requester's new endpoint.
#[tokio::test]
async fn a_reply_follows_the_directory_to_its_requester() {
    let directory = MemoryPeerDirectory::new();
    let peers = route(&directory);
    let inbox = Inbox::unlisted(PeerId::random().unwrap());
    let endpoint = listening(&directory, &inbox).await;

    let asked = Asked::new(RequestId::random().unwrap(), inbox.peer(), ["billing"]).unwrap();
    let waiter = inbox.wait(&asked);
    assert_eq!(
        peers.send(reply(&asked, "1")).await.unwrap(),
        Receipt::Delivered
    );
    let outcomes = waiter
        .collect::<u32>(tokio::time::Instant::now() + TIMEOUT)
        .await;
    assert_eq!(outcomes["billing"], crate::Outcome::Success(1));

    // The endpoint moves: the cached entry fails once, then the directory
    // is read again.
    endpoint.shutdown().await;
    let asked = Asked::new(RequestId::random().unwrap(), inbox.peer(), ["billing"]).unwrap();
    let waiter = inbox.wait(&asked);
    let error = peers.send(reply(&asked, "2")).await.unwrap_err();
    assert!(matches!(error, RouteError::Send(_)), "{error}");
    let _moved = listening(&directory, &inbox).await;
    assert_eq!(
        peers.send(reply(&asked, "2")).await.unwrap(),
        Receipt::Delivered
    );
    let outcomes = waiter
        .collect::<u32>(tokio::time::Instant::now() + TIMEOUT)
        .await;
    assert_eq!(outcomes["billing"], crate::Outcome::Success(2));
}

/// A requester of this process is answered without the directory; one
/// nobody registered is unknown.
#[tokio::test]
async fn a_local_requester_needs_no_directory_and_an_unknown_one_fails() {
    let peers: Peers<MemoryPeerDirectory> = Peers::new(None, None, NonZeroUsize::MIN, TIMEOUT);
    let inbox = Inbox::open(PeerId::random().unwrap());
    let asked = Asked::new(RequestId::random().unwrap(), inbox.peer(), ["billing"]).unwrap();
    let _waiter = inbox.wait(&asked);
    assert_eq!(
        peers.send(reply(&asked, "1")).await.unwrap(),
        Receipt::Delivered
    );

    let stranger = Asked::new(
        RequestId::random().unwrap(),
        PeerId::random().unwrap(),
        ["billing"],
    )
    .unwrap();
    assert!(matches!(
        peers.send(reply(&stranger, "1")).await,
        Err(RouteError::Unknown(_))
    ));
    let directory = MemoryPeerDirectory::new();
    assert!(matches!(
        route(&directory).send(reply(&stranger, "1")).await,
        Err(RouteError::Unknown(_))
    ));
}
