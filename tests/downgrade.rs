//! `timer-service migrate --to NAME` (docs/operations.md, "Rollback"): the migrations after
//! `NAME` are undone, newest first, and a name this release does not know changes nothing. On
//! SQLite, and on PostgreSQL with `TEST_DATABASE=postgres`.

mod common;

use common::Scratch;
use timer_service::storage::db::migrate;
use timer_service::storage::downgrade::migrate_down_to;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_after_the_one_kept_are_undone_newest_first() {
    let scratch = Scratch::new();
    let database = scratch.database();
    migrate(&database).await.expect("migrate");

    let unknown = migrate_down_to(&database, "m20990101_000001_nothing")
        .await
        .expect_err("an unknown name is refused");
    assert!(
        unknown.to_string().contains("no migration is named"),
        "{unknown}"
    );
    let undone = migrate_down_to(&database, common::previous_release::NEWEST_MIGRATION)
        .await
        .expect("undone");
    assert_eq!(
        undone,
        [
            "m20261128_000010_timer_expiry",
            "m20261127_000009_command_refusals",
            "m20261125_000008_trace_context",
            "m20261125_000007_timer_data",
            "m20261125_000006_tenant_quotas",
        ],
        "the unknown name undid nothing before; now the later ones, newest first"
    );
    let again = migrate_down_to(&database, common::previous_release::NEWEST_MIGRATION)
        .await
        .expect("nothing left to undo");
    assert!(again.is_empty(), "{again:?}");
    migrate(&database).await.expect("migrated up again");
}
