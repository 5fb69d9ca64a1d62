//! The API's `cancel-many` (docs/CONTRACT.md §6): a `CancelTimers` ordered in the command
//! stream and applied before the reply, which counts the timers it cancelled; or, with
//! `dryRun`, only the count of those it would cancel now.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiError, Verb, request};
use crate::domain::cancel_many::{CancelFilter, CancellableState, FilterFields};
use crate::domain::schema_types;

/// The request of `cancel-many`: the filter of a `CancelTimers`, and `dryRun`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelManyRequest {
    /// The timers of this correlation id.
    #[schemars(with = "Option<schema_types::CorrelationId>")]
    correlation_id: Option<String>,
    /// The timers due at or after this instant.
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    due_from: Option<String>,
    /// The timers due before this instant.
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    due_to: Option<String>,
    /// Every pending timer of the tenant; only without another field (`state` aside).
    #[serde(default)]
    all: bool,
    /// `Scheduled`, the one state a cancel changes: said for clarity, it narrows nothing, and
    /// any other state is refused.
    state: Option<CancellableState>,
    /// Count the timers it would cancel now, and cancel none.
    #[serde(default)]
    dry_run: bool,
}

/// What a `cancel-many` asks: the filter as the command carries it, checked, and whether it is
/// a dry run.
#[derive(Debug, Clone, PartialEq)]
pub struct CancelManyAsk {
    pub fields: FilterFields,
    pub filter: CancelFilter,
    pub dry_run: bool,
}

pub fn parse_cancel_many_request(bytes: &[u8]) -> Result<CancelManyAsk, ApiError> {
    let request: CancelManyRequest = request(Verb::CancelMany, bytes)?;
    let fields = FilterFields {
        correlation_id: request.correlation_id,
        due_from: request.due_from,
        due_to: request.due_to,
        all: request.all,
        state: request.state,
    };
    let filter = fields.check().map_err(ApiError::bad_request)?;
    Ok(CancelManyAsk {
        fields,
        filter,
        dry_run: request.dry_run,
    })
}

/// The reply to `cancel-many`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelManyReply {
    /// Timers cancelled (and not scheduled again by a newer command since); with `dryRun`,
    /// those that would be cancelled now.
    count: u64,
    dry_run: bool,
}

pub fn cancel_many_reply(count: u64, dry_run: bool) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(&CancelManyReply { count, dry_run })
        .map_err(|e| ApiError::internal(format!("cannot encode reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_checked_filter_and_maybe_a_dry_run() {
        let ask =
            parse_cancel_many_request(br#"{"correlationId":"req-42","dryRun":true}"#).unwrap();
        assert!(ask.dry_run);
        assert_eq!(ask.filter.correlation_id.as_deref(), Some("req-42"));
        let stated = parse_cancel_many_request(br#"{"all":true,"state":"Scheduled"}"#).unwrap();
        assert_eq!(stated.filter, CancelFilter::default());
        assert!(
            !parse_cancel_many_request(br#"{"all":true}"#)
                .unwrap()
                .dry_run
        );
        for bad in [
            r#"{}"#,
            r#"{"dryRun":true}"#,
            r#"{"all":true,"dueTo":"2026-11-22T10:00:00Z"}"#,
            r#"{"serviceCallId":"sc-7"}"#,
            r#"{"all":"yes"}"#,
            r#"{"all":true,"state":"Cancelled"}"#,
        ] {
            let refused = parse_cancel_many_request(bad.as_bytes()).unwrap_err();
            assert_eq!(refused.code, 400, "{bad}: {refused:?}");
        }
    }
}
