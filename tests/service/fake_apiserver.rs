//! A scripted fake Kubernetes API server speaking the real list/watch protocol: discovery
//! (`GET /api/v1`, `GET /apis/{group}/{version}` → APIResourceList, 404 when not served),
//! cluster-wide lists (JSON List with `metadata.resourceVersion`, in pages of `limit` items
//! with `metadata.continue` tokens, as kube-rs asks for 500 at a time) and chunked watches
//! (newline-delimited ADDED/MODIFIED/DELETED/BOOKMARK/ERROR events, replayed from the
//! requested resourceVersion), metadata-only list/watch for
//! `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (items and event
//! objects become `meta.k8s.io/v1` `PartialObjectMetadata`, as the real server answers), and
//! scripted list failures (403, 429 with `Retry-After`, 500) with every request's time
//! recorded. Writes as kube-rs sends them (issue 30): single-object GET, POST (create,
//! 409 AlreadyExists), PUT (replace with the resourceVersion precondition, 409 Conflict),
//! PATCH as JSON merge patch on an object or its `/status` (a `metadata.resourceVersion`
//! in the patch is a precondition) or as an RFC 6902 JSON patch (`application/json-patch+json`,
//! applied with the `json-patch` crate; a failed `test` operation is 422 Invalid, as the
//! API server answers), namespaced paths, scripted conflicts, objects changed behind a
//! reader's back, every write recorded. One route function, served in-process through
//! `tower::service_fn` and over loopback HTTP through hyper 1.

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, Uri};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

type Body = BoxBody<Bytes, Infallible>;

/// One registered resource type.
struct Resource {
    group_version: String,
    kind: String,
    plural: String,
    served: bool,
    /// By `namespace/name` (`name` when cluster-scoped): lists come in this order, as etcd
    /// and the watch cache list by key.
    objects: BTreeMap<String, Stored>,
    /// uid → key in `objects`.
    keys: HashMap<String, String>,
    /// Watches from a resourceVersion below this get `410 Gone`.
    expired_below: u64,
}

/// An object and its JSON text, written once when it is stored (as the API server's watch
/// cache keeps objects encoded): a list copies text instead of encoding every object again,
/// so a benchmark's lists cost the fake little of the CPU it shares with the client.
struct Stored {
    value: Value,
    text: Bytes,
}

impl Stored {
    fn new(value: Value) -> Stored {
        let text = Bytes::from(value.to_string());
        Stored { value, text }
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    /// Collection path (`/api/v1/pods`) → resource.
    resources: BTreeMap<String, Resource>,
    /// (rv, path, type, object) of every event, for watch replay.
    log: Vec<(u64, String, &'static str, Value)>,
    /// Open watch streams: path, metadata-only, sender.
    /// (path, metadata only, `metadata.namespace` field selector, sender).
    watchers: Vec<(String, bool, Option<String>, mpsc::UnboundedSender<Bytes>)>,
    /// Requests seen.
    requests: Vec<Seen>,
    /// Scripted failures of the next list requests per path: (status code, Retry-After
    /// seconds, how many).
    failures: HashMap<String, (u16, u32, usize)>,
    /// Writes seen (POST, PUT, PATCH).
    writes: Vec<Write>,
    /// Scripted conflicts (409) of the next writes per object path.
    conflicts: HashMap<String, usize>,
    /// Objects (by path) changed by someone else right after the next GET answers, as
    /// many times as counted: the reader's copy is stale at once.
    changed_after_get: HashMap<String, usize>,
}

/// One write request the fake saw.
#[allow(dead_code)] // not every test binary reads every field
#[derive(Debug, Clone)]
pub struct Write {
    pub method: String,
    /// The object's path (`/apis/run.ai/v1alpha1/kartas/x/status`).
    pub path: String,
    /// `Content-Type`.
    pub content_type: String,
    /// The request body.
    pub body: Value,
    pub at: Instant,
    /// The status code answered.
    pub code: u16,
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Where a request points: the collection path as registered, the namespace, the object's
/// name and the subresource.
type ObjectRoute = (String, Option<String>, Option<String>, Option<String>);

/// The [`ObjectRoute`] of a path (`None`: discovery or not an API path).
fn object_route(path: &str) -> Option<ObjectRoute> {
    let (prefix, rest) = if let Some(rest) = path.strip_prefix("/api/") {
        let (v, rest) = rest.split_once('/')?;
        (format!("/api/{v}"), rest)
    } else {
        let rest = path.strip_prefix("/apis/")?;
        let mut it = rest.splitn(3, '/');
        let (g, v, rest) = (it.next()?, it.next()?, it.next()?);
        (format!("/apis/{g}/{v}"), rest)
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (ns, parts) = match parts.as_slice() {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => {
            (Some((*ns).to_owned()), tail.to_vec())
        }
        _ => (None, parts),
    };
    let plural = parts.first()?;
    let name = parts.get(1).map(|s| (*s).to_owned());
    let sub = parts.get(2).map(|s| (*s).to_owned());
    Some((format!("{prefix}/{plural}"), ns, name, sub))
}

/// One list or watch request the fake saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub watch: bool,
    /// Asked for metadata only (`as=PartialObjectMetadata`).
    pub metadata: bool,
    pub at: Instant,
    /// The status code answered.
    pub code: u16,
}

/// The metadata-only rendition of an object, as the real API server sends it.
fn partial(obj: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// A list continuation token: the last key of the page, hex-encoded (safe in a URL).
fn continue_token(key: &str) -> String {
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The key a [`continue_token`] names (None for a malformed token).
fn continue_key(token: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The fake server; clones share state.
#[derive(Clone, Default)]
pub struct FakeApiServer {
    state: Arc<Mutex<State>>,
}

fn collection_path(group_version: &str, plural: &str) -> String {
    if group_version.contains('/') {
        format!("/apis/{group_version}/{plural}")
    } else {
        format!("/api/{group_version}/{plural}")
    }
}

fn line(kind: &str, object: &Value, metadata: bool) -> Bytes {
    let object = if metadata && kind != "ERROR" {
        partial(object)
    } else {
        object.clone()
    };
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    respond_bytes(code, Bytes::from(body.to_string()))
}

fn respond_bytes(code: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn not_found() -> Response<Body> {
    respond(
        StatusCode::NOT_FOUND,
        &status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    )
}

/// A scripted failure: the API server's Status (with `details.retryAfterSeconds` and the
/// `Retry-After` header for a non-zero `retry_after`, as the real server sends for 429).
fn failure(code: u16, retry_after: u32) -> Response<Body> {
    let reason = match code {
        403 => "Forbidden",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    let mut body = status(code, reason, &format!("scripted {reason}"));
    if retry_after > 0 {
        body["details"] = json!({"retryAfterSeconds": retry_after});
    }
    let mut r = respond(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &body,
    );
    if retry_after > 0 {
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, retry_after.into());
    }
    r
}

impl FakeApiServer {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a (cluster-wide listable) resource type; `served` false hides it (404).
    pub fn register(&self, api_version: &str, kind: &str, plural: &str, served: bool) {
        self.lock().resources.insert(
            collection_path(api_version, plural),
            Resource {
                group_version: api_version.to_owned(),
                kind: kind.to_owned(),
                plural: plural.to_owned(),
                served,
                objects: BTreeMap::new(),
                keys: HashMap::new(),
                expired_below: 0,
            },
        );
    }

    /// Serves every document, registering the kinds not registered yet (plural: the
    /// lowercase kind + "s") as served.
    pub fn serve_documents(&self, docs: impl IntoIterator<Item = Value>) {
        for doc in docs {
            let field = |k: &str| doc[k].as_str().unwrap_or_default().to_owned();
            let (api_version, kind) = (field("apiVersion"), field("kind"));
            if Self::path_of(&self.lock(), &doc).is_none() {
                self.register(
                    &api_version,
                    &kind,
                    &format!("{}s", kind.to_lowercase()),
                    true,
                );
            }
            self.upsert(doc);
        }
    }

    /// Serves (or hides) every resource of `api_version`.
    pub fn set_served(&self, api_version: &str, served: bool) {
        for r in self.lock().resources.values_mut() {
            if r.group_version == api_version {
                r.served = served;
            }
        }
    }

    fn path_of(st: &State, obj: &Value) -> Option<String> {
        let av = obj.get("apiVersion")?.as_str()?;
        let kind = obj.get("kind")?.as_str()?;
        st.resources
            .iter()
            .find(|(_, r)| r.group_version == av && r.kind == kind)
            .map(|(p, _)| p.clone())
    }

    fn uid(obj: &Value) -> String {
        obj.pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    /// Creates or replaces an object (ADDED or MODIFIED to open watches).
    pub fn upsert(&self, mut obj: Value) {
        let mut st = self.lock();
        let path = Self::path_of(&st, &obj).expect("object of a registered kind");
        st.rv += 1;
        let rv = st.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let uid = Self::uid(&obj);
        let text = |k: &str| obj["metadata"][k].as_str().unwrap_or_default().to_owned();
        let key = match (text("namespace"), text("name")) {
            (ns, name) if ns.is_empty() => name,
            (ns, name) => format!("{ns}/{name}"),
        };
        let res = st.resources.get_mut(&path).expect("registered");
        if let Some(old) = res.keys.insert(uid, key.clone())
            && old != key
        {
            res.objects.remove(&old);
        }
        let kind = if res.objects.insert(key, Stored::new(obj.clone())).is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        Self::emit(&mut st, &path, rv, kind, obj);
    }

    /// Deletes an object by uid; `silently` skips the DELETED event (as if the watch missed it).
    pub fn delete(&self, uid: &str, silently: bool) {
        let mut st = self.lock();
        st.rv += 1;
        let rv = st.rv;
        let found = st.resources.iter_mut().find_map(|(p, r)| {
            let key = r.keys.remove(uid)?;
            r.objects.remove(&key).map(|o| (p.clone(), o.value))
        });
        let Some((path, mut obj)) = found else {
            return;
        };
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if !silently {
            Self::emit(&mut st, &path, rv, "DELETED", obj);
        }
    }

    fn emit(st: &mut State, path: &str, rv: u64, kind: &'static str, obj: Value) {
        let (full, meta) = (line(kind, &obj, false), line(kind, &obj, true));
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        st.log.push((rv, path.to_owned(), kind, obj));
        st.watchers.retain(|(p, m, only, tx)| {
            p != path
                || only.as_ref().is_some_and(|o| *o != ns)
                || tx
                    .send(if *m { meta.clone() } else { full.clone() })
                    .is_ok()
        });
    }

    /// The next `count` list requests of `path` fail with `code` (with a `Retry-After` of
    /// `retry_after` seconds when non-zero); `usize::MAX` fails them until [`Self::heal`].
    pub fn fail_lists(&self, path: &str, code: u16, retry_after: u32, count: usize) {
        self.lock()
            .failures
            .insert(path.to_owned(), (code, retry_after, count));
    }

    /// Stops scripted failures of `path`.
    pub fn heal(&self, path: &str) {
        self.lock().failures.remove(path);
    }

    /// Every list or watch request seen for `path`, in order.
    pub fn seen(&self, path: &str) -> Vec<Seen> {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// A copy of the object with this uid, whatever its kind.
    #[allow(dead_code)] // used by benches/e2e.rs
    pub fn object(&self, uid: &str) -> Option<Value> {
        self.lock()
            .resources
            .values()
            .find_map(|r| r.objects.get(r.keys.get(uid)?).map(|o| o.value.clone()))
    }

    /// Forgets all but the last `keep` events, as the API server's compaction does: a watch
    /// from a resourceVersion older than what is kept gets `410 Gone`; open watches go on.
    #[allow(dead_code)] // used by benches/e2e.rs
    pub fn compact(&self, keep: usize) {
        let mut st = self.lock();
        let forget = st.log.len().saturating_sub(keep);
        let Some(last) = forget.checked_sub(1).map(|i| st.log[i].0) else {
            return;
        };
        st.log.drain(..forget);
        for r in st.resources.values_mut() {
            r.expired_below = r.expired_below.max(last);
        }
    }

    /// Sends a BOOKMARK at the current resourceVersion to every open watch.
    pub fn bookmark(&self) {
        let mut st = self.lock();
        let rv = st.rv.to_string();
        let kinds: HashMap<String, (String, String)> = st
            .resources
            .iter()
            .map(|(p, r)| (p.clone(), (r.group_version.clone(), r.kind.clone())))
            .collect();
        st.watchers.retain(|(p, m, _, tx)| {
            let (av, kind) = kinds.get(p).cloned().unwrap_or_default();
            let obj = json!({"apiVersion": av, "kind": kind, "metadata": {"resourceVersion": rv}});
            tx.send(line("BOOKMARK", &obj, *m)).is_ok()
        });
    }

    /// Compacts history: open watches of `path` get a `410 Gone` ERROR event and end, and
    /// any watch from an older resourceVersion is refused the same way.
    pub fn expire(&self, path: &str) {
        let mut st = self.lock();
        let rv = st.rv;
        if let Some(r) = st.resources.get_mut(path) {
            r.expired_below = rv;
        }
        let gone = line(
            "ERROR",
            &status(410, "Expired", "too old resource version"),
            false,
        );
        st.watchers.retain(|(p, _, _, tx)| {
            if p == path {
                let _ = tx.send(gone.clone());
                false
            } else {
                true
            }
        });
    }

    /// Ends every open watch stream of `path` (a dropped connection).
    pub fn drop_watches(&self, path: &str) {
        self.lock().watchers.retain(|(p, _, _, _)| p != path);
    }

    /// Number of list / watch requests seen for `path`.
    pub fn requests(&self, path: &str, watch: bool) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.path == path && r.watch == watch)
            .count()
    }

    /// Number of currently open watch streams on `path`.
    pub fn open_watches(&self, path: &str) -> usize {
        self.lock()
            .watchers
            .iter()
            .filter(|(p, _, _, tx)| p == path && !tx.is_closed())
            .count()
    }

    /// The route function shared by both transports.
    pub fn route(
        &self,
        method: &hyper::Method,
        uri: &Uri,
        headers: &hyper::HeaderMap,
    ) -> Response<Body> {
        let metadata = headers
            .get_all(hyper::header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("as=PartialObjectMetadata"));
        if method != hyper::Method::GET {
            return respond(
                StatusCode::METHOD_NOT_ALLOWED,
                &status(405, "MethodNotAllowed", "read-only fake"),
            );
        }
        let path = uri.path().trim_end_matches('/').to_owned();
        let query: HashMap<String, String> = uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // `fieldSelector=metadata.namespace=NS` (the only field selector kartograf sends).
        let only: Option<String> = query.get("fieldSelector").and_then(|f| {
            let f = f.replace("%3D", "=").replace("%3d", "=");
            f.strip_prefix("metadata.namespace=")
                .map(|ns| ns.trim_start_matches('=').to_owned())
        });
        let in_scope = |obj: &Value| {
            only.as_ref()
                .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns.as_str()))
        };
        let mut st = self.lock();
        // Discovery.
        let gv = path
            .strip_prefix("/apis/")
            .or_else(|| path.strip_prefix("/api/"))
            .filter(|rest| rest.matches('/').count() == usize::from(path.starts_with("/apis/")));
        if let Some(gv) = gv {
            let resources: Vec<Value> = st
                .resources
                .values()
                .filter(|r| r.served && r.group_version == gv)
                .map(|r| {
                    json!({"name": r.plural, "singularName": r.kind.to_lowercase(),
                           "namespaced": !matches!(r.kind.as_str(), "Node" | "Karta"), "kind": r.kind,
                           "verbs": ["get", "list", "watch"]})
                })
                .collect();
            if resources.is_empty() {
                return not_found();
            }
            return respond(
                StatusCode::OK,
                &json!({"kind": "APIResourceList", "apiVersion": "v1",
                        "groupVersion": gv, "resources": resources}),
            );
        }
        let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
        let mut seen = Seen {
            path: path.clone(),
            watch,
            metadata,
            at: Instant::now(),
            code: 200,
        };
        if !watch
            && let Some((code, retry_after, count)) = st.failures.get_mut(&path)
            && *count > 0
        {
            *count = count.saturating_sub(usize::from(*count != usize::MAX));
            let (code, retry_after) = (*code, *retry_after);
            seen.code = code;
            st.requests.push(seen);
            return failure(code, retry_after);
        }
        st.requests.push(seen);
        let rv = st.rv;
        let Some(res) = st.resources.get(&path).filter(|r| r.served) else {
            return not_found();
        };
        if !watch {
            // Pages of `limit` items (as the real server answers, and kube-rs asks for 500),
            // `metadata.continue` naming where the next page starts.
            let limit: Option<usize> = query
                .get("limit")
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0);
            let after = query.get("continue").and_then(|t| continue_key(t));
            let from = match &after {
                Some(k) => std::ops::Bound::Excluded(k.clone()),
                None => std::ops::Bound::Unbounded,
            };
            let mut page: Vec<(&String, &Stored)> = Vec::new();
            let mut more = false;
            for (k, o) in res
                .objects
                .range::<String, _>((from, std::ops::Bound::Unbounded))
                .filter(|(_, o)| in_scope(&o.value))
            {
                if limit.is_some_and(|l| page.len() == l) {
                    more = true;
                    break;
                }
                page.push((k, o));
            }
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if more && let Some((k, _)) = page.last() {
                meta["continue"] = json!(continue_token(k));
            }
            let list = if metadata {
                let items: Vec<Value> = page.iter().map(|(_, o)| partial(&o.value)).collect();
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": meta, "items": items})
            } else {
                // Copied item by item from the stored texts.
                let mut text = json!({"apiVersion": res.group_version,
                                      "kind": format!("{}List", res.kind),
                                      "metadata": meta})
                .to_string()
                .into_bytes();
                text.pop(); // the closing brace
                text.extend_from_slice(b",\"items\":[");
                for (i, (_, o)) in page.iter().enumerate() {
                    if i > 0 {
                        text.push(b',');
                    }
                    text.extend_from_slice(&o.text);
                }
                text.extend_from_slice(b"]}");
                return respond_bytes(StatusCode::OK, Bytes::from(text));
            };
            return respond(StatusCode::OK, &list);
        }
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(rv);
        let (tx, rx) = mpsc::unbounded_channel();
        if from < res.expired_below {
            let _ = tx.send(line(
                "ERROR",
                &status(410, "Expired", "too old resource version"),
                false,
            ));
            drop(tx);
        } else {
            for (at, p, kind, obj) in &st.log {
                if *at > from && *p == path && in_scope(obj) {
                    let _ = tx.send(line(kind, obj, metadata));
                }
            }
            st.watchers.push((path, metadata, only, tx));
        }
        let body = StreamBody::new(
            UnboundedReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))),
        );
        let mut r = Response::new(BodyExt::boxed(body));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    }

    /// Every write seen whose path starts with `prefix`, in order.
    #[allow(dead_code)]
    pub fn writes(&self, prefix: &str) -> Vec<Write> {
        self.lock()
            .writes
            .iter()
            .filter(|w| w.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The next `count` writes of the object at `path` get 409 Conflict.
    #[allow(dead_code)]
    pub fn conflict_next(&self, path: &str, count: usize) {
        self.lock().conflicts.insert(path.to_owned(), count);
    }

    /// The next `count` GETs of the object at `path` are answered with the object as it
    /// was, and the object is changed right after (an annotation; its resourceVersion
    /// moves): a reader's copy is stale at once.
    #[allow(dead_code)]
    pub fn change_after_get(&self, path: &str, count: usize) {
        self.lock().changed_after_get.insert(path.to_owned(), count);
    }

    /// A stored object by collection path and key (`ns/name` or `name`).
    #[allow(dead_code)]
    pub fn get(&self, collection: &str, key: &str) -> Option<Value> {
        self.lock()
            .resources
            .get(collection)?
            .objects
            .get(key)
            .map(|o| o.value.clone())
    }

    /// Replaces a stored object as a client's write would (a MODIFIED event; the
    /// resourceVersion moves), keeping its uid.
    #[allow(dead_code)]
    pub fn edit(&self, collection: &str, key: &str, change: impl FnOnce(&mut Value)) {
        let Some(mut obj) = self.get(collection, key) else {
            return;
        };
        change(&mut obj);
        self.upsert(obj);
    }

    /// The route function with the request body: single-object GET, POST (create), PUT
    /// (replace, with the resourceVersion precondition), PATCH (JSON merge patch; on
    /// `/status` only the status changes, on the object everything but the status, and a
    /// `metadata.resourceVersion` in the patch is a precondition), as the API server
    /// answers them (409 Conflict, 409 AlreadyExists, 404 NotFound); anything else goes to
    /// [`Self::route`].
    pub fn route_body(
        &self,
        method: &hyper::Method,
        uri: &Uri,
        headers: &hyper::HeaderMap,
        body: &[u8],
    ) -> Response<Body> {
        let path = uri.path().trim_end_matches('/').to_owned();
        let Some((collection, ns, name, sub)) = object_route(&path) else {
            return self.route(method, uri, headers);
        };
        let is_get = method == hyper::Method::GET;
        if is_get && (name.is_none() || uri.query().is_some_and(|q| q.contains("watch"))) {
            return self.route(method, uri, headers);
        }
        if !matches!(
            *method,
            hyper::Method::GET | hyper::Method::POST | hyper::Method::PUT | hyper::Method::PATCH
        ) {
            return self.route(method, uri, headers);
        }
        let key_of = |n: &str| match &ns {
            Some(ns) => format!("{ns}/{n}"),
            None => n.to_owned(),
        };
        let mut st = self.lock();
        if !st.resources.get(&collection).is_some_and(|r| r.served) {
            return not_found();
        }
        if is_get {
            let key = key_of(name.as_deref().unwrap_or_default());
            let found = st
                .resources
                .get(&collection)
                .and_then(|r| r.objects.get(&key))
                .map(|o| o.value.clone());
            let change = st
                .changed_after_get
                .get_mut(&path)
                .filter(|n| **n > 0)
                .map(|n| *n -= 1)
                .is_some();
            drop(st);
            return match found {
                Some(o) => {
                    if change {
                        let mut newer = o.clone();
                        newer["metadata"]["annotations"]["changed-by"] = json!("someone-else");
                        self.upsert(newer);
                    }
                    respond(StatusCode::OK, &o)
                }
                None => respond(StatusCode::NOT_FOUND, &status(404, "NotFound", "not found")),
            };
        }
        let content_type = headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let write = Write {
            method: method.to_string(),
            path: path.clone(),
            content_type,
            body: parsed.clone(),
            at: Instant::now(),
            code: 200,
        };
        let answer = |st: &mut State, mut write: Write, code: u16, value: Value| {
            write.code = code;
            st.writes.push(write);
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            respond(code, &value)
        };
        if let Some(n) = st.conflicts.get_mut(&path).filter(|n| **n > 0) {
            *n -= 1;
            let conflict = status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            );
            return answer(&mut st, write, 409, conflict);
        }
        let (api_version, kind) = {
            let r = &st.resources[&collection];
            (r.group_version.clone(), r.kind.clone())
        };
        let stored_rv = |st: &State, key: &str| {
            st.resources[&collection]
                .objects
                .get(key)
                .map(|o| o.value["metadata"]["resourceVersion"].clone())
        };
        let (key, next, created) = match *method {
            hyper::Method::POST => {
                let n = parsed["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let key = key_of(&n);
                if n.is_empty() || stored_rv(&st, &key).is_some() {
                    let exists = status(
                        409,
                        "AlreadyExists",
                        &format!("{kind} \"{n}\" already exists"),
                    );
                    return answer(&mut st, write, 409, exists);
                }
                let mut obj = parsed.clone();
                obj["apiVersion"] = json!(api_version);
                obj["kind"] = json!(kind);
                if let Some(ns) = &ns {
                    obj["metadata"]["namespace"] = json!(ns);
                }
                obj["metadata"]["uid"] = json!(format!("uid-{key}"));
                obj["metadata"]["generation"] = json!(1);
                (key, obj, true)
            }
            _ => {
                let key = key_of(name.as_deref().unwrap_or_default());
                let Some(current) = st.resources[&collection]
                    .objects
                    .get(&key)
                    .map(|o| o.value.clone())
                else {
                    return answer(&mut st, write, 404, status(404, "NotFound", "not found"));
                };
                let precondition = if *method == hyper::Method::PUT {
                    parsed["metadata"]["resourceVersion"].clone()
                } else {
                    parsed
                        .pointer("/metadata/resourceVersion")
                        .cloned()
                        .unwrap_or(Value::Null)
                };
                if !precondition.is_null() && precondition != current["metadata"]["resourceVersion"]
                {
                    let conflict = status(
                        409,
                        "Conflict",
                        "the object has been modified; please apply your changes to the latest version and try again",
                    );
                    return answer(&mut st, write, 409, conflict);
                }
                let mut next = current.clone();
                if write
                    .content_type
                    .starts_with("application/json-patch+json")
                {
                    let ops: json_patch::Patch = match serde_json::from_value(parsed.clone()) {
                        Ok(ops) => ops,
                        Err(e) => {
                            let bad = status(400, "BadRequest", &format!("bad JSON patch: {e}"));
                            return answer(&mut st, write, 400, bad);
                        }
                    };
                    if let Err(e) = json_patch::patch(&mut next, &ops) {
                        let invalid = status(
                            422,
                            "Invalid",
                            &format!(
                                "the server rejected our request due to an error in our request: {e}"
                            ),
                        );
                        return answer(&mut st, write, 422, invalid);
                    }
                    if let Some(s) = current.get("status") {
                        next["status"] = s.clone();
                    }
                    next["metadata"]["resourceVersion"] =
                        current["metadata"]["resourceVersion"].clone();
                } else if *method == hyper::Method::PUT {
                    next = parsed.clone();
                    next["metadata"]["uid"] = current["metadata"]["uid"].clone();
                    if sub.as_deref() == Some("status") {
                        next["spec"] = current["spec"].clone();
                    } else if current.get("status").is_some() {
                        next["status"] = current["status"].clone();
                    }
                } else if sub.as_deref() == Some("status") {
                    if let Some(st_patch) = parsed.get("status") {
                        merge_patch(&mut next["status"], st_patch);
                    }
                } else {
                    let mut p = parsed.clone();
                    if let Some(o) = p.as_object_mut() {
                        o.remove("status");
                    }
                    if let Some(m) = p.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                    }
                    merge_patch(&mut next, &p);
                }
                if next.get("spec") != current.get("spec") {
                    let g = current["metadata"]["generation"].as_i64().unwrap_or(0);
                    next["metadata"]["generation"] = json!(g + 1);
                }
                (key, next, false)
            }
        };
        drop(st);
        self.upsert(next);
        let mut st = self.lock();
        let stored = st.resources[&collection].objects[&key].value.clone();
        answer(&mut st, write, if created { 201 } else { 200 }, stored)
    }

    /// Answers one request of either transport, its body read whole ([`Self::route_body`]).
    async fn answer<B: hyper::body::Body>(&self, req: hyper::Request<B>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        self.route_body(&parts.method, &parts.uri, &parts.headers, &body)
    }

    /// A kube client talking to this server in-process (no sockets).
    pub fn client(&self) -> ::kube::Client {
        let fake = self.clone();
        let svc = tower::service_fn(move |req: hyper::Request<::kube::client::Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(req).await) }
        });
        ::kube::Client::new(svc, "default")
    }

    /// Serves this fake over loopback HTTP and returns a kube client configured for it.
    pub async fn http_client(&self) -> ::kube::Client {
        let url: hyper::Uri = self.serve_http().await.parse().expect("loopback url");
        ::kube::Client::try_from(::kube::Config::new(url)).expect("kube client over loopback")
    }

    /// Serves this fake over loopback HTTP (until the runtime ends); returns its base URL.
    pub async fn serve_http(&self) -> String {
        format!("http://{}", self.listen().await)
    }

    /// Serves this fake over loopback HTTP (on the current runtime) and returns its address.
    pub async fn listen(&self) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let fake = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let fake = fake.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let fake = fake.clone();
                            async move { Ok::<_, Infallible>(fake.answer(req).await) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        addr
    }
}

/// Writes a kubeconfig for the fake at `url` into `dir` (file `config`) and returns its path.
pub fn write_kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("config");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: \"{url}\"}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n"
        ),
    )
    .expect("write kubeconfig");
    path
}
