//! `kartograf check`: validate definition files.

use crate::definition::catalog;
use crate::definition::{Definition, DefinitionError, load};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Definition files or folders; the embedded catalog when none are given.
    pub paths: Vec<PathBuf>,
}

/// Runs `check`: prints every definition found, its warnings and every error; exit 1 on any
/// error (warnings do not fail the check).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut errors: Vec<DefinitionError> = Vec::new();
    let mut ok = 0usize;
    let mut warnings = 0usize;
    if args.paths.is_empty() {
        let (defs, errs) = catalog::load_embedded();
        for def in &defs {
            warnings += print_valid(def);
        }
        ok += defs.len();
        errors.extend(errs);
    }
    for path in &args.paths {
        let files = match load::definition_files(path) {
            Ok(files) if files.is_empty() => {
                errors.push(DefinitionError::new(
                    &path.display().to_string(),
                    "",
                    None,
                    "no .yaml, .yml or .json files",
                ));
                continue;
            }
            Ok(files) => files,
            Err(e) => {
                errors.push(DefinitionError::unreadable(&path.display().to_string(), e));
                continue;
            }
        };
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
        let (defs, errs) = catalog::compile_all(parsed, "check");
        for def in &defs {
            warnings += print_valid(def);
        }
        ok += defs.len();
        errors.extend(errs);
    }
    for e in &errors {
        super::print_out(&format!("INVALID  {e}"));
    }

    let warned = if warnings > 0 {
        format!(", {warnings} warning(s)")
    } else {
        String::new()
    };
    if errors.is_empty() {
        super::print_out(&format!("{ok} definition(s) valid{warned}"));
        Ok(ExitCode::SUCCESS)
    } else {
        super::print_out(&format!(
            "{ok} definition(s) valid{warned}, {} error(s)",
            errors.len()
        ));
        Ok(ExitCode::from(super::EXIT_INVALID))
    }
}

/// Prints a valid definition and its warnings; returns the number of warnings.
fn print_valid(def: &Definition) -> usize {
    super::print_out(&format!(
        "OK       {} ({}, {})",
        def.name, def.root_kind, def.source
    ));
    for w in &def.warnings {
        super::print_out(&format!("WARNING  {w}"));
    }
    def.warnings.len()
}
