//! The fault-injection suite (DESIGN.md "Testing under faults"): a workload of schedules,
//! reschedules and cancels over four tenants, a nemesis injecting one fault after another, and
//! a checker judging the recorded history against the contract's invariants (the module docs
//! of `fault::checker` list them). The real binary, a real nats-server and a real database.
//!
//! A short run (one pass over every fault, about two minutes) is an ordinary test; the
//! long run repeats the passes for `FAULT_SUITE_SECONDS`:
//!
//! ```sh
//! FAULT_SUITE_SECONDS=900 cargo test --test fault_injection -- --nocapture
//! ```
//!
//! `FAULT_SUITE_SEED` replays the workload's choices of a printed run.

mod common;
mod fault;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_contract_holds_under_faults() {
    let plan = fault::Plan::from_env();
    eprintln!(
        "fault-injection run, seed {} ({})",
        plan.seed,
        plan.seconds
            .map_or("one pass over every fault".into(), |s| format!(
                "passes for {s} s"
            ))
    );
    let began = std::time::Instant::now();
    let run = fault::run(&plan).await;
    let verdict = fault::checker::check(&run);
    eprintln!("{}", fault::report::render(&run, &verdict, began.elapsed()));
    let summary = fault::report::summary(&run, &verdict);
    assert!(
        summary.is_empty(),
        "the contract was violated under faults (seed {}):\n{summary}",
        plan.seed
    );
}
