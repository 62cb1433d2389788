//! Objects whose numbers make resolution do native work: replica counts, quantities.
