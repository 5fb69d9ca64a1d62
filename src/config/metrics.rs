//! `[metrics]`: which tenants get series of their own (docs/CONTRACT.md §7, §9). Settings only:
//! `telemetry` registers the series.
//!
//! A label takes one series per value, so only the tenants listed here are labelled: never
//! every tenant that writes, which would let clients grow the exporter without bound.

use serde::{Deserialize, Deserializer, Serialize};

use crate::domain::tenant::check_tenant_id;

/// Most tenants that may be labelled: each costs a dozen series and a count every few seconds.
pub const MAX_LABELLED_TENANTS: usize = 100;

/// `[metrics]` in `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Tenants whose timers are also counted under a `tenant` label. In the file a list
    /// (`["acme", "globex"]`); in `TIMER_METRICS_TENANTS` text separated by commas
    /// (`acme,globex`).
    #[serde(deserialize_with = "tenant_list")]
    pub tenants: Vec<String>,
}

impl MetricsSettings {
    /// Each entry a tenant id, none twice, at most [`MAX_LABELLED_TENANTS`].
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        const SETTING: &str = "metrics.tenants";
        if self.tenants.len() > MAX_LABELLED_TENANTS {
            return Err((
                SETTING,
                format!(
                    "{} tenants listed, more than the {MAX_LABELLED_TENANTS} that may be labelled",
                    self.tenants.len()
                ),
            ));
        }
        for (i, tenant) in self.tenants.iter().enumerate() {
            check_tenant_id(tenant).map_err(|e| (SETTING, e))?;
            if self.tenants[..i].contains(tenant) {
                return Err((SETTING, format!("{tenant:?} is listed twice")));
            }
        }
        Ok(())
    }
}

/// A list of tenant ids, or one text of them separated by commas (the environment's form).
fn tenant_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(
        untagged,
        expecting = "a list of tenant ids, or text like \"acme,globex\""
    )]
    enum List {
        Items(Vec<String>),
        Text(String),
    }
    Ok(match List::deserialize(deserializer)? {
        List::Items(items) => items,
        List::Text(text) => text
            .split(',')
            .map(str::trim)
            .filter(|tenant| !tenant.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}
