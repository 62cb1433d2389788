//! The `kartograf` command line.

mod check;
mod client;
mod definitions;
mod gangs;
pub mod karta_status;
mod output;
pub mod patch;
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
/// Exit code: the workload has no gang, or its gangs cannot be expressed in that API.
pub const EXIT_GANGS: u8 = 5;
/// Exit code: `gangs --verify` found something.
pub const EXIT_GANG_FINDINGS: u8 = 6;
/// Exit code: `patch` — the definition cannot express an intent (nothing was output).
pub const EXIT_REFUSED: u8 = 7;

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
    /// A workload's gangs as the schedulers' gang objects (KAI PodGroup, Kubernetes
    /// Workload/PodGroup, coscheduling PodGroup), offline (-f) or from a server; with
    /// --verify, the gang objects in the files checked against the workload.
    Gangs(Box<gangs::Args>),
    /// Compute (or with --apply, send) the patch that writes a scheduler name, pod labels
    /// and annotations, priority class, node selector, tolerations, suspend/resume or
    /// replicas into a workload through its definition (docs/patch.md); offline (-f), from
    /// a server, or against the kubeconfig's cluster (--apply).
    Patch(Box<patch::Args>),
    /// Validate definition files or folders (the embedded catalog when none are given).
    Check(check::Args),
    /// List the definitions in effect (embedded catalog, plus --definitions).
    Definitions(definitions::Args),
    /// Print the Karmada ResourceInterpreterWebhookConfiguration for every root kind of the
    /// definitions in effect (docs/karmada.md).
    KarmadaConfig(KarmadaConfigArgs),
}

/// Arguments of `karmada-config`.
#[derive(Debug, clap::Args)]
pub struct KarmadaConfigArgs {
    /// The webhook's URL as Karmada calls it.
    #[arg(long, default_value = crate::webhook::karmada::config::DEFAULT_URL)]
    pub url: String,
    /// The base64 PEM CA bundle that signed the webhook's certificate.
    #[arg(long, default_value = "")]
    pub ca_bundle: String,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
}

/// Definition sources shared by commands.
#[derive(Debug, clap::Args)]
pub struct DefinitionArgs {
    /// A folder (or file) of extra definitions; they replace embedded ones for the same kind.
    #[arg(short = 'd', long = "definitions", env = "KARTOGRAF_DEFINITIONS")]
    pub definitions: Option<PathBuf>,
    /// How `phase` is chosen among the matched statuses of a definition from `--definitions`
    /// or the cluster without a `kartograf.io/phase-precedence` annotation: `kartograf`
    /// (kartograf's precedence) or `workload-map` (the first matched status, in Workload Map's
    /// order). The embedded catalog always keeps kartograf's.
    #[arg(
        long,
        env = "KARTOGRAF_PHASE_PRECEDENCE",
        default_value = "kartograf",
        value_parser = ["kartograf", "workload-map"]
    )]
    pub phase_precedence: String,
}

/// The largest file read from a folder (manifests, definitions), shared by `serve` and
/// `resolve`.
#[derive(Debug, clap::Args)]
pub struct FileArgs {
    /// Largest manifest or definition file read (e.g. `64Mi`); a larger file is reported
    /// and skipped. Parsing a JSON file holds about twice its size, a YAML file a few times.
    #[arg(long, env = "KARTOGRAF_MAX_FILE_SIZE", default_value = "256Mi", value_parser = parse_bytes)]
    pub max_file_size: u64,
    /// Bytes of manifest files read and parsed at once (e.g. `512Mi`): a reload or load of
    /// more reads them in turn, so memory does not grow with the number of large files or of
    /// cores. Parsing a file holds about twice its size.
    #[arg(long, env = "KARTOGRAF_MAX_RELOAD_BYTES", default_value = "512Mi", value_parser = parse_bytes)]
    pub max_reload_bytes: u64,
}

impl FileArgs {
    /// Makes these the caps of every file read in this process.
    pub fn apply(&self) {
        crate::folder::set_max_file_bytes(self.max_file_size);
        crate::folder::set_max_batch_bytes(self.max_reload_bytes);
    }
}

/// The evaluation budget of every jq evaluation (shared by `serve` and `resolve`).
#[derive(Debug, clap::Args)]
pub struct BudgetArgs {
    /// Work units one jq evaluation may spend (one per clone, element iterated, compared or
    /// built, arithmetic step). The default is about 50 ms of work on one core.
    #[arg(long, env = "KARTOGRAF_EVAL_WORK", default_value_t = crate::expr::Budget::DEFAULT.work)]
    pub eval_work: u64,
    /// Bytes of values one evaluation may create (e.g. `64Mi`).
    #[arg(long, env = "KARTOGRAF_EVAL_MEMORY", default_value = "64Mi", value_parser = parse_bytes)]
    pub eval_memory: u64,
    /// Deepest value (nesting of arrays and objects) one evaluation may build.
    #[arg(
        long,
        env = "KARTOGRAF_EVAL_DEPTH",
        default_value_t = crate::expr::Budget::DEFAULT.depth,
        value_parser = clap::value_parser!(u32).range(130..=1024)
    )]
    pub eval_depth: u32,
    /// Wall-clock time one evaluation may take (it bounds its CPU time too).
    #[arg(long, env = "KARTOGRAF_EVAL_TIME", default_value = "100ms", value_parser = resolve::parse_duration)]
    pub eval_time: std::time::Duration,
}

impl BudgetArgs {
    /// Makes these the budget of every evaluation in this process.
    pub fn apply(&self) {
        crate::expr::budget::configure(crate::expr::Budget {
            work: self.eval_work,
            memory: self.eval_memory,
            depth: self.eval_depth,
            time: self.eval_time,
        });
    }
}

/// Parses a byte size: a number with an optional binary suffix (`Ki`, `Mi`, `Gi`, … `Ei`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 65536, 512Ki, 64Mi or 1Gi"))?;
    let scale: u64 = match crate::model::resources::BINARY_SUFFIXES
        .iter()
        .find(|(suffix, _)| *suffix == unit)
    {
        _ if unit.is_empty() => 1,
        Some((_, shift)) => 1 << shift,
        None => {
            return Err(format!(
                "`{s}` is not a size like 65536, 512Ki, 64Mi or 1Gi"
            ));
        }
    };
    n.checked_mul(scale)
        .filter(|b| *b >= 1024)
        .ok_or_else(|| format!("`{s}` is out of range (at least 1Ki)"))
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
        Command::Gangs(args) => gangs::run(*args),
        Command::Patch(args) => patch::run(*args),
        Command::Check(args) => check::run(args),
        Command::Definitions(args) => definitions::run(args),
        Command::KarmadaConfig(args) => load_catalog(&args.definitions).map(|catalog| {
            print!(
                "{}",
                crate::webhook::karmada::config::render(&catalog, &args.url, &args.ca_bundle)
            );
            ExitCode::SUCCESS
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

impl DefinitionArgs {
    /// The options definitions are loaded with (`--phase-precedence`).
    pub fn options(&self) -> crate::definition::LoadOptions {
        crate::definition::LoadOptions {
            // The value parser admits only the two known values.
            phase_precedence: crate::definition::plan::PhasePrecedence::parse(
                &self.phase_precedence,
            )
            .unwrap_or_default(),
        }
    }
}

/// The embedded catalog plus `--definitions`, layered as `serve` layers them; invalid
/// definitions are a listed error.
fn load_catalog(args: &DefinitionArgs) -> anyhow::Result<crate::definition::Catalog> {
    let options = args.options();
    let mut layers = crate::definition::layers::Layers::new(options);
    if let Some(dir) = args.definitions.as_deref() {
        let (defs, errors) = crate::definition::catalog::load_path(dir, options);
        layers.set_directory(defs, errors);
    }
    let (catalog, errors) = layers.build();
    if errors.is_empty() {
        return Ok(catalog);
    }
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    Err(anyhow::anyhow!(
        "invalid definitions:\n{}",
        lines.join("\n")
    ))
}
