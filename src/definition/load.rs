//! Reading definition files: YAML or JSON, several documents per file, `KartaList` or `List`.

use super::DefinitionError;
use super::model::Karta;
use crate::folder;
use crate::manifest;
use std::path::{Path, PathBuf};

/// One definition document read from a source, not yet validated.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Where it came from (file path, or a caller-chosen label).
    pub source: String,
    /// The definition.
    pub karta: Karta,
}

/// Parses definition text (one or more documents). Every document that fails yields its
/// own errors; good documents are still returned.
pub fn parse_text(text: &str, source: &str) -> (Vec<Parsed>, Vec<DefinitionError>) {
    let documents = match manifest::parse_documents(text) {
        Ok(docs) => docs,
        Err(e) => {
            return (
                Vec::new(),
                vec![DefinitionError::new(source, "", None, e.to_string())],
            );
        }
    };
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for (index, doc) in documents.into_iter().enumerate() {
        let label = if index == 0 {
            String::new()
        } else {
            format!("(document {})", index + 1)
        };
        match parse_document(&doc, source, &label) {
            Ok(p) => parsed.push(p),
            Err(e) => errors.push(e),
        }
    }
    (parsed, errors)
}

/// Parses one already-decoded document (e.g. a Karta object from the API server);
/// `label` prefixes the field path of an error (empty for a single document).
pub fn parse_document(
    doc: &serde_json::Value,
    source: &str,
    label: &str,
) -> Result<Parsed, DefinitionError> {
    match serde_path_to_error::deserialize::<_, Karta>(doc) {
        Ok(karta) => Ok(Parsed {
            source: source.to_owned(),
            karta,
        }),
        Err(e) => {
            let path = e.path().to_string();
            let path = if path == "." {
                label.to_owned()
            } else {
                format!("{label}{path}")
            };
            // The message names the type and the field; a value of the file never
            // reaches it (the file may be a link to secrets).
            let message = crate::excerpt::value_free(&e.into_inner().to_string());
            Err(DefinitionError::new(source, &path, None, message))
        }
    }
}

/// Parses one file (read with the bounded reader: a regular text file of at most
/// [`folder::max_file_bytes`]).
pub fn parse_file(path: &Path) -> (Vec<Parsed>, Vec<DefinitionError>) {
    let source = path.display().to_string();
    match folder::read_text(path) {
        Ok(text) => parse_text(&text, &source),
        Err(e) => (Vec::new(), vec![DefinitionError::unreadable(&source, e)]),
    }
}

/// Every `*.yaml`, `*.yml` and `*.json` file below `dir` (or `dir` itself if it is a file),
/// sorted, walked as every directory is ([`folder::walk`]: links followed once, special
/// files skipped, bounded depth and count); what the walk met is returned as errors, and a
/// path that does not exist is one.
pub fn definition_files(dir: &Path) -> (Vec<PathBuf>, Vec<DefinitionError>) {
    let source = dir.display().to_string();
    let walk = folder::walk(dir, folder::is_manifest);
    if !walk.exists {
        return (
            Vec::new(),
            vec![DefinitionError::unreadable(
                &source,
                "no such file or directory",
            )],
        );
    }
    let errors = walk
        .problems
        .iter()
        .map(|p| DefinitionError::new(&source, "", None, p.clone()))
        .collect();
    (walk.files.into_iter().map(|(p, _)| p).collect(), errors)
}
