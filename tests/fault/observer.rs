//! What the outside world sees: a plain core-NATS subscriber on `timer.evt.>` and `timer.cmd.>`
//! (every publish, duplicates the stream drops included, with the local receive time), the
//! whole event stream read back at the end, and the database's rows at the end.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use chrono::Utc;
use futures::StreamExt;

use super::checker::parse_due;
use super::history::{Instant, Key, Row, Seen};
use timer_service::storage::db::DatabaseTarget;

#[derive(Default)]
struct Observed {
    seen: Vec<Seen>,
    /// First receipt of an event per key (for the nemesis's probes).
    first_due: HashMap<Key, Instant>,
    /// Every (key, dueAt) an event was received for (for the nemesis's waits after a heal).
    fired: HashSet<(Key, Instant)>,
}

/// The subscriber. Its client reconnects by itself through broker restarts; what it misses
/// while the broker is away, the stream read at the end still has.
#[derive(Clone)]
pub struct Observer {
    observed: Arc<Mutex<Observed>>,
    client: async_nats::Client,
}

impl Observer {
    pub async fn start(url: &str) -> Self {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(url)
            .await
            .expect("the observer connects");
        let observed = Arc::new(Mutex::new(Observed::default()));
        for subject in ["timer.evt.>", "timer.cmd.>"] {
            let mut subscriber = client
                .subscribe(subject)
                .await
                .expect("the observer subscribes");
            let observed = observed.clone();
            tokio::spawn(async move {
                while let Some(message) = subscriber.next().await {
                    let at = Utc::now();
                    let subject = message.subject.to_string();
                    let mut observed = observed.lock().expect("observer lock");
                    if let Ok(event) = parse_due(&subject, &message.payload) {
                        observed.fired.insert((event.key.clone(), event.due_at));
                        observed.first_due.entry(event.key).or_insert(at);
                    }
                    observed.seen.push(Seen {
                        subject,
                        payload: message.payload.to_vec(),
                        at,
                    });
                }
            });
        }
        client
            .flush()
            .await
            .expect("the subscriptions are in place");
        Self { observed, client }
    }

    /// When an event for `key` was first received, if it was.
    pub fn fired(&self, key: &Key) -> Option<Instant> {
        self.observed
            .lock()
            .expect("observer lock")
            .first_due
            .get(key)
            .copied()
    }

    /// Whether an event for `key` due at `due_at` was received.
    pub fn fired_due(&self, key: &Key, due_at: Instant) -> bool {
        self.observed
            .lock()
            .expect("observer lock")
            .fired
            .contains(&(key.clone(), due_at))
    }

    /// Everything received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.observed.lock().expect("observer lock").seen.clone()
    }

    /// Makes sure what the broker has sent has been received.
    pub async fn flush(&self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.flush()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every message of `TIMER_EVENTS`, in stream order, with the time the broker stored it.
pub async fn read_event_stream(js: &jetstream::Context) -> Vec<Seen> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    let Ok(stream) = js.get_stream("TIMER_EVENTS").await else {
        eprintln!("the event stream cannot be read at the end");
        return out;
    };
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .expect("a consumer to read the event stream");
    while tokio::time::Instant::now() < deadline {
        let Ok(batch) = consumer
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(1))
            .messages()
            .await
        else {
            break;
        };
        let messages: Vec<_> = batch.collect().await;
        if messages.is_empty() {
            break;
        }
        for message in messages.into_iter().flatten() {
            let at = message
                .info()
                .map(|i| Instant::from_timestamp_nanos(i.published.unix_timestamp_nanos() as i64))
                .unwrap_or_else(|_| Utc::now());
            out.push(Seen {
                subject: message.subject.to_string(),
                payload: message.payload.to_vec(),
                at,
            });
        }
    }
    out
}

/// Every row of `timer_schedules`, read on a connection of the test's own.
pub async fn read_rows(database: &DatabaseTarget) -> Vec<Row> {
    crate::common::query_rows(
        database,
        "SELECT tenant_id, service_call_id, state, CAST(due_at AS TEXT) FROM timer_schedules",
        |row| {
            let text = |i| row.try_get_by_index::<Option<String>>(i).expect("a column");
            Row {
                key: Key {
                    tenant: text(0).unwrap_or_default(),
                    id: text(1).unwrap_or_default(),
                },
                state: text(2).unwrap_or_default(),
                due_at: text(3).as_deref().and_then(parse_instant),
            }
        },
    )
    .await
}

/// An instant as either backend writes it as text.
fn parse_instant(text: &str) -> Option<Instant> {
    text.parse().ok().or_else(|| {
        chrono::DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z")
            .ok()
            .map(|t| t.with_timezone(&Utc))
    })
}
