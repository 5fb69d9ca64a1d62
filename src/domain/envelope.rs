//! `MessageEnvelope`: the JSON wrapper around every message on the wire (docs/CONTRACT.md §3).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::schema_types;
use super::timestamp::epoch_millis;

/// Every message in and out of the service. Field names are camelCase on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageEnvelope<P> {
    /// A UUID; the envelopes the service publishes carry a UUID v7 (time-ordered).
    pub id: Uuid,
    #[serde(rename = "type")]
    pub message_type: String,
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    /// When the message was written, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// In a command, used when the payload has none; in an event, the timer's.
    #[serde(default)]
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub causation_id: Option<String>,
    /// In DueTimeReached, the serviceCallId.
    #[serde(default)]
    pub aggregate_id: Option<String>,
    pub payload: P,
}

impl<P> MessageEnvelope<P> {
    /// A new envelope for a message the service publishes: a fresh UUID v7 id (time-ordered, so
    /// operators can sort events by id) stamped at `at`.
    pub fn new(message_type: &str, tenant_id: &str, at: DateTime<Utc>, payload: P) -> Self {
        Self {
            id: Uuid::now_v7(),
            message_type: message_type.to_owned(),
            tenant_id: tenant_id.to_owned(),
            timestamp_ms: epoch_millis(at),
            correlation_id: None,
            causation_id: None,
            aggregate_id: None,
            payload,
        }
    }
}
