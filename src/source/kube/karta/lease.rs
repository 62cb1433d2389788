//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it: the holder renews `renewTime` every retry period; a candidate takes the Lease
//! over when its record has not changed for `leaseDurationSeconds` as the candidate observed
//! it (its own clock only, so clock skew between replicas does not matter); every write
//! carries the `resourceVersion` it read, so two candidates cannot both win (the second
//! gets 409 Conflict). A holder that cannot renew for the renew deadline steps down; one
//! that stops releases the Lease (empty holder) so another takes over at once.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Settings of one candidate.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (`holderIdentity`).
    pub identity: String,
    /// How long a Lease not renewed stays held (`leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// How long the holder keeps leading while its renewals fail.
    pub renew_deadline: Duration,
    /// Time between attempts (renewals by the holder, checks by the others).
    pub retry_period: Duration,
}

impl Settings {
    /// client-go's defaults (15 s, 10 s, 2 s) for `namespace/name` and `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Settings {
        Settings {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate last saw of the Lease, and when it saw it change.
struct Observed {
    record: (Option<String>, Option<String>, Option<String>),
    at: Instant,
    duration: Duration,
}

/// One candidate.
pub struct Candidate {
    api: Api<Lease>,
    settings: Settings,
    observed: Option<Observed>,
}

fn micro_now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn whole_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Candidate {
    /// A candidate for the Lease of `settings`.
    pub fn new(client: kube::Client, settings: Settings) -> Candidate {
        Candidate {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    /// One attempt: acquires or renews the Lease; `Ok(true)` when this candidate holds it
    /// afterwards, `Ok(false)` when another does (or won a race).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.settings.identity.clone();
        let duration = whole_seconds(self.settings.lease_duration);
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(micro_now()),
                    renew_time: Some(micro_now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_status(&e, 409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (
            holder.clone(),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
            lease.metadata.resource_version.clone(),
        );
        let now = Instant::now();
        let record_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs);
        if self.observed.as_ref().is_none_or(|o| o.record != record) {
            self.observed = Some(Observed {
                record,
                at: now,
                duration: record_duration,
            });
        }
        let mine = holder.as_deref() == Some(me.as_str());
        if !mine
            && holder.is_some()
            && let Some(o) = &self.observed
            && now < o.at + o.duration
        {
            return Ok(false);
        }
        let mut next = spec;
        if !mine {
            next.acquire_time = Some(micro_now());
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        next.holder_identity = Some(me);
        next.lease_duration_seconds = Some(duration);
        next.renew_time = Some(micro_now());
        lease.spec = Some(next);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this candidate holds it (empty holder, 1 s duration: the
    /// others take it at their next attempt).
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(micro_now());
        if let Err(e) = self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(error = %e, "leader election: releasing the Lease failed");
        }
    }
}

/// Runs the election until `shutdown` flips: `leading` is true while this replica holds
/// the Lease. On shutdown a holder releases it.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    leading: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let retry = settings.retry_period.max(Duration::from_millis(10));
    let deadline = settings.renew_deadline;
    let lease = format!("{}/{}", settings.namespace, settings.name);
    let mut candidate = Candidate::new(client, settings);
    let mut renewed: Option<Instant> = None;
    let mut last_error: Option<u16> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let held = match candidate.try_acquire_or_renew().await {
            Ok(true) => {
                renewed = Some(Instant::now());
                last_error = None;
                true
            }
            Ok(false) => {
                last_error = None;
                false
            }
            Err(e) => {
                // Said once per kind of failure, not every retry period (a missing grant
                // would repeat forever).
                let kind = match &e {
                    kube::Error::Api(s) => s.code,
                    _ => 0,
                };
                if last_error != Some(kind) {
                    tracing::warn!(lease = %lease, error = %e, "leader election: the Lease could not be read or written (retrying; said once)");
                    last_error = Some(kind);
                }
                // A holder keeps leading until its renew deadline passes.
                renewed.is_some_and(|at| at.elapsed() < deadline)
            }
        };
        if !held {
            renewed = None;
        }
        let changed = leading.send_if_modified(|l| std::mem::replace(l, held) != held);
        if changed {
            tracing::info!(lease = %lease, leading = held, "leader election: {}", if held { "leading" } else { "following" });
        }
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            _ = shutdown.changed() => {}
        }
    }
    if *leading.borrow() {
        candidate.release().await;
        leading.send_replace(false);
    }
}
