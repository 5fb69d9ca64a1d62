//! A client of the service that speaks the wire contract with plain JSON, and the events it
//! reads back.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{NatsServer, eventually, rfc3339, schedule_command};

/// One event read back from the event stream.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub subject: String,
    pub msg_id: Option<String>,
    /// The `traceparent` and `tracestate` headers.
    pub trace: (Option<String>, Option<String>),
    pub envelope: Value,
    /// When the broker stored it.
    pub stored_at: DateTime<Utc>,
}

impl StoredEvent {
    pub fn service_call_id(&self) -> &str {
        self.envelope["payload"]["serviceCallId"]
            .as_str()
            .unwrap_or_default()
    }

    pub fn due_at(&self) -> DateTime<Utc> {
        self.envelope["payload"]["dueAt"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("dueAt")
    }
}

/// A client of the service: publishes commands, reads events.
pub struct TestClient {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl TestClient {
    pub async fn connect(server: &NatsServer) -> Self {
        Self::connect_to(&server.url()).await
    }

    /// A client of the servers at `urls` (comma-separated: a cluster).
    pub async fn connect_to(urls: &str) -> Self {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(timer_service::nats::server_addrs(urls).expect("URLs"))
            .await
            .expect("connect");
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// Publishes `command` on `subject` with a `traceparent` (and the `tracestate`
    /// `congo=t61rcWkgMzE` beside it); none when `None`. Returns once the broker stored it.
    pub async fn publish_traced(&self, subject: &str, command: &Value, traceparent: Option<&str>) {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(parent) = traceparent {
            headers.insert("traceparent", parent);
            headers.insert("tracestate", "congo=t61rcWkgMzE");
        }
        self.js
            .publish_with_headers(
                subject.to_owned(),
                headers,
                serde_json::to_vec(command).expect("json").into(),
            )
            .await
            .expect("publish")
            .await
            .expect("stored");
    }

    /// Waits until the daemon has created the command stream (so publishes are stored).
    /// Waits for the command stream and the daemon's consumer on it (created together).
    pub async fn wait_for_command_stream(&self) {
        eventually(
            Duration::from_secs(15),
            "the TIMER_COMMANDS stream and its consumer",
            || async {
                self.js
                    .get_consumer_from_stream::<consumer::pull::Config, _, _>(
                        "timer-service",
                        "TIMER_COMMANDS",
                    )
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await
    }

    /// Publishes raw bytes on `subject` and waits for the broker to store them. Right after a
    /// stream is created a loaded broker may briefly answer "no responders" (nothing stored):
    /// that publish is sent again, as any client would.
    pub async fn publish_raw(&self, subject: &str, bytes: Vec<u8>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let ack = self
                .js
                .publish(subject.to_owned(), bytes.clone().into())
                .await
                .expect("publish")
                .await;
            match ack {
                Ok(_) => return,
                Err(e)
                    if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("PubAck: {e}"),
            }
        }
    }

    pub async fn schedule(
        &self,
        tenant: &str,
        service_call_id: &str,
        due_at: DateTime<Utc>,
        correlation_id: Option<&str>,
    ) {
        let command = schedule_command(tenant, service_call_id, &rfc3339(due_at), correlation_id);
        self.publish_raw(
            &format!("timer.cmd.schedule.{tenant}"),
            serde_json::to_vec(&command).expect("json"),
        )
        .await;
    }

    /// Publishes a ScheduleTimer for each of `ids`, a thousand PubAcks in flight at a time, and
    /// returns once the broker has stored every one.
    pub async fn schedule_many(&self, tenant: &str, ids: &[String], due_at: DateTime<Utc>) {
        let subject = format!("timer.cmd.schedule.{tenant}");
        for chunk in ids.chunks(1000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for id in chunk {
                let command = schedule_command(tenant, id, &rfc3339(due_at), None);
                let bytes = serde_json::to_vec(&command).expect("json");
                acks.push(
                    self.js
                        .publish(subject.clone(), bytes.into())
                        .await
                        .expect("publish"),
                );
            }
            for (id, ack) in chunk.iter().zip(acks) {
                if ack.await.is_err() {
                    let command = schedule_command(tenant, id, &rfc3339(due_at), None);
                    self.publish_raw(&subject, serde_json::to_vec(&command).expect("json"))
                        .await;
                }
            }
        }
    }

    /// Waits until every one of `ids` of `tenant` has fired at least once, and asserts that
    /// none was stored before its `dueAt`. Returns every due event of `tenant`.
    pub async fn await_all_fired(
        &self,
        tenant: &str,
        ids: &[String],
        timeout: Duration,
    ) -> Vec<StoredEvent> {
        let filter = format!("timer.evt.due.{tenant}");
        let events = eventually(timeout, "every timer to fire", || async {
            let events = self.events(&filter).await;
            let fired: std::collections::HashSet<&str> =
                events.iter().map(|e| e.service_call_id()).collect();
            ids.iter()
                .all(|id| fired.contains(id.as_str()))
                .then_some(events.clone())
        })
        .await;
        for event in &events {
            assert!(
                event.stored_at >= event.due_at(),
                "{} fired before dueAt",
                event.service_call_id()
            );
        }
        events
    }

    /// The distinct service call ids of `tenant` that have a `DueTimeReached` on the stream.
    pub async fn fired_ids(&self, tenant: &str) -> std::collections::HashSet<String> {
        self.events(&format!("timer.evt.due.{tenant}"))
            .await
            .iter()
            .map(|e| e.service_call_id().to_owned())
            .collect()
    }

    /// Every event stored so far on subjects matching `filter` (e.g. `timer.evt.due.>`), in
    /// stream order. Empty while the event stream does not exist yet.
    pub async fn events(&self, filter: &str) -> Vec<StoredEvent> {
        let Ok(stream) = self.js.get_stream("TIMER_EVENTS").await else {
            return Vec::new();
        };
        let Ok(consumer) = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: filter.to_owned(),
                deliver_policy: consumer::DeliverPolicy::All,
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(5),
                ..Default::default()
            })
            .await
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        loop {
            let Ok(mut batch) = consumer.fetch().max_messages(1000).messages().await else {
                break;
            };
            // The status that ends a no-wait fetch may never come (a fetch has no expiry of its
            // own): a batch silent for 3 s is taken as ended, and the caller polls again.
            let mut messages = Vec::new();
            let mut silent = false;
            loop {
                match tokio::time::timeout(
                    Duration::from_secs(3),
                    futures::StreamExt::next(&mut batch),
                )
                .await
                {
                    Ok(Some(message)) => messages.push(message),
                    Ok(None) => break,
                    Err(_) => {
                        silent = true;
                        break;
                    }
                }
            }
            if messages.is_empty() {
                break;
            }
            for message in messages.into_iter().flatten() {
                let stored_at = message
                    .info()
                    .map(|i| {
                        DateTime::<Utc>::from_timestamp_nanos(
                            i.published.unix_timestamp_nanos() as i64
                        )
                    })
                    .expect("info");
                out.push(StoredEvent {
                    subject: message.subject.to_string(),
                    msg_id: message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Msg-Id"))
                        .map(|v| v.to_string()),
                    trace: (
                        message
                            .headers
                            .as_ref()
                            .and_then(|h| h.get("traceparent"))
                            .map(|v| v.to_string()),
                        message
                            .headers
                            .as_ref()
                            .and_then(|h| h.get("tracestate"))
                            .map(|v| v.to_string()),
                    ),
                    envelope: serde_json::from_slice(&message.payload).expect("event is JSON"),
                    stored_at,
                });
            }
            if silent {
                break;
            }
        }
        out
    }

    /// Waits until at least `count` events match `filter`, and returns them all.
    pub async fn await_events(
        &self,
        filter: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<StoredEvent> {
        eventually(timeout, &format!("{count} events on {filter}"), || async {
            let events = self.events(filter).await;
            (events.len() >= count).then_some(events)
        })
        .await
    }

    /// Waits until the event for `service_call_id` of `tenant` is stored, and returns it.
    pub async fn await_due(
        &self,
        tenant: &str,
        service_call_id: &str,
        timeout: Duration,
    ) -> StoredEvent {
        let filter = format!("timer.evt.due.{tenant}");
        eventually(
            timeout,
            &format!("DueTimeReached for {service_call_id}"),
            || async {
                self.events(&filter)
                    .await
                    .into_iter()
                    .find(|e| e.service_call_id() == service_call_id)
            },
        )
        .await
    }

    /// Schedules a sentinel timer due now and waits for it: every command published before it
    /// has then been handled, and everything due before it has fired.
    /// Waits until the API answers (the responder has started).
    pub async fn api_ready(&self) {
        eventually(Duration::from_secs(15), "the API to answer", || async {
            self.client
                .request("timer.api.stats.acme", "{}".into())
                .await
                .ok()
                .map(|_| ())
        })
        .await
    }

    pub async fn barrier(&self, tenant: &str) {
        let id = format!("sentinel-{}", uuid::Uuid::now_v7());
        self.schedule(tenant, &id, Utc::now(), None).await;
        self.await_due(tenant, &id, Duration::from_secs(15)).await;
    }

    /// Number of events for `service_call_id` on `tenant`'s due subject.
    pub async fn count_due(&self, tenant: &str, service_call_id: &str) -> usize {
        self.events(&format!("timer.evt.due.{tenant}"))
            .await
            .iter()
            .filter(|e| e.service_call_id() == service_call_id)
            .count()
    }

    /// Commands the broker still holds for the daemon (undelivered or unacknowledged): the
    /// command stream is a work queue, so every message still in it, whichever consumer (line)
    /// reads it.
    pub async fn commands_outstanding(&self) -> u64 {
        // A broker busy with a backlog may let one request time out: asked again, for 10 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = match self.js.get_stream("TIMER_COMMANDS").await {
                Ok(mut stream) => stream
                    .info()
                    .await
                    .map(|info| info.state.messages)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match answer {
                Ok(messages) => return messages,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("command stream: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits, up to `timeout`, until the command stream holds nothing: every command sent so
    /// far was applied and acknowledged by the daemon.
    pub async fn await_commands_applied(&self, timeout: Duration) {
        eventually(timeout, "the command stream to be empty", || async {
            (self.commands_outstanding().await == 0).then_some(())
        })
        .await
    }

    /// The command stream as the broker describes it now.
    pub async fn command_stream_info(&self) -> jetstream::stream::Info {
        let mut stream = self.js.get_stream("TIMER_COMMANDS").await.expect("stream");
        stream.info().await.expect("stream info").clone()
    }

    /// The names of the command stream's consumers, sorted.
    pub async fn command_consumer_names(&self) -> Vec<String> {
        use futures::TryStreamExt;
        let stream = self.js.get_stream("TIMER_COMMANDS").await.expect("stream");
        let mut names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
        names.sort();
        names
    }

    /// Deliveries the consumers of the command stream have made so far (the first one and each
    /// line's), redeliveries included.
    pub async fn commands_delivered(&self) -> Option<u64> {
        use futures::TryStreamExt;
        let stream = self.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
        let mut delivered = 0;
        for name in names {
            let mut consumer: consumer::PullConsumer = stream.get_consumer(&name).await.ok()?;
            delivered += consumer.info().await.ok()?.delivered.consumer_sequence;
        }
        Some(delivered)
    }

    /// Commands delivered to the daemon and not yet acknowledged, over every consumer of the
    /// command stream (the first one and each line's).
    pub async fn commands_held(&self) -> u64 {
        use futures::TryStreamExt;
        let stream = self
            .js
            .get_stream("TIMER_COMMANDS")
            .await
            .expect("command stream");
        let names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
        let mut held = 0;
        for name in names {
            let mut consumer: consumer::PullConsumer =
                stream.get_consumer(&name).await.expect("consumer");
            held += consumer
                .info()
                .await
                .expect("consumer info")
                .num_ack_pending as u64;
        }
        held
    }

    /// A raw API request on `subject`: the error code header (if any) and the JSON body.
    /// Waited for as long as a NATS client's usual request timeout (the API answers within
    /// it, docs/CONTRACT.md §6): a flood of a tenant's cancels queues for its turns, and on a
    /// loaded machine the last of 300 waited more than 10 s.
    pub async fn api_request(&self, subject: &str, body: Value) -> (Option<u16>, Value) {
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            self.client.request(
                subject.to_owned(),
                serde_json::to_vec(&body).unwrap().into(),
            ),
        )
        .await
        .expect("an answer in time")
        .expect("a reply");
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|c| c.as_str().parse().unwrap());
        let body = serde_json::from_slice(&reply.payload).expect("a JSON body");
        (code, body)
    }
}
