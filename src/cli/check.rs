//! `kartograf check`: validate definition files, and with `--crds`/`--cluster` check them
//! against the frameworks' schemas (drift).

use crate::definition::catalog;
use crate::definition::{Definition, DefinitionError, load};
use crate::drift::{self, Crd, Report, Schemas, report::one_line};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Output of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum CheckFormat {
    /// One line per definition, error and finding.
    #[default]
    Text,
    /// One JSON document: valid definitions, errors and the drift report.
    Json,
}

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Definition files or folders; the embedded catalog when none are given.
    pub paths: Vec<PathBuf>,
    /// Also check every definition against these CustomResourceDefinitions (YAML/JSON files
    /// or folders; built-in kinds and pods use the embedded Kubernetes schema). Takes every
    /// path that follows: write definition paths before it.
    #[arg(long = "crds", value_name = "PATH", num_args = 1..)]
    pub crds: Vec<PathBuf>,
    /// Also check against the CRDs of the cluster of the current kubeconfig (or in-cluster
    /// config).
    #[arg(long)]
    pub cluster: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: CheckFormat,
}

/// A validation error, as `-o json` prints it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonError {
    source: String,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expression: Option<String>,
    message: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonOutput {
    valid: Vec<String>,
    errors: Vec<JsonError>,
    /// Checks stricter than Workload Map's validator that did not stop a definition.
    warnings: Vec<JsonError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    drift: Option<Report>,
}

/// Loads the definitions named by `paths` (the embedded catalog when empty).
fn definitions(paths: &[PathBuf]) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    if paths.is_empty() {
        return catalog::load_embedded();
    }
    let mut defs = Vec::new();
    let mut errors: Vec<DefinitionError> = Vec::new();
    for path in paths {
        let (files, problems) = load::definition_files(path);
        let nothing = files.is_empty() && problems.is_empty();
        errors.extend(problems);
        if nothing {
            errors.push(DefinitionError::new(
                &path.display().to_string(),
                "",
                None,
                "no .yaml, .yml or .json files",
            ));
            continue;
        }
        let mut parsed = Vec::new();
        for file in files {
            let (p, e) = load::parse_file(&file);
            if p.is_empty() && e.is_empty() {
                errors.push(DefinitionError::new(
                    &file.display().to_string(),
                    "",
                    None,
                    "holds no definition",
                ));
            }
            parsed.extend(p);
            errors.extend(e);
        }
        let (d, e) = catalog::compile_all(parsed, "check", Default::default());
        defs.extend(d);
        errors.extend(e);
    }
    (defs, errors)
}

/// The CRDs of `--crds` and `--cluster`, with their sources; errors are messages.
fn crds(args: &Args) -> (Vec<Crd>, Vec<String>, Vec<String>) {
    let mut crds = Vec::new();
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for path in &args.crds {
        let (c, e) = drift::crd::load_path(path);
        crds.extend(c);
        errors.extend(e);
        sources.push(path.display().to_string());
    }
    if args.cluster {
        match cluster_crds() {
            Ok(c) => {
                crds.extend(c);
                sources.push(crate::source::kube::crds::CLUSTER.to_owned());
            }
            Err(e) => errors.push(format!("cluster: {e:#}")),
        }
    }
    (crds, sources, errors)
}

fn cluster_crds() -> anyhow::Result<Vec<Crd>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = ::kube::Client::try_default()
            .await
            .map_err(|e| anyhow::anyhow!("no usable kubeconfig or in-cluster config: {e}"))?;
        crate::source::kube::crds::list(&client).await
    })
}

/// Runs `check`: prints every definition found, its warnings and every error; exit 1 on any
/// error (warnings do not fail the check).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (defs, errors) = definitions(&args.paths);
    let schema_check = args.cluster || !args.crds.is_empty();
    let (crds, sources, crd_errors) = if schema_check {
        crds(&args)
    } else {
        Default::default()
    };
    let drift = schema_check.then(|| {
        let schemas = Schemas::new(crds);
        drift::check_all(defs.iter().map(|d| d.as_ref()), &schemas, sources)
    });
    let failed = !errors.is_empty()
        || !crd_errors.is_empty()
        || drift.as_ref().is_some_and(|r| r.errors > 0);
    match args.output {
        CheckFormat::Json => {
            let mut errs: Vec<JsonError> = errors
                .iter()
                .map(|e| JsonError {
                    source: e.source.clone(),
                    path: e.path.clone(),
                    expression: e.expression.clone(),
                    message: e.message.clone(),
                })
                .collect();
            errs.extend(crd_errors.iter().map(|m| JsonError {
                source: "crds".to_owned(),
                path: String::new(),
                expression: None,
                message: m.clone(),
            }));
            let warnings = defs
                .iter()
                .flat_map(|d| d.warnings.iter())
                .map(|e| JsonError {
                    source: e.source.clone(),
                    path: e.path.clone(),
                    expression: e.expression.clone(),
                    message: e.message.clone(),
                })
                .collect();
            let out = JsonOutput {
                valid: defs.iter().map(|d| d.name.clone()).collect(),
                errors: errs,
                warnings,
                drift,
            };
            super::print_out(&serde_json::to_string_pretty(&out)?);
        }
        CheckFormat::Text => print_text(&defs, &errors, &crd_errors, drift.as_ref()),
    }
    Ok(if failed {
        ExitCode::from(super::EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(
    defs: &[Arc<Definition>],
    errors: &[DefinitionError],
    crd_errors: &[String],
    drift: Option<&Report>,
) {
    let mut warnings = 0usize;
    for def in defs {
        super::print_out(&format!(
            "OK       {} ({}, {})",
            def.name, def.root_kind, def.source
        ));
        for w in &def.warnings {
            super::print_out(&format!("WARNING  {w}"));
        }
        warnings += def.warnings.len();
    }
    for e in errors {
        super::print_out(&format!("INVALID  {e}"));
    }
    for e in crd_errors {
        super::print_out(&format!("INVALID  {e}"));
    }
    let ok = defs.len();
    let warned = if warnings > 0 {
        format!(", {warnings} warning(s)")
    } else {
        String::new()
    };
    if errors.is_empty() {
        super::print_out(&format!("{ok} definition(s) valid{warned}"));
    } else {
        super::print_out(&format!(
            "{ok} definition(s) valid{warned}, {} error(s)",
            errors.len()
        ));
    }
    let Some(report) = drift else {
        return;
    };
    for d in &report.definitions {
        for f in &d.findings {
            let tag = match f.severity {
                drift::Severity::Error => "DRIFT   ",
                drift::Severity::Warning => "WARNING ",
            };
            super::print_out(&format!("{tag} {}: {f}", d.source));
        }
        for n in &d.not_checked {
            super::print_out(&format!(
                "UNCHECKED {}: {}: {} (expression: `{}`)",
                d.source,
                n.path,
                n.reason,
                one_line(&n.expression)
            ));
        }
    }
    let checked = report
        .definitions
        .iter()
        .filter(|d| d.schema.is_some())
        .count();
    let s = &report.stats;
    super::print_out(&format!(
        "Schema check ({} CRD source(s); built-in kinds and pods: {}): {checked} of {} definition(s) checked, {} error(s), {} warning(s); {} of {} expressions fully analysed; {} field paths: {} checked, {} into open schemas, {} not checked",
        report.crds.len(),
        if report.core.is_empty() {
            "none"
        } else {
            "Kubernetes core schema"
        },
        report.definitions.len(),
        report.errors,
        report.warnings,
        s.analysed,
        s.expressions,
        s.field_paths,
        s.checked,
        s.open,
        s.not_checked,
    ));
}
