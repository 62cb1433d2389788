//! Resource accounting: Kubernetes quantities, the effective request of one pod as the
//! scheduler computes it, and whole-GPU equivalents.

use crate::expr::value::Doc;
use crate::proto::v1 as pb;
use jaq_json::Val;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

/// A resource name, shared between the many amounts that carry it.
pub type Name = Arc<str>;

/// Resources by name, in milli-units (so `500m` CPU is 500 and `1Gi` is 1073741824000).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Amounts {
    /// Resource name to milli-units.
    pub raw: BTreeMap<Name, i128>,
    /// Extra whole-GPU equivalents not expressed as a resource (a `gpu-fraction` annotation).
    pub gpu_fraction: f64,
}

impl Amounts {
    /// Adds `other` to `self` (saturating: a sum never wraps).
    pub fn add(&mut self, other: &Amounts) {
        for (name, v) in &other.raw {
            let sum = self.raw.entry(name.clone()).or_default();
            *sum = sum.saturating_add(*v);
        }
        self.gpu_fraction += other.gpu_fraction;
    }

    /// Adds `other` like [`Amounts::add`], and also counts its resources under `gpu_names`
    /// (a definition's `gpuResourceNamesPath`) as whole GPUs ([`named_gpus`]).
    pub fn add_with_named_gpus(&mut self, other: &Amounts, gpu_names: &[Name]) {
        self.add(other);
        self.gpu_fraction += named_gpus(&other.raw, gpu_names);
    }

    /// `self` multiplied by `n` (saturating).
    pub fn times(&self, n: u32) -> Amounts {
        Amounts {
            raw: self
                .raw
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(i128::from(n))))
                .collect(),
            gpu_fraction: self.gpu_fraction * f64::from(n),
        }
    }

    /// Whether every amount fits the graph's fields: CPU in `int64` milli-units, memory in
    /// `int64` bytes, and every resource within [`MAX_QUANTITY_UNITS`] (beyond, the proto
    /// form holds the field's maximum: see [`Amounts::to_proto`]).
    pub fn fits(&self) -> bool {
        let limit = MAX_QUANTITY_UNITS * 1000;
        self.raw.values().all(|v| (0..=limit).contains(v))
            && self
                .raw
                .get("cpu")
                .is_none_or(|v| *v <= i128::from(i64::MAX))
            && self.gpus().is_finite()
    }

    /// Whole-GPU equivalents.
    pub fn gpus(&self) -> f64 {
        self.raw
            .iter()
            .map(|(name, v)| gpu_weight(name) * (*v as f64 / 1000.0))
            .sum::<f64>()
            + self.gpu_fraction
    }

    /// The proto form. A field whose amount exceeds its range holds its maximum (see
    /// [`Amounts::fits`]); nothing wraps.
    pub fn to_proto(&self) -> pb::Resources {
        let milli = |name: &str| self.raw.get(name).copied().unwrap_or(0);
        pb::Resources {
            gpus: round6(self.gpus()),
            cpu_millis: clamp_i64(milli("cpu")),
            memory_bytes: clamp_i64(milli("memory") / 1000),
            raw: self
                .raw
                .iter()
                .filter(|(_, v)| **v != 0)
                .map(|(k, v)| (k.to_string(), format_quantity(k, clamp_quantity(*v))))
                .collect(),
        }
    }
}

/// Saturates a quantity in milli-units at `[0, MAX_QUANTITY_UNITS]` units.
pub fn clamp_quantity(milli: i128) -> i128 {
    milli.clamp(0, MAX_QUANTITY_UNITS * 1000)
}

/// Saturates at the `int64` range (never wraps).
fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// How many whole GPUs one unit of a resource is worth (0 for non-GPU resources).
///
/// Whole devices: `nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/i915`, `gpu.intel.com/xe`.
/// NVIDIA MIG slices `nvidia.com/mig-<N>g.<mem>` count N/7.
pub fn gpu_weight(name: &str) -> f64 {
    match name {
        "nvidia.com/gpu" | "amd.com/gpu" | "gpu.intel.com/i915" | "gpu.intel.com/xe" => 1.0,
        _ => name
            .strip_prefix("nvidia.com/mig-")
            .and_then(|rest| rest.split_once('g'))
            .and_then(|(n, _)| n.parse::<u32>().ok())
            .map_or(0.0, |n| f64::from(n) / 7.0),
    }
}

/// Whole GPUs in `raw` under `names` that [`gpu_weight`] does not count already: resources a
/// definition declares as GPUs (`gpuResourceNamesPath`), one whole GPU per unit.
pub fn named_gpus(raw: &BTreeMap<Name, i128>, names: &[Name]) -> f64 {
    names
        .iter()
        .filter(|n| gpu_weight(n) == 0.0)
        .filter_map(|n| raw.get(n))
        .map(|v| *v as f64 / 1000.0)
        .sum()
}

/// Largest quantity counted, in units: 2^63-1, the range of a Kubernetes quantity's integer
/// value. A larger (or negative) request or limit is not counted and is reported.
pub const MAX_QUANTITY_UNITS: i128 = i64::MAX as i128;

/// Why a resource quantity was not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Not a Kubernetes quantity (`lots`, `1Zi`).
    Unparseable,
    /// Below zero: no pod can request less than nothing.
    Negative,
    /// Above [`MAX_QUANTITY_UNITS`], or not finite.
    OutOfRange,
}

/// A quantity that was not counted: `name=value` (the value cut to a short excerpt) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadQuantity {
    /// Why it was not counted.
    pub fault: Fault,
    /// `name=value`, bounded.
    pub text: String,
}

/// Longest `name=value` kept for a quantity that was not counted.
const BAD_QUANTITY_BYTES: usize = 128;

impl BadQuantity {
    fn new(fault: Fault, name: &str, value: &str) -> BadQuantity {
        let text = format!("{name}={value}");
        BadQuantity {
            fault,
            text: crate::excerpt::excerpt(&text, BAD_QUANTITY_BYTES).into_owned(),
        }
    }
}

/// A quantity's milli-units if it is counted: parseable, not negative, within
/// [`MAX_QUANTITY_UNITS`].
pub fn counted_quantity(text: &str) -> Result<i128, Fault> {
    quantity_milli(text).map_or(Err(Fault::Unparseable), counted_milli)
}

/// A JSON number as a quantity (`2`, `0.5`): its milli-units if it is counted.
fn counted_number(f: f64) -> Result<i128, Fault> {
    counted_milli((f * 1000.0).ceil())
}

fn counted_milli(milli: f64) -> Result<i128, Fault> {
    if milli.is_nan() {
        Err(Fault::Unparseable)
    } else if milli < 0.0 {
        Err(Fault::Negative)
    } else if milli > (MAX_QUANTITY_UNITS * 1000) as f64 {
        Err(Fault::OutOfRange)
    } else {
        Ok(milli as i128)
    }
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5`, `16Gi`, `1e3`, `100k`) into milli-units,
/// rounding up as Kubernetes does. Negative and huge values parse (see [`counted_quantity`]
/// for what is counted).
pub fn parse_quantity(text: &str) -> Option<i128> {
    quantity_milli(text)
        .filter(|milli| milli.is_finite() && milli.abs() < 1e36)
        .map(|milli| milli as i128)
}

/// A quantity's value in milli-units, rounded up (infinite when it overflows a double).
fn quantity_milli(text: &str) -> Option<f64> {
    let s = text.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(split);
    let multiplier = if let Some((_, power)) = DECIMAL_SUFFIXES.iter().find(|(x, _)| *x == suffix) {
        10f64.powi(*power)
    } else if let Some((_, shift)) = BINARY_SUFFIXES.iter().find(|(x, _)| *x == suffix) {
        2f64.powi(*shift as i32)
    } else if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
        10f64.powi(exp.parse().ok()?)
    } else {
        return None;
    };
    let value: f64 = number.parse().ok()?;
    let milli = (value * multiplier * 1000.0).ceil();
    (!milli.is_nan()).then_some(milli)
}

/// The binary suffixes of Kubernetes quantities and the power of two each stands for (the one
/// table: parsing, rendering quantities and sizes, the CLI's byte sizes).
pub const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// The decimal suffixes of Kubernetes quantities and the power of ten each stands for.
pub const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("", 0),
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// Renders milli-units as a quantity: binary suffixes for memory-like names when exact,
/// plain integers when whole, `m` otherwise.
pub fn format_quantity(name: &str, milli: i128) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let units = milli / 1000;
    let memory_like =
        name == "memory" || name.contains("storage") || name.starts_with("hugepages-");
    if memory_like && units != 0 {
        for (suffix, shift) in BINARY_SUFFIXES.iter().rev() {
            let size = 1i128 << shift;
            if units % size == 0 {
                return format!("{}{suffix}", units / size);
            }
        }
    }
    units.to_string()
}

/// A resource list (`requests` or `limits`) as milli-units; quantities that are not counted
/// (unparseable, negative, out of range) are reported in `bad`.
fn resource_list<'a>(
    list: Option<impl Doc<'a>>,
    bad: &mut Vec<BadQuantity>,
) -> BTreeMap<Name, i128> {
    let mut out = BTreeMap::new();
    for (name, quantity) in list.into_iter().flat_map(Doc::entries) {
        let name: Name = String::from_utf8_lossy(name).into();
        let parsed = if quantity.is_number() {
            quantity
                .as_f64()
                .map_or(Err(Fault::Unparseable), counted_number)
        } else {
            quantity
                .as_str()
                .map_or(Err(Fault::Unparseable), counted_quantity)
        };
        match parsed {
            Ok(v) => {
                out.insert(name, v);
            }
            Err(fault) => bad.push(BadQuantity::new(fault, &name, &quantity.to_text())),
        }
    }
    out
}

/// What one container (or a bare `resources` block) requests: `requests`, each resource
/// falling back to `limits` (the API server defaults requests from limits).
fn requirements<'a>(
    resources: Option<impl Doc<'a>>,
    bad: &mut Vec<BadQuantity>,
) -> BTreeMap<Name, i128> {
    let Some(resources) = resources else {
        return BTreeMap::new();
    };
    let mut requests = resource_list(resources.get("requests"), bad);
    for (name, v) in resource_list(resources.get("limits"), bad) {
        requests.entry(name).or_insert(v);
    }
    requests
}

fn add_into(sum: &mut BTreeMap<Name, i128>, other: &BTreeMap<Name, i128>) {
    for (k, v) in other {
        let at = sum.entry(k.clone()).or_default();
        *at = at.saturating_add(*v);
    }
}

fn max_into(max: &mut BTreeMap<Name, i128>, other: &BTreeMap<Name, i128>) {
    for (k, v) in other {
        let slot = max.entry(k.clone()).or_default();
        *slot = (*slot).max(*v);
    }
}

/// The effective request of a pod with this PodSpec, as the scheduler computes it: regular
/// containers summed; restartable (sidecar) init containers added to the running sum;
/// other init containers as a per-resource maximum (together with the sidecars started
/// before them); pod-level `resources` replace CPU and memory; `overhead` added.
/// Unparseable quantities are skipped and returned in `bad`.
pub fn pod_spec_request<'a>(
    spec: impl Doc<'a>,
    bad: &mut Vec<BadQuantity>,
) -> BTreeMap<Name, i128> {
    let mut sum = BTreeMap::new();
    for c in spec.get("containers").into_iter().flat_map(Doc::items) {
        add_into(&mut sum, &requirements(c.get("resources"), bad));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for c in spec.get("initContainers").into_iter().flat_map(Doc::items) {
        let req = requirements(c.get("resources"), bad);
        let restartable = c.get("restartPolicy").and_then(Doc::as_str) == Some("Always");
        let mut during = req.clone();
        if restartable {
            add_into(&mut sum, &req);
            add_into(&mut sidecars, &req);
            during = sidecars.clone();
        } else {
            add_into(&mut during, &sidecars);
        }
        max_into(&mut init_max, &during);
    }
    max_into(&mut sum, &init_max);
    let pod_level = requirements(spec.get("resources"), bad);
    for name in ["cpu", "memory"] {
        if let Some(v) = pod_level.get(name) {
            sum.insert(Name::from(name), *v);
        }
    }
    add_into(&mut sum, &resource_list(spec.get("overhead"), bad));
    sum
}

/// The effective request from fragmented parts: containers (a list and/or one container)
/// summed; when that is empty, the bare `resources` block.
pub fn fragmented_request(
    resources: Option<&Val>,
    containers: &[Val],
    container: Option<&Val>,
    bad: &mut Vec<BadQuantity>,
) -> BTreeMap<Name, i128> {
    let mut sum = BTreeMap::new();
    for c in containers.iter().chain(container) {
        add_into(&mut sum, &requirements(c.get("resources"), bad));
    }
    if sum.values().all(|v| *v == 0) {
        sum = requirements(resources, bad);
    }
    sum
}

/// Adds a resource list (name to quantity, as `extendedResourcesPath` yields it) to `sum`;
/// quantities that are not counted are reported in `bad`.
pub fn add_resource_list(
    sum: &mut BTreeMap<Name, i128>,
    list: Option<&Val>,
    bad: &mut Vec<BadQuantity>,
) {
    add_into(sum, &resource_list(list, bad));
}

/// The fraction of a GPU a KAI `gpu-fraction` annotation asks for (0 when absent or invalid).
pub fn gpu_fraction<'a>(annotations: Option<impl Doc<'a>>) -> f64 {
    annotations
        .and_then(|a| a.get("gpu-fraction"))
        .and_then(|v| {
            if v.is_number() {
                v.as_f64()
            } else {
                v.as_str().and_then(|s| s.trim().parse().ok())
            }
        })
        .filter(|f: &f64| f.is_finite() && *f > 0.0 && *f <= 1.0)
        .unwrap_or(0.0)
}

/// Amounts of a pod-shaped object (a Pod or a PodTemplateSpec: `metadata` + `spec`), read
/// unpacked or in place from the packed bytes.
pub fn pod_amounts<'a, D: Doc<'a>>(pod: D, bad: &mut Vec<BadQuantity>) -> Amounts {
    let raw = match pod.get("spec") {
        Some(spec) => pod_spec_request(spec, bad),
        None => pod_spec_request(&Val::Null, bad),
    };
    Amounts {
        raw,
        gpu_fraction: gpu_fraction(pod.get_path(&["metadata", "annotations"])),
    }
}

/// Requests kept for sharing; the table is emptied when it reaches this many entries.
const MAX_SHARED: usize = 4096;

type SharedKey = (Vec<(Name, i128)>, u64);

static SHARED: LazyLock<Mutex<HashMap<SharedKey, Arc<Request>>>> = LazyLock::new(Mutex::default);

/// A pod's effective request with its proto form, computed once and shared between pods
/// with equal requests.
#[derive(Debug, PartialEq)]
pub struct Request {
    /// The amounts.
    pub amounts: Amounts,
    /// `amounts` as the graph shows them.
    pub proto: pb::Resources,
}

impl std::ops::Deref for Request {
    type Target = Amounts;

    fn deref(&self) -> &Amounts {
        &self.amounts
    }
}

/// `amounts`, or an equal request already in use: the pods of a workload mostly request the
/// same, so a cache of many pods holds few distinct requests.
pub fn shared(amounts: Amounts) -> Arc<Request> {
    let key: SharedKey = (
        amounts.raw.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        amounts.gpu_fraction.to_bits(),
    );
    // The table holds no invariant a panic could break.
    let mut table = SHARED.lock();
    if let Some(a) = table.get(&key) {
        return a.clone();
    }
    if table.len() >= MAX_SHARED {
        table.clear();
    }
    let proto = amounts.to_proto();
    let a = Arc::new(Request { amounts, proto });
    table.insert(key, a.clone());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("500m"), Some(500));
        assert_eq!(parse_quantity("2"), Some(2000));
        assert_eq!(parse_quantity("1.5"), Some(1500));
        assert_eq!(parse_quantity("16Gi"), Some(16 * (1 << 30) * 1000));
        assert_eq!(parse_quantity("1e3"), Some(1_000_000));
        assert_eq!(parse_quantity("100k"), Some(100_000_000));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("1Zi"), None);
    }

    #[test]
    fn formats_quantities() {
        assert_eq!(format_quantity("memory", 16 * (1 << 30) * 1000), "16Gi");
        assert_eq!(format_quantity("cpu", 4000), "4");
        assert_eq!(format_quantity("cpu", 250), "250m");
        assert_eq!(format_quantity("nvidia.com/gpu", 8000), "8");
    }

    #[test]
    fn equal_requests_are_shared() {
        let amounts = |cpu: i128| Amounts {
            raw: BTreeMap::from([(Name::from("cpu"), cpu)]),
            gpu_fraction: 0.0,
        };
        let (a, b, c) = (
            shared(amounts(7001)),
            shared(amounts(7001)),
            shared(amounts(7002)),
        );
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.amounts, amounts(7002));
        assert_eq!(c.proto, amounts(7002).to_proto());
    }

    #[test]
    fn gpu_weights() {
        assert_eq!(gpu_weight("nvidia.com/gpu"), 1.0);
        assert_eq!(gpu_weight("amd.com/gpu"), 1.0);
        assert!((gpu_weight("nvidia.com/mig-3g.20gb") - 3.0 / 7.0).abs() < 1e-9);
        assert_eq!(gpu_weight("cpu"), 0.0);
    }
}
