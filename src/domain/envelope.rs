//! `MessageEnvelope`: the JSON wrapper around every message on the wire (docs/CONTRACT.md §3).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::timestamp::epoch_millis;

/// Every message in and out of the service. Field names are camelCase on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageEnvelope<P> {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub message_type: String,
    pub tenant_id: String,
    pub timestamp_ms: i64,
    #[serde(default)]
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub causation_id: Option<String>,
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
