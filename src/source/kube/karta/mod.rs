//! The Karta controller: Karta objects' status conditions written by one Lease-elected
//! replica ([`status`], [`lease`]): the watch, the Lease, backoff and the status writes.
//! The rules it applies (index labels, the validator's verdict, the conditions) are pure and
//! live in [`crate::karta`]. See `docs/karta-status.md`.

pub mod lease;
pub mod status;
