use super::normalise;
use crate::config::{ConfigError, Options};
use crate::env::Env;
use proptest::prelude::*;
use prosody_core::peer::{Asked, PeerEntry, PeerId, RequestId};
use prosody_request::{Answer, Endpoint, Inbox, Receipt, Reply, Sender};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The host forms an answer can go to.
fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}[a-z0-9](\\.[a-z][a-z0-9]{0,6}){0,3}",
        any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string()),
        any::<[u16; 8]>().prop_map(|s| format!("[{}]", std::net::Ipv6Addr::from(s))),
    ]
}

/// Ways of writing `host:port` the option accepts.
fn written(host: &str, port: u16, form: u8) -> String {
    match form % 4 {
        0 => format!("{host}:{port}"),
        1 => format!("http://{host}:{port}"),
        2 => format!("http://{host}:{port}/"),
        _ => format!(" HTTP://{host}:{port}/ "),
    }
}

/// Breaks a valid `host:port`: each way is one the option must refuse.
fn broken(host: &str, port: u16, how: u8) -> String {
    match how % 10 {
        0 => host.to_owned(),
        1 => format!("http://{host}"),
        2 => format!("{host}:0"),
        3 => format!("{host}:{}", u32::from(port) + 65_536),
        4 => format!("https://{host}:{port}"),
        5 => format!("grpc://{host}:{port}"),
        6 => format!("http://{host}:{port}/prosody"),
        7 => format!(":{port}"),
        8 => format!("user@{host}:{port}"),
        _ => format!("{host}:{port}?x=1"),
    }
}

proptest! {
    /// Every accepted form of `host:port` is kept as `host:port`.
    #[test]
    fn each_accepted_form_is_kept_as_host_and_port(
        host in host(), port in 1..=u16::MAX, form in any::<u8>(),
    ) {
        prop_assert_eq!(normalise(&written(&host, port, form)), Ok(format!("{host}:{port}")));
    }

    /// No port, port 0 or over 65535, another scheme, a path, a user, a
    /// query or an empty host is refused.
    #[test]
    fn each_broken_form_is_refused(host in host(), port in 1..=u16::MAX, how in any::<u8>()) {
        let value = broken(&host, port, how);
        prop_assert!(normalise(&value).is_err(), "{value:?} was accepted");
    }
}

#[test]
fn examples() {
    for (value, kept) in [
        ("peer.example:9099", "peer.example:9099"),
        ("10.0.0.7:9099", "10.0.0.7:9099"),
        ("[::1]:9099", "[::1]:9099"),
        ("http://billing-7.svc:9099", "billing-7.svc:9099"),
        ("http://billing-7.svc:9099/", "billing-7.svc:9099"),
        ("http://[2001:db8::1]:443/", "[2001:db8::1]:443"),
    ] {
        assert_eq!(normalise(value).as_deref(), Ok(kept), "{value}");
    }
    for value in [
        "",
        "peer",
        "peer:",
        "peer:http",
        "::1:9099",
        "[::1]",
        "[::g]:9099",
        "300.1.1.1:9099",
        "-peer:9099",
        "http://peer:9099//",
        "ftp://peer:21",
    ] {
        assert!(normalise(value).is_err(), "{value:?} was accepted");
    }
}

fn build(value: &str) -> Result<crate::config::Settings, ConfigError> {
    let options = Options {
        group_id: Some("g".to_owned()),
        mock: Some(true),
        peer_advertised_connect: Some(value.to_owned()),
        ..Options::default()
    };
    options.resolve(&Env::from_fn(|_: &str| None))
}

/// `build()` refuses a value answers cannot reach, naming the option and
/// the value.
#[test]
fn a_refused_value_names_the_option_and_the_value() {
    let error = build("https://peer:9099").expect_err("another scheme");
    let ConfigError::Invalid { option, reason } = &error else {
        panic!("not an invalid option: {error}");
    };
    assert_eq!(*option, "peer_advertised_connect");
    assert!(reason.contains("\"https://peer:9099\""), "{reason}");
}

/// A requester on another network advertises its endpoint as the seeds
/// write it (`http://host:port/`): an answerer on another network picks
/// the advertised address from the requester's directory entry, and its
/// answer reaches the requester.
#[tokio::test]
async fn an_answer_reaches_a_requester_advertised_as_a_uri() {
    let inbox = Inbox::open(PeerId::random().expect("a peer id"));
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let endpoint = Endpoint::bind(loopback, Arc::clone(&inbox))
        .await
        .expect("bound");
    let advertised = format!("http://{}/", endpoint.local_addr());
    let settings = build(&advertised).expect("an accepted address");
    let entry = PeerEntry {
        // Its own network's address, not reachable from the answerer's.
        address: "192.0.2.1:9".to_owned(),
        network: Some("east".to_owned()),
        advertised: settings.peer.advertised.clone(),
    };
    let asked = Asked::new(
        RequestId::random().expect("a request id"),
        inbox.peer(),
        ["billing"],
    )
    .expect("asked");
    let waiter = inbox.wait(&asked);
    let reply = Reply {
        to: asked.reply_to(),
        id: asked.id(),
        subsystem: "billing".into(),
        answer: Answer::Value("7".into()),
    };
    let sent = Sender::new(NonZeroUsize::MIN)
        .send(
            entry.address_from(Some("west")),
            &reply,
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(sent.expect("sent"), Receipt::Delivered);
    let outcomes = waiter
        .collect::<u32>(tokio::time::Instant::now() + Duration::from_secs(5))
        .await;
    assert_eq!(outcomes["billing"], prosody_request::Outcome::Success(7));
    endpoint.shutdown().await;
}
