//! `kartograf gangs`: a workload's gangs as the schedulers' gang objects (docs/gangs.md),
//! offline from manifest files (`-f`) or from a server (the `Gangs` RPC); with `--verify`,
//! the gang objects in the files checked against the workload instead.

use super::DefinitionArgs;
use crate::expr::Limits;
use crate::gangs::verify::{self, GangObject, PodLinks};
use crate::gangs::{Format, Rendered};
use crate::model::Cached;
use crate::source::offline::Snapshot;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `gangs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The workload as KIND/NAME (e.g. raycluster/train); offline, optional when the files
    /// hold one workload.
    pub target: Option<String>,
    /// The gang objects to render: KAI PodGroup, Kubernetes Workload + PodGroups, or
    /// scheduler-plugins coscheduling PodGroup.
    #[arg(short = 'o', long, value_enum)]
    pub output: Format,
    /// Manifest file or folder (a cluster snapshot), repeatable: resolve offline instead of
    /// asking the server.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Print one JSON array instead of YAML documents.
    #[arg(long)]
    pub json: bool,
    /// Check the gang objects of `-o`'s kind in the files (those the workload's root owns or
    /// its pods name) against the workload, instead of rendering; exit 6 when any finding.
    #[arg(long, requires = "files")]
    pub verify: bool,
    /// Evaluation deadline for the whole resolve (offline).
    #[arg(long, default_value = "2s", value_parser = super::resolve::parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub server: super::client::ServerArgs,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
}

/// Runs `gangs`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.files.is_empty() {
        return match super::client::gangs(&args.server, args.target.as_deref(), args.output)? {
            Ok(rendered) => print(&args, &rendered),
            Err(code) => Ok(code),
        };
    }
    let catalog = super::load_catalog(&args.definitions)?;
    let snapshot = Snapshot::load(&args.files, Limits::default()).map_err(anyhow::Error::msg)?;
    for warning in snapshot
        .warnings
        .iter()
        .take(crate::source::offline::MAX_WARNINGS)
    {
        eprintln!("warning: {warning}");
    }
    let workload = match super::resolve::select_and_resolve(
        &snapshot,
        &catalog,
        args.target.as_deref(),
        args.server.namespace.as_deref(),
        args.timeout,
    ) {
        Ok(r) => r.workload,
        Err(code) => return Ok(code),
    };
    if args.verify {
        return verify_snapshot(&args, &snapshot, &workload);
    }
    match crate::gangs::render(&workload, args.output) {
        Ok(rendered) => print(&args, &rendered),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(super::EXIT_GANGS))
        }
    }
}

/// Prints rendered objects (YAML documents, or one JSON array) and notes (stderr).
pub fn print(args: &Args, rendered: &Rendered) -> anyhow::Result<ExitCode> {
    for note in &rendered.notes {
        eprintln!("note: {note}");
    }
    let text = if args.json {
        serde_json::to_string_pretty(&rendered.objects).context("encoding JSON")?
    } else {
        let mut docs = Vec::with_capacity(rendered.objects.len());
        for o in &rendered.objects {
            docs.push(serde_saphyr::to_string(o).context("encoding YAML")?);
        }
        docs.iter()
            .map(|d| format!("---\n{}", d.trim_end()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    super::print_out(text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// `--verify`: the snapshot's gang objects of the chosen kind, checked.
fn verify_snapshot(
    args: &Args,
    snapshot: &Snapshot,
    workload: &crate::proto::v1::Workload,
) -> anyhow::Result<ExitCode> {
    let (mut objects, mut pods) = (Vec::new(), Vec::new());
    for cached in snapshot.objects() {
        match cached {
            Cached::Object(o) => {
                if crate::gangs::verify::Family::of(&o.meta.api_version, &o.meta.kind).is_none() {
                    continue;
                }
                if let Some(g) = GangObject::of_object(o)
                    && matches_format(g.family, args.output)
                {
                    objects.push(g);
                }
            }
            Cached::Pod(p) => pods.push(PodLinks::of(p)),
        }
    }
    let verdicts = verify::check_workload(workload, &objects, &pods);
    let mut lines = Vec::new();
    let mut findings = 0;
    for v in &verdicts {
        lines.push(format!(
            "{} {}: gang {} · running {} · minimum {} · {}{}",
            v.family.label(),
            v.name,
            v.gang.as_deref().unwrap_or("-"),
            v.running,
            v.minimum.map_or("-".to_owned(), |m| m.to_string()),
            if v.intact { "intact" } else { "BROKEN" },
            if v.stale { " · STALE" } else { "" },
        ));
        for f in &v.findings {
            findings += 1;
            lines.push(format!("  {}: {}", f.code, f.message));
        }
    }
    if verdicts.is_empty() {
        lines.push("no gang object of this kind belongs to the workload".into());
    }
    super::print_out(&lines.join("\n"));
    Ok(if findings == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::EXIT_GANG_FINDINGS)
    })
}

fn matches_format(family: verify::Family, format: Format) -> bool {
    use verify::Family as F;
    matches!(
        (family, format),
        (F::Kai, Format::Kai)
            | (F::PodGroup | F::CompositePodGroup, Format::Workload)
            | (F::Coscheduling, Format::Coscheduling)
    )
}
