//! The exporter's HTTP client, from OpenTelemetry's standard variables: its timeout, and TLS for
//! an `https:` collector. TLS is rustls on the `ring` provider the broker and database clients
//! already build (no C library of its own). The server is verified against the certificates in
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` when set (only those, as the other SDKs do), else against
//! the system's; `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and `…_CLIENT_KEY` give a client
//! certificate for mutual TLS. Each has its `OTEL_EXPORTER_OTLP_TRACES_…` form, which wins.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::ExportError;

/// The exporter's timeout when `OTEL_EXPORTER_OTLP_TIMEOUT` is not set (the specification's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The process's environment as read once at the start; empty values count as unset.
pub(super) struct Variables(HashMap<String, String>);

impl Variables {
    pub fn from_env() -> Self {
        Self(
            std::env::vars()
                .filter(|(name, _)| name.starts_with("OTEL_"))
                .map(|(name, value)| (name, value.trim().to_owned()))
                .filter(|(_, value)| !value.is_empty())
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `OTEL_EXPORTER_OTLP_TRACES_<setting>`, else `OTEL_EXPORTER_OTLP_<setting>`.
    pub fn traces(&self, setting: &str) -> Option<String> {
        self.traces_named(setting).map(|(_, value)| value)
    }

    /// The same, with the name of the variable that gave it (for error messages).
    fn traces_named(&self, setting: &str) -> Option<(String, String)> {
        [
            format!("OTEL_EXPORTER_OTLP_TRACES_{setting}"),
            format!("OTEL_EXPORTER_OTLP_{setting}"),
        ]
        .into_iter()
        .find_map(|name| self.get(&name).map(|v| (name.clone(), v.to_owned())))
    }
}

/// The blocking client the exporter's thread posts to `endpoint` with. Built on a thread of its
/// own: reqwest's blocking client owns a runtime, which must not be made or dropped inside the
/// daemon's.
pub(super) fn build(
    vars: &Variables,
    endpoint: &str,
) -> Result<reqwest::blocking::Client, ExportError> {
    let timeout = match vars.traces_named("TIMEOUT") {
        None => DEFAULT_TIMEOUT,
        Some((name, ms)) => ms
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| ExportError::Setting(format!("{name}={ms:?}: expected milliseconds")))?,
    };
    let https = endpoint.to_ascii_lowercase().starts_with("https:");
    let tls = tls_config(vars, https)?;
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .timeout(timeout)
            .tls_backend_preconfigured(tls)
            .build()
    })
    .join()
    .map_err(|_| ExportError::Build("the HTTP client's thread panicked".into()))?
    .map_err(|e| ExportError::Build(e.to_string()))
}

/// TLS as the variables say. For a plain `http:` endpoint the roots are only those named (the
/// system's are not read for nothing).
fn tls_config(vars: &Variables, https: bool) -> Result<rustls::ClientConfig, ExportError> {
    let mut roots = rustls::RootCertStore::empty();
    match vars.traces_named("CERTIFICATE") {
        Some((name, path)) => {
            for cert in certificates(&name, &path)? {
                roots.add(cert).map_err(|e| file_error(&name, &path, e))?;
            }
        }
        None if https => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(error = %error, "a system certificate could not be read");
            }
            let (_, ignored) = roots.add_parsable_certificates(found.certs);
            if ignored > 0 {
                tracing::warn!(ignored, "system certificates that could not be used");
            }
            if roots.is_empty() {
                return Err(ExportError::Tls(
                    "the OTLP endpoint is HTTPS and no system certificate was found: name the collector's CA in OTEL_EXPORTER_OTLP_CERTIFICATE".into(),
                ));
            }
        }
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ExportError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let cert = vars.traces_named("CLIENT_CERTIFICATE");
    let key = vars.traces_named("CLIENT_KEY");
    match (cert, key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some((cert_name, cert_path)), Some((key_name, key_path))) => {
            let chain = certificates(&cert_name, &cert_path)?;
            let key = PrivateKeyDer::from_pem_file(&key_path)
                .map_err(|e| file_error(&key_name, &key_path, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ExportError::Tls(format!("{cert_name} and {key_name}: {e}")))
        }
        (Some((name, _)), None) | (None, Some((name, _))) => Err(ExportError::Setting(format!(
            "{name} is set without its pair: a client certificate needs both OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY"
        ))),
    }
}

/// The certificates of a PEM file; a file without one is an error, not an empty trust.
fn certificates(name: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, ExportError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(name, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(name, path, e))?;
    if certs.is_empty() {
        return Err(file_error(name, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn file_error(variable: &str, path: &str, reason: impl std::fmt::Display) -> ExportError {
    ExportError::File {
        variable: variable.to_owned(),
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}
