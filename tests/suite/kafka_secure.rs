//! The client on a Kafka listener secured as in production (`SASL_SSL`, from
//! `scripts/services`): the right credentials and certificate authority
//! produce and consume with each SASL mechanism; a wrong password, an
//! unknown authority and a plaintext client on the TLS port each fail
//! `build()` with an error naming the cause, within the connect timeout.
//! Without `PROSODY_TEST_SASL_BOOTSTRAP` the suite prints one line and does
//! not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::{
    AdminClient, ClientBuilder, ConfigError, Context, EventHandler, Excise, HandlerError,
    KafkaConfig, MemoryStores, Message, ProsodyClient, SaslMechanism, SecurityProtocol, Timer,
    TopicOptions,
};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

const SUITE: &str = "tests/suite/kafka_secure.rs (Kafka over SASL_SSL)";

/// The secured listener and its test user.
struct Secured {
    servers: String,
    user: String,
    password: String,
    ca: String,
    /// A CA that signed nothing the broker has.
    other_ca: String,
}

impl Secured {
    fn find() -> Option<Self> {
        let servers = services::server("PROSODY_TEST_SASL_BOOTSTRAP", SUITE)?;
        let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
        Some(Self {
            servers,
            user: var("PROSODY_TEST_SASL_USER"),
            password: var("PROSODY_TEST_SASL_PASSWORD"),
            ca: var("PROSODY_TEST_CA_FILE"),
            other_ca: var("PROSODY_TEST_OTHER_CA_FILE"),
        })
    }

    /// A client of the secured listener, with `mechanism` and `password`.
    fn builder(&self, mechanism: SaslMechanism, password: &str) -> ClientBuilder {
        ProsodyClient::builder()
            .bootstrap_servers([self.servers.as_str()])
            .security_protocol(SecurityProtocol::SaslSsl)
            .sasl_mechanism(mechanism)
            .sasl_username(self.user.as_str())
            .sasl_password(password)
            .ssl_ca_location(self.ca.as_str())
            .group_id(services::unique("secure_group"))
            .source_system("producer")
            .connect_timeout(Duration::from_secs(10))
            // A first send over SASL_SSL to a new topic can take longer
            // than the default second on a loaded machine; this suite
            // proves the credentials, not the latency.
            .send_timeout(Duration::from_secs(30))
            .disable_probe()
            // Stores in memory, whatever PROSODY_CASSANDRA_NODES says.
            .stores(MemoryStores::new())
    }
}

/// Passes each message's payload on.
struct Forward(mpsc::UnboundedSender<Value>);

impl EventHandler for Forward {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        let _ = self.0.send(message.payload);
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// `build()`, bounded: it must fail or succeed, never hang.
async fn build(builder: ClientBuilder) -> Result<ProsodyClient, ConfigError> {
    tokio::time::timeout(Duration::from_secs(90), builder.build())
        .await
        .expect("build() returned within its connect timeout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_credentials_produce_and_consume_with_every_mechanism() {
    let Some(secured) = Secured::find() else {
        return;
    };
    let topic = services::unique("secure");
    let config = KafkaConfig::new([secured.servers.as_str()])
        .unwrap()
        .with("security.protocol", "sasl_ssl")
        .with("sasl.mechanism", "SCRAM-SHA-512")
        .with("sasl.username", secured.user.as_str())
        .with("sasl.password", secured.password.as_str())
        .with("ssl.ca.location", secured.ca.as_str());
    let options = TopicOptions {
        partitions: Some(1),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    AdminClient::with_config(&config)
        .unwrap()
        .create_topic(&topic, &options)
        .await
        .unwrap();
    for mechanism in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
    ] {
        let client = build(
            secured
                .builder(mechanism, &secured.password)
                .subscribed_topics([topic.as_str()]),
        )
        .await
        .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        let (sent, mut received) = mpsc::unbounded_channel();
        client.subscribe(Forward(sent)).await.unwrap();
        let payload = json!({"mechanism": mechanism.to_string()});
        client.send(&topic, "key", &payload).await.unwrap();
        let wait = async {
            loop {
                if received.recv().await.expect("handler alive") == payload {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("{mechanism}: the record never arrived"));
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_build_naming_authentication() {
    let Some(secured) = Secured::find() else {
        return;
    };
    let wrong = "not-the-password";
    let started = std::time::Instant::now();
    let error = build(
        secured
            .builder(SaslMechanism::ScramSha512, wrong)
            .connect_timeout(Duration::from_secs(60)),
    )
    .await
    .expect_err("a wrong password is refused");
    // At once, not at the connect timeout: a refusal is not retried.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let shown = format!("{error} {error:?}");
    assert!(matches!(error, ConfigError::Unreachable { .. }), "{shown}");
    assert!(
        shown.contains("refused") && shown.contains("uthentication"),
        "{shown}"
    );
    assert!(!shown.contains(wrong), "the password shows: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_certificate_authority_fails_build_naming_the_certificate() {
    let Some(secured) = Secured::find() else {
        return;
    };
    let error = build(
        secured
            .builder(SaslMechanism::ScramSha512, &secured.password)
            .ssl_ca_location(secured.other_ca.as_str()),
    )
    .await
    .expect_err("an unknown authority is refused");
    let shown = error.to_string();
    assert!(matches!(error, ConfigError::Unreachable { .. }), "{shown}");
    assert!(shown.contains("certificate"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_client_on_the_tls_port_fails_build_in_bounded_time() {
    let Some(secured) = Secured::find() else {
        return;
    };
    let error = build(
        ProsodyClient::builder()
            .bootstrap_servers([secured.servers.as_str()])
            .group_id("plaintext")
            .connect_timeout(Duration::from_secs(5))
            .disable_probe()
            .stores(MemoryStores::new()),
    )
    .await
    .expect_err("a plaintext client is refused");
    let shown = error.to_string();
    assert!(matches!(error, ConfigError::Unreachable { .. }), "{shown}");
    assert!(shown.contains(&secured.servers), "{shown}");
    assert!(shown.contains("security protocol"), "{shown}");
}
