//! Topic administration: create, describe and delete topics.
//!
//! Every option comes from its argument, else its `PROSODY_*` environment
//! variable, else the broker's default. (librdkafka's mock cluster has no
//! admin handlers: the option handling is tested here, the requests on a
//! real broker in `tests/suite/admin.rs`.)

use crate::KafkaConfig;
use crate::error::backend;
use prosody_contracts::broker::BrokerError;
use rdkafka::admin::{
    AdminClient as RdAdmin, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long an admin request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A setting that could not be used, naming it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No bootstrap servers, by argument or `PROSODY_BOOTSTRAP_SERVERS`.
    #[error("bootstrap_servers is required (or PROSODY_BOOTSTRAP_SERVERS)")]
    MissingServers,
    /// An environment variable's value does not parse.
    #[error("{variable}={value:?} is invalid: {reason}")]
    Environment {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// An option's value breaks its rule.
    #[error("option `{option}` is invalid: {reason}")]
    Invalid {
        /// The option.
        option: &'static str,
        /// The rule it breaks.
        reason: String,
    },
    /// A topic to create exists already.
    #[error("topic {0} already exists")]
    TopicExists(String),
    /// A topic to describe or delete does not exist.
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    /// The broker refused or failed the request.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// A topic as the broker describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    /// Its name.
    pub name: String,
    /// How many partitions it has.
    pub partitions: i32,
    /// How many replicas its first partition has.
    pub replication_factor: i32,
    /// Its configuration, defaults included (`cleanup.policy`,
    /// `retention.ms`, ...), by name; values the broker marks sensitive are
    /// left out.
    pub configs: BTreeMap<String, String>,
}

/// Options of a new topic; `None` takes the environment's, else the
/// broker's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicOptions {
    /// Partitions (`PROSODY_TOPIC_PARTITIONS`).
    pub partitions: Option<i32>,
    /// Replication factor (`PROSODY_TOPIC_REPLICATION_FACTOR`).
    pub replication_factor: Option<i32>,
    /// `delete` or `compact` (`PROSODY_TOPIC_CLEANUP_POLICY`).
    pub cleanup_policy: Option<String>,
    /// How long records are kept (`PROSODY_TOPIC_RETENTION`, humantime).
    pub retention: Option<Duration>,
}

fn parse<T: std::str::FromStr>(
    lookup: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<Option<T>, AdminError>
where
    T::Err: std::fmt::Display,
{
    lookup(variable)
        .map(|value| {
            value
                .trim()
                .parse()
                .map_err(|e: T::Err| AdminError::Environment {
                    variable,
                    reason: e.to_string(),
                    value,
                })
        })
        .transpose()
}

impl TopicOptions {
    /// The options with each unset one taken from `lookup` (the process
    /// environment in [`AdminClient::create_topic`]), checked.
    pub fn resolve(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AdminError> {
        let partitions = match self.partitions {
            Some(n) => Some(n),
            None => parse(&lookup, "PROSODY_TOPIC_PARTITIONS")?,
        };
        let replication_factor = match self.replication_factor {
            Some(n) => Some(n),
            None => parse(&lookup, "PROSODY_TOPIC_REPLICATION_FACTOR")?,
        };
        let cleanup_policy = match &self.cleanup_policy {
            Some(policy) => Some(policy.clone()),
            None => lookup("PROSODY_TOPIC_CLEANUP_POLICY"),
        };
        let retention = match self.retention {
            Some(retention) => Some(retention),
            None => lookup("PROSODY_TOPIC_RETENTION")
                .map(|value| {
                    humantime::parse_duration(value.trim()).map_err(|e| AdminError::Environment {
                        variable: "PROSODY_TOPIC_RETENTION",
                        reason: e.to_string(),
                        value,
                    })
                })
                .transpose()?,
        };
        if partitions.is_some_and(|n| n < 1) {
            return Err(AdminError::Invalid {
                option: "partitions",
                reason: "must be at least 1".to_owned(),
            });
        }
        if replication_factor.is_some_and(|n| n < 1) {
            return Err(AdminError::Invalid {
                option: "replication_factor",
                reason: "must be at least 1".to_owned(),
            });
        }
        if let Some(policy) = &cleanup_policy {
            let known = policy
                .split(',')
                .all(|p| matches!(p.trim(), "delete" | "compact"));
            if !known {
                return Err(AdminError::Invalid {
                    option: "cleanup_policy",
                    reason: format!("{policy:?} is not delete, compact or both"),
                });
            }
        }
        Ok(Self {
            partitions,
            replication_factor,
            cleanup_policy,
            retention,
        })
    }
}

/// The bootstrap servers: the argument's, else `PROSODY_BOOTSTRAP_SERVERS`
/// (comma-separated).
pub fn bootstrap_servers(
    servers: Option<Vec<String>>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, AdminError> {
    let servers = servers.unwrap_or_else(|| {
        lookup("PROSODY_BOOTSTRAP_SERVERS")
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    });
    if servers.is_empty() {
        return Err(AdminError::MissingServers);
    }
    Ok(servers)
}

/// Creates and deletes topics.
pub struct AdminClient {
    admin: std::sync::Arc<RdAdmin<DefaultClientContext>>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient").finish_non_exhaustive()
    }
}

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl AdminClient {
    /// An admin client for `servers`, else `PROSODY_BOOTSTRAP_SERVERS`, with
    /// no other settings (a plaintext listener).
    pub fn new(servers: Option<Vec<String>>) -> Result<Self, AdminError> {
        Self::with_config(&KafkaConfig::new(bootstrap_servers(servers, environment)?)?)
    }

    /// An admin client with a broker's settings (its security properties
    /// included).
    pub fn with_config(config: &KafkaConfig) -> Result<Self, AdminError> {
        // A metadata request for an absent topic must not create it.
        let admin = config
            .client(&[("allow.auto.create.topics", "false")])
            .create()
            .map_err(backend)?;
        Ok(Self {
            admin: std::sync::Arc::new(admin),
        })
    }

    fn options() -> AdminOptions {
        AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT))
    }

    /// Creates topic `name`; options left unset come from `PROSODY_TOPIC_*`,
    /// else the broker's defaults.
    pub async fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<(), AdminError> {
        let options = options.resolve(environment)?;
        let replication = TopicReplication::Fixed(options.replication_factor.unwrap_or(-1));
        let retention = options.retention.map(|r| r.as_millis().to_string());
        let mut topic = NewTopic::new(name, options.partitions.unwrap_or(-1), replication);
        if let Some(policy) = &options.cleanup_policy {
            topic = topic.set("cleanup.policy", policy);
        }
        if let Some(retention) = &retention {
            topic = topic.set("retention.ms", retention);
        }
        let results = self
            .admin
            .create_topics([&topic], &Self::options())
            .await
            .map_err(backend)?;
        for result in results {
            result.map_err(|(topic, code)| match code {
                RDKafkaErrorCode::TopicAlreadyExists => AdminError::TopicExists(topic),
                code => failed("creating", &topic, code),
            })?;
        }
        Ok(())
    }

    /// The broker's description of topic `name`: partitions, replication
    /// factor and configuration.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription, AdminError> {
        let admin = std::sync::Arc::clone(&self.admin);
        let topic_name = name.to_owned();
        let metadata = tokio::task::spawn_blocking(move || {
            admin
                .inner()
                .fetch_metadata(Some(&topic_name), ADMIN_TIMEOUT)
        })
        .await
        .map_err(crate::error::retriable_failure)?
        .map_err(backend)?;
        let Some(topic) = metadata.topics().iter().find(|t| t.name() == name) else {
            return Err(AdminError::UnknownTopic(name.to_owned()));
        };
        if let Some(error) = topic.error() {
            return Err(match RDKafkaErrorCode::from(error) {
                RDKafkaErrorCode::UnknownTopicOrPartition => {
                    AdminError::UnknownTopic(name.to_owned())
                }
                code => failed("describing", name, code),
            });
        }
        let partitions = i32::try_from(topic.partitions().len()).unwrap_or(i32::MAX);
        let replication_factor = topic
            .partitions()
            .first()
            .map_or(0, |p| i32::try_from(p.replicas().len()).unwrap_or(i32::MAX));
        let resources = self
            .admin
            .describe_configs([&ResourceSpecifier::Topic(name)], &Self::options())
            .await
            .map_err(backend)?;
        let mut configs = BTreeMap::new();
        for resource in resources {
            let resource = resource.map_err(|code| failed("describing", name, code))?;
            for entry in resource.entries {
                if let (false, Some(value)) = (entry.is_sensitive, entry.value) {
                    configs.insert(entry.name, value);
                }
            }
        }
        Ok(TopicDescription {
            name: name.to_owned(),
            partitions,
            replication_factor,
            configs,
        })
    }

    /// Deletes topic `name`.
    pub async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        let results = self
            .admin
            .delete_topics(&[name], &Self::options())
            .await
            .map_err(backend)?;
        for result in results {
            result.map_err(|(topic, code)| match code {
                RDKafkaErrorCode::UnknownTopicOrPartition => AdminError::UnknownTopic(topic),
                code => failed("deleting", &topic, code),
            })?;
        }
        Ok(())
    }
}

/// A request about `topic` that the broker refused.
fn failed(doing: &str, topic: &str, code: RDKafkaErrorCode) -> AdminError {
    AdminError::Broker(BrokerError::Invalid(format!(
        "{doing} topic {topic} failed: {code}"
    )))
}

#[cfg(test)]
mod tests {
    use super::{AdminError, TopicOptions, bootstrap_servers};
    use std::collections::HashMap;
    use std::time::Duration;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn arguments_beat_the_environment_which_beats_the_broker_default() -> Result<(), AdminError> {
        let vars = env(&[
            ("PROSODY_TOPIC_PARTITIONS", "4"),
            ("PROSODY_TOPIC_REPLICATION_FACTOR", "3"),
            ("PROSODY_TOPIC_CLEANUP_POLICY", "compact"),
            ("PROSODY_TOPIC_RETENTION", "7d"),
        ]);
        let from_env = TopicOptions::default().resolve(&vars)?;
        assert_eq!(from_env.partitions, Some(4));
        assert_eq!(from_env.replication_factor, Some(3));
        assert_eq!(from_env.cleanup_policy.as_deref(), Some("compact"));
        assert_eq!(from_env.retention, Some(Duration::from_secs(7 * 86_400)));
        let given = TopicOptions {
            partitions: Some(8),
            retention: Some(Duration::from_secs(60)),
            ..TopicOptions::default()
        };
        let mixed = given.resolve(&vars)?;
        assert_eq!(mixed.partitions, Some(8));
        assert_eq!(mixed.retention, Some(Duration::from_secs(60)));
        assert_eq!(mixed.replication_factor, Some(3));
        assert_eq!(
            TopicOptions::default().resolve(env(&[]))?,
            TopicOptions::default()
        );
        Ok(())
    }

    #[test]
    fn bad_values_name_their_variable_or_option() {
        for (vars, named) in [
            (
                &[("PROSODY_TOPIC_PARTITIONS", "many")][..],
                "PROSODY_TOPIC_PARTITIONS",
            ),
            (
                &[("PROSODY_TOPIC_RETENTION", "soon")][..],
                "PROSODY_TOPIC_RETENTION",
            ),
            (&[("PROSODY_TOPIC_PARTITIONS", "0")][..], "partitions"),
            (
                &[("PROSODY_TOPIC_REPLICATION_FACTOR", "-1")][..],
                "replication_factor",
            ),
            (
                &[("PROSODY_TOPIC_CLEANUP_POLICY", "forever")][..],
                "cleanup_policy",
            ),
        ] {
            let error = TopicOptions::default().resolve(env(vars)).err();
            let message = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(named), "{named}: {message:?}");
        }
    }

    #[test]
    fn servers_come_from_the_argument_else_the_environment() -> Result<(), AdminError> {
        let vars = env(&[("PROSODY_BOOTSTRAP_SERVERS", "a:9092, b:9092")]);
        assert_eq!(bootstrap_servers(None, &vars)?, ["a:9092", "b:9092"]);
        assert_eq!(
            bootstrap_servers(Some(vec!["c:9092".into()]), &vars)?,
            ["c:9092"]
        );
        assert!(matches!(
            bootstrap_servers(None, env(&[])),
            Err(AdminError::MissingServers)
        ));
        Ok(())
    }
}
