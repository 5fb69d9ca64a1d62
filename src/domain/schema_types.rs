//! The rules of fields that recur in several messages, as named JSON Schema types: a message's
//! field says `#[schemars(with = "…")]` and the files under `schema/` get one `$defs` entry per
//! rule. These types hold nothing at run time; the messages keep plain strings, checked by
//! `check_tenant_id`, `check_service_call_id`, `check_correlation_id` and `parse_due_at`, and
//! written by `format_utc` (a test holds the schemas to those).

use schemars::JsonSchema;

use super::ids::{MAX_CORRELATION_ID_CHARS, MAX_SERVICE_CALL_ID_CHARS};
use super::tenant::MAX_TENANT_ID_CHARS;

/// Text without a control character (Unicode `Cc`, what `char::is_control` finds).
const NO_CONTROL_CHARACTERS: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";
/// `YYYY-MM-DDTHH:MM:SS.sssZ`, the one format the service writes instants in.
const UTC_MILLIS: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$";

/// A tenant id: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'. `_` alone is reserved: a
/// command or request for it is rejected, and a TimerCommandRejected whose subject names no
/// valid tenant has it.
#[derive(JsonSchema)]
pub struct TenantId(
    #[schemars(length(min = 1, max = MAX_TENANT_ID_CHARS), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub String,
);

/// A service call id: 1 to 128 characters, none a control character.
#[derive(JsonSchema)]
pub struct ServiceCallId(
    #[schemars(
        length(min = 1, max = MAX_SERVICE_CALL_ID_CHARS),
        regex(pattern = NO_CONTROL_CHARACTERS)
    )]
    pub String,
);

/// A correlation id: 1 to 256 characters, none a control character.
#[derive(JsonSchema)]
pub struct CorrelationId(
    #[schemars(
        length(min = 1, max = MAX_CORRELATION_ID_CHARS),
        regex(pattern = NO_CONTROL_CHARACTERS)
    )]
    pub String,
);

/// An instant a client writes: RFC 3339 with a zone, `Z` or an offset. The service also refuses
/// years outside 0001–9999 once converted to UTC.
#[derive(JsonSchema)]
pub struct ClientInstant(#[schemars(extend("format" = "date-time"))] pub String);

/// How late a timer may still fire: an ISO 8601 duration of whole days, hours, minutes and
/// seconds, at least a second and at most 3650 days. Years, months and weeks are refused: a
/// deadline must be one instant.
#[derive(JsonSchema)]
pub struct ExpireAfter(
    #[schemars(
        extend("format" = "duration"),
        regex(pattern = r"^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+S)?)?$"),
        extend("examples" = ["PT15M", "PT1H30M", "P1D"])
    )]
    pub String,
);

/// An instant the service writes: UTC with millisecond precision, `YYYY-MM-DDTHH:MM:SS.sssZ`,
/// so that text order is time order.
#[derive(JsonSchema)]
pub struct UtcInstant(
    #[schemars(extend("format" = "date-time"), regex(pattern = UTC_MILLIS))] pub String,
);

/// A timer's data: any JSON value, of at most `max_data_bytes` (16 KiB by default) as written,
/// nested at most `max_data_depth` (64) deep, with numbers of at most `max_data_number_chars`
/// (100) characters; in a ScheduleTimer, `null` is the same as none.
#[derive(JsonSchema)]
pub struct Data(pub serde_json::Value);
