use super::{Unknown, classify, nearest, warn_unknown};
use crate::config::table::VARIABLES;
use proptest::prelude::*;
use std::io::Write;
use std::sync::{Arc, Mutex};

proptest! {
    /// Any option's name with one character changed suggests that option.
    #[test]
    fn one_character_off_suggests_the_option(
        row in 0..VARIABLES.len(), at in any::<prop::sample::Index>(), by in "[a-z_]",
    ) {
        let (option, _) = VARIABLES[row];
        let at = at.index(option.len());
        let by = by.chars().next().expect("one character");
        prop_assume!(option.chars().nth(at) != Some(by));
        let typo: String = option
            .chars()
            .enumerate()
            .map(|(i, c)| if i == at { by } else { c })
            .collect();
        prop_assert_eq!(nearest(&typo), Some(option), "{}", typo);
    }
}

#[test]
fn each_variable_is_classified() {
    for (variable, expected) in [
        ("PROSODY_GROUP_ID", None),
        ("PROSODY_LOG", None),
        ("PROSODY_TOPIC_PARTITIONS", None),
        ("PROSODY_REQUIRE_SERVICES", None),
        ("PROSODY_TEST_CA_FILE", None),
        ("KAFKA_PROSODY_THING", None),
        (
            "PROSODY_DEFER_CACHE_SIZE",
            Some(Unknown::Renamed("loader_cache_size")),
        ),
        (
            "PROSODY_DEFER_SEEK_TIMEOUT",
            Some(Unknown::Renamed("loader_seek_timeout")),
        ),
        (
            "PROSODY_DEFER_DISCARD_THRESHOLD",
            Some(Unknown::Renamed("loader_discard_threshold")),
        ),
        (
            "PROSODY_STATE_CACHE_SIZE_BYTES",
            Some(Unknown::Renamed("state_owned_cache_size")),
        ),
        (
            "PROSODY_MAX_CONCURENCY",
            Some(Unknown::Near("max_concurrency")),
        ),
        ("PROSODY_GRUOP_ID", Some(Unknown::Near("group_id"))),
        ("PROSODY_FROBNICATE", Some(Unknown::Unlike)),
    ] {
        assert_eq!(classify(variable), expected, "{variable}");
    }
}

/// Log lines, written as text.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("unpoisoned").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Each unknown variable is warned of once, however many clients are
/// built; variables that are options, or read elsewhere, are not.
#[test]
fn each_unknown_variable_is_warned_of_once() {
    let written = Written::default();
    let writer = written.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let environment = || {
        [
            "PROSODY_DEFER_SEEK_TIMEOUT",
            "PROSODY_IDEMPOTENCE_CACHE_SIZ",
            "PROSODY_NOT_A_THING_AT_ALL",
            "PROSODY_GROUP_ID",
            "PROSODY_LOG",
            "PROSODY_TEST_SASL_USER",
        ]
        .map(str::to_owned)
    };
    // Two clients built in one process.
    warn_unknown(environment());
    warn_unknown(environment());
    let text = String::from_utf8(written.0.lock().expect("unpoisoned").clone()).expect("text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|line| line.contains("WARN")), "{text}");
    assert!(
        lines[0].contains("PROSODY_DEFER_SEEK_TIMEOUT is not read: it was renamed to the option loader_seek_timeout (PROSODY_LOADER_SEEK_TIMEOUT)"),
        "{text}"
    );
    assert!(
        lines[1].contains("did you mean idempotence_cache_size (PROSODY_IDEMPOTENCE_CACHE_SIZE)?"),
        "{text}"
    );
    assert!(
        lines[2].contains("PROSODY_NOT_A_THING_AT_ALL is not an option"),
        "{text}"
    );
    assert!(!lines[2].contains("did you mean"), "{text}");
}
