//! The peer endpoint and the sender, over loopback.

use super::*;
use crate::outcome::Outcome;
use crate::send::{SendError, Sender};
use crate::wire::Answer;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::client::conn::http2::SendRequest;
use proptest::prelude::*;
use prosody_contracts::peer::{Asked, PeerId, RequestId};
use std::cell::RefCell;
use std::future::Future;
use std::num::NonZeroUsize;
use tokio::io::AsyncReadExt;

type Raw = SendRequest<BoxBody<Bytes, Infallible>>;

const LOOPBACK: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
const SEND: Duration = Duration::from_secs(5);

/// `future`'s output, or a failed test if it takes longer than 10 s.
async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("a result within 10 s")
}

fn reply(to: PeerId, id: RequestId, subsystem: &str, json: &'static str) -> Reply {
    Reply {
        to,
        id,
        subsystem: subsystem.into(),
        answer: Answer::Value(Bytes::from_static(json.as_bytes())),
    }
}

fn sender() -> Sender {
    Sender::new(NonZeroUsize::new(4).unwrap())
}

async fn endpoint(limits: Limits) -> (Arc<Inbox>, Endpoint) {
    let inbox = Inbox::open(PeerId::random().unwrap());
    let endpoint = Endpoint::bind_with(LOOPBACK, Arc::clone(&inbox), limits)
        .await
        .unwrap();
    (inbox, endpoint)
}

/// A bare HTTP/2 connection to `address`, to send what a `Sender` never
/// would.
async fn raw(address: SocketAddr) -> hyper::Result<Raw> {
    let stream = TcpStream::connect(address).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

fn full(bytes: impl Into<Bytes>) -> BoxBody<Bytes, Infallible> {
    Full::new(bytes.into()).boxed()
}

async fn post(
    raw: &mut Raw,
    method: Method,
    path: &str,
    body: BoxBody<Bytes, Infallible>,
) -> hyper::Result<StatusCode> {
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = format!("http://peer{path}").parse().unwrap();
    Ok(raw.send_request(request).await?.status())
}

/// A body of `left` bytes in 64 KiB chunks, of no stated length.
struct Chunks {
    left: usize,
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let n = self.left.min(64 * 1024);
        self.left -= n;
        Poll::Ready((n > 0).then(|| Ok(Frame::data(Bytes::from(vec![b'x'; n])))))
    }
}

/// A body that never comes.
struct Stalled;

impl Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Pending
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_sent_reaches_the_waiting_request() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let asked = Asked::new(RequestId::random().unwrap(), inbox.peer(), ["billing"]).unwrap();
    let waiter = inbox.wait(&asked);
    let sent = reply(inbox.peer(), asked.id(), "billing", r#"{"charged":true}"#);
    let address = endpoint.local_addr().to_string();
    let delivery = within(sender().send(&address, &sent, SEND)).await;
    assert_eq!(delivery, Ok(Receipt::Delivered));
    let outcomes = waiter
        .collect::<serde_json::Value>(Instant::now() + SEND)
        .await;
    assert_eq!(
        outcomes["billing"],
        Outcome::Success(serde_json::json!({"charged": true}))
    );
    assert_eq!((inbox.dropped(), endpoint.refused()), (0, 0));
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_nobody_waits_for_is_dropped() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let stray = reply(inbox.peer(), RequestId::random().unwrap(), "billing", "1");
    let address = endpoint.local_addr().to_string();
    let delivery = within(sender().send(&address, &stray, SEND)).await;
    assert_eq!(delivery, Ok(Receipt::Dropped));
    assert_eq!((inbox.dropped(), endpoint.refused()), (1, 0));
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_and_misdirected_requests_are_refused() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let mut raw = within(raw(endpoint.local_addr())).await.unwrap();
    let too_long = MAX_REPLY_BYTES + 1;
    let cases = [
        (Method::POST, REPLY_PATH, full("not a reply"), 400),
        (Method::POST, REPLY_PATH, full(vec![b'x'; too_long]), 413),
        (
            Method::POST,
            REPLY_PATH,
            Chunks { left: too_long }.boxed(),
            413,
        ),
        (Method::GET, REPLY_PATH, full(""), 405),
        (Method::POST, "/prosody/v1/other", full(""), 404),
    ];
    for (method, path, body, status) in cases {
        let answered = within(post(&mut raw, method.clone(), path, body)).await;
        assert_eq!(answered.unwrap().as_u16(), status, "{method} {path}");
    }
    assert_eq!(endpoint.refused(), 5);
    let refusals = endpoint.refusals();
    let by_reason = Refusal::ALL.map(|reason| refusals.count(reason));
    // connections, body_too_large, malformed, slow
    assert_eq!(by_reason, [0, 2, 3, 0]);
    // The connection still serves.
    let stray = reply(inbox.peer(), RequestId::random().unwrap(), "billing", "1");
    let answered = within(post(
        &mut raw,
        Method::POST,
        REPLY_PATH,
        full(stray.encode()),
    ))
    .await;
    assert_eq!(answered.unwrap(), StatusCode::NOT_FOUND);
    assert_eq!((inbox.dropped(), endpoint.connections()), (1, 1));
    endpoint.shutdown().await;
}

#[test]
fn arbitrary_bodies_are_answered_and_the_connection_keeps_serving() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (inbox, endpoint) = runtime.block_on(endpoint(Limits::default()));
    let raw = RefCell::new(
        runtime
            .block_on(within(raw(endpoint.local_addr())))
            .unwrap(),
    );
    let valid = reply(inbox.peer(), RequestId::from_bytes([7; 16]), "billing", "1").encode();
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        // A valid reply's start, and anything after it.
        (
            0..valid.len(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(move |(cut, tail)| [&valid[..cut], &tail].concat()),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(16));
    runner
        .run(&body, |body| {
            let mut raw = raw.borrow_mut();
            let sent = post(&mut raw, Method::POST, REPLY_PATH, full(body));
            let status = runtime.block_on(within(sent)).unwrap();
            // Not a reply, or a reply nobody waits for.
            prop_assert!(
                [StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND].contains(&status),
                "{status}"
            );
            Ok(())
        })
        .unwrap();
    // A reply that is waited for is delivered over the same connection.
    let asked = Asked::new(RequestId::random().unwrap(), inbox.peer(), ["billing"]).unwrap();
    let waiter = inbox.wait(&asked);
    let answer = reply(inbox.peer(), asked.id(), "billing", "42").encode();
    let mut raw = raw.into_inner();
    let sent = post(&mut raw, Method::POST, REPLY_PATH, full(answer));
    assert_eq!(
        runtime.block_on(within(sent)).unwrap(),
        StatusCode::ACCEPTED
    );
    let outcomes = runtime.block_on(waiter.collect::<u32>(Instant::now() + SEND));
    assert_eq!(outcomes["billing"], Outcome::Success(42));
    assert_eq!(endpoint.connections(), 1);
    runtime.block_on(endpoint.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replies_share_a_connection() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let address = endpoint.local_addr().to_string();
    let sender = sender();
    let mut sends = JoinSet::new();
    for _ in 0..200 {
        let (sender, address) = (sender.clone(), address.clone());
        let stray = reply(inbox.peer(), RequestId::random().unwrap(), "billing", "1");
        sends.spawn(async move { sender.send(&address, &stray, SEND).await });
    }
    let mut dropped = 0;
    while let Some(sent) = within(sends.join_next()).await {
        assert_eq!(sent.unwrap(), Ok(Receipt::Dropped));
        dropped += 1;
    }
    assert_eq!((dropped, inbox.dropped()), (200, 200));
    assert!(endpoint.connections() <= 2, "{}", endpoint.connections());
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_after_shutdown_is_unreachable() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let address = endpoint.local_addr().to_string();
    let sender = sender();
    let stray = reply(inbox.peer(), RequestId::random().unwrap(), "billing", "1");
    let sent = within(sender.send(&address, &stray, SEND)).await;
    assert_eq!(sent, Ok(Receipt::Dropped));
    within(endpoint.shutdown()).await;
    let error = within(sender.send(&address, &stray, SEND))
        .await
        .unwrap_err();
    assert!(matches!(error, SendError::Unreachable { .. }), "{error:?}");
    assert!(error.is_unreachable());
    assert!(error.to_string().contains(&address), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_is_not_an_endpoint_refuses() {
    let (inbox, endpoint) = endpoint(Limits::default()).await;
    let stray = reply(inbox.peer(), RequestId::random().unwrap(), "billing", "1");
    let sender = sender();
    // An address that is not host:port is named as such.
    let error = sender.send("no port", &stray, SEND).await.unwrap_err();
    assert!(matches!(error, SendError::Address { .. }), "{error:?}");
    // A body the endpoint cannot read is refused, not taken for a drop.
    let (status, refused) = (StatusCode::BAD_REQUEST, endpoint.refused());
    let mut raw = within(raw(endpoint.local_addr())).await.unwrap();
    let answered = within(post(&mut raw, Method::POST, REPLY_PATH, full(""))).await;
    assert_eq!(
        (answered.unwrap(), endpoint.refused()),
        (status, refused + 1)
    );
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_closed() {
    let limits = Limits {
        connections: 1,
        ..Limits::default()
    };
    let (_inbox, endpoint) = endpoint(limits).await;
    let address = endpoint.local_addr();
    let mut first = within(raw(address)).await.unwrap();
    let answered = within(post(&mut first, Method::GET, "/", full(""))).await;
    assert_eq!(answered.unwrap(), StatusCode::NOT_FOUND);
    let second = match within(raw(address)).await {
        Ok(mut second) => within(post(&mut second, Method::GET, "/", full(""))).await,
        Err(error) => Err(error),
    };
    assert!(second.is_err(), "{second:?}");
    assert_eq!(endpoint.connections(), 1);
    assert_eq!(endpoint.refusals().count(Refusal::Connections), 1);
    // Once the first is gone, its place is free again.
    drop(first);
    let third = within(async {
        loop {
            if let Ok(mut third) = raw(address).await
                && let Ok(status) = post(&mut third, Method::GET, "/", full("")).await
            {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!((third, endpoint.connections()), (StatusCode::NOT_FOUND, 2));
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_slow_and_a_silent_connection_are_cut() {
    let slow = Limits {
        body: Duration::from_millis(200),
        ..Limits::default()
    };
    let (_inbox, slow) = endpoint(slow).await;
    let mut raw = within(raw(slow.local_addr())).await.unwrap();
    let answered = within(post(&mut raw, Method::POST, REPLY_PATH, Stalled.boxed())).await;
    assert_eq!(answered.unwrap(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(slow.refused(), 1);
    assert_eq!(slow.refusals().count(Refusal::Slow), 1);
    slow.shutdown().await;
    // A connection that never says a word is closed.
    let quiet = Limits {
        idle: Duration::from_millis(300),
        ..Limits::default()
    };
    let (_inbox, quiet) = endpoint(quiet).await;
    let mut silent = TcpStream::connect(quiet.local_addr()).await.unwrap();
    let mut buffer = Vec::new();
    let read = within(silent.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "{read:?}");
    quiet.shutdown().await;
}
