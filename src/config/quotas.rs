//! `[quotas]`: per-tenant limits (docs/CONTRACT.md §9). A default for every tenant, and
//! overrides by tenant id in `[quotas.tenants.<id>]`; zero or absent is unlimited.
//!
//! In the environment, `TIMER_QUOTAS_MAX_PENDING` and `TIMER_QUOTAS_COMMANDS_PER_SECOND` set the
//! default, and `TIMER_QUOTAS_TENANTS` the overrides as one text, replacing the file's table as
//! a whole: `acme:max_pending=1000,commands_per_second=50;globex:max_pending=10`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::domain::quota::{Limits, Quotas};
use crate::domain::tenant::check_tenant_id;

/// `[quotas]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaSettings {
    /// Most pending timers per tenant; 0 is unlimited.
    pub max_pending: u64,
    /// Most commands accepted per tenant within any one-second span; 0 is unlimited.
    pub commands_per_second: u32,
    /// Overrides by tenant id.
    #[serde(deserialize_with = "tenants_from_table_or_text")]
    pub tenants: BTreeMap<String, TenantQuotaSettings>,
}

/// `[quotas.tenants.<id>]`: a key left out takes the default; 0 is unlimited for this tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantQuotaSettings {
    pub max_pending: Option<u64>,
    pub commands_per_second: Option<u32>,
}

impl QuotaSettings {
    /// The limits these settings give every tenant.
    pub fn quotas(&self) -> Quotas {
        let default = Limits {
            max_pending: limit(self.max_pending),
            commands_per_second: limit(self.commands_per_second),
        };
        let tenants: HashMap<String, Limits> = self
            .tenants
            .iter()
            .map(|(tenant, o)| {
                let limits = Limits {
                    max_pending: o.max_pending.map_or(default.max_pending, limit),
                    commands_per_second: o
                        .commands_per_second
                        .map_or(default.commands_per_second, limit),
                };
                (tenant.clone(), limits)
            })
            .collect();
        Quotas::new(default, tenants)
    }

    /// Every override names a tenant id the contract accepts.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        for tenant in self.tenants.keys() {
            check_tenant_id(tenant).map_err(|e| ("quotas.tenants", e))?;
        }
        Ok(())
    }
}

/// Zero is no limit.
fn limit<T: Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

/// The overrides, from a table (the file) or from text (`TIMER_QUOTAS_TENANTS`).
fn tenants_from_table_or_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, TenantQuotaSettings>, D::Error> {
    struct TableOrText;

    impl<'de> Visitor<'de> for TableOrText {
        type Value = BTreeMap<String, TenantQuotaSettings>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a table of tenants, or text like \"acme:max_pending=1000,commands_per_second=50;globex:max_pending=10\"")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            parse_tenants(text).map_err(E::custom)
        }

        fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
            Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_any(TableOrText)
}

/// Parses `acme:max_pending=1000,commands_per_second=50;globex:max_pending=10`: entries
/// separated by `;`, each a tenant id, `:`, and `key=value` pairs separated by `,`. Blanks
/// around the parts are ignored; empty text is no override.
pub fn parse_tenants(text: &str) -> Result<BTreeMap<String, TenantQuotaSettings>, String> {
    let mut tenants = BTreeMap::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (tenant, pairs) = entry
            .split_once(':')
            .map(|(t, p)| (t.trim(), p.trim()))
            .ok_or_else(|| {
                format!("{entry:?} is not <tenantId>:<key>=<value>,… (a ':' is missing)")
            })?;
        check_tenant_id(tenant).map_err(|e| format!("{entry:?}: {e}"))?;
        if pairs.is_empty() {
            return Err(format!(
                "{entry:?} sets nothing: give max_pending=… and/or commands_per_second=…"
            ));
        }
        let mut settings = TenantQuotaSettings::default();
        for pair in pairs.split(',').map(str::trim) {
            let (key, value) = pair
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| format!("{tenant}: {pair:?} is not <key>=<value>"))?;
            let number = |what: &str| format!("{tenant}: {key} {value:?} is not {what}");
            let repeated = || format!("{tenant}: {key} is given twice");
            match key {
                "max_pending" => {
                    let v = value.parse().map_err(|_| number("a whole number ≥ 0"))?;
                    if settings.max_pending.replace(v).is_some() {
                        return Err(repeated());
                    }
                }
                "commands_per_second" => {
                    let v = value
                        .parse()
                        .map_err(|_| number("a whole number from 0 to 4294967295"))?;
                    if settings.commands_per_second.replace(v).is_some() {
                        return Err(repeated());
                    }
                }
                _ => {
                    return Err(format!(
                        "{tenant}: unknown key {key:?}, expected max_pending or commands_per_second"
                    ));
                }
            }
        }
        if tenants.insert(tenant.to_owned(), settings).is_some() {
            return Err(format!("tenant {tenant} is given twice"));
        }
    }
    Ok(tenants)
}
