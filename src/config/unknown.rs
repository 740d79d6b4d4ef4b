//! `PROSODY_*` variables that are not options: renamed in an earlier
//! release, or mistyped. Nothing reads them, so `build()` says so.

use super::table::VARIABLES;
use std::collections::HashSet;
use std::sync::{LazyLock, Mutex, PoisonError};
use tracing::warn;

/// Variables of earlier releases, with the option each became (the seeds'
/// 0.4 to 0.5 tables).
const RENAMED: [(&str, &str); 4] = [
    ("PROSODY_DEFER_CACHE_SIZE", "loader_cache_size"),
    ("PROSODY_DEFER_SEEK_TIMEOUT", "loader_seek_timeout"),
    (
        "PROSODY_DEFER_DISCARD_THRESHOLD",
        "loader_discard_threshold",
    ),
    ("PROSODY_STATE_CACHE_SIZE_BYTES", "state_owned_cache_size"),
];

/// Variables read by something other than a client's options: the log
/// filter, the admin client's topic settings, and the test suites' and
/// scripts' own.
const NOT_OPTIONS: [&str; 8] = [
    "PROSODY_LOG",
    "PROSODY_TOPIC_PARTITIONS",
    "PROSODY_TOPIC_REPLICATION_FACTOR",
    "PROSODY_TOPIC_CLEANUP_POLICY",
    "PROSODY_TOPIC_RETENTION",
    "PROSODY_REQUIRE_SERVICES",
    "PROSODY_SERVICES_DIR",
    "PROSODY_SERVICES_CACHE",
];

/// The test suites' variables (certificates, SASL logins).
const TEST_PREFIX: &str = "PROSODY_TEST_";

/// What is known of a variable that is not an option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unknown {
    /// It was renamed to this option.
    Renamed(&'static str),
    /// It is not an option; this one's name is near.
    Near(&'static str),
    /// It is not an option, and no option's name is near.
    Unlike,
}

/// What `variable` is, if it is a `PROSODY_*` variable no option or other
/// part of the library reads; `None` otherwise.
pub(crate) fn classify(variable: &str) -> Option<Unknown> {
    if !variable.starts_with("PROSODY_")
        || variable.starts_with(TEST_PREFIX)
        || NOT_OPTIONS.contains(&variable)
        || VARIABLES.iter().any(|(_, known)| *known == variable)
    {
        return None;
    }
    if let Some((_, option)) = RENAMED.iter().find(|(old, _)| *old == variable) {
        return Some(Unknown::Renamed(option));
    }
    let name = variable
        .strip_prefix("PROSODY_")
        .unwrap_or(variable)
        .to_ascii_lowercase();
    Some(nearest(&name).map_or(Unknown::Unlike, Unknown::Near))
}

/// The option whose name is nearest `name` (fewest edits, a transposition
/// counting one; ties to the closer by Jaro-Winkler), if within a fifth of
/// the name's length, and at least one edit.
pub(crate) fn nearest(name: &str) -> Option<&'static str> {
    nearest_of(name, VARIABLES.iter().map(|(option, _)| *option))
}

/// The one of `options` nearest `name`, by the rule of [`nearest`].
pub(crate) fn nearest_of(
    name: &str,
    options: impl Iterator<Item = &'static str>,
) -> Option<&'static str> {
    let bound = (name.chars().count() / 5).max(1);
    options
        .map(|option| {
            let edits = strsim::damerau_levenshtein(name, option);
            (edits, -strsim::jaro_winkler(name, option), option)
        })
        .filter(|(edits, _, _)| *edits <= bound)
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, option)| option)
}

/// The variables warned of in this process.
static WARNED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// Warns of each `PROSODY_*` variable of `names` that no option reads:
/// once per variable per process, however many clients are built. Returns
/// the warnings logged.
pub(crate) fn warn_unknown(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut warned = Vec::new();
    for variable in names {
        let Some(unknown) = classify(&variable) else {
            continue;
        };
        let first = WARNED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(variable.clone());
        if !first {
            continue;
        }
        let warning = match unknown {
            Unknown::Renamed(option) => format!(
                "{variable} is not read: it was renamed to the option {option} ({})",
                variable_of(option)
            ),
            Unknown::Near(option) => format!(
                "{variable} is not an option and is not read; did you mean {option} ({})?",
                variable_of(option)
            ),
            Unknown::Unlike => {
                format!("{variable} is not an option and is not read (see CONFIGURATION.md)")
            }
        };
        warn!(%variable, "{warning}");
        warned.push(warning);
    }
    warned
}

/// The variable of `option`.
fn variable_of(option: &str) -> &'static str {
    VARIABLES
        .iter()
        .find(|(name, _)| *name == option)
        .map_or("", |(_, variable)| variable)
}

#[cfg(test)]
mod tests;
