//! Metric names (docs/CONTRACT.md §7), the Prometheus recorder behind `/metrics`, the log
//! formats, and the daemon's own spans (`spans`).
//!
//! Metrics are recorded where the work happens, with the `metrics` macros (an atomic add each,
//! no round trip): commands in the CommandHandler, firings in the Poller, restarts in the
//! Supervisor, the broker connection in its event callback. The recorder is process-wide (the
//! `metrics` facade has one); every series carries the label `daemon` with the daemon's name.
//! Series with a `tenant` label exist only for the tenants `[metrics] tenants` lists
//! ([`TenantLabels`]).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::RejectionKind;

pub mod lanes;
pub mod recent;
pub mod spans;
mod tenant_labels;
pub use tenant_labels::TenantLabels;

/// Commands received, by `outcome`: `stored` (committed, then acknowledged) or `rejected`.
pub const COMMANDS_RECEIVED: &str = "timer_commands_received_total";
/// Timers fired: published, acknowledged by the broker, and marked `Reached`.
pub const SCHEDULES_PROCESSED: &str = "timer_schedules_processed_total";
/// `DueTimeReached` events the broker acknowledged as duplicates of one it held: a re-publish
/// after a mark that failed, or another daemon's publish of the same firing. Not counted as
/// fired again.
pub const EVENTS_DUPLICATE: &str = "timer_events_duplicate_total";
/// Timers fired past their `expireAfter` deadline: `TimerExpired` published instead of
/// `DueTimeReached` (counted in [`SCHEDULES_PROCESSED`] too).
pub const EXPIRED: &str = "timer_expired_total";
/// One firing round: claim what is due, publish it, mark it.
pub const POLLING_DURATION: &str = "timer_polling_duration_seconds";
/// From `dueAt` to the broker's acknowledgement of each timer's `DueTimeReached`: when the
/// event is stored, not when the timer was claimed (`reachedAt`).
pub const FIRE_LATENESS: &str = "timer_fire_lateness_seconds";
/// Pending (`Scheduled`) timers, counted every few seconds off the firing path.
pub const SCHEDULED: &str = "timer_scheduled";
/// Restarts of each actor (label `actor`).
pub const ACTOR_RESTARTS: &str = "timer_actor_restarts_total";
/// 1 while the broker connection is up.
pub const BROKER_CONNECTED: &str = "timer_broker_connected";
/// Losses of the broker link, by `cause`: `silent` (nothing came back) or `closed`.
pub const BROKER_LINKS_LOST: &str = "timer_broker_links_lost_total";
/// 1 while the database accepts writes.
pub const STORAGE_OK: &str = "timer_storage_ok";
/// API requests answered, by `verb` and `code` (200, 400, 404, 500).
pub const API_REQUESTS: &str = "timer_api_requests_total";
/// API requests dropped unanswered, by `reason`: `reply_not_inbox` (a reply subject outside the
/// inboxes) or `no_reply` (none at all).
pub const API_REQUESTS_DROPPED: &str = "timer_api_requests_dropped_total";
/// Finished timers deleted by retention.
pub const RETENTION_DELETED: &str = "timer_retention_deleted_total";
/// Commands rejected past a tenant's quota, by `quota` (`max_pending`, `commands_per_second`)
/// and `tenant`: the tenant id for a tenant with an override in `[quotas.tenants]`, `_other`
/// for every other, so the label set stays as small as the configuration.
pub const QUOTA_REJECTIONS: &str = "timer_quota_rejections_total";
/// A labelled tenant's pending timers (label `tenant`), counted with [`SCHEDULED`].
pub const TENANT_PENDING: &str = "timer_tenant_pending";
/// A labelled tenant's pending timers whose `dueAt` passed more than a second ago, as the
/// `stats` API counts `overdue`.
pub const TENANT_OVERDUE: &str = "timer_tenant_overdue";
/// A labelled tenant's timers fired: `DueTimeReached` acknowledged by the broker.
pub const TENANT_FIRED: &str = "timer_tenant_fired_total";
/// A labelled tenant's timers fired as `TimerExpired` ([`EXPIRED`]).
pub const TENANT_EXPIRED: &str = "timer_tenant_expired_total";
/// A labelled tenant's [`FIRE_LATENESS`].
pub const TENANT_FIRE_LATENESS: &str = "timer_tenant_fire_lateness_seconds";
/// A labelled tenant's rejected commands, by `reason`: `invalid`, `order`, `refused` or `quota`
/// ([`RejectionKind`]).
pub const TENANT_REJECTED: &str = "timer_tenant_rejected_total";

/// Operations waiting in a Persistence lane (label `lane`: `writer`, `firing`, `reader`).
pub const DATABASE_QUEUE_DEPTH: &str = "timer_database_queue_depth";
/// How long each database operation waited in its lane before it started (label `lane`).
pub const DATABASE_WAIT: &str = "timer_database_wait_seconds";

/// Bucket bounds for the latency histograms, in seconds: sub-millisecond to a minute.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
];

/// The installed recorder's handle, and the series of the tenants it labels.
static INSTALLED: OnceLock<(PrometheusHandle, TenantLabels)> = OnceLock::new();

/// Installs the process-wide recorder (once; later daemons of the same process share it, its
/// `daemon` label and its labelled `tenants`) and returns the handle that renders `/metrics`.
pub fn install(daemon: &str, tenants: &[String]) -> PrometheusHandle {
    INSTALLED
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .add_global_label("daemon", daemon)
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .expect("bucket bounds are not empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!(
                    "a metrics recorder was already installed; /metrics shows only its series"
                );
            }
            describe();
            (handle, TenantLabels::register(tenants))
        })
        .0
        .clone()
}

/// The series of the labelled tenants: none before a recorder is installed (nobody would read
/// them).
pub fn tenant_labels() -> &'static TenantLabels {
    static NONE: OnceLock<TenantLabels> = OnceLock::new();
    match INSTALLED.get() {
        Some((_, labels)) => labels,
        None => NONE.get_or_init(TenantLabels::default),
    }
}

/// Counts a fired timer, `lateness` after its `dueAt`, under its tenant's label if it has one
/// (the unlabelled totals are the caller's), and a TimerExpired in the total and under the
/// label too.
/// It is also kept in the tenant's recent activity (`recent`), as a TimerExpired when `expired`.
pub fn record_fired(tenant_id: &str, lateness: Duration, expired: bool) {
    tenant_labels().record_fired(tenant_id, lateness);
    if expired {
        metrics::counter!(EXPIRED).increment(1);
        tenant_labels().record_expired(tenant_id);
    }
    recent::recent().fired(tenant_id, lateness, expired, recent::now_ms());
}

/// Counts a rejected command under its tenant's label if it has one (the unlabelled total is
/// the caller's), and in its recent activity.
pub fn record_rejected(tenant_id: &str, kind: RejectionKind) {
    tenant_labels().record_rejected(tenant_id, kind);
    recent::recent().rejected(tenant_id, recent::now_ms());
}

/// Counts `n` stored commands of a tenant in its recent activity (the total is the caller's).
pub fn record_accepted(tenant_id: &str, n: u32) {
    recent::recent().accepted(tenant_id, n, recent::now_ms());
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        COMMANDS_RECEIVED,
        "Commands received, by outcome (stored, rejected)"
    );
    describe_counter!(
        SCHEDULES_PROCESSED,
        "Timers fired: published and marked Reached"
    );
    describe_counter!(
        EXPIRED,
        "Timers fired past their expireAfter deadline: TimerExpired published instead of DueTimeReached"
    );
    describe_counter!(
        EVENTS_DUPLICATE,
        "DueTimeReached events the broker already held (not counted as fired again)"
    );
    describe_histogram!(
        POLLING_DURATION,
        Unit::Seconds,
        "One firing round: claim, publish, mark"
    );
    describe_histogram!(
        FIRE_LATENESS,
        Unit::Seconds,
        "From dueAt to the broker's acknowledgement of each timer's event"
    );
    describe_gauge!(SCHEDULED, "Pending timers");
    describe_counter!(ACTOR_RESTARTS, "Actor restarts, by actor");
    describe_gauge!(BROKER_CONNECTED, "1 while connected to the broker");
    describe_counter!(
        BROKER_LINKS_LOST,
        "Losses of the broker link, by cause: silent (nothing came back) or closed"
    );
    describe_gauge!(STORAGE_OK, "1 while the database accepts writes");
    describe_counter!(API_REQUESTS, "API requests answered, by verb and code");
    describe_counter!(RETENTION_DELETED, "Finished timers deleted by retention");
    describe_gauge!(TENANT_PENDING, "A labelled tenant's pending timers");
    describe_gauge!(
        TENANT_OVERDUE,
        "A labelled tenant's pending timers due more than a second ago"
    );
    describe_counter!(
        TENANT_FIRED,
        "A labelled tenant's timers fired (DueTimeReached acknowledged by the broker)"
    );
    describe_counter!(
        TENANT_EXPIRED,
        "A labelled tenant's timers fired past their expireAfter deadline (TimerExpired)"
    );
    describe_histogram!(
        TENANT_FIRE_LATENESS,
        Unit::Seconds,
        "A labelled tenant's lateness: from dueAt to the broker's acknowledgement of the event"
    );
    describe_counter!(
        TENANT_REJECTED,
        "A labelled tenant's rejected commands, by reason (invalid, order, refused, quota)"
    );
    describe_counter!(
        QUOTA_REJECTIONS,
        "Commands rejected past a tenant's quota, by quota and tenant (_other: tenants without an override)"
    );
    describe_gauge!(
        DATABASE_QUEUE_DEPTH,
        "Database operations waiting in each lane of Persistence, by lane"
    );
    describe_histogram!(
        DATABASE_WAIT,
        Unit::Seconds,
        "How long each database operation waited in its lane before it started, by lane"
    );
    describe_counter!(
        API_REQUESTS_DROPPED,
        "API requests dropped unanswered, by reason (a reply subject outside the inbox prefix, none)"
    );
}

/// Sets up logging on stdout: `text` (coloured only on a terminal, never into a file or a
/// journal) or `json` (one object per line, every structured field such as `actor` or
/// `tenant_id` a key of its own). The level follows `RUST_LOG` (default `info`).
pub fn init_logs(format: crate::config::LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match format {
        crate::config::LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        crate::config::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}
