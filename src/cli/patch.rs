//! `kartograf patch`: the write path from the command line — offline from manifest files
//! (`-f`), from a server (the `Patch` RPC), or against the cluster of the kubeconfig
//! (`--apply`: read the live object, patch it with `test` preconditions on its uid and
//! resourceVersion).

use super::{DefinitionArgs, EXIT_NO_DEFINITION, EXIT_NOT_FOUND};
use crate::definition::Catalog;
use crate::expr::Limits;
use crate::patch::{self, Intents, Lifecycle, PatchRefused, Toleration, intents::parse_pair};
use crate::proto::v1 as pb;
use crate::source::offline::Snapshot;
use anyhow::Context;
use clap::ValueEnum;
use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::ExitCode;

pub use super::EXIT_REFUSED;
/// Exit code: `--apply` found the object changed since it was read (a failed `test`
/// precondition, 409 or 422): nothing was written.
pub const EXIT_CONFLICT: u8 = 8;

/// What `patch` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// RFC 6902, one line: `kubectl patch --type json -p "$(kartograf patch …)"`.
    JsonPatch,
    /// RFC 7386, one line: `kubectl patch --type merge -p …`.
    MergePatch,
    /// The patched object as YAML.
    Yaml,
}

/// Arguments of `patch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The workload as KIND/NAME (e.g. jobset/train); offline, optional when the files hold
    /// one workload.
    pub target: Option<String>,
    /// Manifest file or folder (a cluster snapshot), repeatable: patch offline instead of
    /// asking the server.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// `spec.schedulerName` of every pod template.
    #[arg(long, value_name = "NAME")]
    pub scheduler_name: Option<String>,
    /// A pod template label (merged; existing labels stay), repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// A pod template annotation (merged), repeatable.
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// `spec.priorityClassName` of every pod template.
    #[arg(long = "priority-class", value_name = "NAME")]
    pub priority_class: Option<String>,
    /// A `spec.nodeSelector` entry (merged), repeatable.
    #[arg(long = "node-selector", value_name = "KEY=VALUE")]
    pub node_selector: Vec<String>,
    /// A toleration `KEY[=VALUE]:EFFECT` (Equal with a value, else Exists), appended where
    /// no equal one is; repeatable.
    #[arg(long = "toleration", value_name = "KEY[=VALUE]:EFFECT")]
    pub tolerations: Vec<String>,
    /// Suspend through the definition's suspendActions.
    #[arg(long, conflicts_with = "resume")]
    pub suspend: bool,
    /// Resume through the definition's resumeActions.
    #[arg(long)]
    pub resume: bool,
    /// Replicas of one component, `COMPONENT=N`, through its scale path; repeatable.
    #[arg(long = "replicas", value_name = "COMPONENT=N")]
    pub replicas: Vec<String>,
    /// What to print.
    #[arg(short = 'o', long, value_enum, default_value = "json-patch")]
    pub output: Output,
    /// Send the patch (with `test` preconditions on uid and resourceVersion) to the
    /// cluster of the kubeconfig (`KUBECONFIG`, else `~/.kube/config`) instead of printing it.
    #[arg(long, conflicts_with = "files")]
    pub apply: bool,
    #[command(flatten)]
    pub server: super::client::ServerArgs,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
}

impl Args {
    /// The intents of the flags, checked.
    pub fn intents(&self) -> anyhow::Result<Intents> {
        let pairs = |what: &str, list: &[String]| {
            list.iter()
                .map(|t| parse_pair(what, t))
                .collect::<Result<std::collections::BTreeMap<_, _>, _>>()
        };
        let mut replicas = std::collections::BTreeMap::new();
        for r in &self.replicas {
            let (c, n) = parse_pair("--replicas", r)?;
            let n: i32 = n
                .parse()
                .map_err(|_| anyhow::anyhow!("--replicas {r}: N must be a number 0..2147483647"))?;
            replicas.insert(c, n);
        }
        let intents = Intents {
            scheduler_name: self.scheduler_name.clone(),
            labels: pairs("--label", &self.labels)?,
            annotations: pairs("--annotation", &self.annotations)?,
            priority_class_name: self.priority_class.clone(),
            node_selector: pairs("--node-selector", &self.node_selector)?,
            tolerations: self
                .tolerations
                .iter()
                .map(|t| Toleration::parse(t))
                .collect::<Result<_, _>>()?,
            lifecycle: if self.suspend {
                Some(Lifecycle::Suspend)
            } else if self.resume {
                Some(Lifecycle::Resume)
            } else {
                None
            },
            replicas,
        };
        intents.validate()?;
        if intents.is_empty() {
            anyhow::bail!(
                "nothing to patch: give --scheduler-name, --label, --annotation, --priority-class, --node-selector, --toleration, --suspend, --resume or --replicas"
            );
        }
        Ok(intents)
    }
}

/// The request form of intents.
pub fn to_proto(i: &Intents) -> pb::PatchIntents {
    pb::PatchIntents {
        scheduler_name: i.scheduler_name.clone().unwrap_or_default(),
        labels: i.labels.clone(),
        annotations: i.annotations.clone(),
        priority_class_name: i.priority_class_name.clone().unwrap_or_default(),
        node_selector: i.node_selector.clone(),
        tolerations: i
            .tolerations
            .iter()
            .map(|t| pb::Toleration {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        lifecycle: match i.lifecycle {
            None => pb::Lifecycle::Unspecified,
            Some(Lifecycle::Suspend) => pb::Lifecycle::Suspend,
            Some(Lifecycle::Resume) => pb::Lifecycle::Resume,
        } as i32,
        replicas: i.replicas.clone(),
    }
}

/// Prints a patch in the asked form.
pub fn print(p: &patch::Patch, output: Output) -> anyhow::Result<()> {
    let text = match output {
        Output::JsonPatch => p.json_patch().to_string(),
        Output::MergePatch => p.merge_patch().to_string(),
        Output::Yaml => serde_saphyr::to_string(p.patched()).context("encoding YAML")?,
    };
    super::print_out(text.trim_end());
    Ok(())
}

/// Prints a refusal and returns its exit code.
fn refused(e: PatchRefused) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(match e {
        PatchRefused::Unsupported { .. } => EXIT_REFUSED,
        _ => super::EXIT_INVALID,
    })
}

/// `patch --server`: the server computes the patch; YAML is converted here.
fn from_server(args: &Args, intents: &Intents) -> anyhow::Result<ExitCode> {
    let output = match args.output {
        Output::JsonPatch => pb::PatchOutput::JsonPatch,
        Output::MergePatch => pb::PatchOutput::MergePatch,
        Output::Yaml => pb::PatchOutput::Object,
    };
    let text = match super::client::patch(
        &args.server,
        args.target.as_deref(),
        to_proto(intents),
        output,
    )? {
        Ok(text) => text,
        Err(code) => return Ok(code),
    };
    let text = if args.output == Output::Yaml {
        let v: serde_json::Value = serde_json::from_str(&text).context("the server's object")?;
        serde_saphyr::to_string(&v).context("encoding YAML")?
    } else {
        text
    };
    super::print_out(text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// Runs `patch`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let intents = args.intents()?;
    if args.apply {
        let catalog = super::load_catalog(&args.definitions)?;
        return apply(&args, &catalog, &intents);
    }
    if args.files.is_empty() {
        return from_server(&args, &intents);
    }
    let catalog = super::load_catalog(&args.definitions)?;
    let snapshot = Snapshot::load(&args.files, Limits::default()).map_err(anyhow::Error::msg)?;
    let root = match snapshot.select(
        &catalog,
        args.target.as_deref(),
        args.server.namespace.as_deref(),
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_NOT_FOUND));
        }
    };
    // The snapshot caches objects without `env` of pod templates: patch the file's document.
    let object = original(&args.files, &root)?
        .with_context(|| format!("{}/{} is not in the files", root.kind, root.key()))?;
    let Some(lookup) = catalog.lookup(&root.api_version, &root.kind) else {
        eprintln!(
            "error: no definition covers {}/{}",
            root.api_version, root.kind
        );
        return Ok(ExitCode::from(EXIT_NO_DEFINITION));
    };
    match patch::plan(&lookup.definition, &object, &intents) {
        Ok(p) => {
            print(&p, args.output)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(refused(e)),
    }
}

/// The document of `root` as written in the files.
fn original(files: &[PathBuf], root: &crate::model::ObjectMeta) -> anyhow::Result<Option<Json>> {
    for path in files {
        for (file, _) in crate::folder::walk(path, crate::folder::is_manifest).files {
            let text = crate::folder::read_text(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let Ok(docs) = crate::manifest::parse_documents(&text) else {
                continue;
            };
            let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
            if let Some(doc) = docs.into_iter().find(|d| {
                s(&d["apiVersion"]) == root.api_version
                    && s(&d["kind"]) == root.kind
                    && s(&d["metadata"]["name"]) == root.name
                    && s(&d["metadata"]["namespace"]) == root.namespace
            }) {
                return Ok(Some(doc));
            }
        }
    }
    Ok(None)
}

/// `patch --apply`: reads the live object, plans with preconditions, sends an RFC 6902
/// patch.
fn apply(args: &Args, catalog: &Catalog, intents: &Intents) -> anyhow::Result<ExitCode> {
    let target = args.target.clone().unwrap_or_default();
    let Some((kind, name)) = target.split_once('/') else {
        anyhow::bail!("--apply takes KIND[.GROUP]/NAME");
    };
    let (kind, group) = match kind.split_once('.') {
        Some((k, g)) => (k, Some(g)),
        None => (kind, None),
    };
    let mut candidates: Vec<_> = catalog
        .definitions()
        .filter(|d| {
            d.root_kind.kind.eq_ignore_ascii_case(kind)
                || d.root_kind
                    .kind
                    .eq_ignore_ascii_case(kind.trim_end_matches('s'))
        })
        .filter(|d| group.is_none_or(|g| d.root_kind.group == g))
        .collect();
    candidates.sort_by(|a, b| b.root_kind.version.cmp(&a.root_kind.version));
    let Some(definition) = candidates.first() else {
        eprintln!("error: no definition covers kind `{kind}`");
        return Ok(ExitCode::from(EXIT_NO_DEFINITION));
    };
    let gvk = definition.root_kind.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let client = ::kube::Client::try_default()
            .await
            .context("no usable kubeconfig or in-cluster config")?;
        let namespace = args
            .server
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let plural = plural(&gvk.kind);
        let base = if gvk.group.is_empty() {
            format!("/api/{}", gvk.version)
        } else {
            format!("/apis/{}/{}", gvk.group, gvk.version)
        };
        let url = format!("{base}/namespaces/{namespace}/{plural}/{name}");
        let get = hyper::Request::get(&url)
            .body(Vec::new())
            .context("building the request")?;
        let object: Json = match client.request(get).await {
            Ok(o) => o,
            Err(::kube::Error::Api(e)) if e.code == 404 => {
                eprintln!("error: {kind}/{name} not found in namespace {namespace} ({url})");
                return Ok(ExitCode::from(EXIT_NOT_FOUND));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {url}"))),
        };
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let definition = catalog
            .lookup(api_version, &gvk.kind)
            .map_or_else(|| (*definition).clone(), |l| l.definition);
        let p = match patch::plan(&definition, &object, intents).and_then(|p| p.guarded(&object))
        {
            Ok(p) => p,
            Err(e) => return Ok(refused(e)),
        };
        if p.is_empty() {
            eprintln!("{kind}/{name}: nothing to change");
            return Ok(ExitCode::SUCCESS);
        }
        let body = serde_json::to_vec(&p.json_patch()).context("encoding the patch")?;
        let send = hyper::Request::patch(&url)
            .header("content-type", "application/json-patch+json")
            .body(body)
            .context("building the request")?;
        let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("?");
        match client.request::<Json>(send).await {
            Ok(updated) => {
                eprintln!(
                    "{kind}/{name} patched ({} changes; resourceVersion {rv} -> {})",
                    p.changes(),
                    updated["metadata"]["resourceVersion"].as_str().unwrap_or("?")
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(::kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                eprintln!(
                    "error: {kind}/{name} changed since it was read at resourceVersion {rv}: the API server refused the patch ({} {}: {}); nothing was written, run the command again",
                    e.code, e.reason, e.message
                );
                Ok(ExitCode::from(EXIT_CONFLICT))
            }
            Err(e) => Err(anyhow::Error::new(e).context(format!("patching {url}"))),
        }
    })
}

/// The resource name Kubernetes gives a kind (lower case, plural), as kube-rs guesses it.
fn plural(kind: &str) -> String {
    let k = kind.to_ascii_lowercase();
    if k.ends_with('s') || k.ends_with('x') || k.ends_with("ch") || k.ends_with("sh") {
        format!("{k}es")
    } else if let Some(stem) = k.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plurals_follow_kubernetes() {
        assert_eq!(super::plural("JobSet"), "jobsets");
        assert_eq!(super::plural("LeaderWorkerSet"), "leaderworkersets");
        assert_eq!(super::plural("Policy"), "policies");
        assert_eq!(super::plural("Gateway"), "gateways");
    }
}
