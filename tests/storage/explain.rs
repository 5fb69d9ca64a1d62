//! The plan of each query shape the service runs on large tables, one line per step: how a
//! test checks that each is served by an index rather than a table scan or a sort. Built from
//! the same statement builders the store runs.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, QueryTrait, Statement};
use sea_orm::{DbErr, TransactionTrait};
use timer_service::domain::api::{ListCursor, ListFilter};
use timer_service::domain::forecast::{ForecastWindow, MAX_FORECAST_MINUTES};
use timer_service::domain::{CancelFilter, CancelMany, DuePosition, TimerState};
use timer_service::storage::cancel_many::{step_keys_query, step_update};
use timer_service::storage::firing::due_query;
use timer_service::storage::queries::{forecast_query, list_queries};
use timer_service::storage::quotas::{key_states_query, pending_counts_query};

pub async fn explain_queries(db: &DatabaseConnection) -> Result<Vec<(String, String)>, DbErr> {
    let backend = db.get_database_backend();
    let after = DuePosition {
        due_at: Utc::now(),
        tenant_id: String::new(),
        service_call_id: String::new(),
    };
    let due = due_query(backend, Utc::now(), Some(&after), "me", 100);
    let mut shapes = vec![("claim due".to_owned(), due)];
    // The settings a shape's own transaction runs with, where it has some.
    let mut settings = std::collections::HashMap::new();
    let cursor = ListCursor {
        due_at: Some(Utc::now()),
        service_call_id: "x".into(),
    };
    let filters = [
        ("list", ListFilter::default()),
        (
            "list by state",
            ListFilter {
                state: Some(TimerState::Scheduled),
                after: Some(cursor.clone()),
                ..ListFilter::default()
            },
        ),
        (
            "list by due range",
            ListFilter {
                due_from: Some(Utc::now()),
                due_to: Some(Utc::now()),
                ..ListFilter::default()
            },
        ),
        (
            "list by correlation id",
            ListFilter {
                correlation_id: Some("c".into()),
                after: Some(cursor),
                ..ListFilter::default()
            },
        ),
    ];
    for (name, filter) in filters {
        for (i, query) in list_queries("acme", &filter, 100).into_iter().enumerate() {
            shapes.push((format!("{name} #{i}"), query.build(backend)));
        }
    }
    let tenants = ["acme".to_owned(), "globex".to_owned()];
    shapes.push((
        "pending counts".to_owned(),
        pending_counts_query(&tenants).build(backend),
    ));
    let keys = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
    shapes.push((
        "key states".to_owned(),
        key_states_query("acme", &keys).build(backend),
    ));
    shapes.push((
        "tenant pending counts".to_owned(),
        timer_service::storage::queries::pending_counts_query("acme", Utc::now()).build(backend),
    ));
    for (name, filter) in [
        ("cancel step keys", CancelFilter::default()),
        (
            "cancel step keys by correlation id",
            CancelFilter {
                correlation_id: Some("c".into()),
                ..CancelFilter::default()
            },
        ),
    ] {
        let cancel = CancelMany {
            tenant_id: "acme".into(),
            filter,
            seq: 9,
            received_at: Utc::now(),
        };
        shapes.push((
            name.to_owned(),
            step_keys_query(&cancel, 9, 500).build(backend),
        ));
    }
    shapes.push((
        "cancel step update".to_owned(),
        step_update("acme", &keys, 9, "2026-11-28T00:00:00.000Z").build(backend),
    ));
    let window = ForecastWindow::new(Utc::now(), MAX_FORECAST_MINUTES);
    shapes.push((
        "forecast".to_owned(),
        backend.build(&forecast_query("acme", &window)),
    ));
    if backend == DatabaseBackend::Postgres {
        let claimant = timer_service::storage::Claimant {
            name: "me".into(),
            lease: std::time::Duration::from_secs(30),
        };
        let (firing, claim) = timer_service::storage::postgres_claim_statement(&claimant, 2_000);
        settings.insert("claim due (PostgreSQL)", firing);
        shapes.push(("claim due (PostgreSQL)".to_owned(), claim));
        let keys: Vec<(String, String)> = (0..100)
            .map(|i| (format!("t{}", i % 7), format!("c{i}")))
            .collect();
        let keys: Vec<(&str, &str, DateTime<Utc>)> = keys
            .iter()
            .map(|(tenant, call)| (tenant.as_str(), call.as_str(), Utc::now()))
            .collect();
        let (firing, mark) = timer_service::storage::postgres_mark_statement(&keys);
        settings.insert("mark reached (PostgreSQL)", firing);
        shapes.push(("mark reached (PostgreSQL)".to_owned(), mark));
    }
    let mut plans = Vec::new();
    for (name, statement) in shapes {
        let values = statement.values.map(|v| v.0).unwrap_or_default();
        let lines: Vec<String> = if backend == DatabaseBackend::Sqlite {
            // SQLite's `EXPLAIN QUERY PLAN` rows: id, parent, notused, detail.
            let explain = Statement::from_sql_and_values(
                backend,
                format!("EXPLAIN QUERY PLAN {}", statement.sql),
                values,
            );
            db.query_all_raw(explain)
                .await?
                .iter()
                .map(|row| row.try_get_by_index::<String>(3))
                .collect::<Result<_, _>>()?
        } else {
            // PostgreSQL prefers a sequential scan on a small table; with scans priced out,
            // the plan shows whether an index can serve the query at any size.
            let txn = db.begin().await?;
            txn.execute_unprepared("SET LOCAL enable_seqscan = off")
                .await?;
            if let Some(own) = settings.get(name.as_str()) {
                txn.execute_unprepared(own).await?;
            }
            let explain = Statement::from_sql_and_values(
                backend,
                format!("EXPLAIN {}", statement.sql),
                values,
            );
            let lines = txn
                .query_all_raw(explain)
                .await?
                .iter()
                .map(|row| row.try_get_by_index::<String>(0))
                .collect::<Result<_, _>>()?;
            txn.rollback().await?;
            lines
        };
        plans.push((name, lines.join("\n")));
    }
    Ok(plans)
}
