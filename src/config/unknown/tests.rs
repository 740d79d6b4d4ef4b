use super::{Unknown, classify, nearest, warn_unknown};
use crate::config::table::VARIABLES;
use proptest::prelude::*;

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

/// Each unknown variable is warned of once, however many clients are
/// built; variables that are options, or read elsewhere, are not. (The
/// log lines themselves: `tests/suite/variables.rs`.)
#[test]
fn each_unknown_variable_is_warned_of_once() {
    let environment = || {
        [
            "PROSODY_DEFER_CACHE_SIZE",
            "PROSODY_IDEMPOTENCE_TTLL",
            "PROSODY_QUITE_UNLIKE_ANY",
            "PROSODY_GROUP_ID",
            "PROSODY_LOG",
            "PROSODY_TEST_SASL_USER",
        ]
        .map(str::to_owned)
    };
    // Two clients built in one process.
    let first = warn_unknown(environment());
    let second = warn_unknown(environment());
    assert_eq!(
        first,
        [
            "PROSODY_DEFER_CACHE_SIZE is not read: it was renamed to the option \
             loader_cache_size (PROSODY_LOADER_CACHE_SIZE)",
            "PROSODY_IDEMPOTENCE_TTLL is not an option and is not read; did you mean \
             idempotence_ttl (PROSODY_IDEMPOTENCE_TTL)?",
            "PROSODY_QUITE_UNLIKE_ANY is not an option and is not read (see CONFIGURATION.md)",
        ]
    );
    assert!(second.is_empty(), "{second:?}");
}
