//! Subject names of the wire contract (CONTRACT.md §2), built from the configurable prefixes.
//! Every subject the service reads or writes is spelled here and nowhere else.

/// Default prefix of command subjects (`timer.cmd.>`).
pub const DEFAULT_COMMAND_PREFIX: &str = "timer.cmd";
/// Default prefix of event subjects (`timer.evt.>`).
pub const DEFAULT_EVENT_PREFIX: &str = "timer.evt";
/// Tenant token used on the rejection subject when no tenant could be read from the command.
pub const UNKNOWN_TENANT: &str = "_";

/// The subjects of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    command_prefix: String,
    event_prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new(DEFAULT_COMMAND_PREFIX, DEFAULT_EVENT_PREFIX)
    }
}

impl Subjects {
    pub fn new(command_prefix: &str, event_prefix: &str) -> Self {
        Self {
            command_prefix: command_prefix.trim_end_matches('.').to_owned(),
            event_prefix: event_prefix.trim_end_matches('.').to_owned(),
        }
    }

    /// Wildcard the command stream captures: `timer.cmd.>`.
    pub fn command_wildcard(&self) -> String {
        format!("{}.>", self.command_prefix)
    }

    /// Wildcard the event stream captures: `timer.evt.>`.
    pub fn event_wildcard(&self) -> String {
        format!("{}.>", self.event_prefix)
    }

    /// `timer.cmd.schedule.<tenantId>`.
    pub fn schedule(&self, tenant_id: &str) -> String {
        format!("{}.schedule.{tenant_id}", self.command_prefix)
    }

    /// `timer.evt.due.<tenantId>`.
    pub fn due(&self, tenant_id: &str) -> String {
        format!("{}.due.{tenant_id}", self.event_prefix)
    }

    /// `timer.evt.rejected.<tenantId>`.
    pub fn rejected(&self, tenant_id: &str) -> String {
        format!("{}.rejected.{tenant_id}", self.event_prefix)
    }

    /// The tenant named by a `timer.cmd.schedule.<tenantId>` subject, or `None` when the subject
    /// is not a schedule subject with exactly one tenant token.
    pub fn schedule_tenant<'s>(&self, subject: &'s str) -> Option<&'s str> {
        let rest = subject
            .strip_prefix(self.command_prefix.as_str())?
            .strip_prefix(".schedule.")?;
        (!rest.is_empty() && !rest.contains('.')).then_some(rest)
    }

    /// The tenant token of a command subject `<prefix>.<command>.<tenantId>`, whatever the
    /// command: where a rejection is reported. `None` for any other shape, so a malformed
    /// subject never reports one tenant's bytes to another.
    pub fn command_tenant<'s>(&self, subject: &'s str) -> Option<&'s str> {
        let rest = subject
            .strip_prefix(self.command_prefix.as_str())?
            .strip_prefix('.')?;
        match rest.split('.').collect::<Vec<_>>().as_slice() {
            [command, tenant] if !command.is_empty() && !tenant.is_empty() => Some(tenant),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_contract_subjects() {
        let s = Subjects::default();
        assert_eq!(s.command_wildcard(), "timer.cmd.>");
        assert_eq!(s.event_wildcard(), "timer.evt.>");
        assert_eq!(s.schedule("acme"), "timer.cmd.schedule.acme");
        assert_eq!(s.due("acme"), "timer.evt.due.acme");
        assert_eq!(s.rejected("_"), "timer.evt.rejected._");
    }

    #[test]
    fn reads_the_tenant_of_a_schedule_subject_only() {
        let s = Subjects::default();
        assert_eq!(s.schedule_tenant("timer.cmd.schedule.acme"), Some("acme"));
        assert_eq!(s.schedule_tenant("timer.cmd.schedule.a.b"), None);
        assert_eq!(s.schedule_tenant("timer.cmd.cancel.acme"), None);
        assert_eq!(s.schedule_tenant("timer.cmd.schedule."), None);
        assert_eq!(s.command_tenant("timer.cmd.cancel.acme"), Some("acme"));
        assert_eq!(s.command_tenant("timer.cmd.schedule.acme.x"), None);
        assert_eq!(s.command_tenant("other.cmd.schedule.acme"), None);
    }
}
