//! The deployment manifests (`deploy/`) and the `Dockerfile`: parsed and checked against the
//! invariants the deployment relies on (least-privilege RBAC covering exactly the kinds the
//! catalog makes kartograf watch, a hardened pod, consistent names and selectors, a CRD that
//! keeps every field of every catalog definition, flags the binary accepts).

use crate::common::*;
use kartograf::definition::catalog::{embedded_files, load_path};
use kartograf::manifest::parse_documents;
use kartograf::source::kube::wanted_kinds;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn deploy_dir() -> PathBuf {
    root().join("deploy")
}

/// Every manifest file of `deploy/` (but the kustomization) with its documents.
fn manifests() -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir()).expect("deploy/ exists") {
        let path = entry.expect("entry").path();
        let name = file_name(&path);
        if name == "kustomization.yaml" || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let docs = parse_documents(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!docs.is_empty(), "{name} holds no document");
        out.insert(name, docs);
    }
    out
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// The only document of `kind` across `deploy/`.
fn only(kind: &str) -> Value {
    let found: Vec<Value> = manifests()
        .into_values()
        .flatten()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in deploy/");
    found.into_iter().next().unwrap_or_default()
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

fn labels(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// True when every `selector` label is among `labels` with the same value.
pub(crate) fn selects(selector: &Value, labels_: &Value) -> bool {
    let sel = labels(selector);
    !sel.is_empty()
        && sel
            .iter()
            .all(|(k, v)| labels_.get(k).is_some_and(|l| l == v))
}

#[test]
fn kustomization_lists_exactly_the_manifest_files() {
    let text = std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).expect("exists");
    let docs = parse_documents(&text).expect("valid YAML");
    let k = &docs[0];
    assert_eq!(k["kind"], "Kustomization");
    assert_eq!(k["namespace"], "kartograf");
    let listed: BTreeSet<String> = strings(&k["resources"]).into_iter().collect();
    let present: BTreeSet<String> = manifests().into_keys().collect();
    assert_eq!(listed, present);
    assert_eq!(
        strings(&k["resources"]).len(),
        listed.len(),
        "no file listed twice"
    );
}

#[test]
fn namespaced_objects_live_in_the_kartograf_namespace() {
    assert_eq!(only("Namespace")["metadata"]["name"], "kartograf");
    let cluster_scoped = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
    ];
    for (file, docs) in manifests() {
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            let ns = &doc["metadata"]["namespace"];
            if cluster_scoped.contains(&kind) {
                assert!(ns.is_null(), "{file}: {kind} is cluster-scoped");
            } else {
                assert_eq!(ns, "kartograf", "{file}: {kind}");
            }
        }
    }
}

/// `(apiGroup, resource)` pairs and non-resource URLs a ClusterRole grants, after checking
/// every rule is read-only and wildcard-free.
fn granted(role: &Value) -> (BTreeSet<(String, String)>, BTreeSet<String>) {
    let mut resources = BTreeSet::new();
    let mut urls = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let verbs = strings(&rule["verbs"]);
        assert!(!verbs.is_empty(), "{rule}");
        for verb in &verbs {
            assert!(
                ["get", "list", "watch"].contains(&verb.as_str()),
                "write or wildcard verb `{verb}` in {rule}"
            );
        }
        assert!(rule["resourceNames"].is_null(), "{rule}");
        let groups = strings(&rule["apiGroups"]);
        let res = strings(&rule["resources"]);
        let nonres = strings(&rule["nonResourceURLs"]);
        assert!(
            res.is_empty() != nonres.is_empty(),
            "a rule grants either resources or URLs: {rule}"
        );
        for url in nonres {
            assert_eq!(verbs, ["get"], "URLs are read with get only: {rule}");
            urls.insert(url);
        }
        for g in &groups {
            assert_ne!(g, "*", "wildcard group in {rule}");
        }
        for r in &res {
            assert!(!r.contains('*'), "wildcard resource in {rule}");
            assert!(
                !["secrets", "configmaps"].contains(&r.as_str()),
                "`{r}` must never be readable: {rule}"
            );
            assert_eq!(r, &r.to_lowercase(), "resources are lowercase plurals");
            for g in &groups {
                assert!(
                    resources.insert((g.clone(), r.clone())),
                    "{g}/{r} granted twice"
                );
            }
        }
    }
    (resources, urls)
}

/// Whether `plural` is the plural of `kind` (regular English plurals, as CRDs use).
pub(crate) fn is_plural_of(plural: &str, kind: &str) -> bool {
    let kind = kind.to_lowercase();
    plural == format!("{kind}s")
        || plural == format!("{kind}es")
        || kind
            .strip_suffix('y')
            .is_some_and(|stem| plural == format!("{stem}ies"))
}

#[test]
fn cluster_role_reads_exactly_the_watched_kinds() {
    let role = only("ClusterRole");
    let (resources, urls) = granted(&role);
    let wanted = wanted_kinds(catalog());
    assert!(wanted.contains_key(&(String::new(), "Pod".to_owned())));
    let mut covered = BTreeSet::new();
    let mut missing = Vec::new();
    for (group, kind) in wanted.keys() {
        let rule: Vec<&(String, String)> = resources
            .iter()
            .filter(|(g, r)| g == group && is_plural_of(r, kind))
            .collect();
        match rule.as_slice() {
            [one] => {
                covered.insert((*one).clone());
            }
            _ => missing.push(format!("{group}/{kind}: {rule:?}")),
        }
    }
    assert!(missing.is_empty(), "not exactly one rule for: {missing:?}");
    let extra: BTreeSet<(String, String)> = [
        ("run.ai", "kartas"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ]
    .iter()
    .map(|(g, r)| ((*g).to_owned(), (*r).to_owned()))
    .collect();
    for e in &extra {
        assert!(resources.contains(e), "{e:?} granted");
    }
    let unexplained: Vec<_> = resources
        .difference(&covered)
        .filter(|r| !extra.contains(r))
        .collect();
    assert!(
        unexplained.is_empty(),
        "granted but not watched: {unexplained:?}"
    );
    let discovery: BTreeSet<String> = ["/api", "/api/*", "/apis", "/apis/*"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(urls, discovery);
}

#[test]
fn the_role_is_bound_to_the_deployment_service_account() {
    let binding = only("ClusterRoleBinding");
    let role = only("ClusterRole");
    let sa = only("ServiceAccount");
    let pod = &only("Deployment")["spec"]["template"]["spec"];
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], sa["metadata"]["name"]);
    assert_eq!(subjects[0]["namespace"], sa["metadata"]["namespace"]);
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
}

#[test]
fn the_deployment_is_hardened() {
    let deployment = only("Deployment");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(0) >= 15);
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["runAsUser"], 65532);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    let containers = pod["containers"].as_array().expect("containers");
    assert!(!containers.is_empty());
    let init = pod["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in containers.iter().chain(init.iter()) {
        let name = &c["name"];
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{name}");
        assert_eq!(sc["runAsUser"], 65532, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_ne!(sc["privileged"], true, "{name}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{name}");
        assert!(sc["capabilities"]["add"].is_null(), "{name}");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        for part in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][part][resource].is_string(),
                    "{name}: resources.{part}.{resource}"
                );
            }
        }
        assert!(
            c["image"].as_str().is_some_and(|i| i.contains("kartograf")),
            "{name}"
        );
    }
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    let terms = anti.as_array().expect("preferred anti-affinity");
    assert!(terms.iter().any(|t| {
        t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
            && selects(
                &t["podAffinityTerm"]["labelSelector"]["matchLabels"],
                &spec["template"]["metadata"]["labels"],
            )
    }));
    assert!(selects(
        &spec["selector"]["matchLabels"],
        &spec["template"]["metadata"]["labels"]
    ));
}

/// The kartograf container of the Deployment.
fn server_container() -> Value {
    let deployment = only("Deployment");
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(containers.len(), 1, "one container");
    containers.into_iter().next().unwrap_or_default()
}

/// `--flag=value` arguments of the server container.
fn flags() -> BTreeMap<String, String> {
    strings(&server_container()["args"])
        .into_iter()
        .map(|a| {
            let (k, v) = a.split_once('=').unwrap_or((&a, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn ports_probes_and_flags_agree() {
    let c = server_container();
    let ports: BTreeMap<String, u64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("named port").to_owned(),
                p["containerPort"].as_u64().expect("number"),
            )
        })
        .collect();
    assert_eq!(
        ports,
        BTreeMap::from([("admin".to_owned(), 9090), ("grpc".to_owned(), 50051)])
    );
    let flags = flags();
    assert_eq!(flags["--listen"], "0.0.0.0:50051");
    assert_eq!(flags["--admin-listen"], "0.0.0.0:9090");
    assert_eq!(flags["--log-format"], "json");
    let readiness = &c["readinessProbe"]["grpc"];
    assert_eq!(readiness["port"], 50051);
    assert!(
        readiness["service"].is_null(),
        "readiness reads the overall status"
    );
    let liveness = &c["livenessProbe"]["grpc"];
    assert_eq!(liveness["port"], 50051);
    assert_eq!(liveness["service"], "liveness");
    if !c["startupProbe"].is_null() {
        assert_eq!(c["startupProbe"]["grpc"]["service"], "liveness");
    }
}

#[test]
fn the_definitions_config_map_is_mounted_at_the_definitions_flag() {
    let c = server_container();
    let pod = &only("Deployment")["spec"]["template"]["spec"];
    let config_map = only("ConfigMap");
    let dir = flags()["--definitions"].clone();
    let mount = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == dir.as_str())
        .cloned()
        .expect("a volume is mounted at --definitions");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .cloned()
        .expect("the mounted volume exists");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
}

#[test]
fn service_and_disruption_budget_select_the_pods() {
    let deployment = only("Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let service = only("Service");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(selects(&service["spec"]["selector"], pod_labels));
    let container_ports: BTreeSet<String> = server_container()["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let ports = service["spec"]["ports"].as_array().expect("ports");
    let names: BTreeSet<String> = ports
        .iter()
        .map(|p| p["name"].as_str().expect("named").to_owned())
        .collect();
    assert_eq!(names, container_ports);
    for p in ports {
        let target = p["targetPort"].as_str().expect("named target port");
        assert!(container_ports.contains(target), "{p}");
    }
    let grpc = ports.iter().find(|p| p["name"] == "grpc").expect("grpc");
    assert_eq!(grpc["appProtocol"], "grpc");
    assert_eq!(grpc["port"], 50051);
    let pdb = only("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels));
    let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(0);
    assert!(replicas > 1, "minAvailable 1 still lets one pod drain");
}

/// Checks `value` against a structural OpenAPI schema the way the API server would: types,
/// required fields, and no field outside the schema (it would be pruned).
fn conforms(value: &Value, schema: &Value, at: &str, problems: &mut Vec<String>) {
    conforms_at(value, schema, at, true, problems);
}

fn conforms_at(value: &Value, schema: &Value, at: &str, top: bool, problems: &mut Vec<String>) {
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    let ty = schema["type"].as_str().unwrap_or("");
    let type_ok = match ty {
        "" => preserve,
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        other => {
            problems.push(format!("{at}: unknown schema type {other}"));
            true
        }
    };
    if !type_ok {
        problems.push(format!("{at}: expected {ty}, found {value}"));
        return;
    }
    for field in strings(&schema["required"]) {
        if value.get(&field).is_none() {
            problems.push(format!("{at}: missing required `{field}`"));
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            conforms_at(
                item,
                &schema["items"],
                &format!("{at}[{i}]"),
                false,
                problems,
            );
        }
    }
    if let Some(fields) = value.as_object() {
        for (k, v) in fields {
            let sub = if let Some(p) = schema["properties"].get(k) {
                p
            } else if schema["additionalProperties"].is_object() {
                &schema["additionalProperties"]
            } else {
                if !preserve {
                    problems.push(format!("{at}.{k}: not in the schema (would be pruned)"));
                }
                continue;
            };
            if top && k == "metadata" {
                continue; // ObjectMeta: the API server's own schema.
            }
            conforms_at(v, sub, &format!("{at}.{k}"), false, problems);
        }
    }
}

/// The schema of the served `v1alpha1` version of the Karta CRD.
fn karta_schema() -> Value {
    let crd = only("CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "kartas.run.ai");
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "run.ai");
    assert_eq!(spec["scope"], "Cluster");
    assert_eq!(spec["names"]["kind"], "Karta");
    assert_eq!(spec["names"]["plural"], "kartas");
    let versions = spec["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha1");
    assert_eq!(versions[0]["served"], true);
    assert_eq!(versions[0]["storage"], true);
    versions[0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn the_karta_crd_keeps_every_field_of_every_definition() {
    let schema = karta_schema();
    let mut texts: Vec<(String, String)> = embedded_files()
        .iter()
        .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
        .collect();
    for (key, text) in config_map_definitions() {
        texts.push((format!("configmap:{key}"), text));
    }
    let mut checked = 0;
    let mut problems = Vec::new();
    for (name, text) in &texts {
        for doc in parse_documents(text).expect("valid YAML") {
            conforms(&doc, &schema, name, &mut problems);
            checked += 1;
        }
    }
    assert!(checked > embedded_files().len() / 2);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_structural_check_catches_pruned_and_mistyped_fields() {
    let schema = karta_schema();
    let (_, text) = embedded_files()[0];
    let mut doc = parse_documents(text).expect("valid")[0].clone();
    doc["spec"]["structureDefinition"]["rootComponent"]["notAField"] = Value::Bool(true);
    doc["spec"]["structureDefinition"]["rootComponent"]["name"] = Value::from(7);
    let mut problems = Vec::new();
    conforms(&doc, &schema, "doc", &mut problems);
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// `(key, text)` of every file in the definitions ConfigMap.
fn config_map_definitions() -> Vec<(String, String)> {
    let data = labels(&only("ConfigMap")["data"]);
    assert!(!data.is_empty(), "the ConfigMap holds a definition");
    data.into_iter()
        .map(|(k, v)| (k, v.as_str().expect("text").to_owned()))
        .collect()
}

#[test]
fn the_config_map_definitions_pass_check_and_add_a_kind() {
    let files = config_map_definitions();
    let (first, _) = &files[0];
    let dir = temp_file(first, "")
        .parent()
        .expect("temp dir")
        .to_path_buf();
    for (key, text) in &files {
        assert!(key.ends_with(".yaml"), "{key} is read as a definition file");
        std::fs::write(dir.join(key), text).expect("written");
    }
    let out = kartograf(&["check", dir.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (defs, errors) = load_path(&dir, Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(defs.len(), files.len());
    for def in defs {
        assert!(stdout.contains(&def.name), "{stdout}");
        let gvk = &def.root_kind;
        assert!(
            catalog().lookup(&gvk.api_version(), &gvk.kind).is_none(),
            "the example adds a kind ({gvk}) rather than replacing a catalog one"
        );
    }
}

/// Flags named in the Deployment must exist. `--admin-listen` and `--log-format` come from
/// other branches; this test fails until they are merged.
#[test]
fn every_deployment_flag_is_accepted_by_serve() {
    let out = kartograf(&["serve", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<String> = flags()
        .into_keys()
        .filter(|f| {
            !help
                .split(|c: char| c.is_whitespace() || c == ',' || c == '=')
                .any(|w| w == f)
        })
        .collect();
    assert!(missing.is_empty(), "not in `serve --help`: {missing:?}");
}

#[test]
fn the_dockerfile_builds_locked_and_runs_as_non_root() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let stages: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "multi-stage");
    let last = &lines[stages[stages.len() - 1]..];
    assert!(
        !last.iter().any(|l| l.contains("cargo")),
        "the runtime stage does not build"
    );
    assert!(last.contains(&"USER 65532:65532"));
    assert!(last.contains(&"EXPOSE 50051 9090"));
    assert_eq!(
        last.iter().filter(|l| l.starts_with("ENTRYPOINT")).count(),
        1
    );
    assert!(last.contains(&r#"ENTRYPOINT ["kartograf", "serve"]"#));
    let builds: Vec<&&str> = lines.iter().filter(|l| l.contains("cargo build")).collect();
    assert!(!builds.is_empty());
    for b in builds {
        assert!(b.contains("--release") && b.contains("--locked"), "{b}");
    }
    // The dependency layer builds the real manifest against stubs: every target Cargo.toml
    // declares must get a stub file, or cargo refuses the manifest.
    for target in declared_target_files() {
        assert!(text.contains(&target), "Dockerfile stubs {target}");
    }
}

/// Paths of the bench and test targets Cargo.toml declares (`path =`, or
/// `benches/<name>.rs` when only the name is given).
fn declared_target_files() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let mut out = Vec::new();
    for section in text.split("\n[").skip(1) {
        let header = section.lines().next().unwrap_or_default();
        let field = |key: &str| {
            section.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        let dir = match header {
            "[bench]]" => "benches",
            "[test]]" => "tests",
            _ => continue,
        };
        match (field("path"), field("name")) {
            (Some(path), _) => out.push(path),
            (None, Some(name)) => out.push(format!("{dir}/{name}.rs")),
            (None, None) => {}
        }
    }
    assert!(out.len() >= 2, "found the targets: {out:?}");
    out
}

/// The one document of a YAML file below `deploy/`.
fn document(relative: &str) -> Value {
    let text = std::fs::read_to_string(deploy_dir().join(relative)).expect("readable");
    let mut docs = parse_documents(&text).unwrap_or_else(|e| panic!("{relative}: {e}"));
    assert_eq!(docs.len(), 1, "{relative} holds one document");
    docs.remove(0)
}

#[test]
fn the_prometheus_rule_holds_exactly_the_rule_file() {
    let rules = document("prometheus/rules.yaml");
    let resource = document("prometheus/prometheusrule.yaml");
    assert_eq!(resource["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(resource["kind"], "PrometheusRule");
    assert_eq!(resource["metadata"]["namespace"], "kartograf");
    assert!(rules["groups"].as_array().is_some_and(|g| g.len() >= 3));
    assert_eq!(resource["spec"]["groups"], rules["groups"]);
}

#[test]
fn the_prometheus_kustomization_lists_its_resources() {
    let dir = deploy_dir().join("prometheus");
    let k = document("prometheus/kustomization.yaml");
    assert_eq!(k["kind"], "Kustomization");
    assert_eq!(k["namespace"], "kartograf");
    let listed: BTreeSet<String> = strings(&k["resources"]).into_iter().collect();
    // Kubernetes objects (apiVersion, kind, metadata); rules.yaml and scrape-config.yaml are
    // Prometheus' own files.
    let mut objects = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("deploy/prometheus exists") {
        let path = entry.expect("entry").path();
        let name = file_name(&path);
        if name == "kustomization.yaml" || !name.ends_with(".yaml") {
            continue;
        }
        let doc = document(&format!("prometheus/{name}"));
        if doc.get("kind").is_some() && doc.get("metadata").is_some() {
            objects.insert(name);
        }
    }
    assert_eq!(listed, objects);
}

#[test]
fn prometheus_scrapes_the_admin_port_and_honours_the_join_labels() {
    let service = only("Service");
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(ports.iter().any(|p| p == "admin"), "{ports:?}");

    let monitor = document("prometheus/servicemonitor.yaml");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    let endpoints = monitor["spec"]["endpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], "admin");
    assert_eq!(endpoints[0]["path"], "/metrics");
    assert_eq!(endpoints[0]["honorLabels"], true);

    let config = document("prometheus/scrape-config.yaml");
    let jobs = config["scrape_configs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = jobs.iter().filter_map(|j| j["job_name"].as_str()).collect();
    assert_eq!(names, ["kartograf", "dcgm-exporter"]);
    for job in &jobs {
        assert_eq!(job["honor_labels"], true, "{}", job["job_name"]);
    }
    let keep = format!(
        "{};admin",
        service["metadata"]["name"].as_str().unwrap_or_default()
    );
    assert_eq!(jobs[0]["relabel_configs"][0]["regex"], keep.as_str());
}

/// The documents of one file of `deploy/metrics-auth/`.
fn metrics_auth_file(name: &str) -> Vec<Value> {
    let path = deploy_dir().join("metrics-auth").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    parse_documents(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `deploy/metrics-auth` component: the token file parses with the server's own parser and
/// holds a `metrics` token equal to the one Prometheus reads from the file its scrape config
/// names; the patch mounts that token file where `--auth-tokens` points and turns on
/// `--metrics-auth`; every flag is one `kartograf serve` accepts.
#[test]
fn the_metrics_auth_component_wires_one_token_end_to_end() {
    let kustomization = &metrics_auth_file("kustomization.yaml")[0];
    assert_eq!(kustomization["kind"], "Component");
    let mut listed = strings(&kustomization["resources"]);
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir().join("metrics-auth"))
        .expect("deploy/metrics-auth")
        .map(|e| file_name(&e.expect("entry").path()))
        .filter(|n| n != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(listed, files, "the component lists every file");

    // kartograf's token file, as the server parses it.
    let secret = &metrics_auth_file("secret-tokens.yaml")[0];
    let token_text = secret["stringData"]["tokens"]
        .as_str()
        .expect("tokens file");
    let token_file = temp_file("tokens", token_text);
    let tokens = kartograf::server::Tokens::load(&token_file).expect("the token file parses");
    // The token Prometheus sends, and where its scrape config reads it from.
    let prom_secret = &metrics_auth_file("secret-prometheus-token.yaml")[0];
    let prom_token = prom_secret["stringData"]["token"].as_str().expect("token");
    let header = format!("Bearer {prom_token}");
    tokens
        .authorize_metrics(Some(header.as_bytes()))
        .expect("Prometheus' token may read /metrics");
    assert!(
        tokens
            .authorize(
                "/kartograf.v1.WorkloadResolver/List",
                Some(header.as_bytes())
            )
            .is_err(),
        "and nothing else"
    );
    let scrape = &metrics_auth_file("configmap-prometheus-scrape.yaml")[0];
    let config = parse_documents(scrape["data"]["kartograf.yaml"].as_str().expect("config"))
        .expect("scrape config parses");
    let job = &config[0]["scrape_configs"][0];
    assert_eq!(job["metrics_path"], "/metrics");
    assert_eq!(job["authorization"]["type"], "Bearer");
    assert_eq!(
        job["authorization"]["credentials_file"],
        format!(
            "/etc/prometheus/secrets/{}/token",
            prom_secret["metadata"]["name"].as_str().expect("name")
        )
    );

    // The patch: flags, mount and volume agree with each other and with the Secret.
    let ops = parse_documents(
        kustomization["patches"][0]["patch"]
            .as_str()
            .expect("a JSON patch"),
    )
    .expect("patch parses");
    let values: Vec<&Value> = ops[0]
        .as_array()
        .expect("operations")
        .iter()
        .map(|op| &op["value"])
        .collect();
    let args: Vec<&str> = values.iter().filter_map(|v| v.as_str()).collect();
    assert!(args.contains(&"--metrics-auth"), "{args:?}");
    let tokens_flag = args
        .iter()
        .find_map(|a| a.strip_prefix("--auth-tokens="))
        .expect("--auth-tokens");
    let mount = values
        .iter()
        .find(|v| v["mountPath"].is_string())
        .expect("a volume mount");
    let volume = values
        .iter()
        .find(|v| v["secret"].is_object())
        .expect("a volume");
    assert_eq!(mount["name"], volume["name"]);
    assert_eq!(volume["secret"]["secretName"], secret["metadata"]["name"]);
    assert_eq!(
        tokens_flag,
        format!("{}/tokens", mount["mountPath"].as_str().expect("path"))
    );
    let out = kartograf(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--auth-tokens", "--metrics-auth"] {
        assert!(help.contains(flag), "{flag} not in `serve --help`");
    }
}
