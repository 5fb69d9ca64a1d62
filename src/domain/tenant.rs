//! Tenant ids: what the contract accepts as a `tenantId`, wherever one is read (a command's
//! subject and payload, an API subject, the configuration).

pub const MAX_TENANT_ID_CHARS: usize = 64;

/// Checks a tenant id: 1–64 characters of `[A-Za-z0-9_-]`.
pub fn check_tenant_id(tenant_id: &str) -> Result<(), String> {
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
    }
}
