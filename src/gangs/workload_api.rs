//! Kubernetes' gang objects: `scheduling.k8s.io/v1beta1` Workload and PodGroup, and the
//! alpha `v1alpha3` CompositePodGroup for gangs with subgroups (`k8s.io/api/scheduling`).
//!
//! One template per gang plan: a gang without subgroups is a PodGroupTemplate
//! (`schedulingPolicy.gang.minCount` = its minimum), a gang with subgroups a
//! CompositePodGroupTemplate (`gang.minGroupCount` = its required subgroups) holding a
//! template per subgroup. Keyed gangs of one plan (e.g. one per LeaderWorkerSet group) are
//! PodGroups of one template. Names: the Workload by `GenerateWorkloadName(root name, root
//! uid)`, a PodGroup by `GeneratePodGroupName(workload, template)` — with the gang's keys
//! appended to the template name when a template has several PodGroups, and the parent's
//! name in place of the workload's for a child of a CompositePodGroup (upstream leaves
//! instance naming to the controller; docs/gangs.md).
//!
//! The API's own limits are checked: at most 8 templates per list, trees at most 4 deep,
//! template names DNS labels unique in the Workload, `minCount` and `minGroupCount` ≥ 1,
//! and one kind of template list at the Workload's top.

use super::names::{dns_label, pod_group_name, workload_name};
use super::{Rendered, Root, Rule, plan_name};
use crate::proto::v1 as pb;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The API, as errors name it.
pub const API: &str = "Kubernetes Workload API objects (scheduling.k8s.io)";
/// `apiVersion` of Workload and PodGroup.
pub const API_VERSION: &str = "scheduling.k8s.io/v1beta1";
/// `apiVersion` of CompositePodGroup.
pub const COMPOSITE_API_VERSION: &str = "scheduling.k8s.io/v1alpha3";
/// `WorkloadMaxPodGroupTemplates`.
pub const MAX_TEMPLATES: usize = 8;
/// `WorkloadMaxTreeDepth`.
pub const MAX_TREE_DEPTH: usize = 4;

struct Builder<'a> {
    root: &'a Root,
    workload: String,
    names: BTreeSet<String>,
    objects: Vec<Value>,
    paths: Vec<Vec<usize>>,
}

/// Renders the Workload, then its PodGroups and CompositePodGroups (parents first).
pub(super) fn render(root: &Root, groups: &[pb::GangGroup]) -> Result<Rendered, Rule> {
    let mut b = Builder {
        root,
        workload: workload_name(&root.name, &root.uid),
        names: BTreeSet::new(),
        objects: Vec::new(),
        paths: Vec::new(),
    };
    // Plans in first-seen order, each with its gangs (and their indices).
    let mut plans: Vec<(String, Vec<(usize, &pb::GangGroup)>)> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let tpl = template_name(plan_name(g))?;
        match plans.iter_mut().find(|(t, _)| *t == tpl) {
            Some((_, gangs)) => gangs.push((i, g)),
            None => plans.push((tpl, vec![(i, g)])),
        }
    }
    let composite = plans
        .iter()
        .map(|(_, gangs)| gangs.iter().any(|(_, g)| !g.subgroups.is_empty()))
        .collect::<BTreeSet<bool>>();
    if composite.len() > 1 {
        return Err(Rule::MixedTemplateLists);
    }
    let composite = composite.contains(&true);
    if plans.len() > MAX_TEMPLATES {
        return Err(Rule::TooManyTemplates {
            count: plans.len(),
            names: excerpt(plans.iter().map(|(t, _)| t.as_str())),
        });
    }
    let mut templates = Vec::new();
    for (tpl, gangs) in &plans {
        // The template takes the first gang's shape; instances differ only in minimums.
        templates.push(b.template(tpl, gangs[0].1, 1)?);
    }
    let key = if composite {
        "compositePodGroupTemplates"
    } else {
        "podGroupTemplates"
    };
    let mut spec = serde_json::Map::new();
    spec.insert(
        "controllerRef".into(),
        json!({
            "apiGroup": root.api_version.rsplit_once('/').map_or("", |(g, _)| g),
            "kind": root.kind,
            "name": root.name,
        }),
    );
    spec.insert(key.into(), Value::Array(templates));
    b.paths.push(Vec::new());
    b.objects.push(json!({
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": root.metadata(&b.workload),
        "spec": spec,
    }));
    for (tpl, gangs) in &plans {
        for &(i, g) in gangs {
            let name = if gangs.len() == 1 {
                pod_group_name(&b.workload, tpl)
            } else {
                let instance = template_name(&g.name)?;
                pod_group_name(&b.workload, &instance)
            };
            let workload = b.workload.clone();
            b.instance(g, &name, tpl, &workload, None, vec![i])?;
        }
    }
    Ok(Rendered {
        objects: b.objects,
        notes: Vec::new(),
        paths: b.paths,
    })
}

fn excerpt<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.take(10).collect();
    names.join(", ")
}

fn template_name(name: &str) -> Result<String, Rule> {
    dns_label(name).ok_or_else(|| Rule::NoTemplateName {
        gang: name.to_owned(),
    })
}

impl Builder<'_> {
    /// The template of gang `g` (and its subgroups), at `depth`.
    fn template(&mut self, name: &str, g: &pb::GangGroup, depth: usize) -> Result<Value, Rule> {
        if depth > MAX_TREE_DEPTH {
            return Err(Rule::TemplateTooDeep {
                template: name.to_owned(),
            });
        }
        if !self.names.insert(name.to_owned()) {
            return Err(Rule::TemplateNameTwice {
                template: name.to_owned(),
            });
        }
        if g.subgroups.is_empty() {
            return Ok(json!({
                "name": name,
                "schedulingPolicy": {"gang": {"minCount": min_count(g)?}},
            }));
        }
        let (mut leaves, mut composites) = (Vec::new(), Vec::new());
        for s in &g.subgroups {
            let child = template_name(&s.name)?;
            let t = self.template(&child, s, depth + 1)?;
            if s.subgroups.is_empty() {
                leaves.push(t);
            } else {
                composites.push(t);
            }
        }
        for (list, what) in [
            (&leaves, "podGroupTemplates"),
            (&composites, "compositePodGroupTemplates"),
        ] {
            if list.len() > MAX_TEMPLATES {
                return Err(Rule::TooManyChildTemplates {
                    template: name.to_owned(),
                    count: list.len(),
                    list: what,
                });
            }
        }
        let mut t = json!({
            "name": name,
            "schedulingPolicy": {"gang": {"minGroupCount": min_group_count(g)?}},
        });
        if !leaves.is_empty() {
            t["podGroupTemplates"] = Value::Array(leaves);
        }
        if !composites.is_empty() {
            t["compositePodGroupTemplates"] = Value::Array(composites);
        }
        Ok(t)
    }

    /// The runtime object of gang `g` (a PodGroup, or a CompositePodGroup and its children).
    fn instance(
        &mut self,
        g: &pb::GangGroup,
        name: &str,
        template: &str,
        workload: &str,
        parent: Option<&str>,
        path: Vec<usize>,
    ) -> Result<(), Rule> {
        let mut spec = serde_json::Map::new();
        if let Some(p) = parent {
            spec.insert("parentCompositePodGroupName".into(), p.into());
        }
        spec.insert(
            "workloadRef".into(),
            json!({"workloadName": workload, "templateName": template}),
        );
        let (api_version, kind) = if g.subgroups.is_empty() {
            spec.insert(
                "schedulingPolicy".into(),
                json!({"gang": {"minCount": min_count(g)?}}),
            );
            (API_VERSION, "PodGroup")
        } else {
            spec.insert(
                "schedulingPolicy".into(),
                json!({"gang": {"minGroupCount": min_group_count(g)?}}),
            );
            (COMPOSITE_API_VERSION, "CompositePodGroup")
        };
        self.paths.push(path.clone());
        self.objects.push(json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": self.root.metadata(name),
            "spec": spec,
        }));
        for (i, s) in g.subgroups.iter().enumerate() {
            let tpl = template_name(&s.name)?;
            let child = pod_group_name(name, &tpl);
            let mut at = path.clone();
            at.push(i);
            self.instance(s, &child, &tpl, workload, Some(name), at)?;
        }
        Ok(())
    }
}

fn min_count(g: &pb::GangGroup) -> Result<u32, Rule> {
    if g.min_member == 0 {
        return Err(Rule::ZeroMinCount {
            gang: g.name.clone(),
        });
    }
    i32::try_from(g.min_member)
        .map(|_| g.min_member)
        .map_err(|_| Rule::PodsBeyondInt32 {
            gang: g.name.clone(),
            pods: g.min_member,
        })
}

fn min_group_count(g: &pb::GangGroup) -> Result<u32, Rule> {
    if g.min_subgroups == 0 {
        return Err(Rule::ZeroMinGroupCount {
            gang: g.name.clone(),
        });
    }
    Ok(g.min_subgroups)
}

/// The minimum a gang object's `spec` states: `gang.minCount` (PodGroup) or
/// `gang.minGroupCount` (CompositePodGroup), by name.
pub fn stated_minimum(spec: &Value) -> Option<(&'static str, i64)> {
    let gang = spec.get("schedulingPolicy")?.get("gang")?;
    if let Some(n) = gang.get("minCount").and_then(Value::as_i64) {
        return Some(("gang.minCount", n));
    }
    gang.get("minGroupCount")
        .and_then(Value::as_i64)
        .map(|n| ("gang.minGroupCount", n))
}
