//! Client commands against a running server: `get`, `describe`, `watch`, `totals`.

use super::{EXIT_NO_DEFINITION, EXIT_NOT_FOUND, output, tree};
use crate::proto::v1 as pb;
use crate::proto::v1::workload_resolver_client::WorkloadResolverClient;
use anyhow::Context;
use clap::ValueEnum;
use std::process::ExitCode;
use tonic::transport::Channel;

/// Where the server is.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The kartograf server.
    #[arg(
        long,
        env = "KARTOGRAF_SERVER",
        default_value = "http://localhost:50051",
        global = true
    )]
    pub server: String,
    /// Namespace (default: all namespaces).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// All namespaces (the default; accepted for kubectl habits).
    #[arg(short = 'A', long = "all-namespaces", global = true)]
    pub all_namespaces: bool,
    /// Only this cluster (`Workload.cluster`), for a server that serves several (an
    /// aggregator). Default: all clusters.
    #[arg(long, env = "KARTOGRAF_CLUSTER", global = true)]
    pub cluster: Option<String>,
    /// Bearer token for a server started with --auth-tokens.
    #[arg(long, env = "KARTOGRAF_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// PEM CA bundle that signed the server's certificate (needed for an `https://` server).
    #[arg(long, env = "KARTOGRAF_CA_CERT", value_name = "FILE", global = true)]
    pub ca_cert: Option<std::path::PathBuf>,
    /// PEM client certificate for mutual TLS (with --client-key).
    #[arg(
        long,
        env = "KARTOGRAF_CLIENT_CERT",
        value_name = "FILE",
        global = true,
        requires = "client_key"
    )]
    pub client_cert: Option<std::path::PathBuf>,
    /// PEM private key of --client-cert.
    #[arg(
        long,
        env = "KARTOGRAF_CLIENT_KEY",
        value_name = "FILE",
        global = true,
        requires = "client_cert"
    )]
    pub client_key: Option<std::path::PathBuf>,
}

/// Adds `authorization: Bearer …` to every call.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The generated client with the `--token` interceptor.
pub type Client =
    WorkloadResolverClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// Output of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GetFormat {
    /// A table.
    Table,
    /// The table with the definition and diagnostics count.
    Wide,
    /// Proto3 canonical JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `get [KIND[/NAME]]`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// KIND or KIND/NAME (case-insensitive kind).
    pub what: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: GetFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `describe KIND/NAME`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// KIND/NAME.
    pub what: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `watch [KIND]`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Only this kind.
    pub kind: Option<String>,
    /// Resume after this revision.
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Grouping of `totals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// By namespace (summed over clusters).
    Namespace,
    /// By kind (summed over clusters).
    Kind,
    /// By workload.
    Workload,
    /// By cluster.
    Cluster,
}

/// `totals --by …`.
#[derive(Debug, clap::Args)]
pub struct TotalsArgs {
    /// Grouping.
    #[arg(long, value_enum, default_value = "namespace")]
    pub by: By,
    #[command(flatten)]
    pub server: ServerArgs,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

async fn connect(server: &ServerArgs) -> anyhow::Result<Client> {
    let mut endpoint = Channel::from_shared(server.server.clone())
        .with_context(|| format!("bad --server {}", server.server))?;
    if server.ca_cert.is_some() || server.client_cert.is_some() {
        let read = |p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        };
        let mut tls = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &server.ca_cert {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&server.client_cert, &server.client_key) {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        endpoint = endpoint.tls_config(tls).context("TLS settings")?;
    }
    let token = match &server.token {
        Some(t) => Some(
            format!("Bearer {}", t.trim())
                .parse()
                .context("--token has characters not allowed in gRPC metadata")?,
        ),
        None => None,
    };
    let channel = endpoint.connect().await.with_context(|| {
        format!(
            "cannot reach kartograf at {} (is `kartograf serve` running?)",
            server.server
        )
    })?;
    Ok(WorkloadResolverClient::with_interceptor(
        channel,
        Bearer(token),
    ))
}

fn namespace(server: &ServerArgs) -> String {
    if server.all_namespaces {
        String::new()
    } else {
        server.namespace.clone().unwrap_or_default()
    }
}

/// The namespace given, else the one of the first workload of `kind` named `name` the server
/// lists (empty when none is found: the server then answers NOT_FOUND).
async fn namespace_of(client: &mut Client, server: &ServerArgs, kind: &str, name: &str) -> String {
    if let Some(ns) = server.namespace.clone().filter(|n| !n.is_empty()) {
        return ns;
    }
    let list = client
        .list(pb::ListRequest {
            kinds: vec![kind.to_owned()],
            view: pb::View::Summary as i32,
            page_size: 1000,
            cluster: cluster(server),
            ..Default::default()
        })
        .await;
    list.ok()
        .and_then(|l| {
            l.into_inner()
                .workloads
                .iter()
                .filter_map(|w| w.r#ref.clone())
                .find(|r| r.name == name)
        })
        .map(|r| r.namespace)
        .unwrap_or_default()
}

fn cluster(server: &ServerArgs) -> String {
    server.cluster.clone().unwrap_or_default()
}

/// How many clusters the server serves workloads of, within `--cluster` (1 when it cannot
/// say: a server from before clusters answers GROUP_BY_CLUSTER with INVALID_ARGUMENT).
async fn clusters_served(client: &mut Client, server: &ServerArgs) -> usize {
    let request = pb::TotalsRequest {
        group_by: pb::GroupBy::Cluster as i32,
        cluster: cluster(server),
        ..Default::default()
    };
    client
        .totals(request)
        .await
        .map_or(1, |r| r.into_inner().rows.len().max(1))
}

/// True when the workloads belong to more than one cluster (a CLUSTER column is shown then).
fn several_clusters<'a>(clusters: impl IntoIterator<Item = &'a str>) -> bool {
    let mut clusters = clusters.into_iter();
    let first = clusters.next();
    clusters.any(|c| Some(c) != first)
}

/// Exit code and message for a failed call.
fn failed(status: tonic::Status) -> anyhow::Result<ExitCode> {
    eprintln!("error: {}", status.message());
    if status.message().contains("set `cluster`") {
        eprintln!("(choose one with --cluster NAME)");
    }
    Ok(ExitCode::from(match status.code() {
        tonic::Code::NotFound => EXIT_NOT_FOUND,
        tonic::Code::FailedPrecondition => EXIT_NO_DEFINITION,
        _ => super::EXIT_INVALID,
    }))
}

/// "3m", "2h", "5d" from an RFC 3339 timestamp; "-" when unknown.
pub fn age(created: &str) -> String {
    let Some(then) = parse_rfc3339(created) else {
        return "-".to_owned();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let s = (now - then).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

fn table(workloads: &[pb::Workload], wide: bool) -> String {
    let with_cluster = several_clusters(workloads.iter().map(|w| w.cluster.as_str()));
    let rows: Vec<Vec<String>> = workloads
        .iter()
        .map(|w| {
            let mut row = tree::workload_row(w);
            if with_cluster {
                row.insert(0, w.cluster.clone());
            }
            row.push(age(&w.created));
            if wide {
                row.push(w.definition.clone().unwrap_or_default().name);
                row.push(w.diagnostics.len().to_string());
            }
            row
        })
        .collect();
    let mut headers = tree::WORKLOAD_COLUMNS.to_vec();
    if with_cluster {
        headers.insert(0, "CLUSTER");
    }
    headers.push("AGE");
    if wide {
        headers.extend(["DEFINITION", "DIAGNOSTICS"]);
    }
    tree::table(&headers, &rows)
}

fn split_kind_name(what: &str) -> (String, Option<String>) {
    match what.split_once('/') {
        Some((k, n)) => (k.to_owned(), Some(n.to_owned())),
        None => (what.to_owned(), None),
    }
}

fn singular(kind: &str) -> String {
    kind.strip_suffix('s')
        .filter(|k| !k.is_empty())
        .unwrap_or(kind)
        .to_owned()
}

/// Runs `get`.
pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let mut client = connect(&args.server).await?;
        let ns = namespace(&args.server);
        let (kind, name) = args
            .what
            .as_deref()
            .map(split_kind_name)
            .unwrap_or_default();
        let mut workloads = Vec::new();
        let mut token = String::new();
        loop {
            let req = pb::ListRequest {
                namespace: ns.clone(),
                kinds: if kind.is_empty() {
                    vec![]
                } else {
                    vec![kind.clone()]
                },
                view: pb::View::Summary as i32,
                page_size: 500,
                page_token: token.clone(),
                cluster: cluster(&args.server),
                ..Default::default()
            };
            let page = match client.list(req).await {
                Ok(r) => r.into_inner(),
                Err(e) => return failed(e),
            };
            workloads.extend(page.workloads);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        if let Some(name) = &name {
            workloads.retain(|w| w.r#ref.as_ref().is_some_and(|r| &r.name == name));
            if workloads.is_empty() {
                eprintln!("error: no {} named {name}", singular(&kind));
                return Ok(ExitCode::from(EXIT_NOT_FOUND));
            }
        }
        let text = match args.output {
            GetFormat::Table | GetFormat::Wide => table(&workloads, args.output == GetFormat::Wide),
            GetFormat::Json => output::json(&pb::ListResponse {
                workloads,
                ..Default::default()
            })?,
            GetFormat::Yaml => output::yaml(&pb::ListResponse {
                workloads,
                ..Default::default()
            })?,
        };
        super::print_out(text.trim_end());
        Ok(ExitCode::SUCCESS)
    })
}

/// A full-view Resolve request of the workload KIND/NAME (`describe`, `gangs`), its namespace
/// looked up as [`namespace_of`] does.
async fn full_request(
    client: &mut Client,
    server: &ServerArgs,
    kind: &str,
    name: String,
) -> pb::ResolveRequest {
    let namespace = namespace_of(client, server, kind, &name).await;
    pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: singular(kind),
            namespace,
            name,
            ..Default::default()
        })),
        view: pb::View::Full as i32,
        cluster: cluster(server),
    }
}

/// Runs `describe`.
pub fn describe(args: DescribeArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let mut client = connect(&args.server).await?;
        let (kind, name) = split_kind_name(&args.what);
        let Some(name) = name else {
            anyhow::bail!("describe takes KIND/NAME")
        };
        let req = full_request(&mut client, &args.server, &kind, name).await;
        match client.resolve(req).await {
            Ok(r) => {
                let w = r.into_inner().workload.unwrap_or_default();
                let mut text = tree::render(&w);
                if !w.cluster.is_empty()
                    && (args.server.cluster.is_some()
                        || clusters_served(&mut client, &args.server).await > 1)
                {
                    // The cluster joins the header line.
                    let end = text.find('\n').unwrap_or(text.len());
                    text.insert_str(end, &format!("   cluster: {}", w.cluster));
                }
                super::print_out(text.trim_end());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => failed(e),
        }
    })
}

/// Runs `watch`: one line per event until interrupted.
pub fn watch(args: WatchArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let mut client = connect(&args.server).await?;
        let with_cluster = clusters_served(&mut client, &args.server).await > 1;
        let req = pb::WatchRequest {
            namespace: namespace(&args.server),
            kinds: args.kind.clone().into_iter().collect(),
            since_revision: args.since,
            view: pb::View::Summary as i32,
            cluster: cluster(&args.server),
            ..Default::default()
        };
        let mut stream = match client.watch(req).await {
            Ok(s) => s.into_inner(),
            Err(e) => return failed(e),
        };
        loop {
            match stream.message().await {
                Ok(Some(e)) => {
                    let kind =
                        pb::EventType::try_from(e.r#type).unwrap_or(pb::EventType::Unspecified);
                    let name = kind.as_str_name().trim_start_matches("EVENT_TYPE_");
                    match e.workload {
                        Some(w) => {
                            let r = w.r#ref.clone().unwrap_or_default();
                            let pods = w.pods.unwrap_or_default();
                            let t = w.totals.unwrap_or_default();
                            let at = if with_cluster {
                                format!("{}:", w.cluster)
                            } else {
                                String::new()
                            };
                            super::print_out(&format!(
                                "{:<8} {name:<9} {at}{}/{}/{}  {}  {}/{} ready  gpu {}/{}",
                                e.revision,
                                r.kind,
                                r.namespace,
                                r.name,
                                crate::proto::phase_name(w.status.map_or(0, |s| s.phase)),
                                pods.ready,
                                pods.desired,
                                tree::gpus(t.current.unwrap_or_default().gpus),
                                tree::gpus(t.desired.unwrap_or_default().gpus)
                            ));
                        }
                        None => super::print_out(&format!("{:<8} {name}", e.revision)),
                    }
                }
                Ok(None) => return Ok(ExitCode::SUCCESS),
                Err(e) => return failed(e),
            }
        }
    })
}

/// Runs `totals`.
pub fn totals(args: TotalsArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let mut client = connect(&args.server).await?;
        let group_by = match args.by {
            By::Namespace => pb::GroupBy::Namespace,
            By::Kind => pb::GroupBy::Kind,
            By::Workload => pb::GroupBy::Workload,
            By::Cluster => pb::GroupBy::Cluster,
        };
        let resp = match client
            .totals(pb::TotalsRequest {
                group_by: group_by as i32,
                namespace: namespace(&args.server),
                cluster: cluster(&args.server),
            })
            .await
        {
            Ok(r) => r.into_inner(),
            Err(e) => return failed(e),
        };
        // Workload rows of several clusters say which.
        let with_cluster = args.by == By::Workload
            && several_clusters(resp.rows.iter().map(|r| r.cluster.as_str()));
        let rows: Vec<Vec<String>> = resp
            .rows
            .iter()
            .map(|r| {
                let t = r.totals.clone().unwrap_or_default();
                let (d, c) = (t.desired.unwrap_or_default(), t.current.unwrap_or_default());
                let p = r.pods.unwrap_or_default();
                let cluster = with_cluster.then(|| r.cluster.clone());
                cluster
                    .into_iter()
                    .chain([
                        r.key.clone(),
                        r.workloads.to_string(),
                        format!("{}/{}", p.ready, p.desired),
                        format!("{}/{}", tree::gpus(c.gpus), tree::gpus(d.gpus)),
                        format!("{}/{}", tree::cpu(c.cpu_millis), tree::cpu(d.cpu_millis)),
                        format!(
                            "{}/{}",
                            tree::memory(c.memory_bytes),
                            tree::memory(d.memory_bytes)
                        ),
                    ])
                    .collect()
            })
            .collect();
        let key = match args.by {
            By::Namespace => "NAMESPACE",
            By::Kind => "KIND",
            By::Workload => "WORKLOAD",
            By::Cluster => "CLUSTER",
        };
        let mut headers = vec![key, "WORKLOADS", "READY", "GPUS", "CPU", "MEMORY"];
        if with_cluster {
            headers.insert(0, "CLUSTER");
        }
        super::print_out(tree::table(&headers, &rows).trim_end());
        Ok(ExitCode::SUCCESS)
    })
}

/// `gangs` from a server: the `Gangs` RPC, the workload (`KIND/NAME`) found as `describe`
/// finds it. Returns the gang objects, or the exit code when the workload has no gang or its
/// gangs cannot be expressed in `format` (the server's message printed).
pub fn gangs(
    server: &ServerArgs,
    target: Option<&str>,
    format: crate::gangs::Format,
) -> anyhow::Result<Result<crate::gangs::Rendered, ExitCode>> {
    runtime()?.block_on(async {
        let mut client = connect(server).await?;
        let (kind, name) = split_kind_name(target.unwrap_or_default());
        let Some(name) = name else {
            anyhow::bail!("gangs takes KIND/NAME (or -f FILE… for a snapshot)")
        };
        let req = pb::GangsRequest {
            workload: Some(full_request(&mut client, server, &kind, name).await),
            format: format.to_proto() as i32,
        };
        match client.gangs(req).await {
            Ok(r) => {
                let r = r.into_inner();
                let mut objects = Vec::with_capacity(r.objects_json.len());
                for text in &r.objects_json {
                    objects
                        .push(serde_json::from_str(text).context("a gang object from the server")?);
                }
                Ok(Ok(crate::gangs::Rendered {
                    objects,
                    notes: r.notes,
                    paths: Vec::new(),
                }))
            }
            Err(e)
                if e.code() == tonic::Code::FailedPrecondition
                    && (e.message().contains("cannot be expressed")
                        || e.message().contains("has no gang")) =>
            {
                eprintln!("error: {}", e.message());
                Ok(Err(ExitCode::from(super::EXIT_GANGS)))
            }
            Err(e) => failed(e).map(Err),
        }
    })
}

/// `patch` from a server: the `Patch` RPC, the workload found as `describe` finds it. Answers
/// the server's patch text, or the exit code when the call failed (its message printed).
pub fn patch(
    server: &ServerArgs,
    target: Option<&str>,
    intents: pb::PatchIntents,
    output: pb::PatchOutput,
) -> anyhow::Result<Result<String, ExitCode>> {
    runtime()?.block_on(async {
        let mut client = connect(server).await?;
        let what = target.unwrap_or_default();
        let (kind, name) = split_kind_name(what);
        let Some(name) = name else {
            anyhow::bail!("patch takes KIND/NAME (or -f FILE… for a snapshot)")
        };
        let resolve = full_request(&mut client, server, &kind, name).await;
        let Some(pb::resolve_request::Target::Workload(workload)) = resolve.target else {
            anyhow::bail!("patch takes KIND/NAME");
        };
        let req = pb::PatchRequest {
            target: Some(pb::patch_request::Target::Workload(workload)),
            intents: Some(intents),
            output: output as i32,
            dry_run: false,
            cluster: resolve.cluster,
        };
        match client.patch(req).await {
            Ok(r) => Ok(Ok(r.into_inner().patch_json)),
            Err(e)
                if e.code() == tonic::Code::FailedPrecondition
                    && e.message().starts_with("definition `") =>
            {
                eprintln!("error: {}", e.message());
                Ok(Err(ExitCode::from(super::EXIT_REFUSED)))
            }
            Err(e) => failed(e).map(Err),
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cluster_column_needs_two_clusters() {
        assert!(!super::several_clusters([]));
        assert!(!super::several_clusters(["eu", "eu"]));
        assert!(super::several_clusters(["eu", "eu", "us"]));
    }

    #[test]
    fn parses_timestamps() {
        assert_eq!(super::parse_rfc3339("1970-01-02T00:00:00Z"), Some(86_400));
        assert_eq!(
            super::parse_rfc3339("2026-11-30T00:00:00Z"),
            Some(1_795_996_800)
        );
        assert_eq!(super::parse_rfc3339("nope"), None);
    }
}
