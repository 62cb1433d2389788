//! `kartograf definitions`: list the definitions in effect.

use super::{DefinitionArgs, Format};
use std::process::ExitCode;

/// Arguments of `definitions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format: a table (`tree`, the default), or the definitions as JSON or YAML.
    #[arg(short = 'o', long, value_enum, default_value = "tree")]
    pub output: Format,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
}

/// Runs `definitions`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = super::load_catalog(&args.definitions)?;
    match args.output {
        Format::Tree => {
            let rows: Vec<[String; 4]> = catalog
                .definitions()
                .map(|d| {
                    let components: Vec<&str> =
                        d.components.iter().map(|c| c.name.as_str()).collect();
                    [
                        d.name.clone(),
                        d.root_kind.to_string(),
                        d.origin.clone(),
                        components.join(","),
                    ]
                })
                .collect();
            super::print_out(
                super::tree::table(&["NAME", "ROOT KIND", "ORIGIN", "COMPONENTS"], &rows)
                    .trim_end(),
            );
        }
        Format::Json | Format::Yaml => {
            let items: Vec<&crate::definition::Karta> =
                catalog.definitions().map(|d| &d.karta).collect();
            let doc = serde_json::json!({"apiVersion": "run.ai/v1alpha1", "kind": "KartaList", "items": items});
            let text = if args.output == Format::Json {
                serde_json::to_string_pretty(&doc)?
            } else {
                serde_saphyr::to_string(&doc)?
            };
            super::print_out(text.trim_end());
        }
    }
    Ok(ExitCode::SUCCESS)
}
