//! A TLS front for a plain TCP server on this machine: it ends each connection's TLS with a
//! server certificate (asking for a client certificate when given a CA) and passes the bytes on
//! to the server behind it. The test OTLP receiver and the benchmark's collector use it to be
//! reached over `https:`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A running front: its address, and how many handshakes failed.
pub struct TlsFront {
    /// `127.0.0.1:port`.
    pub address: String,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    /// A front for `upstream` (`host:port`) with the PEM files `cert` and `key`; with
    /// `client_ca`, a client must show a certificate that CA signed.
    pub async fn start(upstream: &str, cert: &Path, key: &Path, client_ca: Option<&Path>) -> Self {
        let chain = CertificateDer::pem_file_iter(cert)
            .expect("server certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("server certificate");
        let key = PrivateKeyDer::from_pem_file(key).expect("server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_file(ca).expect("CA"))
                    .expect("CA");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.into(),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(chain, key).expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the TLS front");
        let address = listener.local_addr().expect("address").to_string();
        let refused: Arc<AtomicUsize> = Arc::default();
        let counted = refused.clone();
        let upstream = upstream.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, upstream, counted) =
                    (acceptor.clone(), upstream.clone(), counted.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(mut tls) => {
                            if let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                            }
                        }
                        Err(_) => {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        Self {
            address,
            refused,
            task,
        }
    }

    /// TLS handshakes that failed so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
