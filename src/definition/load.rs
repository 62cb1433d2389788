//! Reading definition files: YAML or JSON, several documents per file, `KartaList` or `List`.

use super::DefinitionError;
use super::model::Karta;
use crate::folder;
use crate::manifest;
use std::path::{Path, PathBuf};

/// The settings of one loader of definitions (a server, a command), applied to every
/// definition compiled with them: two servers in one process may load differently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The precedence of definitions that are not embedded and carry no
    /// [`super::plan::PHASE_PRECEDENCE`] annotation (`--phase-precedence`); the embedded
    /// catalog keeps kartograf's.
    pub phase_precedence: super::plan::PhasePrecedence,
}

/// One definition document read from a source, not yet validated.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Where it came from (file path, or a caller-chosen label).
    pub source: String,
    /// The definition.
    pub karta: Karta,
}

/// Errors kept per file (or text); beyond them one more error says how many were not
/// listed, so that a file of a million bad documents costs no more than these.
pub const MAX_FILE_ERRORS: usize = 100;

/// Parses definition text (one or more documents). Every document that fails yields its
/// own errors (the first [`MAX_FILE_ERRORS`], then a count); good documents are still
/// returned. A stream of JSON or YAML documents is parsed one document at a time (no tree of
/// the whole text is built).
pub fn parse_text(text: &str, source: &str) -> (Vec<Parsed>, Vec<DefinitionError>) {
    let mut out = Collected::new(source);
    if let Some(docs) = manifest::json_stream(text) {
        let mut flat = Vec::new();
        let mut all_json = true;
        for doc in docs {
            match manifest::from_json_strict(doc) {
                Ok(value) => {
                    manifest::flatten(value, &mut flat);
                    for value in flat.drain(..) {
                        out.document(&value);
                    }
                }
                Err(_) => {
                    all_json = false;
                    break;
                }
            }
        }
        if all_json {
            return out.finish();
        }
        // Not JSON after all: the whole text is read as YAML, as it always was.
        out = Collected::new(source);
    }
    // A YAML stream: one document at a time when it can be cut, else whole.
    match manifest::yaml_documents(text, &mut |doc| out.document(&doc)) {
        Ok(true) => return out.finish(),
        Ok(false) => out = Collected::new(source),
        Err(e) => {
            let mut failed = Collected::new(source);
            failed.error(DefinitionError::new(source, "", None, e.to_string()));
            return failed.finish();
        }
    }
    match manifest::parse_documents(text) {
        Ok(docs) => {
            for doc in &docs {
                out.document(doc);
            }
        }
        Err(e) => out.error(DefinitionError::new(source, "", None, e.to_string())),
    }
    out.finish()
}

/// The documents of one text, as they are parsed.
struct Collected<'s> {
    source: &'s str,
    documents: usize,
    parsed: Vec<Parsed>,
    errors: Vec<DefinitionError>,
    unlisted: usize,
}

impl<'s> Collected<'s> {
    fn new(source: &'s str) -> Self {
        Collected {
            source,
            documents: 0,
            parsed: Vec::new(),
            errors: Vec::new(),
            unlisted: 0,
        }
    }

    /// The next document.
    fn document(&mut self, doc: &serde_json::Value) {
        let label = if self.documents == 0 {
            String::new()
        } else {
            format!("(document {})", self.documents + 1)
        };
        self.documents += 1;
        match parse_document(doc, self.source, &label) {
            Ok(p) => self.parsed.push(p),
            Err(e) => self.error(e),
        }
    }

    fn error(&mut self, e: DefinitionError) {
        if self.errors.len() < MAX_FILE_ERRORS {
            self.errors.push(e);
        } else {
            self.unlisted += 1;
        }
    }

    fn finish(mut self) -> (Vec<Parsed>, Vec<DefinitionError>) {
        if self.unlisted > 0 {
            self.errors.push(DefinitionError::new(
                self.source,
                "",
                None,
                format!(
                    "… and {} more error(s) in this text, not listed",
                    self.unlisted
                ),
            ));
        }
        (self.parsed, self.errors)
    }
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
