//! The `kartograf` binary: parse the command line, set up logging, dispatch.

use clap::Parser;
use std::process::ExitCode;

// mimalloc: graph building allocates many small strings; it halves resolve time against
// glibc malloc (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = kartograf::cli::Cli::parse();
    kartograf::telemetry::init(&cli.log);
    kartograf::cli::run(cli)
}
