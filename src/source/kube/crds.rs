//! CustomResourceDefinitions of the cluster, for schema drift: listed once for
//! `kartograf check --cluster`, and watched by the service, which re-checks every definition
//! in effect on start, on every CRD change and on every new catalog, publishes the findings
//! per definition (`ListDefinitions` warnings, `kartograf_definition_drift`) and logs each
//! change once.
//!
//! Only CRDs of kinds the catalog names (root, child and additional kinds) are kept, their
//! schemas stripped of descriptions; a catalog that names new kinds restarts the watch.

use crate::definition::{Catalog, LoadReport};
use crate::drift::{self, Crd, Schemas};
use crate::index::Index;
use ::kube::api::{Api, ApiResource, DynamicObject, ListParams};
use ::kube::runtime::watcher::{self, Event};
use futures::StreamExt;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The source label of CRDs read from the cluster.
pub const CLUSTER: &str = "cluster";

/// `apiextensions.k8s.io/v1` CustomResourceDefinition.
fn crd_resource() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// A listed or watched CRD as JSON (`DynamicObject` holds the body as JSON already).
fn to_json(obj: DynamicObject) -> Json {
    let mut json = match obj.data {
        Json::Object(map) => Json::Object(map),
        _ => Json::Object(serde_json::Map::new()),
    };
    if let Json::Object(map) = &mut json {
        map.insert(
            "metadata".into(),
            serde_json::to_value(&obj.metadata).unwrap_or_default(),
        );
        map.insert(
            "kind".into(),
            Json::String("CustomResourceDefinition".into()),
        );
    }
    json
}

/// Every CRD of the cluster (paged).
pub async fn list(client: &::kube::Client) -> anyhow::Result<Vec<Crd>> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &crd_resource());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(100);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| anyhow::anyhow!("listing customresourcedefinitions: {e}"))?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for item in page.items {
            if let Some(Ok(crd)) = Crd::from_json(&to_json(item), CLUSTER) {
                out.push(crd);
            }
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// `(group, kind)` of every kind the catalog names: what CRDs are kept for.
fn relevant(catalog: &Catalog) -> BTreeSet<(String, String)> {
    catalog
        .definitions()
        .flat_map(|d| std::iter::once(&d.root_kind).chain(d.child_kinds()))
        .filter(|k| !k.group.is_empty())
        .map(|k| (k.group.clone(), k.kind.clone()))
        .collect()
}

/// Findings per definition checked against a schema, one line each.
pub type Drift = BTreeMap<String, Vec<String>>;

/// Checks every definition of `catalog` against `crds`. Definitions whose root kind has no
/// schema are left out; built-in kinds are checked against the embedded core schema.
pub fn check(catalog: &Catalog, crds: Vec<Crd>) -> Drift {
    let schemas = Schemas::new(crds);
    let report = drift::check_all(
        catalog.definitions().map(|d| d.as_ref()),
        &schemas,
        vec![CLUSTER.into()],
    );
    report
        .definitions
        .into_iter()
        .filter(|d| d.schema.is_some() || !d.findings.is_empty())
        .map(|d| {
            let lines = d
                .findings
                .iter()
                .map(|f| format!("{}: {f}", f.severity))
                .collect();
            (d.name, lines)
        })
        .collect()
}

/// Logs what changed between two checks, once per change.
fn log_changes(before: &Drift, after: &Drift) {
    for (name, lines) in after {
        if before.get(name) == Some(lines) {
            continue;
        }
        if lines.is_empty() {
            if before.get(name).is_some_and(|b| !b.is_empty()) {
                tracing::info!(definition = %name, "schema drift cleared");
            }
        } else {
            tracing::warn!(
                definition = %name,
                findings = lines.len(),
                "schema drift: {}",
                lines.join("; ")
            );
        }
    }
}

/// Watches the cluster's CRDs and keeps `report`'s drift current (see the module docs).
/// `catalog_changes` sees every published catalog. Runs until dropped.
pub async fn run(
    client: ::kube::Client,
    index: Arc<Index>,
    report: Arc<LoadReport>,
    mut catalog_changes: tokio::sync::watch::Receiver<u64>,
    backoff: super::Backoff,
) {
    let api = Api::<DynamicObject>::all_with(client, &crd_resource());
    let mut wanted = relevant(&index.catalog());
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    let mut crds: BTreeMap<String, Crd> = BTreeMap::new();
    let mut listing: BTreeMap<String, Crd> = BTreeMap::new();
    let mut listed = false;
    let mut last = Drift::new();
    let mut errors = 0u32;
    let mut delays = backoff.delays();
    loop {
        let mut changed = false;
        tokio::select! {
            item = stream.next() => {
                let Some(item) = item else {
                    tracing::warn!("kubernetes: CRD watch ended; restarting");
                    stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
                    continue;
                };
                match item {
                    Err(e) => {
                        let delay = delays.next_delay();
                        if errors == 0 {
                            tracing::warn!(retry_in = ?delay, "kubernetes: cannot watch CRDs, schema drift is not checked (needs list/watch on customresourcedefinitions): {e}");
                        }
                        errors = errors.saturating_add(1);
                        tokio::time::sleep(delay).await;
                    }
                    Ok(event) => {
                        // The watcher restarts with `Init` after every error: only what
                        // follows it is progress (else the delay never grows).
                        if !matches!(event, Event::Init) && errors > 0 {
                            errors = 0;
                            delays = backoff.delays();
                        }
                        match event {
                            Event::Init => listing.clear(),
                            Event::InitApply(obj) => {
                                if let Some(crd) = keep(obj, &wanted) {
                                    listing.insert(crd.name.clone(), crd);
                                }
                            }
                            Event::InitDone => {
                                crds = std::mem::take(&mut listing);
                                listed = true;
                                changed = true;
                            }
                            Event::Apply(obj) => {
                                // Only a change of a kept CRD's schema or versions counts
                                // (status updates and unrelated CRDs do not).
                                let name = obj.metadata.name.clone().unwrap_or_default();
                                let differs = match keep(obj, &wanted) {
                                    Some(crd) => {
                                        let same = crds.get(&name) == Some(&crd);
                                        crds.insert(name, crd);
                                        !same
                                    }
                                    None => crds.remove(&name).is_some(),
                                };
                                changed = listed && differs;
                            }
                            Event::Delete(obj) => {
                                let name = obj.metadata.name.clone().unwrap_or_default();
                                changed = listed && crds.remove(&name).is_some();
                            }
                        }
                    }
                }
            }
            update = catalog_changes.changed() => {
                if update.is_err() {
                    return;
                }
                let now = relevant(&index.catalog());
                if !now.is_subset(&wanted) {
                    // New kinds: list again to pick up their CRDs.
                    wanted = now;
                    stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
                    listed = false;
                    continue;
                }
                wanted = now;
                changed = listed;
            }
        }
        if !changed {
            continue;
        }
        let catalog = index.catalog();
        let snapshot: Vec<Crd> = crds.values().cloned().collect();
        let drift = tokio::task::spawn_blocking(move || check(&catalog, snapshot))
            .await
            .unwrap_or_default();
        log_changes(&last, &drift);
        report.set_drift(drift.clone());
        last = drift;
    }
}

/// The CRD in `obj` if it is of a wanted kind, its schemas stripped of descriptions.
fn keep(obj: DynamicObject, wanted: &BTreeSet<(String, String)>) -> Option<Crd> {
    let json = to_json(obj);
    let group = json.pointer("/spec/group").and_then(Json::as_str)?;
    let kind = json.pointer("/spec/names/kind").and_then(Json::as_str)?;
    if !wanted.contains(&(group.to_owned(), kind.to_owned())) {
        return None;
    }
    let mut crd = Crd::from_json(&json, CLUSTER)?.ok()?;
    for v in &mut crd.versions {
        drift::crd::strip(&mut v.schema);
    }
    Some(crd)
}
