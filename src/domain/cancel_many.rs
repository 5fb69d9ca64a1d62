//! `CancelTimers` (docs/CONTRACT.md §3): cancelling many of a tenant's pending timers at once,
//! by a filter. As a command it has its place in the tenant's line like every other command:
//! it cancels the timers whose last command came before it in the stream, never one a newer
//! command scheduled, and a timer already picked for firing fires.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ids::check_correlation_id;
use super::schema_types;
use super::timestamp::parse_due_at;

/// The envelope `type` of the command.
pub const CANCEL_TIMERS: &str = "CancelTimers";

/// `CancelTimers` payload as it appears on the wire, and the filter of the API's `cancelMany`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelTimersPayload {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[serde(flatten)]
    pub filter: FilterFields,
}

/// Which of the tenant's pending timers to cancel: those matching every field given, or all of
/// them with `all: true` and no other field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterFields {
    /// The timers of this correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::CorrelationId>")]
    pub correlation_id: Option<String>,
    /// The timers due at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    pub due_from: Option<String>,
    /// The timers due before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    pub due_to: Option<String>,
    /// Every pending timer of the tenant; only without another field (`state` aside).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// `Scheduled` only, the one state a cancel changes: said for clarity, it narrows nothing;
    /// any other state is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CancellableState>,
}

/// The state a `CancelTimers` selects in: only `Scheduled`. A timer claimed for firing fires,
/// and fired, expired and cancelled timers stay as they are, so a filter by another state would
/// select nothing; it is refused with its reason instead, and `state: "Scheduled"`, said for
/// clarity, narrows nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CancellableState {
    Scheduled,
}

/// A checked filter: the pending timers it selects match every part given; none given is all
/// of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelFilter {
    pub correlation_id: Option<String>,
    pub due_from: Option<DateTime<Utc>>,
    pub due_to: Option<DateTime<Utc>>,
}

impl FilterFields {
    /// The filter, or why it is refused: no field at all (a cancel of everything must say
    /// `all`), `all` beside another field, a bad correlation id or instant, an empty range.
    pub fn check(&self) -> Result<CancelFilter, String> {
        let given =
            self.correlation_id.is_some() || self.due_from.is_some() || self.due_to.is_some();
        match (self.all, given) {
            (false, false) => {
                return Err(
                    "give correlationId, dueFrom or dueTo, or all: true to cancel every \
                     pending timer of the tenant"
                        .into(),
                );
            }
            (true, true) => {
                return Err("all: true cancels every pending timer; give it without \
                     correlationId, dueFrom or dueTo"
                    .into());
            }
            _ => {}
        }
        if let Some(id) = &self.correlation_id {
            check_correlation_id(id)?;
        }
        let instant = |field: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| parse_due_at(t).map_err(|e| e.replacen("dueAt", field, 1)))
                .transpose()
        };
        let due_from = instant("dueFrom", &self.due_from)?;
        let due_to = instant("dueTo", &self.due_to)?;
        if let (Some(from), Some(to)) = (due_from, due_to)
            && from >= to
        {
            return Err(format!(
                "dueFrom {from} is not before dueTo {to}: the range holds no timer"
            ));
        }
        Ok(CancelFilter {
            correlation_id: self.correlation_id.clone(),
            due_from,
            due_to,
        })
    }
}

/// One accepted `CancelTimers`, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelMany {
    pub tenant_id: String,
    pub filter: CancelFilter,
    /// Its place in the command stream (see `domain::order`): it cancels only timers whose last
    /// command came before it, and marks those it cancels with it.
    pub seq: u64,
    /// When the service accepted it: the `cancelledAt` of the timers it cancels.
    pub received_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: serde_json::Value) -> FilterFields {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_filter_names_what_it_cancels_or_says_all() {
        let by_correlation = fields(serde_json::json!({ "correlationId": "req-42" }))
            .check()
            .unwrap();
        assert_eq!(by_correlation.correlation_id.as_deref(), Some("req-42"));
        let range = fields(serde_json::json!({
            "dueFrom": "2026-11-22T10:00:00Z", "dueTo": "2026-11-22T11:00:00Z"
        }))
        .check()
        .unwrap();
        assert!(range.due_from < range.due_to);
        assert_eq!(
            fields(serde_json::json!({ "all": true })).check().unwrap(),
            CancelFilter::default()
        );
        let stated = fields(serde_json::json!({ "all": true, "state": "Scheduled" }))
            .check()
            .unwrap();
        assert_eq!(stated, CancelFilter::default(), "state narrows nothing");
        let refused = serde_json::from_value::<FilterFields>(
            serde_json::json!({ "correlationId": "x", "state": "Reached" }),
        )
        .unwrap_err()
        .to_string();
        assert!(refused.contains("expected `Scheduled`"), "{refused}");
        for (bad, says) in [
            (serde_json::json!({}), "all: true"),
            (serde_json::json!({ "all": false }), "all: true"),
            (
                serde_json::json!({ "all": true, "correlationId": "x" }),
                "without",
            ),
            (serde_json::json!({ "correlationId": "" }), "correlation"),
            (serde_json::json!({ "dueFrom": "yesterday" }), "dueFrom"),
            (
                serde_json::json!({
                    "dueFrom": "2026-11-22T11:00:00Z", "dueTo": "2026-11-22T10:00:00Z"
                }),
                "not before",
            ),
        ] {
            let refused = fields(bad.clone()).check().unwrap_err();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }
}
