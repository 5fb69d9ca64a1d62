//! W3C trace context carried from a command to the events it causes (docs/CONTRACT.md §3): the
//! `traceparent` and `tracestate` headers of a ScheduleTimer are stored with its timer and sent
//! again on its DueTimeReached; those of any refused command on its TimerCommandRejected. A
//! header that is not W3C's form is dropped, never a reason to refuse the command.

/// The header names (W3C Trace Context, level 1).
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` kept (W3C: 32 members; 512 characters is what a vendor may cut to).
pub const MAX_TRACESTATE: usize = 512;

/// A command's trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id, 32 hex>-<parent id, 16 hex>-<flags, 2 hex>`.
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a command's headers, if its `traceparent` is well formed; a `tracestate`
    /// that is not printable ASCII or is too long is left out.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let traceparent = traceparent?.trim();
        if !well_formed(traceparent) {
            return None;
        }
        let tracestate = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE)
            .filter(|s| s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        Some(Self {
            traceparent: traceparent.to_ascii_lowercase(),
            tracestate,
        })
    }

    /// The trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The caller's span: the parent id (16 hex digits).
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags (W3C: bit 0 says the caller records the trace).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// The same trace and `tracestate` under another parent (16 hex digits): what a message
    /// carries on once the daemon recorded a span of its own for it.
    pub fn with_parent(&self, parent_id: &str, flags: u8) -> Self {
        Self {
            traceparent: format!("00-{}-{parent_id}-{flags:02x}", self.trace_id()),
            tracestate: self.tracestate.clone(),
        }
    }

    /// The stored form: the `traceparent`, then the `tracestate` after a newline (which no
    /// header value holds).
    pub fn encode(&self) -> String {
        match &self.tracestate {
            Some(state) => format!("{}\n{state}", self.traceparent),
            None => self.traceparent.clone(),
        }
    }

    /// Reads the stored form back; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let (parent, state) = match text.split_once('\n') {
            Some((parent, state)) => (parent, Some(state)),
            None => (text, None),
        };
        Self::from_headers(Some(parent), state)
    }
}

/// Version 00's form: four dash-separated lowercase-or-uppercase hex fields of 2, 32, 16 and 2
/// digits; an id of all zeros is invalid, and version `ff` is forbidden.
fn well_formed(value: &str) -> bool {
    let fields: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let zeros = |s: &str| s.bytes().all(|b| b == b'0');
    fields.len() == 4
        && hex(fields[0], 2)
        && !fields[0].eq_ignore_ascii_case("ff")
        && hex(fields[1], 32)
        && !zeros(fields[1])
        && hex(fields[2], 16)
        && !zeros(fields[2])
        && hex(fields[3], 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_context_is_kept_and_stored_whole() {
        let trace = TraceContext::from_headers(Some(PARENT), Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.parent_id(), "00f067aa0ba902b7");
        assert_eq!(trace.flags(), 1);
        assert_eq!(TraceContext::decode(&trace.encode()), Some(trace.clone()));
        let bare = TraceContext::from_headers(Some(PARENT), None).unwrap();
        assert_eq!(bare.encode(), PARENT);
        assert_eq!(TraceContext::decode(PARENT), Some(bare));
    }

    #[test]
    fn a_context_under_another_parent_keeps_its_trace_and_state() {
        let trace = TraceContext::from_headers(Some(PARENT), Some("congo=t61rcWkgMzE")).unwrap();
        let child = trace.with_parent("b7ad6b7169203331", 0);
        assert_eq!(
            child.traceparent,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-00"
        );
        assert_eq!(child.tracestate, trace.tracestate);
        assert_eq!(TraceContext::decode(&child.encode()), Some(child));
    }

    #[test]
    fn a_malformed_traceparent_is_dropped() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::from_headers(Some(bad), None), None, "{bad}");
        }
        assert_eq!(TraceContext::from_headers(None, Some("a=b")), None);
    }

    #[test]
    fn a_bad_tracestate_is_left_out() {
        let long = "a=".to_owned() + &"b".repeat(MAX_TRACESTATE);
        for bad in [long.as_str(), "a=\u{7f}", ""] {
            let trace = TraceContext::from_headers(Some(PARENT), Some(bad)).unwrap();
            assert_eq!(trace.tracestate, None);
        }
    }
}
