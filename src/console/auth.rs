//! Who is asking: the token of the `Authorization: Bearer` header, compared in constant time
//! with every configured one. Tokens travel only in that header (set by the console's script
//! from what the person typed, kept in the tab's session storage): never in a URL, where logs
//! and `Referer` would carry them, and never in a cookie, which a browser would send along
//! with a request another site made (no cookie, nothing for a cross-site request to ride on).

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use subtle::ConstantTimeEq;

use crate::config::{ConsoleSettings, Secret};

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Every tenant.
    Operator,
    /// This tenant only.
    Tenant(String),
}

impl Principal {
    /// Whether this principal may see and act on `tenant`.
    pub fn may_see(&self, tenant: &str) -> bool {
        match self {
            Principal::Operator => true,
            Principal::Tenant(own) => own == tenant,
        }
    }
}

/// The configured tokens.
pub struct Tokens {
    operator: Option<Secret>,
    tenants: Vec<(String, Secret)>,
}

impl Tokens {
    pub fn new(settings: &ConsoleSettings) -> Self {
        Self {
            operator: settings.operator_token.clone(),
            tenants: settings
                .tenant_tokens
                .iter()
                .map(|(tenant, token)| (tenant.clone(), token.clone()))
                .collect(),
        }
    }

    /// The principal whose token the request presents, if any. Every configured token is
    /// compared, each in constant time, so the time taken tells nothing of which one matched
    /// or how much of one did.
    pub fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        let presented = headers
            .get(AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?
            .trim()
            .as_bytes();
        let same = |token: &Secret| bool::from(token.expose().as_bytes().ct_eq(presented));
        let mut found = None;
        if self.operator.as_ref().is_some_and(same) {
            found = Some(Principal::Operator);
        }
        for (tenant, token) in &self.tenants {
            if same(token) && found.is_none() {
                found = Some(Principal::Tenant(tenant.clone()));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(&ConsoleSettings {
            operator_token: Some("operator-token-0123".into()),
            tenant_tokens: [("acme".to_owned(), Secret::from("acme-token-0123456"))].into(),
        })
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn each_token_names_its_principal_and_nothing_else_does() {
        let tokens = tokens();
        assert_eq!(
            tokens.principal(&bearer("Bearer operator-token-0123")),
            Some(Principal::Operator)
        );
        assert_eq!(
            tokens.principal(&bearer("Bearer acme-token-0123456")),
            Some(Principal::Tenant("acme".into()))
        );
        for refused in [
            "Bearer acme-token-012345",
            "Bearer ",
            "Basic acme-token-0123456",
            "acme-token-0123456",
        ] {
            assert_eq!(tokens.principal(&bearer(refused)), None, "{refused}");
        }
        assert_eq!(tokens.principal(&HeaderMap::new()), None);
    }

    #[test]
    fn a_tenant_sees_its_own_only() {
        let acme = Principal::Tenant("acme".into());
        assert!(acme.may_see("acme"));
        assert!(!acme.may_see("globex"));
        assert!(!acme.may_see("acme "));
        assert!(Principal::Operator.may_see("globex"));
    }
}
