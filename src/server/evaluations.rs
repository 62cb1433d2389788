//! The evaluation pool: every request that evaluates expressions on the caller's data
//! (inline `Resolve`, `ValidateDefinition` previews, the webhooks: Karmada's interpreter and
//! Karta admission) runs on a few threads of their own, never on the async runtime's
//! workers, so however slow they are, health, reads and Watch keep being served.
//!
//! The wait is bounded, here and for every caller: a request waits at most the queue wait
//! (`--eval-queue-wait`) for a thread to start it, in a queue of bounded length; past that it
//! is refused with RESOURCE_EXHAUSTED ([`Refused`] names the bound), never left waiting
//! behind slow evaluations. A request that gave up is taken out of the queue, so it costs
//! the threads nothing. A request waiting for its evaluation holds its admission permit, so
//! in-flight evaluations count against `--concurrency-limit`.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};
use tonic::Status;

type Job = Box<dyn FnOnce() + Send>;

/// Default `--eval-queue-wait`: how long a request waits for an evaluation thread.
pub const DEFAULT_QUEUE_WAIT: Duration = Duration::from_millis(250);

/// A queued job's state: it is started by a thread or abandoned by its caller, not both.
const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const ABANDONED: u8 = 2;

struct Entry {
    state: Arc<AtomicU8>,
    job: Job,
}

struct Queue {
    jobs: Mutex<VecDeque<Entry>>,
    ready: Condvar,
    /// Wakes callers waiting for room when a job leaves the queue.
    room: tokio::sync::Notify,
}

/// A fixed set of evaluation threads with a bounded queue and a bounded wait.
pub struct Evaluations {
    queue: Arc<Queue>,
    threads: usize,
    capacity: usize,
    wait: Duration,
}

/// Stack of an evaluation thread: far more than the deepest value the budget allows needs.
const STACK: usize = 32 * 1024 * 1024;

impl Evaluations {
    /// `threads` evaluation threads (at least one), room for `queued` waiting requests, and
    /// the default queue wait.
    pub fn new(threads: usize, queued: usize) -> Arc<Evaluations> {
        Evaluations::bounded(threads, queued, DEFAULT_QUEUE_WAIT)
    }

    /// `threads` evaluation threads (at least one), room for `queued` waiting requests; a
    /// request waits at most `wait` for a thread to start it.
    pub fn bounded(threads: usize, queued: usize, wait: Duration) -> Arc<Evaluations> {
        let threads = threads.max(1);
        let queue = Arc::new(Queue {
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            room: tokio::sync::Notify::new(),
        });
        for i in 0..threads {
            let queue = queue.clone();
            let started = std::thread::Builder::new()
                .name(format!("kartograf-eval-{i}"))
                .stack_size(STACK)
                .spawn(move || work(&queue));
            if let Err(e) = started {
                tracing::error!(error = %e, "cannot start an evaluation thread");
            }
        }
        Arc::new(Evaluations {
            queue,
            threads,
            capacity: queued,
            wait,
        })
    }

    /// As many threads as the machine has cores, and a queue of four per thread.
    pub fn for_machine() -> Arc<Evaluations> {
        Evaluations::for_machine_waiting(DEFAULT_QUEUE_WAIT)
    }

    /// [`Evaluations::for_machine`] with this queue wait.
    pub fn for_machine_waiting(wait: Duration) -> Arc<Evaluations> {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Evaluations::bounded(n, 4 * n, wait)
    }

    /// How long a request waits for a thread before it is refused.
    pub fn queue_wait(&self) -> Duration {
        self.wait
    }

    /// Runs `f` on an evaluation thread and waits (asynchronously) for its result.
    /// RESOURCE_EXHAUSTED when no thread started it within the queue wait (the queue full
    /// all along, or every thread busy): `f` then never runs.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        self.run_by(Instant::now() + self.wait, f).await
    }

    /// [`Evaluations::run`], refused when no thread started `f` by `start_by` (at most the
    /// queue wait from now).
    pub async fn run_by<T: Send + 'static>(
        &self,
        start_by: Instant,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        let start_by = start_by.min(Instant::now() + self.wait);
        let (done, result) = tokio::sync::oneshot::channel();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let mut job: Option<Job> = Some(Box::new(move || {
            let _ = done.send(f());
        }));
        // Room in the queue, waiting for it until `start_by`.
        loop {
            let room = self.queue.room.notified();
            {
                let mut jobs = self.queue.jobs.lock();
                if jobs.len() < self.capacity.max(1) {
                    if let Some(job) = job.take() {
                        jobs.push_back(Entry {
                            state: state.clone(),
                            job,
                        });
                    }
                    self.queue.ready.notify_one();
                    break;
                }
            }
            if tokio::time::timeout_at(start_by.into(), room)
                .await
                .is_err()
            {
                return Err(self.refused());
            }
        }
        let mut result = std::pin::pin!(result);
        if let Ok(r) = tokio::time::timeout_at(start_by.into(), &mut result).await {
            return r.map_err(|_| Status::internal("the evaluation ended without a result"));
        }
        // Not finished by then: refused unless a thread started it meanwhile.
        if state
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.queue
                .jobs
                .lock()
                .retain(|e| !Arc::ptr_eq(&e.state, &state));
            self.queue.room.notify_one();
            return Err(self.refused());
        }
        result
            .await
            .map_err(|_| Status::internal("the evaluation ended without a result"))
    }

    fn refused(&self) -> Status {
        Status::resource_exhausted(
            Refused {
                threads: self.threads,
                queued: self.capacity,
                wait: self.wait,
            }
            .to_string(),
        )
    }
}

/// Why a request got no evaluation thread: every one was busy for the whole queue wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "all {threads} evaluation threads stayed busy ({queued} requests may queue) for the queue wait of {wait:?} (--eval-queue-wait); retry with backoff"
)]
pub struct Refused {
    /// Evaluation threads.
    pub threads: usize,
    /// Queue length.
    pub queued: usize,
    /// The queue wait.
    pub wait: Duration,
}

fn work(queue: &Queue) {
    loop {
        let entry = {
            let mut jobs = queue.jobs.lock();
            loop {
                if let Some(e) = jobs.pop_front() {
                    break e;
                }
                queue.ready.wait(&mut jobs);
            }
        };
        queue.room.notify_one();
        if entry
            .state
            .compare_exchange(QUEUED, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        // A panic in one request's evaluation must not take the thread with it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(entry.job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Occupies the pool's one thread until the returned sender is dropped or sent to.
    async fn occupy(pool: &Arc<Evaluations>) -> std::sync::mpsc::Sender<()> {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let p = pool.clone();
        tokio::spawn(async move {
            p.run(move || {
                let _ = started_tx.send(());
                let _ = gate.recv_timeout(Duration::from_secs(10));
            })
            .await
        });
        started.await.expect("started");
        release
    }

    #[tokio::test]
    async fn runs_off_the_runtime() {
        let pool = Evaluations::new(1, 1);
        let name = pool
            .run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("kartograf-eval-0"));
    }

    #[tokio::test]
    async fn a_request_behind_a_busy_thread_is_refused_after_the_wait_and_never_runs() {
        let pool = Evaluations::bounded(1, 4, Duration::from_millis(100));
        let release = occupy(&pool).await;
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let started = Instant::now();
        let refused = pool.run(move || flag.store(true, Ordering::SeqCst)).await;
        let waited = started.elapsed();
        let status = refused.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("--eval-queue-wait"), "{status:?}");
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        // The abandoned request left the queue: once the thread is free it never runs.
        release.send(()).unwrap();
        assert_eq!(pool.run(|| 7).await.unwrap(), 7);
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_full_queue_waits_for_room_then_refuses() {
        let pool = Evaluations::bounded(1, 1, Duration::from_millis(150));
        let release = occupy(&pool).await;
        let queued = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(|| 1).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        let shed = pool.run(|| 2).await;
        assert_eq!(shed.unwrap_err().code(), tonic::Code::ResourceExhausted);
        assert!(started.elapsed() >= Duration::from_millis(100));
        // Released within the first request's wait: it runs.
        release.send(()).unwrap();
        let first = queued.await.unwrap();
        assert!(
            first.is_ok() || first.unwrap_err().code() == tonic::Code::ResourceExhausted,
            "answered either way"
        );
        assert_eq!(pool.run(|| 3).await.unwrap(), 3);
    }

    #[tokio::test]
    async fn a_started_evaluation_is_awaited_past_the_wait() {
        let pool = Evaluations::bounded(1, 1, Duration::from_millis(50));
        let slow = pool
            .run(|| {
                std::thread::sleep(Duration::from_millis(200));
                5
            })
            .await;
        assert_eq!(slow.unwrap(), 5);
    }
}
