//! The benches' command line (`cargo bench --bench NAME -- --option VALUE`), one reader for
//! all of them.

use std::str::FromStr;

/// The process's arguments.
pub struct Args(Vec<String>);

impl Args {
    /// This process's arguments.
    pub fn new() -> Args {
        Args(std::env::args().collect())
    }

    /// Whether `cargo bench` runs it (`--bench`); without it (`cargo test --benches`) a bench
    /// makes a short smoke run.
    pub fn bench(&self) -> bool {
        self.0.iter().any(|a| a == "--bench")
    }

    /// The word after `name`.
    pub fn text(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }

    /// The value after `name`, when it parses.
    pub fn value<T: FromStr>(&self, name: &str) -> Option<T> {
        self.text(name).and_then(|v| v.parse().ok())
    }
}
