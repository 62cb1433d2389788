//! The evaluation pool: requests that evaluate expressions on the caller's data (inline
//! `Resolve`, `ValidateDefinition` previews) run on a few threads of their own, never on the
//! async runtime's workers, so however slow they are, health, reads and Watch keep being
//! served. The queue is bounded: when every thread is busy and the queue is full the request
//! is shed with RESOURCE_EXHAUSTED at once. A request waiting for its evaluation holds its
//! admission permit, so in-flight evaluations count against `--concurrency-limit`.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use tonic::Status;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of evaluation threads with a bounded queue.
pub struct Evaluations {
    queue: SyncSender<Job>,
    threads: usize,
    capacity: usize,
}

/// Stack of an evaluation thread: far more than the deepest value the budget allows needs.
const STACK: usize = 32 * 1024 * 1024;

impl Evaluations {
    /// `threads` evaluation threads (at least one) and room for `queued` waiting requests.
    pub fn new(threads: usize, queued: usize) -> Arc<Evaluations> {
        let threads = threads.max(1);
        let (queue, jobs) = sync_channel::<Job>(queued);
        let jobs = Arc::new(Mutex::new(jobs));
        for i in 0..threads {
            let jobs = jobs.clone();
            let started = std::thread::Builder::new()
                .name(format!("kartograf-eval-{i}"))
                .stack_size(STACK)
                .spawn(move || work(&jobs));
            if let Err(e) = started {
                tracing::error!(error = %e, "cannot start an evaluation thread");
            }
        }
        Arc::new(Evaluations {
            queue,
            threads,
            capacity: queued,
        })
    }

    /// As many threads as the machine has cores, and a queue of four per thread.
    pub fn for_machine() -> Arc<Evaluations> {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Evaluations::new(n, 4 * n)
    }

    /// What `attempt` starts, started again every millisecond while the queue is full
    /// (RESOURCE_EXHAUSTED) and `room_until` has not passed: a full queue is usually a burst.
    /// Any other answer, or the last one, is returned.
    pub async fn retry_while_full<T, F>(
        room_until: std::time::Instant,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T, Status>
    where
        F: std::future::Future<Output = Result<T, Status>>,
    {
        loop {
            match attempt().await {
                Err(s)
                    if s.code() == tonic::Code::ResourceExhausted
                        && std::time::Instant::now() < room_until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                other => return other,
            }
        }
    }

    /// Runs `f` on an evaluation thread and waits (asynchronously) for its result.
    /// RESOURCE_EXHAUSTED when the queue is full.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Status::resource_exhausted(format!(
                    "all {} evaluation threads are busy and {} requests are queued; retry with backoff",
                    self.threads, self.capacity
                )));
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(Status::unavailable("the evaluation threads have stopped"));
            }
        }
        result
            .await
            .map_err(|_| Status::internal("the evaluation ended without a result"))
    }
}

fn work(jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let jobs = jobs.lock();
            jobs.recv()
        };
        match job {
            Ok(job) => {
                // A panic in one request's evaluation must not take the thread with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn runs_off_the_runtime_and_sheds_when_full() {
        let pool = Evaluations::new(1, 1);
        let name = pool
            .run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("kartograf-eval-0"));
        // One busy thread, one queued: the third is shed at once.
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let busy = {
            let gate = gate.clone();
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(move || {
                    let _ = gate.lock().recv_timeout(Duration::from_secs(10));
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(|| 1).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let shed = pool.run(|| 2).await;
        assert_eq!(shed.unwrap_err().code(), tonic::Code::ResourceExhausted);
        release.send(()).unwrap();
        assert!(busy.await.unwrap().is_ok());
        assert_eq!(queued.await.unwrap().unwrap(), 1);
    }
}
