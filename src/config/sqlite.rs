//! `[sqlite]`: the SQLite file's durability and tuning. Settings only: the storage module
//! applies them when it opens the file.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// SQLite `synchronous` level.
///
/// `Full` is the default: WAL is fsynced at each commit, so a command acknowledged to the broker
/// survives a power loss, not only a process crash. `Normal` survives `kill -9` and is faster,
/// but an OS crash can drop the last commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum Synchronous {
    Off,
    Normal,
    #[default]
    Full,
    Extra,
}

impl FromStr for Synchronous {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" => Ok(Self::Off),
            "NORMAL" => Ok(Self::Normal),
            "FULL" => Ok(Self::Full),
            "EXTRA" => Ok(Self::Extra),
            other => Err(format!("{other:?} is not one of OFF, NORMAL, FULL, EXTRA")),
        }
    }
}

impl Synchronous {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "OFF",
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
            Self::Extra => "EXTRA",
        }
    }
}

/// SQLite tuning the operator may set (`[sqlite]` in `config.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqliteSettings {
    pub synchronous: Synchronous,
    /// How long a statement waits on a database locked by another process.
    #[serde(with = "super::duration", alias = "busy_timeout_ms")]
    pub busy_timeout: Duration,
    /// Page cache size in KiB (SQLite `cache_size = -N`).
    pub cache_kib: u32,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            cache_kib: 65_536,
        }
    }
}
