//! Answers of evaluations on one pod, remembered on the pod.
//!
//! Every question resolution asks of a pod alone — does it match a component's type
//! selector, what are its instance and replica keys, do a gang member's filters pass, what
//! are its gang keys — depends only on the pod and the definition. A pod version is
//! immutable, so the answers stay valid until the definition changes (a new catalog
//! generation). Re-resolving a workload after one pod changed then evaluates only that pod,
//! and pods stay packed (see [`crate::expr::value::Packed`]) instead of being unpacked on every
//! resolve.

use parking_lot::Mutex;

/// What a question about a pod answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A yes or no (type selectors, gang filters).
    Flag(bool),
    /// A key (instance, replica and gang keys), if the pod has one.
    Text(Option<Box<str>>),
}

/// A remembered (question, answer, evaluation error).
pub(crate) type Remembered = (usize, Answer, Option<Box<str>>);

/// One remembered answer: the question (an address inside the definition), the answer,
/// and the evaluation error it came with, if any (replayed as a diagnostic).
#[derive(Clone, Debug)]
struct Entry {
    question: usize,
    answer: Answer,
    failure: Option<Box<str>>,
}

#[derive(Debug, Default)]
struct State {
    /// (catalog generation, definition id) the answers belong to.
    owner: (u64, u64),
    entries: Vec<Entry>,
    /// The pod's value, unpacked when it arrived, for its first resolution to take.
    fresh: Option<jaq_json::Val>,
}

/// The answers remembered for one pod. Cloning gives an empty memo.
#[derive(Debug, Default)]
pub struct Memo(Mutex<State>);

impl Clone for Memo {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl Memo {
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        // The state is a plain cache; a panic elsewhere cannot leave it inconsistent.
        self.0.lock()
    }

    /// The remembered answer to `question` for `owner`, with its evaluation error.
    pub(crate) fn get(
        &self,
        owner: (u64, u64),
        question: usize,
    ) -> Option<(Answer, Option<Box<str>>)> {
        let state = self.state();
        if state.owner != owner {
            return None;
        }
        state
            .entries
            .iter()
            .find(|e| e.question == question)
            .map(|e| (e.answer.clone(), e.failure.clone()))
    }

    /// Remembers an answer; answers of another owner are forgotten.
    pub(crate) fn put(
        &self,
        owner: (u64, u64),
        question: usize,
        answer: Answer,
        failure: Option<Box<str>>,
    ) {
        let mut state = self.state();
        if state.owner != owner {
            state.owner = owner;
            state.entries.clear();
        }
        if state.entries.iter().all(|e| e.question != question) {
            // A new buffer of the exact size: growing (or shrinking) in place leaves slack in
            // every pod's memo.
            let mut entries = Vec::with_capacity(state.entries.len() + 1);
            entries.append(&mut state.entries);
            entries.push(Entry {
                question,
                answer,
                failure,
            });
            state.entries = entries;
        }
    }

    /// Every remembered (question, answer, error) for `owner`; `None` for another owner.
    pub(crate) fn answers(&self, owner: (u64, u64)) -> Option<Vec<Remembered>> {
        let state = self.state();
        (state.owner == owner).then(|| {
            state
                .entries
                .iter()
                .map(|e| (e.question, e.answer.clone(), e.failure.clone()))
                .collect()
        })
    }

    /// Keeps the pod's unpacked value until the first resolution takes it.
    pub(crate) fn keep_value(&self, value: jaq_json::Val) {
        self.state().fresh = Some(value);
    }

    /// The value kept by [`Memo::keep_value`], if still there.
    pub(crate) fn take_value(&self) -> Option<jaq_json::Val> {
        self.state().fresh.take()
    }

    /// Forgets a kept value that no resolution took.
    pub(crate) fn drop_value(&self) {
        self.state().fresh = None;
    }

    /// Number of remembered answers (for tests and benchmarks).
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
