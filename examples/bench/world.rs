//! One workload's private world: a fresh `nats-server`, a fresh database (a SQLite file in the
//! workload's directory, or a PostgreSQL database created for it and dropped after), and the
//! daemons started on them. A database may start as a copy of a prefilled base (pending timers
//! already stored), built once and cached.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use sea_orm::ConnectionTrait;
use timer_service::storage::db::{DatabaseTarget, migrate};

use crate::daemon::{Daemon, Observer, Settings};
use crate::nats_server::NatsServer;

/// Where a workload keeps its timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// PostgreSQL, through this administrative URL (databases are created and dropped there).
    Postgres {
        admin: String,
    },
}

/// Each database's tag (in figure keys and world names) and its name in the report, SQLite
/// first.
pub const STORES: [(&str, &str); 2] = [("sqlite", "SQLite"), ("pg", "PostgreSQL")];

impl Backend {
    fn store(&self) -> (&'static str, &'static str) {
        match self {
            Backend::Sqlite => STORES[0],
            Backend::Postgres { .. } => STORES[1],
        }
    }

    pub fn label(&self) -> &'static str {
        self.store().1
    }

    pub fn tag(&self) -> &'static str {
        self.store().0
    }

    fn url_of(admin: &str, database: &str) -> String {
        let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
        format!("{base}/{database}")
    }

    async fn admin(admin: &str, sql: &str) {
        let db = sea_orm::Database::connect(admin).await.expect("PostgreSQL");
        db.execute_unprepared(sql).await.expect(sql);
        db.close().await.expect("close");
    }

    /// A base holding `n` pending timers due in 2099 (they never fire), cached: a file in
    /// `cache/`, or a PostgreSQL database used as a template.
    pub async fn pending_base(&self, cache: &Path, n: u64) -> Base {
        let far = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .expect("date")
            .with_timezone(&chrono::Utc);
        self.base(cache, &format!("pending_{n}"), |observer| async move {
            observer.prefill(n, "fill", far, 1_000, None).await;
        })
        .await
    }

    /// A base holding `n` pending timers of tenant `whale`, due evenly over the 24 h from the
    /// start of the hour after next (so every minute of a day's forecast from now has work, all
    /// but its first hour or two, and none falls due during a workload). Cached for the hour it
    /// was built in; the bases of earlier hours are removed.
    pub async fn whale_base(&self, cache: &Path, n: u64) -> Base {
        self.whale_base_over(cache, n, 1, 2).await.0
    }

    /// As [`Self::whale_base`], the timers due over `days` from the start of the hour
    /// `hours_ahead` after this one; with their first `dueAt`.
    pub async fn whale_base_over(
        &self,
        cache: &Path,
        n: u64,
        days: i64,
        hours_ahead: i64,
    ) -> (Base, chrono::DateTime<chrono::Utc>) {
        use chrono::{DurationRound, TimeDelta};
        let hour = chrono::Utc::now()
            .duration_trunc(TimeDelta::hours(1))
            .expect("the hour");
        let first_due = hour + TimeDelta::hours(hours_ahead);
        let prefix = format!("whale_{days}d{hours_ahead}h_{n}_");
        let name = format!("{prefix}{}", hour.format("%Y%m%d%H"));
        self.forget_bases(cache, &prefix, &name).await;
        let step_ms = (TimeDelta::days(days).num_milliseconds() / n.max(1) as i64).max(1);
        let base = self
            .base(cache, &name, |observer| async move {
                observer.prefill(n, "whale", first_due, step_ms, None).await;
            })
            .await;
        (base, first_due)
    }

    /// Removes the cached bases whose names start with `prefix`, except `keep`.
    async fn forget_bases(&self, cache: &Path, prefix: &str, keep: &str) {
        match self {
            Backend::Sqlite => {
                let Ok(entries) = std::fs::read_dir(cache) else {
                    return;
                };
                for entry in entries.flatten() {
                    let file = entry.file_name().to_string_lossy().into_owned();
                    if file.starts_with(prefix) && !file.starts_with(&format!("{keep}.")) {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            }
            Backend::Postgres { admin } => {
                let db = sea_orm::Database::connect(admin.as_str())
                    .await
                    .expect("PostgreSQL");
                let rows = db
                    .query_all_raw(sea_orm::Statement::from_string(
                        db.get_database_backend(),
                        "SELECT datname FROM pg_database",
                    ))
                    .await
                    .expect("query");
                db.close().await.expect("close");
                let (prefix, keep) = (
                    format!("timer_bench_base_{prefix}"),
                    format!("timer_bench_base_{keep}"),
                );
                for row in rows {
                    let Ok(name) = row.try_get_by_index::<String>(0) else {
                        continue;
                    };
                    if name.starts_with(&prefix) && name != keep {
                        Self::admin(admin, &format!("DROP DATABASE IF EXISTS {name}")).await;
                    }
                }
            }
        }
    }

    /// A base built by `fill` on a migrated database, cached under `name`.
    pub async fn base<F, Fut>(&self, cache: &Path, name: &str, fill: F) -> Base
    where
        F: FnOnce(Observer) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        match self {
            Backend::Sqlite => {
                let path = cache.join(format!("{name}.db"));
                if !path.exists() {
                    eprintln!("building {} (cached)", path.display());
                    let building = path.with_extension("building");
                    let _ = std::fs::remove_file(&building);
                    let target = DatabaseTarget::sqlite(&building);
                    migrate(&target).await.expect("migrate");
                    let observer = Observer::open(&target).await;
                    fill(observer).await;
                    std::fs::rename(&building, &path).expect("rename");
                }
                Base::Sqlite(path)
            }
            Backend::Postgres { admin } => {
                let database = format!("timer_bench_base_{name}");
                let exists = {
                    let db = sea_orm::Database::connect(admin.as_str())
                        .await
                        .expect("PostgreSQL");
                    let found = db
                        .query_one_raw(sea_orm::Statement::from_string(
                            db.get_database_backend(),
                            format!("SELECT 1 FROM pg_database WHERE datname = '{database}'"),
                        ))
                        .await
                        .expect("query")
                        .is_some();
                    db.close().await.expect("close");
                    found
                };
                if !exists {
                    eprintln!("building PostgreSQL database {database} (kept as a template)");
                    let building = format!("{database}_building");
                    Self::admin(admin, &format!("DROP DATABASE IF EXISTS {building}")).await;
                    Self::admin(admin, &format!("CREATE DATABASE {building}")).await;
                    let target = DatabaseTarget::Postgres {
                        url: Self::url_of(admin, &building),
                    };
                    migrate(&target).await.expect("migrate");
                    let observer = Observer::open(&target).await;
                    fill(observer).await;
                    Self::admin(
                        admin,
                        &format!("ALTER DATABASE {building} RENAME TO {database}"),
                    )
                    .await;
                }
                Base::Postgres(database)
            }
        }
    }
}

/// A prefilled database to start a workload from.
#[derive(Debug, Clone)]
pub enum Base {
    Sqlite(PathBuf),
    Postgres(String),
}

pub struct World {
    pub server: NatsServer,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub dir: PathBuf,
    pub database: DatabaseTarget,
    backend: Backend,
    /// A PostgreSQL database of this world's own, dropped with it.
    postgres: Option<String>,
    /// The other build whose schema the database was brought to.
    schema_of: std::sync::Mutex<Option<PathBuf>>,
}

impl World {
    /// A fresh broker and a fresh, migrated database (a copy of `base` when given).
    pub async fn new(dir: &Path, backend: &Backend, base: Option<&Base>) -> Self {
        std::fs::create_dir_all(dir).expect("dir");
        let server = NatsServer::start();
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = jetstream::new(client.clone());
        let (database, postgres) = match backend {
            Backend::Sqlite => {
                let path = dir.join("timers.db");
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                if let Some(Base::Sqlite(base)) = base {
                    std::fs::copy(base, &path).expect("copy base");
                    // On disk before the daemon starts, as a long-lived database would be.
                    std::fs::File::open(&path)
                        .and_then(|f| f.sync_all())
                        .expect("sync copy");
                }
                (DatabaseTarget::sqlite(path), None)
            }
            Backend::Postgres { admin } => {
                let name = format!("timer_bench_{}", uuid::Uuid::now_v7().simple());
                let template = match base {
                    Some(Base::Postgres(base)) => format!(" TEMPLATE {base}"),
                    _ => String::new(),
                };
                Backend::admin(admin, &format!("CREATE DATABASE {name}{template}")).await;
                let url = Backend::url_of(admin, &name);
                (DatabaseTarget::Postgres { url }, Some(name))
            }
        };
        migrate(&database).await.expect("migrate");
        Self {
            server,
            client,
            js,
            dir: dir.to_owned(),
            database,
            backend: backend.clone(),
            postgres,
            schema_of: std::sync::Mutex::new(None),
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.postgres.is_some()
    }

    pub fn daemon(&self, settings: &Settings) -> Daemon {
        if let Some(build) = &settings.binary {
            self.schema_for(build);
        }
        Daemon::start(
            &self.server.url(),
            &self.database,
            settings,
            &self.dir.join(format!("{}.log", settings.name)),
        )
    }

    /// The database brought to the schema of `build` (another build's binary) before its first
    /// daemon starts, once.
    fn schema_for(&self, build: &Path) {
        let mut done = self.schema_of.lock().unwrap_or_else(|e| e.into_inner());
        if done.as_deref() == Some(build) {
            return;
        }
        if let Some(keep) = crate::schema::newest_migration(build) {
            crate::schema::migrate_down_to(&self.database, &keep);
        }
        *done = Some(build.to_owned());
    }

    pub async fn observer(&self) -> Observer {
        Observer::open(&self.database).await
    }

    pub async fn wait_for_command_stream(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.js.get_stream("TIMER_COMMANDS").await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the daemon never created its streams"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let (Some(name), Backend::Postgres { admin }) = (&self.postgres, &self.backend) {
            drop_database(admin, name);
        }
    }
}

/// An empty PostgreSQL database of its own (for a peer), dropped with it.
pub struct Scratch {
    admin: String,
    name: String,
}

impl Scratch {
    pub async fn create(admin: &str, prefix: &str) -> Self {
        let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        Backend::admin(admin, &format!("CREATE DATABASE {name}")).await;
        Self {
            admin: admin.to_owned(),
            name,
        }
    }

    pub fn url(&self) -> String {
        Backend::url_of(&self.admin, &self.name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop_database(&self.admin, &self.name);
    }
}

/// Drops `name`, from a thread of its own: Drop cannot await on the caller's runtime.
fn drop_database(admin: &str, name: &str) {
    let (name, admin) = (name.to_owned(), admin.to_owned());
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(Backend::admin(
                &admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ))
    })
    .join();
}
