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

use super::{Options, ProbePort, Settings, SpanLink};
use crate::env::{Env, FromEnv};
use proptest::prelude::*;
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
    /// Sets the option on the builder's options from a rendered value.
    set: fn(&mut Options, &str),
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
    (seed % 2 == 0).to_string()
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
     |$o:ident, $t:ident| $set:expr, |$s:ident| $get:expr) => {
        Row {
            option: $option,
            variable: $variable,
            default: $default,
            value: $value,
            set: |$o: &mut Options, $t: &str| $set,
            get: |$s: &Settings| $get,
        }
    };
}

#[rustfmt::skip]
#[allow(clippy::too_many_lines, reason = "one row per option")]
fn rows() -> Vec<Row> {
    vec![
        row!("group_id", "PROSODY_GROUP_ID", None, name, |o, t| o.group_id = Some(parse(t)), |s| s.runtime.group_id.to_string()),
        row!("subscribed_topics", "PROSODY_SUBSCRIBED_TOPICS", None, names, |o, t| o.subscribed_topics = Some(parse(t)), |s| s.subscribed_topics.as_ref().map(|t| t.join(",")).unwrap_or_default()),
        row!("allowed_events", "PROSODY_ALLOWED_EVENTS", None, names, |o, t| o.allowed_events = Some(parse(t)), |s| s.runtime.allowed_events.join(",")),
        row!("source_system", "PROSODY_SOURCE_SYSTEM", Some("g"), name, |o, t| o.source_system = Some(parse(t)), |s| s.source_system.to_string()),
        row!("max_uncommitted", "PROSODY_MAX_UNCOMMITTED", Some("64"), size, |o, t| o.max_uncommitted = Some(parse(t)), |s| s.runtime.max_uncommitted.to_string()),
        row!("commit_interval", "PROSODY_COMMIT_INTERVAL", Some("1s"), |n| millis(n, 1, 600_000), |o, t| o.commit_interval = Some(parse(t)), |s| duration(s.runtime.commit_interval)),
        row!("poll_interval", "PROSODY_POLL_INTERVAL", Some("100ms"), |n| millis(n, 1, 600_000), |o, t| o.poll_interval = Some(parse(t)), |s| duration(s.runtime.poll_interval)),
        row!("shutdown_timeout", "PROSODY_SHUTDOWN_TIMEOUT", Some("30s"), |n| millis(n, 1, 600_000), |o, t| o.shutdown_timeout = Some(parse(t)), |s| duration(s.runtime.shutdown_timeout)),
        row!("send_timeout", "PROSODY_SEND_TIMEOUT", Some("1s"), |n| millis(n, 1, 600_000), |o, t| o.send_timeout = Some(parse(t)), |s| duration(s.send_timeout)),
        row!("retry_base", "PROSODY_RETRY_BASE", Some("20ms"), |n| millis(n, 1, 60_000), |o, t| o.retry_base = Some(parse(t)), |s| duration(s.runtime.retry_base)),
        row!("max_retry_delay", "PROSODY_RETRY_MAX_DELAY", Some("5m"), |n| millis(n, 60_000, 86_400_000), |o, t| o.max_retry_delay = Some(parse(t)), |s| duration(s.runtime.max_retry_delay)),
        row!("slab_size", "PROSODY_SLAB_SIZE", Some("1h"), |n| millis(n, 1000, 86_400_000), |o, t| o.slab_size = Some(parse(t)), |s| duration(s.runtime.slab_size)),
        row!("max_concurrency", "PROSODY_MAX_CONCURRENCY", Some("32"), size, |o, t| o.qos.max_concurrency = Some(parse(t)), |s| s.qos.scheduler.max_concurrency.to_string()),
        row!("max_retries", "PROSODY_MAX_RETRIES", Some("3"), |n| (n % 1000).to_string(), |o, t| o.qos.max_retries = Some(parse(t)), |s| s.qos.max_retries.to_string()),
        row!("failure_topic", "PROSODY_FAILURE_TOPIC", None, name, |o, t| o.qos.failure_topic = Some(parse(t)), |s| s.qos.failure.as_ref().map(|f| f.topic.to_string()).unwrap_or_default()),
        row!("timeout", "PROSODY_TIMEOUT", Some("4m"), |n| millis(n, 1, 240_000), |o, t| o.qos.timeout = Some(parse(t)), |s| duration(s.qos.timeout.timeout)),
        row!("stall_threshold", "PROSODY_STALL_THRESHOLD", Some("5m"), |n| millis(n, 1, 86_400_000), |o, t| o.qos.stall_threshold = Some(parse(t)), |s| duration(s.qos.stall_threshold)),
        row!("idempotence_version", "PROSODY_IDEMPOTENCE_VERSION", Some("1"), name, |o, t| o.qos.idempotence_version = Some(parse(t)), |s| s.qos.dedup.version.clone()),
        row!("idempotence_cache_size", "PROSODY_IDEMPOTENCE_CACHE_SIZE", Some("8192"), size, |o, t| o.qos.idempotence_cache_size = Some(parse(t)), |s| s.qos.dedup.cache_size.to_string()),
        row!("idempotence_ttl", "PROSODY_IDEMPOTENCE_TTL", Some("7days"), |n| millis(n, 1000, 864_000_000), |o, t| o.qos.idempotence_ttl = Some(parse(t)), |s| duration(s.qos.dedup.ttl)),
        row!("monopolization_enabled", "PROSODY_MONOPOLIZATION_ENABLED", Some("true"), flag, |o, t| o.qos.monopolization_enabled = Some(parse(t)), |s| s.qos.monopolization.enabled.to_string()),
        row!("monopolization_threshold", "PROSODY_MONOPOLIZATION_THRESHOLD", Some("0.9"), share, |o, t| o.qos.monopolization_threshold = Some(parse(t)), |s| s.qos.monopolization.threshold.to_string()),
        row!("monopolization_window", "PROSODY_MONOPOLIZATION_WINDOW", Some("5m"), |n| millis(n, 1, 86_400_000), |o, t| o.qos.monopolization_window = Some(parse(t)), |s| duration(s.qos.monopolization.window)),
        row!("monopolization_cache_size", "PROSODY_MONOPOLIZATION_CACHE_SIZE", Some("8192"), size, |o, t| o.qos.monopolization_cache_size = Some(parse(t)), |s| s.qos.monopolization.cache_size.to_string()),
        row!("scheduler_failure_weight", "PROSODY_SCHEDULER_FAILURE_WEIGHT", Some("0.3"), share, |o, t| o.qos.scheduler_failure_weight = Some(parse(t)), |s| s.qos.scheduler.failure_weight.to_string()),
        row!("scheduler_max_wait", "PROSODY_SCHEDULER_MAX_WAIT", Some("2m"), |n| millis(n, 1, 86_400_000), |o, t| o.qos.scheduler_max_wait = Some(parse(t)), |s| duration(s.qos.scheduler.max_wait)),
        row!("scheduler_wait_weight", "PROSODY_SCHEDULER_WAIT_WEIGHT", Some("200"), |n| (n % 10_000).to_string(), |o, t| o.qos.scheduler_wait_weight = Some(parse(t)), |s| s.qos.scheduler.wait_weight.to_string()),
        row!("scheduler_cache_size", "PROSODY_SCHEDULER_CACHE_SIZE", Some("8192"), size, |o, t| o.qos.scheduler_cache_size = Some(parse(t)), |s| s.qos.scheduler.cache_size.to_string()),
        row!("telemetry_topic", "PROSODY_TELEMETRY_TOPIC", Some("prosody.telemetry-events"), name, |o, t| o.qos.telemetry_topic = Some(parse(t)), |s| s.qos.telemetry.as_deref().unwrap_or_default().to_owned()),
        row!("telemetry_enabled", "PROSODY_TELEMETRY_ENABLED", Some("true"), flag, |o, t| o.qos.telemetry_enabled = Some(parse(t)), |s| s.qos.telemetry.is_some().to_string()),
        row!("defer_enabled", "PROSODY_DEFER_ENABLED", Some("true"), flag, |o, t| o.qos.defer_enabled = Some(parse(t)), |s| s.qos.defer.enabled.to_string()),
        row!("defer_base", "PROSODY_DEFER_BASE", Some("1s"), |n| millis(n, 1, 3_600_000), |o, t| o.qos.defer_base = Some(parse(t)), |s| duration(s.qos.defer.base)),
        row!("defer_max_delay", "PROSODY_DEFER_MAX_DELAY", Some("1day"), |n| millis(n, 1000, 864_000_000), |o, t| o.qos.defer_max_delay = Some(parse(t)), |s| duration(s.qos.defer.max_delay)),
        row!("defer_failure_threshold", "PROSODY_DEFER_FAILURE_THRESHOLD", Some("0.9"), share, |o, t| o.qos.defer_failure_threshold = Some(parse(t)), |s| s.qos.defer.failure_threshold.to_string()),
        row!("defer_failure_window", "PROSODY_DEFER_FAILURE_WINDOW", Some("5m"), |n| millis(n, 1, 86_400_000), |o, t| o.qos.defer_failure_window = Some(parse(t)), |s| duration(s.qos.defer.failure_window)),
        row!("loader_cache_size", "PROSODY_LOADER_CACHE_SIZE", Some("1024"), size, |o, t| o.qos.loader_cache_size = Some(parse(t)), |s| s.qos.loader.cache_size.to_string()),
        row!("loader_seek_timeout", "PROSODY_LOADER_SEEK_TIMEOUT", Some("30s"), |n| millis(n, 1, 600_000), |o, t| o.qos.loader_seek_timeout = Some(parse(t)), |s| duration(s.qos.loader.seek_timeout)),
        row!("loader_discard_threshold", "PROSODY_LOADER_DISCARD_THRESHOLD", Some("100"), |n| (n % 100_000).to_string(), |o, t| o.qos.loader_discard_threshold = Some(parse(t)), |s| s.qos.loader.discard_threshold.to_string()),
        row!("probe_port", "PROSODY_PROBE_PORT", Some("8000"), |n| if n % 5 == 0 { "none".to_owned() } else { (n % 65_536).to_string() }, |o, t| o.observe.probe_port = Some(parse::<ProbePort>(t)), |s| s.observe.probe_port.to_string()),
        row!("statistics_interval", "PROSODY_STATISTICS_INTERVAL", Some("5s"), |n| millis(n, 1, 86_400_000), |o, t| o.observe.statistics_interval = Some(parse(t)), |s| duration(s.observe.statistics_interval)),
        row!("message_spans", "PROSODY_MESSAGE_SPANS", Some("child"), |n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(), |o, t| o.observe.message_spans = Some(parse::<SpanLink>(t)), |s| s.observe.message_spans.to_string()),
        row!("timer_spans", "PROSODY_TIMER_SPANS", Some("follows_from"), |n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(), |o, t| o.observe.timer_spans = Some(parse::<SpanLink>(t)), |s| s.observe.timer_spans.to_string()),
        row!("cassandra_nodes", "PROSODY_CASSANDRA_NODES", None, names, |o, t| o.cassandra.nodes = Some(parse(t)), |s| s.cassandra.nodes.join(",")),
        row!("cassandra_keyspace", "PROSODY_CASSANDRA_KEYSPACE", Some("prosody"), name, |o, t| o.cassandra.keyspace = Some(parse(t)), |s| s.cassandra.keyspace.clone()),
        row!("cassandra_user", "PROSODY_CASSANDRA_USER", None, name, |o, t| o.cassandra.user = Some(parse(t)), |s| s.cassandra.user.clone().unwrap_or_default()),
        row!("cassandra_datacenter", "PROSODY_CASSANDRA_DATACENTER", None, name, |o, t| o.cassandra.datacenter = Some(parse(t)), |s| s.cassandra.datacenter.clone().unwrap_or_default()),
        row!("cassandra_rack", "PROSODY_CASSANDRA_RACK", None, name, |o, t| o.cassandra.rack = Some(parse(t)), |s| s.cassandra.rack.clone().unwrap_or_default()),
        row!("cassandra_retention", "PROSODY_CASSANDRA_RETENTION", Some("1year"), |n| millis(n, 1000, 864_000_000_000), |o, t| o.cassandra.retention = Some(parse(t)), |s| duration(s.cassandra.retention)),
        row!("defer_store_cache_size", "PROSODY_DEFER_STORE_CACHE_SIZE", Some("8192"), size, |o, t| o.cassandra.defer_store_cache_size = Some(parse(t)), |s| s.cassandra.defer_store_cache_size.to_string()),
    ]
}

/// Options with a group and mock mode, and nothing else set.
fn base() -> Options {
    Options {
        group_id: Some("g".to_owned()),
        mock: Some(true),
        ..Options::default()
    }
}

fn resolve(options: Options, vars: &HashMap<String, String>) -> Settings {
    options
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
            let mut options = base();
            if row.option == "group_id" {
                options.group_id = None;
            }
            let env = |value: &str| HashMap::from([(row.variable.to_owned(), value.to_owned())]);
            let mut set = base();
            (row.set)(&mut set, &mine);
            let both = resolve(set, &env(&theirs));
            prop_assert_eq!((row.get)(&both), mine.clone(), "{} from the builder", row.option);
            let from_env = if row.option == "group_id" {
                resolve(options, &env(&theirs))
            } else {
                resolve(base(), &env(&theirs))
            };
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
    let extra = ["bootstrap_servers", "mock", "mode", "cassandra_password"];
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
