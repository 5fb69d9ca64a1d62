//! The Poller on its own, with the in-memory EventBus and a manual clock: it never publishes
//! before `dueAt` by the clock, marks `Reached` only what the bus acknowledged, and retries what
//! the bus refused, and a timer stored due before its cursor is fired while batches are in
//! flight, and while a steady load keeps them there. (The contract-level firing tests run against real NATS in
//! `firing.rs`.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::doubles::{InMemoryEventBus, ManualClock};
use common::eventually;
use common::poller::wait_reached;
use timer_service::actors::Registry;
use timer_service::actors::poller::{PollerMsg, hold_limit};
use timer_service::domain::TimerState;
use timer_service::ports::{BusError, Clock, EventBus, OutgoingEvent, Published, SystemClock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_only_what_is_due_and_retries_what_the_bus_refused() {
    if manual_clock_is_not_the_clock() {
        return;
    }
    let scratch = common::Scratch::new();
    let registry = Registry::new("poller-test");
    let persistence_ref = common::persistence::start(&scratch, &registry, true).await;
    let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(t0));
    let bus = Arc::new(InMemoryEventBus::new());
    let persistence = registry.persistence();
    persistence
        .apply(vec![
            common::schedule_at("acme", "past", 1, t0 - chrono::Duration::seconds(1)),
            common::schedule_at("acme", "future", 2, t0 + chrono::Duration::seconds(10)),
        ])
        .await
        .unwrap();

    let poller = common::poller::start(&scratch, &registry, bus.clone(), clock.clone()).await;

    // On start it fires what is due by the clock, and only that.
    wait_reached(&persistence, "past").await;
    let published = bus.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].subject, "timer.evt.due.acme");
    assert_eq!(
        persistence
            .get("acme", "future")
            .await
            .unwrap()
            .unwrap()
            .state,
        TimerState::Scheduled
    );

    // The broker refuses: the due timer stays Scheduled.
    bus.set_refusing(true);
    clock.advance(chrono::Duration::seconds(10));
    poller.cast(PollerMsg::Tick).unwrap();
    eventually(Duration::from_secs(5), "the refused publish", || async {
        (bus.offered() >= 2).then_some(())
    })
    .await;
    assert_eq!(bus.published().len(), 1);
    let still_due = persistence
        .claim_due(clock_now(&clock), None, 10, None)
        .await
        .unwrap();
    assert_eq!(still_due.timers.len(), 1, "a refused timer stays Scheduled");

    // The broker is back: the retry publishes it and marks it.
    bus.set_refusing(false);
    poller.cast(PollerMsg::Tick).unwrap();
    wait_reached(&persistence, "future").await;
    assert_eq!(bus.published().len(), 2);
    poller.stop(None);
    persistence_ref.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_stored_due_before_the_cursor_fires_once_the_batches_in_flight_settle() {
    if manual_clock_is_not_the_clock() {
        return;
    }
    let scratch = common::Scratch::new();
    let registry = Registry::new("poller-recheck-test");
    let persistence_ref = common::persistence::start(&scratch, &registry, true).await;
    let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(t0));
    let bus = Arc::new(GatedBus::default());
    let persistence = registry.persistence();
    let seconds = chrono::Duration::seconds;
    persistence
        .apply(vec![common::schedule_at(
            "acme",
            "first",
            1,
            t0 - seconds(10),
        )])
        .await
        .unwrap();
    let poller = common::poller::start(&scratch, &registry, bus.clone(), clock.clone()).await;
    eventually(
        Duration::from_secs(5),
        "the first batch in flight",
        || async { (bus.entered() == 1).then_some(()) },
    )
    .await;

    // While it is held, one timer is stored due before the cursor and one after it.
    let earlier = t0 - seconds(20);
    persistence
        .apply(vec![
            common::schedule_at("acme", "earlier", 2, earlier),
            common::schedule_at("acme", "after", 3, t0 - seconds(5)),
        ])
        .await
        .unwrap();
    poller.cast(PollerMsg::WakeAt(earlier)).unwrap();
    // The wake-up claims from "earlier", before the cursor: both join the flight.
    eventually(
        Duration::from_secs(5),
        "the second batch in flight",
        || async { (bus.entered() == 2).then_some(()) },
    )
    .await;
    assert!(bus.inner.published().is_empty());

    // Once both have settled, a claim from the start finds it, with no tick to help (an hour).
    bus.open();
    wait_reached(&persistence, "earlier").await;
    let mut fired: Vec<String> = bus
        .inner
        .published()
        .iter()
        .map(|event| event.message_id.clone())
        .collect();
    fired.sort();
    assert_eq!(fired.len(), 3, "each timer published once: {fired:?}");
    poller.stop(None);
    persistence_ref.stop(None);
}

/// A wake-up that comes while the Poller holds all it may (`hold_limit`) is not lost: once the
/// batches in flight settle, the Poller claims again and plans the next wake-up, with no tick to
/// help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_that_comes_while_the_hold_limit_is_reached_is_served_once_batches_settle() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("poller-hold-limit-test");
    let persistence_ref = common::persistence::start(&scratch, &registry, true).await;
    let persistence = registry.persistence();
    let now = Utc::now();
    // Just short of two full claims: the second one is not full, so the Poller plans its wake-up
    // for `later`, and then a failed batch's retry replaces that plan.
    let count = hold_limit(100) - 1;
    let commands = (0..count)
        .map(|i| {
            let due =
                now - chrono::Duration::seconds(60) + chrono::Duration::milliseconds(i as i64);
            common::schedule_at("acme", &format!("t-{i:05}"), i as u64 + 1, due)
        })
        .collect();
    persistence.apply(commands).await.unwrap();
    let later = now + chrono::Duration::seconds(2);
    persistence
        .apply(vec![common::schedule_at(
            "acme",
            "later",
            count as u64 + 1,
            later,
        )])
        .await
        .unwrap();

    // The oldest batch fails at once; every other one is held until the gate opens.
    let bus = Arc::new(FailFirstBus::default());
    let poller =
        common::poller::start(&scratch, &registry, bus.clone(), Arc::new(SystemClock)).await;
    eventually(Duration::from_secs(10), "the failed batch", || async {
        bus.failed.load(Ordering::SeqCst).then_some(())
    })
    .await;
    // The retry's wake-up comes 100 ms after the failure, while the hold limit is still reached.
    tokio::time::sleep(Duration::from_millis(400)).await;
    bus.gate.open();

    wait_reached(&persistence, "t-00000").await;
    wait_reached(&persistence, "later").await;
    poller.stop(None);
    persistence_ref.stop(None);
}

/// A refused batch is published again while the load goes on: a steady feed keeps a batch at
/// the broker at every instant, so the run that claimed the refused timer never runs dry, and
/// its fence would keep the timer out of every claim until its lease (30 s) lapsed. The
/// failure closes the run instead: it ends once what it holds settles, and the next claim takes
/// the timer again within a second or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_timer_is_published_again_while_a_steady_load_keeps_batches_in_flight() {
    let bus = Arc::new(SlowBus::refusing_first());
    let took = steady_feed(bus.clone(), "poller-steady-refusal-test", |now| now).await;
    assert!(bus.failed.load(Ordering::SeqCst), "t-00000 was refused");
    assert!(
        took.is_some_and(|took| took < Duration::from_secs(5)),
        "the refused timer was published again only {took:?} after it was stored (None: not \
         while the load went on): held back by its run"
    );
}

/// A timer stored due before the cursor while the load goes on (a command that reached the
/// daemon late, after a lost broker link, with its dueAt past) fires within a second or two:
/// the run that the steady feed keeps open never ends, so the claim after the cursor, which
/// cannot see it, must not be all the run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_stored_due_before_the_cursor_fires_while_a_steady_load_keeps_batches_in_flight() {
    let bus = Arc::new(SlowBus::default());
    let took = steady_feed(bus.clone(), "poller-steady-behind-test", |now| {
        now - chrono::Duration::seconds(10)
    })
    .await;
    assert!(
        took.is_some_and(|took| took < Duration::from_secs(5)),
        "the timer stored due before the cursor was published only {took:?} after it was \
         stored (None: not while the load went on): held back by its run"
    );
}

/// A timer due every 50 ms (each batch takes 200 ms at the bus); a second in, `t-00000`, due
/// at `first_due(now)`; until it is published, or 400 timers. Returns how long after it was
/// stored it was published (`None`: not while the feed went on), once it is `Reached`.
async fn steady_feed(
    bus: Arc<SlowBus>,
    name: &str,
    first_due: fn(chrono::DateTime<Utc>) -> chrono::DateTime<Utc>,
) -> Option<Duration> {
    let scratch = common::Scratch::new();
    let registry = Registry::new(name);
    let persistence_ref = common::persistence::start(&scratch, &registry, true).await;
    let persistence = registry.persistence();
    let poller =
        common::poller::start(&scratch, &registry, bus.clone(), Arc::new(SystemClock)).await;
    let feed = {
        let (persistence, poller, bus) = (persistence.clone(), poller.clone(), bus.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(50));
            let mut stored = None;
            for seq in 1..=400u64 {
                every.tick().await;
                let now = Utc::now();
                let (id, due) = match seq {
                    20 => ("t-00000".to_owned(), first_due(now)),
                    _ => (format!("feed-{seq:05}"), now),
                };
                let command = common::schedule_at("acme", &id, seq, due);
                persistence.apply(vec![command]).await.unwrap();
                poller.cast(PollerMsg::WakeAt(due)).unwrap();
                if seq == 20 {
                    stored = Some(tokio::time::Instant::now());
                }
                if bus.published_first() {
                    return stored.map(|at| at.elapsed());
                }
            }
            None
        })
    };
    let took = tokio::time::timeout(Duration::from_secs(40), feed)
        .await
        .expect("the feed ends within 40 s")
        .unwrap();
    wait_reached(&persistence, "t-00000").await;
    poller.stop(None);
    persistence_ref.stop(None);
    took
}

/// Takes 200 ms over every batch it publishes; refusing first: refuses the batch holding the
/// first timer (`t-00000`) once.
#[derive(Default)]
struct SlowBus {
    inner: InMemoryEventBus,
    refuse_first: bool,
    failed: AtomicBool,
}

impl SlowBus {
    fn refusing_first() -> Self {
        Self {
            refuse_first: true,
            ..Self::default()
        }
    }

    /// Whether `t-00000` was published (after its refusal).
    fn published_first(&self) -> bool {
        holds_first(&self.inner.published())
    }
}

#[async_trait::async_trait]
impl EventBus for SlowBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = self
            .refuse_first
            .then(|| refused_once(&events, &self.failed))
            .flatten();
        match refused {
            Some(refused) => refused,
            None => self.inner.publish_all(events).await,
        }
    }
}

/// Fails the batch holding the first timer (`t-00000`) at once, and holds every other batch
/// until its gate opens.
#[derive(Default)]
struct FailFirstBus {
    gate: GatedBus,
    failed: AtomicBool,
}

#[async_trait::async_trait]
impl EventBus for FailFirstBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published> {
        match refused_once(&events, &self.failed) {
            Some(refused) => refused,
            None => self.gate.publish_all(events).await,
        }
    }
}

/// Whether `events` hold the first timer (`t-00000`).
fn holds_first(events: &[OutgoingEvent]) -> bool {
    events
        .iter()
        .any(|e| String::from_utf8_lossy(&e.payload).contains("\"t-00000\""))
}

/// The refusal of the batch holding the first timer, the first time `failed` is not yet set.
fn refused_once(events: &[OutgoingEvent], failed: &AtomicBool) -> Option<Vec<Published>> {
    (holds_first(events) && !failed.swap(true, Ordering::SeqCst)).then(|| {
        events
            .iter()
            .map(|_| Err(BusError("refused".into())))
            .collect()
    })
}

/// Holds every publish until opened, counting the batches that wait.
#[derive(Default)]
struct GatedBus {
    inner: InMemoryEventBus,
    entered: AtomicUsize,
    open: tokio::sync::Notify,
    opened: AtomicBool,
}

impl GatedBus {
    fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.opened.store(true, Ordering::SeqCst);
        self.open.notify_waiters();
    }
}

#[async_trait::async_trait]
impl EventBus for GatedBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let opened = self.open.notified();
        if !self.opened.load(Ordering::SeqCst) {
            opened.await;
        }
        self.inner.publish_all(events).await
    }
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<Utc> {
    clock.now()
}

/// On PostgreSQL the database server's clock decides what is due, not the Poller's: a manual
/// clock cannot move it (tests/clock_skew.rs shows that clock at work).
fn manual_clock_is_not_the_clock() -> bool {
    let skip = common::database::postgres_run();
    if skip {
        eprintln!(
            "skipped on PostgreSQL: the server's clock, not a manual one, decides what is due"
        );
    }
    skip
}
