//! The keyed-state options: the collections handlers may bind, the
//! recovery delay their TTLs must exceed, and the owners' disk cache.

use super::{ConfigError, Values, shown};
use crate::env::FromEnv;
use prosody_core::state::{Registry, Spec};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Where and how large the owners' disk cache is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CacheSettings {
    /// `None`: a temporary directory of the client's own.
    pub(crate) dir: Option<PathBuf>,
    /// Bytes of its block cache in memory; `None`: the engine's 32 MiB.
    pub(crate) memory: Option<u64>,
}

/// How long a read of another group's published collection is served
/// from the readers' cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadTtl {
    /// Every read goes to the store.
    Off,
    /// A read is served this long after the store answered it.
    For(Duration),
}

impl ReadTtl {
    /// The duration, zero when off.
    #[must_use]
    pub fn duration(self) -> Duration {
        match self {
            Self::Off => Duration::ZERO,
            Self::For(ttl) => ttl,
        }
    }
}

impl FromEnv for ReadTtl {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("none") || text.eq_ignore_ascii_case("false") {
            return Ok(Self::Off);
        }
        let ttl = <Duration as FromEnv>::parse(text)
            .map_err(|e| format!("{e}; or none, to read the store every time"))?;
        Ok(if ttl.is_zero() {
            Self::Off
        } else {
            Self::For(ttl)
        })
    }
}

impl fmt::Display for ReadTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("none"),
            Self::For(ttl) => write!(f, "{}", shown(*ttl)),
        }
    }
}

/// The readers of published collections: how long a read is cached, and
/// how many bytes the cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadSettings {
    pub(crate) ttl: ReadTtl,
    /// `None`: `state_owned_cache_size` if set, else 1 MiB.
    pub(crate) size: Option<u64>,
}

/// The readers' cache when no size is given.
pub(crate) const READ_CACHE_SIZE: u64 = 1024 * 1024;

impl ReadSettings {
    /// The readers' cache size, in bytes.
    pub(crate) fn bytes(&self, owned: &CacheSettings) -> u64 {
        self.size.or(owned.memory).unwrap_or(READ_CACHE_SIZE)
    }
}

impl Values {
    /// The readers' settings.
    pub(super) fn reads(&self) -> ReadSettings {
        ReadSettings {
            ttl: self.state_read_cache,
            size: self.state_read_cache_size,
        }
    }

    /// The disk cache's settings.
    pub(super) fn cache(&self) -> CacheSettings {
        CacheSettings {
            dir: self.state_cache_dir.clone(),
            memory: self.state_owned_cache_size,
        }
    }

    /// The registry of the collections, checked against the recovery delay;
    /// a published collection needs a `subsystem` to publish under.
    pub(super) fn registry(&self, collections: Vec<Spec>) -> Result<Registry, ConfigError> {
        if self.subsystem.is_none()
            && let Some(published) = collections.iter().find(|spec| spec.published)
        {
            return Err(ConfigError::Invalid {
                option: "subsystem",
                reason: format!(
                    "collection `{}` is published, and a published collection needs a \
                     subsystem to publish under: set `subsystem`",
                    published.name
                ),
            });
        }
        Registry::new(collections, self.state_recovery_delay).map_err(|error| {
            ConfigError::Invalid {
                option: "state_collections",
                reason: error.to_string(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CacheSettings;
    use crate::config::{ConfigError, Options, Settings};
    use crate::env::Env;
    use prosody_core::state::{Kind, Payload, ReadCache, Spec};
    use std::time::Duration;

    /// The options of a mock client of group `g` with these collections,
    /// resolved in an environment of `vars`.
    fn settings(collections: Vec<Spec>, vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = Env::from_fn(move |name: &str| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        });
        let options = Options {
            group_id: Some("g".to_owned()),
            mock: Some(true),
            state_collections: collections,
            ..Options::default()
        };
        options.resolve(&env)
    }

    fn resolve(collections: Vec<Spec>, vars: &[(&str, &str)]) -> Result<usize, ConfigError> {
        settings(collections, vars).map(|settings| settings.runtime.state.specs().len())
    }

    fn cache(vars: &[(&str, &str)]) -> Result<CacheSettings, ConfigError> {
        settings(vec![], vars).map(|settings| settings.state_cache)
    }

    fn spec(name: &'static str, kind: Kind) -> Spec {
        Spec::new(name, kind, Payload::Json)
    }

    fn ttl(millis: u64) -> Spec {
        let mut spec = spec("c", Kind::Value);
        spec.ttl = Some(Duration::from_millis(millis));
        spec
    }

    /// The disk cache's options: sizes with units, and the rules named.
    #[test]
    fn the_disk_cache_options_are_read_and_checked() {
        let read = cache(&[
            ("PROSODY_STATE_CACHE_DIR", "/var/cache/prosody"),
            ("PROSODY_STATE_OWNED_CACHE_SIZE", "64 MiB"),
        ]);
        assert_eq!(
            read.map(|c| (c.dir, c.memory)),
            Ok((Some("/var/cache/prosody".into()), Some(64 << 20)))
        );
        let zero = cache(&[("PROSODY_STATE_OWNED_CACHE_SIZE", "0")]);
        assert!(
            matches!(
                &zero,
                Err(ConfigError::Invalid {
                    option: "state_owned_cache_size",
                    ..
                })
            ),
            "{zero:?}"
        );
        let empty = cache(&[("PROSODY_STATE_CACHE_DIR", "")]);
        assert!(
            matches!(
                &empty,
                Err(ConfigError::Invalid {
                    option: "state_cache_dir",
                    ..
                })
            ),
            "{empty:?}"
        );
        let bad = cache(&[("PROSODY_STATE_OWNED_CACHE_SIZE", "lots")]);
        assert!(
            matches!(&bad, Err(ConfigError::Environment { .. })),
            "{bad:?}"
        );
    }

    type Case = (
        Vec<Spec>,
        &'static [(&'static str, &'static str)],
        &'static str,
    );

    /// Each rule of a collection or of the recovery delay fails the build
    /// naming the option and, for a collection, the collection and rule.
    #[test]
    fn each_bad_collection_names_its_rule() {
        let mut wide = spec("c", Kind::Map);
        wide.keyset_limit = 4097;
        let mut empty = spec("c", Kind::Deque);
        empty.capacity = Some(0);
        let mut published = spec("c", Kind::Deque);
        published.payload = Payload::Message;
        published.published = true;
        let mut uncached = spec("c", Kind::Map);
        uncached.read_cache = ReadCache::For(Duration::ZERO);
        let cases: Vec<Case> = vec![
            (
                vec![spec("c", Kind::Value), spec("c", Kind::Map)],
                &[],
                "registered twice",
            ),
            (vec![spec("", Kind::Value)], &[], "empty name"),
            (vec![ttl(1500)], &[], "whole seconds"),
            (vec![ttl(30_000)], &[], "longer than state_recovery_delay"),
            (
                vec![ttl(60_000)],
                &[("PROSODY_STATE_RECOVERY_DELAY", "2m")],
                "longer than state_recovery_delay",
            ),
            (vec![wide], &[], "keyset_limit 4097"),
            (vec![empty], &[], "capacity 0"),
            (
                vec![published],
                &[("PROSODY_SUBSYSTEM", "orders")],
                "published",
            ),
            (vec![uncached], &[], "read_cache For(0s) must be positive"),
        ];
        for (collections, vars, rule) in cases {
            let error = resolve(collections.clone(), vars).expect_err(rule);
            let ConfigError::Invalid { option, reason } = &error else {
                panic!("{collections:?}: {error:?}");
            };
            assert_eq!(*option, "state_collections", "{collections:?}");
            assert!(reason.contains(rule), "{reason:?} does not say {rule:?}");
        }
        // A published collection needs a subsystem: the error names both.
        let mut shared = spec("balances", Kind::Map);
        shared.published = true;
        let error = resolve(vec![shared], &[]).expect_err("no subsystem");
        let ConfigError::Invalid { option, reason } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*option, "subsystem");
        assert!(reason.contains("`balances`"), "{reason}");
        assert!(resolve(vec![shared], &[("PROSODY_SUBSYSTEM", "ledger")]).is_ok());
        for delay in ["500ms", "0s", "1500ms"] {
            let error =
                resolve(vec![], &[("PROSODY_STATE_RECOVERY_DELAY", delay)]).expect_err(delay);
            assert!(
                matches!(
                    &error,
                    ConfigError::Invalid {
                        option: "state_recovery_delay",
                        ..
                    }
                ),
                "{delay}: {error:?}"
            );
        }
        assert_eq!(
            resolve(vec![ttl(86_400_000), spec("d", Kind::Map)], &[]),
            Ok(2)
        );
    }
}
