//! A running daemon follows the command stream's layout: every [`layout::LOOK_EVERY`] (and at
//! once after a line's request failed, as when its consumer was deleted) it reads the line
//! consumers that appeared since (another process, or `timer-service lines set`, changed the
//! lines) and forgets those deleted, so that every line the stream has is read within seconds
//! (docs/CONTRACT.md §9).

use tokio::time::Instant;

use super::layout;
use super::partitions::Lines;
use super::pull::Line;
use super::streams::BrokerNames;
use crate::ports::BusError;

pub struct Follower {
    next_look: Instant,
    /// The stream's lines at the last look, to log a change once.
    stream_lines: Option<u16>,
}

impl Follower {
    pub fn new() -> Self {
        Self {
            next_look: Instant::now(),
            stream_lines: None,
        }
    }

    /// The lines were just read from the broker: the next look is due after the interval.
    pub fn looked(&mut self) {
        self.next_look = Instant::now() + layout::LOOK_EVERY;
    }

    pub fn look_now(&mut self) {
        self.next_look = Instant::now();
    }

    /// When a look is due, brings `lines` (the first consumer's first, then one per line
    /// consumer) and their consumer `line_names` in line with the stream.
    pub async fn look(
        &mut self,
        js: &async_nats::jetstream::Context,
        names: &BrokerNames,
        subjects: &Lines,
        lines: &mut Vec<Line>,
        line_names: &mut Vec<String>,
    ) -> Result<(), BusError> {
        if Instant::now() < self.next_look {
            return Ok(());
        }
        self.looked();
        let failed = |e| BusError(format!("the command stream's consumers unavailable: {e}"));
        let (count, now) = layout::current(js, names, subjects).await.map_err(failed)?;
        for i in (1..lines.len()).rev() {
            if !now.contains(&line_names[i]) {
                tracing::info!(actor = "command_handler", consumer = %line_names[i],
                    stream_lines = count, "a line consumer is gone: no longer read");
                lines.remove(i);
                line_names.remove(i);
            }
        }
        let added: Vec<String> = now
            .into_iter()
            .filter(|n| !line_names.contains(n))
            .collect();
        for name in added {
            let consumer = js
                .get_consumer_from_stream(&name, &names.command_stream)
                .await
                .map_err(|e| failed(e.into()))?;
            tracing::info!(actor = "command_handler", consumer = %name, stream_lines = count,
                "reading a line consumer found on the command stream since the start");
            lines.push(Line::new(consumer));
            line_names.push(name);
        }
        if self
            .stream_lines
            .replace(count)
            .is_some_and(|before| before != count)
        {
            tracing::warn!(
                actor = "command_handler",
                stream_lines = count,
                command_partitions = names.command_partitions,
                "the command stream's lines are now {count} (command_partitions is {}): \
                 reading them",
                names.command_partitions
            );
        }
        Ok(())
    }
}
