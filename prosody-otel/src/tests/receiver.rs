//! In-process OTLP receivers: a gRPC collector (tonic, the collector's
//! trace and metrics services) and an HTTP one (hyper, protobuf and JSON),
//! each on a free loopback port, optionally over TLS (and mutual TLS), and
//! the certificate authorities their certificates come from.

use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a receiver got, with the path and encoding it came by.
#[derive(Debug)]
pub(super) enum Got {
    Spans {
        path: String,
        encoding: &'static str,
        request: ExportTraceServiceRequest,
    },
    Metrics {
        path: String,
        encoding: &'static str,
        request: ExportMetricsServiceRequest,
    },
}

/// A certificate authority, its certificate in a PEM file.
pub(super) struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pub(super) pem: PathBuf,
}

/// A certificate and its key, in PEM files.
pub(super) struct Leaf {
    pub(super) certificate: PathBuf,
    pub(super) key: PathBuf,
}

impl Authority {
    /// A new authority whose certificate is written to `dir/name.pem`.
    pub(super) fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, certificate.pem()).unwrap();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for the loopback address, signed by this authority.
    pub(super) fn leaf(&self, dir: &Path, name: &str) -> Leaf {
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        let leaf = Leaf {
            certificate: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&leaf.certificate, certificate.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }
}

/// How a receiver serves TLS: its certificate, and the authority client
/// certificates must come from, if it asks for one.
pub(super) struct ServerTls<'a> {
    pub(super) leaf: &'a Leaf,
    pub(super) clients: Option<&'a Authority>,
}

/// A running receiver; it stops when dropped.
pub(super) struct Receiver {
    pub(super) address: SocketAddr,
    got: mpsc::UnboundedReceiver<Got>,
    runtime: tokio::runtime::Runtime,
}

impl Receiver {
    /// A gRPC collector.
    pub(super) fn grpc(tls: Option<ServerTls<'_>>) -> Self {
        let runtime = runtime();
        let (sender, got) = mpsc::unbounded_channel();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            let read = |path: &Path| std::fs::read(path).unwrap();
            let identity = tonic::transport::Identity::from_pem(
                read(&tls.leaf.certificate),
                read(&tls.leaf.key),
            );
            let mut config = tonic::transport::ServerTlsConfig::new().identity(identity);
            if let Some(clients) = tls.clients {
                config = config
                    .client_ca_root(tonic::transport::Certificate::from_pem(read(&clients.pem)));
            }
            server = server.tls_config(config).unwrap();
        }
        let collector = Collector(sender);
        let router = server
            .add_service(TraceServiceServer::new(collector.clone()))
            .add_service(MetricsServiceServer::new(collector));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        runtime.spawn(router.serve_with_incoming(incoming));
        Self {
            address,
            got,
            runtime,
        }
    }

    /// An HTTP collector.
    pub(super) fn http(tls: Option<ServerTls<'_>>) -> Self {
        let runtime = runtime();
        let (sender, got) = mpsc::unbounded_channel();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        let acceptor =
            tls.map(|tls| tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&tls))));
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let sender = sender.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let sender = sender.clone();
                        async move { Ok::<_, hyper::Error>(receive(request, &sender).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    // A refused handshake (the client distrusts the
                    // certificate) ends the connection, as a collector's would.
                    let _served = match acceptor {
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => {
                                http.serve_connection(TokioIo::new(stream), service).await
                            }
                            Err(_) => return,
                        },
                        None => http.serve_connection(TokioIo::new(stream), service).await,
                    };
                });
            }
        });
        Self {
            address,
            got,
            runtime,
        }
    }

    /// What arrived, waiting (up to a deadline) until there are spans and
    /// metrics.
    pub(super) fn spans_and_metrics(&mut self) -> Vec<Got> {
        let mut all = Vec::new();
        let (mut spans, mut metrics) = (false, false);
        let deadline = Duration::from_secs(20);
        self.runtime.block_on(async {
            while !(spans && metrics) {
                let got = tokio::time::timeout(deadline, self.got.recv())
                    .await
                    .unwrap_or_else(|_| panic!("no spans and metrics in {deadline:?}: {all:?}"))
                    .unwrap();
                spans |= matches!(got, Got::Spans { .. });
                metrics |= matches!(got, Got::Metrics { .. });
                all.push(got);
            }
        });
        all
    }

    /// What arrived so far, without waiting.
    pub(super) fn so_far(&mut self) -> Vec<Got> {
        std::iter::from_fn(|| self.got.try_recv().ok()).collect()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The rustls configuration of the HTTP receiver.
fn server_config(tls: &ServerTls<'_>) -> rustls::ServerConfig {
    #[allow(deprecated, reason = "the ring provider, as the library uses")]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_file_iter(&tls.leaf.certificate)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&tls.leaf.key).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match tls.clients {
        Some(clients) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_file_iter(&clients.pem).unwrap() {
                roots.add(certificate.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder.with_single_cert(chain, key).unwrap()
}

/// Decodes one HTTP export request and answers it.
async fn receive(
    request: hyper::Request<Incoming>,
    sender: &mpsc::UnboundedSender<Got>,
) -> hyper::Response<Full<bytes::Bytes>> {
    let path = request.uri().path().to_owned();
    let json = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes() == b"application/json");
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let encoding = if json { "json" } else { "protobuf" };
    let got = if path.contains("metrics") {
        let request = if json {
            serde_json::from_slice(&body).unwrap()
        } else {
            ExportMetricsServiceRequest::decode(body).unwrap()
        };
        Got::Metrics {
            path,
            encoding,
            request,
        }
    } else {
        let request = if json {
            serde_json::from_slice(&body).unwrap()
        } else {
            ExportTraceServiceRequest::decode(body).unwrap()
        };
        Got::Spans {
            path,
            encoding,
            request,
        }
    };
    sender.send(got).unwrap();
    let (kind, answer) = if json {
        ("application/json", "{}")
    } else {
        ("application/x-protobuf", "")
    };
    hyper::Response::builder()
        .header(hyper::header::CONTENT_TYPE, kind)
        .body(Full::new(bytes::Bytes::from_static(answer.as_bytes())))
        .unwrap()
}

/// The gRPC collector's services.
#[derive(Clone)]
struct Collector(mpsc::UnboundedSender<Got>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0
            .send(Got::Spans {
                path: "grpc".to_owned(),
                encoding: "grpc",
                request: request.into_inner(),
            })
            .unwrap();
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0
            .send(Got::Metrics {
                path: "grpc".to_owned(),
                encoding: "grpc",
                request: request.into_inner(),
            })
            .unwrap();
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}
