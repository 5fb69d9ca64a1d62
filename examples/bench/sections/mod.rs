//! The sections of one run (`--only` picks some), each measuring its figures into [`Figures`].
//! A figure that a target compares with the previous version is measured for this build and,
//! with `--baseline`, for the baseline build right after it, so that both see the same machine
//! within minutes of each other. The recovery sections (`crash`, `intake`) are in `recovery`,
//! the broker link's (`link`, this build only) in `link`, the web console's in `console`, BullMQ's
//! and pg-boss's beside the daemon's in `peers`.

mod backup;
mod cancel;
mod console;
mod data;
mod link;
mod peers;
mod recovery;
mod spans;

pub use link::{DISTANT_LATENCY, DISTANT_RATE, DISTANT_SECS};
pub use peers::PEERS;
pub use spans::VARIANTS as SPAN_VARIANTS;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::stream::RetentionPolicy;

use crate::daemon::Settings;
use crate::workloads::{self, Load, ReadsShape};
use crate::world::{Backend, Base, World};
use crate::{Args, DEFAULT_BATCH, Figures, TUNED_BATCH};

/// The prefix of the baseline build's figure keys.
pub const BASELINE: &str = "old.";

/// A build of the daemon whose figures are measured.
pub struct Build {
    /// `new` (this build) or `old` (the baseline).
    pub label: &'static str,
    /// The daemon's binary; `None`: this build's.
    binary: Option<PathBuf>,
    /// The lines of the command stream made for it; `None`: this build's default.
    lines: Option<u16>,
    /// More environment variables for its daemons (`--baseline-env`).
    env: Vec<(String, String)>,
}

impl Build {
    /// This build, then the baseline when there is one, reading a command stream of
    /// `--baseline-lines` lines with the `--baseline-env` variables.
    pub fn all(args: &Args) -> Vec<Build> {
        std::iter::once(Build {
            label: "new",
            binary: None,
            lines: None,
            env: Vec::new(),
        })
        .chain(args.baseline.as_ref().map(|bin| Build {
            label: "old",
            binary: Some(bin.clone()),
            lines: Some(args.baseline_lines),
            env: args.baseline_env.clone(),
        }))
        .collect()
    }

    fn is_baseline(&self) -> bool {
        self.binary.is_some()
    }

    /// The key a figure of this build is kept under: as named for this build, with
    /// [`BASELINE`] before it for the baseline.
    pub fn key(&self, key: &str) -> String {
        if self.is_baseline() {
            format!("{BASELINE}{key}")
        } else {
            key.to_owned()
        }
    }

    /// `daemons`, running this build.
    fn runs(&self, mut daemons: Vec<Settings>) -> Vec<Settings> {
        for daemon in &mut daemons {
            daemon.binary = self.binary.clone();
            daemon.lines = self.lines;
            daemon.env.extend(self.env.iter().cloned());
        }
        daemons
    }
}

/// Databases prefilled before the runs, built once and cached across runs and invocations.
#[derive(Default)]
pub struct Bases {
    /// Pending-timer counts of the scale section, each with its database and base.
    pub scale: Vec<(u64, Backend, Base)>,
    /// Finished timers for the Janitor to delete (SQLite).
    pub retention: Option<Base>,
    /// Pending timers of one tenant for a CancelTimers, on SQLite and, with `--database`, on
    /// PostgreSQL.
    pub cancel: Vec<(Backend, Base)>,
}

/// What every section of one run needs.
pub struct Ctx<'a> {
    pub args: &'a Args,
    /// This run's directory; each workload's world is a directory in it.
    pub dir: PathBuf,
    pub cache: &'a Path,
    pub sqlite: Backend,
    pub postgres: Option<Backend>,
    /// This build, then the baseline when given.
    pub builds: Vec<Build>,
    pub bases: &'a Bases,
}

impl Ctx<'_> {
    /// The databases of this run: SQLite, then PostgreSQL with `--database`.
    fn stores(&self) -> Vec<&Backend> {
        std::iter::once(&self.sqlite)
            .chain(self.postgres.as_ref())
            .collect()
    }

    async fn world(&self, name: &str, backend: &Backend, base: Option<&Base>) -> World {
        World::new(&self.dir.join(name), backend, base).await
    }

    fn settings(&self, name: &str, batch: usize, http: bool) -> Settings {
        Settings {
            name: name.into(),
            batch,
            synchronous: self.args.synchronous.clone(),
            http_port: http.then(crate::nats_server::free_port),
            keep_finished: "7d".into(),
            binary: None,
            lines: None,
            env: Vec::new(),
        }
    }

    /// One daemon with the default configuration.
    fn default(&self, name: &str) -> Settings {
        self.settings(name, DEFAULT_BATCH, true)
    }

    /// `n` daemons with the default configuration.
    fn many(&self, n: usize) -> Vec<Settings> {
        (1..=n).map(|i| self.default(&format!("d{i}"))).collect()
    }

    fn lead(&self) -> Duration {
        Duration::from_millis(self.args.lead_ms)
    }

    /// The rate of the steady loads that have one (the first of `--rates`).
    fn first_rate(&self) -> u32 {
        self.args.rates.first().copied().unwrap_or(1000)
    }

    /// The most daemons of `--daemons`: the PostgreSQL figures beside the baseline use as many.
    fn most(&self) -> usize {
        self.args.daemons.iter().copied().max().unwrap_or(1)
    }

    /// A steady load at `rate` of `daemons` on a fresh world `name` of `backend`.
    async fn steady(
        &self,
        name: &str,
        backend: &Backend,
        rate: u32,
        daemons: &[Settings],
        load: Load,
    ) -> workloads::LatenessRun {
        let w = self.world(name, backend, None).await;
        let args = self.args;
        workloads::lateness(&w, rate, args.secs, self.lead(), daemons, load).await
    }
}

/// Every section `--only` selects, in order.
pub async fn run(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    if args.wants("raw") {
        raw(ctx, f).await;
    }
    if args.wants("sweep") {
        sweep(ctx, f).await;
    }
    if args.wants("lateness") {
        lateness(ctx, f).await;
    }
    if args.wants("costs") {
        costs(ctx, f).await;
    }
    if args.wants("api") {
        eprintln!("API request rate");
        let w = ctx.world("api", &ctx.sqlite, None).await;
        let api = workloads::api_throughput(&w, &ctx.default("d"), 100_000, 64, 5.0).await;
        f.rate("api.get", api.get_per_second);
        f.rate("api.list", api.list_per_second);
    }
    if args.wants("floor") {
        eprintln!("the floor under lateness");
        let w = ctx.world("floor", &ctx.sqlite, None).await;
        let (rate, secs) = (ctx.first_rate(), args.secs);
        for (key, waiter) in [
            ("floor.tokio", workloads::Waiter::Tokio),
            ("floor.thread", workloads::Waiter::Thread),
        ] {
            let run = workloads::floor_lateness(&w, rate, secs, waiter).await;
            f.late(key, run);
        }
    }
    if args.wants("native") {
        eprintln!("native scheduler");
        let w = ctx.world("native", &ctx.sqlite, None).await;
        let (rate, secs) = (ctx.first_rate(), args.secs);
        if let Some(native) = workloads::native_lateness(&w, rate, secs, ctx.lead()).await {
            f.late("native", native);
        }
    }
    scale(ctx, f).await;
    if args.wants("catch-up") && args.catch_up_n > 0 {
        catch_up(ctx, f).await;
    }
    if let (true, Some(pg)) = (args.wants("postgres"), &ctx.postgres) {
        postgres(ctx, pg, f).await;
    }
    if args.wants("tenants") {
        tenants(ctx, f).await;
    }
    if args.wants("reads") {
        reads(ctx, f).await;
    }
    if args.wants("crash") {
        recovery::crash(ctx, f).await;
    }
    if args.wants("intake") {
        recovery::intake(ctx, f).await;
    }
    if args.wants("backup") {
        backup::backup(ctx, f).await;
    }
    if args.wants("cancel") {
        cancel::cancel(ctx, f).await;
    }
    if args.wants("data") {
        data::data(ctx, f).await;
    }
    if args.wants("spans") {
        spans::spans(ctx, f).await;
    }
    if args.wants("link") {
        link::link(ctx, f).await;
    }
    if args.wants("console") {
        console::console(ctx, f).await;
    }
    if args.wants("peers") {
        peers::peers(ctx, f).await;
    }
}

async fn raw(ctx: &Ctx<'_>, f: &mut Figures) {
    eprintln!("raw limits");
    let n = ctx.args.raw_n;
    let w = ctx.world("raw", &ctx.sqlite, None).await;
    for (key, retention) in [
        ("raw.consume", RetentionPolicy::Limits),
        ("raw.consume.workqueue", RetentionPolicy::WorkQueue),
    ] {
        f.rate(
            key,
            crate::raw::jetstream_consume_ack(&w.js, n, 1000, retention).await,
        );
    }
    for lines in [1, 16] {
        f.rate(
            format!("raw.consume.lines.{lines}"),
            crate::raw::jetstream_consume_lines(&w.js, n, lines).await,
        );
    }
    for window in [1000, 4000] {
        f.rate(
            format!("raw.publish.{window}"),
            crate::raw::jetstream_publish_with_msg_id(&w.js, n, window).await,
        );
    }
    drop(w);
    for backend in std::iter::once(&ctx.sqlite).chain(&ctx.postgres) {
        for batch in &ctx.args.batches {
            let w = ctx.world(&format!("raw-db-{batch}"), backend, None).await;
            let tag = backend.label();
            f.rate(
                format!("raw.upsert.{tag}.{batch}"),
                crate::raw::upsert(&w.database, n, *batch).await,
            );
            f.rate(
                format!("raw.mark.{tag}.{batch}"),
                crate::raw::claim_and_mark(&w.database, *batch).await,
            );
        }
    }
}

/// Ingest and fire at each batch size; the baseline at the default and at [`TUNED_BATCH`].
async fn sweep(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    for batch in &args.batches {
        for build in &ctx.builds {
            if build.is_baseline() && ![DEFAULT_BATCH, TUNED_BATCH].contains(batch) {
                continue;
            }
            eprintln!("ingest and fire, batch {batch} ({})", build.label);
            let daemons = || build.runs(vec![ctx.settings("d", *batch, true)]);
            let (name, sqlite) = (format!("{batch}-{}", build.label), &ctx.sqlite);
            let w = ctx.world(&format!("ingest-{name}"), sqlite, None).await;
            let ingest = workloads::ingest(&w, args.ingest_n, &daemons()).await;
            f.run(&build.key(&format!("ingest.{batch}")), ingest);
            drop(w);
            let w = ctx.world(&format!("fire-{name}"), sqlite, None).await;
            let fire = workloads::fire(&w, args.fire_n, &daemons()).await;
            f.run(&build.key(&format!("fire.{batch}")), fire);
        }
    }
}

async fn lateness(ctx: &Ctx<'_>, f: &mut Figures) {
    for rate in &ctx.args.rates {
        for build in &ctx.builds {
            eprintln!("lateness at {rate}/s ({})", build.label);
            let name = format!("lateness-{rate}-{}", build.label);
            let daemons = build.runs(vec![ctx.default("d")]);
            let late = ctx
                .steady(&name, &ctx.sqlite, *rate, &daemons, Load::default())
                .await;
            f.late(&build.key(&format!("lateness.{rate}")), late);
        }
    }
}

/// The steady load with the new parts (bare, scraped, API traffic); the Janitor's backlog and
/// the same load without it for each build; fire bare and with metrics.
async fn costs(ctx: &Ctx<'_>, f: &mut Figures) {
    eprintln!("the cost of the new parts");
    let args = ctx.args;
    let rate = ctx.first_rate();
    let bare = ctx.settings("d", DEFAULT_BATCH, false);
    let sqlite = &ctx.sqlite;
    let steady = |name: &'static str, daemons: Vec<Settings>, load: Load| async move {
        ctx.steady(name, sqlite, rate, &daemons, load).await
    };
    let scraped = Load {
        scrape: true,
        ..Load::default()
    };
    let api = Load {
        api_rate: args.api_rate,
        ..Load::default()
    };
    f.late(
        "cost.bare",
        steady("cost-bare", vec![bare.clone()], Load::default()).await,
    );
    f.late(
        "cost.metrics",
        steady("cost-metrics", vec![ctx.default("d")], scraped).await,
    );
    f.late(
        "cost.api",
        steady("cost-api", vec![ctx.default("d")], api).await,
    );
    if let Some(base) = &ctx.bases.retention {
        for build in &ctx.builds {
            eprintln!(
                "retention under load, and the same load without it ({})",
                build.label
            );
            let name = format!("cost-janitor-{}", build.label);
            let w = ctx.world(&name, sqlite, Some(base)).await;
            let daemon = &build.runs(vec![ctx.default("d")])[0];
            let (n, secs) = (args.retention_n, args.secs);
            let retention =
                workloads::retention_under_load(&w, n, rate, secs, ctx.lead(), daemon).await;
            f.rate(
                build.key("cost.janitor.deleted"),
                retention.deleted_per_second,
            );
            f.late(&build.key("cost.janitor"), retention.lateness);
            drop(w);
            let name = format!("cost-plain-{}", build.label);
            let plain = ctx
                .steady(
                    &name,
                    sqlite,
                    rate,
                    std::slice::from_ref(daemon),
                    Load::default(),
                )
                .await;
            f.late(&build.key("cost.plain"), plain);
        }
    }
    let w = ctx.world("cost-fire-bare", sqlite, None).await;
    f.run(
        "cost.fire.bare",
        workloads::fire(&w, args.fire_n, std::slice::from_ref(&bare)).await,
    );
    drop(w);
    let w = ctx.world("cost-fire-metrics", sqlite, None).await;
    f.run(
        "cost.fire.metrics",
        workloads::fire(&w, args.fire_n, &[ctx.default("d")]).await,
    );
}

async fn scale(ctx: &Ctx<'_>, f: &mut Figures) {
    for (n, backend, base) in &ctx.bases.scale {
        let tag = backend.tag();
        eprintln!("scale {n} ({tag})");
        let w = ctx
            .world(&format!("scale-{n}-{tag}"), backend, Some(base))
            .await;
        f.run(
            &format!("scale.ingest.{tag}.{n}"),
            workloads::ingest(&w, ctx.args.ingest_n, &[ctx.default("d")]).await,
        );
        drop(w);
        let w = ctx
            .world(&format!("scale-late-{n}-{tag}"), backend, Some(base))
            .await;
        let (rate, secs, lead) = (ctx.first_rate(), ctx.args.secs, ctx.lead());
        let late =
            workloads::lateness(&w, rate, secs, lead, &[ctx.default("d")], Load::default()).await;
        f.late(&format!("scale.lateness.{tag}.{n}"), late);
    }
}

async fn catch_up(ctx: &Ctx<'_>, f: &mut Figures) {
    eprintln!("restart catch-up");
    let n = ctx.args.catch_up_n;
    let base = ctx
        .sqlite
        .base(ctx.cache, &format!("overdue_{n}"), |observer| async move {
            let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
            observer.prefill(n, "overdue", hour_ago, 1, None).await;
        })
        .await;
    let w = ctx.world("catch-up", &ctx.sqlite, Some(&base)).await;
    let c = workloads::catch_up(&w, &ctx.default("d")).await;
    f.rate("catch_up.first", c.first_event_s);
    f.rate("catch_up.last", c.last_event_s);
    f.rss
        .entry("catch_up".into())
        .or_default()
        .push(c.peak_rss_mib);
}

/// Ingest, fire and lateness with 1–3 daemons sharing one PostgreSQL database, for each build;
/// then a daemon failing while the others fire (this build).
async fn postgres(ctx: &Ctx<'_>, pg: &Backend, f: &mut Figures) {
    let args = ctx.args;
    for n in &args.daemons {
        for build in &ctx.builds {
            eprintln!("PostgreSQL, {n} daemon(s) ({})", build.label);
            let name = format!("{n}-{}", build.label);
            let daemons = build.runs(ctx.many(*n));
            let w = ctx.world(&format!("pg-ingest-{name}"), pg, None).await;
            let ingest = workloads::ingest(&w, args.ingest_n, &daemons).await;
            f.run(&build.key(&format!("pg.ingest.{n}")), ingest);
            drop(w);
            let w = ctx.world(&format!("pg-fire-{name}"), pg, None).await;
            let fire = workloads::fire(&w, args.fire_n, &daemons).await;
            f.run(&build.key(&format!("pg.fire.{n}")), fire);
            drop(w);
            let (rate, load) = (ctx.first_rate(), Load::default());
            let late = ctx
                .steady(&format!("pg-late-{name}"), pg, rate, &daemons, load)
                .await;
            f.late(&build.key(&format!("pg.lateness.{n}")), late);
        }
    }
    let most = ctx.most();
    if most > 1 && args.failover_n > 0 {
        for (failure, tag) in [
            (workloads::Failure::Kill, "kill"),
            (workloads::Failure::Freeze, "freeze"),
        ] {
            eprintln!("PostgreSQL, {most} daemons, one fails: {tag}");
            let w = ctx.world(&format!("pg-failover-{tag}"), pg, None).await;
            let t = workloads::failover(&w, args.failover_n, &ctx.many(most), failure).await;
            f.rate(format!("pg.failover.{tag}.after_fault"), t.after_fault_s);
            f.rate(format!("pg.failover.{tag}.drain"), t.drain_s);
        }
    }
}

/// The noisy neighbour on SQLite and on PostgreSQL with the most daemons, and a steady load
/// over 50 tenants, for each build.
async fn tenants(ctx: &Ctx<'_>, f: &mut Figures) {
    let noisy_n = ctx.args.noisy_n;
    for build in &ctx.builds {
        let label = build.label;
        eprintln!("tenants ({label}): noisy neighbour, SQLite");
        let w = ctx
            .world(&format!("noisy-{label}"), &ctx.sqlite, None)
            .await;
        let noisy = workloads::noisy(&w, noisy_n, &build.runs(vec![ctx.default("d")])).await;
        let key = build.key("tenants.noisy.sqlite");
        f.rate(format!("{key}.drain"), noisy.drain_s);
        f.late(&key, noisy.small);
        drop(w);
        if let Some(pg) = &ctx.postgres {
            let most = ctx.most();
            eprintln!("tenants ({label}): noisy neighbour, PostgreSQL, {most} daemons");
            let w = ctx.world(&format!("pg-noisy-{label}"), pg, None).await;
            let noisy = workloads::noisy(&w, noisy_n, &build.runs(ctx.many(most))).await;
            let key = build.key("tenants.noisy.pg");
            f.rate(format!("{key}.drain"), noisy.drain_s);
            f.late(&key, noisy.small);
            drop(w);
        }
        let rate = ctx.first_rate();
        eprintln!("tenants ({label}): {rate}/s over 50 tenants, SQLite");
        let load = Load {
            tenants: 50,
            ..Load::default()
        };
        let daemons = build.runs(vec![ctx.default("d")]);
        let name = format!("tenants50-{label}");
        let late = ctx.steady(&name, &ctx.sqlite, rate, &daemons, load).await;
        f.late(&build.key("tenants.steady50"), late);
    }
}

/// The heavy-read neighbour on SQLite (one daemon) and on PostgreSQL with the most daemons, for
/// each build.
async fn reads(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    let shape = ReadsShape {
        secs: args.reads_secs,
        requesters: args.reads_requesters,
    };
    for backend in ctx.stores() {
        let tag = backend.tag();
        let daemons = match backend {
            Backend::Sqlite => 1,
            Backend::Postgres { .. } => ctx.most(),
        };
        // Built at each run: its timers are due from the hour after next.
        let base = backend.whale_base(ctx.cache, args.whale_n).await;
        for build in &ctx.builds {
            let label = build.label;
            eprintln!(
                "heavy reads ({label}): {}, {daemons} daemon(s)",
                backend.label()
            );
            let w = ctx
                .world(&format!("reads-{tag}-{label}"), backend, Some(&base))
                .await;
            let running = build.runs(ctx.many(daemons));
            let reads = workloads::reads(&w, &running, shape).await;
            let key = build.key(&format!("reads.{tag}"));
            for (what, n) in [
                ("200", reads.ok),
                ("503", reads.unavailable),
                ("other", reads.other),
                ("unanswered", reads.unanswered),
                ("readyz_polls", reads.readyz_polls),
                ("readyz_not_ok", reads.readyz_not_ok),
            ] {
                f.rate(format!("{key}.{what}"), n as f64);
            }
            f.late(&key, reads.small);
        }
    }
}
