//! Workload Map's e2e recordings (`fixtures/workload-map`, schema 1, see `events.rs`) replayed
//! with the definitions they name (`definitions/workload-map`, loaded unchanged) and with the
//! embedded catalog.

use crate::events::{self, Flow, State};
use crate::known;
use crate::reading::{self, Reading};
use crate::upstream;
use kartograf::definition::Catalog;

/// Flows recorded with a version of their definition that is not stored here (it is not
/// available): read with the embedded catalog only. See `README.md`.
const WITHOUT_THEIR_DEFINITION: &[&str] =
    &["kserve/v0.20.0/serving-kserve-io-llminferenceservice-v1alpha2/stopped"];

fn flows() -> &'static [Flow] {
    static FLOWS: std::sync::OnceLock<Vec<Flow>> = std::sync::OnceLock::new();
    FLOWS.get_or_init(events::load_all)
}

/// The flows recorded with a stored version of their definition.
fn with_their_definition() -> impl Iterator<Item = &'static Flow> {
    flows()
        .iter()
        .filter(|f| !WITHOUT_THEIR_DEFINITION.contains(&f.id.as_str()))
}

/// Every recorded state with kartograf's reading of it under `catalog`: of every flow with the
/// embedded catalog, of the flows recorded with a stored definition with upstream's.
fn read_all(catalog: &Catalog) -> Vec<(&'static Flow, usize, &'static State, Reading)> {
    let embedded = std::ptr::eq(catalog, crate::embedded());
    let mut out = Vec::new();
    for flow in flows() {
        if !embedded && WITHOUT_THEIR_DEFINITION.contains(&flow.id.as_str()) {
            continue;
        }
        for (i, state) in flow.states.iter().enumerate() {
            let reading = reading::read(catalog, &state.object)
                .unwrap_or_else(|e| panic!("{} state {i}: {e}", flow.id));
            out.push((flow, i, state, reading));
        }
    }
    out
}

#[test]
fn e2e_recordings_load_and_keep_upstream_s_invariants() {
    let flows = flows();
    let states: usize = flows.iter().map(|f| f.states.len()).sum();
    assert!(
        !flows.is_empty() && states >= 6,
        "{} flows, {states} states",
        flows.len()
    );
    for flow in flows {
        if let Some(want) = &flow.want {
            let last = &flow.states.last().expect("states").state;
            assert_eq!(last, want, "{}: the flow ends in its want", flow.id);
        }
        for (i, s) in flow.states.iter().enumerate() {
            // The recorder's `Strongest`: the last of the judged states (declared least to most
            // advanced).
            assert_eq!(
                s.phases.last(),
                Some(&s.state),
                "{} state {i}: the state is the strongest judged phase",
                flow.id
            );
            assert!(s.object["kind"].is_string(), "{} state {i}", flow.id);
        }
    }
}

#[test]
fn an_e2e_recording_of_another_schema_or_without_an_object_is_refused() {
    let ok = "schemaVersion: 1\nkartaName: x\nkartaFile: x\nevents:\n- kind: STATE\n  state: Running\n  phases: [Running]\n  object: {kind: X}\n- kind: ACTION\n  action: {name: Suspend}\n";
    let flow = events::parse_flow(ok, "t").expect("parses");
    assert_eq!(flow.states.len(), 1, "an ACTION event is no state");
    let other = ok.replace("schemaVersion: 1", "schemaVersion: 6");
    assert!(
        events::parse_flow(&other, "t")
            .unwrap_err()
            .contains("schemaVersion")
    );
    let no_object = ok.replace("  object: {kind: X}\n", "");
    assert!(
        events::parse_flow(&no_object, "t")
            .unwrap_err()
            .contains("no object")
    );
    let unknown = ok.replace("kind: ACTION", "kind: OTHER");
    assert!(events::parse_flow(&unknown, "t").is_err());
}

#[test]
fn workload_map_definitions_match_every_e2e_recorded_state() {
    let catalog = upstream::workload_map_catalog(false);
    for flow in with_their_definition() {
        let names: Vec<&str> = catalog.definitions().map(|d| d.name.as_str()).collect();
        assert!(
            names.contains(&flow.karta_name.as_str()),
            "{}: recorded with `{}` ({}), not stored in definitions/workload-map",
            flow.id,
            flow.karta_name,
            flow.karta_file
        );
    }
    let mut problems = Vec::new();
    for (flow, i, state, reading) in read_all(catalog) {
        // Upstream's replay rule (test/e2e/replay_tests): the matched statuses contain the state.
        if !reading.matched.contains(&state.state) {
            problems.push(format!(
                "{} state {i}: recorded {}, kartograf with upstream's definition matches {:?}",
                flow.id, state.state, reading.matched
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The recorded states where the phase of `catalog` is not the recorded state, as
/// `(flow, state index, recorded, kartograf's phase)`.
fn phase_differences(catalog: &Catalog) -> (usize, Vec<(String, usize, String, String)>) {
    let all = read_all(catalog);
    let differ = all
        .iter()
        .filter(|(_, _, s, r)| r.phase != s.state)
        .map(|(f, i, s, r)| (f.id.clone(), *i, s.state.clone(), r.phase.clone()))
        .collect();
    (all.len(), differ)
}

#[test]
fn with_the_setting_workload_map_definitions_give_the_recorded_state_as_phase() {
    let (states, differ) = phase_differences(upstream::workload_map_catalog(true));
    println!(
        "e2e recordings, Workload Map's precedence: {} of {states} differ",
        differ.len()
    );
    assert!(differ.is_empty(), "{differ:#?}");
    let all = read_all(upstream::workload_map_catalog(true));
    // docs/resolution.md says so: the precedence is not exercised by these recordings.
    let several = all
        .iter()
        .filter(|(_, _, _, r)| r.matched.len() > 1)
        .count();
    assert_eq!(several, 0, "states matching several statuses");
    for (flow, i, _, reading) in all {
        // Workload Map's own order: the phase is the first matched status.
        assert_eq!(
            Some(&reading.phase),
            reading.matched.first(),
            "{} state {i}",
            flow.id
        );
    }
}

#[test]
fn without_the_setting_workload_map_definitions_differ_only_where_listed() {
    let (states, differ) = phase_differences(upstream::workload_map_catalog(false));
    println!(
        "e2e recordings, kartograf's precedence: {} of {states} differ",
        differ.len()
    );
    let listed = known::precedence_rows(known::E2E_PRECEDENCE);
    assert_eq!(differ, listed);
}

#[test]
fn embedded_catalog_matches_e2e_recorded_states_except_where_listed() {
    let mut differ = Vec::new();
    let all = read_all(crate::embedded());
    for (flow, i, state, reading) in &all {
        if !reading.matched.contains(&state.state) {
            differ.push((
                flow.id.clone(),
                *i,
                state.state.clone(),
                reading.matched.clone(),
            ));
        }
    }
    println!(
        "e2e recordings, embedded catalog: {} of {} states agree under upstream's rule",
        all.len() - differ.len(),
        all.len()
    );
    let figure = format!(
        "{} states) agree under upstream's rule on {} of {}",
        all.len(),
        all.len() - differ.len(),
        all.len()
    );
    assert!(
        crate::doc_text("docs/catalog.md").contains(&figure),
        "docs/catalog.md does not state the measured `{figure}`"
    );
    let listed: Vec<(String, usize, String, Vec<String>)> = known::E2E_STATUS
        .iter()
        .map(|k| {
            (
                k.flow.to_owned(),
                k.step,
                k.state.to_owned(),
                k.matched.iter().map(|m| (*m).to_owned()).collect(),
            )
        })
        .collect();
    assert_eq!(differ, listed);
}

#[test]
fn a_flow_read_without_its_definition_is_one_the_stored_version_misreads() {
    // Why `WITHOUT_THEIR_DEFINITION` exists: the stored version of the definition the flow
    // names does not match some state the flow recorded (it was recorded with a later one).
    let catalog = upstream::workload_map_catalog(false);
    for id in WITHOUT_THEIR_DEFINITION {
        let flow = flows()
            .iter()
            .find(|f| f.id == *id)
            .unwrap_or_else(|| panic!("{id} is stored"));
        let misread: Vec<(usize, &str, Vec<String>)> = flow
            .states
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let reading = reading::read(catalog, &s.object).expect("reads");
                (!reading.matched.contains(&s.state)).then_some((
                    i,
                    s.state.as_str(),
                    reading.matched,
                ))
            })
            .collect();
        println!("{id}: the stored definition misreads {misread:?}");
        assert!(!misread.is_empty(), "{id}: read it with its definition");
    }
}
