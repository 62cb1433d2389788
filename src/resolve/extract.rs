//! What the root object alone says about each component: its instances (ids), scale,
//! per-pod request, desired pods and gang minimum. Evaluated once per root version (the
//! index remembers it as `Prepared`); the slot tree ([`super::tree`]) places pods into it.

use super::Resolver;
use super::diagnostics::VALUE_BYTES;
use super::diagnostics::{INFO, WARNING, code};
use crate::definition::plan::{Compiled, PodSpecSource};
use crate::expr::value::{as_array, as_f64, as_str, get, get_path, to_text, to_text_bounded};
use crate::model::resources::{self, Amounts};
use crate::proto::v1 as pb;
use jaq_json::Val;

/// What the root object says about one instance of a component.
#[derive(Debug, Clone, Default)]
pub(super) struct InstanceSpec {
    pub(super) id: String,
    pub(super) scale: pb::Scale,
    pub(super) per_pod: Amounts,
    /// Desired pods across the whole workload (pod-bearing components), or the number of
    /// replicas (components with a replica selector and no pods of their own).
    pub(super) desired: u32,
    /// Gang minimum across the whole workload.
    pub(super) min: u32,
}

impl Resolver<'_> {
    /// Extracts the instances of component `c` from the root object.
    pub(super) fn extract(&mut self, c: usize) -> Vec<InstanceSpec> {
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let ids: Vec<String> = match &comp.instance_ids {
            None => vec![String::new()],
            Some(expr) => {
                let mut ids: Vec<String> = Vec::new();
                for v in self.eval_root(expr, name).unwrap_or_default() {
                    let id = if matches!(v, Val::Null) {
                        String::new()
                    } else {
                        to_text(&v)
                    };
                    if id.is_empty() {
                        self.diags.push(
                            WARNING,
                            code::BAD_VALUE,
                            "instance id path yielded an empty id; skipped",
                            name,
                            expr.source(),
                        );
                    } else if ids.contains(&id) {
                        self.diags.push(
                            WARNING,
                            code::BAD_VALUE,
                            format!("duplicate instance id `{id}`; merged"),
                            name,
                            expr.source(),
                        );
                    } else {
                        ids.push(id);
                    }
                }
                ids
            }
        };
        let count = ids.len();
        let replicas = self.positional_scale(comp.replicas.as_ref(), count, name);
        let min = self.positional_scale(comp.min_replicas.as_ref(), count, name);
        let max = self.positional_scale(comp.max_replicas.as_ref(), count, name);
        let specs = self.instance_amounts(c, count);
        let pod_bearing = comp.pod_bearing();
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| {
                let scale = pb::Scale {
                    replicas: replicas[i],
                    min_replicas: min[i],
                    max_replicas: max[i],
                };
                let (per_pod, present) = specs[i].clone();
                let declared = scale.replicas.or(scale.min_replicas);
                let desired = if pod_bearing && !present {
                    if declared.is_some_and(|n| n > 0) {
                        let comp = &self.def.components[c];
                        let expr = comp.spec.as_ref().and_then(|s| s.primary());
                        self.diags.push_at(
                            INFO,
                            code::SPEC_MISSING,
                            format!("the pod spec of instance `{id}` is missing; counting no pods"),
                            &comp.name,
                            expr.map_or("", |e| e.source()),
                            expr.map_or("", |e| e.path.as_str()),
                        );
                    }
                    0
                } else {
                    declared.unwrap_or(1).max(0) as u32
                };
                // Elastic minimum first, as KAI's groupers read it.
                let min = match scale.min_replicas {
                    Some(m) if m > 0 && pod_bearing && present => m as u32,
                    _ => desired,
                };
                InstanceSpec {
                    id,
                    scale,
                    per_pod,
                    desired,
                    min,
                }
            })
            .collect()
    }

    /// Evaluates an expression on the root and lines its outputs up with `count` instances.
    fn positional(&mut self, expr: &Compiled, count: usize, component: &str) -> Vec<Option<Val>> {
        let out = self.eval_root(expr, component).unwrap_or_default();
        if out.len() != count && !(count == 1 && out.is_empty()) && count > 0 {
            self.diags.push(
                WARNING,
                code::COUNT_MISMATCH,
                format!(
                    "{} yielded {} values for {count} instance(s); matched by position",
                    expr.path,
                    out.len()
                ),
                component,
                expr.source(),
            );
        }
        let mut out = out.into_iter().map(Some).collect::<Vec<_>>();
        out.resize(count, None);
        out
    }

    fn positional_scale(
        &mut self,
        expr: Option<&Compiled>,
        count: usize,
        component: &str,
    ) -> Vec<Option<i32>> {
        let Some(expr) = expr else {
            return vec![None; count];
        };
        let values = self.positional(expr, count, component);
        values
            .into_iter()
            .map(|v| match v {
                None | Some(Val::Null) => None,
                Some(v) => {
                    let n = match &v {
                        Val::Num(_) => as_f64(&v),
                        _ => as_str(&v).and_then(|s| s.trim().parse::<f64>().ok()),
                    };
                    match n {
                        Some(n) if n.fract() == 0.0 && n.abs() <= f64::from(i32::MAX) => {
                            Some(n as i32)
                        }
                        Some(n) if n.fract() == 0.0 => {
                            self.diags.push(
                                WARNING,
                                code::QUANTITY_OUT_OF_RANGE,
                                format!(
                                    "{} yielded {}, a count beyond int32 (at most {}); not used",
                                    expr.path,
                                    to_text_bounded(&v, VALUE_BYTES),
                                    i32::MAX
                                ),
                                component,
                                expr.source(),
                            );
                            None
                        }
                        _ => {
                            self.diags.push(
                                WARNING,
                                code::BAD_VALUE,
                                format!(
                                    "{} yielded `{}`, not a whole number",
                                    expr.path,
                                    to_text_bounded(&v, VALUE_BYTES)
                                ),
                                component,
                                expr.source(),
                            );
                            None
                        }
                    }
                }
            })
            .collect()
    }

    /// The resource names the definition's `gpuResourceNamesPath`s count as whole GPUs:
    /// strings, or arrays of strings, deduplicated and sorted. Other outputs are ignored.
    pub(super) fn gpu_resource_names(&mut self) -> Vec<resources::Name> {
        let mut names: Vec<resources::Name> = Vec::new();
        for c in 0..self.def.components.len() {
            let comp = &self.def.components[c];
            let Some(expr) = &comp.gpu_resource_names else {
                continue;
            };
            let component = comp.name.clone();
            for v in self.eval_root(expr, &component).unwrap_or_default() {
                let items: &[Val] = match &v {
                    Val::Arr(items) => items,
                    _ => std::slice::from_ref(&v),
                };
                for item in items {
                    if let Some(s) = as_str(item).filter(|s| !s.is_empty()) {
                        names.push(s.into());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Per-pod request of each instance and whether the spec exists.
    fn instance_amounts(&mut self, c: usize, count: usize) -> Vec<(Amounts, bool)> {
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let mut bad = Vec::new();
        let mut claims = 0usize;
        let keep = self.kept_specs.is_some();
        let mut kept: Vec<Option<Val>> = Vec::new();
        let mut result: Vec<(Amounts, bool)> = match &comp.spec {
            None => vec![(Amounts::default(), false); count],
            Some(PodSpecSource::Template(expr)) => self
                .positional(expr, count, name)
                .into_iter()
                .map(|t| match t {
                    None | Some(Val::Null) => {
                        kept.push(None);
                        (Amounts::default(), false)
                    }
                    Some(t) => {
                        claims += get_path(&t, &["spec", "resourceClaims"])
                            .map_or(0, |c| as_array(c).len());
                        let amounts = resources::pod_amounts(&t, &mut bad);
                        if keep {
                            kept.push(get(&t, "spec").cloned());
                        }
                        (amounts, true)
                    }
                })
                .collect(),
            Some(PodSpecSource::Spec { spec, metadata }) => {
                let specs = self.positional(spec, count, name);
                let metas = match metadata {
                    Some(m) => self.positional(m, count, name),
                    None => vec![None; count],
                };
                specs
                    .into_iter()
                    .zip(metas)
                    .map(|(s, m)| match s {
                        None | Some(Val::Null) => {
                            kept.push(None);
                            (Amounts::default(), false)
                        }
                        Some(s) => {
                            if keep {
                                kept.push(Some(s.clone()));
                            }
                            claims += get(&s, "resourceClaims").map_or(0, |c| as_array(c).len());
                            let raw = resources::pod_spec_request(&s, &mut bad);
                            let fraction = resources::gpu_fraction(
                                m.as_ref().and_then(|m| get(m, "annotations")),
                            );
                            (
                                Amounts {
                                    raw,
                                    gpu_fraction: fraction,
                                },
                                true,
                            )
                        }
                    })
                    .collect()
            }
            Some(PodSpecSource::Fragmented {
                resources: res,
                containers,
                container,
                resource_claims,
                annotations,
            }) => {
                let mut column = |e: &Option<Compiled>| match e {
                    Some(e) => self.positional(e, count, name),
                    None => vec![None; count],
                };
                let res = column(res);
                let containers = column(containers);
                let container = column(container);
                let claim_lists = column(resource_claims);
                let annotations = column(annotations);
                (0..count)
                    .map(|i| {
                        claims += claim_lists[i].as_ref().map_or(0, |c| as_array(c).len());
                        let list = containers[i].as_ref().map(as_array).unwrap_or_default();
                        let raw = resources::fragmented_request(
                            res[i].as_ref(),
                            list,
                            container[i].as_ref(),
                            &mut bad,
                        );
                        let fraction = resources::gpu_fraction(annotations[i].as_ref());
                        (
                            Amounts {
                                raw,
                                gpu_fraction: fraction,
                            },
                            true,
                        )
                    })
                    .collect()
            }
        };
        if let Some(expr) = &comp.extended_resources {
            let lists = self.positional(expr, count, name);
            for ((amounts, has_spec), list) in result.iter_mut().zip(&lists) {
                if *has_spec && list.as_ref().is_some_and(|l| !matches!(l, Val::Null)) {
                    resources::add_resource_list(&mut amounts.raw, list.as_ref(), &mut bad);
                }
            }
        }
        for (amounts, _) in result.iter_mut() {
            amounts.gpu_fraction += resources::named_gpus(&amounts.raw, &self.gpu_names);
        }
        if let Some(all) = self.kept_specs.as_mut() {
            kept.resize(count, None);
            all.resize(c, Vec::new());
            all.push(kept);
        }
        if !bad.is_empty() {
            self.report_quantities("", &bad, name);
        }
        if claims > 0 {
            self.diags.push(
                INFO,
                code::DRA_CLAIMS,
                "pod spec uses DRA resource claims; devices from claims are not counted",
                name,
                "",
            );
        }
        result
    }
}
