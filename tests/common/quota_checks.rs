//! What the quota tests do and read back: a flood of one tenant's commands, a tenant's pending
//! timers (once, or sampled while the flood goes on), whether every command was handled, and the
//! rejections published.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;

use super::{Scratch, TestClient, eventually};

/// Far ahead: the timers of the quota tests stay pending.
pub fn later() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()
}

/// Publishes a ScheduleTimer due [`later`] for each `(tenant, key)`, in this order, pipelined;
/// returns each one's stream sequence once the broker has stored them all.
pub async fn publish_schedules(client: &TestClient, keys: &[(String, String)]) -> Vec<u64> {
    let mut acks = Vec::with_capacity(keys.len());
    for (tenant, id) in keys {
        let command = super::schedule_command(tenant, id, &super::rfc3339(later()), None);
        acks.push(
            client
                .js
                .publish(
                    format!("timer.cmd.schedule.{tenant}"),
                    serde_json::to_vec(&command).expect("json").into(),
                )
                .await
                .expect("publish"),
        );
    }
    let mut sequences = Vec::with_capacity(acks.len());
    for ack in acks {
        sequences.push(ack.await.expect("PubAck").sequence);
    }
    sequences
}

/// What [`flood`] sent, and what became of it once every command was handled.
pub struct Flood {
    pub sent: usize,
    /// Seconds the feed lasted, and from its start until every command was handled.
    pub fed: f64,
    pub span: f64,
    /// The tenant's pending timers (every key was new), and its rejections.
    pub accepted: f64,
    pub refused: f64,
    /// The most timers the tenant gained within less than a second of real time, sampled
    /// every 25 ms from before the feed until every command was handled.
    pub most_in_a_second: i64,
}

impl Flood {
    /// The rate promise at `limit` commands per second (docs/CONTRACT.md §9): every command
    /// decided once; never more than the limit within a second of real time, nor over the
    /// whole span; and at four times the limit, not starved below it over the feed.
    pub fn assert_within(&self, limit: f64) {
        let Self {
            sent,
            fed,
            span,
            accepted,
            refused,
            most_in_a_second,
        } = *self;
        assert_eq!(
            accepted + refused,
            sent as f64,
            "every command decided once"
        );
        assert!(
            most_in_a_second as f64 <= limit,
            "{most_in_a_second} accepted within less than a second of real time, past the limit \
             of {limit}"
        );
        assert!(
            accepted <= limit * (span + 1.0),
            "{accepted} accepted within {span:.2} s: more than {limit} per second"
        );
        assert!(
            accepted >= limit * (fed - 1.0),
            "{accepted} accepted in a {fed:.2} s feed at 4 times the limit of {limit}"
        );
    }
}

/// Feeds `tenant` four new keys (`<prefix>-<n>`, due at `due`) every 10 ms for 3 s, 400
/// commands a second, then waits until every command is handled, and counts; the tenant's
/// timers are sampled throughout.
pub async fn flood(
    client: &TestClient,
    scratch: &Scratch,
    tenant: &str,
    prefix: &str,
    due: DateTime<Utc>,
) -> Flood {
    let handled = Arc::new(AtomicBool::new(false));
    let readings = sample_timers(scratch, tenant, handled.clone());
    let started = Instant::now();
    let mut sent = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while started.elapsed() < Duration::from_secs(3) {
        tick.tick().await;
        let ids: Vec<String> = (sent..sent + 4)
            .map(|i| format!("{prefix}-{i:05}"))
            .collect();
        client.schedule_many(tenant, &ids, due).await;
        sent += 4;
    }
    let fed = started.elapsed().as_secs_f64();
    all_handled(client).await;
    let span = started.elapsed().as_secs_f64();
    handled.store(true, Ordering::Relaxed);
    let flood = Flood {
        sent,
        fed,
        span,
        accepted: pending(scratch, tenant).await as f64,
        refused: rejections(client, tenant).await.len() as f64,
        most_in_a_second: most_within_a_second(&readings.await.expect("the sampling")),
    };
    eprintln!(
        "{tenant}: {sent} sent in {fed:.2} s, handled within {span:.2} s: {} accepted \
         ({:.1}/s over the feed, at most {} within a second), {} refused",
        flood.accepted,
        flood.accepted / fed,
        flood.most_in_a_second,
        flood.refused
    );
    flood
}

/// A count of the tenant's timers, and the instants its query was sent and answered: the count
/// is of a moment between the two (a query slowed by a loaded machine answers late).
type Reading = (Instant, Instant, i64);

/// Reads `tenant`'s timers every 25 ms, on a connection of its own, with the test's clock,
/// until `done` (and once more after it).
fn sample_timers(
    scratch: &Scratch,
    tenant: &str,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Reading>> {
    let database = scratch.database();
    let sql = format!("SELECT count(*) FROM timer_schedules WHERE tenant_id = '{tenant}'");
    tokio::spawn(async move {
        use sea_orm::{ConnectionTrait, Statement};
        let db = timer_service::storage::db::connect(&database, 1)
            .await
            .expect("open the database");
        let mut readings = Vec::new();
        loop {
            let last = done.load(Ordering::Relaxed);
            let statement = Statement::from_string(db.get_database_backend(), sql.clone());
            let sent = Instant::now();
            let row = db.query_one_raw(statement).await.expect("count");
            let count = row.map_or(0, |row| row.try_get_by_index::<i64>(0).expect("count"));
            readings.push((sent, Instant::now(), count));
            if last {
                return readings;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
}

/// A command is counted in its window when its transaction decides it, and seen by a reading
/// once that transaction commits, a moment later: two readings [`COMMIT_SLACK`] less than a
/// second apart cannot see more than a second's decisions. With 100 ms, a PostgreSQL run with
/// three daemons beside the fault suite once saw 103 at a limit of 100 (commits trailing their
/// decisions further under load); a window kept per daemon would still show 150 and more
/// within the 750 ms left, and the total bound (`Flood::assert_within`) holds the rate over the
/// whole span.
const COMMIT_SLACK: Duration = Duration::from_millis(250);

/// The most timers added between two readings whose moments are surely less than a second
/// apart, commits' lag aside (from the earlier's query sent to the later's answered): what a
/// second of real time took in, at most. Stamped by answers alone, a slow first query made a
/// second look shorter than it was (134 in "less than a second" at a limit of 100, beside the
/// fault suite); without the slack, commits that trailed their decisions made 103.
fn most_within_a_second(readings: &[Reading]) -> i64 {
    let mut most = 0;
    for (i, (sent, _, count)) in readings.iter().enumerate() {
        for (_, later_answered, later_count) in &readings[i + 1..] {
            if later_answered.duration_since(*sent) >= Duration::from_secs(1) - COMMIT_SLACK {
                break;
            }
            most = most.max(later_count - count);
        }
    }
    most
}

/// Pending timers of `tenant`, read on a connection of the test's own.
pub async fn pending(scratch: &Scratch, tenant: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM timer_schedules WHERE tenant_id = '{tenant}' AND state = 'Scheduled'"
    );
    super::query_rows(&scratch.database(), &sql, |row| {
        row.try_get_by_index::<i64>(0).expect("count")
    })
    .await[0]
}

/// Waits until the broker holds no command for the daemon: every one published so far has
/// been stored or rejected.
pub async fn all_handled(client: &TestClient) {
    eventually(Duration::from_secs(20), "every command handled", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
}

/// The rejections published so far for `tenant`: the service call id of each refused command
/// and its reason.
pub async fn rejections(client: &TestClient, tenant: &str) -> Vec<(String, String)> {
    client
        .events(&format!("timer.evt.rejected.{tenant}"))
        .await
        .iter()
        .map(|event| {
            let payload = &event.envelope["payload"];
            let original: Value =
                serde_json::from_str(payload["original"].as_str().unwrap()).unwrap();
            (
                original["payload"]["serviceCallId"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                payload["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The value of `timer_quota_rejections_total` for `tenant` and `quota` on the `/metrics` of
/// the daemon listening at `addr`.
pub async fn quota_rejections(addr: &str, tenant: &str, quota: &str) -> Option<f64> {
    let (_, body) = super::http_get(addr, "/metrics").await?;
    body.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let wanted = series.starts_with("timer_quota_rejections_total{")
            && series.contains(&format!("tenant=\"{tenant}\""))
            && series.contains(&format!("quota=\"{quota}\""));
        wanted.then(|| value.parse().ok())?
    })
}
