//! Every option, as a row: its name, its variable, its default, how the
//! builder sets it, and where its resolved value lands. One property checks
//! precedence and round-trips over all rows; another checks that
//! `CONFIGURATION.md` documents exactly these rows with these defaults.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use super::{ProbePort, Settings};
use crate::builder::ClientBuilder;
use crate::env::{Env, FromEnv, Size};
use proptest::prelude::*;
use prosody_core::JsonCodec;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// One option.
struct Row {
    option: &'static str,
    variable: &'static str,
    /// The default, rendered; `None` for a required option or one with no
    /// value by default.
    default: Option<&'static str>,
    /// A valid value, rendered, drawn from a seed.
    value: fn(u64) -> String,
    /// Sets the option with its builder method, from a rendered value.
    set: fn(Builder, &str) -> Builder,
    /// The resolved value, rendered.
    get: fn(&Settings) -> String,
}

fn parse<T: FromEnv>(text: &str) -> T {
    T::parse(text).expect("a value the row drew")
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A duration in `low..=high` milliseconds, whole milliseconds.
fn millis(seed: u64, low: u64, high: u64) -> String {
    duration(Duration::from_millis(low + seed % (high - low + 1)))
}

fn size(seed: u64) -> String {
    (1 + seed % 100_000).to_string()
}

fn share(seed: u64) -> String {
    // Multiples of 1/1000 in (0, 1], exact in decimal.
    (f64::from(u32::try_from(1 + seed % 1000).unwrap_or(1)) / 1000.0).to_string()
}

fn flag(seed: u64) -> String {
    seed.is_multiple_of(2).to_string()
}

fn name(seed: u64) -> String {
    format!("name-{}", seed % 10_000)
}

fn names(seed: u64) -> String {
    (0..=seed % 3)
        .map(|n| format!("item-{}-{n}", seed % 1000))
        .collect::<Vec<_>>()
        .join(",")
}

macro_rules! row {
    ($option:literal, $variable:literal, $default:expr, $value:expr,
     |$b:ident, $t:ident| $set:expr, |$s:ident| $get:expr) => {
        Row {
            option: $option,
            variable: $variable,
            default: $default,
            value: $value,
            set: |$b: Builder, $t: &str| $set,
            get: |$s: &Settings| $get,
        }
    };
}

#[rustfmt::skip]
#[allow(clippy::too_many_lines, reason = "one row per option")]
fn rows() -> Vec<Row> {
    vec![
        row!("group_id", "PROSODY_GROUP_ID", None, name, |b, t| b.group_id(parse::<String>(t)), |s| s.runtime.group_id.to_string()),
        row!("subscribed_topics", "PROSODY_SUBSCRIBED_TOPICS", None, names, |b, t| b.subscribed_topics(parse::<Vec<String>>(t)), |s| s.subscribed_topics.as_ref().map(|t| t.join(",")).unwrap_or_default()),
        row!("allowed_events", "PROSODY_ALLOWED_EVENTS", None, names, |b, t| b.allowed_events(parse::<Vec<String>>(t)), |s| s.runtime.allowed_events.join(",")),
        row!("source_system", "PROSODY_SOURCE_SYSTEM", Some("g"), name, |b, t| b.source_system(parse::<String>(t)), |s| s.source_system.to_string()),
        row!("max_uncommitted", "PROSODY_MAX_UNCOMMITTED", Some("64"), size, |b, t| b.max_uncommitted(parse(t)), |s| s.runtime.max_uncommitted.to_string()),
        row!("commit_interval", "PROSODY_COMMIT_INTERVAL", Some("1s"), |n| millis(n, 1, 600_000), |b, t| b.commit_interval(parse(t)), |s| duration(s.runtime.commit_interval)),
        row!("poll_interval", "PROSODY_POLL_INTERVAL", Some("100ms"), |n| millis(n, 1, 600_000), |b, t| b.poll_interval(parse(t)), |s| duration(s.runtime.poll_interval)),
        row!("shutdown_timeout", "PROSODY_SHUTDOWN_TIMEOUT", Some("30s"), |n| millis(n, 1, 600_000), |b, t| b.shutdown_timeout(parse(t)), |s| duration(s.runtime.shutdown_timeout)),
        row!("send_timeout", "PROSODY_SEND_TIMEOUT", Some("1s"), |n| millis(n, 1, 600_000), |b, t| b.send_timeout(parse(t)), |s| duration(s.send_timeout)),
        row!("retry_base", "PROSODY_RETRY_BASE", Some("20ms"), |n| millis(n, 1, 60_000), |b, t| b.retry_base(parse(t)), |s| duration(s.runtime.retry_base)),
        row!("max_retry_delay", "PROSODY_RETRY_MAX_DELAY", Some("5m"), |n| millis(n, 60_000, 86_400_000), |b, t| b.max_retry_delay(parse(t)), |s| duration(s.runtime.max_retry_delay)),
        row!("state_recovery_delay", "PROSODY_STATE_RECOVERY_DELAY", Some("30s"), |n| duration(Duration::from_secs(1 + n % 3600)), |b, t| b.state_recovery_delay(parse(t)), |s| duration(s.runtime.state.recovery_delay())),
        row!("state_cache_dir", "PROSODY_STATE_CACHE_DIR", None, name, |b, t| b.state_cache_dir(parse::<String>(t)), |s| s.state_cache.dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default()),
        row!("state_owned_cache_size", "PROSODY_STATE_OWNED_CACHE_SIZE", None, size, |b, t| b.state_owned_cache_size(parse::<Size>(t).0), |s| s.state_cache.memory.map(|m| m.to_string()).unwrap_or_default()),
        row!("slab_size", "PROSODY_SLAB_SIZE", Some("1h"), |n| millis(n, 1000, 86_400_000), |b, t| b.slab_size(parse(t)), |s| duration(s.runtime.slab_size)),
        row!("max_concurrency", "PROSODY_MAX_CONCURRENCY", Some("32"), size, |b, t| b.max_concurrency(parse(t)), |s| s.qos.scheduler.max_concurrency.to_string()),
        row!("max_retries", "PROSODY_MAX_RETRIES", Some("3"), |n| (n % 1000).to_string(), |b, t| b.max_retries(parse(t)), |s| s.qos.max_retries.to_string()),
        row!("failure_topic", "PROSODY_FAILURE_TOPIC", None, name, |b, t| b.failure_topic(parse::<String>(t)), |s| s.qos.failure.as_ref().map(|f| f.topic.to_string()).unwrap_or_default()),
        row!("timeout", "PROSODY_TIMEOUT", Some("4m"), |n| millis(n, 1, 240_000), |b, t| b.timeout(parse(t)), |s| duration(s.qos.timeout.timeout)),
        row!("stall_threshold", "PROSODY_STALL_THRESHOLD", Some("5m"), |n| millis(n, 1, 86_400_000), |b, t| b.stall_threshold(parse(t)), |s| duration(s.qos.stall_threshold)),
        row!("idempotence_version", "PROSODY_IDEMPOTENCE_VERSION", Some("1"), name, |b, t| b.idempotence_version(parse::<String>(t)), |s| s.qos.dedup.version.clone()),
        row!("idempotence_cache_size", "PROSODY_IDEMPOTENCE_CACHE_SIZE", Some("8192"), size, |b, t| b.idempotence_cache_size(parse(t)), |s| s.qos.dedup.cache_size.to_string()),
        row!("idempotence_ttl", "PROSODY_IDEMPOTENCE_TTL", Some("7days"), |n| millis(n, 1000, 864_000_000), |b, t| b.idempotence_ttl(parse(t)), |s| duration(s.qos.dedup.ttl)),
        row!("monopolization_enabled", "PROSODY_MONOPOLIZATION_ENABLED", Some("true"), flag, |b, t| b.monopolization_enabled(parse(t)), |s| s.qos.monopolization.enabled.to_string()),
        row!("monopolization_threshold", "PROSODY_MONOPOLIZATION_THRESHOLD", Some("0.9"), share, |b, t| b.monopolization_threshold(parse(t)), |s| s.qos.monopolization.threshold.to_string()),
        row!("monopolization_window", "PROSODY_MONOPOLIZATION_WINDOW", Some("5m"), |n| millis(n, 1, 86_400_000), |b, t| b.monopolization_window(parse(t)), |s| duration(s.qos.monopolization.window)),
        row!("monopolization_cache_size", "PROSODY_MONOPOLIZATION_CACHE_SIZE", Some("8192"), size, |b, t| b.monopolization_cache_size(parse(t)), |s| s.qos.monopolization.cache_size.to_string()),
        row!("scheduler_failure_weight", "PROSODY_SCHEDULER_FAILURE_WEIGHT", Some("0.3"), share, |b, t| b.scheduler_failure_weight(parse(t)), |s| s.qos.scheduler.failure_weight.to_string()),
        row!("scheduler_max_wait", "PROSODY_SCHEDULER_MAX_WAIT", Some("2m"), |n| millis(n, 1, 86_400_000), |b, t| b.scheduler_max_wait(parse(t)), |s| duration(s.qos.scheduler.max_wait)),
        row!("scheduler_wait_weight", "PROSODY_SCHEDULER_WAIT_WEIGHT", Some("200"), |n| (n % 10_000).to_string(), |b, t| b.scheduler_wait_weight(parse(t)), |s| s.qos.scheduler.wait_weight.to_string()),
        row!("scheduler_cache_size", "PROSODY_SCHEDULER_CACHE_SIZE", Some("8192"), size, |b, t| b.scheduler_cache_size(parse(t)), |s| s.qos.scheduler.cache_size.to_string()),
        row!("telemetry_topic", "PROSODY_TELEMETRY_TOPIC", Some("prosody.telemetry-events"), name, |b, t| b.telemetry_topic(parse::<String>(t)), |s| s.qos.telemetry.as_deref().unwrap_or_default().to_owned()),
        row!("telemetry_enabled", "PROSODY_TELEMETRY_ENABLED", Some("true"), flag, |b, t| b.telemetry_enabled(parse(t)), |s| s.qos.telemetry.is_some().to_string()),
        row!("defer_enabled", "PROSODY_DEFER_ENABLED", Some("true"), flag, |b, t| b.defer_enabled(parse(t)), |s| s.qos.defer.enabled.to_string()),
        row!("defer_base", "PROSODY_DEFER_BASE", Some("1s"), |n| millis(n, 1, 3_600_000), |b, t| b.defer_base(parse(t)), |s| duration(s.qos.defer.base)),
        row!("defer_max_delay", "PROSODY_DEFER_MAX_DELAY", Some("1day"), |n| millis(n, 1000, 864_000_000), |b, t| b.defer_max_delay(parse(t)), |s| duration(s.qos.defer.max_delay)),
        row!("defer_failure_threshold", "PROSODY_DEFER_FAILURE_THRESHOLD", Some("0.9"), share, |b, t| b.defer_failure_threshold(parse(t)), |s| s.qos.defer.failure_threshold.to_string()),
        row!("defer_failure_window", "PROSODY_DEFER_FAILURE_WINDOW", Some("5m"), |n| millis(n, 1, 86_400_000), |b, t| b.defer_failure_window(parse(t)), |s| duration(s.qos.defer.failure_window)),
        row!("loader_cache_size", "PROSODY_LOADER_CACHE_SIZE", Some("1024"), size, |b, t| b.loader_cache_size(parse(t)), |s| s.qos.loader.cache_size.to_string()),
        row!("loader_seek_timeout", "PROSODY_LOADER_SEEK_TIMEOUT", Some("30s"), |n| millis(n, 1, 600_000), |b, t| b.loader_seek_timeout(parse(t)), |s| duration(s.qos.loader.seek_timeout)),
        row!("loader_discard_threshold", "PROSODY_LOADER_DISCARD_THRESHOLD", Some("100"), |n| (n % 100_000 + 1).to_string(), |b, t| b.loader_discard_threshold(parse(t)), |s| s.qos.loader.discard_threshold.to_string()),
        row!("probe_port", "PROSODY_PROBE_PORT", Some("8000"), |n| if n % 5 == 0 { "none".to_owned() } else { (n % 65_536).to_string() }, |b, t| match parse::<ProbePort>(t) { ProbePort::Port(port) => b.probe_port(port), ProbePort::Disabled => b.disable_probe() }, |s| s.observe.probe_port.to_string()),
        row!("statistics_interval", "PROSODY_STATISTICS_INTERVAL", Some("5s"), |n| millis(n, 1, 86_400_000), |b, t| b.statistics_interval(parse(t)), |s| duration(s.observe.statistics_interval)),
        row!("message_spans", "PROSODY_MESSAGE_SPANS", Some("child"), |n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(), |b, t| b.message_spans(parse(t)), |s| s.observe.message_spans.to_string()),
        row!("timer_spans", "PROSODY_TIMER_SPANS", Some("follows_from"), |n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(), |b, t| b.timer_spans(parse(t)), |s| s.observe.timer_spans.to_string()),
        row!("memory_stores", "PROSODY_MEMORY_STORES", Some("false"), flag, |b, t| b.memory_stores(parse(t)), |s| s.memory_stores.to_string()),
        row!("cassandra_nodes", "PROSODY_CASSANDRA_NODES", None, names, |b, t| b.cassandra_nodes(parse::<Vec<String>>(t)), |s| s.cassandra.nodes.join(",")),
        row!("cassandra_keyspace", "PROSODY_CASSANDRA_KEYSPACE", Some("prosody"), name, |b, t| b.cassandra_keyspace(parse::<String>(t)), |s| s.cassandra.keyspace.clone()),
        row!("cassandra_datacenter", "PROSODY_CASSANDRA_DATACENTER", None, name, |b, t| b.cassandra_datacenter(parse::<String>(t)), |s| s.cassandra.datacenter.clone().unwrap_or_default()),
        row!("cassandra_rack", "PROSODY_CASSANDRA_RACK", None, name, |b, t| b.cassandra_rack(parse::<String>(t)), |s| s.cassandra.rack.clone().unwrap_or_default()),
        row!("cassandra_retention", "PROSODY_CASSANDRA_RETENTION", Some("1year"), |n| millis(n, 1000, 864_000_000_000), |b, t| b.cassandra_retention(parse(t)), |s| duration(s.cassandra.retention)),
        row!("defer_store_cache_size", "PROSODY_DEFER_STORE_CACHE_SIZE", Some("8192"), size, |b, t| b.defer_store_cache_size(parse(t)), |s| s.cassandra.defer_store_cache_size.to_string()),
        row!("group_protocol", "PROSODY_GROUP_PROTOCOL", Some("classic"), |n| if n % 2 == 0 { "classic" } else { "consumer" }.to_owned(), |b, t| b.group_protocol(parse(t)), |s| s.kafka.group_protocol.to_string()),
        row!("connect_timeout", "PROSODY_CONNECT_TIMEOUT", Some("10s"), |n| millis(n, 1, 600_000), |b, t| b.connect_timeout(parse(t)), |s| duration(s.kafka.connect_timeout)),
        row!("security_protocol", "PROSODY_SECURITY_PROTOCOL", Some("plaintext"), |n| if n % 2 == 0 { "plaintext" } else { "ssl" }.to_owned(), |b, t| b.security_protocol(parse(t)), |s| s.kafka.security_protocol.to_string()),
    ]
}

type Builder = ClientBuilder<JsonCodec>;

/// A builder in mock mode with a group, and nothing else set.
fn base() -> Builder {
    ClientBuilder::new(JsonCodec::new())
        .mock(true)
        .group_id("g")
}

fn resolve(builder: Builder, vars: &HashMap<String, String>) -> Settings {
    builder
        .into_options()
        .resolve(&Env::from_fn(|name: &str| vars.get(name).cloned()))
        .unwrap_or_else(|e| panic!("{e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For every option: the builder beats the environment, the
    /// environment beats the default, and a rendered value read from the
    /// environment renders the same again.
    #[test]
    fn builder_beats_environment_beats_default(a in any::<u64>(), b in any::<u64>()) {
        for row in rows() {
            let (mine, theirs) = ((row.value)(a), (row.value)(b));
            let env = |value: &str| HashMap::from([(row.variable.to_owned(), value.to_owned())]);
            let both = resolve((row.set)(base(), &mine), &env(&theirs));
            prop_assert_eq!((row.get)(&both), mine.clone(), "{} from the builder", row.option);
            // The group is required: for its own row, leave it to the environment.
            let unset = if row.option == "group_id" {
                ClientBuilder::new(JsonCodec::new()).mock(true)
            } else {
                base()
            };
            let from_env = resolve(unset, &env(&theirs));
            prop_assert_eq!((row.get)(&from_env), theirs, "{} from the environment", row.option);
            if let Some(default) = row.default {
                let neither = resolve(base(), &HashMap::new());
                let rendered = (row.get)(&neither);
                prop_assert_eq!(rendered, default, "{} by default", row.option);
            }
        }
    }
}

/// The rows of `CONFIGURATION.md`'s option tables: option, variable,
/// default, as written.
fn documented() -> BTreeMap<String, (String, String)> {
    let text = include_str!("../../CONFIGURATION.md");
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // | `option` | `VARIABLE` | meaning | default |
            let [_, option, variable, _, default, _] = cells[..] else {
                return None;
            };
            let option = option.strip_prefix('`')?.strip_suffix('`')?;
            let variable = variable.trim_matches('`');
            Some((option.to_owned(), (variable.to_owned(), default.to_owned())))
        })
        .collect()
}

#[test]
fn the_document_lists_every_option_with_its_variable_and_default() {
    let documented = documented();
    let rows = rows();
    let listed: BTreeSet<&str> = rows.iter().map(|r| r.option).collect();
    let in_doc: BTreeSet<&str> = documented.keys().map(String::as_str).collect();
    // Options that need others to be valid, or hold secrets: checked by
    // the validation cases in `tests.rs` instead.
    let extra = [
        "bootstrap_servers",
        "mock",
        "mode",
        "cassandra_user",
        "cassandra_password",
        "sasl_mechanism",
        "sasl_username",
        "sasl_password",
        "ssl_ca_location",
        "state_collections",
    ];
    let expected: BTreeSet<&str> = listed.iter().copied().chain(extra).collect();
    assert_eq!(in_doc, expected, "options in CONFIGURATION.md");
    for row in &rows {
        let (variable, default) = &documented[row.option];
        assert_eq!(variable, row.variable, "the variable of {}", row.option);
        if let Some(expected) = row.default {
            assert!(
                default.starts_with(&format!("`{expected}`")),
                "the default of {}: documented {default}, resolved {expected}",
                row.option
            );
        }
    }
}

#[test]
fn every_variable_the_code_reads_is_documented() {
    let sources = [
        include_str!("mod.rs"),
        include_str!("qos.rs"),
        include_str!("observe.rs"),
        include_str!("cassandra.rs"),
        include_str!("kafka.rs"),
        include_str!("state.rs"),
        include_str!("../../prosody-kafka/src/admin.rs"),
    ];
    let read: BTreeSet<String> = sources
        .iter()
        .flat_map(|source| source.split('"'))
        .filter(|piece| {
            piece.starts_with("PROSODY_")
                && piece.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        })
        .map(str::to_owned)
        .collect();
    // Anywhere in the document: a table row or the prose.
    let documented: BTreeSet<String> = include_str!("../../CONFIGURATION.md")
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|word| word.starts_with("PROSODY_"))
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = read.difference(&documented).collect();
    assert!(missing.is_empty(), "read but not documented: {missing:?}");
}
