//! Gang objects rendered from every catalog snapshot, then read back beside it: each API's
//! rules hold for what is rendered, and a snapshot holding its own right gang objects gets
//! no stale finding (only `gang_broken` where fewer members are placed than the gang
//! needs). Plus what cannot be expressed, and pods' links deciding which gang an object is.

use crate::common::*;
use kartograf::expr::Limits;
use kartograf::gangs::{self, Format, RenderError, kai};
use kartograf::proto::v1 as pb;
use kartograf::source::offline::Snapshot;
use serde_json::{Value, json};
use std::path::PathBuf;

const FORMATS: [Format; 3] = [Format::Kai, Format::Workload, Format::Coscheduling];

/// Every catalog snapshot with the target its expectation names.
fn snapshots() -> Vec<(PathBuf, Option<String>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/catalog");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap().flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = file.path();
            let s = p.to_string_lossy().to_string();
            if let Some(base) = s.strip_suffix(".expect.yaml") {
                let expect: Value =
                    serde_saphyr::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                out.push((
                    PathBuf::from(format!("{base}.yaml")),
                    expect["target"].as_str().map(str::to_owned),
                ));
            }
        }
    }
    out.sort();
    out
}

fn resolve(snapshot: &Snapshot, target: Option<&str>) -> pb::Workload {
    let root = snapshot.select(catalog(), target, None).unwrap();
    snapshot.resolve(catalog(), &root, None).unwrap().workload
}

fn gang_codes(w: &pb::Workload) -> Vec<(String, String)> {
    w.diagnostics
        .iter()
        .filter(|d| d.code.starts_with("gang_"))
        .map(|d| (d.code.clone(), d.message.clone()))
        .collect()
}

#[test]
fn every_catalog_snapshot_with_its_right_gang_objects_has_no_stale_finding() {
    let mut rendered_total = 0;
    for (path, target) in snapshots() {
        let snapshot = Snapshot::load(std::slice::from_ref(&path), Limits::default()).unwrap();
        let w = resolve(&snapshot, target.as_deref());
        assert!(gang_codes(&w).is_empty(), "{path:?}: {:?}", gang_codes(&w));
        for format in FORMATS {
            let rendered = match gangs::render(&w, format) {
                Ok(r) => r,
                Err(RenderError::NoGang(_)) => continue,
                // A gang that wants no pods (a queued or scaled-to-zero workload) has no
                // Workload API form: gang.minCount is at least 1.
                Err(e @ RenderError::Inexpressible { .. })
                    if format == Format::Workload
                        && e.to_string()
                            .contains("wants 0 pods; gang.minCount must be at least 1") =>
                {
                    continue;
                }
                Err(e) => panic!("{path:?} {format:?}: {e}"),
            };
            for o in &rendered.objects {
                if o["apiVersion"] == kai::API_VERSION {
                    assert!(kai::validate_spec(&o["spec"]).is_empty(), "{path:?}: {o}");
                }
            }
            let mut with = Snapshot::load(std::slice::from_ref(&path), Limits::default()).unwrap();
            for (i, o) in rendered.objects.iter().enumerate() {
                let mut o = o.clone();
                o["metadata"]["uid"] = json!(format!("gang-object-{i}"));
                with.add(&o, Limits::default(), "rendered");
            }
            rendered_total += rendered.objects.len();
            let checked = resolve(&with, target.as_deref());
            for (code, message) in gang_codes(&checked) {
                assert_eq!(code, "gang_broken", "{path:?} {format:?}: {message}");
            }
            // A gang is broken only when some but too few of its members are placed.
            let placed = checked.pods.map_or(0, |p| p.current);
            if gang_codes(&checked).is_empty() {
                continue;
            }
            assert!(placed > 0, "{path:?} {format:?}");
        }
    }
    assert!(
        rendered_total > 50,
        "only {rendered_total} gang objects rendered"
    );
}

fn gang(name: &str, min: u32) -> pb::GangGroup {
    pb::GangGroup {
        name: name.into(),
        min_member: min,
        ..Default::default()
    }
}

fn workload_with(groups: Vec<pb::GangGroup>) -> pb::Workload {
    pb::Workload {
        r#ref: Some(pb::ObjectRef {
            api_version: "example.com/v1".into(),
            kind: "Thing".into(),
            namespace: "ml".into(),
            name: "t".into(),
            uid: "u-1".into(),
        }),
        gang: Some(pb::Gang { groups }),
        ..Default::default()
    }
}

#[test]
fn gangs_the_workload_api_cannot_hold_are_a_clear_error() {
    // Nine gang plans: nine templates, one more than a Workload holds.
    let nine = workload_with((0..9).map(|i| gang(&format!("plan{i}"), 1)).collect());
    let e = gangs::render(&nine, Format::Workload)
        .unwrap_err()
        .to_string();
    assert!(e.contains("a Workload holds at most 8"), "{e}");
    assert!(
        e.starts_with("Thing/ml/t's gangs cannot be expressed as Kubernetes Workload API objects"),
        "{e}"
    );
    // KAI and coscheduling take nine PodGroups.
    assert_eq!(gangs::render(&nine, Format::Kai).unwrap().objects.len(), 9);
    assert_eq!(
        gangs::render(&nine, Format::Coscheduling)
            .unwrap()
            .objects
            .len(),
        9
    );
    // Many keyed gangs of one plan are PodGroups of one template.
    let keyed: Vec<pb::GangGroup> = (0..20)
        .map(|i| pb::GangGroup {
            keys: vec![i.to_string()],
            ..gang(&format!("group-{i}"), 2)
        })
        .collect();
    let r = gangs::render(&workload_with(keyed), Format::Workload).unwrap();
    assert_eq!(r.objects.len(), 21);
    assert_eq!(
        r.objects[0]["spec"]["podGroupTemplates"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // gang.minCount ≥ 1.
    let zero = workload_with(vec![gang("idle", 0)]);
    let e = gangs::render(&zero, Format::Workload)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gang.minCount must be at least 1"), "{e}");
    // Deeper than the Workload API's 4 levels.
    let mut deep = gang("l5", 1);
    for level in (1..5).rev() {
        deep = pb::GangGroup {
            name: format!("l{level}"),
            min_subgroups: 1,
            subgroups: vec![deep],
            ..Default::default()
        };
    }
    let e = gangs::render(&workload_with(vec![deep]), Format::Workload)
        .unwrap_err()
        .to_string();
    assert!(e.contains("deeper than 4 levels"), "{e}");
    // No gang at all.
    let none = workload_with(Vec::new());
    assert!(matches!(
        gangs::render(&none, Format::Kai),
        Err(RenderError::NoGang(_))
    ));
}

/// LeaderWorkerSet: one KAI PodGroup per group index; pods name theirs by annotation.
#[test]
fn pods_naming_the_wrong_kai_pod_group_are_found_from_data() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/catalog/leaderworkerset/running.yaml");
    let snapshot = Snapshot::load(std::slice::from_ref(&path), Limits::default()).unwrap();
    let w = resolve(&snapshot, None);
    let rendered = gangs::render(&w, Format::Kai).unwrap();
    assert_eq!(rendered.objects.len(), 2);
    let uid = &w.r#ref.as_ref().unwrap().uid;
    let names: Vec<String> = rendered
        .objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, [format!("pg-{uid}-0"), format!("pg-{uid}-1")]);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut docs = kartograf::manifest::parse_documents(&text).unwrap();
    let groups = &w.gang.as_ref().unwrap().groups;
    // Every pod names its group's PodGroup, except one of group 1, which names group 0's.
    let mut misnamed = String::new();
    for d in docs.iter_mut().filter(|d| d["kind"] == "Pod") {
        let name = d["metadata"]["name"].as_str().unwrap().to_owned();
        let Some(g) = groups.iter().position(|g| g.pods.contains(&name)) else {
            continue;
        };
        let pg = if g == 1 && misnamed.is_empty() {
            misnamed = name.clone();
            &names[0]
        } else {
            &names[g]
        };
        d["metadata"]["annotations"]["pod-group-name"] = json!(pg);
    }
    assert!(!misnamed.is_empty());
    let mut with = Snapshot::default();
    for d in &docs {
        with.add(d, Limits::default(), "snapshot");
    }
    for (i, o) in rendered.objects.iter().enumerate() {
        let mut o = o.clone();
        o["metadata"]["uid"] = json!(format!("pg-{i}"));
        with.add(&o, Limits::default(), "rendered");
    }
    let checked = resolve(&with, None);
    let codes = gang_codes(&checked);
    let outside = codes
        .iter()
        .find(|(c, _)| c == "gang_member_outside")
        .unwrap();
    assert!(outside.1.contains(&misnamed), "{codes:?}");
    let missing = codes
        .iter()
        .find(|(c, _)| c == "gang_member_missing")
        .unwrap();
    assert!(missing.1.contains(&misnamed), "{codes:?}");
}

/// `kartograf gangs`: YAML documents, `--json`, `--verify` (exit 6 on a finding) and exit 5
/// for a workload without a gang.
#[test]
fn the_gangs_command_renders_and_verifies_offline() {
    let ray = "tests/catalog/raycluster/running.yaml";
    let out = kartograf(&["gangs", "-o", "kai", "-f", ray]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("---\napiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\n"),
        "{text}"
    );
    assert!(
        text.contains("name: pg-7a000012-0000-4000-8000-000000000001-raycluster"),
        "{text}"
    );
    let out = kartograf(&["gangs", "-o", "workload", "--json", "-f", ray]);
    let objects: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(objects[0]["metadata"]["name"], "llm-batch-5df85968dc");
    // A stale copy beside the snapshot: the subgroup minimum finding, exit 6.
    let dir = std::env::temp_dir().join(format!("kartograf-gangs-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut pg = gangs::render(
        &resolve(
            &Snapshot::load(&[PathBuf::from(ray)], Limits::default()).unwrap(),
            None,
        ),
        Format::Kai,
    )
    .unwrap()
    .objects
    .remove(0);
    pg["metadata"]["uid"] = json!("kai-pg-1");
    pg["spec"]["subGroups"][0]["minMember"] = json!(4);
    let stale = dir.join("pg.json");
    std::fs::write(&stale, pg.to_string()).unwrap();
    let out = kartograf(&[
        "gangs",
        "--verify",
        "-o",
        "kai",
        "-f",
        ray,
        "-f",
        stale.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(6));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("gang_subgroup_min_stale"), "{text}");
    assert!(
        text.contains("subgroup head has minMember 4 but the workload needs 1"),
        "{text}"
    );
    let out = kartograf(&[
        "gangs",
        "-o",
        "kai",
        "-f",
        "tests/catalog/nimservice/failed.yaml",
    ]);
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no gang"));
    let _ = std::fs::remove_dir_all(&dir);
}
