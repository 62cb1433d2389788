//! One watched kind's informer: the kube-rs watcher stream driven into a [`Sink`] (the
//! index, or the cluster definition layer), with backoff, readiness and informer metrics;
//! and what an API error means (retry-after, forbidden and the RBAC to grant).

use super::convert::{Body, IntoBody, to_body};
use super::document::{Document, ObjectRule, PodRule};
use super::{Ctx, Mode, source_name};
use crate::index::Feed;
use crate::model::Cached;
use crate::model::Skip;
use crate::source::definitions::Publisher;
use ::kube::api::{Api, ApiResource, DynamicObject};
use ::kube::core::{PartialObjectMeta, Status};
use ::kube::runtime::watcher::{self, Event};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use serde_json::Value as Json;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{JoinError, JoinHandle};

/// One kind's watcher task in its mode.
pub(super) async fn watch_kind(ctx: Arc<Ctx>, ar: ApiResource, mode: Mode) {
    let mut config = watcher::Config::default();
    if mode != Mode::Definitions
        && let Some(ns) = &ctx.settings.namespace
    {
        config = config.fields(&format!("metadata.namespace={ns}"));
    }
    match mode {
        Mode::Metadata => {
            let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(ctx.client.clone(), &ar);
            drive(&ctx, &ar, &ctx.feed, watcher::watcher(api, config)).await;
        }
        // Pods and other full objects are parsed into what the index keeps of them.
        Mode::Full if ar.group.is_empty() && ar.kind == "Pod" => {
            let api = Api::<Document<PodRule>>::all_with(ctx.client.clone(), &ar);
            drive(&ctx, &ar, &ctx.feed, watcher::watcher(api, config)).await;
        }
        Mode::Full => {
            let api = Api::<Document<ObjectRule>>::all_with(ctx.client.clone(), &ar);
            drive(&ctx, &ar, &ctx.feed, watcher::watcher(api, config)).await;
        }
        Mode::Gangs => {
            let api = Api::<Document<super::document::GangRule>>::all_with(ctx.client.clone(), &ar);
            drive(&ctx, &ar, &ctx.feed, watcher::watcher(api, config)).await;
        }
        Mode::Definitions => {
            let api = Api::<DynamicObject>::all_with(ctx.client.clone(), &ar);
            let sink = Kartas {
                publisher: ctx.publisher.clone(),
                listed: Mutex::default(),
            };
            drive(&ctx, &ar, &sink, watcher::watcher(api, config)).await;
        }
    }
}

/// Where one watched kind's objects go: the index (through its writer), or the cluster
/// layer of the definitions (Karta objects). As kubert's index traits: a full (re)list
/// (begun, handed over in parts as they are converted, ended) replaces what the kind held,
/// then objects are applied and deleted one by one.
pub(super) trait Sink: Send + Sync {
    /// A listed object as the sink keeps it until the list is complete (converted as it
    /// arrives, so a relist is never held as JSON).
    type Item: Send + 'static;
    /// Converts a listed object (on a blocking thread, beside the list's download).
    fn convert(body: Body) -> Self::Item;
    /// A (re)list of `source` begins.
    fn begin(&self, source: &str) -> impl Future<Output = ()> + Send;
    /// Part of the list, in order.
    fn part(&self, source: &str, items: Vec<Self::Item>) -> impl Future<Output = ()> + Send;
    /// The list is complete: it replaces everything `source` held.
    fn end(&self, source: &str) -> impl Future<Output = ()> + Send;
    /// Adds or replaces one object.
    fn apply(&self, source: &str, body: Body) -> impl Future<Output = ()> + Send;
    /// Removes one object.
    fn delete(&self, source: &str, body: &Body) -> impl Future<Output = ()> + Send;
}

/// The index, through its writer thread.
impl Sink for Feed {
    type Item = Result<Cached, Skip>;

    fn convert(body: Body) -> Self::Item {
        match body {
            Body::Json(json) => Cached::from_json(&json, crate::expr::Limits::default()),
            Body::Parsed(parsed) => Cached::from_parsed(parsed, false),
        }
    }

    async fn begin(&self, source: &str) {
        self.begin_list(source);
    }

    async fn part(&self, source: &str, items: Vec<Self::Item>) {
        if !items.is_empty() {
            self.stage(source, items).await;
        }
    }

    async fn end(&self, source: &str) {
        let skipped = self.finish_list(source).await;
        tracing::info!(
            source = %source,
            skipped = skipped.total,
            "kubernetes: list replaced"
        );
        for s in skipped.lines() {
            tracing::warn!(source = %source, "kubernetes: object skipped: {s}");
        }
    }

    async fn apply(&self, source: &str, body: Body) {
        match body {
            Body::Json(json) => Feed::apply(self, json, source).await,
            // Converted here, keeping the pod's value for its first resolution.
            Body::Parsed(parsed) => {
                Feed::apply_converted(self, Cached::from_parsed(parsed, true), source).await;
            }
        }
    }

    async fn delete(&self, _source: &str, body: &Body) {
        Feed::delete(self, body.identity()).await;
    }
}

/// The cluster layer of the definitions: Karta objects by uid (else name); a list is
/// collected and replaces the layer when complete.
pub(super) struct Kartas {
    publisher: Option<Arc<Publisher>>,
    listed: Mutex<Vec<(String, String, Json)>>,
}

impl Kartas {
    fn listed(&self) -> parking_lot::MutexGuard<'_, Vec<(String, String, Json)>> {
        self.listed.lock()
    }
}

impl Sink for Kartas {
    type Item = (String, String, Json);

    fn convert(body: Body) -> Self::Item {
        let json = body.into_json();
        let (key, origin) = karta_identity(&json);
        (key, origin, json)
    }

    async fn begin(&self, _source: &str) {
        self.listed().clear();
    }

    async fn part(&self, _source: &str, items: Vec<Self::Item>) {
        self.listed().extend(items);
    }

    async fn end(&self, _source: &str) {
        let items = std::mem::take(&mut *self.listed());
        if let Some(p) = &self.publisher {
            p.update(|l| l.reset_cluster(&items));
        }
    }

    async fn apply(&self, _source: &str, body: Body) {
        if let Some(p) = &self.publisher {
            let json = body.into_json();
            let (key, origin) = karta_identity(&json);
            p.update(|l| l.apply_cluster(&key, &origin, &json));
        }
    }

    async fn delete(&self, _source: &str, body: &Body) {
        if let Some(p) = &self.publisher {
            let (key, _) = match body {
                Body::Json(json) => karta_identity(json),
                Body::Parsed(parsed) => karta_identity(&parsed.packed.to_json()),
            };
            p.update(|l| l.delete_cluster(&key));
        }
    }
}

/// Consumes a watcher stream into `sink`: hands each (re)list over in parts as they are
/// converted (beside the download of the next pages) and ends it when complete, applies and
/// deletes events as they come, and backs off after errors.
async fn drive<K: IntoBody, S: Sink>(
    ctx: &Ctx,
    ar: &ApiResource,
    sink: &S,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
) {
    let source = source_name(ar);
    let mut stream = std::pin::pin!(stream);
    let mut listing: Download<S::Item> = Download::default();
    let mut listed = false;
    let mut inits = 0u32;
    let mut errors = 0u32;
    let mut delays = ctx.settings.backoff.delays();
    let mut forbidden = 0u32;
    while let Some(item) = stream.next().await {
        let event = match item {
            Err(e) => {
                let delay = delays.next_delay().max(retry_after(&e).unwrap_or_default());
                errors = errors.saturating_add(1);
                ctx.on_error(&source, &e, delay);
                if let Some(verb) = forbidden_verb(&e) {
                    forbidden += 1;
                    tracing::error!(source = %source, "{}", forbidden_message(ar, verb));
                    if !listed && forbidden == ctx.settings.startup_attempts {
                        tracing::warn!(source = %source, "kubernetes: readiness no longer waits for this kind; still retrying");
                        ctx.gate.done(&source);
                    }
                }
                tokio::time::sleep(delay).await;
                continue;
            }
            Ok(event) => event,
        };
        if !matches!(event, Event::Init) {
            if errors > 0 {
                delays = ctx.settings.backoff.delays();
            }
            errors = 0;
            forbidden = 0;
        }
        match event {
            Event::Init => {
                ctx.on_restart(&source, inits > 0);
                inits += 1;
                listing.clear();
                sink.begin(&source).await;
            }
            Event::InitApply(obj) => {
                if let Some(body) = to_body(obj, ar) {
                    let converted = listing.push(body, S::convert).await;
                    sink.part(&source, converted).await;
                }
            }
            Event::InitDone => {
                let rest = listing.finish(S::convert).await;
                sink.part(&source, rest).await;
                sink.end(&source).await;
                ctx.on_event(&source, "list");
                if !listed {
                    listed = true;
                    ctx.gate.done(&source);
                }
            }
            Event::Apply(obj) => {
                if let Some(body) = to_body(obj, ar) {
                    ctx.on_event(&source, "apply");
                    sink.apply(&source, body).await;
                }
            }
            Event::Delete(obj) => {
                if let Some(body) = to_body(obj, ar) {
                    ctx.on_event(&source, "delete");
                    sink.delete(&source, &body).await;
                }
            }
        }
    }
    tracing::warn!(source = %source, "kubernetes: watch stream ended");
}

/// Listed objects converted per chunk.
const CHUNK: usize = 256;
/// Chunks converting at once per list.
const IN_FLIGHT: usize = 2;
/// Chunks converting at once, all lists together: what is kept of every object is then
/// allocated by a few threads (each thread's allocator heap keeps partly used pages of its
/// own, for every size class).
const CONVERTERS: usize = 2;
static CONVERTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONVERTERS);

/// A (re)list being received: objects are converted in chunks on blocking threads while the
/// next pages download (at most [`IN_FLIGHT`] chunks at once, so a list is never held as
/// JSON), and come out in list order.
struct Download<T> {
    chunk: Vec<Body>,
    converting: VecDeque<JoinHandle<Result<Vec<T>, JoinError>>>,
}

impl<T> Default for Download<T> {
    fn default() -> Self {
        Download {
            chunk: Vec::new(),
            converting: VecDeque::new(),
        }
    }
}

impl<T: Send + 'static> Download<T> {
    /// Adds one listed object; returns the objects converted meanwhile (in list order).
    async fn push(&mut self, body: Body, convert: fn(Body) -> T) -> Vec<T> {
        self.chunk.push(body);
        if self.chunk.len() >= CHUNK {
            self.send(convert);
        }
        let mut out = Vec::new();
        while self.converting.len() > IN_FLIGHT {
            out.extend(self.collect_oldest().await);
        }
        out
    }

    fn send(&mut self, convert: fn(Body) -> T) {
        let chunk = std::mem::take(&mut self.chunk);
        self.converting.push_back(tokio::spawn(async move {
            // The semaphore is never closed.
            let _turn = CONVERTING.acquire().await.ok();
            tokio::task::spawn_blocking(move || chunk.into_iter().map(convert).collect()).await
        }));
    }

    async fn collect_oldest(&mut self) -> Vec<T> {
        let Some(handle) = self.converting.pop_front() else {
            return Vec::new();
        };
        match handle.await {
            Ok(Ok(items)) => items,
            // A conversion that panicked is a bug: it fails this task as converting inline
            // would have.
            Ok(Err(e)) | Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => Vec::new(),
        }
    }

    /// The rest of the list, converted, in order.
    async fn finish(&mut self, convert: fn(Body) -> T) -> Vec<T> {
        if !self.chunk.is_empty() {
            self.send(convert);
        }
        let mut out = Vec::new();
        while !self.converting.is_empty() {
            out.extend(self.collect_oldest().await);
        }
        out
    }

    /// Forgets a list cut short (a new one starts).
    fn clear(&mut self) {
        self.chunk.clear();
        for handle in self.converting.drain(..) {
            handle.abort();
        }
    }
}

/// A Karta object's key in the cluster layer (uid, else name) and its origin label
/// (`cluster:{name}`, or `cluster:{namespace}/{name}` for a namespaced object).
fn karta_identity(json: &Json) -> (String, String) {
    let s = |p: &str| json.pointer(p).and_then(Json::as_str).unwrap_or_default();
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    let origin = if ns.is_empty() {
        format!("cluster:{name}")
    } else {
        format!("cluster:{ns}/{name}")
    };
    let uid = s("/metadata/uid");
    let key = if uid.is_empty() {
        origin.clone()
    } else {
        uid.to_owned()
    };
    (key, origin)
}

/// The API status of a failed request, if the server sent one.
fn error_status(e: &watcher::Error) -> Option<&Status> {
    match e {
        watcher::Error::InitialListFailed(c)
        | watcher::Error::WatchStartFailed(c)
        | watcher::Error::WatchFailed(c) => match c {
            ::kube::Error::Api(status) => Some(status),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status),
        watcher::Error::NoResourceVersion => None,
    }
}

/// The server's `retryAfterSeconds` (429 Too Many Requests and similar).
fn retry_after(e: &watcher::Error) -> Option<Duration> {
    let secs = error_status(e)?.details.as_ref()?.retry_after_seconds;
    (secs > 0).then(|| Duration::from_secs(u64::from(secs)))
}

/// The RBAC verb a 403 Forbidden was about: `list` for the initial list, `watch` otherwise.
fn forbidden_verb(e: &watcher::Error) -> Option<&'static str> {
    if !error_status(e)?.is_forbidden() {
        return None;
    }
    Some(match e {
        watcher::Error::InitialListFailed(_) => "list",
        _ => "watch",
    })
}

/// What to do about a forbidden kind, naming the kind, resource and missing verb.
pub fn forbidden_message(ar: &ApiResource, verb: &str) -> String {
    let group = if ar.group.is_empty() {
        "\"\" (core)".to_owned()
    } else {
        format!("\"{}\"", ar.group)
    };
    format!(
        "kubernetes: forbidden to {verb} {} ({}): grant kartograf's service account the `{verb}` \
         verb (kartograf needs get, list and watch) on resource \"{}\" in API group {group} with a \
         ClusterRole and ClusterRoleBinding",
        ar.kind, ar.api_version, ar.plural
    )
}
