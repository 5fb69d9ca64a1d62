//! The order of commands across incarnations of the command stream (docs/CONTRACT.md §3).
//!
//! JetStream numbers a stream's messages from 1. When the command stream is deleted and
//! created again (by an operator, or by the service finding it gone), numbering starts over,
//! yet every command of the new stream is newer than every command of the old one. Each
//! incarnation the service meets gets an epoch, in the order they were created, and a
//! command's place in the order is its epoch and its stream sequence in one number: the epoch
//! in the high bits. Rows keep that number as their `command_seq`, so every rule of §3 stays a
//! comparison of two numbers. The first incarnation a database meets is epoch 0, so its
//! sequences are the numbers rows stored before epochs existed.

/// Bits of a command's order that hold its stream sequence: 2^44 (17.6 trillion) commands per
/// incarnation, five years at 100,000 commands a second.
pub const SEQUENCE_BITS: u32 = 44;
/// Incarnations of the command stream a database can order: 2^19 (524,288). The order stays
/// below 2^63, so it fits the signed 64-bit columns of both databases.
pub const MAX_EPOCH: u32 = (1 << (63 - SEQUENCE_BITS)) - 1;

/// One incarnation of the command stream: its name and the instant the broker created it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamIncarnation {
    pub name: String,
    /// Creation time, nanoseconds since the Unix epoch, by the broker's clock.
    pub created_ns: i64,
}

impl std::fmt::Display for StreamIncarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} created at {} ns", self.name, self.created_ns)
    }
}

/// A command's place in the order: `epoch` of its stream incarnation, then its sequence there.
pub fn command_order(epoch: u32, sequence: u64) -> Result<u64, String> {
    if epoch > MAX_EPOCH {
        return Err(format!(
            "the command stream was created anew more than {MAX_EPOCH} times: commands can no longer be ordered"
        ));
    }
    if sequence >= 1 << SEQUENCE_BITS {
        return Err(format!(
            "stream sequence {sequence} is past the {SEQUENCE_BITS}-bit range commands are ordered in"
        ));
    }
    Ok((u64::from(epoch) << SEQUENCE_BITS) | sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_incarnation_orders_after_every_command_of_an_earlier_one() {
        let old_last = command_order(0, (1 << SEQUENCE_BITS) - 1).unwrap();
        let new_first = command_order(1, 1).unwrap();
        assert!(new_first > old_last);
        assert_eq!(
            command_order(0, 201).unwrap(),
            201,
            "epoch 0 is the plain sequence"
        );
        assert!(command_order(MAX_EPOCH, (1 << SEQUENCE_BITS) - 1).unwrap() <= i64::MAX as u64);
        assert!(command_order(MAX_EPOCH + 1, 1).is_err());
        assert!(command_order(1, 1 << SEQUENCE_BITS).is_err());
    }
}
