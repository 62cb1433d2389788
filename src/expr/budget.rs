//! The evaluation budget: work, memory, value depth and time, metered *inside* an
//! evaluation.
//!
//! Every operation of the metered value type ([`super::metered`]) pays into a meter kept in
//! a thread local while an evaluation runs: a clone, an arithmetic step, one element of an
//! iteration or of a comparison costs work units; every value it builds costs the bytes it
//! occupies; every container it builds is checked against the depth limit, and the clock is
//! read every few thousand work units. The first budget that runs out ends the evaluation at
//! once, wherever it is (the meter unwinds the interpreter's stack with a private payload
//! that [`run`] catches), so no single output can run long, allocate without bound or build
//! a value too deep to compare, print or drop.
//!
//! Why unwinding: jaq has no fuel hook, and some of its loops (`reduce`, `,` fan-out) only
//! touch values through infallible operations (`Clone`, `From`, `FromIterator`, `Ord`). A
//! sticky "exhausted" flag would be seen only by the next fallible operation, which such a
//! loop may never reach. Unwinding stops the loop where it is and drops everything it built.

use std::cell::Cell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Limits of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Work units (a clone, an arithmetic step, one element iterated, compared or built).
    pub work: u64,
    /// Bytes of values the evaluation may create (cumulative, not live).
    pub memory: u64,
    /// Deepest value (nesting of arrays and objects) the evaluation may build.
    pub depth: u32,
    /// Wall-clock time (an upper bound of the CPU time the evaluation can use).
    pub time: Duration,
}

impl Budget {
    /// Defaults: about 50 ms of work on one core, 64 MiB, depth 512, 100 ms.
    pub const DEFAULT: Budget = Budget {
        work: 5_000_000,
        memory: 64 * 1024 * 1024,
        depth: 512,
        time: Duration::from_millis(100),
    };
}

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}

static WORK: AtomicU64 = AtomicU64::new(Budget::DEFAULT.work);
static MEMORY: AtomicU64 = AtomicU64::new(Budget::DEFAULT.memory);
static DEPTH: AtomicU32 = AtomicU32::new(Budget::DEFAULT.depth);
static TIME_MICROS: AtomicU64 = AtomicU64::new(Budget::DEFAULT.time.as_micros() as u64);

/// Sets the budget every evaluation runs under from now on (the process-wide setting of
/// `serve`'s and the CLI's `--eval-*` flags).
pub fn configure(budget: Budget) {
    WORK.store(budget.work, Ordering::Relaxed);
    MEMORY.store(budget.memory, Ordering::Relaxed);
    DEPTH.store(budget.depth, Ordering::Relaxed);
    let micros = u64::try_from(budget.time.as_micros()).unwrap_or(u64::MAX);
    TIME_MICROS.store(micros, Ordering::Relaxed);
}

/// The budget evaluations run under (see [`configure`]).
pub fn configured() -> Budget {
    Budget {
        work: WORK.load(Ordering::Relaxed),
        memory: MEMORY.load(Ordering::Relaxed),
        depth: DEPTH.load(Ordering::Relaxed),
        time: Duration::from_micros(TIME_MICROS.load(Ordering::Relaxed)),
    }
}

/// The budget that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exceeded {
    /// Too many work units.
    Work,
    /// Too many bytes created.
    Memory,
    /// A value nested too deep.
    Depth,
    /// The evaluation ran past its time (or its caller's deadline).
    Time,
}

impl Exceeded {
    /// Lower-case name, as used in diagnostics and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Exceeded::Work => "work",
            Exceeded::Memory => "memory",
            Exceeded::Depth => "depth",
            Exceeded::Time => "time",
        }
    }
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Work units between two reads of the clock.
const CLOCK_EVERY: u64 = 4096;

struct Meter {
    work: Cell<u64>,
    memory: Cell<u64>,
    depth: Cell<u32>,
    until_clock: Cell<u64>,
    deadline: Cell<Option<Instant>>,
    active: Cell<bool>,
    /// Work units spent by the evaluations run on this thread (for tests and benches).
    spent: Cell<u64>,
}

thread_local! {
    static METER: Meter = const {
        Meter {
            work: Cell::new(0),
            memory: Cell::new(0),
            depth: Cell::new(u32::MAX),
            until_clock: Cell::new(CLOCK_EVERY),
            deadline: Cell::new(None),
            active: Cell::new(false),
            spent: Cell::new(0),
        }
    };
}

/// The payload that unwinds an evaluation whose budget ran out.
struct Unwind(Exceeded);

#[cold]
fn exceed(what: Exceeded) -> ! {
    panic::resume_unwind(Box::new(Unwind(what)))
}

/// Pays `units` of work; ends the evaluation when the work or time budget is spent.
#[inline]
pub fn work(units: u64) {
    METER.with(|m| {
        if !m.active.get() {
            return;
        }
        let left = m.work.get();
        if units > left {
            exceed(Exceeded::Work);
        }
        m.work.set(left - units);
        let until = m.until_clock.get();
        if units >= until {
            m.until_clock.set(CLOCK_EVERY);
            if m.deadline.get().is_some_and(|d| Instant::now() > d) {
                exceed(Exceeded::Time);
            }
        } else {
            m.until_clock.set(until - units);
        }
    });
}

/// Pays for `bytes` of new values (and one work unit per 64 bytes).
#[inline]
pub fn bytes(bytes: u64) {
    METER.with(|m| {
        if !m.active.get() {
            return;
        }
        let left = m.memory.get();
        if bytes > left {
            exceed(Exceeded::Memory);
        }
        m.memory.set(left - bytes);
    });
    work(1 + bytes / 64);
}

/// Checks that a value of nesting `depth` may be built.
#[inline]
pub fn depth(depth: u32) {
    METER.with(|m| {
        if m.active.get() && depth > m.depth.get() {
            exceed(Exceeded::Depth);
        }
    });
}

/// Bytes the running evaluation may still create (`u64::MAX` outside an evaluation).
pub fn memory_left() -> u64 {
    METER.with(|m| {
        if m.active.get() {
            m.memory.get()
        } else {
            u64::MAX
        }
    })
}

/// The depth limit of the running evaluation (`u32::MAX` outside an evaluation).
pub fn depth_limit() -> u32 {
    METER.with(|m| {
        if m.active.get() {
            m.depth.get()
        } else {
            u32::MAX
        }
    })
}

/// Ends the running evaluation as if `what` ran out (for operations that check a limit of
/// their own before doing the work).
pub fn fail(what: Exceeded) -> ! {
    exceed(what)
}

/// Work units spent on this thread by metered evaluations so far.
pub fn spent() -> u64 {
    METER.with(|m| m.spent.get())
}

/// How an evaluation under a budget ended.
pub enum Outcome<T> {
    /// It finished (successfully or with its own error) within budget.
    Done(T),
    /// A budget ran out.
    Exceeded(Exceeded),
    /// The evaluator panicked (a bug, never the input's fault): the message.
    Panicked(String),
}

/// Runs `f` under `budget` (the earlier of its time and `deadline` ends it). Not reentrant:
/// an evaluation started inside another runs under the outer meter.
pub fn run<T>(budget: Budget, deadline: Option<Instant>, f: impl FnOnce() -> T) -> Outcome<T> {
    let nested = METER.with(|m| m.active.get());
    if nested {
        return Outcome::Done(f());
    }
    let until = Instant::now() + budget.time;
    let deadline = Some(deadline.map_or(until, |d| d.min(until)));
    METER.with(|m| {
        m.work.set(budget.work);
        m.memory.set(budget.memory);
        m.depth.set(budget.depth);
        m.until_clock.set(CLOCK_EVERY.min(budget.work.max(1)));
        m.deadline.set(deadline);
        m.active.set(true);
    });
    // Deadlines already past fail before any work.
    let outcome = if deadline.is_some_and(|d| Instant::now() > d) {
        Err(Box::new(Unwind(Exceeded::Time)) as Box<dyn std::any::Any + Send>)
    } else {
        panic::catch_unwind(AssertUnwindSafe(f))
    };
    METER.with(|m| {
        m.active.set(false);
        m.spent.set(m.spent.get() + (budget.work - m.work.get()));
    });
    match outcome {
        Ok(value) => Outcome::Done(value),
        Err(payload) => match payload.downcast::<Unwind>() {
            Ok(unwind) => Outcome::Exceeded(unwind.0),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                Outcome::Panicked(message)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Budget {
        Budget {
            work: 1000,
            memory: 1000,
            depth: 4,
            time: Duration::from_secs(10),
        }
    }

    #[test]
    fn each_budget_ends_the_run() {
        let ran = |f: fn()| match run(tiny(), None, f) {
            Outcome::Exceeded(e) => Some(e),
            _ => None,
        };
        assert_eq!(
            ran(|| (0..2000).for_each(|_| work(1))),
            Some(Exceeded::Work)
        );
        assert_eq!(ran(|| bytes(2000)), Some(Exceeded::Memory));
        assert_eq!(ran(|| depth(5)), Some(Exceeded::Depth));
        assert_eq!(ran(|| depth(4)), None);
        let late = Instant::now() - Duration::from_millis(1);
        assert!(matches!(
            run(tiny(), Some(late), || ()),
            Outcome::Exceeded(Exceeded::Time)
        ));
    }

    #[test]
    fn time_is_checked_inside_a_run() {
        let budget = Budget {
            work: u64::MAX,
            time: Duration::from_millis(20),
            ..tiny()
        };
        let start = Instant::now();
        let outcome = run(budget, None, || {
            loop {
                work(1)
            }
        });
        assert!(matches!(outcome, Outcome::Exceeded(Exceeded::Time)));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn outside_a_run_nothing_is_charged_and_state_resets() {
        work(u64::MAX);
        bytes(u64::MAX);
        depth(u32::MAX);
        assert!(matches!(
            run(tiny(), None, || work(2000)),
            Outcome::Exceeded(Exceeded::Work)
        ));
        // The meter is off again, and a new run starts with a full budget.
        work(u64::MAX);
        assert!(matches!(run(tiny(), None, || work(999)), Outcome::Done(())));
    }

    #[test]
    fn a_panic_is_reported_not_propagated() {
        let outcome = run(tiny(), None, || -> () { panic!("boom") });
        assert!(matches!(outcome, Outcome::Panicked(m) if m == "boom"));
    }
}
