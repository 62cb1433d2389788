//! Workload Map's recorded per-component extraction, and its comparison with kartograf's
//! graph: for every recorded component instance, the instance must exist with the same
//! scale (`replicas`, `minReplicas`, `maxReplicas`) and the same per-pod CPU and memory
//! request as the recorded pod spec gives.

use crate::reading::{InstanceReading, Reading};
use serde_json::Value;

/// One recorded instance of one component.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedInstance {
    /// Workload Map's component name.
    pub component: String,
    /// Instance id (empty for single-instance components).
    pub id: String,
    /// `replicas`, `minReplicas`, `maxReplicas`.
    pub scale: (Option<i32>, Option<i32>, Option<i32>),
    /// Per-pod CPU (millicores) and memory (bytes) requests of the recorded pod spec.
    pub per_pod: Option<(i64, i64)>,
}

/// Every instance a recorded reading extracts, sorted by component and id.
pub fn expected_instances(expected: &Value) -> Vec<ExpectedInstance> {
    let mut out = Vec::new();
    let Some(components) = expected["components"].as_object() else {
        return out;
    };
    for (component, reading) in components {
        let Some(instances) = reading["instances"].as_object() else {
            continue;
        };
        for (id, inst) in instances {
            let scale = &inst["scale"];
            let int = |key: &str| scale[key].as_i64().and_then(|n| i32::try_from(n).ok());
            out.push(ExpectedInstance {
                component: component.clone(),
                id: id.clone(),
                scale: (int("replicas"), int("minReplicas"), int("maxReplicas")),
                per_pod: per_pod(inst),
            });
        }
    }
    out.sort_by(|a, b| (&a.component, &a.id).cmp(&(&b.component, &b.id)));
    out
}

/// One field where kartograf's extraction differs from the recorded one.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Workload Map's component name.
    pub component: String,
    /// Instance id.
    pub id: String,
    /// `instance` (missing), `replicas`, `minReplicas`, `maxReplicas` or `perPod`.
    pub field: &'static str,
    /// Recorded value.
    pub recorded: String,
    /// kartograf's value.
    pub kartograf: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}[{}].{}: recorded {}, kartograf {}",
            self.component, self.id, self.field, self.recorded, self.kartograf
        )
    }
}

/// Compares the recorded extraction with kartograf's; `rename` maps Workload Map's
/// component names to the reading's.
pub fn compare(
    expected: &[ExpectedInstance],
    reading: &Reading,
    rename: &dyn Fn(&str) -> String,
) -> Vec<Difference> {
    let mut out = Vec::new();
    for want in expected {
        let component = rename(&want.component);
        let diff = |field, recorded: String, kartograf: String| Difference {
            component: want.component.clone(),
            id: want.id.clone(),
            field,
            recorded,
            kartograf,
        };
        let found: Option<&InstanceReading> = reading
            .instances
            .iter()
            .find(|i| i.component == component && i.id == want.id);
        let Some(got) = found else {
            out.push(diff("instance", "present".into(), "none".into()));
            continue;
        };
        let show = |v: Option<i32>| v.map_or("unset".to_owned(), |n| n.to_string());
        for (field, w, g) in [
            ("replicas", want.scale.0, got.scale.0),
            ("minReplicas", want.scale.1, got.scale.1),
            ("maxReplicas", want.scale.2, got.scale.2),
        ] {
            if w != g {
                out.push(diff(field, show(w), show(g)));
            }
        }
        if let Some(p) = want.per_pod
            && got.per_pod.unwrap_or((0, 0)) != p
        {
            out.push(diff(
                "perPod",
                format!("{p:?}"),
                format!("{:?}", got.per_pod),
            ));
        }
    }
    out
}

/// The per-pod request of a recorded pod spec, as the scheduler counts it: regular
/// containers summed, restartable init containers added, other init containers as a max,
/// `overhead` added; requests, falling back to limits.
fn per_pod(inst: &Value) -> Option<(i64, i64)> {
    if let Some(spec) = inst["podTemplateSpec"]
        .get("spec")
        .or_else(|| inst.get("podSpec"))
    {
        let mut sum = containers_total(spec["containers"].as_array());
        let mut init_max = (0, 0);
        for c in spec["initContainers"].as_array().into_iter().flatten() {
            let r = container(c);
            if c["restartPolicy"] == "Always" {
                sum = (sum.0 + r.0, sum.1 + r.1);
            } else {
                init_max = (init_max.0.max(r.0), init_max.1.max(r.1));
            }
        }
        let overhead = request_of(&spec["overhead"], &spec["overhead"]);
        return Some((
            sum.0.max(init_max.0) + overhead.0,
            sum.1.max(init_max.1) + overhead.1,
        ));
    }
    let fragmented = inst.get("fragmentedPodSpec")?;
    if let Some(r) = fragmented.get("resources") {
        return Some(request_of(&r["requests"], &r["limits"]));
    }
    if let Some(cs) = fragmented.get("containers") {
        return Some(containers_total(cs.as_array()));
    }
    fragmented.get("container").map(container)
}

fn containers_total(containers: Option<&Vec<Value>>) -> (i64, i64) {
    containers
        .into_iter()
        .flatten()
        .map(container)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

fn container(c: &Value) -> (i64, i64) {
    request_of(&c["resources"]["requests"], &c["resources"]["limits"])
}

fn request_of(requests: &Value, limits: &Value) -> (i64, i64) {
    let pick = |name: &str| requests.get(name).or_else(|| limits.get(name));
    (
        pick("cpu").map_or(0, |q| quantity(q, 1000)),
        pick("memory").map_or(0, |q| quantity(q, 1)),
    )
}

/// A Kubernetes quantity in `unit`s (1000 for millicores, 1 for bytes).
pub fn quantity(q: &Value, unit: i64) -> i64 {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return 0,
    };
    let suffixes: [(&str, f64); 11] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("m", 0.001),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("n", 1e-9),
        ("u", 1e-6),
    ];
    let (number, factor) = suffixes
        .iter()
        .find_map(|(s, f)| text.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((text.as_str(), 1.0));
    let value: f64 = number.parse().unwrap_or(0.0);
    (value * factor * unit as f64).round() as i64
}
