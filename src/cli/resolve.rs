//! `kartograf resolve`: the offline form of `Resolve`.

use super::{DefinitionArgs, EXIT_NO_DEFINITION, EXIT_NOT_FOUND, Format, output, tree};
use crate::definition::Catalog;
use crate::expr::Limits;
use crate::proto::v1 as pb;
use crate::resolve::Resolution;
use crate::source::offline::{MAX_WARNINGS, Snapshot, SnapshotError};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `resolve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file or folder holding the cluster snapshot (YAML/JSON, multi-document, List); repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// The workload as KIND/NAME (e.g. job/train); optional when the files hold one.
    #[arg(conflicts_with = "all")]
    pub target: Option<String>,
    /// Resolve every root workload in the files: a table, or a `ListResponse` with -o json|yaml.
    #[arg(short = 'A', long)]
    pub all: bool,
    /// Only consider workloads in this namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "tree")]
    pub output: Format,
    /// Print only the summary (no component tree, pod lists or gang members).
    #[arg(long)]
    pub summary: bool,
    /// Evaluation deadline for the whole resolve.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    #[command(flatten)]
    pub file_limits: super::FileArgs,
}

/// Parses `500ms`, `2s`, `1m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 500ms, 2s or 1m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("`{s}` is not a duration like 500ms, 2s, 1m or 1h")),
    }
}

/// Runs `resolve`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.budget.apply();
    args.file_limits.apply();
    let catalog = super::load_catalog(&args.definitions)?;
    let snapshot = Snapshot::load(&args.files, Limits::default()).map_err(anyhow::Error::msg)?;
    // At most MAX_WARNINGS lines, then one with the number of the others.
    let cycles = snapshot.owner_cycles(&catalog);
    let all = snapshot.warnings.iter().chain(&cycles);
    for warning in all.clone().take(MAX_WARNINGS) {
        eprintln!("warning: {warning}");
    }
    let more = snapshot.warnings_dropped + all.count().saturating_sub(MAX_WARNINGS);
    if more > 0 {
        eprintln!("warning: … and {more} more warnings (the first {MAX_WARNINGS} are shown)");
    }
    if args.all {
        return list_all(&args, &catalog, &snapshot);
    }
    let resolution = match select_and_resolve(
        &snapshot,
        &catalog,
        args.target.as_deref(),
        args.namespace.as_deref(),
        args.timeout,
    ) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let mut workload = resolution.workload;
    if args.summary {
        crate::resolve::summarize(&mut workload);
    }
    let response = pb::ResolveResponse {
        workload: Some(workload),
        pod: None,
    };
    let text = match args.output {
        Format::Json => output::json(&response)?,
        Format::Yaml => output::yaml(&response)?,
        Format::Tree => tree::render(response.workload.as_ref().context("no workload")?),
    };
    super::print_out(text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// The workload `target` selects in a snapshot, resolved (`resolve` and `gangs -f`); on
/// failure the error is printed and its exit code returned.
pub(super) fn select_and_resolve(
    snapshot: &Snapshot,
    catalog: &Catalog,
    target: Option<&str>,
    namespace: Option<&str>,
    timeout: Duration,
) -> Result<Resolution, ExitCode> {
    let fail = |e: SnapshotError| {
        eprintln!("error: {e}");
        ExitCode::from(match e {
            SnapshotError::NoDefinition(_) => EXIT_NO_DEFINITION,
            _ => EXIT_NOT_FOUND,
        })
    };
    let root = snapshot.select(catalog, target, namespace).map_err(fail)?;
    snapshot
        .resolve(catalog, &root, Some(Instant::now() + timeout))
        .map_err(fail)
}

/// `resolve --all`: every root workload of the snapshot.
fn list_all(args: &Args, catalog: &Catalog, snapshot: &Snapshot) -> anyhow::Result<ExitCode> {
    let mut roots = snapshot.roots(catalog);
    if let Some(ns) = &args.namespace {
        roots.retain(|m| &m.namespace == ns);
    }
    roots.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    let mut workloads = Vec::new();
    for root in roots {
        match snapshot.resolve(catalog, &root, Some(Instant::now() + args.timeout)) {
            Ok(r) => workloads.push(r.workload),
            Err(e) => eprintln!("warning: {}/{}: {e}", root.kind, root.key()),
        }
    }
    if args.summary || args.output == Format::Tree {
        workloads.iter_mut().for_each(crate::resolve::summarize);
    }
    let text = match args.output {
        Format::Tree => tree::workload_table(&workloads),
        Format::Json => output::json(&pb::ListResponse {
            workloads,
            next_page_token: String::new(),
            revision: 0,
        })?,
        Format::Yaml => output::yaml(&pb::ListResponse {
            workloads,
            next_page_token: String::new(),
            revision: 0,
        })?,
    };
    super::print_out(text.trim_end());
    Ok(ExitCode::SUCCESS)
}
