//! How the client reaches Kafka: the group protocol, the connection check,
//! and the security settings (TLS, SASL).

use super::{ConfigError, Secret, Values};
use crate::env::FromEnv;
pub use prosody_core::broker::GroupProtocol;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How a client talks to the brokers (librdkafka's `security.protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// No TLS, no login.
    #[default]
    Plaintext,
    /// TLS, no login.
    Ssl,
    /// A SASL login, no TLS.
    SaslPlaintext,
    /// A SASL login over TLS: what most managed Kafka services require.
    SaslSsl,
}

impl SecurityProtocol {
    fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromEnv for SecurityProtocol {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "plaintext" => Ok(Self::Plaintext),
            "ssl" => Ok(Self::Ssl),
            "sasl_plaintext" => Ok(Self::SaslPlaintext),
            "sasl_ssl" => Ok(Self::SaslSsl),
            _ => Err("expected plaintext, ssl, sasl_plaintext or sasl_ssl".to_owned()),
        }
    }
}

/// How a SASL login proves who it is (librdkafka's `sasl.mechanism`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    /// The password itself, which only TLS protects (`PLAIN`).
    Plain,
    /// A salted challenge, SHA-256 (`SCRAM-SHA-256`).
    ScramSha256,
    /// A salted challenge, SHA-512 (`SCRAM-SHA-512`).
    ScramSha512,
}

impl SaslMechanism {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromEnv for SaslMechanism {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(Self::Plain),
            "SCRAM-SHA-256" => Ok(Self::ScramSha256),
            "SCRAM-SHA-512" => Ok(Self::ScramSha512),
            _ => Err("expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".to_owned()),
        }
    }
}

impl FromEnv for GroupProtocol {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse()
    }
}

impl FromEnv for PathBuf {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text.trim()))
    }
}

/// The options resolved.
///
/// Invariant: a SASL protocol comes with a mechanism, a username and a
/// password, and no other protocol with any of them; a CA file comes only
/// with a TLS protocol, and names a file that exists; a TLS protocol only
/// in a build that has TLS.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) struct Kafka {
    pub(crate) group_protocol: GroupProtocol,
    pub(crate) connect_timeout: Duration,
    pub(crate) security_protocol: SecurityProtocol,
    pub(crate) sasl: Option<(SaslMechanism, String, Secret)>,
    pub(crate) ssl_ca_location: Option<PathBuf>,
}

impl Kafka {
    /// The librdkafka properties these settings set, the password among
    /// them (`KafkaConfig` hides it from `Debug`).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn properties(&self) -> Vec<(&'static str, String)> {
        let mut properties = vec![("security.protocol", self.security_protocol.to_string())];
        if let Some((mechanism, username, password)) = &self.sasl {
            properties.push(("sasl.mechanism", mechanism.to_string()));
            properties.push(("sasl.username", username.clone()));
            properties.push(("sasl.password", password.expose().to_owned()));
        }
        match &self.ssl_ca_location {
            Some(path) => properties.push(("ssl.ca.location", path.display().to_string())),
            // The OpenSSL built with the crate knows no system directory of
            // its own: librdkafka looks in the usual places instead.
            None if self.security_protocol.tls() => {
                properties.push(("ssl.ca.location", "probe".to_owned()));
            }
            None => {}
        }
        properties
    }
}

fn invalid(option: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option,
        reason: reason.into(),
    }
}

impl Values {
    pub(super) fn kafka(&self) -> Result<Kafka, ConfigError> {
        let protocol = self.security_protocol;
        let mechanism = self.sasl_mechanism;
        if protocol.tls() && !cfg!(feature = "tls") {
            return Err(invalid(
                "security_protocol",
                format!(
                    "{protocol} needs TLS, which this build lacks: enable the `tls` feature of the prosody crate"
                ),
            ));
        }
        let scram = matches!(
            mechanism,
            Some(SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)
        );
        if scram && !cfg!(feature = "tls") {
            return Err(invalid(
                "sasl_mechanism",
                "SCRAM needs the OpenSSL that comes with the `tls` feature of the prosody crate",
            ));
        }
        let sasl = sasl(
            protocol,
            mechanism,
            self.sasl_username.clone(),
            self.sasl_password.clone(),
        )?;
        let ca = self.ssl_ca_location.clone();
        if let Some(path) = &ca {
            if !protocol.tls() {
                return Err(invalid(
                    "ssl_ca_location",
                    format!(
                        "{} is set, but security_protocol {protocol} has no TLS (use ssl or sasl_ssl)",
                        path.display()
                    ),
                ));
            }
            if !path.is_file() {
                return Err(invalid(
                    "ssl_ca_location",
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        Ok(Kafka {
            group_protocol: self.group_protocol,
            connect_timeout: self.connect_timeout,
            security_protocol: protocol,
            sasl,
            ssl_ca_location: ca,
        })
    }
}

/// The SASL login of `protocol`: all three settings with a SASL protocol,
/// none without one.
fn sasl(
    protocol: SecurityProtocol,
    mechanism: Option<SaslMechanism>,
    username: Option<String>,
    password: Option<Secret>,
) -> Result<Option<(SaslMechanism, String, Secret)>, ConfigError> {
    if protocol.sasl() {
        let needs = |option| {
            invalid(
                option,
                format!("is required with security_protocol {protocol}"),
            )
        };
        let mechanism = mechanism.ok_or_else(|| needs("sasl_mechanism"))?;
        let username = username.ok_or_else(|| needs("sasl_username"))?;
        let password = password.ok_or_else(|| needs("sasl_password"))?;
        Ok(Some((mechanism, username, password)))
    } else {
        // What is set, shown (but the password).
        let set = [
            ("sasl_mechanism", mechanism.map(|m| m.to_string())),
            ("sasl_username", username),
            ("sasl_password", password.as_ref().map(|_| "***".to_owned())),
        ];
        if let Some((option, Some(value))) = set.into_iter().find(|(_, value)| value.is_some()) {
            return Err(invalid(
                option,
                format!(
                    "{value:?} is set, but security_protocol {protocol} logs in without SASL (use sasl_ssl or sasl_plaintext)"
                ),
            ));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::{Kafka, SaslMechanism, SecurityProtocol};
    use crate::config::Secret;
    use std::path::PathBuf;
    use std::time::Duration;

    fn kafka(protocol: SecurityProtocol, ca: Option<&str>) -> Kafka {
        Kafka {
            group_protocol: super::GroupProtocol::Classic,
            connect_timeout: Duration::from_secs(10),
            security_protocol: protocol,
            sasl: protocol.sasl().then(|| {
                (
                    SaslMechanism::ScramSha512,
                    "app".to_owned(),
                    Secret::new("pw"),
                )
            }),
            ssl_ca_location: ca.map(PathBuf::from),
        }
    }

    /// The typed options become librdkafka's properties; TLS without a CA
    /// file looks for the system's authorities (`probe`).
    #[test]
    fn the_options_become_librdkafka_properties() {
        let props = |protocol, ca| kafka(protocol, ca).properties();
        assert_eq!(
            props(SecurityProtocol::Plaintext, None),
            [("security.protocol", "plaintext".to_owned())]
        );
        assert_eq!(
            props(SecurityProtocol::Ssl, None),
            [
                ("security.protocol", "ssl".to_owned()),
                ("ssl.ca.location", "probe".to_owned())
            ]
        );
        assert_eq!(
            props(SecurityProtocol::SaslSsl, Some("/ca.pem")),
            [
                ("security.protocol", "sasl_ssl".to_owned()),
                ("sasl.mechanism", "SCRAM-SHA-512".to_owned()),
                ("sasl.username", "app".to_owned()),
                ("sasl.password", "pw".to_owned()),
                ("ssl.ca.location", "/ca.pem".to_owned())
            ]
        );
        assert!(!format!("{:?}", kafka(SecurityProtocol::SaslSsl, None)).contains("pw"));
    }
}
