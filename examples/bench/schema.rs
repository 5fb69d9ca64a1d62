//! Another build's schema: an earlier build refuses a database migrated past it, so the
//! database a `--baseline` build runs on is taken back to the newest migration it knows.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sea_orm::{ConnectionTrait, Statement};
use timer_service::storage::db::{DatabaseTarget, connect};

/// The newest migration `build` (another build's binary) knows: its `migrate` run on a scratch
/// SQLite file, read back from SeaORM's table. `None` when it cannot tell (no `migrate`).
/// Asked once per binary.
pub fn newest_migration(build: &Path) -> Option<String> {
    static KNOWN: Mutex<Vec<(PathBuf, Option<String>)>> = Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, name)) = known.iter().find(|(b, _)| b == build) {
        return name.clone();
    }
    let scratch = tempfile::tempdir().expect("scratch directory");
    let file = scratch.path().join("schema.db");
    let migrated = Command::new(build)
        .args(["migrate", "--config"])
        .arg(scratch.path().join("none.toml"))
        .env("TIMER_DB_PATH", &file)
        .env_remove("TIMER_DATABASE_URL")
        .output()
        .is_ok_and(|o| o.status.success());
    let name = migrated
        .then(|| {
            let target = DatabaseTarget::sqlite(&file);
            on_a_runtime_of_its_own(async {
                let db = connect(&target, 1).await.ok()?;
                let sql = "SELECT version FROM seaql_migrations ORDER BY version DESC LIMIT 1";
                let backend = db.get_database_backend();
                let row = db
                    .query_one_raw(Statement::from_string(backend, sql))
                    .await
                    .ok()??;
                row.try_get_by_index::<String>(0).ok()
            })
        })
        .flatten();
    eprintln!(
        "the schema of {}: {}",
        build.display(),
        name.as_deref()
            .unwrap_or("unknown (migrated by this build)")
    );
    known.push((build.to_owned(), name.clone()));
    name
}

/// Brings `database`, migrated by this build, back to the schema another build knows (its
/// newest migration `keep`), as `timer-service migrate --to` does: an earlier build refuses a
/// database migrated past it.
pub fn migrate_down_to(database: &DatabaseTarget, keep: &str) {
    let undone = on_a_runtime_of_its_own(timer_service::storage::downgrade::migrate_down_to(
        database, keep,
    ))
    .unwrap_or_else(|e| panic!("migrate --to {keep}: {e}"));
    if !undone.is_empty() {
        eprintln!("undone for the baseline: {}", undone.join(", "));
    }
}

/// Runs `work` to its end on a runtime of its own: for the workloads' synchronous start of a
/// daemon, which runs on the benchmark's runtime.
fn on_a_runtime_of_its_own<T: Send>(work: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(work)
        })
        .join()
        .expect("the work panicked")
    })
}
