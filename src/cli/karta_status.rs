//! `serve` flags of the Karta status writer and its leader election (`crate::karta`).

use std::time::Duration;

/// `serve` flags of the Karta status writer.
#[derive(Debug, Clone, clap::Args)]
pub struct KartaStatusArgs {
    /// Write status conditions (KartaValidated, CRDExists, Ready, SchemaInSync) and the
    /// index labels on Karta objects (Kubernetes source only; needs kartas/status patch).
    #[arg(long, env = "KARTOGRAF_KARTA_STATUS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub karta_status: bool,
    /// Elect one replica to write Karta status with a coordination.k8s.io Lease (false:
    /// this replica writes, whatever others do; for a single replica).
    #[arg(long, env = "KARTOGRAF_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(
        long,
        env = "KARTOGRAF_LEADER_ELECT_LEASE",
        default_value = "kartograf-karta-status",
        value_name = "NAME"
    )]
    pub leader_elect_lease: String,
    /// Namespace of the Lease. Default: $POD_NAMESPACE, else the service account's
    /// namespace, else `default`.
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    pub leader_elect_namespace: Option<String>,
    /// This replica's identity in the Lease. Default: $POD_NAME, else the host name, with a
    /// random suffix.
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub leader_elect_identity: Option<String>,
    /// How long a Lease not renewed stays held.
    #[arg(long, env = "KARTOGRAF_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = super::resolve::parse_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps leading while renewals fail.
    #[arg(long, env = "KARTOGRAF_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = super::resolve::parse_duration, value_name = "DURATION")]
    pub leader_elect_renew_deadline: Duration,
    /// Time between renewals (leader) and checks (the others).
    #[arg(long, env = "KARTOGRAF_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = super::resolve::parse_duration, value_name = "DURATION")]
    pub leader_elect_retry_period: Duration,
    /// How often every Karta is reconciled even when nothing was seen to change.
    #[arg(long, env = "KARTOGRAF_KARTA_RESYNC", default_value = "60s", value_parser = super::resolve::parse_duration, value_name = "DURATION")]
    pub karta_resync: Duration,
}

impl KartaStatusArgs {
    /// The election settings (`None`: no election).
    pub fn lease(&self) -> Option<crate::source::kube::karta::lease::Settings> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self.leader_elect_namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned())
        });
        let identity = match &self.leader_elect_identity {
            Some(id) => id.clone(),
            None => {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kartograf".to_owned());
                format!("{host}_{:08x}", crate::random::next_u64() as u32)
            }
        };
        let mut s = crate::source::kube::karta::lease::Settings::new(
            &namespace,
            &self.leader_elect_lease,
            &identity,
        );
        s.lease_duration = self.leader_elect_lease_duration;
        s.renew_deadline = self.leader_elect_renew_deadline;
        s.retry_period = self.leader_elect_retry_period;
        Some(s)
    }
}
