//! One subscription to an upstream's `Watch`, apart from the network: the events it
//! received are checked against the [`Limits`], collected into a snapshot (until SYNCED) or
//! applied live, and the revision it is current to advances only with what was applied.
//! Any error is a reason to isolate the upstream (drop the connection, mark it stale).

use super::breach::Breach;
use super::wire::{RawWatchEvent, WorkloadRef};
use super::{Aggregator, Limits, Upstream, cost};
use crate::board::Published;
use crate::proto::v1 as pb;
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// One change an upstream sent, ready to apply.
pub(super) enum Incoming {
    /// A new graph for a workload (by uid).
    Upsert(String, Published),
    /// A workload (by uid) is gone.
    Delete(String),
}

/// A snapshot being collected (a first subscription, or after RESET): uid -> graph.
struct Snapshot {
    graphs: HashMap<String, Published>,
    bytes: usize,
    deadline: Instant,
}

impl Snapshot {
    fn new(limits: &Limits) -> Snapshot {
        Snapshot {
            graphs: HashMap::new(),
            bytes: 0,
            deadline: Instant::now() + limits.snapshot_timeout,
        }
    }

    fn insert(&mut self, uid: String, graph: Published, limits: &Limits) -> Result<(), Breach> {
        self.bytes = self.bytes.saturating_add(cost::held(&graph));
        if let Some(old) = self.graphs.insert(uid, graph) {
            self.bytes = self.bytes.saturating_sub(cost::held(&old));
        }
        if self.graphs.len() > limits.max_workloads {
            return Err(Breach::SnapshotWorkloads {
                max: limits.max_workloads,
            });
        }
        if self.bytes > limits.max_bytes {
            return Err(Breach::SnapshotBytes {
                max: limits.max_bytes,
            });
        }
        Ok(())
    }

    fn remove(&mut self, uid: &str) {
        if let Some(old) = self.graphs.remove(uid) {
            self.bytes = self.bytes.saturating_sub(cost::held(&old));
        }
    }
}

/// The state of one subscription (see the module docs).
pub(super) struct Session {
    limits: Limits,
    snapshot: Option<Snapshot>,
    /// The upstream revision up to which changes were applied.
    pub(super) since: u64,
    /// It reached SYNCED.
    pub(super) synced: bool,
}

impl Session {
    /// A subscription from `since` (0: it starts with a snapshot).
    pub(super) fn new(since: u64, limits: Limits) -> Session {
        Session {
            snapshot: (since == 0).then(|| Snapshot::new(&limits)),
            limits,
            since,
            synced: false,
        }
    }

    /// When the snapshot being collected must have ended.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.snapshot.as_ref().map(|s| s.deadline)
    }

    /// Handles a batch of events, in order. An error names the bound the upstream broke
    /// (what was applied before it stays applied).
    pub(super) fn events(
        &mut self,
        aggregator: &Arc<Aggregator>,
        up: &Arc<Upstream>,
        batch: Vec<RawWatchEvent>,
    ) -> Result<(), Breach> {
        let mut live: Vec<Incoming> = Vec::new();
        let mut live_since = self.since;
        for event in batch {
            let kind = pb::EventType::try_from(event.r#type).unwrap_or(pb::EventType::Unspecified);
            match kind {
                pb::EventType::Reset => {
                    self.apply(aggregator, up, std::mem::take(&mut live), live_since)?;
                    aggregator.mark_stale(up, "the upstream sent RESET: resyncing");
                    self.snapshot = Some(Snapshot::new(&self.limits));
                }
                pb::EventType::Added | pb::EventType::Modified => {
                    let Some(bytes) = event.workload else {
                        continue;
                    };
                    if bytes.len() > self.limits.max_graph_bytes {
                        return Err(Breach::GraphBytes {
                            bytes: bytes.len(),
                            max: self.limits.max_graph_bytes,
                        });
                    }
                    // Before decoding: what it would take decoded (element floods).
                    let room = self
                        .limits
                        .max_graph_bytes
                        .saturating_mul(cost::DECODED_PER_ENCODED);
                    if let Some(size) = cost::decoded(&bytes).filter(|s| *s > room) {
                        return Err(Breach::DecodedBytes {
                            size,
                            room,
                            factor: cost::DECODED_PER_ENCODED,
                        });
                    }
                    let Some((uid, graph)) = received(aggregator, up, bytes) else {
                        continue;
                    };
                    let change = if aggregator.may_speak_for(up, &graph.cluster) {
                        Incoming::Upsert(uid, graph)
                    } else {
                        aggregator.refuse(
                            up,
                            format!(
                                "a graph (uid {}) names cluster {:?}, which this upstream may not speak for",
                                crate::excerpt::echo(&uid),
                                crate::excerpt::echo(&graph.cluster)
                            ),
                        );
                        Incoming::Delete(uid)
                    };
                    self.change(change, event.revision, &mut live, &mut live_since)?;
                }
                pb::EventType::Deleted => {
                    let Some(uid) = event
                        .workload
                        .and_then(|b| WorkloadRef::decode(b).ok())
                        .and_then(|w| w.r#ref)
                        .map(|r| r.uid)
                    else {
                        continue;
                    };
                    self.change(
                        Incoming::Delete(uid),
                        event.revision,
                        &mut live,
                        &mut live_since,
                    )?;
                }
                pb::EventType::Synced => {
                    self.apply(aggregator, up, std::mem::take(&mut live), live_since)?;
                    match self.snapshot.take() {
                        Some(s) => aggregator.reconcile(up, s.graphs),
                        None => {
                            if !aggregator.clear_stale(up) {
                                return Err(Breach::DroppedWhileResuming);
                            }
                        }
                    }
                    self.since = event.revision;
                    live_since = event.revision;
                    self.synced = true;
                    aggregator.mark_synced(up);
                }
                pb::EventType::Unspecified => {}
            }
        }
        self.apply(aggregator, up, live, live_since)
    }

    /// Into the snapshot being collected, or the live changes of this batch.
    fn change(
        &mut self,
        change: Incoming,
        revision: u64,
        live: &mut Vec<Incoming>,
        live_since: &mut u64,
    ) -> Result<(), Breach> {
        match self.snapshot.as_mut() {
            Some(s) => {
                if Instant::now() > s.deadline {
                    return Err(Breach::SnapshotTimeout {
                        timeout: self.limits.snapshot_timeout,
                    });
                }
                match change {
                    Incoming::Upsert(uid, graph) => s.insert(uid, graph, &self.limits)?,
                    Incoming::Delete(uid) => s.remove(&uid),
                }
            }
            None => {
                live.push(change);
                *live_since = revision;
            }
        }
        Ok(())
    }

    fn apply(
        &mut self,
        aggregator: &Arc<Aggregator>,
        up: &Arc<Upstream>,
        live: Vec<Incoming>,
        live_since: u64,
    ) -> Result<(), Breach> {
        aggregator.apply(up, live)?;
        self.since = live_since;
        Ok(())
    }
}

/// A received graph, decoded once for its summary; `None` (refused) when it does not decode.
fn received(
    aggregator: &Aggregator,
    upstream: &Upstream,
    bytes: bytes::Bytes,
) -> Option<(String, Published)> {
    match Published::from_wire(bytes, upstream.name()) {
        Ok(graph) => {
            let uid = graph.r#ref.as_ref().map(|r| r.uid.clone())?;
            Some((uid, graph))
        }
        Err(e) => {
            aggregator.refuse(upstream, format!("a graph that does not decode: {e}"));
            None
        }
    }
}

/// The changes of one batch, one per uid (the last), in the order the uids first came.
pub(super) fn coalesce(changes: Vec<Incoming>) -> Vec<(String, Option<Published>)> {
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<(String, Option<Published>)> = Vec::new();
    for change in changes {
        let (uid, graph) = match change {
            Incoming::Upsert(uid, graph) => (uid, Some(graph)),
            Incoming::Delete(uid) => (uid, None),
        };
        match at.get(&uid) {
            Some(&i) => {
                if let Some(slot) = out.get_mut(i) {
                    slot.1 = graph;
                }
            }
            None => {
                at.insert(uid.clone(), out.len());
                out.push((uid, graph));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The aggregator's view against the upstream's truth, in-process: random event
    //! sequences (add, modify, rename, delete, graphs naming another cluster, RESET and a
    //! fresh snapshot, reconnections with and without resume, in random batches) go through
    //! a [`Session`] as the network task would feed it.

    use super::*;
    use crate::aggregate::{Settings, UpstreamConfig};
    use crate::definition::Catalog;
    use crate::server::Store;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A graph as an upstream encodes it.
    fn graph(uid: &str, name: &str, cluster: &str, version: u32) -> bytes::Bytes {
        let w = pb::Workload {
            r#ref: Some(pb::ObjectRef {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                namespace: "ns".into(),
                name: name.into(),
                uid: uid.into(),
            }),
            cluster: cluster.into(),
            labels: [("v".to_owned(), version.to_string())].into(),
            ..Default::default()
        };
        bytes::Bytes::from(w.encode_to_vec())
    }

    fn event(kind: pb::EventType, revision: u64, workload: Option<bytes::Bytes>) -> RawWatchEvent {
        RawWatchEvent {
            r#type: kind as i32,
            revision,
            workload,
        }
    }

    /// An aggregator following `names` (registered without tasks: sessions are fed here).
    fn aggregator(names: &[&str], limits: Limits) -> (Arc<Aggregator>, Vec<Arc<Upstream>>) {
        let settings = Settings {
            limits,
            ..Settings::default()
        };
        let aggregator = Aggregator::new(Catalog::from_layers(1, []), settings);
        let ups: Vec<Arc<Upstream>> = names
            .iter()
            .map(|n| Arc::new(Upstream::new(UpstreamConfig::new(n, "http://127.0.0.1:1"))))
            .collect();
        for up in &ups {
            aggregator
                .upstreams
                .write()
                .insert(up.name().to_owned(), up.clone());
        }
        (aggregator, ups)
    }

    /// The upstream's truth: uid -> (name, cluster, version).
    type Truth = BTreeMap<String, (String, String, u32)>;

    /// What the aggregator must serve of `up`: the truth's graphs that name its cluster.
    fn check(aggregator: &Aggregator, up: &Upstream, truth: &Truth, names: &[String]) {
        let held: BTreeMap<String, (String, String, String)> = aggregator
            .entries_of(up)
            .iter()
            .map(|w| {
                let r = w.graph.r#ref.clone().unwrap_or_default();
                let v = w
                    .labels
                    .iter()
                    .find(|(k, _)| k == "v")
                    .map(|(_, v)| v.clone());
                (
                    r.uid,
                    (r.name, w.graph.cluster.clone(), v.unwrap_or_default()),
                )
            })
            .collect();
        let expected: BTreeMap<String, (String, String, String)> = truth
            .iter()
            .filter(|(_, (_, cluster, _))| cluster == up.name())
            .map(|(uid, (name, cluster, v))| {
                (uid.clone(), (name.clone(), cluster.clone(), v.to_string()))
            })
            .collect();
        assert_eq!(held, expected, "the published set of {}", up.name());
        // The name index holds exactly the held workloads' names.
        for name in names {
            let want: BTreeSet<String> = expected
                .iter()
                .filter(|(_, (n, _, _))| n == name)
                .map(|(uid, _)| up.key(uid))
                .collect();
            let got: BTreeSet<String> = aggregator
                .names
                .read()
                .get(&("ns".to_owned(), name.clone()))
                .map(|keys| {
                    keys.iter()
                        .filter(|k| k.starts_with(&up.prefix))
                        .map(|k| k.to_string())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(got, want, "keys named {name} of {}", up.name());
            // Resolve by name in the upstream's cluster: one of those, or NOT_FOUND.
            let r = pb::ObjectRef {
                namespace: "ns".into(),
                name: name.clone(),
                ..Default::default()
            };
            match aggregator.workload(&r, up.name()) {
                Ok(g) => {
                    let uid = g.r#ref.clone().unwrap_or_default().uid;
                    assert!(want.contains(&up.key(&uid)), "{name} answered {uid}");
                    assert_eq!(g.r#ref.clone().unwrap_or_default().name, *name);
                }
                Err(s) => {
                    assert_eq!(s.code(), tonic::Code::NotFound);
                    assert!(want.is_empty(), "{name} not found");
                }
            }
        }
        for uid in truth.keys() {
            let r = pb::ObjectRef {
                uid: uid.clone(),
                ..Default::default()
            };
            let found = aggregator.workload(&r, up.name()).is_ok();
            assert_eq!(found, expected.contains_key(uid), "uid {uid}");
        }
        // Its counts are the board's.
        let state = up.state();
        assert_eq!(state.workloads, held.len());
        let bytes: usize = aggregator
            .entries_of(up)
            .iter()
            .map(|w| cost::held(&w.graph))
            .sum();
        assert_eq!(state.bytes, bytes);
        let names_total: usize = aggregator.names.read().values().map(Vec::len).sum();
        assert!(
            names_total <= aggregator.board.len(),
            "no key kept under an old name"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Add or modify (a rename when the name differs), naming the upstream's cluster or
        /// (`foreign`) the other upstream's.
        Upsert {
            uid: u8,
            name: u8,
            foreign: bool,
        },
        Delete {
            uid: u8,
        },
        /// The events so far go to the aggregator as one batch.
        Flush,
        /// RESET and a snapshot of the truth (changes may follow before SYNCED).
        Reset,
        Synced,
        /// The stream breaks; the next subscription resumes, or starts from a snapshot.
        Reconnect {
            resume: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..6, 0u8..4, prop::bool::weighted(0.15))
                .prop_map(|(uid, name, foreign)| Op::Upsert { uid, name, foreign }),
            2 => (0u8..6).prop_map(|uid| Op::Delete { uid }),
            3 => Just(Op::Flush),
            1 => Just(Op::Reset),
            2 => Just(Op::Synced),
            1 => any::<bool>().prop_map(|resume| Op::Reconnect { resume }),
        ]
    }

    /// A full snapshot of `truth` as ADDED events.
    fn snapshot(truth: &Truth, revision: &mut u64) -> Vec<RawWatchEvent> {
        truth
            .iter()
            .map(|(uid, (name, cluster, v))| {
                *revision += 1;
                event(
                    pb::EventType::Added,
                    *revision,
                    Some(graph(uid, name, cluster, *v)),
                )
            })
            .collect()
    }

    fn run(ops: Vec<Op>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let (aggregator, ups) = aggregator(&["up", "other"], Limits::default());
        let (up, other) = (&ups[0], &ups[1]);
        let names: Vec<String> = (0..4).map(|n| format!("job-{n}")).collect();
        // The other upstream: one workload of every name, under the same uids.
        let mut theirs = Truth::new();
        for (i, name) in names.iter().enumerate() {
            theirs.insert(format!("u{i}"), (name.clone(), "other".into(), 1));
        }
        let mut revision = 0;
        let mut batch = snapshot(&theirs, &mut revision);
        batch.push(event(pb::EventType::Synced, revision, None));
        let mut session = Session::new(0, Limits::default());
        session.events(&aggregator, other, batch).unwrap();

        let mut truth = Truth::new();
        let mut version = 0u32;
        let mut session = Session::new(0, Limits::default());
        let mut pending: Vec<RawWatchEvent> = Vec::new();
        // True between RESET (or a subscription from 0) and SYNCED.
        let mut collecting = true;
        for op in ops {
            match op {
                Op::Upsert { uid, name, foreign } => {
                    let uid = format!("u{uid}");
                    let cluster = if foreign { "other" } else { "up" };
                    let kind = if truth.contains_key(&uid) {
                        pb::EventType::Modified
                    } else {
                        pb::EventType::Added
                    };
                    version += 1;
                    let name = format!("job-{name}");
                    revision += 1;
                    pending.push(event(
                        kind,
                        revision,
                        Some(graph(&uid, &name, cluster, version)),
                    ));
                    truth.insert(uid, (name, cluster.to_owned(), version));
                }
                Op::Delete { uid } => {
                    let uid = format!("u{uid}");
                    if let Some((name, cluster, v)) = truth.remove(&uid) {
                        revision += 1;
                        pending.push(event(
                            pb::EventType::Deleted,
                            revision,
                            Some(graph(&uid, &name, &cluster, v)),
                        ));
                    }
                }
                Op::Flush => {}
                Op::Reset => {
                    revision += 1;
                    pending.push(event(pb::EventType::Reset, revision, None));
                    pending.extend(snapshot(&truth, &mut revision));
                    collecting = true;
                }
                Op::Synced => {
                    revision += 1;
                    pending.push(event(pb::EventType::Synced, revision, None));
                    collecting = false;
                }
                Op::Reconnect { resume } => {
                    session
                        .events(&aggregator, up, std::mem::take(&mut pending))
                        .unwrap();
                    aggregator.mark_stale(up, "test: the stream broke");
                    let since = if resume && !collecting {
                        session.since
                    } else {
                        0
                    };
                    session = Session::new(since, Limits::default());
                    if since == 0 {
                        pending.extend(snapshot(&truth, &mut revision));
                    }
                    revision += 1;
                    pending.push(event(pb::EventType::Synced, revision, None));
                    collecting = false;
                }
            }
            if matches!(op, Op::Flush | Op::Synced | Op::Reconnect { .. }) {
                session
                    .events(&aggregator, up, std::mem::take(&mut pending))
                    .unwrap();
                if !collecting {
                    check(&aggregator, up, &truth, &names);
                    assert!(up.state().stale.is_none(), "current again");
                }
                check(&aggregator, other, &theirs, &names);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn the_view_of_an_upstream_follows_its_truth(ops in prop::collection::vec(op(), 1..80)) {
            run(ops);
        }
    }

    #[test]
    fn a_rename_leaves_the_old_name_and_renames_do_not_grow_the_index() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let (aggregator, ups) = aggregator(&["up"], Limits::default());
        let up = &ups[0];
        let mut session = Session::new(0, Limits::default());
        let first = vec![
            event(pb::EventType::Added, 1, Some(graph("u1", "old", "up", 1))),
            event(pb::EventType::Synced, 2, None),
        ];
        session.events(&aggregator, up, first).unwrap();
        for i in 0..1000u32 {
            let renamed = graph("u1", &format!("name-{i}"), "up", i);
            let e = event(pb::EventType::Modified, 3 + u64::from(i), Some(renamed));
            session.events(&aggregator, up, vec![e]).unwrap();
        }
        let by_name = |name: &str| {
            let r = pb::ObjectRef {
                namespace: "ns".into(),
                name: name.into(),
                ..Default::default()
            };
            aggregator.workload(&r, "")
        };
        assert_eq!(by_name("old").unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            by_name("name-998").unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            by_name("name-999").unwrap().r#ref.clone().unwrap().uid,
            "u1"
        );
        assert_eq!(aggregator.names.read().len(), 1);
    }

    #[test]
    fn a_batch_applies_the_last_change_of_each_workload() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let (aggregator, ups) = aggregator(&["up"], Limits::default());
        let up = &ups[0];
        let mut session = Session::new(0, Limits::default());
        session
            .events(&aggregator, up, vec![event(pb::EventType::Synced, 1, None)])
            .unwrap();
        // Added then deleted in one batch: nothing is held.
        let batch = vec![
            event(pb::EventType::Added, 2, Some(graph("u1", "a", "up", 1))),
            event(pb::EventType::Deleted, 3, Some(graph("u1", "a", "up", 1))),
            event(pb::EventType::Added, 4, Some(graph("u2", "b", "up", 1))),
        ];
        session.events(&aggregator, up, batch).unwrap();
        assert!(aggregator.board.get(&up.key("u1")).is_none());
        assert!(aggregator.board.get(&up.key("u2")).is_some());
        assert_eq!(session.since, 4);
    }

    #[test]
    fn an_upstream_speaks_only_for_its_clusters() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let settings = Settings::default();
        let aggregator = Aggregator::new(Catalog::from_layers(1, []), settings);
        let mut shard = UpstreamConfig::new("prod-a", "http://127.0.0.1:1");
        shard.clusters = vec!["prod".into()];
        let mut hub = UpstreamConfig::new("hub", "http://127.0.0.1:1");
        hub.clusters = vec!["*".into()];
        let ups: Vec<Arc<Upstream>> = [UpstreamConfig::new("eu", "http://127.0.0.1:1"), shard, hub]
            .into_iter()
            .map(|c| Arc::new(Upstream::new(c)))
            .collect();
        for up in &ups {
            aggregator
                .upstreams
                .write()
                .insert(up.name().to_owned(), up.clone());
        }
        let (eu, shard, hub) = (&ups[0], &ups[1], &ups[2]);
        assert!(aggregator.may_speak_for(eu, "eu"));
        assert!(!aggregator.may_speak_for(eu, "prod"));
        assert!(aggregator.may_speak_for(shard, "prod"));
        assert!(aggregator.may_speak_for(shard, "prod-a"));
        assert!(!aggregator.may_speak_for(shard, "eu"));
        // `*`: any cluster no other upstream names or lists.
        assert!(aggregator.may_speak_for(hub, "us"));
        assert!(!aggregator.may_speak_for(hub, "eu"));
        assert!(!aggregator.may_speak_for(hub, "prod"));
        // A graph naming another cluster is refused, counted, and not published.
        let mut session = Session::new(0, Limits::default());
        let batch = vec![
            event(pb::EventType::Added, 1, Some(graph("u1", "web", "eu", 1))),
            event(pb::EventType::Added, 2, Some(graph("u2", "web", "prod", 1))),
            event(pb::EventType::Synced, 3, None),
        ];
        session.events(&aggregator, eu, batch).unwrap();
        assert!(aggregator.board.get(&eu.key("u1")).is_some());
        assert!(aggregator.board.get(&eu.key("u2")).is_none());
        let state = eu.state();
        assert_eq!(state.refused, 1);
        assert!(state.refusal.as_ref().unwrap().contains("\"prod\""));
    }

    #[test]
    fn bounds_isolate_and_keep_what_was_applied() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let limits = Limits {
            max_graph_bytes: 200,
            max_workloads: 3,
            max_bytes: 10_000,
            snapshot_timeout: std::time::Duration::from_secs(60),
        };
        let (aggregator, ups) = aggregator(&["up"], limits);
        let up = &ups[0];
        // A snapshot of more workloads than allowed.
        let mut session = Session::new(0, limits);
        let many: Vec<RawWatchEvent> = (0..4)
            .map(|i| {
                event(
                    pb::EventType::Added,
                    i + 1,
                    Some(graph(&format!("u{i}"), "a", "up", 1)),
                )
            })
            .collect();
        let e = session
            .events(&aggregator, up, many)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--upstream-max-workloads"), "{e}");
        assert_eq!(
            aggregator.board.len(),
            0,
            "nothing of the snapshot published"
        );
        // A snapshot within the bounds, then live changes over them.
        let mut session = Session::new(0, limits);
        let ok = vec![
            event(pb::EventType::Added, 1, Some(graph("u1", "a", "up", 1))),
            event(pb::EventType::Added, 2, Some(graph("u2", "a", "up", 1))),
            event(pb::EventType::Synced, 3, None),
        ];
        session.events(&aggregator, up, ok).unwrap();
        let more = vec![
            event(pb::EventType::Added, 4, Some(graph("u3", "a", "up", 1))),
            event(pb::EventType::Added, 5, Some(graph("u4", "a", "up", 1))),
        ];
        let e = session
            .events(&aggregator, up, more)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--upstream-max-workloads"), "{e}");
        assert_eq!(aggregator.board.len(), 2, "the batch is not applied");
        assert_eq!(session.since, 3, "a resumed subscription replays it");
        // A graph over the size bound.
        let big = pb::Workload {
            r#ref: Some(pb::ObjectRef {
                uid: "u9".into(),
                ..Default::default()
            }),
            created: "x".repeat(300),
            ..Default::default()
        };
        let e = session
            .events(
                &aggregator,
                up,
                vec![event(
                    pb::EventType::Added,
                    6,
                    Some(big.encode_to_vec().into()),
                )],
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("--upstream-max-graph-bytes"), "{e}");
        // A graph within the size bound that floods elements (each empty diagnostic is 2
        // bytes encoded and a struct decoded).
        let flood = pb::Workload {
            r#ref: Some(pb::ObjectRef {
                uid: "u8".into(),
                ..Default::default()
            }),
            diagnostics: vec![pb::Diagnostic::default(); 90],
            ..Default::default()
        };
        let flood = flood.encode_to_vec();
        assert!(flood.len() <= limits.max_graph_bytes);
        let e = session
            .events(
                &aggregator,
                up,
                vec![event(pb::EventType::Added, 6, Some(flood.into()))],
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("decoded"), "{e}");
        assert_eq!(aggregator.board.len(), 2);
        // A snapshot that does not end in time.
        let slow = Limits {
            snapshot_timeout: std::time::Duration::ZERO,
            ..limits
        };
        let mut session = Session::new(0, slow);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let e = session
            .events(
                &aggregator,
                up,
                vec![event(
                    pb::EventType::Added,
                    1,
                    Some(graph("u1", "a", "up", 1)),
                )],
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("--upstream-snapshot-timeout"), "{e}");
        // Bytes: a snapshot over max_bytes.
        let small = Limits {
            max_bytes: 100,
            ..limits
        };
        let mut session = Session::new(0, small);
        let e = session
            .events(
                &aggregator,
                up,
                (0..3)
                    .map(|i| {
                        event(
                            pb::EventType::Added,
                            i + 1,
                            Some(graph(&format!("u{i}"), "a", "up", 1)),
                        )
                    })
                    .collect(),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("--upstream-max-bytes"), "{e}");
    }
}
