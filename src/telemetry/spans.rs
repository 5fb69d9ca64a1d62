//! The daemon's own spans, joined to the trace a command came with (docs/CONTRACT.md §3, "Trace
//! context"), exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. Named as OpenTelemetry's semantic conventions
//! for messaging and databases say:
//!
//! - `process <command subject>` (consumer): from a command's delivery to its acknowledgement,
//!   or to its rejection (status error); its parent is the command's `traceparent`.
//! - `store timers` (client, database): the commit that stored the command; a child of the
//!   process span.
//! - `claim timers` (client, database): the claim that found the timer due; a child of the
//!   command's context, which the timer keeps.
//! - `publish <event subject>` (producer): from the hand-over of the `DueTimeReached` to the
//!   broker's acknowledgement. The event carries this span's context, so its consumer's span is
//!   a child of it (a rejection carries its process span's).
//!
//! Subjects appear as templates (`timer.cmd.schedule.{tenantId}`), the tenant as an attribute.
//! The daemon joins traces and begins none: a command without a `traceparent` gets no spans, and
//! sampling follows the caller's flag (`OTEL_TRACES_SAMPLER` may say otherwise). Spans are made
//! after the fact, from the instants measured, so no actor holds one open. Without an exporter
//! every function here returns at its first line and the messages carry the command's own
//! context on. The exporter is installed by `export`, with the HTTP client (timeout, TLS) of
//! `http_client`.

use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use crate::domain::TraceContext;

mod export;
mod http_client;
pub use export::{ExportError, Exporter, install};

/// The exporter's tracer, once installed, and the database its spans name.
struct Installed {
    tracer: SdkTracer,
    database: &'static str,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// One of the daemon's spans, or nothing (no exporter, no trace context, not sampled). Dropped,
/// it ends at that instant.
pub struct Span(Option<opentelemetry_sdk::trace::Span>);

impl Span {
    /// The trace context a message sent for this span carries: the span's own when it records,
    /// otherwise the command's (`fallback`) as it came.
    pub fn carried(&self, fallback: Option<&TraceContext>) -> Option<TraceContext> {
        let fallback = fallback?;
        match &self.0 {
            Some(span) if span.is_recording() => {
                let own = span.span_context();
                Some(fallback.with_parent(&own.span_id().to_string(), own.trace_flags().to_u8()))
            }
            _ => Some(fallback.clone()),
        }
    }

    /// Ends the span at `at`; `failure` (its `error.type` and description) sets its status.
    pub fn end(self, at: SystemTime, failure: Option<(&'static str, &str)>) {
        let Some(mut span) = self.0 else {
            return;
        };
        if let Some((kind, description)) = failure {
            span.set_attribute(KeyValue::new("error.type", kind));
            span.set_status(Status::error(description.to_owned()));
        }
        span.end_with_timestamp(at);
    }

    /// Ends a publish span at the broker's answer: the event stored (`true`: the broker held it
    /// already, a duplicate) or not acknowledged.
    pub fn answered(mut self, at: SystemTime, outcome: Result<bool, &str>) {
        match outcome {
            Ok(duplicate) => {
                self.set(KeyValue::new("timer.duplicate", duplicate));
                self.end(at, None);
            }
            Err(reason) => self.end(at, Some(("not_acknowledged", reason))),
        }
    }

    /// Adds an attribute (nothing when not recording).
    fn set(&mut self, attribute: KeyValue) {
        if let Some(span) = &mut self.0 {
            span.set_attribute(attribute);
        }
    }

    /// The `store timers` span under this one: the commit from `started` to `ended`, of
    /// `batch` commands.
    pub fn stored(&self, started: SystemTime, ended: SystemTime, batch: usize) {
        let (Some(installed), Some(parent)) = (INSTALLED.get(), &self.0) else {
            return;
        };
        if !parent.is_recording() {
            return;
        }
        // The daemon's own span as the parent: not a remote one.
        let own = parent.span_context();
        let local = SpanContext::new(
            own.trace_id(),
            own.span_id(),
            own.trace_flags(),
            false,
            own.trace_state().clone(),
        );
        let cx = Context::new().with_remote_span_context(local);
        database_span(installed, "store", &cx, started, batch).end_with_timestamp(ended);
    }
}

/// Whether spans are made at all: an exporter is installed.
pub fn enabled() -> bool {
    INSTALLED.get().is_some()
}

/// The `process` span of a command delivered at `received` on `subject` (the client's), begun
/// now with that start; end it once the command is settled.
pub fn process(
    trace: Option<&TraceContext>,
    subject: &str,
    sequence: u64,
    body_size: usize,
    received: SystemTime,
) -> Span {
    let sequence = KeyValue::new("messaging.nats.stream.sequence", sequence as i64);
    let operation = Operation {
        kind: SpanKind::Consumer,
        operation_type: "process",
        name: "process",
    };
    messaging_span(trace, operation, subject, body_size, received, sequence)
}

/// The `claim timers` span of a timer with `trace`, found due by a claim of `batch` timers asked
/// at `started` and answered at `ended`.
pub fn claimed(trace: Option<&TraceContext>, started: SystemTime, ended: SystemTime, batch: usize) {
    let (Some(installed), Some(cx)) = (INSTALLED.get(), trace.and_then(parent)) else {
        return;
    };
    database_span(installed, "claim", &cx, started, batch).end_with_timestamp(ended);
}

/// The `publish` span of an event about to be handed to the broker; end it at its answer.
pub fn publish(
    trace: Option<&TraceContext>,
    subject: &str,
    message_id: &str,
    body_size: usize,
) -> Span {
    // Every due event passes here: nothing is allocated or read without an exporter and a trace.
    if trace.is_none() || !enabled() {
        return Span(None);
    }
    let id = KeyValue::new("messaging.message.id", message_id.to_owned());
    let operation = Operation {
        kind: SpanKind::Producer,
        operation_type: "send",
        name: "publish",
    };
    messaging_span(trace, operation, subject, body_size, SystemTime::now(), id)
}

/// A messaging operation, as the conventions name it.
struct Operation {
    kind: SpanKind,
    /// `messaging.operation.type`.
    operation_type: &'static str,
    /// `messaging.operation.name`, and the span name's first word.
    name: &'static str,
}

/// A messaging span (`<operation> <subject template>`) under the caller's context `trace`, begun
/// at `start`, with `extra` beside the attributes every one has.
fn messaging_span(
    trace: Option<&TraceContext>,
    operation: Operation,
    subject: &str,
    body_size: usize,
    start: SystemTime,
    extra: KeyValue,
) -> Span {
    let (Some(installed), Some(cx)) = (INSTALLED.get(), trace.and_then(parent)) else {
        return Span(None);
    };
    let template = template(subject);
    let attributes = vec![
        KeyValue::new("messaging.system", "nats"),
        KeyValue::new("messaging.operation.type", operation.operation_type),
        KeyValue::new("messaging.operation.name", operation.name),
        KeyValue::new("messaging.destination.name", subject.to_owned()),
        KeyValue::new("messaging.message.body.size", body_size as i64),
        extra,
        KeyValue::new("messaging.destination.template", template.clone()),
    ];
    let span = installed
        .tracer
        .span_builder(format!("{} {template}", operation.name))
        .with_kind(operation.kind)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&installed.tracer, &cx);
    Span(Some(span))
}

/// A database operation's span (`<operation> timers`) under `cx`, begun at `started`.
fn database_span(
    installed: &Installed,
    operation: &'static str,
    cx: &Context,
    started: SystemTime,
    batch: usize,
) -> opentelemetry_sdk::trace::Span {
    let mut attributes = vec![
        KeyValue::new("db.system.name", installed.database),
        KeyValue::new("db.collection.name", "timers"),
        KeyValue::new("db.operation.name", operation),
    ];
    if batch > 1 {
        attributes.push(KeyValue::new("db.operation.batch.size", batch as i64));
    }
    installed
        .tracer
        .span_builder(format!("{operation} timers"))
        .with_kind(SpanKind::Client)
        .with_start_time(started)
        .with_attributes(attributes)
        .start_with_context(&installed.tracer, cx)
}

/// The subject with its last token, the tenant, as `{tenantId}`: span names stay few.
fn template(subject: &str) -> String {
    match subject.rsplit_once('.') {
        Some((head, _)) => format!("{head}.{{tenantId}}"),
        None => subject.to_owned(),
    }
}

/// The caller's span, as the remote parent of the daemon's.
fn parent(trace: &TraceContext) -> Option<Context> {
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.parent_id()).ok()?;
    let state = trace
        .tracestate
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(trace.flags()),
        true,
        state,
    );
    Some(Context::new().with_remote_span_context(context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_named_by_its_template() {
        assert_eq!(
            template("timer.cmd.schedule.acme"),
            "timer.cmd.schedule.{tenantId}"
        );
        assert_eq!(template("timer.evt.due.acme"), "timer.evt.due.{tenantId}");
    }

    #[test]
    fn without_an_exporter_messages_carry_the_commands_context() {
        let trace = TraceContext::from_headers(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None,
        );
        let span = publish(trace.as_ref(), "timer.evt.due.acme", "id", 10);
        assert_eq!(span.carried(trace.as_ref()), trace);
        assert_eq!(span.carried(None), None);
    }

    #[test]
    fn the_callers_context_becomes_the_remote_parent() {
        let trace = TraceContext::from_headers(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        let cx = parent(&trace).unwrap();
        let span = cx.span();
        let parent = span.span_context();
        assert!(parent.is_remote());
        assert!(!parent.is_sampled());
        assert_eq!(parent.trace_id().to_string(), trace.trace_id());
        assert_eq!(parent.span_id().to_string(), trace.parent_id());
        assert_eq!(parent.trace_state().get("congo"), Some("t61rcWkgMzE"));
    }
}
