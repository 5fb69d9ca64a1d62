//! The web console beside a big tenant: each page's time with the whale's millions pending, and
//! a steady load's lateness alone and while browsers refresh the whale's page every second.
//!
//! A "browser" here sends the requests the console's script sends for that page
//! (`console/js/tenant.js`): the tenant's activity (with the week ahead at its first load and
//! once a minute after) and the first page of its timers, at once. Twenty real Chromiums
//! would measure the browsers' own CPU on the same two cores, not the daemon's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{collect_lateness, meter, schedule_late, stop, wait_for, wait_for_api};
use crate::daemon::Settings;
use crate::support::http_request;
use crate::workloads::LatenessRun;
use crate::world::World;

/// The operator token of the daemon the console workload starts.
pub const CONSOLE_TOKEN: &str = "bench-operator-token-0123456789";
/// The whale's tenant id (the base's).
const WHALE: &str = "whale";
/// Times each page is loaded for its figure.
pub const LOADS: usize = 10;
/// The console's page size (`console/js/state.js`).
const PAGE_SIZE: usize = 50;

/// A page, as the requests its script sends at once.
#[derive(Debug, Clone, Copy)]
pub enum Page {
    /// The overview: every tenant's row and the daemon's state.
    Overview,
    /// The whale's page at its first load: activity with the week ahead, the first page of
    /// timers.
    TenantFirst,
    /// The whale's page refreshing: activity, the first page of timers.
    TenantRefresh,
    /// The whale's timers filtered by a `dueAt` range in the middle of its week.
    DueRange,
    /// The whale's timers filtered by correlation id.
    Correlation,
    /// One timer's detail.
    Timer,
    /// Cancel-many's dry run over a `dueAt` range of a day (the count before the confirm).
    DryRun,
}

impl Page {
    pub const ALL: [Page; 7] = [
        Page::Overview,
        Page::TenantFirst,
        Page::TenantRefresh,
        Page::DueRange,
        Page::Correlation,
        Page::Timer,
        Page::DryRun,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Page::Overview => "overview",
            Page::TenantFirst => "tenant_first",
            Page::TenantRefresh => "tenant_refresh",
            Page::DueRange => "due_range",
            Page::Correlation => "correlation",
            Page::Timer => "timer",
            Page::DryRun => "dry_run",
        }
    }
}

/// What [`console`] measured.
pub struct ConsoleRun {
    /// The first overview after the start, while the census of every tenant is first counted.
    pub first_overview_ms: f64,
    /// From the daemon's start until the whale's page shows its count.
    pub counted_s: f64,
    /// Each page's load times, ms, and its loads with a request not answered 200 (or with a
    /// figure it could not read).
    pub pages: Vec<(Page, Vec<f64>, u64)>,
    /// The steady load alone, then beside the browsers.
    pub alone: LatenessRun,
    pub beside: LatenessRun,
    /// The browsers' page times during the load, ms, and their requests not answered 200.
    pub browser_pages: Vec<f64>,
    pub browser_failed: u64,
}

/// Where the whale's timers fall: the base's first `dueAt` and its step (the base is built
/// with them, `world::Backend::week_base`).
#[derive(Debug, Clone, Copy)]
pub struct WhaleShape {
    pub count: u64,
    pub first_due: chrono::DateTime<chrono::Utc>,
}

/// Starts the daemon on the world's base (the whale's timers), measures each page [`LOADS`]
/// times, then a steady load of `rate` timers/s for `secs` alone and beside `browsers`.
pub async fn console(
    world: &World,
    settings: &Settings,
    whale: WhaleShape,
    rate: u32,
    secs: u32,
    browsers: usize,
) -> ConsoleRun {
    let mut settings = settings.clone();
    settings
        .env
        .push(("TIMER_CONSOLE_OPERATOR_TOKEN".into(), CONSOLE_TOKEN.into()));
    let started = Instant::now();
    let running = vec![world.daemon(&settings)];
    let port = settings
        .http_port
        .expect("the console needs the HTTP listener");
    let console = Console {
        addr: format!("127.0.0.1:{port}"),
        whale,
    };
    world.wait_for_command_stream().await;
    wait_for_api(world, WHALE).await;
    let first_overview_ms = console.load(Page::Overview).await.0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while !console.counted().await {
        assert!(Instant::now() < deadline, "the whale was never counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counted_s = started.elapsed().as_secs_f64();
    let mut pages = Vec::new();
    for page in Page::ALL {
        let (mut times, mut failed) = (Vec::with_capacity(LOADS), 0);
        for _ in 0..LOADS {
            let (ms, ok) = console.load(page).await;
            times.push(ms);
            failed += u64::from(!ok);
        }
        pages.push((page, times, failed));
    }

    let alone = steady(world, &running, rate, secs, "alone").await;
    let console = Arc::new(console);
    let until = Instant::now() + Duration::from_secs(u64::from(secs)) + Duration::from_secs(2);
    let browser_failed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..browsers)
        .map(|i| {
            let (console, failed) = (console.clone(), browser_failed.clone());
            tokio::spawn(async move { console.browse(i, until, failed).await })
        })
        .collect();
    let beside = steady(world, &running, rate, secs, "beside").await;
    let mut browser_pages = Vec::new();
    for task in tasks {
        browser_pages.extend(task.await.expect("a browser"));
    }
    let peak = stop(running);
    ConsoleRun {
        first_overview_ms,
        counted_s,
        pages,
        alone: LatenessRun {
            peak_rss_mib: peak,
            ..alone
        },
        beside: LatenessRun {
            peak_rss_mib: peak,
            ..beside
        },
        browser_pages,
        browser_failed: browser_failed.load(Ordering::Relaxed),
    }
}

/// `rate` timers/s for `secs` over ten tenants, each due a second after it is sent; their
/// lateness at a subscriber.
async fn steady(
    world: &World,
    running: &[crate::daemon::Daemon],
    rate: u32,
    secs: u32,
    tag: &str,
) -> LatenessRun {
    // Every event: the whale's timers are not due during the bench, and the load before this
    // one has fired all its timers (or given up on them) by now.
    let received = collect_lateness(&world.client, "timer.evt.due.>".into()).await;
    let expected = (rate * secs) as usize;
    let cpu = meter(world, running);
    let lead = Duration::from_secs(1);
    schedule_late(&world.js, rate, expected, lead, |i| {
        format!("{tag}{}", i % 10)
    })
    .await;
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    LatenessRun {
        samples,
        expected,
        peak_rss_mib: 0.0,
        cpu: cpu.finish(),
        api_answered: 0,
        api_failed: 0,
        metrics: None,
    }
}

/// The console of one daemon, asked as its script asks.
struct Console {
    addr: String,
    whale: WhaleShape,
}

impl Console {
    /// Loads `page`: its time in ms (all its requests at once, until the last answered), and
    /// whether every one answered 200.
    async fn load(&self, page: Page) -> (f64, bool) {
        let at = |ms: i64| {
            crate::support::rfc3339(self.whale.first_due + chrono::Duration::milliseconds(ms))
        };
        let day = 86_400_000;
        let started = Instant::now();
        let ok = match page {
            Page::Overview => self.get("/console/api/overview").await,
            Page::TenantFirst | Page::TenantRefresh => {
                let week = matches!(page, Page::TenantFirst);
                let (a, b) = tokio::join!(self.activity(week), self.list(serde_json::json!({})));
                a && b
            }
            Page::DueRange => {
                let filter = serde_json::json!({ "dueFrom": at(3 * day), "dueTo": at(4 * day) });
                self.list(filter).await
            }
            Page::Correlation => {
                let filter = serde_json::json!({ "correlationId": self.middle("corr") });
                self.list(filter).await
            }
            Page::Timer => {
                let body = serde_json::json!({ "serviceCallId": self.middle(WHALE) });
                self.post("get", body).await
            }
            Page::DryRun => {
                let body = serde_json::json!({
                    "dueFrom": at(3 * day),
                    "dueTo": at(4 * day),
                    "dryRun": true,
                });
                self.post("cancel-many", body).await
            }
        };
        (started.elapsed().as_secs_f64() * 1000.0, ok)
    }

    /// The id of the whale's timer in the middle of its base (`support::prefill_sql` names
    /// them `whale-N`, correlation `corr-N`).
    fn middle(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.whale.count / 2)
    }

    /// Whether the whale's page shows its count (the census of every tenant is in).
    async fn counted(&self) -> bool {
        let path = format!("/console/api/tenants/{WHALE}/activity");
        let Some((200, body)) = self.request("GET", &path, "").await else {
            return false;
        };
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        reply["pending"]["countedAt"].is_string()
    }

    /// One browser refreshing the whale's page every second until `until`: each refresh's time.
    async fn browse(&self, i: usize, until: Instant, failed: Arc<AtomicU64>) -> Vec<f64> {
        // Browsers opened at different instants within the first second.
        tokio::time::sleep(Duration::from_millis(50 * i as u64 % 1000)).await;
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut week_loaded: Option<Instant> = None;
        let mut times = Vec::new();
        while Instant::now() < until {
            every.tick().await;
            let week = week_loaded.is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
            let page = if week {
                Page::TenantFirst
            } else {
                Page::TenantRefresh
            };
            let (ms, ok) = self.load(page).await;
            if week && ok {
                week_loaded = Some(Instant::now());
            }
            times.push(ms);
            if !ok {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        times
    }

    /// The whale's activity; a figure it could not read (past the API's read limit) says
    /// `error` in its place, and counts as a failure.
    async fn activity(&self, week: bool) -> bool {
        let path = format!(
            "/console/api/tenants/{WHALE}/activity{}",
            if week { "?week" } else { "" }
        );
        matches!(self.request("GET", &path, "").await,
            Some((200, body)) if !body.contains("\"error\""))
    }

    async fn list(&self, mut filter: serde_json::Value) -> bool {
        filter["limit"] = PAGE_SIZE.into();
        self.post("list", filter).await
    }

    async fn get(&self, path: &str) -> bool {
        matches!(self.request("GET", path, "").await, Some((200, _)))
    }

    async fn post(&self, verb: &str, body: serde_json::Value) -> bool {
        let path = format!("/console/api/tenants/{WHALE}/{verb}");
        let body = body.to_string();
        matches!(self.request("POST", &path, &body).await, Some((200, _)))
    }

    async fn request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        let bearer = format!("Bearer {CONSOLE_TOKEN}");
        let headers = [
            ("Authorization", bearer.as_str()),
            ("Content-Type", "application/json"),
            ("Sec-Fetch-Site", "same-origin"),
        ];
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            http_request(&self.addr, method, path, &headers, body),
        )
        .await;
        answer.ok().flatten()
    }
}
