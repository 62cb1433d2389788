//! The Karta reconciler: writes each Karta object's status conditions
//! ([`super::conditions`]) through the status subresource, and re-asserts its index labels,
//! from the one replica holding the Lease ([`super::lease`]); the others follow and take
//! over when it stops renewing.
//!
//! It watches Karta objects (its own watch: it needs their `metadata.generation`, labels
//! and current status), and reconciles every object after a change, when it becomes the
//! leader, when the definitions are republished (schema drift moves) and every resync
//! period (a CRD installed later). A write happens only when a condition's status, reason,
//! message or observed generation changes; a status write carries the `resourceVersion` it
//! was computed from, and a conflict (409) is retried on a fresh read.

use super::conditions::{self, Condition, Facts};
use super::lease;
use crate::definition::LoadReport;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Conflicts retried per status write.
pub const CONFLICT_RETRIES: usize = 5;

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
    let mut definitions = definitions;
    let mut shutdown = shutdown;
    let mut resync = tokio::time::interval(settings.resync.max(Duration::from_secs(1)));
    let reconciler = Reconciler {
        client,
        api,
        report,
    };
    loop {
        let mut dirty = false;
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(e)) => {
                    dirty = apply(e, &mut objects, &mut listing);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "karta status: watch error (retrying)"),
                None => break,
            },
            changed = leading.changed() => {
                if changed.is_err() { break; }
                dirty = *leading.borrow();
            }
            changed = async {
                match definitions.as_mut() {
                    Some(d) => d.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if changed.is_err() { definitions = None; }
                dirty = true;
            }
            _ = resync.tick() => dirty = true,
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
            }
        }
        if dirty && *leading.borrow() && listing.is_none() {
            reconciler.pass(&objects).await;
        }
    }
    if let Some(e) = election {
        // The election releases the Lease on shutdown; give it the time to.
        let _ = tokio::time::timeout(Duration::from_secs(2), e).await;
    }
}

/// Folds one watch event into `objects`; true when the set of objects is complete and
/// changed.
fn apply(
    event: watcher::Event<DynamicObject>,
    objects: &mut BTreeMap<String, DynamicObject>,
    listing: &mut Option<BTreeMap<String, DynamicObject>>,
) -> bool {
    let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
    match event {
        watcher::Event::Init => {
            *listing = Some(BTreeMap::new());
            false
        }
        watcher::Event::InitApply(o) => {
            if let Some(l) = listing.as_mut() {
                l.insert(name(&o), o);
            }
            false
        }
        watcher::Event::InitDone => {
            if let Some(l) = listing.take() {
                *objects = l;
            }
            true
        }
        watcher::Event::Apply(o) => {
            objects.insert(name(&o), o);
            true
        }
        watcher::Event::Delete(o) => {
            objects.remove(&name(&o));
            false
        }
    }
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
}

/// Per `apiVersion`, the kinds the cluster serves (`None`: discovery failed).
type Served = HashMap<String, Option<Vec<String>>>;

impl Reconciler {
    /// Reconciles every object.
    async fn pass(&self, objects: &BTreeMap<String, DynamicObject>) {
        let mut served: Served = HashMap::new();
        for (name, object) in objects {
            if object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(e) = self.reconcile(name, object, &mut served).await {
                tracing::warn!(karta = %name, error = %e, "karta status: not written (retried at the next change or resync)");
            }
        }
    }

    async fn served(&self, api_version: &str, cache: &mut Served) -> Option<Vec<String>> {
        if let Some(known) = cache.get(api_version) {
            return known.clone();
        }
        let list = if api_version.contains('/') {
            self.client.list_api_group_resources(api_version).await
        } else {
            self.client.list_core_api_resources(api_version).await
        };
        let kinds = match list {
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
        };
        cache.insert(api_version.to_owned(), kinds.clone());
        kinds
    }

    /// The facts of one object; `None` when discovery failed (nothing is written).
    async fn facts(&self, name: &str, json: &Json, cache: &mut Served) -> Option<Facts> {
        let generation = json
            .pointer("/metadata/generation")
            .and_then(Json::as_i64)
            .unwrap_or(0);
        let root = super::root_kind(json);
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
                self.served(&r.api_version(), cache)
                    .await?
                    .contains(&r.kind),
            ),
            None => None,
        };
        let (object, owned) = (json.clone(), name.to_owned());
        let verdict = tokio::task::spawn_blocking(move || super::validate(&object, &owned))
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
        object: &DynamicObject,
        cache: &mut Served,
    ) -> Result<(), kube::Error> {
        let mut json = serde_json::to_value(object).unwrap_or(Json::Null);
        let missing = super::missing_labels(&json);
        if !missing.is_empty() {
            let patch = json!({"metadata": {"labels": missing}});
            let patched = self
                .api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            json = serde_json::to_value(&patched).unwrap_or(json);
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
                Ok(_) => {
                    tracing::info!(karta = %name, "karta status: conditions written");
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
