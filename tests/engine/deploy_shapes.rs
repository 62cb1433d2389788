//! The multi-cluster deployment shapes of `deploy/`: namespace shards behind an aggregator
//! (`deploy/shards`, used by `examples/deploy-shards`), and one kartograf per cluster
//! (`deploy/fleet-member`, used by `examples/deploy-fleet-member`) behind a fleet hub
//! (`deploy/fleet-hub`). Each is rendered here as kustomize renders it (resources, components,
//! JSON patches, the namespace) — and, where `kubectl` is installed, compared with
//! `kubectl kustomize`'s own rendering — then checked: every upstream an aggregator follows
//! is a Service of a kartograf in the shape, shards split namespaces and name one cluster,
//! aggregators hold no Kubernetes credentials, network policies let only the aggregator reach
//! the shards, TLS, token and upstreams files agree across the files that mount and name
//! them, and every flag is one `kartograf serve` accepts.

use crate::common::{kartograf, temp_file};
use crate::deploy::selects;
use kartograf::aggregate::config::{parse_file, parse_flag};
use kartograf::manifest::parse_documents;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

const CLUSTER_SCOPED: [&str; 4] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
];

/// A JSON pointer's tokens (`~1` is `/`, `~0` is `~`).
fn pointer(path: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Applies one JSON 6902 operation (add, replace, remove, test: what the shapes use).
fn patch(doc: &mut Value, op: &Value) {
    let kind = op["op"].as_str().expect("op");
    if kind == "test" {
        let at = op["path"].as_str().expect("path");
        assert_eq!(doc.pointer(at), Some(&op["value"]), "failed {op}");
        return;
    }
    let tokens = pointer(op["path"].as_str().expect("path"));
    let (last, parents) = tokens.split_last().expect("a path");
    let mut at = &mut *doc;
    for t in parents {
        at = match at {
            Value::Array(a) => &mut a[t.parse::<usize>().expect("index")],
            Value::Object(o) => o.get_mut(t).unwrap_or_else(|| panic!("no {t} in {op}")),
            _ => panic!("{op}: {t} is not a container"),
        };
    }
    let value = op["value"].clone();
    match (kind, at) {
        ("add", Value::Array(a)) if last == "-" => a.push(value),
        ("add", Value::Array(a)) => a.insert(last.parse().expect("index"), value),
        ("replace", Value::Array(a)) => a[last.parse::<usize>().expect("index")] = value,
        ("remove", Value::Array(a)) => {
            a.remove(last.parse().expect("index"));
        }
        ("add" | "replace", Value::Object(o)) => {
            assert!(
                kind == "add" || o.contains_key(last),
                "replace of a missing {op}"
            );
            o.insert(last.clone(), value);
        }
        ("remove", Value::Object(o)) => {
            o.remove(last)
                .unwrap_or_else(|| panic!("remove of a missing {op}"));
        }
        (k, _) => panic!("unsupported {k} in {op}"),
    }
}

/// The patches of a kustomization applied to `objects`.
fn apply_patches(k: &Value, objects: &mut [Value]) {
    for p in k["patches"].as_array().cloned().unwrap_or_default() {
        let target = &p["target"];
        let ops = parse_documents(p["patch"].as_str().expect("an inline JSON patch"))
            .expect("the patch parses");
        let mut hit = 0;
        for o in objects.iter_mut() {
            if o["kind"] == target["kind"] && o["metadata"]["name"] == target["name"] {
                for op in ops[0].as_array().expect("operations") {
                    patch(o, op);
                }
                hit += 1;
            }
        }
        assert_eq!(hit, 1, "a patch names one object: {target}");
    }
}

/// What kustomize renders from `dir`: resources (files and folders), components, patches
/// and the namespace.
fn render(dir: &Path) -> Vec<Value> {
    let k = documents(&dir.join("kustomization.yaml")).remove(0);
    let mut objects = Vec::new();
    for r in strings(&k["resources"]) {
        let path = dir.join(&r);
        if path.is_dir() {
            objects.extend(render(&path));
        } else {
            objects.extend(documents(&path));
        }
    }
    for c in strings(&k["components"]) {
        let path = dir.join(&c);
        let component = documents(&path.join("kustomization.yaml")).remove(0);
        assert_eq!(component["kind"], "Component", "{c}");
        for r in strings(&component["resources"]) {
            objects.extend(documents(&path.join(r)));
        }
        apply_patches(&component, &mut objects);
    }
    apply_patches(&k, &mut objects);
    if let Some(ns) = k["namespace"].as_str() {
        for o in &mut objects {
            if !CLUSTER_SCOPED.contains(&o["kind"].as_str().unwrap_or_default()) {
                o["metadata"]["namespace"] = Value::from(ns);
            }
        }
    }
    objects
}

fn identity(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_owned(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The rendered objects by (kind, name); checked against `kubectl kustomize` when kubectl is
/// installed.
fn rendered(relative: &str) -> BTreeMap<(String, String), Value> {
    let dir = root().join(relative);
    let ours: BTreeMap<(String, String), Value> = render(&dir)
        .into_iter()
        .map(|o| (identity(&o), o))
        .collect();
    match std::process::Command::new("kubectl")
        .args(["kustomize"])
        .arg(&dir)
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let theirs: BTreeMap<(String, String), Value> = parse_documents(&text)
                .expect("kubectl's output parses")
                .into_iter()
                .map(|o| (identity(&o), o))
                .collect();
            assert_eq!(
                ours.keys().collect::<Vec<_>>(),
                theirs.keys().collect::<Vec<_>>(),
                "{relative}: the same objects as kubectl kustomize"
            );
            for (id, o) in &ours {
                assert_eq!(
                    o, &theirs[id],
                    "{relative}: {id:?} as kubectl kustomize renders it"
                );
            }
        }
        Ok(out) => panic!(
            "kubectl kustomize {relative} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!(
            "kubectl is not installed: {relative} is checked as this test renders it, not compared with kubectl kustomize"
        ),
    }
    ours
}

fn of_kind<'a>(all: &'a BTreeMap<(String, String), Value>, kind: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|((k, _), _)| k == kind)
        .map(|(_, v)| v)
        .collect()
}

fn pod_labels(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["metadata"]["labels"]
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1);
    &containers[0]
}

/// `--flag=value` arguments of a Deployment's container, in order.
fn args(deployment: &Value) -> Vec<(String, String)> {
    strings(&container(deployment)["args"])
        .into_iter()
        .map(|a| {
            let (k, v) = a.split_once('=').unwrap_or((&a, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn flag(deployment: &Value, name: &str) -> Option<String> {
    args(deployment)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The Deployment whose pods `selector` selects (exactly one).
fn selected<'a>(all: &'a BTreeMap<(String, String), Value>, selector: &Value) -> &'a Value {
    let found: Vec<&Value> = of_kind(all, "Deployment")
        .into_iter()
        .filter(|d| selects(selector, pod_labels(d)))
        .collect();
    assert_eq!(found.len(), 1, "{selector} selects one Deployment");
    found[0]
}

/// Every Deployment of a shape: hardened as the base's, its Services and flags consistent.
fn check_deployments(all: &BTreeMap<(String, String), Value>) {
    let help = kartograf(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for d in of_kind(all, "Deployment") {
        let name = d["metadata"]["name"].clone();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = container(d);
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{name}");
        assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
        assert!(selects(
            &d["spec"]["selector"]["matchLabels"],
            pod_labels(d)
        ));
        for (flag, _) in args(d) {
            assert!(
                help.split(|c: char| c.is_whitespace() || c == ',' || c == '=')
                    .any(|w| w == flag),
                "{name}: {flag} is not in `serve --help`"
            );
        }
        // Every mount names a volume, every secret or config map volume an object of the
        // shape (or a Secret the shape documents as created beside it: kartograf-tls).
        let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
        for m in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let v = volumes
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap_or_else(|| panic!("{name}: mount {m} has a volume"));
            // A Secret cert-manager writes for a Certificate of the shape is there too.
            let issued = |secret: &str| {
                of_kind(all, "Certificate")
                    .iter()
                    .any(|c| c["spec"]["secretName"] == secret)
            };
            if let Some(secret) = v["secret"]["secretName"].as_str()
                && secret != "kartograf-tls"
                && !issued(secret)
            {
                assert!(
                    all.contains_key(&("Secret".into(), secret.into())),
                    "{secret}"
                );
            }
            if let Some(map) = v["configMap"]["name"].as_str() {
                assert!(all.contains_key(&("ConfigMap".into(), map.into())), "{map}");
            }
        }
    }
    for s in of_kind(all, "Service") {
        let d = selected(all, &s["spec"]["selector"]);
        let ports: BTreeSet<String> = container(d)["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        for p in s["spec"]["ports"].as_array().expect("ports") {
            let target = p["targetPort"].as_str().expect("a named target port");
            assert!(ports.contains(target), "{}: {p}", s["metadata"]["name"]);
        }
    }
}

/// The path of the file `key` of the volume of `source` ("secret"/"configMap") named
/// `object`, as the container mounts it.
fn mounted(deployment: &Value, source: &str, object: &str, key: &str) -> String {
    let name_field = if source == "secret" {
        "secretName"
    } else {
        "name"
    };
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v[source][name_field] == object)
        .unwrap_or_else(|| panic!("a volume of {source} {object}"))
        .clone();
    let mount = container(deployment)["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap_or_else(|| panic!("{object} is mounted"))
        .clone();
    assert_eq!(mount["readOnly"], true);
    format!("{}/{key}", mount["mountPath"].as_str().expect("mountPath"))
}

/// An aggregator holds no Kubernetes credentials: its service account mounts no token and
/// no binding names it.
fn holds_no_credentials(all: &BTreeMap<(String, String), Value>, aggregator: &Value) {
    let pod = &aggregator["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let account = pod["serviceAccountName"].as_str().expect("its own account");
    let sa = &all[&("ServiceAccount".into(), account.into())];
    assert_eq!(sa["automountServiceAccountToken"], false);
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        for b in of_kind(all, kind) {
            for s in b["subjects"].as_array().cloned().unwrap_or_default() {
                assert_ne!(
                    s["name"], account,
                    "{account} is bound in {}",
                    b["metadata"]["name"]
                );
            }
        }
    }
    assert!(flag(aggregator, "--manifests").is_none());
    assert!(flag(aggregator, "--namespace").is_none());
}

#[test]
fn namespace_shards_behind_an_aggregator() {
    let all = rendered("examples/deploy-shards");
    check_deployments(&all);
    let deployments = of_kind(&all, "Deployment");
    let aggregators: Vec<&Value> = deployments
        .iter()
        .copied()
        .filter(|d| args(d).iter().any(|(k, _)| k == "--upstream"))
        .collect();
    assert_eq!(aggregators.len(), 1);
    let aggregator = aggregators[0];
    holds_no_credentials(&all, aggregator);
    // Clients reach the aggregator through the base's Service.
    let front = &all[&("Service".into(), "kartograf".into())];
    assert!(std::ptr::eq(
        selected(&all, &front["spec"]["selector"]),
        aggregator
    ));

    // Every upstream is the Service of one shard, at its gRPC port; every shard is one.
    let shards: Vec<&Value> = deployments
        .iter()
        .copied()
        .filter(|d| !std::ptr::eq(*d, aggregator))
        .collect();
    assert!(shards.len() >= 2);
    let mut followed = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (k, v) in args(aggregator) {
        if k != "--upstream" {
            continue;
        }
        let upstream = parse_flag(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(
            names.insert(upstream.name.clone()),
            "{v}: a name given twice"
        );
        let rest = upstream
            .url
            .strip_prefix("http://")
            .expect("in-cluster http");
        let (host, port) = rest.split_once(':').expect("host:port");
        let service = &all[&("Service".into(), host.to_owned())];
        let grpc = service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == "grpc")
            .expect("a grpc port")
            .clone();
        assert_eq!(grpc["port"].to_string(), port, "{v}");
        let shard = selected(&all, &service["spec"]["selector"]);
        assert!(!std::ptr::eq(shard, aggregator));
        // The aggregator lets it speak for the cluster its graphs name (else it refuses them).
        let cluster = flag(shard, "--cluster-name").expect("a cluster name");
        assert!(
            upstream.name == cluster || upstream.clusters.contains(&cluster),
            "{v}: may not speak for cluster {cluster}"
        );
        followed.insert(
            shard["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    let shard_names: BTreeSet<String> = shards
        .iter()
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(followed, shard_names, "every shard is followed, once");

    // Shards split namespaces and name one cluster; they read the API as the base does.
    let binding = &all[&("ClusterRoleBinding".into(), "kartograf".into())];
    let mut namespaces = BTreeSet::new();
    let mut clusters = BTreeSet::new();
    for shard in &shards {
        let ns = flag(shard, "--namespace").expect("a shard reads one namespace");
        assert!(namespaces.insert(ns.clone()), "{ns} is read by two shards");
        clusters.insert(flag(shard, "--cluster-name").expect("a cluster name"));
        let account = &shard["spec"]["template"]["spec"]["serviceAccountName"];
        assert_eq!(&binding["subjects"][0]["name"], account);
    }
    assert_eq!(
        clusters.len(),
        1,
        "shards of one cluster name it alike: {clusters:?}"
    );

    // Only the aggregator may call the shards' gRPC port; the aggregator calls only them.
    let policies = of_kind(&all, "NetworkPolicy");
    let on_shards: Vec<&&Value> = policies
        .iter()
        .filter(|p| {
            shards
                .iter()
                .any(|s| selects(&p["spec"]["podSelector"]["matchLabels"], pod_labels(s)))
        })
        .collect();
    assert_eq!(on_shards.len(), 1);
    let policy = on_shards[0];
    assert!(
        shards
            .iter()
            .all(|s| selects(&policy["spec"]["podSelector"]["matchLabels"], pod_labels(s)))
    );
    assert!(!selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        pod_labels(aggregator)
    ));
    for rule in policy["spec"]["ingress"].as_array().expect("ingress") {
        let ports: Vec<String> = rule["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| p["port"].as_str().unwrap_or_default().to_owned())
            .collect();
        if ports.contains(&"grpc".to_owned()) {
            let from = rule["from"].as_array().expect("gRPC only from some pods");
            assert_eq!(from.len(), 1);
            let peers = &from[0]["podSelector"]["matchLabels"];
            assert!(selects(peers, pod_labels(aggregator)));
            assert!(shards.iter().all(|s| !selects(peers, pod_labels(s))));
        } else {
            assert_eq!(ports, ["admin"], "only the admin port is open to all");
        }
    }
    let own = policies
        .iter()
        .find(|p| {
            selects(
                &p["spec"]["podSelector"]["matchLabels"],
                pod_labels(aggregator),
            )
        })
        .expect("a policy on the aggregator");
    let egress = own["spec"]["egress"].as_array().expect("egress");
    let to_shards = egress
        .iter()
        .find(|r| r["to"].is_array())
        .expect("egress to the shards");
    let peers = &to_shards["to"][0]["podSelector"]["matchLabels"];
    assert!(shards.iter().all(|s| selects(peers, pod_labels(s))));
    assert_eq!(to_shards["ports"][0]["port"], 50051);
}

#[test]
fn one_kartograf_per_cluster_behind_a_fleet_hub() {
    let member = rendered("examples/deploy-fleet-member");
    let hub = rendered("deploy/fleet-hub");
    check_deployments(&member);
    check_deployments(&hub);

    // The member: named, TLS and tokens from mounted Secrets, probed on the admin port
    // (kubelet gRPC probes speak no TLS), exposed for the hub.
    let server = &member[&("Deployment".into(), "kartograf".into())];
    let cluster = flag(server, "--cluster-name").expect("the cluster's name");
    assert_eq!(
        flag(server, "--tls-cert").as_deref(),
        Some(mounted(server, "secret", "kartograf-tls", "tls.crt").as_str())
    );
    assert_eq!(
        flag(server, "--tls-key").as_deref(),
        Some(mounted(server, "secret", "kartograf-tls", "tls.key").as_str())
    );
    let tokens_path = flag(server, "--auth-tokens").expect("tokens");
    assert_eq!(
        tokens_path,
        mounted(server, "secret", "kartograf-fleet-tokens", "tokens")
    );
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        let p = &container(server)[probe];
        assert!(p["grpc"].is_null(), "{probe}: no gRPC probe over TLS");
        assert_eq!(p["httpGet"]["port"], "admin", "{probe}");
    }
    assert_eq!(
        container(server)["readinessProbe"]["httpGet"]["path"],
        "/readyz"
    );
    let exposed = &member[&("Service".into(), "kartograf-fleet".into())];
    assert!(std::ptr::eq(
        selected(&member, &exposed["spec"]["selector"]),
        server
    ));

    // The hub: follows the members listed in its upstreams file, with the CA and tokens of
    // its Secret; holds no Kubernetes credentials and no RBAC at all.
    let aggregator = &hub[&("Deployment".into(), "kartograf-aggregator".into())];
    holds_no_credentials(&hub, aggregator);
    for kind in ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"] {
        assert!(of_kind(&hub, kind).is_empty(), "the hub needs no {kind}");
    }
    let file_path = flag(aggregator, "--upstreams").expect("an upstreams file");
    assert_eq!(
        file_path,
        mounted(
            aggregator,
            "configMap",
            "kartograf-upstreams",
            "upstreams.yaml"
        )
    );
    let config_map = &hub[&("ConfigMap".into(), "kartograf-upstreams".into())];
    let text = config_map["data"]["upstreams.yaml"]
        .as_str()
        .expect("the file");
    let upstreams = parse_file(text, Path::new(&file_path)).expect("the server parses it");
    assert!(upstreams.len() >= 2);
    let secret = &hub[&("Secret".into(), "kartograf-upstream-credentials".into())];
    let key_of = |path: &Path| -> String {
        let prefix = mounted(aggregator, "secret", "kartograf-upstream-credentials", "");
        let key = path
            .to_str()
            .and_then(|p| p.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{} is in the credentials Secret", path.display()));
        assert!(
            secret["stringData"][key].is_string(),
            "the Secret holds {key}"
        );
        key.to_owned()
    };
    for u in &upstreams {
        assert!(
            u.url.starts_with("https://"),
            "{}: TLS across clusters",
            u.name
        );
        key_of(u.ca_file.as_deref().expect("a CA"));
        key_of(u.token_file.as_deref().expect("a token"));
    }
    // The member's token file lets the hub's token for it call Watch and Resolve.
    let listed = upstreams
        .iter()
        .find(|u| u.name == cluster)
        .unwrap_or_else(|| panic!("the hub follows the member {cluster}"));
    let hub_token = secret["stringData"][key_of(listed.token_file.as_deref().expect("token"))]
        .as_str()
        .expect("a token")
        .trim()
        .to_owned();
    let member_secret = &member[&("Secret".into(), "kartograf-fleet-tokens".into())];
    let tokens = kartograf::server::Tokens::load(&temp_file(
        "fleet-tokens",
        member_secret["stringData"]["tokens"]
            .as_str()
            .expect("tokens"),
    ))
    .expect("the member parses its token file");
    let header = format!("Bearer {hub_token}");
    for method in ["Watch", "Resolve"] {
        tokens
            .authorize(
                &format!("/kartograf.v1.WorkloadResolver/{method}"),
                Some(header.as_bytes()),
            )
            .unwrap_or_else(|e| panic!("the hub's token may call {method}: {e}"));
    }
    // The hub calls out to the members' gRPC port (and DNS) only.
    let policy = of_kind(&hub, "NetworkPolicy")
        .into_iter()
        .find(|p| {
            selects(
                &p["spec"]["podSelector"]["matchLabels"],
                pod_labels(aggregator),
            )
        })
        .expect("a policy on the hub");
    let ports: BTreeSet<String> = policy["spec"]["egress"]
        .as_array()
        .expect("egress")
        .iter()
        .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| p["port"].to_string())
        .collect();
    assert_eq!(ports, BTreeSet::from(["50051".into(), "53".into()]));
    let pdb = &hub[&("PodDisruptionBudget".into(), "kartograf-aggregator".into())];
    assert!(selects(
        &pdb["spec"]["selector"]["matchLabels"],
        pod_labels(aggregator)
    ));
}

#[test]
fn the_hub_kustomization_lists_exactly_its_files() {
    let dir = root().join("deploy/fleet-hub");
    let k = documents(&dir.join("kustomization.yaml")).remove(0);
    let listed: BTreeSet<String> = strings(&k["resources"]).into_iter().collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("deploy/fleet-hub")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|n| n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present);
    for component in ["deploy/shards", "deploy/fleet-member"] {
        let dir = root().join(component);
        let k = documents(&dir.join("kustomization.yaml")).remove(0);
        let listed: BTreeSet<String> = strings(&k["resources"]).into_iter().collect();
        let present: BTreeSet<String> = std::fs::read_dir(&dir)
            .expect("component dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
            .filter(|n| n != "kustomization.yaml")
            .collect();
        assert_eq!(listed, present, "{component}");
    }
}

/// The renderer above applies what the shapes use exactly as kustomize does.
#[test]
fn json_patches_apply_like_kustomize() {
    let mut doc: Value = serde_json::json!({"a": {"b/c": [1, 2]}, "d": 1});
    patch(
        &mut doc,
        &serde_json::json!({"op": "add", "path": "/a/b~1c/-", "value": 3}),
    );
    patch(
        &mut doc,
        &serde_json::json!({"op": "replace", "path": "/d", "value": 2}),
    );
    patch(
        &mut doc,
        &serde_json::json!({"op": "add", "path": "/e", "value": false}),
    );
    patch(
        &mut doc,
        &serde_json::json!({"op": "remove", "path": "/a/b~1c/0"}),
    );
    assert_eq!(
        doc,
        serde_json::json!({"a": {"b/c": [2, 3]}, "d": 2, "e": false})
    );
}

/// `deploy/policies` (docs/policies.md): the webhook overlay plus the policy file, both
/// mutating webhooks and the labelling pass's RBAC.
#[test]
fn policies_at_admission() {
    let all = rendered("examples/deploy-policies");
    check_deployments(&all);
    let d = of_kind(&all, "Deployment")[0];
    // The policy file is the ConfigMap's, mounted where --policies names it, and passes the
    // server's own checks.
    let file = flag(d, "--policies").expect("--policies");
    assert_eq!(
        mounted(d, "configMap", "kartograf-policies", "policies.yaml"),
        file
    );
    let map = &all[&("ConfigMap".to_owned(), "kartograf-policies".to_owned())];
    let text = map["data"]["policies.yaml"]
        .as_str()
        .expect("policies.yaml");
    let set = kartograf::policy::PolicySet::parse(text).expect("the shipped policies load");
    assert!(set.len() >= 2, "a KAI and a Kueue example");
    assert_eq!(flag(d, "--label-pods").as_deref(), Some("true"));
    // Both webhooks: never blocking, bounded, not in kube-system or kartograf's namespace,
    // reinvoked, on the webhook Service's routes.
    let hooks = of_kind(&all, "MutatingWebhookConfiguration");
    let policies = hooks
        .iter()
        .find(|h| h["metadata"]["name"] == "kartograf-policies")
        .expect("kartograf-policies");
    let mut paths = BTreeSet::new();
    for w in policies["webhooks"].as_array().expect("webhooks") {
        let name = w["name"].clone();
        assert_eq!(w["failurePolicy"], "Ignore", "{name}");
        assert_eq!(w["sideEffects"], "None", "{name}");
        assert_eq!(w["reinvocationPolicy"], "IfNeeded", "{name}");
        assert_eq!(strings(&w["admissionReviewVersions"]), ["v1"], "{name}");
        let timeout = w["timeoutSeconds"].as_u64().expect("a timeout");
        assert!((1..=5).contains(&timeout), "{name}");
        let excluded = &w["namespaceSelector"]["matchExpressions"][0];
        assert_eq!(excluded["key"], "kubernetes.io/metadata.name", "{name}");
        assert_eq!(excluded["operator"], "NotIn", "{name}");
        let values = strings(&excluded["values"]);
        assert!(
            values.contains(&"kube-system".to_owned()) && values.contains(&"kartograf".to_owned())
        );
        let svc = &w["clientConfig"]["service"];
        assert!(
            all.contains_key(&(
                "Service".into(),
                svc["name"].as_str().unwrap_or_default().into()
            )),
            "{name}: {svc}"
        );
        paths.insert(svc["path"].as_str().unwrap_or_default().to_owned());
        // Every workload rule names kinds the catalog defines.
        if svc["path"] == "/mutate/workloads" {
            for r in w["rules"].as_array().expect("rules") {
                for group in strings(&r["apiGroups"]) {
                    for plural in strings(&r["resources"]) {
                        let defined = crate::common::catalog().definitions().any(|def| {
                            def.root_kind.group == group
                                && crate::deploy::is_plural_of(&plural, &def.root_kind.kind)
                        });
                        assert!(defined, "{group}/{plural} has no definition");
                    }
                }
            }
        } else {
            assert_eq!(timeout, 2, "pod creation waits at most 2 s");
        }
    }
    assert_eq!(
        paths,
        BTreeSet::from([
            kartograf::webhook::mutate::PODS.to_owned(),
            kartograf::webhook::mutate::WORKLOADS.to_owned()
        ])
    );
    // The labelling pass may patch pods and selectors read namespaces, bound to the server's
    // service account; nothing more.
    let role = &all[&("ClusterRole".to_owned(), "kartograf-policies".to_owned())];
    assert_eq!(
        role["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}
        ])
    );
    let binding = &all[&(
        "ClusterRoleBinding".to_owned(),
        "kartograf-policies".to_owned(),
    )];
    assert_eq!(
        binding["subjects"][0]["name"],
        d["spec"]["template"]["spec"]["serviceAccountName"]
    );
}

/// `deploy/webhook` as a component (`examples/deploy-webhook`): the Karta webhooks on the
/// webhook Service, the Deployment serving them with the certificate cert-manager issues.
#[test]
fn karta_webhooks() {
    let all = rendered("examples/deploy-webhook");
    check_deployments(&all);
    let d = of_kind(&all, "Deployment")[0];
    assert_eq!(flag(d, "--karta-status").as_deref(), Some("true"));
    assert!(flag(d, "--webhook-listen").is_some());
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        for hook in of_kind(&all, kind) {
            for w in hook["webhooks"].as_array().expect("webhooks") {
                let svc = w["clientConfig"]["service"]["name"]
                    .as_str()
                    .unwrap_or_default();
                assert!(all.contains_key(&("Service".into(), svc.into())), "{svc}");
            }
        }
    }
}
