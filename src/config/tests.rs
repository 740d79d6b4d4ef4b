use super::Mode;
use super::{ConfigError, Options};
use super::{SaslMechanism, SecurityProtocol};
use crate::env::Env;
use std::collections::HashMap;
use std::time::Duration;

fn resolve(options: Options, vars: &[(&str, &str)]) -> Result<super::Settings, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    options.resolve(&Env::from_fn(|name: &str| vars.get(name).cloned()))
}

fn base() -> Options {
    Options {
        group_id: Some("g".to_owned()),
        mock: Some(true),
        ..Options::default()
    }
}

fn option_of(error: &ConfigError) -> &str {
    match error {
        ConfigError::Missing { option, .. } | ConfigError::Invalid { option, .. } => option,
        ConfigError::Environment { variable, .. } => variable,
        ConfigError::Unreachable { .. } => "bootstrap_servers",
        ConfigError::NoDurableStore | ConfigError::Cassandra { .. } => "cassandra_nodes",
        ConfigError::StateStore { .. } => "state_collections",
        ConfigError::Unknown { option, .. } | ConfigError::Given { option, .. } => option,
    }
}

#[test]
fn defaults_follow_the_configuration_tables() -> Result<(), ConfigError> {
    let s = resolve(base(), &[])?;
    assert_eq!(s.qos.scheduler.max_concurrency.get(), 32);
    assert_eq!(s.runtime.max_uncommitted.get(), 64);
    assert_eq!(s.runtime.commit_interval, Duration::from_secs(1));
    assert_eq!(s.runtime.poll_interval, Duration::from_millis(100));
    assert_eq!(s.runtime.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(s.send_timeout, Duration::from_secs(1));
    assert_eq!(&*s.source_system, "g");
    assert!(s.subscribed_topics.is_none());
    assert!(s.qos.defer.enabled);
    assert_eq!(s.qos.defer.base, Duration::from_secs(1));
    assert_eq!(s.qos.defer.max_delay, Duration::from_secs(24 * 3600));
    assert!((s.qos.defer.failure_threshold - 0.9).abs() < f64::EPSILON);
    assert_eq!(s.qos.defer.failure_window, Duration::from_secs(300));
    assert_eq!(s.qos.loader.cache_size.get(), 1024);
    assert_eq!(s.qos.loader.seek_timeout, Duration::from_secs(30));
    Ok(())
}

type Case = (
    Options,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// The option a SASL or SSL case is refused for: its own where TLS is
/// built in, else the protocol, which then needs the `tls` feature.
fn tls(option: &'static str) -> &'static str {
    if cfg!(feature = "tls") {
        option
    } else {
        "security_protocol"
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "one table of cases")]
fn each_bad_value_names_its_option() {
    let mut cases: Vec<Case> = vec![
        (
            Options {
                group_id: None,
                ..base()
            },
            &[],
            "group_id",
        ),
        (
            Options {
                group_id: Some(" ".into()),
                ..base()
            },
            &[],
            "group_id",
        ),
        (
            Options {
                subscribed_topics: Some(vec![]),
                ..base()
            },
            &[],
            "subscribed_topics",
        ),
        (
            Options {
                subscribed_topics: Some(vec![String::new()]),
                ..base()
            },
            &[],
            "subscribed_topics",
        ),
        (
            Options {
                max_concurrency: Some(0),
                ..base()
            },
            &[],
            "max_concurrency",
        ),
        (
            Options {
                max_uncommitted: Some(0),
                ..base()
            },
            &[],
            "max_uncommitted",
        ),
        (
            Options {
                commit_interval: Some(Duration::ZERO),
                ..base()
            },
            &[],
            "commit_interval",
        ),
        (
            Options {
                shutdown_timeout: Some(Duration::ZERO),
                ..base()
            },
            &[],
            "shutdown_timeout",
        ),
        (
            Options {
                allowed_events: Some(vec![String::new()]),
                ..base()
            },
            &[],
            "allowed_events",
        ),
        (
            Options {
                retry_base: Some(Duration::from_secs(2)),
                max_retry_delay: Some(Duration::from_secs(1)),
                ..base()
            },
            &[],
            "max_retry_delay",
        ),
        (
            Options {
                mock: None,
                ..base()
            },
            &[],
            "bootstrap_servers",
        ),
        (
            base(),
            &[("PROSODY_MAX_UNCOMMITTED", "lots")],
            "PROSODY_MAX_UNCOMMITTED",
        ),
        (
            base(),
            &[("PROSODY_COMMIT_INTERVAL", "soon")],
            "PROSODY_COMMIT_INTERVAL",
        ),
        (
            base(),
            &[("PROSODY_IDEMPOTENCE_CACHE_SIZE", "0")],
            "idempotence_cache_size",
        ),
        (
            base(),
            &[("PROSODY_MONOPOLIZATION_THRESHOLD", "1.5")],
            "monopolization_threshold",
        ),
        (
            base(),
            &[("PROSODY_MONOPOLIZATION_WINDOW", "0s")],
            "monopolization_window",
        ),
        (
            base(),
            &[("PROSODY_SCHEDULER_FAILURE_WEIGHT", "-0.1")],
            "scheduler_failure_weight",
        ),
        (
            base(),
            &[("PROSODY_SCHEDULER_WAIT_WEIGHT", "-1")],
            "scheduler_wait_weight",
        ),
        (
            base(),
            &[("PROSODY_SCHEDULER_MAX_WAIT", "0s")],
            "scheduler_max_wait",
        ),
        (
            base(),
            &[("PROSODY_IDEMPOTENCE_TTL", "500ms")],
            "idempotence_ttl",
        ),
        (base(), &[("PROSODY_TIMEOUT", "5m")], "timeout"),
        // Below the threshold, but not with its grace of 5 s.
        (
            base(),
            &[
                ("PROSODY_TIMEOUT", "50s"),
                ("PROSODY_STALL_THRESHOLD", "55s"),
            ],
            "timeout",
        ),
        (base(), &[("PROSODY_DEFER_BASE", "0s")], "defer_base"),
        (
            base(),
            &[("PROSODY_DEFER_MAX_DELAY", "500ms")],
            "defer_max_delay",
        ),
        (
            base(),
            &[("PROSODY_DEFER_FAILURE_THRESHOLD", "1.1")],
            "defer_failure_threshold",
        ),
        (
            base(),
            &[("PROSODY_DEFER_FAILURE_WINDOW", "0s")],
            "defer_failure_window",
        ),
        (
            base(),
            &[("PROSODY_DEFER_ENABLED", "maybe")],
            "PROSODY_DEFER_ENABLED",
        ),
        (
            base(),
            &[("PROSODY_LOADER_CACHE_SIZE", "0")],
            "loader_cache_size",
        ),
        (
            base(),
            &[("PROSODY_LOADER_SEEK_TIMEOUT", "0s")],
            "loader_seek_timeout",
        ),
        (
            base(),
            &[("PROSODY_TIMEOUT", "2m"), ("PROSODY_STALL_THRESHOLD", "1m")],
            "timeout",
        ),
        (
            base(),
            &[("PROSODY_MAX_RETRIES", "many")],
            "PROSODY_MAX_RETRIES",
        ),
        (
            base(),
            &[("PROSODY_TELEMETRY_TOPIC", " ")],
            "telemetry_topic",
        ),
        (
            Options {
                mode: Some(Mode::LowLatency),
                ..base()
            },
            &[],
            "failure_topic",
        ),
        (
            base(),
            &[("PROSODY_STATISTICS_INTERVAL", "2days")],
            "statistics_interval",
        ),
        (
            base(),
            &[("PROSODY_PROBE_PORT", "eighty")],
            "PROSODY_PROBE_PORT",
        ),
        (
            base(),
            &[("PROSODY_MESSAGE_SPANS", "sibling")],
            "PROSODY_MESSAGE_SPANS",
        ),
        (
            base(),
            &[("PROSODY_TIMER_SPANS", "parent")],
            "PROSODY_TIMER_SPANS",
        ),
        (
            base(),
            &[("PROSODY_CASSANDRA_RETENTION", "0s")],
            "cassandra_retention",
        ),
        (
            base(),
            &[("PROSODY_CASSANDRA_KEYSPACE", " ")],
            "cassandra_keyspace",
        ),
        (
            base(),
            &[("PROSODY_DEFER_STORE_CACHE_SIZE", "0")],
            "defer_store_cache_size",
        ),
        (
            base(),
            &[("PROSODY_GROUP_PROTOCOL", "eager")],
            "PROSODY_GROUP_PROTOCOL",
        ),
        (
            base(),
            &[("PROSODY_CONNECT_TIMEOUT", "0s")],
            "connect_timeout",
        ),
        (
            base(),
            &[("PROSODY_SECURITY_PROTOCOL", "tls")],
            "PROSODY_SECURITY_PROTOCOL",
        ),
        (
            base(),
            &[("PROSODY_SECURITY_PROTOCOL", "sasl_ssl")],
            tls("sasl_mechanism"),
        ),
        (
            Options {
                security_protocol: Some(SecurityProtocol::SaslSsl),
                sasl_mechanism: Some(SaslMechanism::ScramSha512),
                ..base()
            },
            &[],
            tls("sasl_username"),
        ),
        (
            Options {
                security_protocol: Some(SecurityProtocol::SaslSsl),
                sasl_mechanism: Some(SaslMechanism::ScramSha512),
                sasl_username: Some("app".to_owned()),
                ..base()
            },
            &[],
            tls("sasl_password"),
        ),
        (
            base(),
            &[("PROSODY_SASL_MECHANISM", "GSSAPI")],
            "PROSODY_SASL_MECHANISM",
        ),
        (base(), &[("PROSODY_SASL_USERNAME", "app")], "sasl_username"),
        (
            base(),
            &[("PROSODY_SSL_CA_LOCATION", "/etc/ssl/certs")],
            "ssl_ca_location",
        ),
        (
            base(),
            &[("PROSODY_LOADER_DISCARD_THRESHOLD", "-1")],
            "PROSODY_LOADER_DISCARD_THRESHOLD",
        ),
    ];
    // A CA file that cannot be read, where TLS is built in.
    cases.extend(cfg!(feature = "tls").then(|| {
        (
            Options {
                security_protocol: Some(SecurityProtocol::Ssl),
                ..base()
            },
            &[("PROSODY_SSL_CA_LOCATION", "/no/such/ca.pem")][..],
            "ssl_ca_location",
        )
    }));
    for (options, vars, expected) in cases {
        let error = resolve(options, vars).err();
        assert!(error.is_some(), "{expected}: accepted");
        if let Some(error) = error {
            assert_eq!(option_of(&error), expected, "{error}");
            let message = error.to_string();
            assert!(message.contains(expected), "{error}");
            // The message shows the bad value too.
            for (_, value) in vars {
                assert!(message.contains(value), "{message} does not show {value:?}");
            }
        }
    }
}

#[test]
fn a_password_never_shows() {
    let mut options = base();
    options.cassandra_password = Some(super::Secret::new("hunter2"));
    assert!(!format!("{options:?}").contains("hunter2"));
    let error = resolve(options, &[]).err().map(|e| e.to_string());
    let error = error.unwrap_or_default();
    assert!(
        error.contains("cassandra_password") && !error.contains("hunter2"),
        "{error}"
    );
    let settings = resolve(
        base(),
        &[
            ("PROSODY_CASSANDRA_USER", "app"),
            ("PROSODY_CASSANDRA_PASSWORD", "hunter2"),
        ],
    );
    let shown = format!("{settings:?}");
    assert!(
        shown.contains("***") && !shown.contains("hunter2"),
        "{shown}"
    );
}

#[test]
fn a_user_needs_a_password() {
    let error = resolve(base(), &[("PROSODY_CASSANDRA_USER", "app")])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("cassandra_password") && error.contains("required"),
        "{error}"
    );
}

/// A loader that discards nothing before seeking again is refused,
/// from the builder and from the environment, naming the option.
#[test]
fn a_zero_discard_threshold_is_refused() {
    let mut options = base();
    options.loader_discard_threshold = Some(0);
    let error = resolve(options, &[]).expect_err("0 from the builder");
    assert_eq!(option_of(&error), "loader_discard_threshold", "{error}");
    let error = resolve(base(), &[("PROSODY_LOADER_DISCARD_THRESHOLD", "0")]).expect_err("0");
    assert_eq!(option_of(&error), "loader_discard_threshold", "{error}");
    assert!(error.to_string().contains("at least 1"), "{error}");
    let fine = resolve(base(), &[("PROSODY_LOADER_DISCARD_THRESHOLD", "1")]);
    assert_eq!(fine.map(|s| s.qos.loader.discard_threshold).ok(), Some(1));
}

/// With Cassandra, the peer lease cannot outlive the rows that hold it:
/// a registration ttl longer than `cassandra_retention` is refused, naming
/// both.
#[test]
fn a_lease_longer_than_the_retention_is_refused() {
    let vars = [
        ("PROSODY_CASSANDRA_NODES", "127.0.0.1:9042"),
        ("PROSODY_CASSANDRA_RETENTION", "1day"),
        ("PROSODY_PEER_REGISTRATION_TTL", "2days"),
    ];
    let error = resolve(base(), &vars).expect_err("a lease past the retention");
    assert_eq!(option_of(&error), "peer_registration_ttl", "{error}");
    assert!(error.to_string().contains("cassandra_retention"), "{error}");
    assert!(resolve(base(), &vars[..2]).is_ok());
    // Without Cassandra there is no such row.
    assert!(resolve(base(), &vars[2..]).is_ok());
}
