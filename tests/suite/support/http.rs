//! A plain HTTP/1.1 `GET` to a local server (the probe server), for the
//! suites that read its answers.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code fails loudly"
)]

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The status code, content type and body of `GET path` on the server
/// listening at `address`'s port on loopback.
pub async fn fetch(address: SocketAddr, path: &str) -> (u16, Option<String>, String) {
    let local = SocketAddr::from(([127, 0, 0, 1], address.port()));
    let mut stream = TcpStream::connect(local).await.expect("the server answers");
    let request = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let content_type = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.trim().to_owned());
    (status, content_type, body.to_owned())
}
