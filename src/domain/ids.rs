//! Service call ids and correlation ids: what the contract accepts as either, wherever one is
//! read (a command's payload, an API request). Tenant ids are in `tenant`.

pub const MAX_SERVICE_CALL_ID_CHARS: usize = 128;
/// Within what both backends store and index: PostgreSQL refuses NUL in text, and its btree
/// refuses keys of more than about 2.7 kB, either of which would block a whole batch.
pub const MAX_CORRELATION_ID_CHARS: usize = 256;

/// Checks a service call id: 1–128 characters, none of them a control character.
pub fn check_service_call_id(service_call_id: &str) -> Result<(), String> {
    let chars = service_call_id.chars().count();
    if chars == 0 || chars > MAX_SERVICE_CALL_ID_CHARS {
        return Err(format!(
            "serviceCallId must be 1–{MAX_SERVICE_CALL_ID_CHARS} characters, got {chars}"
        ));
    }
    if service_call_id.chars().any(char::is_control) {
        return Err(format!(
            "serviceCallId {service_call_id:?} contains a control character"
        ));
    }
    Ok(())
}

/// Checks a correlation id: 1–256 characters, none of them a control character (NUL included).
pub fn check_correlation_id(correlation_id: &str) -> Result<(), String> {
    let chars = correlation_id.chars().count();
    if chars == 0 || chars > MAX_CORRELATION_ID_CHARS {
        return Err(format!(
            "correlationId must be 1–{MAX_CORRELATION_ID_CHARS} characters, got {chars}"
        ));
    }
    if correlation_id.chars().any(char::is_control) {
        return Err(format!(
            "correlationId {correlation_id:?} contains a control character"
        ));
    }
    Ok(())
}
