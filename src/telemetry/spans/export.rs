//! Installing the OTLP/HTTP exporter of the daemon's spans from OpenTelemetry's standard
//! variables, and stopping it. A setting it cannot follow stops the start with its reason (exit
//! code 2), as an invalid configuration does, rather than leaving a daemon that silently
//! exports nothing.

use std::time::Duration;

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::http_client::{self, Variables};
use super::{INSTALLED, Installed};

/// How long a stop waits for the spans still queued to be sent.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Why spans cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "OTLP protocol {0:?} is not supported: this build exports with http/protobuf (the default) or http/json"
    )]
    Protocol(String),
    #[error("{variable}: cannot read {path}: {reason}")]
    File {
        variable: String,
        path: String,
        reason: String,
    },
    #[error("{0}")]
    Setting(String),
    #[error("TLS to the OTLP endpoint: {0}")]
    Tls(String),
    #[error("cannot set up the OTLP exporter: {0}")]
    Build(String),
}

/// The installed exporter: [`Exporter::shutdown`] sends what is still queued.
pub struct Exporter {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl Exporter {
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends the spans still queued and stops the exporter, waiting `SHUTDOWN_WAIT` at most
    /// (a collector that does not answer must not hold up a stop).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::warn!(error = %e, "spans still queued at the stop may not have been exported");
        }
    }
}

/// Installs the exporter when the standard variables ask for one: `OTEL_EXPORTER_OTLP_ENDPOINT`
/// or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set, and neither `OTEL_SDK_DISABLED=true` nor
/// `OTEL_TRACES_EXPORTER=none`. The HTTP client (timeout, TLS) is built here from the standard
/// variables; the exporter reads the rest (headers, compression, batching, sampler, resource)
/// itself. `instance` is this process's instance id (`service.instance.id`, as the daemon logs
/// it); `database` is `sqlite` or `postgresql`.
pub fn install(instance: &str, database: &'static str) -> Result<Option<Exporter>, ExportError> {
    let vars = Variables::from_env();
    let Some(endpoint) = vars.traces("ENDPOINT") else {
        return Ok(None);
    };
    let off = |name: &str, value: &str| {
        vars.get(name)
            .is_some_and(|v| v.eq_ignore_ascii_case(value))
    };
    if off("OTEL_SDK_DISABLED", "true") || off("OTEL_TRACES_EXPORTER", "none") {
        return Ok(None);
    }
    // Chosen here, not left to the exporter: built with JSON too, it would pick JSON over OTLP's
    // default, protobuf, and fall back to it for a protocol it lacks.
    let protocol = match vars
        .traces("PROTOCOL")
        .map(|p| p.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("http/protobuf") => opentelemetry_otlp::Protocol::HttpBinary,
        Some("http/json") => opentelemetry_otlp::Protocol::HttpJson,
        Some(other) => return Err(ExportError::Protocol(other.to_owned())),
    };
    let client = http_client::build(&vars, &endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(protocol)
        .build()
        .map_err(|e| ExportError::Build(e.to_string()))?;
    // The daemon's defaults first, then the standard variables, which override any of them.
    use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
    let mut resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name("timer-service")
        .with_attribute(KeyValue::new("service.instance.id", instance.to_owned()))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ]);
    if let Some(name) = vars.get("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(name.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let scope = InstrumentationScope::builder("timer-service")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(&provider, scope);
    if INSTALLED.set(Installed { tracer, database }).is_err() {
        // One exporter per process; a second daemon in it shares the first's.
        let _ = provider.shutdown();
        return Ok(None);
    }
    Ok(Some(Exporter { provider, endpoint }))
}
