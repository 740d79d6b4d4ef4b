//! The option table's tests: one property checks precedence and
//! round-trips over its rows (each with its name, its variable, its
//! default, how the builder sets it, and where its resolved value lands);
//! another checks that `CONFIGURATION.md` documents exactly the table's
//! options with their variables and defaults.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use super::Settings;
use super::table::{LISTED, rows};
use crate::builder::ClientBuilder;
use crate::env::{Env, FromEnv};
use proptest::prelude::*;
use prosody_core::JsonCodec;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// One option.
pub(crate) struct Row {
    pub(crate) option: &'static str,
    pub(crate) variable: &'static str,
    /// The default, rendered; `None` for a required option or one with no
    /// value by default.
    pub(crate) default: Option<&'static str>,
    /// A valid value, rendered, drawn from a seed.
    pub(crate) value: fn(u64) -> String,
    /// Sets the option with its builder method, from a rendered value.
    pub(crate) set: fn(Builder, &str) -> Builder,
    /// The resolved value, rendered.
    pub(crate) get: fn(&Settings) -> String,
}

pub(super) fn parse<T: FromEnv>(text: &str) -> T {
    T::parse(text).expect("a value the row drew")
}

pub(super) fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A duration in `low..=high` milliseconds, whole milliseconds.
pub(super) fn millis(seed: u64, low: u64, high: u64) -> String {
    duration(Duration::from_millis(low + seed % (high - low + 1)))
}

pub(super) fn size(seed: u64) -> String {
    (1 + seed % 100_000).to_string()
}

pub(super) fn share(seed: u64) -> String {
    // Multiples of 1/1000 in (0, 1], exact in decimal.
    (f64::from(u32::try_from(1 + seed % 1000).unwrap_or(1)) / 1000.0).to_string()
}

pub(super) fn flag(seed: u64) -> String {
    seed.is_multiple_of(2).to_string()
}

pub(super) fn name(seed: u64) -> String {
    format!("name-{}", seed % 10_000)
}

/// A `host:port` address.
pub(super) fn address(seed: u64) -> String {
    format!("peer-{}.example:{}", seed % 1000, 1 + seed % 65_535)
}

pub(super) fn names(seed: u64) -> String {
    (0..=seed % 3)
        .map(|n| format!("item-{}-{n}", seed % 1000))
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) type Builder = ClientBuilder<JsonCodec>;

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
            // By name, as a binding gives it: the same as its setter.
            let named = base().option(row.option, &serde_json::Value::String(mine.clone()));
            let named = resolve(named.unwrap_or_else(|e| panic!("{e}")), &env(&theirs));
            prop_assert_eq!((row.get)(&named), mine.clone(), "{} by name", row.option);
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

/// Options by name: a number of seconds for a duration, an array for a
/// list, `null` to leave unset, `null` or `false` to disable the probe; an
/// unknown name and a value that does not fit are errors naming them.
#[test]
fn options_by_name_read_each_json_form() {
    use super::ConfigError;
    use serde_json::json;
    let set = |name: &str, value: serde_json::Value| base().option(name, &value);
    let settings = |builder: Result<Builder, ConfigError>| {
        resolve(builder.unwrap_or_else(|e| panic!("{e}")), &HashMap::new())
    };
    let timeout = settings(set("timeout", json!(1.5)));
    assert_eq!(timeout.qos.timeout.timeout, Duration::from_millis(1500));
    let topics = settings(set("subscribed_topics", json!(["a", "b"])));
    assert_eq!(
        topics.subscribed_topics.map(|t| t.join(",")),
        Some("a,b".to_owned())
    );
    let comma = settings(set("subscribed_topics", json!("a, b")));
    assert_eq!(
        comma.subscribed_topics.map(|t| t.join(",")),
        Some("a,b".to_owned())
    );
    let unset = settings(set("max_concurrency", json!(null)));
    assert_eq!(unset.qos.scheduler.max_concurrency.get(), 32);
    for off in [json!(null), json!(false)] {
        let probe = settings(set("probe_port", off));
        assert!(matches!(
            probe.observe.probe_port,
            super::ProbePort::Disabled
        ));
    }
    let unknown = set("max_concurency", json!(4)).err();
    assert_eq!(
        unknown.map(|e| e.to_string()),
        Some("unknown option `max_concurency` (did you mean `max_concurrency`?)".to_owned())
    );
    let bad = set("timeout", json!("soon"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        bad.starts_with("option `timeout` cannot be \"soon\""),
        "{bad}"
    );
    let negative = set("timeout", json!(-1))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        negative.starts_with("option `timeout` cannot be -1"),
        "{negative}"
    );
    let read_cache = settings(set("state_read_cache", json!(2.5)));
    assert_eq!(
        read_cache.reads.ttl,
        super::ReadTtl::For(Duration::from_millis(2500))
    );
    let no_cache = settings(set("state_read_cache", json!(false)));
    assert_eq!(no_cache.reads.ttl, super::ReadTtl::Off);
    assert!(
        set("group_id", json!(["a", "b"])).is_err(),
        "a list for a name"
    );
    assert!(
        set("max_concurrency", json!(true)).is_err(),
        "a flag for a count"
    );
    let mode = set("mode", json!("low-latency")).map(|b| b.into_options().mode);
    assert_eq!(mode.ok().flatten(), Some(super::Mode::LowLatency));
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

/// Every default of the table parses as its variable would.
#[test]
fn every_default_parses() {
    let mut options = base().into_options();
    options.mock = None;
    let layered = options.layer(&Env::from_fn(|_: &str| None));
    assert!(layered.is_ok(), "{:?}", layered.err());
}

/// No two rows of the table read the same variable.
#[test]
fn each_variable_belongs_to_one_option() {
    let mut seen = BTreeMap::new();
    for row in LISTED {
        if let Some(other) = seen.insert(row.variable, row.option) {
            panic!(
                "{} is read by both {other} and {}",
                row.variable, row.option
            );
        }
    }
}

/// The options `CONFIGURATION.md` lists outside the table: they have no
/// variable.
const OUTSIDE: [&str; 2] = ["mode", "state_collections"];

/// What `CONFIGURATION.md` says differently from the table, one line an
/// option.
fn disagreements(documented: &BTreeMap<String, (String, String)>) -> Vec<String> {
    let mut found = Vec::new();
    for row in LISTED {
        let Some((variable, default)) = documented.get(row.option) else {
            found.push(format!("`{}` is missing", row.option));
            continue;
        };
        if variable != row.variable {
            found.push(format!(
                "`{}`: the variable is {variable}, the table says {}",
                row.option, row.variable
            ));
        }
        if let Some(expected) = row.default
            && !default.starts_with(&format!("`{expected}`"))
        {
            found.push(format!(
                "`{}`: the default is {default}, the table says `{expected}`",
                row.option
            ));
        }
    }
    for option in documented.keys() {
        let listed = LISTED.iter().any(|row| row.option == option);
        if !listed && !OUTSIDE.contains(&option.as_str()) {
            found.push(format!("`{option}` is not an option of the table"));
        }
    }
    found
}

#[test]
fn the_document_lists_every_option_with_its_variable_and_default() {
    let found = disagreements(&documented());
    assert!(
        found.is_empty(),
        "CONFIGURATION.md disagrees with the option table (src/config/table.rs):\n{}",
        found.join("\n")
    );
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
        include_str!("table.rs"),
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
