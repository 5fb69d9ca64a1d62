//! Service call ids and correlation ids: what the contract accepts as either, wherever one is
//! read (a command's payload, an API request). Tenant ids are in `tenant`.

pub const MAX_SERVICE_CALL_ID_CHARS: usize = 128;
/// Within what both backends store and index: PostgreSQL refuses NUL in text, and its btree
/// refuses keys of more than about 2.7 kB, either of which would block a whole batch.
pub const MAX_CORRELATION_ID_CHARS: usize = 256;

/// Checks a service call id: 1–128 characters, none of them a control character.
pub fn check_service_call_id(service_call_id: &str) -> Result<(), String> {
    check_id("serviceCallId", service_call_id, MAX_SERVICE_CALL_ID_CHARS)
}

/// Checks a correlation id: 1–256 characters, none of them a control character (NUL included).
pub fn check_correlation_id(correlation_id: &str) -> Result<(), String> {
    check_id("correlationId", correlation_id, MAX_CORRELATION_ID_CHARS)
}

/// The rule both ids share: 1–`max` characters, none of them a control character; `field` names
/// the id in the reason.
fn check_id(field: &str, id: &str, max: usize) -> Result<(), String> {
    let chars = id.chars().count();
    if chars == 0 || chars > max {
        return Err(format!("{field} must be 1–{max} characters, got {chars}"));
    }
    if id.chars().any(char::is_control) {
        return Err(format!("{field} {id:?} contains a control character"));
    }
    Ok(())
}
