//! A task an actor owns.

use ractor::concurrency::JoinHandle;

/// Aborts the task when dropped. An actor keeps one in its state: whether the actor stops
/// gracefully or is killed (its state is then dropped without `post_stop`), the task ends too.
pub struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
