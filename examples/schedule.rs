//! A minimal timer-service client: schedules timers over NATS JetStream and prints each
//! `DueTimeReached` as it arrives, with its lateness (arrival − dueAt).
//!
//! ```text
//! cargo run --example schedule -- --tenant acme --in-secs 3
//! cargo run --release --example schedule -- --count 300 --in-secs 5 --spread-ms 3000
//! cargo run --example schedule -- --count 4 --cancel   # cancel every other one, then look one up
//! cargo run --release --example schedule -- --count 10000 --rate 1000 --in-secs 2 --json
//! cargo run --release --example schedule -- --count 20000 --in-secs 86400 --no-wait --json
//! ```
//!
//! `--rate` sends the timers live, each due `--in-secs` after it is sent (a service's steady
//! load); `--no-wait` only schedules (a rate figure); `--json` ends with one line of figures
//! (`clients/typescript/bench` runs it beside the TypeScript client on the same daemon).
//!
//! It speaks the wire contract with plain JSON, so it can be copied into any project that has
//! `async-nats`, `serde_json`, `uuid`, `chrono` and `tokio`.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Parser;
use futures::StreamExt;
use serde_json::{Value, json};

/// PubAcks awaited at once while scheduling.
const ACK_WINDOW: usize = 2_000;

#[derive(Debug, Parser)]
struct Args {
    /// NATS server the daemon listens to.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    url: String,
    /// Tenant to schedule for.
    #[arg(long, default_value = "acme")]
    tenant: String,
    /// How far ahead the (first) timer is due.
    #[arg(long, default_value_t = 3.0)]
    in_secs: f64,
    /// Number of timers.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Spread the timers' dueAt evenly over this many milliseconds.
    #[arg(long, default_value_t = 0)]
    spread_ms: u64,
    /// Cancel every other timer through the query API right after scheduling, look one up, and
    /// show that only the others fire.
    #[arg(long)]
    cancel: bool,
    /// Send the timers at this many per second, each due `--in-secs` after it is sent,
    /// instead of all at once.
    #[arg(long)]
    rate: Option<f64>,
    /// Do not wait for the timers: schedule, wait for the broker's acknowledgements, exit.
    #[arg(long)]
    no_wait: bool,
    /// End with one line of JSON: the scheduling rate and the lateness figures.
    #[arg(long)]
    json: bool,
}

/// A request to the query and cancel API (`timer.api.<verb>.<tenantId>`); an error reply
/// carries its code and reason in the micro protocol's headers.
async fn api(
    client: &async_nats::Client,
    verb: &str,
    tenant: &str,
    body: Value,
) -> Result<Value, Box<dyn std::error::Error>> {
    let reply = client
        .request(
            format!("timer.api.{verb}.{tenant}"),
            serde_json::to_vec(&body)?.into(),
        )
        .await?;
    if let Some(code) = reply
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Service-Error-Code"))
    {
        return Err(format!(
            "{verb}: error {code}: {}",
            String::from_utf8_lossy(&reply.payload)
        )
        .into());
    }
    Ok(serde_json::from_slice(&reply.payload)?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let client = async_nats::connect(&args.url).await?;
    let js = async_nats::jetstream::new(client.clone());

    // Subscribe first, so no event can slip past between scheduling and listening.
    let mut events = client
        .subscribe(format!("timer.evt.due.{}", args.tenant))
        .await?;
    let mut rejections = client
        .subscribe(format!("timer.evt.rejected.{}", args.tenant))
        .await?;
    // Each event is stamped as it arrives, while timers are still being sent (with --rate).
    let (stamped_tx, mut stamped) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = events.next().await {
            if stamped_tx.send((Utc::now(), message)).is_err() {
                break;
            }
        }
    });

    let run = uuid::Uuid::now_v7().simple().to_string();
    let ahead = chrono::Duration::milliseconds((args.in_secs * 1000.0) as i64);
    let first_due = Utc::now() + ahead;
    // With --rate the timers are spread over the time it takes to send them.
    let spread_ms = match args.rate {
        Some(rate) => (args.count as f64 * 1000.0 / rate) as u64,
        None => args.spread_ms,
    };
    let step = spread_ms.checked_div(args.count.max(1) as u64).unwrap_or(0);
    let started = tokio::time::Instant::now();
    let mut acks = futures::stream::FuturesUnordered::new();
    for i in 0..args.count {
        let due_at = match args.rate {
            Some(rate) => {
                tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / rate)).await;
                Utc::now() + ahead
            }
            None => first_due + chrono::Duration::milliseconds((step * i as u64) as i64),
        };
        let service_call_id = format!("example-{run}-{i}");
        let command = json!({
            "id": uuid::Uuid::now_v7(),
            "type": "ScheduleTimer",
            "tenantId": args.tenant,
            "timestampMs": Utc::now().timestamp_millis(),
            "correlationId": format!("req-{i}"),
            "aggregateId": service_call_id,
            "payload": {
                "tenantId": args.tenant,
                "serviceCallId": service_call_id,
                "dueAt": due_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            }
        });
        let subject = format!("timer.cmd.schedule.{}", args.tenant);
        // The envelope id as Nats-Msg-Id: a command sent twice is stored once.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", command["id"].as_str().unwrap_or_default());
        let payload = serde_json::to_vec(&command)?.into();
        acks.push(
            js.publish_with_headers(subject, headers, payload)
                .await?
                .into_future(),
        );
        // A window of PubAcks awaited at once: the context holds at most 5,000 unanswered.
        if acks.len() >= ACK_WINDOW
            && let Some(ack) = acks.next().await
        {
            ack?;
        }
    }
    while let Some(ack) = acks.next().await {
        ack?; // stored in the command stream: the daemon will get it
    }
    let scheduling = started.elapsed().as_secs_f64();
    println!(
        "scheduled {} timer(s) for tenant {:?} in {:.0} ms ({:.0}/s), first due {}",
        args.count,
        args.tenant,
        scheduling * 1000.0,
        args.count as f64 / scheduling,
        first_due.to_rfc3339_opts(SecondsFormat::Millis, true)
    );
    if args.no_wait {
        if args.json {
            println!("{}", figures(args.count, scheduling, &mut []));
        }
        return Ok(());
    }

    // Cancel every other timer: the API answers once the cancel is applied.
    let mut cancelled = std::collections::HashSet::new();
    if args.cancel {
        for i in (0..args.count).step_by(2) {
            let id = format!("example-{run}-{i}");
            let reply = api(
                &client,
                "cancel",
                &args.tenant,
                json!({ "serviceCallId": id }),
            )
            .await?;
            println!("cancel {id}: {}", reply["outcome"]);
            cancelled.insert(id);
        }
        let looked_up = format!("example-{run}-0");
        let reply = api(
            &client,
            "get",
            &args.tenant,
            json!({ "serviceCallId": looked_up }),
        )
        .await?;
        println!(
            "get {looked_up}: {}",
            serde_json::to_string_pretty(&reply["timer"])?
        );
    }
    let expected = args.count - cancelled.len();
    let last_due = first_due + chrono::Duration::milliseconds(spread_ms as i64);

    let mut lateness_ms = Vec::with_capacity(args.count);
    let deadline = tokio::time::Instant::now()
        + Duration::from_secs_f64(args.in_secs.max(0.0) + spread_ms as f64 / 1000.0 + 30.0);
    // With cancels, listen until a second past the last dueAt, to see that none of them fires.
    let quiet_after = last_due + chrono::Duration::seconds(1);
    while lateness_ms.len() < expected || (args.cancel && Utc::now() < quiet_after) {
        tokio::select! {
            Some((received, message)) = stamped.recv() => {
                let event: Value = serde_json::from_slice(&message.payload)?;
                let payload = &event["payload"];
                let Some(id) = payload["serviceCallId"].as_str() else { continue };
                if !id.starts_with(&format!("example-{run}-")) {
                    continue; // someone else's timer
                }
                if cancelled.contains(id) {
                    println!("cancelled timer {id} fired!");
                    continue;
                }
                let due: DateTime<Utc> = payload["dueAt"].as_str().unwrap_or_default().parse()?;
                let late = (received - due).num_microseconds().unwrap_or(0) as f64 / 1000.0;
                lateness_ms.push(late);
                if args.count <= 10 {
                    println!("DueTimeReached {}", serde_json::to_string_pretty(&event)?);
                    println!("lateness: {late:.1} ms (received − dueAt)");
                }
            }
            Some(message) = rejections.next() => {
                println!("rejected: {}", String::from_utf8_lossy(&message.payload));
            }
            _ = tokio::time::sleep(Duration::from_millis(100)), if lateness_ms.len() >= expected => {}
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!("gave up: {} of {} timers fired", lateness_ms.len(), expected);
                break;
            }
        }
    }
    if args.cancel {
        println!(
            "{} timers fired; none of the {} cancelled ones did",
            lateness_ms.len(),
            cancelled.len()
        );
    }
    if lateness_ms.len() > 1 {
        lateness_ms.sort_by(f64::total_cmp);
        let pct = |p: f64| lateness_ms[((lateness_ms.len() - 1) as f64 * p).round() as usize];
        println!(
            "{} timers: lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, min {:.1} ms",
            lateness_ms.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0),
            pct(0.0)
        );
    }
    if args.json {
        println!("{}", figures(args.count, scheduling, &mut lateness_ms));
    }
    Ok(())
}

/// The run's figures as one JSON object: how fast the broker took the timers, and how late
/// they arrived (`received − dueAt`, ms; absent when none was waited for).
fn figures(count: usize, scheduling_secs: f64, lateness_ms: &mut [f64]) -> Value {
    lateness_ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        (!lateness_ms.is_empty())
            .then(|| lateness_ms[((lateness_ms.len() - 1) as f64 * p).round() as usize])
    };
    json!({
        "scheduled": count,
        "schedulingSeconds": scheduling_secs,
        "perSecond": count as f64 / scheduling_secs,
        "received": lateness_ms.len(),
        "receivedMinusDueAt": { "p50Ms": pct(0.5), "p99Ms": pct(0.99), "maxMs": pct(1.0) },
    })
}
