//! Invariant (j): nothing acknowledged is stranded in the command stream. The stream is a work
//! queue: a command leaves it only when a daemon settles it (stored, or rejected and
//! terminated). Once the workload has ended, every fault has healed and every timer has fired,
//! what it still holds was acknowledged to a client and never applied nor rejected: a subject
//! no consumer reads, a line no daemon reads.

use super::super::history::Run;
use super::{Invariant, Verdict};

pub(super) fn check_leftovers(run: &Run, verdict: &mut Verdict) {
    let Some(at) = run.ended else { return };
    match run.commands_left {
        Some(0) => {}
        Some(left) => verdict.violate(
            Invariant::Consumed,
            at,
            None,
            format!("{left} commands still in the command stream after the run"),
        ),
        None => verdict.violate(
            Invariant::Consumed,
            at,
            None,
            "the command stream could not be read after the run".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::t;
    use super::*;

    #[test]
    fn a_command_left_in_the_stream_is_a_violation() {
        let mut run = Run {
            ended: Some(t(0)),
            commands_left: Some(0),
            ..Run::default()
        };
        let mut verdict = Verdict::default();
        check_leftovers(&run, &mut verdict);
        assert!(verdict.violations.is_empty());
        for left in [Some(3), None] {
            run.commands_left = left;
            let mut verdict = Verdict::default();
            check_leftovers(&run, &mut verdict);
            assert_eq!(verdict.violations.len(), 1, "{left:?}");
            assert_eq!(verdict.violations[0].invariant, Invariant::Consumed);
        }
    }
}
