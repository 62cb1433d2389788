//! Workload Map's e2e recordings (`test/e2e/recorded_data` of dsx-ai-factory/workload-map,
//! `schemaVersion: 1`): one YAML file per flow, an `events` list in which every `STATE` event
//! carries the workload object in full (`object`), the states the recorder judged from the
//! object's own fields (`phases`, in its declaration order, least to most advanced) and the
//! strongest of them (`state`, the last); `ACTION` events (the merge patch the recorder applied)
//! carry no object. Unlike the schema-v6 conformance fixtures (`recording.rs`), these files hold
//! no reading by Workload Map's definitions: upstream's replay (`test/e2e/replay_tests`) checks
//! that the definition's matched statuses contain `state`.

use serde_json::Value;
use std::path::PathBuf;

/// The schema version of the recordings this loader reads.
pub const SCHEMA_VERSION: u64 = 1;

/// One recorded flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Path below the fixtures root, without `.yaml`
    /// (`kserve/v1.34.0/serving-kserve-io-llminferenceservice-v1alpha2/failed`).
    pub id: String,
    /// Upstream definition name the flow was recorded with.
    pub karta_name: String,
    /// Upstream definition file the flow names (repository-relative).
    pub karta_file: String,
    /// The state the flow ends in.
    pub want: Option<String>,
    /// Every recorded state, in order.
    pub states: Vec<State>,
}

/// One `STATE` event.
#[derive(Debug, Clone)]
pub struct State {
    /// The strongest state the recorder judged from the object's own fields.
    pub state: String,
    /// Every state the recorder judged, in its declaration order.
    pub phases: Vec<String>,
    /// The workload object.
    pub object: Value,
}

/// Parses one flow file; `id` names it in messages.
pub fn parse_flow(text: &str, id: &str) -> Result<Flow, String> {
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("{id}: {e}"))?;
    let schema = doc["schemaVersion"].as_u64();
    if schema != Some(SCHEMA_VERSION) {
        return Err(format!(
            "{id}: schemaVersion {schema:?}, this loader reads {SCHEMA_VERSION}"
        ));
    }
    let field = |name: &str| doc[name].as_str().map(str::to_owned);
    let events = doc["events"]
        .as_array()
        .ok_or_else(|| format!("{id}: no events"))?;
    let mut states = Vec::new();
    for (i, event) in events.iter().enumerate() {
        match event["kind"].as_str() {
            Some("STATE") => {}
            Some("ACTION") => continue,
            other => return Err(format!("{id}: event {i} has kind {other:?}")),
        }
        let state = event["state"]
            .as_str()
            .ok_or_else(|| format!("{id}: event {i} has no state"))?
            .to_owned();
        let object = event["object"].clone();
        if !object.is_object() {
            return Err(format!("{id}: event {i} has no object"));
        }
        let phases = event["phases"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        states.push(State {
            state,
            phases,
            object,
        });
    }
    if states.is_empty() {
        return Err(format!("{id}: no STATE event"));
    }
    Ok(Flow {
        id: id.to_owned(),
        karta_name: field("kartaName").ok_or_else(|| format!("{id}: no kartaName"))?,
        karta_file: field("kartaFile").ok_or_else(|| format!("{id}: no kartaFile"))?,
        want: field("want"),
        states,
    })
}

/// The directory holding the stored recordings.
pub fn fixtures_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fixtures/workload-map")
}

/// Every stored flow, sorted by id.
pub fn load_all() -> Vec<Flow> {
    crate::recording::load_flows(&fixtures_root(), parse_flow)
}
