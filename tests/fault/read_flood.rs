//! One tenant's flood of heavy API reads, as a fault: tenant [`WHALE`] holds tens of thousands
//! of pending timers (stored before the daemon starts, as a service that has run a while holds
//! them) and asks `stats` with a day's forecast and `list` pages of 1,000 from many clients at
//! once, each asking again as soon as it is answered, for a few seconds. Meanwhile the workload
//! keeps scheduling, and each workload tenant has a timer due every half second of the flood:
//! none may wait for the whale's reads (invariant h), and every request must be answered (g).

use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use serde_json::json;
use timer_service::storage::db::DatabaseTarget;

use super::history::{ApiRequest, Instant, Key, ReadFlood};
use super::workload::{Client, TENANTS};

/// The tenant that floods the API with heavy reads; not one of the workload's.
pub const WHALE: &str = "whale";
/// The whale's pending timers: enough that a day's forecast, or a page of 1,000, costs the
/// database something (its index walked, its rows read).
const WHALE_TIMERS: u64 = 30_000;
/// How long the whale keeps asking.
const FLOOD_FOR: Duration = Duration::from_secs(5);
/// The whale's clients, each with one request in flight.
const READERS: usize = 32;
/// How long a request may wait for its answer before it counts as unanswered.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// The workload tenants' timers due during the flood: one every this long.
const PACE: chrono::Duration = chrono::Duration::milliseconds(500);

/// Stores the whale's pending timers in `database` (migrated first), before the daemon starts:
/// due over the rest of the day after the run (`run_for`, plus an hour to spare), so that none
/// fires during it and a day's forecast counts them.
pub async fn hold_pending(database: &DatabaseTarget, run_for: Duration) {
    use sea_orm::{ConnectionTrait, Statement};
    timer_service::storage::db::migrate(database)
        .await
        .expect("migrate the database");
    let spare = chrono::Duration::hours(1) + chrono::Duration::from_std(run_for).expect("run_for");
    let span = (chrono::Duration::hours(24) - spare).max(chrono::Duration::hours(1));
    let first = Utc::now() + spare;
    let step_ms = (span.num_milliseconds() / WHALE_TIMERS as i64).max(1);
    let postgres = matches!(database, DatabaseTarget::Postgres { .. });
    let db = timer_service::storage::db::connect(database, 1)
        .await
        .expect("open the database");
    let sql = crate::common::prefill_sql(
        postgres,
        WHALE_TIMERS,
        WHALE,
        first.timestamp_millis(),
        step_ms,
        None,
    );
    let backend = db.get_database_backend();
    db.execute_raw(Statement::from_string(backend, sql))
        .await
        .expect("store the whale's timers");
    if postgres {
        // Statistics that know the table's size, as on a server that has run a while.
        db.execute_raw(Statement::from_string(backend, "ANALYZE timer_schedules"))
            .await
            .expect("analyze");
    }
    db.close().await.expect("close");
}

/// What one flood did: its span, every request with whether it was answered, and a note.
pub struct Flooded {
    pub flood: ReadFlood,
    pub requests: Vec<ApiRequest>,
    pub note: String,
}

/// The flood itself: the workload tenants' paced timers scheduled (by the workload's `client`),
/// then [`READERS`] clients of the whale, on a connection of its own to the broker at `url`,
/// asking for [`FLOOD_FOR`].
pub async fn flood(client: &Client, url: &str, cycle: usize) -> Flooded {
    let whale = tokio::time::timeout(Duration::from_secs(10), async_nats::connect(url))
        .await
        .ok()
        .and_then(Result::ok)
        .expect("the whale connects to the broker");
    let from = Utc::now();
    let steps = (FLOOD_FOR.as_millis() / PACE.num_milliseconds() as u128) as i32;
    let paced: Vec<(Key, Instant)> = TENANTS
        .iter()
        .flat_map(|tenant| {
            (1..=steps).map(move |k| {
                let key = Key::new(tenant, &format!("flood{cycle}-{k:02}"));
                (key, crate::common::millis(from + PACE * k))
            })
        })
        .collect();
    join_all(paced.iter().map(|(key, due)| client.schedule(key, *due))).await;
    let until = tokio::time::Instant::now() + FLOOD_FOR;
    let readers = (0..READERS).map(|reader| read_until(whale.clone(), reader, until));
    let requests: Vec<(ApiRequest, Option<u16>)> = join_all(readers).await.concat();
    let to = Utc::now();
    let count =
        |wanted: fn(Option<u16>) -> bool| requests.iter().filter(|(_, code)| wanted(*code)).count();
    let note = format!(
        "{} heavy reads by {WHALE} from {READERS} clients over {} ms: {} answered 200, {} 503, \
         {} with another code, {} unanswered within {ANSWER_WITHIN:?}; {} paced timers of the \
         other tenants",
        requests.len(),
        (to - from).num_milliseconds(),
        count(|c| c == Some(200)),
        count(|c| c == Some(503)),
        count(|c| c.is_some_and(|c| c != 200 && c != 503)),
        count(|c| c.is_none()),
        paced.len(),
    );
    Flooded {
        flood: ReadFlood {
            tenant: WHALE.to_owned(),
            from,
            to,
            requests: requests.len(),
        },
        requests: requests.into_iter().map(|(request, _)| request).collect(),
        note,
    }
}

/// One of the whale's clients: `stats` with a day's forecast and `list` of 1,000 in turn, each
/// sent as soon as the previous one is answered, until `until`; each request with the code of
/// its answer (200 when it carries no error), `None` when unanswered.
async fn read_until(
    nats: async_nats::Client,
    reader: usize,
    until: tokio::time::Instant,
) -> Vec<(ApiRequest, Option<u16>)> {
    let mut out = Vec::new();
    let mut n = reader;
    while tokio::time::Instant::now() < until {
        n += 1;
        let (verb, what, body) = if n.is_multiple_of(2) {
            let body = json!({ "forecastMinutes": 1440 });
            ("stats", "stats with a day's forecast", body)
        } else {
            ("list", "a list of 1,000", json!({ "limit": 1000 }))
        };
        let subject = format!("timer.api.{verb}.{WHALE}");
        let at = Utc::now();
        let body = serde_json::to_vec(&body).expect("json");
        let reply =
            tokio::time::timeout(ANSWER_WITHIN, nats.request(subject.clone(), body.into())).await;
        let code = match reply {
            Ok(Ok(message)) => Some(
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Service-Error-Code"))
                    .and_then(|code| code.as_str().parse().ok())
                    .unwrap_or(200),
            ),
            _ => None,
        };
        let request = ApiRequest {
            subject,
            what: what.to_owned(),
            at,
            answered: code.is_some(),
        };
        out.push((request, code));
        if code.is_none() {
            // No responder fails at once; the flood keeps its pace rather than spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    out
}
