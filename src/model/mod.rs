//! What every layer above the engine shares: the cached object and pod model (with the one
//! rule of what is cached), resource accounting, the per-pod memo of answers, and ownership
//! (controller chains and root workloads). Below `resolve`, `index`, `source` and `server`;
//! above `expr` and `definition`.

pub mod memo;
pub mod names;
pub mod object;
pub mod ownership;
mod peek;
pub mod resources;
pub mod skip;

pub use memo::Memo;
pub use object::{Cached, OBJECT_RULE, Object, ObjectMeta, OwnerRef, POD_PROJECTION, Pod};
pub use skip::{Skip, SkipCounts, Skipped};
