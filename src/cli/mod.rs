//! The `kartograf` command line.

mod check;
mod client;
mod definitions;
mod output;
mod resolve;
mod serve;
pub mod tree;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit code: invalid input (bad definitions, unreadable files).
pub const EXIT_INVALID: u8 = 1;
/// Exit code: the named workload was not found (or several matched).
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: no definition covers the workload's kind.
pub const EXIT_NO_DEFINITION: u8 = 4;

/// Resolves Kubernetes AI workloads of any framework into normalized workload graphs.
#[derive(Debug, Parser)]
#[command(name = "kartograf", version, about, long_about = None)]
pub struct Cli {
    /// Log filter, e.g. `info` or `kartograf=debug` [default: `RUST_LOG`, else `info` for
    /// `serve` and `warn` for the other commands].
    #[arg(
        long = "log-level",
        alias = "log",
        global = true,
        env = "KARTOGRAF_LOG_LEVEL"
    )]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(
        long,
        global = true,
        env = "KARTOGRAF_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: crate::telemetry::LogFormat,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Proto3 canonical JSON (the gRPC API's JSON mapping).
    Json,
    /// The same document as YAML.
    Yaml,
    /// A readable terminal view, like `kubectl describe`.
    Tree,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC service over a cluster (Kubernetes, or a watched manifest directory).
    Serve(Box<serve::Args>),
    /// List workloads from a running server, like `kubectl get`.
    Get(client::GetArgs),
    /// Show one workload's graph from a running server.
    Describe(client::DescribeArgs),
    /// Stream workload changes from a running server, one line per event.
    Watch(client::WatchArgs),
    /// GPU, CPU and memory totals from a running server.
    Totals(client::TotalsArgs),
    /// Resolve one workload from manifest files (a cluster snapshot), offline.
    Resolve(resolve::Args),
    /// Validate definition files or folders (the embedded catalog when none are given).
    Check(check::Args),
    /// List the definitions in effect (embedded catalog, plus --definitions).
    Definitions(definitions::Args),
}

/// Definition sources shared by commands.
#[derive(Debug, clap::Args)]
pub struct DefinitionArgs {
    /// A folder (or file) of extra definitions; they replace embedded ones for the same kind.
    #[arg(short = 'd', long = "definitions", env = "KARTOGRAF_DEFINITIONS")]
    pub definitions: Option<PathBuf>,
}

/// Writes `text` and a newline to stdout; a closed pipe (`kartograf … | head`) is not an
/// error.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let logging = crate::telemetry::Logging {
        level: cli.log_level,
        format: cli.log_format,
    };
    // `serve` sets up telemetry itself, inside its runtime (the OTLP exporter lives there).
    if !matches!(cli.command, Command::Serve(_)) {
        crate::telemetry::init(&logging, "warn", false);
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args, &logging),
        Command::Get(args) => client::get(args),
        Command::Describe(args) => client::describe(args),
        Command::Watch(args) => client::watch(args),
        Command::Totals(args) => client::totals(args),
        Command::Resolve(args) => resolve::run(args),
        Command::Check(args) => check::run(args),
        Command::Definitions(args) => definitions::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// The embedded catalog plus `--definitions`; invalid definitions are a listed error.
fn load_catalog(args: &DefinitionArgs) -> anyhow::Result<crate::definition::Catalog> {
    crate::definition::catalog::load_layers(args.definitions.as_deref()).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!("invalid definitions:\n{}", lines.join("\n"))
    })
}
