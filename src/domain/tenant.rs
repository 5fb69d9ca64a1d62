//! Tenant ids: what the contract accepts as a `tenantId`, wherever one is read (a command's
//! subject and payload, an API subject, the configuration).

use super::subjects::UNKNOWN_TENANT;

pub const MAX_TENANT_ID_CHARS: usize = 64;

/// Checks a tenant id: 1–64 characters of `[A-Za-z0-9_-]`, but not `_` alone, the tenant token
/// of the subject that receives the rejections of commands that name no valid tenant: a tenant
/// `_` would be sent other senders' rejected commands.
pub fn check_tenant_id(tenant_id: &str) -> Result<(), String> {
    if tenant_id == UNKNOWN_TENANT {
        return Err(format!(
            "tenantId {UNKNOWN_TENANT:?} is reserved: its rejection subject receives the commands \
             that name no valid tenant"
        ));
    }
    let ok_chars = tenant_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if tenant_id.is_empty() || tenant_id.len() > MAX_TENANT_ID_CHARS || !ok_chars {
        return Err(format!(
            "tenantId {tenant_id:?} must be 1–{MAX_TENANT_ID_CHARS} characters of A-Z, a-z, 0-9, '_' or '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_id_rules() {
        assert!(check_tenant_id("acme_01-x").is_ok());
        assert!(check_tenant_id("").is_err());
        assert!(check_tenant_id(&"a".repeat(65)).is_err());
        assert!(check_tenant_id("a.b").is_err());
        assert!(check_tenant_id("ä").is_err());
        assert!(check_tenant_id("_").is_err());
        assert!(check_tenant_id("__").is_ok());
        assert!(check_tenant_id("_a").is_ok());
    }
}
