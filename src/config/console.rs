//! `[console]`: who may open the web console at `/console` on the `[http]` listener
//! (docs/CONTRACT.md §7). Settings only: `crate::console` serves it. Off unless a token is set.
//!
//! ```toml
//! [console]
//! operator_token = "…"          # sees and acts on every tenant
//! [console.tenant_tokens]
//! acme = "…"                    # sees and acts on tenant acme only
//! ```
//!
//! In the environment, `TIMER_CONSOLE_OPERATOR_TOKEN`, and `TIMER_CONSOLE_TENANT_TOKENS` as one
//! text replacing the file's table: `acme=…,globex=…`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::Secret;
use crate::domain::tenant::check_tenant_id;

/// Fewest characters of a token: a token is a password, guessed online at the listener.
pub const MIN_TOKEN_CHARS: usize = 16;

/// `[console]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// The operator's token: every tenant's pages and actions.
    pub operator_token: Option<Secret>,
    /// Tokens by tenant id: that tenant's pages and actions only.
    #[serde(deserialize_with = "tokens_from_table_or_text")]
    pub tenant_tokens: BTreeMap<String, Secret>,
}

impl ConsoleSettings {
    /// Whether the console is served: some token is set.
    pub fn enabled(&self) -> bool {
        self.operator_token.is_some() || !self.tenant_tokens.is_empty()
    }

    /// Tokens long enough, printable and without blanks, none twice (a token names one
    /// principal); tenant ids valid.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        let mut seen: Vec<&str> = Vec::new();
        let operator = self
            .operator_token
            .iter()
            .map(|token| ("console.operator_token", token));
        let tenants = self
            .tenant_tokens
            .values()
            .map(|token| ("console.tenant_tokens", token));
        for (setting, token) in operator.chain(tenants) {
            let token = token.expose();
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err((
                    setting,
                    format!("a token must have at least {MIN_TOKEN_CHARS} characters"),
                ));
            }
            if !token.chars().all(|c| c.is_ascii_graphic()) {
                return Err((
                    setting,
                    "a token must be printable ASCII without blanks (it travels in an HTTP header)"
                        .into(),
                ));
            }
            if seen.contains(&token) {
                return Err((setting, "the same token is given twice".into()));
            }
            seen.push(token);
        }
        for tenant in self.tenant_tokens.keys() {
            check_tenant_id(tenant).map_err(|e| ("console.tenant_tokens", e))?;
        }
        Ok(())
    }
}

/// A table of tenant id to token, or one text `acme=…,globex=…` (the environment's form).
fn tokens_from_table_or_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, Secret>, D::Error> {
    struct Tokens;

    impl<'de> Visitor<'de> for Tokens {
        type Value = BTreeMap<String, Secret>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of tenant ids to tokens, or text like \"acme=…,globex=…\"")
        }

        fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
            let mut tokens = BTreeMap::new();
            while let Some((tenant, token)) = map.next_entry::<String, Secret>()? {
                tokens.insert(tenant, token);
            }
            Ok(tokens)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            let mut tokens = BTreeMap::new();
            for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                // The token is never quoted in an error: only the tenant part is shown.
                let Some((tenant, token)) = entry.split_once('=') else {
                    return Err(E::custom(
                        "an entry is not tenant=token (the value is not shown)",
                    ));
                };
                let tenant = tenant.trim();
                if tokens
                    .insert(tenant.to_owned(), Secret::from(token.trim()))
                    .is_some()
                {
                    return Err(E::custom(format!("tenant {tenant:?} is given twice")));
                }
            }
            Ok(tokens)
        }
    }

    deserializer.deserialize_any(Tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(operator: Option<&str>, tenants: &[(&str, &str)]) -> ConsoleSettings {
        ConsoleSettings {
            operator_token: operator.map(Secret::from),
            tenant_tokens: tenants
                .iter()
                .map(|(t, k)| ((*t).to_owned(), Secret::from(*k)))
                .collect(),
        }
    }

    #[test]
    fn off_without_tokens_and_on_with_any() {
        assert!(!ConsoleSettings::default().enabled());
        assert!(settings(Some("operator-token-0123"), &[]).enabled());
        assert!(settings(None, &[("acme", "acme-token-0123456")]).enabled());
    }

    #[test]
    fn short_blank_shared_tokens_and_bad_tenants_are_refused() {
        let long = "operator-token-0123";
        assert!(
            settings(Some(long), &[("acme", "acme-token-0123456")])
                .validate()
                .is_ok()
        );
        assert!(settings(Some("short"), &[]).validate().is_err());
        assert!(
            settings(Some("with a blank in it!"), &[])
                .validate()
                .is_err()
        );
        assert!(settings(Some(long), &[("acme", long)]).validate().is_err());
        assert!(
            settings(None, &[("bad tenant", "acme-token-0123456")])
                .validate()
                .is_err()
        );
    }

    #[test]
    fn the_environment_text_names_tenants_and_hides_tokens() {
        #[derive(Deserialize)]
        struct Holder {
            #[serde(deserialize_with = "tokens_from_table_or_text")]
            tokens: BTreeMap<String, Secret>,
        }
        let holder: Holder =
            serde_json::from_str(r#"{"tokens": "acme=aaaaaaaaaaaaaaaa, globex=bbbbbbbbbbbbbbbb"}"#)
                .unwrap();
        assert_eq!(holder.tokens["acme"].expose(), "aaaaaaaaaaaaaaaa");
        assert_eq!(holder.tokens["globex"].expose(), "bbbbbbbbbbbbbbbb");
        let bad = serde_json::from_str::<Holder>(r#"{"tokens": "secret-without-tenant"}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(!bad.contains("secret-without-tenant"), "{bad}");
    }
}
