//! Reads a pod's owners straight from the API server at admission, when the cache has not
//! seen them yet (an intermediate owner is created moments before its pods): one GET per owner,
//! each kind resolved once with per-group discovery (`pinned_kind`) and remembered. Also a
//! namespace's labels for policies with a `namespaceSelector`, remembered for
//! [`NAMESPACE_TTL`].

use crate::board::OwnerLookup;
use ::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Most (apiVersion, kind) pairs whose discovery answer is remembered: owner references
/// come from pods, so their versions are the pod author's to choose; beyond this, kinds
/// are resolved anew on every read.
const MAX_KINDS: usize = 256;

/// How long a namespace's labels are remembered.
pub const NAMESPACE_TTL: Duration = Duration::from_secs(30);

/// Most namespaces whose labels are remembered.
const MAX_NAMESPACES: u64 = 10_000;

/// Longest one request (discovery or GET) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(400);

/// [`OwnerLookup`] over a Kubernetes client.
pub struct ClusterLookup {
    client: ::kube::Client,
    /// (apiVersion, kind) → the resource, `None` when the cluster does not serve it.
    kinds: Mutex<HashMap<(String, String), Option<ApiResource>>>,
    /// Namespace name → its labels (`None`: no such namespace).
    namespaces: moka::sync::Cache<String, Option<BTreeMap<String, String>>>,
}

impl ClusterLookup {
    /// Reads through `client`.
    pub fn new(client: ::kube::Client) -> ClusterLookup {
        ClusterLookup {
            client,
            kinds: Mutex::new(HashMap::new()),
            namespaces: moka::sync::Cache::builder()
                .max_capacity(MAX_NAMESPACES)
                .time_to_live(NAMESPACE_TTL)
                .build(),
        }
    }

    async fn resource(&self, api_version: &str, kind: &str) -> Result<Option<ApiResource>, String> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(known) = self.kinds.lock().get(&key) {
            return Ok(known.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = tokio::time::timeout(
            REQUEST_TIMEOUT,
            ::kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await
        .map_err(|_| format!("discovery of {api_version} {kind} took over {REQUEST_TIMEOUT:?}"))?;
        let resource = match found {
            Ok((resource, caps)) if caps.scope == ::kube::discovery::Scope::Namespaced => {
                Some(resource)
            }
            // A cluster-scoped kind owns no pod (owner references stay in one namespace).
            Ok(_) => None,
            Err(::kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => return Err(format!("discovery of {api_version} {kind}: {e}")),
        };
        let mut kinds = self.kinds.lock();
        if kinds.len() < MAX_KINDS {
            kinds.insert(key, resource.clone());
        }
        Ok(resource)
    }
}

impl OwnerLookup for ClusterLookup {
    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>> {
        async move {
            if let Some(known) = self.namespaces.get(name) {
                return Ok(known);
            }
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
            let got = tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name))
                .await
                .map_err(|_| format!("GET namespace {name} took over {REQUEST_TIMEOUT:?}"))?
                .map_err(|e| format!("GET namespace {name}: {e}"))?;
            let labels = got.map(|ns| ns.metadata.labels.unwrap_or_default());
            self.namespaces.insert(name.to_owned(), labels.clone());
            Ok(labels)
        }
        .boxed()
    }

    fn get<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, String>> {
        async move {
            let Some(resource) = self.resource(api_version, kind).await? else {
                return Ok(None);
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &resource);
            let got = tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name))
                .await
                .map_err(|_| {
                    format!("GET {kind} {namespace}/{name} took over {REQUEST_TIMEOUT:?}")
                })?
                .map_err(|e| format!("GET {kind} {namespace}/{name}: {e}"))?;
            match got {
                Some(object) => serde_json::to_value(object)
                    .map(Some)
                    .map_err(|e| format!("{kind} {namespace}/{name}: {e}")),
                None => Ok(None),
            }
        }
        .boxed()
    }
}
