//! Synthetic clusters for benchmarks and tests: N workloads across several frameworks, each
//! with the intermediates and pods its operator would create (labels, controller owner
//! references, status, container resources), deterministic from a seed.
//!
//! The generator knows nothing about frameworks: every shape comes from a template file in
//! `benches/synth/templates/*.yaml`. A template is one YAML document:
//!
//! ```yaml
//! framework: jobset
//! root:                       # the workload object (name, namespace, uid set by the generator)
//!   object: {...}
//!   children:                 # objects the operator creates, each owned (controller) by its parent
//!     - name: "{{PARENT}}-workers-{{J}}"
//!       count: "{{R-1}}"      # how many; `var` names the running index (default I)
//!       var: J
//!       set: {ROLE: workers}  # variables for this level and below (expanded per object)
//!       object: {...}
//!       children: [...]
//! ```
//!
//! Placeholders `{{X}}`, `{{X+n}}`, `{{X-n}}` are replaced in every string of `object` (a string
//! that is only a numeric placeholder becomes a number, unless written `{{X:s}}`). Variables: `R` (the workload's scale:
//! every template yields exactly `R` pods), `NAME`/`NS`/`ROOT_UID` (the root), `UID`/`SELF`
//! (this object), `PARENT`/`PARENT_UID`, `HASH` (10 hex chars per workload), `SUFFIX` (5 chars
//! per object), `NODE`, `IP`, and each level's index variable. A `set` value is expanded once
//! before `count` and `name` (so they may use it) and again for each object, after its own
//! variables, so `set: {HOST: "{{SELF}}"}` names each object itself.

#![allow(dead_code)]

use serde_json::{Map, Value as Json, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A tiny deterministic PRNG (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `len` characters of Kubernetes' random-suffix alphabet.
    pub fn suffix(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize] as char)
            .collect()
    }

    /// `len` lowercase hex digits.
    pub fn hex(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from_digit(self.below(16) as u32, 16).unwrap_or('0'))
            .collect()
    }

    /// An RFC 4122-shaped uid.
    pub fn uid(&mut self) -> String {
        format!(
            "{}-{}-4{}-8{}-{}",
            self.hex(8),
            self.hex(4),
            self.hex(3),
            self.hex(3),
            self.hex(12)
        )
    }
}

/// One object level of a template.
#[derive(Clone, Debug)]
struct Node {
    name: String,
    count: Json,
    var: String,
    set: Vec<(String, String)>,
    object: Json,
    children: Vec<Node>,
}

/// One framework's template.
#[derive(Clone, Debug)]
pub struct Template {
    /// The framework name (for generated workload names).
    pub framework: String,
    root: Node,
}

/// The directory holding the templates.
pub fn template_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/synth/templates")
}

/// Loads every template below `dir`, sorted by file name.
pub fn load_templates(dir: &Path) -> Result<Vec<Template>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let doc = kartograf::manifest::parse_documents(&text)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .into_iter()
            .next()
            .ok_or_else(|| format!("{}: empty", f.display()))?;
        let framework = doc["framework"]
            .as_str()
            .ok_or_else(|| format!("{}: no framework", f.display()))?
            .to_owned();
        let root = node(&doc["root"]).map_err(|e| format!("{}: {e}", f.display()))?;
        out.push(Template { framework, root });
    }
    if out.is_empty() {
        return Err(format!("no templates in {}", dir.display()));
    }
    Ok(out)
}

fn node(doc: &Json) -> Result<Node, String> {
    let object = doc.get("object").cloned().ok_or("a level has no object")?;
    let children = doc
        .get("children")
        .and_then(Json::as_array)
        .map(|c| c.iter().map(node).collect::<Result<Vec<_>, _>>())
        .transpose()?
        .unwrap_or_default();
    Ok(Node {
        name: doc["name"].as_str().unwrap_or("{{NAME}}").to_owned(),
        count: doc.get("count").cloned().unwrap_or(json!(1)),
        var: doc["var"].as_str().unwrap_or("I").to_owned(),
        set: doc
            .get("set")
            .and_then(Json::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        object,
        children,
    })
}

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Root workloads.
    pub workloads: usize,
    /// Pods in total (at least 2 per workload).
    pub pods: usize,
    /// PRNG seed.
    pub seed: u64,
}

/// A generated cluster.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Root workload objects.
    pub roots: Vec<Json>,
    /// Objects created by operators between roots and pods.
    pub intermediates: Vec<Json>,
    /// Pods.
    pub pods: Vec<Json>,
}

impl Cluster {
    /// Every document: roots, then intermediates, then pods.
    pub fn all(&self) -> Vec<Json> {
        let mut out = Vec::with_capacity(self.len());
        out.extend(self.roots.iter().cloned());
        out.extend(self.intermediates.iter().cloned());
        out.extend(self.pods.iter().cloned());
        out
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.roots.len() + self.intermediates.len() + self.pods.len()
    }

    /// Writes one YAML file per workload (root, intermediates and pods) below `dir`.
    pub fn write_dir(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut files: HashMap<String, String> = HashMap::new();
        let root_of = self.root_of_each();
        for doc in self
            .roots
            .iter()
            .chain(&self.intermediates)
            .chain(&self.pods)
        {
            let uid = doc["metadata"]["uid"].as_str().unwrap_or_default();
            let root = root_of.get(uid).cloned().unwrap_or_default();
            let text = files.entry(root).or_default();
            text.push_str("---\n");
            // JSON is valid YAML and far faster to write and read.
            text.push_str(&doc.to_string());
            text.push('\n');
        }
        let mut names: Vec<_> = files.into_iter().collect();
        names.sort();
        for (i, (_, text)) in names.iter().enumerate() {
            std::fs::write(dir.join(format!("workload-{i:06}.yaml")), text)?;
        }
        Ok(())
    }

    /// uid -> file key (the root's namespace/name) of every object.
    fn root_of_each(&self) -> HashMap<String, String> {
        let mut parent: HashMap<&str, &str> = HashMap::new();
        for doc in self.intermediates.iter().chain(&self.pods) {
            if let (Some(uid), Some(owner)) = (
                doc["metadata"]["uid"].as_str(),
                doc["metadata"]["ownerReferences"][0]["uid"].as_str(),
            ) {
                parent.insert(uid, owner);
            }
        }
        let mut out = HashMap::new();
        for doc in self
            .roots
            .iter()
            .chain(&self.intermediates)
            .chain(&self.pods)
        {
            let Some(mut at) = doc["metadata"]["uid"].as_str() else {
                continue;
            };
            let own = at.to_owned();
            while let Some(p) = parent.get(at) {
                at = p;
            }
            out.insert(own, at.to_owned());
        }
        out
    }
}

/// Generates a cluster from `templates` (workloads spread round-robin over them).
pub fn generate(templates: &[Template], spec: Spec) -> Cluster {
    let mut rng = Rng::new(spec.seed);
    let scales = scales(&mut rng, spec);
    let namespaces = (spec.workloads / 50).max(1);
    let mut out = Cluster::default();
    for (i, scale) in scales.into_iter().enumerate() {
        let Some(t) = templates.get(i % templates.len().max(1)) else {
            break;
        };
        let name = format!("{}-{i:05}", t.framework);
        let ns = format!("team-{:03}", i % namespaces);
        let mut vars: HashMap<String, String> = HashMap::new();
        vars.insert("R".into(), scale.to_string());
        vars.insert("NAME".into(), name.clone());
        vars.insert("NS".into(), ns);
        vars.insert("HASH".into(), rng.hex(10));
        emit(&t.root, &mut vars, None, &mut rng, &mut out, 0);
    }
    out
}

/// Per-workload scale: about pods/workloads each (±50%), at least 2, summing to `pods`.
fn scales(rng: &mut Rng, spec: Spec) -> Vec<usize> {
    let n = spec.workloads;
    if n == 0 {
        return Vec::new();
    }
    let avg = (spec.pods / n).max(2);
    let mut s: Vec<usize> = (0..n)
        .map(|_| {
            let half = avg / 2;
            (avg - half + rng.below(2 * half as u64 + 1) as usize).max(2)
        })
        .collect();
    let target = spec.pods.max(2 * n);
    let mut total: usize = s.iter().sum();
    let mut i = 0;
    while total != target {
        let at = i % n;
        if total < target {
            s[at] += 1;
            total += 1;
        } else if s[at] > 2 {
            s[at] -= 1;
            total -= 1;
        }
        i += 1;
    }
    s
}

fn emit(
    node: &Node,
    vars: &mut HashMap<String, String>,
    parent: Option<&Json>,
    rng: &mut Rng,
    out: &mut Cluster,
    depth: usize,
) {
    let outer = vars.clone();
    for (k, v) in &node.set {
        let v = text(v, vars);
        vars.insert(k.clone(), v);
    }
    let count = match substitute(&node.count, vars) {
        Json::Number(n) => n.as_u64().unwrap_or(0) as usize,
        Json::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    };
    for i in 0..count {
        let saved = vars.clone();
        vars.insert(node.var.clone(), i.to_string());
        vars.insert("SUFFIX".into(), rng.suffix(5));
        vars.insert("UID".into(), rng.uid());
        vars.insert("NODE".into(), format!("gpu-node-{}", rng.below(5000)));
        vars.insert(
            "IP".into(),
            format!(
                "10.{}.{}.{}",
                rng.below(256),
                rng.below(256),
                1 + rng.below(254)
            ),
        );
        if depth == 0 {
            vars.insert("ROOT_UID".into(), vars["UID"].clone());
        }
        let name = text(&node.name, vars);
        vars.insert("SELF".into(), name.clone());
        // Again per object, so that `set` values may use this object's own variables.
        for (k, v) in &node.set {
            let v = text(v, vars);
            vars.insert(k.clone(), v);
        }
        let mut obj = substitute(&node.object, vars);
        if let Some(meta) = meta_of(&mut obj) {
            // Labels and annotations are string maps, whatever the placeholders expanded to.
            for map in ["labels", "annotations"] {
                for v in meta
                    .get_mut(map)
                    .and_then(Json::as_object_mut)
                    .into_iter()
                    .flat_map(|m| m.values_mut())
                {
                    if !v.is_string() {
                        *v = Json::String(v.to_string());
                    }
                }
            }
            meta.insert("name".into(), json!(name));
            meta.insert("namespace".into(), json!(vars["NS"]));
            meta.insert("uid".into(), json!(vars["UID"]));
            meta.entry("creationTimestamp")
                .or_insert(json!("2025-06-01T08:00:00Z"));
            if let Some(p) = parent {
                meta.insert(
                    "ownerReferences".into(),
                    json!([{
                        "apiVersion": p["apiVersion"], "kind": p["kind"],
                        "name": p["metadata"]["name"], "uid": p["metadata"]["uid"],
                        "controller": true, "blockOwnerDeletion": true,
                    }]),
                );
            }
        }
        vars.insert("PARENT".into(), name);
        vars.insert("PARENT_UID".into(), vars["UID"].clone());
        for child in &node.children {
            emit(child, vars, Some(&obj), rng, out, depth + 1);
        }
        let is_pod = obj["kind"] == "Pod" && obj["apiVersion"] == "v1";
        match (depth, is_pod) {
            (0, _) => out.roots.push(obj),
            (_, true) => out.pods.push(obj),
            _ => out.intermediates.push(obj),
        }
        *vars = saved;
    }
    *vars = outer;
}

fn meta_of(obj: &mut Json) -> Option<&mut Map<String, Json>> {
    let map = obj.as_object_mut()?;
    map.entry("metadata").or_insert(json!({})).as_object_mut()
}

/// Replaces placeholders in every string of `value`.
fn substitute(value: &Json, vars: &HashMap<String, String>) -> Json {
    match value {
        Json::String(s) => {
            let t = text(s, vars);
            let whole = s.starts_with("{{")
                && s.ends_with("}}")
                && !s.ends_with(":s}}")
                && s.matches("{{").count() == 1;
            match t.parse::<i64>() {
                Ok(n) if whole => json!(n),
                _ => Json::String(t),
            }
        }
        Json::Array(items) => Json::Array(items.iter().map(|v| substitute(v, vars)).collect()),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (text(k, vars), substitute(v, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Expands `{{X}}`, `{{X+n}}` and `{{X-n}}` in `s` (unknown variables expand to nothing).
fn text(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let expr = rest[start + 2..start + end].trim();
        out.push_str(&eval(expr, vars));
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

fn eval(expr: &str, vars: &HashMap<String, String>) -> String {
    let expr = expr.strip_suffix(":s").unwrap_or(expr);
    for (op, sign) in [('+', 1i64), ('-', -1i64)] {
        if let Some((var, n)) = expr.split_once(op)
            && let (Some(v), Ok(n)) = (vars.get(var.trim()), n.trim().parse::<i64>())
        {
            let v: i64 = v.parse().unwrap_or(0);
            return (v + sign * n).to_string();
        }
    }
    vars.get(expr).cloned().unwrap_or_default()
}

#[cfg(test)]
#[allow(unused_imports)] // bench binaries (harness = false) compile cfg(test) without tests
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand() {
        let vars: HashMap<String, String> = [
            ("R".to_owned(), "5".to_owned()),
            ("N".to_owned(), "a".to_owned()),
        ]
        .into();
        assert_eq!(text("{{N}}-{{R-1}}-{{R+2}}", &vars), "a-4-7");
        assert_eq!(substitute(&json!("{{R-1}}"), &vars), json!(4));
        assert_eq!(substitute(&json!("x{{R}}"), &vars), json!("x5"));
        assert_eq!(substitute(&json!("{{R:s}}"), &vars), json!("5"));
    }
}
