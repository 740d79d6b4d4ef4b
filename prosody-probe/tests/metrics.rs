//! `/metrics` over real HTTP on a free local port, from a health of the
//! test's own: the exposition with its content type, `503` with the reason,
//! `404` from a health that serves none; `HEAD` without the body; other
//! methods refused.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_probe::{Exposition, Health, METRICS_CONTENT_TYPE, ProbeServer};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TEXT: &str = "# TYPE up gauge\nup{job=\"a\\\"b\"} 1\n";

/// Answers `/metrics` with what it holds.
struct Fake(Option<Exposition>);

impl Health for Fake {
    async fn assigned_partitions(&self) -> usize {
        1
    }

    async fn liveness_problems(&self) -> Vec<String> {
        Vec::new()
    }

    async fn metrics(&self) -> Option<Exposition> {
        self.0.clone()
    }
}

/// Serves no metrics: the trait's default.
struct Silent;

impl Health for Silent {
    async fn assigned_partitions(&self) -> usize {
        1
    }

    async fn liveness_problems(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A response: status, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn request(address: SocketAddr, method: &str, path: &str) -> Answer {
    let local = SocketAddr::from(([127, 0, 0, 1], address.port()));
    let mut stream = TcpStream::connect(local).await.expect("the port answers");
    let request = format!("{method} {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
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
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn metrics_are_served_as_prometheus_text() {
    let server = ProbeServer::start(0, Fake(Some(Exposition::Text(TEXT.to_owned())))).unwrap();
    let address = server.local_addr();

    let answer = request(address, "GET", "/metrics").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some(METRICS_CONTENT_TYPE));
    assert_eq!(answer.body, TEXT);

    let head = request(address, "HEAD", "/metrics").await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some(METRICS_CONTENT_TYPE));
    assert_eq!(
        head.header("content-length"),
        Some(TEXT.len().to_string().as_str())
    );
    assert_eq!(head.body, "", "HEAD has no body");

    let post = request(address, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));

    // The other probes are as they were.
    assert_eq!(request(address, "GET", "/readyz").await.status, 200);
    assert_eq!(request(address, "HEAD", "/livez").await.status, 200);
    assert_eq!(request(address, "GET", "/metricz").await.status, 404);
    server.stop().await;
}

#[tokio::test]
async fn unreadable_metrics_are_503_with_the_reason() {
    let why = "the reader is not registered".to_owned();
    let server = ProbeServer::start(0, Fake(Some(Exposition::Unavailable(why)))).unwrap();
    let answer = request(server.local_addr(), "GET", "/metrics").await;
    assert_eq!(answer.status, 503);
    assert_eq!(
        answer.body,
        "metrics unavailable: the reader is not registered\n"
    );
    assert_ne!(answer.header("content-type"), Some(METRICS_CONTENT_TYPE));
    server.stop().await;
}

#[tokio::test]
async fn a_health_without_metrics_answers_404() {
    let server = ProbeServer::start(0, Silent).unwrap();
    let address = server.local_addr();
    assert_eq!(request(address, "GET", "/metrics").await.status, 404);
    assert_eq!(request(address, "GET", "/readyz").await.status, 200);
    server.stop().await;
}
