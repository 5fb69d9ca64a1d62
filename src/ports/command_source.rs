//! `CommandSource` port: how commands enter the service, each with a handle to settle it with
//! the broker once the service has decided its fate.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::event_bus::BusError;
use crate::domain::{StreamIncarnation, TraceContext};

/// How long a delivered command that is neither settled nor reported in progress waits
/// before the broker delivers it again: short, so that the commands a daemon held when it was
/// killed or frozen come back within seconds. The adapter reports every command it delivered
/// and that is not settled yet in progress meanwhile, whether it waits in the adapter's
/// buffer or in the service (a slow commit): the core never has to.
pub const COMMAND_ACK_WAIT: Duration = Duration::from_secs(4);

/// Settles one delivered command with the broker.
#[async_trait]
pub trait Delivery: Send + Sync {
    /// The command is stored: never deliver it again.
    async fn ack(&self) -> Result<(), BusError>;
    /// The command can never be accepted: never deliver it again.
    async fn term(&self) -> Result<(), BusError>;
    /// The command could not be handled now: deliver it again after `delay`.
    async fn nak(&self, delay: Duration) -> Result<(), BusError>;
}

/// One delivered command, held until it is settled: by [`Self::ack`] once stored, by
/// [`Self::term`] once rejected, or by [`Self::hand_back`]. Dropped unsettled (a path that
/// forgot it, a task that panicked), it is handed back at once, so the broker delivers it
/// again without waiting out the ack wait and nothing is lost or held.
pub struct InboundCommand {
    pub subject: String,
    pub payload: Bytes,
    /// The broker's sequence for this command in its stream incarnation: with the
    /// incarnation's epoch, orders commands for one key.
    pub sequence: u64,
    /// The incarnation of the command stream that delivered it (a stream deleted and created
    /// again numbers from 1 anew).
    pub stream: Arc<StreamIncarnation>,
    /// How many times the broker has delivered it, this time included: more than 1 when it was
    /// handed back, or its daemon stopped before settling it.
    pub deliveries: u64,
    /// Shared with the adapter's keep-alive, which reports it in progress until it is
    /// dropped; `None` once settled.
    delivery: Option<Arc<dyn Delivery>>,
    /// The W3C trace context of its headers, carried to the events it causes.
    pub trace: Option<TraceContext>,
    /// When the daemon took it from the broker: where its span begins.
    pub received_at: SystemTime,
}

impl InboundCommand {
    pub fn new(
        subject: String,
        payload: Bytes,
        sequence: u64,
        stream: Arc<StreamIncarnation>,
        deliveries: u64,
        delivery: Arc<dyn Delivery>,
    ) -> Self {
        Self {
            subject,
            payload,
            sequence,
            stream,
            deliveries,
            delivery: Some(delivery),
            trace: None,
            received_at: SystemTime::now(),
        }
    }

    /// The command with the trace context its headers carried.
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// Its `process` span, begun at its delivery (nothing without an exporter or a trace
    /// context): end it once the command is settled.
    pub fn process_span(&self) -> crate::telemetry::spans::Span {
        crate::telemetry::spans::process(
            self.trace.as_ref(),
            &self.subject,
            self.sequence,
            self.payload.len(),
            self.received_at,
        )
    }

    /// The command as `count` parts settled one by one: the timers of a `ScheduleTimers`,
    /// each stored or rejected on its own. The message is settled once every part is:
    /// acknowledged when a part was stored, terminated when every part was rejected; and
    /// handed back as soon as one part is (or is dropped unsettled): the parts stored already
    /// are stored again, changing nothing, when it comes back.
    pub fn into_parts(mut self, count: usize) -> Vec<InboundCommand> {
        let parts: Option<Arc<dyn Delivery>> = self.delivery.take().map(|whole| {
            Arc::new(Parts(std::sync::Mutex::new(PartsLeft {
                whole: Some(whole),
                left: count,
                stored: false,
            }))) as Arc<dyn Delivery>
        });
        (0..count)
            .map(|_| InboundCommand {
                subject: self.subject.clone(),
                payload: self.payload.clone(),
                sequence: self.sequence,
                stream: self.stream.clone(),
                deliveries: self.deliveries,
                delivery: parts.clone(),
                trace: self.trace.clone(),
                received_at: self.received_at,
            })
            .collect()
    }

    /// The command is stored: never deliver it again.
    pub async fn ack(mut self) -> Result<(), BusError> {
        match self.delivery.take() {
            Some(delivery) => delivery.ack().await,
            None => Ok(()),
        }
    }

    /// The command can never be accepted: never deliver it again.
    pub async fn term(mut self) -> Result<(), BusError> {
        match self.delivery.take() {
            Some(delivery) => delivery.term().await,
            None => Ok(()),
        }
    }

    /// The command could not be handled now: deliver it again at once (the handler itself
    /// decides when to pull again).
    pub async fn hand_back(self) -> Result<(), BusError> {
        self.retry_after(Duration::ZERO).await
    }

    /// The command could not be settled now: deliver it again after `delay`.
    pub async fn retry_after(mut self, delay: Duration) -> Result<(), BusError> {
        match self.delivery.take() {
            Some(delivery) => delivery.nak(delay).await,
            None => Ok(()),
        }
    }
}

impl Drop for InboundCommand {
    fn drop(&mut self) {
        let Some(delivery) = self.delivery.take() else {
            return;
        };
        // Outside a runtime (the process is ending) the broker redelivers after its ack wait.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = delivery.nak(Duration::ZERO).await;
            });
        }
    }
}

/// The parts of one delivered message ([`InboundCommand::into_parts`]): the message's own
/// delivery until it is settled, and the parts not settled yet.
struct Parts(std::sync::Mutex<PartsLeft>);

struct PartsLeft {
    whole: Option<Arc<dyn Delivery>>,
    left: usize,
    /// Whether a part settled so far was stored.
    stored: bool,
}

impl Parts {
    /// Settles one part; the message once it was the last.
    async fn settled(&self, stored: bool) -> Result<(), BusError> {
        let last = {
            let mut parts = self.0.lock().unwrap_or_else(|e| e.into_inner());
            parts.left = parts.left.saturating_sub(1);
            parts.stored |= stored;
            match parts.left {
                0 => parts.whole.take().map(|whole| (whole, parts.stored)),
                _ => None,
            }
        };
        match last {
            Some((whole, true)) => whole.ack().await,
            Some((whole, false)) => whole.term().await,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Delivery for Parts {
    async fn ack(&self) -> Result<(), BusError> {
        self.settled(true).await
    }

    async fn term(&self) -> Result<(), BusError> {
        self.settled(false).await
    }

    async fn nak(&self, delay: Duration) -> Result<(), BusError> {
        let whole = {
            let mut parts = self.0.lock().unwrap_or_else(|e| e.into_inner());
            parts.whole.take()
        };
        match whole {
            Some(whole) => whole.nak(delay).await,
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for InboundCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundCommand")
            .field("subject", &self.subject)
            .field("sequence", &self.sequence)
            .field("stream", &self.stream)
            .field("deliveries", &self.deliveries)
            .field("bytes", &self.payload.len())
            .finish()
    }
}

#[async_trait]
pub trait CommandSource: Send + 'static {
    /// Waits up to `wait` for a command, then returns it with every other one already
    /// delivered, `max` at most. An empty batch means nothing arrived in time.
    async fn next_batch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboundCommand>, BusError>;

    /// Takes every command already requested from the broker and not yet returned, so a
    /// graceful stop leaves none of them waiting for a redelivery timeout.
    async fn drain(&mut self) -> Result<Vec<InboundCommand>, BusError>;
}

/// Makes a fresh source each time a CommandHandler (re)starts.
pub trait CommandSourceFactory: Send + Sync + 'static {
    fn create(&self) -> Box<dyn CommandSource>;
}

/// Commands the command stream holds that no consumer reads: a subject that matches no
/// consumer's filter (a five-token subject a client wrote, a line whose consumer is gone). They
/// are handed to the CommandHandler like any delivered command, so each is applied or rejected
/// (docs/CONTRACT.md §3); settling one removes it from the stream.
#[async_trait]
pub trait UnreadCommands: Send + Sync + 'static {
    /// At most `max` of them, oldest first per subject; empty when every stored command has a
    /// consumer.
    async fn unread(&self, max: usize) -> Result<Vec<InboundCommand>, BusError>;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records how the message was settled.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<&'static str>>);

    #[async_trait]
    impl Delivery for Recorded {
        async fn ack(&self) -> Result<(), BusError> {
            self.0.lock().unwrap().push("ack");
            Ok(())
        }
        async fn term(&self) -> Result<(), BusError> {
            self.0.lock().unwrap().push("term");
            Ok(())
        }
        async fn nak(&self, _: Duration) -> Result<(), BusError> {
            self.0.lock().unwrap().push("nak");
            Ok(())
        }
    }

    fn parts(count: usize) -> (Arc<Recorded>, Vec<InboundCommand>) {
        let recorded = Arc::new(Recorded::default());
        let stream = Arc::new(StreamIncarnation {
            name: "TIMER_COMMANDS".into(),
            created_ns: 1,
        });
        let whole = InboundCommand::new(
            "timer.cmd.schedule-many.acme".into(),
            Bytes::new(),
            7,
            stream,
            1,
            recorded.clone(),
        );
        (recorded, whole.into_parts(count))
    }

    fn settled(recorded: &Recorded) -> Vec<&'static str> {
        recorded.0.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn the_message_is_acknowledged_once_its_last_part_is_settled() {
        let (recorded, mut parts) = parts(3);
        parts.pop().unwrap().term().await.unwrap();
        parts.pop().unwrap().ack().await.unwrap();
        assert!(settled(&recorded).is_empty(), "a part is still unsettled");
        parts.pop().unwrap().term().await.unwrap();
        assert_eq!(settled(&recorded), ["ack"]);
    }

    #[tokio::test]
    async fn a_message_all_of_whose_parts_were_rejected_is_terminated() {
        let (recorded, parts) = parts(2);
        for part in parts {
            part.term().await.unwrap();
        }
        assert_eq!(settled(&recorded), ["term"]);
    }

    #[tokio::test]
    async fn one_part_handed_back_hands_the_message_back_at_once_and_only_once() {
        let (recorded, mut parts) = parts(3);
        parts.pop().unwrap().ack().await.unwrap();
        parts.pop().unwrap().hand_back().await.unwrap();
        assert_eq!(settled(&recorded), ["nak"]);
        parts.pop().unwrap().ack().await.unwrap();
        assert_eq!(settled(&recorded), ["nak"], "nothing after the hand-back");
    }

    #[tokio::test]
    async fn a_part_dropped_unsettled_hands_the_message_back() {
        let (recorded, mut parts) = parts(2);
        parts.pop().unwrap().ack().await.unwrap();
        drop(parts);
        tokio::time::timeout(Duration::from_secs(5), async {
            while settled(&recorded).is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the drop hands it back");
        assert_eq!(settled(&recorded), ["nak"]);
    }
}
