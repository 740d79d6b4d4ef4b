//! TLS for an `https` collector: the certificate authority its certificate
//! must chain to (`OTEL_EXPORTER_OTLP_CERTIFICATE`; the system's roots
//! without it) and the client's certificate and key for mutual TLS, read
//! from the files the environment names. The exporter does not read these
//! variables, so the library hands the certificates to tonic (gRPC) and to
//! a rustls configuration (HTTP).

use super::signal::{Setting, Signal, lookup};
use super::{Env, OtelError};
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// A signal's TLS settings.
#[derive(Debug)]
pub(super) struct Tls {
    /// The certificate authorities to trust instead of the system's.
    ca: Option<Pem<Vec<CertificateDer<'static>>>>,
    /// The client's certificate chain and key.
    client: Option<(
        Pem<Vec<CertificateDer<'static>>>,
        Pem<PrivateKeyDer<'static>>,
    )>,
}

/// A PEM file's text and what it holds.
#[derive(Debug)]
struct Pem<T> {
    text: Vec<u8>,
    parsed: T,
}

impl Tls {
    /// The settings of `signal` (its own variables win).
    pub(super) fn from_env(env: Env, signal: Signal) -> Result<Self, OtelError> {
        let ca = lookup(env, &signal.variables(Setting::Certificate))
            .map(|(variable, path)| certificates(variable, &path))
            .transpose()?;
        let certificate = lookup(env, &signal.variables(Setting::ClientCertificate));
        let key = lookup(env, &signal.variables(Setting::ClientKey));
        let client = match (certificate, key) {
            (None, None) => None,
            (Some((present, _)), None) => {
                let [_, missing] = signal.variables(Setting::ClientKey);
                return Err(OtelError::ClientIdentity { present, missing });
            }
            (None, Some((present, _))) => {
                let [_, missing] = signal.variables(Setting::ClientCertificate);
                return Err(OtelError::ClientIdentity { present, missing });
            }
            (Some((certificate_variable, certificate)), Some((key_variable, key))) => Some((
                certificates(certificate_variable, &certificate)?,
                private_key(key_variable, &key)?,
            )),
        };
        Ok(Self { ca, client })
    }

    /// The configuration of a gRPC channel: tonic on rustls and ring.
    pub(super) fn tonic(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new();
        let config = match &self.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(&ca.text)),
            None => config.with_native_roots(),
        };
        match &self.client {
            Some((chain, key)) => config.identity(Identity::from_pem(&chain.text, &key.text)),
            None => config,
        }
    }

    /// The configuration of the HTTP client.
    pub(super) fn rustls(&self, signal: Signal) -> Result<ClientConfig, OtelError> {
        let failed = |reason: String| OtelError::Tls {
            signal: signal.name(),
            reason,
        };
        let mut roots = RootCertStore::empty();
        if let Some(ca) = &self.ca {
            for certificate in &ca.parsed {
                roots
                    .add(certificate.clone())
                    .map_err(|e| failed(format!("a CA certificate is not usable: {e}")))?;
            }
        } else {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(failed(
                    "the system has no root certificates; set OTEL_EXPORTER_OTLP_CERTIFICATE"
                        .to_owned(),
                ));
            }
        }
        let builder = builder()
            .map_err(|e| failed(e.to_string()))?
            .with_root_certificates(roots);
        match &self.client {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.parsed.clone(), key.parsed.clone_key())
                .map_err(|e| failed(format!("the client certificate and key: {e}"))),
            None => Ok(builder.with_no_client_auth()),
        }
    }

    /// The configuration of an HTTP client that speaks plain HTTP: the
    /// client needs one all the same, and trusts nothing with it.
    pub(super) fn plain() -> Result<ClientConfig, rustls::Error> {
        Ok(builder()?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth())
    }
}

/// rustls with ring, whatever provider the process installed.
#[allow(
    deprecated,
    reason = "ring has no post-quantum key exchange; it builds without cmake or aws-lc"
)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, rustls::Error> {
    ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()
}

/// The certificates in the PEM file `path`.
fn certificates(
    variable: &'static str,
    path: &str,
) -> Result<Pem<Vec<CertificateDer<'static>>>, OtelError> {
    let text = read(variable, path)?;
    let parsed = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(variable, path, &format!("is not PEM: {e}")))?;
    if parsed.is_empty() {
        return Err(bad(variable, path, "holds no PEM certificate"));
    }
    Ok(Pem { text, parsed })
}

/// The private key in the PEM file `path`.
fn private_key(
    variable: &'static str,
    path: &str,
) -> Result<Pem<PrivateKeyDer<'static>>, OtelError> {
    let text = read(variable, path)?;
    let parsed = PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| bad(variable, path, &format!("holds no PEM private key: {e}")))?;
    Ok(Pem { text, parsed })
}

fn read(variable: &'static str, path: &str) -> Result<Vec<u8>, OtelError> {
    std::fs::read(path.trim()).map_err(|e| bad(variable, path, &format!("cannot be read: {e}")))
}

fn bad(variable: &'static str, path: &str, reason: &str) -> OtelError {
    OtelError::TlsFile {
        variable,
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}
