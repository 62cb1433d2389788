//! The readable terminal view of a workload graph, like `kubectl describe`.

use crate::proto::v1 as pb;
use std::fmt::Write;

/// Formats a GPU count: integers plainly, fractions with up to two decimals.
pub fn gpus(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Formats a memory amount in binary units.
pub fn memory(bytes: i64) -> String {
    for (suffix, shift) in crate::model::resources::BINARY_SUFFIXES.iter().rev() {
        let size = 1i64 << shift;
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if (v - v.round()).abs() < 1e-9 {
                format!("{}{suffix}", v.round() as i64)
            } else {
                format!("{v:.1}{suffix}")
            };
        }
    }
    bytes.to_string()
}

/// Formats CPU millicores as cores.
pub fn cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// A kubectl-style table of workloads: NAMESPACE, NAME, KIND, STATUS, READY (ready/desired
/// pods), GPUS (held/desired).
pub fn workload_table(workloads: &[pb::Workload]) -> String {
    let rows: Vec<Vec<String>> = workloads.iter().map(workload_row).collect();
    table(&WORKLOAD_COLUMNS, &rows)
}

/// Columns of [`workload_row`].
pub const WORKLOAD_COLUMNS: [&str; 6] = ["NAMESPACE", "NAME", "KIND", "STATUS", "READY", "GPUS"];

/// One workload as table cells: namespace, name, kind, status, ready/desired, held/desired GPUs.
pub fn workload_row(w: &pb::Workload) -> Vec<String> {
    let r = w.r#ref.clone().unwrap_or_default();
    let pods = w.pods.unwrap_or_default();
    let t = w.totals.clone().unwrap_or_default();
    vec![
        r.namespace,
        r.name,
        r.kind,
        crate::proto::phase_name(w.status.as_ref().map_or(0, |s| s.phase)).to_owned(),
        format!("{}/{}", pods.ready, pods.desired),
        format!(
            "{}/{}",
            gpus(t.current.unwrap_or_default().gpus),
            gpus(t.desired.unwrap_or_default().gpus)
        ),
    ]
}

/// Renders a left-aligned table with two spaces between columns.
pub fn table<R: AsRef<[String]>>(headers: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref().iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    for row in rows {
        line(row.as_ref().iter().map(String::as_str).collect(), &mut out);
    }
    out
}

fn held(totals: &Option<pb::Totals>) -> (f64, f64) {
    let t = totals.clone().unwrap_or_default();
    (
        t.current.unwrap_or_default().gpus,
        t.desired.unwrap_or_default().gpus,
    )
}

/// Nodes where the instance's non-terminal pods (and its children's) run.
fn nodes(instance: &pb::Instance) -> Vec<String> {
    let mut nodes: Vec<String> = instance
        .pod_list
        .iter()
        .filter(|p| !matches!(p.phase.as_str(), "Succeeded" | "Failed"))
        .map(|p| p.node.clone())
        .filter(|n| !n.is_empty())
        .collect();
    for child in &instance.children {
        for inst in &child.instances {
            nodes.extend(self::nodes(inst));
        }
    }
    nodes.sort();
    nodes.dedup();
    nodes
}

struct Row {
    label: String,
    cols: String,
}

fn component_rows(
    component: &pb::Component,
    prefix: &str,
    last: bool,
    depth: usize,
    rows: &mut Vec<Row>,
) {
    let (branch, next) = if depth == 0 {
        ("", "")
    } else if last {
        ("└─ ", "   ")
    } else {
        ("├─ ", "│  ")
    };
    let kind = component
        .kind
        .as_ref()
        .map(|k| format!(" ({})", k.kind))
        .unwrap_or_default();
    let child_prefix = format!("{prefix}{next}");
    // A component with one unnamed instance is shown on one line with that instance.
    let single = component.instances.len() == 1
        && component.instances[0].id.is_empty()
        && component.instances[0].replica.is_empty();
    if single {
        let inst = &component.instances[0];
        rows.push(Row {
            label: format!("{prefix}{branch}{}{kind}", component.name),
            cols: instance_cols(inst),
        });
        instance_body(inst, &child_prefix, rows, depth + 1);
        return;
    }
    rows.push(Row {
        label: format!("{prefix}{branch}{}{kind}", component.name),
        cols: String::new(),
    });
    let n = component.instances.len();
    for (i, inst) in component.instances.iter().enumerate() {
        let last = i + 1 == n;
        let (b, nx) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        let mut label = if inst.id.is_empty() {
            component.name.clone()
        } else {
            inst.id.clone()
        };
        if !inst.replica.is_empty() {
            let _ = write!(label, "[{}]", inst.replica);
        }
        rows.push(Row {
            label: format!("{child_prefix}{b}{label}"),
            cols: instance_cols(inst),
        });
        instance_body(inst, &format!("{child_prefix}{nx}"), rows, depth + 2);
    }
}

fn instance_cols(inst: &pb::Instance) -> String {
    let pods = inst.pods.unwrap_or_default();
    let (h, d) = held(&inst.totals);
    let mut cols = format!("{}/{} ready", pods.ready, pods.desired);
    if h > 0.0 || d > 0.0 {
        let _ = write!(cols, "   gpu {}/{}", gpus(h), gpus(d));
    }
    let nodes = nodes(inst);
    if !nodes.is_empty() {
        let _ = write!(cols, "   {}", nodes.join(","));
    }
    cols
}

fn instance_body(inst: &pb::Instance, prefix: &str, rows: &mut Vec<Row>, depth: usize) {
    let total = inst.pod_list.len() + inst.children.len();
    let mut k = 0;
    for pod in &inst.pod_list {
        k += 1;
        let b = if k == total { "└─ " } else { "├─ " };
        rows.push(Row {
            label: format!("{prefix}{b}pod {}", pod.name),
            cols: pod_cols(pod),
        });
    }
    for child in &inst.children {
        k += 1;
        component_rows(child, prefix, k == total, depth.max(1), rows);
    }
}

fn pod_cols(pod: &pb::PodInfo) -> String {
    let mut status = if pod.phase.is_empty() {
        "Unknown".to_owned()
    } else {
        pod.phase.clone()
    };
    if !pod.ready && !pod.reason.is_empty() {
        let _ = write!(status, " ({})", pod.reason);
    } else if pod.phase == "Running" && !pod.ready {
        status.push_str(" (not ready)");
    }
    let g = pod.resources.as_ref().map_or(0.0, |r| r.gpus);
    let mut cols = status;
    if g > 0.0 {
        let _ = write!(cols, "   gpu {}", gpus(g));
    }
    let _ = write!(
        cols,
        "   {}",
        if pod.node.is_empty() {
            "<none>"
        } else {
            &pod.node
        }
    );
    cols
}

fn gang_rows(group: &pb::GangGroup, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    let mut line = format!("{pad}{}   min {} pod(s)", group.name, group.min_member);
    if group.min_subgroups > 0 {
        let _ = write!(
            line,
            ", {} of {} subgroup(s)",
            group.min_subgroups,
            group.subgroups.len()
        );
    }
    let _ = write!(line, "   members {}", group.pods.len());
    out.push_str(&line);
    out.push('\n');
    for sub in &group.subgroups {
        gang_rows(sub, indent + 1, out);
    }
}

/// Renders the whole view.
pub fn render(w: &pb::Workload) -> String {
    let mut out = String::new();
    let r = w.r#ref.clone().unwrap_or_default();
    let def = w.definition.clone().unwrap_or_default();
    let ns = if r.namespace.is_empty() {
        "<none>".to_owned()
    } else {
        r.namespace.clone()
    };
    let _ = writeln!(
        out,
        "{}/{}   namespace: {ns}   definition: {} ({})",
        r.kind, r.name, def.name, def.origin
    );
    let status = w.status.clone().unwrap_or_default();
    let matched: Vec<&str> = status
        .matched
        .iter()
        .map(|p| crate::proto::phase_name(*p))
        .collect();
    let _ = write!(out, "Status:    {}", crate::proto::phase_name(status.phase));
    if matched.len() > 1 {
        let _ = write!(out, " (matched: {})", matched.join(", "));
    }
    if !status.raw_phase.is_empty() {
        let _ = write!(out, "   raw phase: {}", status.raw_phase);
    }
    out.push('\n');
    let pods = w.pods.unwrap_or_default();
    let _ = writeln!(
        out,
        "Pods:      {}/{} ready, {} current",
        pods.ready, pods.desired, pods.current
    );
    let totals = w.totals.clone().unwrap_or_default();
    let (cur, des) = (
        totals.current.unwrap_or_default(),
        totals.desired.unwrap_or_default(),
    );
    let _ = writeln!(
        out,
        "GPUs:      {} held / {} desired",
        gpus(cur.gpus),
        gpus(des.gpus)
    );
    let _ = writeln!(
        out,
        "CPU:       {} held / {} desired     Memory: {} held / {} desired",
        cpu(cur.cpu_millis),
        cpu(des.cpu_millis),
        memory(cur.memory_bytes),
        memory(des.memory_bytes)
    );
    if !w.components.is_empty() {
        out.push_str("Components:\n");
        let mut rows = Vec::new();
        for c in &w.components {
            component_rows(c, "  ", true, 0, &mut rows);
        }
        let width = rows
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(0);
        for row in rows {
            let pad = width - row.label.chars().count();
            let _ = writeln!(out, "{}{}   {}", row.label, " ".repeat(pad), row.cols);
        }
    }
    if !w.unattributed_pods.is_empty() {
        out.push_str("Unattributed pods:\n");
        for pod in &w.unattributed_pods {
            let _ = writeln!(out, "  pod {}   {}", pod.name, pod_cols(pod));
        }
    }
    if let Some(gang) = w.gang.as_ref().filter(|g| !g.groups.is_empty()) {
        out.push_str("Gangs:\n");
        for g in &gang.groups {
            gang_rows(g, 1, &mut out);
        }
    }
    if !w.diagnostics.is_empty() {
        out.push_str("Diagnostics:\n");
        for d in &w.diagnostics {
            let mut line = format!("  {:<8} {}: {}", d.severity, d.code, d.message);
            if !d.component.is_empty() {
                let _ = write!(line, " [component {}]", d.component);
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
