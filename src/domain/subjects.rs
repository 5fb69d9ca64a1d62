//! Subject names of the wire contract (docs/CONTRACT.md §2), built from the configurable prefixes.
//! Every subject the service reads or writes is spelled here and nowhere else.

/// Default prefix of command subjects (`timer.cmd.>`).
pub const DEFAULT_COMMAND_PREFIX: &str = "timer.cmd";
/// Default prefix of event subjects (`timer.evt.>`).
pub const DEFAULT_EVENT_PREFIX: &str = "timer.evt";
/// Default prefix of the query and cancel API (`timer.api.<verb>.<tenantId>`).
pub const DEFAULT_API_PREFIX: &str = "timer.api";
/// The prefix of the inboxes NATS clients receive replies on, unless they chose another: API
/// replies go only under it.
pub const DEFAULT_INBOX_PREFIX: &str = "_INBOX";
/// Tenant token used on the rejection subject when no tenant could be read from the command.
pub const UNKNOWN_TENANT: &str = "_";

/// The commands, by the token after the command prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Schedule,
    /// `ScheduleTimers`: many timers of a tenant in one message.
    ScheduleMany,
    Cancel,
    /// `CancelTimers`: many of a tenant's timers by a filter.
    CancelMany,
}

impl CommandKind {
    pub const ALL: [CommandKind; 4] = [
        Self::Schedule,
        Self::ScheduleMany,
        Self::Cancel,
        Self::CancelMany,
    ];

    /// The subject token: `timer.cmd.<token>.<tenantId>`.
    pub fn token(self) -> &'static str {
        match self {
            CommandKind::Schedule => "schedule",
            CommandKind::ScheduleMany => "schedule-many",
            CommandKind::Cancel => "cancel",
            CommandKind::CancelMany => "cancel-many",
        }
    }
}

/// The subjects of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    command_prefix: String,
    event_prefix: String,
    api_prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new(
            DEFAULT_COMMAND_PREFIX,
            DEFAULT_EVENT_PREFIX,
            DEFAULT_API_PREFIX,
        )
    }
}

impl Subjects {
    pub fn new(command_prefix: &str, event_prefix: &str, api_prefix: &str) -> Self {
        let trim = |p: &str| p.trim_end_matches('.').to_owned();
        Self {
            command_prefix: trim(command_prefix),
            event_prefix: trim(event_prefix),
            api_prefix: trim(api_prefix),
        }
    }

    pub fn api_prefix(&self) -> &str {
        &self.api_prefix
    }

    /// `timer.api.<verb>.<tenantId>`.
    pub fn api(&self, verb: &str, tenant_id: &str) -> String {
        format!("{}.{verb}.{tenant_id}", self.api_prefix)
    }

    /// `timer.cmd.<kind>.<tenantId>`.
    pub fn command(&self, kind: CommandKind, tenant_id: &str) -> String {
        format!("{}.{}.{tenant_id}", self.command_prefix, kind.token())
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
        self.command(CommandKind::Schedule, tenant_id)
    }

    /// `timer.cmd.schedule-many.<tenantId>`.
    pub fn schedule_many(&self, tenant_id: &str) -> String {
        self.command(CommandKind::ScheduleMany, tenant_id)
    }

    /// `timer.cmd.cancel.<tenantId>`.
    pub fn cancel(&self, tenant_id: &str) -> String {
        self.command(CommandKind::Cancel, tenant_id)
    }

    /// `timer.cmd.cancel-many.<tenantId>`.
    pub fn cancel_many(&self, tenant_id: &str) -> String {
        self.command(CommandKind::CancelMany, tenant_id)
    }

    /// `timer.evt.due.<tenantId>`.
    pub fn due(&self, tenant_id: &str) -> String {
        format!("{}.due.{tenant_id}", self.event_prefix)
    }

    /// `timer.evt.expired.<tenantId>`.
    pub fn expired(&self, tenant_id: &str) -> String {
        format!("{}.expired.{tenant_id}", self.event_prefix)
    }

    /// `timer.evt.rejected.<tenantId>`.
    pub fn rejected(&self, tenant_id: &str) -> String {
        format!("{}.rejected.{tenant_id}", self.event_prefix)
    }

    /// The command and tenant of a `timer.cmd.<command>.<tenantId>` subject, or `None` when the
    /// subject names no known command or not exactly one tenant token.
    pub fn command_of<'s>(&self, subject: &'s str) -> Option<(CommandKind, &'s str)> {
        let rest = subject
            .strip_prefix(self.command_prefix.as_str())?
            .strip_prefix('.')?;
        let (token, tenant) = rest.split_once('.')?;
        let kind = CommandKind::ALL.into_iter().find(|k| k.token() == token)?;
        (!tenant.is_empty() && !tenant.contains('.')).then_some((kind, tenant))
    }

    /// The tenant token of a command subject `<prefix>.<command>.<tenantId>`, whatever the
    /// command (known or not): where a rejection is reported. `None` for any other shape, so a malformed
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
        assert_eq!(s.expired("acme"), "timer.evt.expired.acme");
        assert_eq!(s.cancel("acme"), "timer.cmd.cancel.acme");
        assert_eq!(s.cancel_many("acme"), "timer.cmd.cancel-many.acme");
        assert_eq!(s.schedule_many("acme"), "timer.cmd.schedule-many.acme");
        assert_eq!(
            s.command_of("timer.cmd.schedule-many.acme"),
            Some((CommandKind::ScheduleMany, "acme"))
        );
        assert_eq!(
            s.command_of("timer.cmd.cancel-many.acme"),
            Some((CommandKind::CancelMany, "acme"))
        );
        assert_eq!(s.api("get", "acme"), "timer.api.get.acme");
    }

    #[test]
    fn reads_the_command_and_tenant_of_a_command_subject() {
        let s = Subjects::default();
        assert_eq!(
            s.command_of("timer.cmd.schedule.acme"),
            Some((CommandKind::Schedule, "acme"))
        );
        assert_eq!(
            s.command_of("timer.cmd.cancel.acme"),
            Some((CommandKind::Cancel, "acme"))
        );
        assert_eq!(s.command_of("timer.cmd.schedule.a.b"), None);
        assert_eq!(s.command_of("timer.cmd.pause.acme"), None);
        assert_eq!(s.command_of("timer.cmd.schedule."), None);
        assert_eq!(s.command_tenant("timer.cmd.cancel.acme"), Some("acme"));
        assert_eq!(s.command_tenant("timer.cmd.schedule.acme.x"), None);
        assert_eq!(s.command_tenant("other.cmd.schedule.acme"), None);
    }
}
