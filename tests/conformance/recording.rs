//! Upstream recorded flows (Workload Map `test/conformance/fixtures`, schema v6): the first
//! CR in full, then one RFC 7386 merge patch per recorded state, each step tagged with the
//! state judged from the workload's own fields and with Workload Map's reading of it (the
//! first step in full under `expected`, later steps as a merge patch under `expectedPatch`).

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The schema version of the recordings this loader reads.
pub const SCHEMA_VERSION: u64 = 6;

/// One recorded flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Path below the fixtures root, without `.yaml` (`kuberay/1.6.2/ray-io-rayjob-v1/failed`).
    pub id: String,
    /// Operator directory (`kuberay`): the framework the flow belongs to.
    pub operator: String,
    /// Upstream definition name the flow was recorded with.
    pub karta_name: String,
    /// Upstream definition file the flow names (repository-relative).
    pub karta_file: String,
    /// The state the flow ends in.
    pub want: Option<String>,
    /// Every recorded state, in order.
    pub steps: Vec<Step>,
}

/// One recorded state, with the CR and Workload Map's reading reconstructed in full.
#[derive(Debug, Clone)]
pub struct Step {
    /// The state upstream judged from the workload's own fields.
    pub state: String,
    /// The workload object at this state.
    pub cr: Value,
    /// Workload Map's reading at this state (`matchedStatuses`, `components`, …).
    pub expected: Value,
}

impl Step {
    /// Workload Map's matched statuses at this state.
    pub fn expected_matched(&self) -> Vec<String> {
        self.expected["matchedStatuses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Applies an RFC 7386 JSON merge patch to `target`: `null` deletes a key, objects merge
/// recursively, anything else (arrays included) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The directory holding the stored recordings.
pub fn fixtures_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures/karta")
}

/// Parses one flow file; `id` names it in messages.
pub fn parse_flow(text: &str, id: &str) -> Result<Flow, String> {
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("{id}: {e}"))?;
    let field = |name: &str| doc[name].as_str().map(str::to_owned);
    let schema = doc["schemaVersion"].as_u64();
    if schema != Some(SCHEMA_VERSION) {
        return Err(format!(
            "{id}: schemaVersion {schema:?}, this loader reads {SCHEMA_VERSION}"
        ));
    }
    let raw_steps = doc["steps"]
        .as_array()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{id}: no steps"))?;
    let mut steps = Vec::with_capacity(raw_steps.len());
    let mut cr = Value::Null;
    let mut expected = Value::Null;
    for (i, raw) in raw_steps.iter().enumerate() {
        let state = raw["state"]
            .as_str()
            .ok_or_else(|| format!("{id}: step {i} has no state"))?
            .to_owned();
        if i == 0 {
            cr = raw["cr"].clone();
            expected = raw["expected"].clone();
            if !cr.is_object() || !expected.is_object() {
                return Err(format!("{id}: the first step needs `cr` and `expected`"));
            }
        } else {
            if raw.get("cr").is_some() {
                return Err(format!("{id}: step {i} carries a full cr; only step 0 may"));
            }
            let patch = raw
                .get("patch")
                .filter(|p| p.is_object())
                .ok_or_else(|| format!("{id}: step {i} has no patch"))?;
            merge_patch(&mut cr, patch);
            if let Some(p) = raw.get("expectedPatch") {
                merge_patch(&mut expected, p);
            }
        }
        steps.push(Step {
            state,
            cr: cr.clone(),
            expected: expected.clone(),
        });
    }
    Ok(Flow {
        id: id.to_owned(),
        operator: field("operator").ok_or_else(|| format!("{id}: no operator"))?,
        karta_name: field("kartaName").ok_or_else(|| format!("{id}: no kartaName"))?,
        karta_file: field("kartaFile").ok_or_else(|| format!("{id}: no kartaFile"))?,
        want: field("want"),
        steps,
    })
}

/// Every stored flow, sorted by id.
pub fn load_all() -> Vec<Flow> {
    load_flows(&fixtures_root(), parse_flow)
}

/// Every `*.yaml` below `root`, in path order, parsed by `parse` with its id (the path below
/// `root` without extension); a file that does not read or parse fails the test.
pub fn load_flows<T>(root: &Path, parse: impl Fn(&str, &str) -> Result<T, String>) -> Vec<T> {
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    files
        .iter()
        .map(|path| {
            let id = path
                .strip_prefix(root)
                .unwrap_or(path)
                .with_extension("")
                .to_string_lossy()
                .into_owned();
            let text =
                std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            parse(&text, &id).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}
