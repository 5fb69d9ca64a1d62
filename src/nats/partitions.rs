//! The command stream in lines by tenant, read in turns, so one tenant's backlog of commands
//! does not stand in front of another tenant's (docs/design.md, "Commands in turns").
//!
//! The stream stores `<prefix>.<action>.<tenant>` as `<prefix>.<action>.<tenant>.<k>`, the
//! broker computing `k` from the tenant token (`{{partition(N,2)}}`, a hash): one tenant, one
//! line. Each line has a durable consumer, `<consumer>-p<k>`, filtering on `k`. The first
//! consumer is narrowed to every other shape (what an earlier version stored, malformed
//! subjects), so no two consumers overlap, which a work-queue stream refuses. (Storing the
//! lines outside the stream's subjects would keep clients from publishing into one, but
//! nats-server 2.15 then left some acknowledged messages in the work queue.)

use async_nats::jetstream::stream::SubjectTransform;

use super::streams::BrokerNames;
use crate::domain::subjects::CommandKind;

/// Most lines a deployment may have: each is a consumer and an open pull request.
pub const MAX_COMMAND_PARTITIONS: u16 = 256;

/// The first server version with stream subject transforms.
const TRANSFORMS_SINCE: (u64, u64) = (2, 10);

/// The subject shapes of one deployment's lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    /// `timer.cmd`: what clients publish under.
    prefix: String,
    consumer: String,
    count: u16,
}

impl Lines {
    /// `count` lines of the default subjects (the tests' layouts).
    #[cfg(test)]
    pub(crate) fn of(count: u16) -> Self {
        Self::new(&BrokerNames {
            command_partitions: count,
            ..BrokerNames::default()
        })
    }

    pub fn new(names: &BrokerNames) -> Self {
        let wildcard = names.subjects.command_wildcard();
        let prefix = wildcard.trim_end_matches(".>").to_owned();
        Self {
            prefix,
            consumer: names.consumer.clone(),
            count: names.command_partitions.max(1),
        }
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    /// The same deployment's subjects in `count` lines.
    pub fn with_count(&self, count: u16) -> Self {
        Self {
            count: count.max(1),
            ..self.clone()
        }
    }

    /// The first consumer's name.
    pub fn first_name(&self) -> &str {
        &self.consumer
    }

    /// Every subject of the command stream: what the first consumer reads with one line.
    pub fn wide(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// What the first consumer reads once lines exist: what an earlier version stored
    /// (`<prefix>.<action>.<tenant>`) and subjects of other shapes, which are rejected as
    /// always; every shape but a line's five tokens.
    pub fn first_filters(&self) -> Vec<String> {
        let p = &self.prefix;
        vec![format!("{p}.*"), format!("{p}.*.*"), format!("{p}.*.*.*.>")]
    }

    pub fn transform(&self) -> SubjectTransform {
        SubjectTransform {
            source: format!("{}.*.*", self.prefix),
            destination: format!(
                "{}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}.{{{{partition({},2)}}}}",
                self.prefix, self.count
            ),
        }
    }

    pub fn consumer_name(&self, line: u16) -> String {
        format!("{}-p{line}", self.consumer)
    }

    pub fn filter(&self, line: u16) -> String {
        format!("{}.*.*.{line}", self.prefix)
    }

    /// The line a consumer of this deployment reads, from its name.
    pub fn line_of(&self, consumer_name: &str) -> Option<u16> {
        let digits = consumer_name
            .strip_prefix(self.consumer.as_str())?
            .strip_prefix("-p")?;
        (!digits.starts_with('+')).then_some(())?;
        digits.parse().ok()
    }

    /// The line and the published subject of a command stored as
    /// `<prefix>.<action>.<tenant>.<line>`; `None` for any other stored subject.
    fn split(&self, stored: &str) -> Option<(u16, String)> {
        let rest = stored
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('.')?;
        let (published, line) = rest.rsplit_once('.')?;
        let (action, tenant) = published.split_once('.')?;
        if action.is_empty() || tenant.is_empty() || tenant.contains('.') {
            return None;
        }
        // Any line, also one beyond `count` left by a larger setting.
        let line = line.parse::<u16>().ok()?;
        Some((line, format!("{}.{published}", self.prefix)))
    }

    /// The consumer that reads a command stored on `stored`: its line's, or the first one.
    pub fn consumer_of(&self, stored: &str) -> String {
        match self.split(stored) {
            Some((line, _)) => self.consumer_name(line),
            None => self.consumer.clone(),
        }
    }

    /// The subjects, on the line that stores `stored`, of the commands that must be handled
    /// before it: its tenant's `ScheduleTimer`s, `ScheduleTimers` and `CancelTimer`s (each
    /// key's commands are its tenant's). Not a `CancelTimers`: one under way keeps its place by the rows' order,
    /// not by holding the commands after it (docs/CONTRACT.md §3). `None` for a subject that
    /// is not a line's.
    pub fn awaited_before(&self, stored: &str) -> Option<[String; 3]> {
        let (line, published) = self.split(stored)?;
        let (_, tenant) = published.rsplit_once('.')?;
        let p = &self.prefix;
        Some(
            [
                CommandKind::Schedule,
                CommandKind::ScheduleMany,
                CommandKind::Cancel,
            ]
            .map(|kind| format!("{p}.{}.{tenant}.{line}", kind.token())),
        )
    }
    /// The subject a client published a stored command on: the line token taken out, so the
    /// domain reads `<prefix>.<action>.<tenant>` whichever line carried it.
    pub fn client_subject(&self, stored: &str) -> String {
        self.split(stored)
            .map_or_else(|| stored.to_owned(), |(_, published)| published)
    }
}

/// Whether a server of `version` (`2.10.4`, `v2.9.10`) applies stream subject transforms.
pub fn supports_transforms(version: &str) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-'])
        .map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= TRANSFORMS_SINCE,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_token_picks_the_line_and_the_line_token_is_taken_out_again() {
        let l = Lines::of(16);
        assert_eq!(l.transform().source, "timer.cmd.*.*");
        assert_eq!(
            l.transform().destination,
            "timer.cmd.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(16,2)}}"
        );
        assert_eq!(l.filter(3), "timer.cmd.*.*.3");
        assert_eq!(
            l.first_filters(),
            ["timer.cmd.*", "timer.cmd.*.*", "timer.cmd.*.*.*.>"]
        );
        assert_eq!(
            l.client_subject("timer.cmd.schedule.acme.3"),
            "timer.cmd.schedule.acme"
        );
        assert_eq!(l.consumer_of("timer.cmd.cancel.acme.3"), "timer-service-p3");
        assert_eq!(l.consumer_of("timer.cmd.cancel.acme"), "timer-service");
        assert_eq!(
            l.awaited_before("timer.cmd.cancel-many.acme.3"),
            Some([
                "timer.cmd.schedule.acme.3".to_owned(),
                "timer.cmd.schedule-many.acme.3".to_owned(),
                "timer.cmd.cancel.acme.3".to_owned()
            ])
        );
        assert_eq!(l.awaited_before("timer.cmd.cancel-many.acme"), None);
        for untouched in [
            "timer.cmd.schedule.acme",
            "timer.cmd.schedule.acme.x",
            "timer.cmd.schedule.acme.3.4",
            "timer.cmdx.schedule.acme.3",
        ] {
            assert_eq!(l.client_subject(untouched), untouched);
        }
    }

    #[test]
    fn line_consumers_are_told_from_others_by_name() {
        let l = Lines::of(4);
        assert_eq!(l.consumer_name(2), "timer-service-p2");
        assert_eq!(l.line_of("timer-service-p2"), Some(2));
        assert_eq!(l.line_of("timer-service-p17"), Some(17));
        for other in [
            "timer-service",
            "timer-service-p",
            "timer-service-px",
            "other-p1",
        ] {
            assert_eq!(l.line_of(other), None, "{other}");
        }
        assert_eq!(l.line_of("timer-service-p+1"), None);
    }

    #[test]
    fn transforms_arrived_with_server_2_10() {
        for yes in ["2.10.0", "2.15.1", "v2.11.3", "3.0.0", "2.10.0-beta.1"] {
            assert!(supports_transforms(yes), "{yes}");
        }
        for no in ["2.9.10", "v2.9.25", "1.4.1", "", "nonsense"] {
            assert!(!supports_transforms(no), "{no}");
        }
    }
}
