//! The `kartograf` binary: parse the command line, set up logging, dispatch.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = kartograf::cli::Cli::parse();
    kartograf::telemetry::init(&cli.log);
    kartograf::cli::run(cli)
}
