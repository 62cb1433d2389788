//! The Karta reconciler: writes each Karta object's status conditions
//! ([`crate::karta::conditions`]) through the status subresource, and re-asserts its index labels,
//! from the one replica holding the Lease ([`super::lease`]); the others follow and take
//! over when it stops renewing.
//!
//! It watches Karta objects (its own watch: it needs their `metadata.generation`, labels
//! and current status), and reconciles every object after a change, when it becomes the
//! leader, when the definitions are republished (schema drift moves) and every resync
//! period (a CRD installed later). Events that arrive together make one pass over the objects
//! they changed; the objects of a pass are reconciled [`WORKERS`] at a time, with discovery
//! asked once per root `apiVersion`. A write happens only when a condition's status, reason,
//! message or observed generation changes; a status write carries the `resourceVersion` it
//! was computed from, and a conflict (409) is retried on a fresh read. The reconciler's own
//! writes are remembered, so an event older than them neither writes again nor conflicts.

use super::lease;
use crate::definition::LoadReport;
use crate::karta::conditions::{self, Condition, Facts};
use futures::FutureExt;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Conflicts retried per status write.
pub const CONFLICT_RETRIES: usize = 5;

/// Objects reconciled at once (and discovery requests in flight at once).
pub const WORKERS: usize = 8;

/// Watch events folded in at once before a pass (more wait for the next pass).
const EVENTS_PER_PASS: usize = 10_000;

/// Resource versions remembered per object as replaced by the reconciler's own writes.
const SUPERSEDED: usize = 8;

/// Settings of the reconciler.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The election (`None`: always write).
    pub lease: Option<lease::Settings>,
    /// Full reconcile period.
    pub resync: Duration,
}

/// The Karta resource.
pub fn karta_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("run.ai", "v1alpha1", "Karta"),
        "kartas",
    )
}

/// Runs the reconciler until `shutdown` flips. `definitions` ticks when the definitions are
/// republished (the drift in `report` may have moved).
pub async fn run(
    client: kube::Client,
    report: Arc<LoadReport>,
    settings: Settings,
    definitions: Option<watch::Receiver<u64>>,
    shutdown: watch::Receiver<bool>,
) {
    let (leading_tx, mut leading) = watch::channel(settings.lease.is_none());
    // Without an election the sender stays here, so `leading` stays true and open.
    let (election, _always) = match settings.lease.clone() {
        Some(l) => (
            Some(tokio::spawn(lease::run(
                client.clone(),
                l,
                leading_tx,
                shutdown.clone(),
            ))),
            None,
        ),
        None => (None, Some(leading_tx)),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &karta_resource());
    let mut stream =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    let mut objects: BTreeMap<String, DynamicObject> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, DynamicObject>> = None;
    // Objects changed since the last pass; `full`: every object needs a look.
    let mut changed: BTreeSet<String> = BTreeSet::new();
    let mut full = false;
    let mut definitions = definitions;
    let mut shutdown = shutdown;
    let mut resync = tokio::time::interval(settings.resync.max(Duration::from_secs(1)));
    let reconciler = Reconciler {
        client,
        api,
        report,
        written: Mutex::new(HashMap::new()),
    };
    loop {
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(e)) => {
                    let mut fold = Fold { objects: &mut objects, listing: &mut listing, changed: &mut changed, full: &mut full, written: &reconciler.written };
                    fold.apply(e);
                    // Everything the watch holds already joins this pass (200 objects
                    // created at once make one pass, not 200).
                    for _ in 0..EVENTS_PER_PASS {
                        match stream.next().now_or_never() {
                            Some(Some(Ok(e))) => fold.apply(e),
                            Some(Some(Err(e))) => tracing::warn!(error = %e, "karta status: watch error (retrying)"),
                            Some(None) | None => break,
                        }
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "karta status: watch error (retrying)"),
                None => break,
            },
            lead = leading.changed() => {
                if lead.is_err() { break; }
                full |= *leading.borrow();
            }
            republished = async {
                match definitions.as_mut() {
                    Some(d) => d.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if republished.is_err() { definitions = None; }
                full = true;
            }
            _ = resync.tick() => full = true,
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
            }
        }
        if (full || !changed.is_empty()) && *leading.borrow() && listing.is_none() {
            let names: Vec<&String> = if std::mem::take(&mut full) {
                objects.keys().collect()
            } else {
                changed
                    .iter()
                    .filter(|n| objects.contains_key(*n))
                    .collect()
            };
            reconciler.pass(&objects, &names).await;
            changed.clear();
        }
    }
    if let Some(e) = election {
        // The election releases the Lease on shutdown; give it the time to.
        let _ = tokio::time::timeout(Duration::from_secs(2), e).await;
    }
}

/// What the watch events are folded into.
struct Fold<'a> {
    objects: &'a mut BTreeMap<String, DynamicObject>,
    listing: &'a mut Option<BTreeMap<String, DynamicObject>>,
    changed: &'a mut BTreeSet<String>,
    full: &'a mut bool,
    written: &'a Mutex<HashMap<String, Written>>,
}

impl Fold<'_> {
    /// Folds one watch event in: the objects, which changed, and whether the set was
    /// listed anew (every object then needs a look).
    fn apply(&mut self, event: watcher::Event<DynamicObject>) {
        let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
        match event {
            watcher::Event::Init => *self.listing = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                if let Some(l) = self.listing.as_mut() {
                    l.insert(name(&o), o);
                }
            }
            watcher::Event::InitDone => {
                if let Some(l) = self.listing.take() {
                    *self.objects = l;
                    *self.full = true;
                }
            }
            watcher::Event::Apply(o) => {
                let n = name(&o);
                self.objects.insert(n.clone(), o);
                self.changed.insert(n);
            }
            watcher::Event::Delete(o) => {
                let n = name(&o);
                self.objects.remove(&n);
                self.changed.remove(&n);
                self.written.lock().remove(&n);
            }
        }
    }
}

/// What the reconciler's own writes made of one object: the object they returned, and the
/// resource versions they replaced. A watch event of a replaced version (on its way while
/// the reconciler wrote) is read as the written object, so it costs no stale write and no
/// conflict.
struct Written {
    superseded: Vec<String>,
    latest: DynamicObject,
}

/// At most 253 characters of `[a-z0-9.-]` (a DNS subdomain's alphabet).
fn is_discovery_name(s: &str) -> bool {
    s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

struct Reconciler {
    client: kube::Client,
    api: Api<DynamicObject>,
    report: Arc<LoadReport>,
    /// Per object name, what the reconciler's writes made of it.
    written: Mutex<HashMap<String, Written>>,
}

/// Per `apiVersion`, the kinds the cluster serves (`None`: discovery failed).
type Served = HashMap<String, Option<Vec<String>>>;

impl Reconciler {
    /// Reconciles the objects `names`, [`WORKERS`] at a time; discovery is asked once per
    /// root `apiVersion` for the whole pass.
    async fn pass(&self, objects: &BTreeMap<String, DynamicObject>, names: &[&String]) {
        let live: Vec<(&String, &DynamicObject)> = names
            .iter()
            .filter_map(|n| objects.get(*n).map(|o| (*n, o)))
            .filter(|(_, o)| o.metadata.deletion_timestamp.is_none())
            .collect();
        let versions: BTreeSet<String> = live
            .iter()
            .filter_map(|(_, o)| crate::karta::root_kind(&serde_json::to_value(o).ok()?))
            .filter(|r| {
                is_discovery_name(&r.group)
                    && is_discovery_name(&r.version)
                    && !r.version.is_empty()
            })
            .map(|r| r.api_version())
            .collect();
        let served: Served = futures::stream::iter(versions)
            .map(|v| async move {
                let kinds = self.served(&v).await;
                (v, kinds)
            })
            .buffer_unordered(WORKERS)
            .collect()
            .await;
        futures::stream::iter(live)
            .for_each_concurrent(WORKERS, |(name, object)| {
                let served = &served;
                async move {
                    let object = self.newest(name, object);
                    if let Err(e) = self.reconcile(name, object, served).await {
                        tracing::warn!(karta = %name, error = %e, "karta status: not written (retried at the next change or resync)");
                    }
                }
            })
            .await;
    }

    /// `object` as watched, or what the reconciler's own writes made of it when the watch
    /// has not caught up with them yet.
    fn newest(&self, name: &str, object: &DynamicObject) -> DynamicObject {
        let rv = object
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        match self.written.lock().get(name) {
            Some(w) if w.superseded.iter().any(|s| s == rv) => w.latest.clone(),
            _ => object.clone(),
        }
    }

    /// Remembers that a write based on `from` (a resource version) gave `to`.
    fn wrote(&self, name: &str, from: Option<&str>, to: DynamicObject) {
        let mut written = self.written.lock();
        let entry = written.entry(name.to_owned()).or_insert_with(|| Written {
            superseded: Vec::new(),
            latest: to.clone(),
        });
        let continues = entry.latest.metadata.resource_version.as_deref() == from;
        if !continues {
            entry.superseded.clear();
        }
        if let Some(from) = from {
            if entry.superseded.len() >= SUPERSEDED {
                entry.superseded.remove(0);
            }
            entry.superseded.push(from.to_owned());
        }
        entry.latest = to;
    }

    /// The kinds the cluster serves in `api_version` (`None`: discovery failed).
    async fn served(&self, api_version: &str) -> Option<Vec<String>> {
        let list = if api_version.contains('/') {
            self.client.list_api_group_resources(api_version).await
        } else {
            self.client.list_core_api_resources(api_version).await
        };
        match list {
            Ok(l) => Some(
                l.resources
                    .into_iter()
                    .filter(|r| !r.name.contains('/'))
                    .map(|r| r.kind)
                    .collect(),
            ),
            Err(kube::Error::Api(s)) if s.code == 404 => Some(Vec::new()),
            Err(e) => {
                tracing::debug!(api_version, error = %e, "karta status: discovery failed");
                None
            }
        }
    }

    /// The facts of one object; `None` when discovery failed (nothing is written).
    async fn facts(&self, name: &str, json: &Json, cache: &Served) -> Option<Facts> {
        let generation = json
            .pointer("/metadata/generation")
            .and_then(Json::as_i64)
            .unwrap_or(0);
        let root = crate::karta::root_kind(json);
        let served = match &root {
            // Discovery is asked only for a well-formed group and version: the path is
            // built from them.
            Some(r)
                if !is_discovery_name(&r.group)
                    || !is_discovery_name(&r.version)
                    || r.version.is_empty() =>
            {
                Some(false)
            }
            Some(r) => Some(
                cache
                    .get(&r.api_version())
                    .cloned()
                    .flatten()?
                    .contains(&r.kind),
            ),
            None => None,
        };
        let (object, owned) = (json.clone(), name.to_owned());
        let verdict = tokio::task::spawn_blocking(move || crate::karta::validate(&object, &owned))
            .await
            .ok()?;
        let (validation, drift) = match verdict {
            Ok(def) => (Ok(()), self.report.drift_checked(&def.name)),
            Err(errors) => (Err(conditions::ValidationFailed { errors }), None),
        };
        Some(Facts {
            generation,
            validation,
            served,
            root,
            drift,
        })
    }

    async fn reconcile(
        &self,
        name: &str,
        object: DynamicObject,
        cache: &Served,
    ) -> Result<(), kube::Error> {
        let mut json = serde_json::to_value(&object).unwrap_or(Json::Null);
        let missing = crate::karta::missing_labels(&json);
        if !missing.is_empty() {
            let patch = json!({"metadata": {"labels": missing}});
            let patched = self
                .api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            json = serde_json::to_value(&patched).unwrap_or(json);
            self.wrote(name, object.metadata.resource_version.as_deref(), patched);
            tracing::info!(karta = %name, "karta status: index labels stamped");
        }
        for attempt in 0..=CONFLICT_RETRIES {
            let Some(facts) = self.facts(name, &json, cache).await else {
                return Ok(());
            };
            let current: Vec<Condition> = json
                .pointer("/status/conditions")
                .and_then(Json::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| serde_json::from_value(c.clone()).ok())
                        .collect()
                })
                .unwrap_or_default();
            let Some(next) =
                conditions::merge(&current, conditions::desired(&facts), &conditions::now())
            else {
                return Ok(());
            };
            let rv = json
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Json::Null);
            let patch =
                json!({"metadata": {"resourceVersion": rv}, "status": {"conditions": next}});
            match self
                .api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(done) => {
                    tracing::info!(karta = %name, "karta status: conditions written");
                    self.wrote(name, rv.as_str(), done);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => {
                    tracing::debug!(karta = %name, "karta status: conflict; reading again");
                    let fresh = self.api.get(name).await?;
                    json = serde_json::to_value(&fresh).unwrap_or(Json::Null);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
