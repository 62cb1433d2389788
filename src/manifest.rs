//! Reading Kubernetes manifests: YAML (several `---` documents) or JSON, with `List` kinds
//! flattened. Used for definition files and for cluster snapshots.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Parses text into its documents. JSON is tried first when the text starts with `{` or `[`;
/// empty documents are skipped; any `kind` ending in `List` with an `items` array is
/// flattened into its items.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, String> {
    let trimmed = text.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match serde_json::from_str::<Value>(trimmed) {
            Ok(Value::Array(items)) => items,
            Ok(v) => vec![v],
            Err(_) => parse_yaml(text)?,
        }
    } else if let Some(docs) = parse_json_stream(text) {
        docs
    } else {
        parse_yaml(text)?
    };
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        flatten(doc, &mut out);
    }
    Ok(out)
}

/// A `---`-separated stream whose every document is one JSON object (what `kubectl get -o
/// json` dumps and generators write), parsed with serde_json: JSON is YAML and this is many
/// times faster. `None` when any document is anything else, so the caller parses YAML.
fn parse_json_stream(text: &str) -> Option<Vec<Value>> {
    json_stream(text)?
        .into_iter()
        .map(|doc| serde_json::from_str::<Value>(doc).ok())
        .collect()
}

/// The documents of a `---`-separated stream (or a lone document) that look like JSON
/// objects, as text, empty ones left out; `None` when one does not start with `{`. Whether
/// each is JSON is for the caller's parse to find.
pub fn json_stream(text: &str) -> Option<Vec<&str>> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(text[start..at].trim());
            start = at + line.len();
        }
        at += line.len();
    }
    docs.push(text[start..].trim());
    docs.retain(|doc| !doc.is_empty());
    docs.iter().all(|doc| doc.starts_with('{')).then_some(docs)
}

/// YAML with limits that scale with the text: any number of documents (`kubectl get -o
/// yaml` of 100,000 pods is one `List` of 15 million nodes), while aliases, anchors and
/// nesting keep their fixed caps, so an alias bomb ("billion laughs") still fails fast.
fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = text.len() / 3 + 1024;
    budget.max_nodes += text.len() / 2;
    budget.max_events += text.len();
    budget.max_total_scalar_bytes += text.len();
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    serde_saphyr::from_multiple_with_options::<Value>(text, options)
        .map_err(|e| format!("not valid YAML or JSON: {e}"))
}

fn flatten(doc: Value, out: &mut Vec<Value>) {
    match doc {
        Value::Null => {}
        Value::Object(mut map)
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && map.get("items").is_some_and(Value::is_array) =>
        {
            if let Some(Value::Array(items)) = map.remove("items") {
                for item in items {
                    flatten(item, out);
                }
            }
        }
        other => out.push(other),
    }
}

/// Every `*.yaml`, `*.yml` and `*.json` file below `path` (or `path` itself if it is a
/// file), sorted; entries whose name starts with `.` are skipped.
pub fn files_below(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if path.is_file() {
        files.push(path.to_path_buf());
        return Ok(files);
    }
    collect(path, &mut files, 0)?;
    files.sort();
    Ok(files)
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>, depth: usize) -> std::io::Result<()> {
    if depth > 16 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files, depth + 1)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_yaml_and_lists() {
        let text = "a: 1\n---\n---\nkind: List\nitems:\n- b: 2\n- c: 3\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[2]["c"], 3);
    }

    #[test]
    fn json_document_streams_parse_as_yaml_would() {
        let text =
            "---\n{\"kind\": \"A\", \"n\": 1.5, \"s\": \"x: y\"}\n---\n\n---\n{\"b\": [1, {}]}\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(
            docs,
            parse_yaml(text)
                .unwrap()
                .into_iter()
                .filter(|d| !d.is_null())
                .collect::<Vec<_>>()
        );
        assert_eq!(docs.len(), 2);
        // One YAML document among JSON ones: the whole stream is read as YAML.
        let mixed = "---\n{\"a\": 1}\n---\nb: 2\n";
        let docs = parse_documents(mixed).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"], 2);
    }

    #[test]
    fn reads_json_and_rejects_garbage() {
        assert_eq!(parse_documents(r#"{"a": 1}"#).unwrap().len(), 1);
        assert!(parse_documents("a: [unclosed").is_err());
        assert!(
            parse_documents("a: 1\na: 2\n").is_err(),
            "duplicate keys are rejected"
        );
    }
}
