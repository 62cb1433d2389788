//! The index on its own: plain synchronous tests, no server, no runtime, no sleeps. The
//! kinds are made up (`example.com/v1` `Group` owning `Member` objects, each with pods), with
//! definitions compiled from text.

use super::{Index, Write};
use crate::board::{Change, Filter};
use crate::definition::{Catalog, catalog, load};
use crate::expr::Limits;
use crate::model::Cached;
use crate::proto::v1 as pb;
use serde_json::{Value, json};

/// `Group` (root) and `Member` (a root of its own when nothing owns it; a component of a
/// `Group` otherwise), each with pods by owner.
fn catalog() -> Catalog {
    let text = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: group}
spec:
  structureDefinition:
    rootComponent:
      name: group
      kind: {group: example.com, version: v1, kind: Group}
      statusDefinition:
        statusMappings:
          running: [{byExpression: {expression: 'true', expectedResult: "true"}}]
    childComponents:
      - name: member
        kind: {group: example.com, version: v1, kind: Member}
        ownerRef: group
        specDefinition: {podTemplateSpecPath: .spec.template}
        scaleDefinition: {replicasPath: '.spec.members // 1'}
---
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: member}
spec:
  structureDefinition:
    rootComponent:
      name: member
      kind: {group: example.com, version: v1, kind: Member}
      specDefinition: {podTemplateSpecPath: .spec.template}
      statusDefinition:
        statusMappings:
          running: [{byExpression: {expression: 'true', expectedResult: "true"}}]
"#;
    let (parsed, errors) = load::parse_text(text, "test");
    assert!(errors.is_empty(), "{errors:?}");
    let (defs, errors) = catalog::compile_all(parsed, "test", Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    Catalog::from_layers(1, [defs])
}

fn owner(kind: &str, name: &str) -> Value {
    json!([{"apiVersion": "example.com/v1", "kind": kind, "name": name,
            "uid": format!("uid-{name}"), "controller": true}])
}

fn group(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Group",
           "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
           "spec": {}})
}

fn member(name: &str, owned_by: Option<&str>) -> Value {
    let mut m = json!({"apiVersion": "example.com/v1", "kind": "Member",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}});
    if let Some(g) = owned_by {
        m["metadata"]["ownerReferences"] = owner("Group", g);
    }
    m
}

fn pod(name: &str, member: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                        "ownerReferences": owner("Member", member)},
           "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
           "status": {"phase": "Running"}})
}

fn workloads(index: &Index) -> Vec<String> {
    let (all, _) = index.board().snapshot(&Filter::default());
    let mut names: Vec<String> = all
        .iter()
        .filter_map(|w| w.r#ref.as_ref().map(|r| format!("{}/{}", r.kind, r.name)))
        .collect();
    names.sort();
    names
}

/// How many pods the published graph of `uid` counts now.
fn current_pods(index: &Index, uid: &str) -> Option<u32> {
    index
        .published(&pb::ObjectRef {
            uid: uid.into(),
            ..Default::default()
        })
        .map(|p| p.graph())
        .and_then(|w| w.pods)
        .map(|p| p.current)
}

fn kinds(changes: &[Change]) -> Vec<(String, pb::EventType)> {
    changes
        .iter()
        .map(|c| {
            let name = c
                .workload
                .r#ref
                .as_ref()
                .map_or(String::new(), |r| r.name.clone());
            (name, c.kind)
        })
        .collect()
}

#[test]
fn a_reset_removes_what_the_source_no_longer_holds() {
    let index = Index::new(catalog(), &[]);
    let docs = [
        group("a", json!({})),
        member("a-0", Some("a")),
        pod("a-0-p", "a-0"),
        group("b", json!({})),
    ];
    assert!(index.batch().write(Write::reset("files", &docs)).is_empty());
    assert_eq!(workloads(&index), ["Group/a", "Group/b"]);
    let a = index
        .published(&pb::ObjectRef {
            uid: "uid-a".into(),
            ..Default::default()
        })
        .map(|p| p.graph());
    assert_eq!(a.and_then(|w| w.pods).map(|p| p.current), Some(1));
    let before = index.board().revision();
    // The second list holds only `a` and its member: `b` and the pod are gone.
    index.batch().write(Write::reset("files", &docs[..2]));
    assert_eq!(workloads(&index), ["Group/a"]);
    let (changes, _) = changes_since(&index, before, &Filter::default()).unwrap();
    let mut seen = kinds(&changes);
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        seen,
        [
            ("a".to_owned(), pb::EventType::Modified),
            ("b".to_owned(), pb::EventType::Deleted)
        ]
    );
    assert_eq!(index.sizes().pods, 0);
    // Another source's objects are left alone by this source's reset.
    assert!(
        index
            .batch()
            .write(Write::apply("other", group("c", json!({}))))
            .is_empty()
    );
    index.batch().write(Write::reset("files", &[]));
    assert_eq!(workloads(&index), ["Group/c"]);
}

#[test]
fn a_member_adopted_by_a_group_stops_being_a_workload_of_its_own() {
    let index = Index::new(catalog(), &[]);
    assert!(
        index
            .batch()
            .write(Write::apply("files", member("m", None)))
            .is_empty()
    );
    assert!(
        index
            .batch()
            .write(Write::apply("files", pod("m-p", "m")))
            .is_empty()
    );
    assert_eq!(workloads(&index), ["Member/m"]);
    assert!(
        index
            .batch()
            .write(Write::apply("files", group("g", json!({}))))
            .is_empty()
    );
    let before = index.board().revision();
    // The controller reference arrives: the member is now part of the group.
    assert!(
        index
            .batch()
            .write(Write::apply("files", member("m", Some("g"))))
            .is_empty()
    );
    assert_eq!(workloads(&index), ["Group/g"]);
    let (changes, _) = changes_since(&index, before, &Filter::default()).unwrap();
    let mut seen = kinds(&changes);
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        seen,
        [
            ("g".to_owned(), pb::EventType::Modified),
            ("m".to_owned(), pb::EventType::Deleted)
        ]
    );
    let (graph, placement) = index
        .published_of_pod(&pb::ObjectRef {
            uid: "uid-m-p".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(graph.r#ref.as_ref().unwrap().name, "g");
    assert_eq!(placement.component, "member");
    // Released again: the member is its own workload once more.
    assert!(
        index
            .batch()
            .write(Write::apply("files", member("m", None)))
            .is_empty()
    );
    assert_eq!(workloads(&index), ["Group/g", "Member/m"]);
}

#[test]
fn the_history_keeps_its_cap_and_older_resumes_reset() {
    let index = Index::new(catalog(), &[]).with_history(3);
    let start = index.board().revision();
    for i in 0..5 {
        assert!(
            index
                .batch()
                .write(Write::apply(
                    "files",
                    group("g", json!({"round": i.to_string()}))
                ))
                .is_empty()
        );
    }
    let now = index.board().revision();
    assert_eq!(now, start + 5);
    assert!(
        changes_since(&index, start, &Filter::default()).is_none(),
        "older than the kept history: RESET"
    );
    let (changes, rev) = changes_since(&index, now - 3, &Filter::default()).unwrap();
    assert_eq!(rev, now);
    assert_eq!(kinds(&changes), [("g".to_owned(), pb::EventType::Modified)]);
    let (changes, _) = changes_since(&index, now, &Filter::default()).unwrap();
    assert!(changes.is_empty());
    assert!(
        changes_since(&index, now + 1, &Filter::default()).is_none(),
        "from the future"
    );
}

#[test]
fn labels_entering_and_leaving_a_selector_are_added_and_deleted_for_it() {
    let index = Index::new(catalog(), &[]);
    let web = Filter {
        label_selector: "app=web".to_owned(),
        ..Filter::default()
    };
    assert!(
        index
            .batch()
            .write(Write::apply("files", group("g", json!({"app": "db"}))))
            .is_empty()
    );
    let r0 = index.board().revision();
    assert!(index.board().snapshot(&web).0.is_empty());
    assert!(
        index
            .batch()
            .write(Write::apply("files", group("g", json!({"app": "web"}))))
            .is_empty()
    );
    let (changes, r1) = changes_since(&index, r0, &web).unwrap();
    assert_eq!(kinds(&changes), [("g".to_owned(), pb::EventType::Added)]);
    assert!(
        index
            .batch()
            .write(Write::apply(
                "files",
                group("g", json!({"app": "web", "v": "2"}))
            ))
            .is_empty()
    );
    let (changes, r2) = changes_since(&index, r1, &web).unwrap();
    assert_eq!(kinds(&changes), [("g".to_owned(), pb::EventType::Modified)]);
    assert!(
        index
            .batch()
            .write(Write::apply("files", group("g", json!({"app": "db"}))))
            .is_empty()
    );
    let (changes, _) = changes_since(&index, r2, &web).unwrap();
    assert_eq!(kinds(&changes), [("g".to_owned(), pb::EventType::Deleted)]);
    // Over the whole span, the workload was never in the view: nothing to send.
    let (changes, _) = changes_since(&index, r0, &web).unwrap();
    assert!(changes.is_empty(), "{:?}", kinds(&changes));
}

#[test]
fn a_flush_of_many_roots_resolves_them_all_across_threads() {
    let index = Index::new(catalog(), &[]);
    // More dirty roots than one thread settles alone, with 1 to 40 pods each (threads
    // take roots as they go: the results must still be each root's own, in any order).
    let n = super::settle::PARALLEL_FROM * 3 + 1;
    let pods_of = |i: usize| if i.is_multiple_of(17) { 40 } else { i % 3 + 1 };
    let mut docs = Vec::new();
    for i in 0..n {
        docs.push(member(&format!("m{i:03}"), None));
        for p in 0..pods_of(i) {
            docs.push(pod(&format!("m{i:03}-p{p}"), &format!("m{i:03}")));
        }
    }
    assert!(index.batch().write(Write::reset("files", &docs)).is_empty());
    let names = workloads(&index);
    assert_eq!(names.len(), n);
    for i in 0..n {
        let w = index
            .published(&pb::ObjectRef {
                uid: format!("uid-m{i:03}"),
                ..Default::default()
            })
            .map(|p| p.graph())
            .expect("resolved");
        assert_eq!(
            w.pods.map(|p| p.current),
            Some(pods_of(i) as u32),
            "m{i:03}"
        );
    }
}

#[test]
fn children_stay_a_short_list_until_many_and_keep_each_uid_once() {
    use super::objects::Children;
    let uid = |i: usize| -> super::Uid { std::sync::Arc::from(format!("uid-{i}")) };
    let listed = |c: &Children| {
        let mut v: Vec<String> = c.into_iter().map(|u| u.to_string()).collect();
        v.sort();
        v
    };
    let mut c = Children::default();
    for i in 0..5 {
        c.insert(uid(i));
        c.insert(uid(i));
    }
    assert!(matches!(&c, Children::Few(list) if list.len() == 5 && list.capacity() == 5));
    c.remove("uid-2");
    assert_eq!(listed(&c), ["uid-0", "uid-1", "uid-3", "uid-4"]);
    for i in 0..40 {
        c.insert(uid(i));
    }
    assert!(matches!(&c, Children::Many(_)));
    assert_eq!(listed(&c).len(), 40);
    for i in 0..40 {
        c.remove(&format!("uid-{i}"));
    }
    assert!(c.is_empty());
}

#[test]
fn an_object_and_its_key_share_one_copy_of_the_uid() {
    let index = Index::new(catalog(), &[]);
    assert!(
        index
            .batch()
            .write(Write::apply("files", group("a", json!({}))))
            .is_empty()
    );
    assert!(
        index
            .batch()
            .write(Write::apply("files", pod("a-p", "a")))
            .is_empty()
    );
    // A changed pod replaces the cached one under the same key.
    let mut changed = pod("a-p", "a");
    changed["spec"]["nodeName"] = json!("m");
    assert!(
        index
            .batch()
            .write(Write::apply("files", changed.clone()))
            .is_empty()
    );
    let objects = index.objects();
    for uid in ["uid-a", "uid-a-p"] {
        let (key, entry) = objects.get_key_value(uid).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(key, &entry.cached.meta().uid),
            "{uid}: two copies"
        );
    }
}

/// Before the first sync, with a pod list open, a group list holding group `a` and its member
/// `a-0` ends: it hands its roots to the pod list. Returns the roots handed over.
fn hand_over_group_a(index: &Index) -> Vec<super::Uid> {
    let mut batch = index.batch();
    batch.begin_list("groups");
    batch.begin_list("pods");
    let docs = [group("a", json!({})), member("a-0", Some("a"))];
    batch.stage(
        "groups",
        docs.iter()
            .map(|d| Cached::from_json(d, Limits::default()))
            .collect(),
    );
    batch.finish_list("groups");
    std::mem::take(&mut batch.handed)
}

#[test]
fn before_the_first_sync_a_list_that_ends_while_another_arrives_hands_it_its_roots() {
    let index = Index::new(catalog(), &["cluster"]);
    let convert = |docs: &[Value]| {
        docs.iter()
            .map(|d| Cached::from_json(d, Limits::default()))
            .collect::<Vec<_>>()
    };
    let before = index.board().revision();
    hand_over_group_a(&index);
    // Group a's pods are still arriving: it is resolved when they are in, not before.
    assert!(workloads(&index).is_empty());
    {
        let mut batch = index.batch();
        batch.stage("pods", convert(&[pod("a-0-p", "a-0"), pod("a-0-q", "a-0")]));
        batch.finish_list("pods");
    }
    assert_eq!(workloads(&index), ["Group/a"]);
    // Resolved once, with its pods: one event.
    let (changes, _) = changes_since(&index, before, &Filter::default()).unwrap();
    assert_eq!(kinds(&changes), [("a".to_owned(), pb::EventType::Added)]);
    let pods = |uid: &str| current_pods(&index, uid);
    assert_eq!(pods("uid-a"), Some(2));

    // Once synced, a list that ends is resolved at once, whatever else is arriving.
    index.batch().mark_synced("cluster");
    {
        let mut batch = index.batch();
        batch.begin_list("pods");
        batch.begin_list("groups");
        batch.stage(
            "groups",
            convert(&[group("a", json!({})), group("b", json!({}))]),
        );
        batch.finish_list("groups");
    }
    assert_eq!(workloads(&index), ["Group/a", "Group/b"]);
}

#[test]
fn roots_handed_over_before_the_first_sync_can_be_prepared_while_their_pods_arrive() {
    let index = Index::new(catalog(), &["cluster"]);
    let convert = |docs: &[Value]| {
        docs.iter()
            .map(|d| Cached::from_json(d, Limits::default()))
            .collect::<Vec<_>>()
    };
    let handed = hand_over_group_a(&index);
    // The group was handed over (its member is no root: not marked).
    let names: Vec<&str> = handed.iter().map(|u| u.as_ref()).collect();
    assert_eq!(names, ["uid-a"]);
    let uid = |name: &str| {
        let objects = index.objects();
        objects.get_key_value(name).unwrap().0.clone()
    };
    let catalog = index.catalog.load_full();
    let prepared_version = |name: &str, kind: &str| {
        let def = catalog.lookup("example.com/v1", kind).unwrap().definition;
        index.prepared.get(&(uid(name), def.id())).map(|(v, _)| v)
    };
    assert_eq!(prepared_version("uid-a", "Group"), None);
    // A non-root (the member its group owns) is skipped.
    index.prepare_ahead(&[handed[0].clone(), uid("uid-a-0")]);
    let version = index.objects().get("uid-a").unwrap().version;
    assert_eq!(prepared_version("uid-a", "Group"), Some(version));
    assert_eq!(prepared_version("uid-a-0", "Member"), None, "not a root");
    // Resolved when the pods are in, with what was prepared.
    {
        let mut batch = index.batch();
        batch.stage("pods", convert(&[pod("a-0-p", "a-0")]));
        batch.finish_list("pods");
    }
    assert_eq!(workloads(&index), ["Group/a"]);
    assert_eq!(prepared_version("uid-a", "Group"), Some(version));
    // Once synced, nothing is handed over.
    index.batch().mark_synced("cluster");
    let mut batch = index.batch();
    batch.begin_list("pods");
    batch.begin_list("groups");
    batch.stage("groups", convert(&[group("b", json!({}))]));
    batch.finish_list("groups");
    assert!(batch.handed.is_empty());
}

#[test]
fn before_the_first_sync_a_root_the_open_list_stopped_touching_is_resolved_before_it_ends() {
    let index = Index::new(catalog(), &["cluster"]);
    let convert = |docs: &[Value]| {
        docs.iter()
            .map(|d| Cached::from_json(d, Limits::default()))
            .collect::<Vec<_>>()
    };
    let part = |docs: &[Value]| {
        let mut batch = index.batch();
        batch.stage("pods", convert(docs));
    };
    {
        // Groups a and c (c has no pods) are handed to the open pod list.
        let mut batch = index.batch();
        batch.begin_list("groups");
        batch.begin_list("pods");
        batch.begin_list("late");
        let docs = [
            group("a", json!({})),
            member("a-0", Some("a")),
            group("c", json!({})),
        ];
        batch.stage("groups", convert(&docs));
        batch.finish_list("groups");
    }
    part(&[pod("a-0-p", "a-0")]);
    // Parts of pods of nothing cached: a is not touched again. While another list is still
    // arriving (it might touch a), a waits.
    for i in 1..super::listing::RIPE_AFTER * 2 {
        part(&[pod(&format!("x-{i}"), "x")]);
        assert!(workloads(&index).is_empty(), "part {i}: too early");
    }
    index.batch().finish_list("late");
    assert!(workloads(&index).is_empty());
    part(&[pod("x-last", "x")]);
    // Not touched for RIPE_AFTER parts: resolved with what is in. c, which no part touched,
    // waits for the end of the list.
    assert_eq!(workloads(&index), ["Group/a"]);
    let pods = |uid: &str| current_pods(&index, uid);
    assert_eq!(pods("uid-a"), Some(1));
    // A pod of a after all: a is resolved again when the list ends, with it.
    part(&[pod("a-0-q", "a-0")]);
    assert_eq!(pods("uid-a"), Some(1));
    index.batch().finish_list("pods");
    assert_eq!(workloads(&index), ["Group/a", "Group/c"]);
    assert_eq!(pods("uid-a"), Some(2));

    // Once synced, a list's roots wait for its end, however long it runs.
    index.batch().mark_synced("cluster");
    index.batch().begin_list("pods");
    part(&[pod("a-0-r", "a-0")]);
    for i in 0..super::listing::RIPE_AFTER * 2 {
        part(&[pod(&format!("y-{i}"), "y")]);
    }
    assert_eq!(pods("uid-a"), Some(2));
    index.batch().finish_list("pods");
    assert_eq!(pods("uid-a"), Some(1), "the relist held a-0-r alone");
}

#[test]
fn a_list_that_starts_over_gives_back_the_roots_handed_to_it() {
    let index = Index::new(catalog(), &["cluster"]);
    {
        let mut batch = index.batch();
        batch.begin_list("groups");
        batch.begin_list("pods");
        batch.stage(
            "groups",
            vec![Cached::from_json(&group("a", json!({})), Limits::default())],
        );
        batch.finish_list("groups");
    }
    assert!(workloads(&index).is_empty());
    // The pod list fails and starts over (it may never end): the group is resolved now.
    index.batch().begin_list("pods");
    assert_eq!(workloads(&index), ["Group/a"]);
    // And when the index syncs (readiness stops waiting for a list), what lists still open
    // hold is resolved.
    {
        let mut batch = index.batch();
        batch.begin_list("groups");
        let groups = [group("a", json!({})), group("b", json!({}))];
        batch.stage(
            "groups",
            groups
                .iter()
                .map(|g| Cached::from_json(g, Limits::default()))
                .collect(),
        );
        batch.finish_list("groups");
    }
    assert_eq!(workloads(&index), ["Group/a"]);
    index.batch().mark_synced("cluster");
    index.batch().release_open_lists();
    assert_eq!(workloads(&index), ["Group/a", "Group/b"]);
}

/// The roots a change touches, derived in one walk down from each object's parent, are
/// those each object below it gives when walked up on its own (`root_of`), across owner
/// graphs with chains longer than `MAX_HOPS`, cycles, owners not cached, references naming
/// another kind than their owner's, and controllers that move.
#[test]
fn the_roots_a_change_touches_match_each_object_walked_up_on_its_own() {
    use super::Uid;
    use super::objects::{Entry, Objects};
    use crate::model::ownership::{self, MAX_HOPS, Root};
    use std::collections::BTreeSet;
    use std::sync::Arc;

    const N: usize = 12;
    let index = Index::new(catalog(), &[]);
    let catalog = index.catalog();
    let kind = |i: usize| ["Group", "Member", "Other", "Member"][i % 4];
    // Object i's controller: another object, an owner never cached, or none.
    let object = |i: usize, controller: usize| {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": kind(i),
            "metadata": {"name": format!("o{i}"), "namespace": "ns", "uid": format!("uid-{i}")}});
        let named = if i % 5 == 4 {
            "Group"
        } else {
            kind(controller % N)
        };
        if controller < N {
            o["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1",
                "kind": named, "name": format!("o{controller}"), "uid": format!("uid-{controller}"),
                "controller": true}]);
        } else if controller == N {
            o["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1",
                "kind": "Group", "name": "ghost", "uid": "uid-ghost", "controller": true}]);
        }
        o
    };
    let entry = |i: usize, controller: usize| Entry {
        cached: Cached::from_json(&object(i, controller), Limits::default()).expect("converts"),
        version: 0,
        source: Arc::from("t"),
        root: i.is_multiple_of(3).then(|| Arc::from(format!("hint-{i}"))),
    };
    // What the walk replaced: every object below `uid` walked up on its own.
    let walked_up = |objects: &Objects, uid: &str| -> BTreeSet<Uid> {
        let mut out = BTreeSet::new();
        let mut stack = vec![(objects.uid(uid), 0)];
        let mut seen = BTreeSet::new();
        while let Some((at, depth)) = stack.pop() {
            if depth > MAX_HOPS || !seen.insert(at.clone()) {
                continue;
            }
            if let Some(e) = objects.get(&at) {
                out.extend(e.root.clone());
                match ownership::root_of(e.cached.meta(), &objects.graph(), &catalog) {
                    Root::Owner(o) => {
                        out.insert(Arc::from(o.uid.as_str()));
                    }
                    Root::Itself => {
                        out.insert(at.clone());
                    }
                    Root::Uncovered(_) => {}
                }
            }
            for child in objects.children.get(&at).into_iter().flatten() {
                stack.push((child.clone(), depth + 1));
            }
        }
        out
    };
    let set = |roots: super::objects::Roots| -> BTreeSet<Uid> {
        roots.before.into_iter().chain(roots.after).collect()
    };
    let mut cases = 0;
    for a in 0..N + 2 {
        for b in 0..N + 2 {
            let controller = |i: usize| (i * a + b) % (N + 2);
            let mut objects = Objects::default();
            for i in 0..N {
                // Inserted after some of the objects it controls, before others.
                let uid = format!("uid-{i}");
                let before = walked_up(&objects, &uid);
                let shared = objects.uid(&uid);
                let found =
                    set(objects.put(shared, entry(i, controller(i)), &catalog, index.board()));
                let expected: BTreeSet<Uid> = before
                    .into_iter()
                    .chain(walked_up(&objects, &uid))
                    .collect();
                assert_eq!(found, expected, "a={a} b={b} object {i} inserted");
            }
            for i in 0..N {
                let uid = format!("uid-{i}");
                let found = set(objects.roots(&uid, &catalog, index.board()));
                assert_eq!(found, walked_up(&objects, &uid), "a={a} b={b} object {i}");
            }
            for i in 0..N {
                let uid = format!("uid-{i}");
                let before = walked_up(&objects, &uid);
                let moved = (controller(i) + 1 + i) % (N + 2);
                let shared = objects.uid(&uid);
                let found = set(objects.put(shared, entry(i, moved), &catalog, index.board()));
                let expected: BTreeSet<Uid> = before
                    .into_iter()
                    .chain(walked_up(&objects, &uid))
                    .collect();
                assert_eq!(found, expected, "a={a} b={b} object {i} moved to {moved}");
                cases += 1;
            }
            let last = format!("uid-{}", N - 1);
            let expected = walked_up(&objects, &last);
            assert_eq!(set(objects.take(&last, &catalog, index.board())), expected);
        }
    }
    assert_eq!(cases, (N + 2) * (N + 2) * N);
}

/// What a subscriber current to `since` must receive, and the revision (see
/// `Board::changes_since_counted`).
fn changes_since(index: &Index, since: u64, filter: &Filter) -> Option<(Vec<Change>, u64)> {
    index
        .board()
        .changes_since_counted(since, filter)
        .map(|(changes, revision, _)| (changes, revision))
}
