//! The Canceller on its own, with a real Persistence and a command publisher that says when
//! the commands before a `CancelTimers` are handled: a job whose earlier commands are still
//! pending (held by another daemon, a broker path gone silent) holds no other tenant's job
//! back, and still waits for them before it cancels anything; a flood of such jobs looks at
//! the broker a bounded number at a time; one whose earlier commands never come begins when
//! its wait runs out; a step that fails (the database gone for a moment)
//! is tried again until the job is done. (The command's whole path, from the stream to the
//! count, is shown against real NATS in `cancel_many.rs`.)

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::Utc;
use common::eventually;
use ractor::{Actor, ActorRef, RpcReplyPort};
use timer_service::actors::canceller::{
    Cancelled, CancellerArgs, EARLIER_COMMANDS_WAIT, Job, STEP, WAITS_AT_ONCE,
};
use timer_service::actors::persistence::PersistenceMsg;
use timer_service::actors::{Canceller, NamedActor, Registry};
use timer_service::domain::{CancelFilter, CancelMany, StreamIncarnation, TimerState};
use timer_service::ports::{BusError, CommandPublisher, PublishError};
use timer_service::storage::StoreError;
use tokio::sync::oneshot;

/// Says every command before a `CancelTimers` is handled, except before those it holds back
/// (or all, while `hold_all`); counts the looks at each.
#[derive(Default)]
struct Pending {
    held: Mutex<HashSet<u64>>,
    hold_all: Mutex<bool>,
    looks: Mutex<HashMap<u64, usize>>,
}

#[async_trait]
impl CommandPublisher for Pending {
    async fn publish(
        &self,
        _subject: String,
        _payload: Bytes,
    ) -> Result<(StreamIncarnation, u64), PublishError> {
        Err(PublishError::NotStored("not used here".into()))
    }

    async fn handled_through(&self, seq: u64) -> Result<u64, BusError> {
        *self.looks.lock().unwrap().entry(seq).or_default() += 1;
        let held = *self.hold_all.lock().unwrap() || self.held.lock().unwrap().contains(&seq);
        Ok(if held { 0 } else { seq - 1 })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_waiting_for_earlier_commands_holds_no_other_tenants_cancel_back() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("canceller-test");
    let persistence_actor = common::persistence::start(&scratch, &registry, true).await;
    schedule_three(&registry, &[("slow", 1), ("quick", 2)]).await;

    let publisher = Arc::new(Pending::default());
    // The commands before slow's CancelTimers (sequence 100) are held elsewhere.
    publisher.held.lock().unwrap().insert(100);
    let canceller = start_canceller(&registry, publisher.clone()).await;
    let mut slow = run(&registry, "slow", 100);
    let quick = run(&registry, "quick", 101);

    // The quick tenant's cancel is done while the slow one still waits.
    let count = tokio::time::timeout(Duration::from_secs(30), quick)
        .await
        .expect("quick's cancel answered")
        .unwrap();
    assert_eq!(count, Ok(3));
    assert!(
        matches!(slow.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        "slow's cancel is still waiting for the commands before it"
    );
    // ... and has cancelled nothing yet: a schedule before it may still be stored.
    for n in 0..3 {
        let row = registry
            .persistence()
            .get("slow", &format!("slow-{n}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.state, TimerState::Scheduled);
    }

    // Once they are handled, it runs.
    publisher.held.lock().unwrap().clear();
    let count = eventually(Duration::from_secs(30), "slow's cancel answered", || {
        let got = slow.try_recv().ok();
        async move { got }
    })
    .await;
    assert_eq!(count, Ok(3));
    canceller.stop(None);
    persistence_actor.stop(None);
}

/// A job whose earlier commands are never handled (their daemon stuck, a broker path silent
/// for good) begins once its wait runs out, not before and not never (docs/CONTRACT.md §3: it
/// waits up to 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_earlier_commands_stay_pending_begins_when_its_wait_runs_out() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("canceller-bound-test");
    let persistence_actor = common::persistence::start(&scratch, &registry, true).await;
    schedule_three(&registry, &[("stuck", 1)]).await;
    let publisher = Arc::new(Pending::default());
    *publisher.hold_all.lock().unwrap() = true;
    let canceller = start_canceller(&registry, publisher.clone()).await;

    let began = tokio::time::Instant::now();
    let count = tokio::time::timeout(EARLIER_COMMANDS_WAIT * 3, run(&registry, "stuck", 100))
        .await
        .expect("the cancel answered after its wait ran out")
        .unwrap();
    assert_eq!(count, Ok(3));
    assert!(
        began.elapsed() >= EARLIER_COMMANDS_WAIT,
        "it began after {:?}, before its wait ran out",
        began.elapsed()
    );
    assert!(
        publisher.looks.lock().unwrap()[&100] > 1,
        "it looked again while it waited"
    );
    canceller.stop(None);
    persistence_actor.stop(None);
}

/// A flood of cancels whose earlier commands are all pending: only `WAITS_AT_ONCE` of them look
/// at the broker at once, the rest queue, and all are done once the commands are handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_waiting_cancels_looks_at_the_broker_a_bounded_number_at_a_time() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("canceller-flood-test");
    let persistence_actor = common::persistence::start(&scratch, &registry, true).await;
    let publisher = Arc::new(Pending::default());
    *publisher.hold_all.lock().unwrap() = true;
    let canceller = start_canceller(&registry, publisher.clone()).await;
    let jobs = WAITS_AT_ONCE + 8;
    let answers: Vec<_> = (0..jobs as u64)
        .map(|n| run(&registry, &format!("t{n}"), 100 + n))
        .collect();

    // Every wait under way has looked several times: any other would have begun meanwhile.
    eventually(
        Duration::from_secs(10),
        "the waits to look again",
        || async {
            let looks = publisher.looks.lock().unwrap();
            (looks.len() >= WAITS_AT_ONCE && looks.values().all(|&n| n >= 3)).then_some(())
        },
    )
    .await;
    assert_eq!(
        publisher.looks.lock().unwrap().len(),
        WAITS_AT_ONCE,
        "jobs waiting at once"
    );

    *publisher.hold_all.lock().unwrap() = false;
    for answer in answers {
        let count = tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .expect("every cancel answered")
            .unwrap();
        assert_eq!(count, Ok(0));
    }
    canceller.stop(None);
    persistence_actor.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_tried_again_until_the_cancel_is_done() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("canceller-retry-test");
    let real = common::persistence::start(&scratch, &registry, false).await;
    // The first step fails, as if the database went away; everything else goes on.
    let mut failed = false;
    let stand_in = common::persistence::stand_in(&registry, &real, move |message| match message {
        // A step is the only operation of `STEP` rows here.
        PersistenceMsg::Run(operation) if operation.rows == STEP && !failed => {
            failed = true;
            operation.fail(StoreError::Unavailable("the database went away".into()));
            None
        }
        message => Some(message),
    })
    .await;
    schedule_three(&registry, &[("acme", 1)]).await;
    let canceller = start_canceller(&registry, Arc::new(Pending::default())).await;

    let count = tokio::time::timeout(Duration::from_secs(30), run(&registry, "acme", 100))
        .await
        .expect("the cancel is done after its failed step")
        .unwrap();
    assert_eq!(count, Ok(3));
    canceller.stop(None);
    stand_in.stop(None);
    real.stop(None);
}

/// A step serves the cancels waiting in their order and takes at most [`STEP`] timers in all
/// (docs/CONTRACT.md §3, CancelTimers): the one that fills it is not its command's last, and
/// the cancels after it are not reached; the next step goes on where the rows say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancels_waiting_share_a_step_of_at_most_step_timers() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("canceller-share-test");
    let real = common::persistence::start(&scratch, &registry, true).await;
    let due = Utc::now() + chrono::Duration::hours(1);
    let sizes = [("a", 300), ("b", 300), ("c", 100)];
    let mut commands = Vec::new();
    for (tenant, n) in sizes {
        for k in 0..n {
            commands.push(common::schedule_at(
                tenant,
                &format!("{tenant}-{k}"),
                1 + k,
                due,
            ));
        }
    }
    registry.persistence().apply(commands).await.unwrap();
    let cancel = |tenant: &str| CancelMany {
        tenant_id: tenant.into(),
        filter: CancelFilter::default(),
        seq: 10_000,
        received_at: Utc::now(),
    };
    let cancels: Vec<CancelMany> = sizes.iter().map(|(t, _)| cancel(t)).collect();

    let (first, _) = registry
        .persistence()
        .cancel_steps(cancels.clone(), STEP)
        .await
        .unwrap();
    let done: Vec<(usize, bool)> = first.iter().map(|s| (s.picked, s.last)).collect();
    assert_eq!(
        done,
        [(300, true), (200, false)],
        "a's 300, then b's as far as 500 go; c not reached"
    );
    let (second, _) = registry
        .persistence()
        .cancel_steps(cancels[1..].to_vec(), STEP)
        .await
        .unwrap();
    let done: Vec<(usize, bool)> = second.iter().map(|s| (s.picked, s.last)).collect();
    assert_eq!(done, [(100, true), (100, true)], "b's rest, then c's");
    for (tenant, n) in sizes {
        let count = registry
            .persistence()
            .count_cancelled_by(tenant, 10_000)
            .await
            .unwrap();
        assert_eq!(count, n, "{tenant}'s timers all cancelled, each once");
    }
    real.stop(None);
}

/// Three pending timers of each tenant, their commands at `10 * seq` and after.
async fn schedule_three(registry: &Registry, tenants: &[(&str, u64)]) {
    let due = Utc::now() + chrono::Duration::hours(1);
    let mut commands = Vec::new();
    for (tenant, seq) in tenants {
        for n in 0..3 {
            let id = format!("{tenant}-{n}");
            commands.push(common::schedule_at(tenant, &id, seq * 10 + n, due));
        }
    }
    registry.persistence().apply(commands).await.unwrap();
}

async fn start_canceller(
    registry: &Registry,
    publisher: Arc<dyn CommandPublisher>,
) -> ActorRef<timer_service::actors::canceller::CancellerMsg> {
    let (canceller, _) = Actor::spawn(
        Some(registry.name(Canceller::NAME)),
        Canceller,
        CancellerArgs {
            registry: registry.clone(),
            publisher,
        },
    )
    .await
    .unwrap();
    canceller
}

/// Hands the Canceller a `CancelTimers` of all of `tenant`'s pending timers at `seq`; the
/// receiver gets its count.
fn run(registry: &Registry, tenant: &str, seq: u64) -> oneshot::Receiver<Cancelled> {
    let (tx, rx) = oneshot::channel::<Cancelled>();
    let job = Job {
        cancel: CancelMany {
            tenant_id: tenant.into(),
            filter: CancelFilter::default(),
            seq,
            received_at: Utc::now(),
        },
        stream_seq: seq,
        delivery: None,
        reply: Some(RpcReplyPort::from(tx)),
    };
    assert!(registry.cancel_many(job), "the Canceller takes the job");
    rx
}
