//! The `kartograf` binary: parse the command line and dispatch.

#![forbid(unsafe_code)]

use clap::Parser;
use std::process::ExitCode;

// mimalloc: graph building allocates many small strings; it halves resolve time against
// glibc malloc (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    kartograf::cli::run(kartograf::cli::Cli::parse())
}
