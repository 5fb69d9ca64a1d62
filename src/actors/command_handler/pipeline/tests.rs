//! Which gathered commands the pipeline hands to storage, and when: two transactions side by
//! side never hold one key (docs/CONTRACT.md §3, "Rules for one key").

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::oneshot;

use super::*;
use crate::domain::StreamIncarnation;
use crate::domain::timer::tests::{cancel, schedule};
use crate::ports::{BusError, Delivery, InboundCommand};

/// A delivery that settles nothing anywhere.
struct Nowhere;

#[async_trait]
impl Delivery for Nowhere {
    async fn ack(&self) -> Result<(), BusError> {
        Ok(())
    }
    async fn term(&self) -> Result<(), BusError> {
        Ok(())
    }
    async fn nak(&self, _: Duration) -> Result<(), BusError> {
        Ok(())
    }
}

fn accepted(command: crate::domain::Command) -> Accepted {
    let stream = Arc::new(StreamIncarnation {
        name: "TIMER_COMMANDS".into(),
        created_ns: 1,
    });
    let inbound = InboundCommand::new(
        "timer.cmd.schedule.acme".into(),
        Bytes::new(),
        command.seq,
        stream,
        1,
        Arc::new(Nowhere),
    );
    Accepted { command, inbound }
}

/// Stands in for Persistence: records each transaction's sequences and holds its commit until
/// the test lets it finish.
#[derive(Default)]
struct Storage {
    started: Mutex<Vec<Vec<u64>>>,
    commits: Mutex<VecDeque<oneshot::Sender<()>>>,
}

impl Storage {
    fn start(self: &Arc<Self>) -> impl FnMut(Vec<Accepted>) -> JoinHandle<Stored> + use<> {
        let storage = self.clone();
        move |batch| {
            let seqs = batch.iter().map(|a| a.command.seq).collect();
            storage.started.lock().unwrap().push(seqs);
            let (commit, committed) = oneshot::channel();
            storage.commits.lock().unwrap().push_back(commit);
            tokio::spawn(async move {
                drop(batch);
                committed
                    .await
                    .map_err(|_| "the test dropped the commit".to_string())
            })
        }
    }

    fn started(&self) -> Vec<Vec<u64>> {
        self.started.lock().unwrap().clone()
    }

    /// Lets the oldest transaction commit, and waits until its task has finished.
    async fn commit_oldest(&self, pipeline: &Pipeline) {
        let commit = self.commits.lock().unwrap().pop_front().expect("a commit");
        commit.send(()).unwrap();
        let task = &pipeline.storing.front().expect("a transaction").task;
        while !task.is_finished() {
            tokio::task::yield_now().await;
        }
    }
}

/// Storage, what starts its transactions, and a pipeline of two side by side, with a schedule
/// of key `a` (sequence 1) committing and the spacing between commits past.
async fn with_a_under_way() -> (
    Arc<Storage>,
    impl FnMut(Vec<Accepted>) -> JoinHandle<Stored>,
    Pipeline,
) {
    let storage = Arc::new(Storage::default());
    let mut start = storage.start();
    let mut pipeline = Pipeline::new(2);
    pipeline.gather(vec![accepted(schedule("a", 1, 10))]);
    pipeline.start_gathered(&mut start);
    tokio::time::advance(COMMIT_SPACING).await;
    (storage, start, pipeline)
}

#[tokio::test(start_paused = true)]
async fn a_group_holding_a_key_under_way_waits_for_its_transaction() {
    let (storage, mut start, mut pipeline) = with_a_under_way().await;
    pipeline.gather(vec![
        accepted(schedule("b", 2, 10)),
        accepted(cancel("a", 3)),
    ]);
    pipeline.start_gathered(&mut start);
    assert_eq!(
        storage.started(),
        [vec![1]],
        "the cancel of `a` must not commit beside its schedule"
    );

    storage.commit_oldest(&pipeline).await;
    pipeline.start_gathered(&mut start);
    assert_eq!(storage.started(), [vec![1], vec![2, 3]]);
}

#[tokio::test(start_paused = true)]
async fn a_group_of_other_keys_commits_beside_the_one_under_way() {
    let (storage, mut start, mut pipeline) = with_a_under_way().await;
    pipeline.gather(vec![accepted(schedule("b", 2, 10))]);
    pipeline.start_gathered(&mut start);
    assert_eq!(storage.started(), [vec![1], vec![2]]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_stores_a_waiting_group_after_the_transaction_it_waits_for() {
    let (storage, start, mut pipeline) = with_a_under_way().await;
    pipeline.gather(vec![accepted(cancel("a", 2))]);

    let committer = {
        let storage = storage.clone();
        tokio::spawn(async move {
            // Lets every transaction commit as soon as it is started.
            loop {
                if let Some(commit) = storage.commits.lock().unwrap().pop_front() {
                    let _ = commit.send(());
                }
                if storage.started().len() == 2 && storage.commits.lock().unwrap().is_empty() {
                    break;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(5), pipeline.finish_with(start))
        .await
        .expect("the stop stores everything");
    committer.await.unwrap();
    assert_eq!(storage.started(), [vec![1], vec![2]]);
    assert!(pipeline.storing.is_empty() && pipeline.gathered().is_empty());
}
