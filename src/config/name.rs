//! The daemon's name: configured, the host name, or (several daemons on one database without a
//! configured name) the host name with a random suffix.

use super::validate::check_name;

/// The machine's host name, the default daemon name; `timer-service` when it cannot be read.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| check_name(name).is_ok())
        .unwrap_or_else(|| "timer-service".into())
}

/// Where the daemon's name comes from (see [`crate::Config::daemon_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonName {
    Configured(String),
    HostName(String),
    Generated(String),
}

impl DaemonName {
    pub fn as_str(&self) -> &str {
        match self {
            DaemonName::Configured(name)
            | DaemonName::HostName(name)
            | DaemonName::Generated(name) => name,
        }
    }

    /// For the start-up log: where the name comes from.
    pub fn origin(&self) -> &'static str {
        match self {
            DaemonName::Configured(_) => "configured",
            DaemonName::HostName(_) => "host name",
            DaemonName::Generated(_) => "host name and a random suffix",
        }
    }
}

/// `host` and six random hex digits, within the 64 characters a name may have.
pub(super) fn generated_name(host: &str) -> String {
    let random = uuid::Uuid::now_v7().simple().to_string();
    let suffix = &random[random.len() - 6..];
    let host: String = host.chars().take(64 - 1 - suffix.len()).collect();
    format!("{host}-{suffix}")
}
