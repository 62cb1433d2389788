// kartograf web view: one workload, drawn as a picture (root -> components -> instances ->
// pods; gangs as enclosures around their members) with its pods, nodes, diagnostics and
// definition.
"use strict";

(function () {
  const h = K.h;
  const s = K.s;

  const COL = 262;        // column spacing
  const BOX_W = 232;
  const BOX_H = 40;
  const ROW = 50;         // row height (one leaf)
  const PAD = 24;
  const MAX_PODS = 48;    // pods drawn per instance (the table lists them all)
  const GANG_LABEL = 18;  // room above a pod for each gang label that starts there
  const GANG_GAP_BELOW = 8;

  function podClass(p) {
    const phase = p.phase || "";
    if (phase === "Failed") return "bad";
    if (phase === "Succeeded") return "done";
    if (phase === "Running" && p.ready) return "ok";
    if (phase === "Running") return "warn";
    return "pending";
  }

  function countsClass(c) {
    const pods = c || {};
    const desired = pods.desired || 0;
    const ready = pods.ready || 0;
    if (!desired && !(pods.current || 0)) return "muted";
    if (ready >= desired && desired > 0) return "ok";
    if (ready > 0) return "warn";
    return "pending";
  }

  const gpusOf = (res) => (res && res.gpus) || 0;

  // The tree to draw: {label, sub, cls, kind, children, pod?}.
  function tree(w, status) {
    const r = w.ref || {};
    const root = {
      kind: "root", label: (r.kind || "") + " " + (r.name || ""), sub: status + " · " + podsText(w.pods),
      cls: K.STATUS_CLASS[status] || "muted", children: [],
    };
    const comps = w.components || [];
    const own = comps.length === 1 && (comps[0].instances || []).length === 1 && comps[0].kind && comps[0].kind.kind === r.kind;
    if (own) {
      // The root's own component with one instance is the root box itself.
      const i = instance(comps[0].instances[0]);
      root.sub += i.sub.includes("GPUs") ? " · GPUs" + i.sub.split("GPUs")[1] : "";
      root.children = i.children;
    } else {
      for (const c of comps) root.children.push(component(c));
    }
    const loose = w.unattributedPods || [];
    if (loose.length) {
      root.children.push({ kind: "component", label: "pods of no component", sub: loose.length + " pods", cls: "muted",
        children: pods(loose) });
    }
    return root;
  }

  function podsText(p) {
    p = p || {};
    return (p.ready || 0) + "/" + (p.desired || 0) + " ready";
  }

  function component(c) {
    const kind = c.kind ? c.kind.kind : "";
    const instances = c.instances || [];
    if (instances.length === 1) {
      // One instance: component and instance are one box.
      const node = instance(instances[0]);
      node.kind = "component";
      node.label = (c.name || "") + (instances[0].id ? " · " + instances[0].id : "");
      node.sub = (kind ? kind + " · " : "") + node.sub;
      return node;
    }
    const node = { kind: "component", label: c.name || "", sub: (kind ? kind + " · " : "") + instances.length + " instances", children: [] };
    let desired = 0, ready = 0;
    for (const i of instances) {
      desired += (i.pods || {}).desired || 0;
      ready += (i.pods || {}).ready || 0;
      node.children.push(instance(i));
    }
    node.cls = countsClass({ desired, ready, current: desired });
    return node;
  }

  function instance(i) {
    const totals = i.totals || {};
    const g = gpusOf(totals.current);
    const gd = gpusOf(totals.desired);
    const node = {
      kind: "instance", label: i.id || "(instance)", id: i.id || "",
      sub: podsText(i.pods) + (g || gd ? " · GPUs " + K.fmt(g) + "/" + K.fmt(gd) : ""),
      cls: countsClass(i.pods), children: pods(i.podList || []),
    };
    for (const c of i.children || []) node.children.push(component(c));
    return node;
  }

  function pods(list) {
    const out = list.slice(0, MAX_PODS).map((p) => ({
      kind: "pod", label: p.name || "", pod: p,
      sub: (p.phase || "Unknown") + (p.node ? " · " + p.node : " · unscheduled") + (gpusOf(p.resources) ? " · " + K.fmt(gpusOf(p.resources)) + " GPU" : ""),
      cls: podClass(p), children: [],
    }));
    if (list.length > MAX_PODS) out.push({ kind: "more", label: "+" + (list.length - MAX_PODS) + " more pods", sub: "listed below", cls: "muted", children: [] });
    return out;
  }

  // Places leaves one per row and parents at the middle of their children; a pod that enters
  // gang groups gets room above it for their labels.
  function layout(node, depth, next) {
    node.depth = depth;
    if (!node.children.length) {
      const groups = node.pod ? next.member.get(node.pod.name) || [] : [];
      const entered = groups.filter((g) => !next.open.includes(g));
      const left = next.open.filter((g) => !groups.includes(g));
      next.y += left.length * GANG_GAP_BELOW + entered.length * GANG_LABEL;
      node.y = next.y;
      node.entered = entered;
      next.open = groups;
      next.y += ROW;
      next.leaves += 1;
    } else {
      for (const c of node.children) layout(c, depth + 1, next);
      const first = node.children[0].y;
      const last = node.children[node.children.length - 1].y;
      node.y = (first + last) / 2;
    }
    next.depth = Math.max(next.depth, depth);
  }

  function walk(node, f) { f(node); for (const c of node.children) walk(c, f); }

  function clip(text, chars) {
    const t = String(text);
    return t.length > chars ? t.slice(0, chars - 1) + "…" : t;
  }

  // Gang groups, flattened with their nesting level.
  function gangGroups(w) {
    const out = [];
    const visit = (g, level) => { out.push({ g, level }); for (const sg of g.subgroups || []) visit(sg, level + 1); };
    for (const g of (w.gang || {}).groups || []) visit(g, 0);
    return out;
  }

  function draw(w, status) {
    const root = tree(w, status);
    const gangs = gangGroups(w);
    // pod name -> the groups it belongs to (outermost first); groups naming no pods take the
    // pods of their instance.
    const byInstance = new Map();
    walk(root, (n) => { if (n.id) byInstance.set(n.id, n); });
    const member = new Map();
    for (const x of gangs) {
      let names = x.g.pods || [];
      if (!names.length && x.g.instance && byInstance.has(x.g.instance)) {
        names = [];
        walk(byInstance.get(x.g.instance), (n) => { if (n.pod) names.push(n.pod.name); });
      }
      x.names = new Set(names);
      for (const name of names) {
        if (!member.has(name)) member.set(name, []);
        member.get(name).push(x);
      }
    }
    const next = { y: 0, depth: 0, leaves: 0, open: [], member };
    layout(root, 0, next);
    const podDepth = next.depth;
    const maxLevel = gangs.reduce((m, x) => Math.max(m, x.level), -1);
    const gangPad = maxLevel < 0 ? 0 : 8 + 8 * Math.min(4, maxLevel + 1);
    const width = PAD * 2 + next.depth * COL + BOX_W + gangPad * 2 + 8;
    const height = PAD * 2 + next.y + next.open.length * GANG_GAP_BELOW + 10;
    const svg = s("svg", { class: "graph", id: "graph", width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "workload graph" });
    const edges = s("g", { class: "edges" });
    const boxes = s("g", { class: "boxes" });
    const enclosures = s("g", { class: "gangs" });
    svg.appendChild(enclosures);
    svg.appendChild(edges);
    svg.appendChild(boxes);
    const x = (n) => PAD + n.depth * COL;
    const y = (n) => PAD + n.y;
    const podNodes = new Map();
    walk(root, (n) => {
      for (const c of n.children) {
        const x1 = x(n) + BOX_W, y1 = y(n) + BOX_H / 2, x2 = x(c), y2 = y(c) + BOX_H / 2;
        const mid = (x1 + x2) / 2;
        edges.appendChild(s("path", { d: "M" + x1 + " " + y1 + " C" + mid + " " + y1 + " " + mid + " " + y2 + " " + x2 + " " + y2 }));
      }
      if (n.pod) podNodes.set(n.pod.name, n);
      const g = s("g", { class: "node node-" + n.kind + " st-" + n.cls, transform: "translate(" + x(n) + "," + y(n) + ")" });
      g.appendChild(s("rect", { width: BOX_W, height: BOX_H, rx: 6 }));
      g.appendChild(s("rect", { class: "stripe", width: 5, height: BOX_H, rx: 2 }));
      const room = n.pod && gpusOf(n.pod.resources) ? 25 : 30;
      g.appendChild(s("text", { x: 12, y: 16, class: "label" }, clip(n.label, room)));
      g.appendChild(s("text", { x: 12, y: 32, class: "sub" }, clip(n.sub, room + 5)));
      g.appendChild(s("title", null, K.cut(n.label, 500) + "\n" + K.cut(n.sub, 500)));
      if (n.pod && gpusOf(n.pod.resources)) {
        const gx = BOX_W - 30;
        g.appendChild(s("rect", { class: "gpu", x: gx, y: 8, width: 24, height: 24, rx: 4 }));
        g.appendChild(s("text", { class: "gpu-n", x: gx + 12, y: 25 }, K.fmt(gpusOf(n.pod.resources))));
      }
      boxes.appendChild(g);
    });
    // Gangs: an enclosure around the drawn members, labelled with the group's minimum.
    for (const grp of gangs) {
      const members = [...grp.names].map((n) => podNodes.get(n)).filter(Boolean);
      if (!members.length) continue;
      const first = members.reduce((a, b) => (a.y <= b.y ? a : b));
      const last = members.reduce((a, b) => (a.y >= b.y ? a : b));
      // Labels of groups that start at the same pod stack, the outermost on top.
      const above = (first.entered || []).filter((o) => o.level >= grp.level).length;
      const below = Math.max(0, maxLevel - grp.level);
      const inset = 8 + 8 * Math.max(0, Math.min(4, maxLevel - grp.level));
      const top = y(first) - 4 - above * GANG_LABEL;
      const bottom = y(last) + BOX_H + 3 + below * 3;
      const left = PAD + podDepth * COL - inset;
      const encl = s("g", { class: "gang gang-l" + Math.min(grp.level, 3) });
      encl.appendChild(s("rect", { x: left, y: top, width: BOX_W + inset * 2, height: bottom - top, rx: 8 }));
      const total = grp.names.size;
      const fits = Math.floor((BOX_W + inset * 2 - 16) / 6.4);
      encl.appendChild(s("text", { x: left + 8, y: top + 13 }, clip("gang " + (grp.g.name || "") + " · min " + (grp.g.minMember || 0) + "/" + total, fits)));
      encl.appendChild(s("title", null, "gang " + K.cut(grp.g.name, 300) + ": at least " + (grp.g.minMember || 0) + " of its " + total + " pods are placed together" + (grp.g.minSubgroups ? "; at least " + grp.g.minSubgroups + " subgroups" : "")));
      enclosures.appendChild(encl);
    }
    return svg;
  }

  function kv(label, value) {
    return [h("dt", null, label), h("dd", null, value)];
  }

  function allPods(w) {
    const out = [];
    const visit = (c, path) => {
      for (const i of c.instances || []) {
        for (const p of i.podList || []) out.push({ p, component: path + c.name, instance: i.id || "" });
        for (const cc of i.children || []) visit(cc, path + c.name + "/");
      }
    };
    for (const c of w.components || []) visit(c, "");
    for (const p of w.unattributedPods || []) out.push({ p, component: "", instance: "" });
    return out;
  }

  K.pages.workload = function (root, params) {
    const uid = params.get("uid") || "";
    const cluster = params.get("cluster") || "";
    const page = {
      wants: (data) => data.more > 0 || data.changes.some((c) => c.uid === uid),
    };
    page.load = async function () {
      let d;
      try {
        d = await K.api("workload" + K.qs({ uid, cluster }));
      } catch (err) {
        if (err.status === 404) {
          K.clear(root).appendChild(h("div", { class: "card" }, h("h1", null, "Workload not found"),
            h("p", null, K.cut(err.message, 500)), h("p", null, h("a", { href: "#/workloads" }, "All workloads"))));
          return;
        }
        throw err;
      }
      const w = d.workload;
      const r = w.ref || {};
      const totals = w.totals || {};
      const pods = allPods(w);
      const nodes = new Map();
      for (const { p } of pods) {
        const n = p.node || "(unscheduled)";
        const e = nodes.get(n) || { pods: 0, gpus: 0 };
        e.pods += 1;
        e.gpus += gpusOf(p.resources);
        nodes.set(n, e);
      }
      const labels = Object.entries(w.labels || {});
      const def = d.definition;
      const diagnostics = w.diagnostics || [];
      const view = h("div", { class: "workload", "data-revision": d.revision },
        h("p", { class: "crumbs" }, h("a", { href: "#/workloads" }, "Workloads"), " / ", K.t(r.namespace), " / ", K.t(r.kind)),
        h("h1", null, K.pill(d.status), " ", K.t(r.name, 200, "title")),
        h("dl", { class: "facts" },
          kv("Kind", [K.t(r.apiVersion), " ", K.t(r.kind)]),
          kv("Namespace", K.t(r.namespace)),
          w.cluster ? kv("Cluster", K.t(w.cluster)) : null,
          kv("Pods", [K.fmt((w.pods || {}).ready) + " ready, " + K.fmt((w.pods || {}).current) + " current, " + K.fmt((w.pods || {}).desired) + " desired"]),
          kv("GPUs held / desired", K.bar(gpusOf(totals.current), gpusOf(totals.desired))),
          kv("Definition", def ? [K.t(def.name), " (", K.t(def.origin, 120), ")"] : K.t((w.definition || {}).name)),
          w.created ? kv("Created", K.t(w.created)) : null,
          (w.status || {}).rawPhase ? kv("Reported phase", K.t(w.status.rawPhase)) : null,
          kv("Revision", String(w.revision || d.revision))),
        labels.length ? h("div", { class: "labels" }, labels.slice(0, 50).map(([k, v]) => h("span", { class: "label-chip" }, K.t(k, 80), "=", K.t(v, 120))),
          labels.length > 50 ? h("span", { class: "muted" }, " +" + (labels.length - 50) + " more") : null) : null,
        diagnostics.length ? h("section", { class: "card diagnostics" }, h("h2", null, "Diagnostics"),
          h("ul", null, diagnostics.slice(0, 100).map((x) => h("li", { class: "diag diag-" + (x.severity || "info") },
            h("span", { class: "pill pill-" + (x.severity === "error" ? "bad" : x.severity === "warning" ? "warn" : "muted") }, x.severity || "info"), " ",
            h("code", null, K.t(x.code, 80)), " ", K.t(x.message, 1000), x.component ? h("span", { class: "muted" }, " · component ", K.t(x.component, 80)) : null)))) : null,
        h("section", { class: "card" }, h("h2", null, "Graph"),
          h("div", { class: "legend" }, ["ok:ready", "warn:not ready", "pending:pending", "bad:failed", "done:done"].map((x) => {
            const [c, t] = x.split(":");
            return h("span", { class: "legend-item st-" + c }, h("span", { class: "swatch" }), t);
          }), h("span", { class: "legend-item" }, h("span", { class: "swatch swatch-gpu" }), "GPUs of a pod"),
          h("span", { class: "legend-item" }, h("span", { class: "swatch swatch-gang" }), "gang")),
          h("div", { class: "graphwrap" }, draw(w, d.status))),
        h("div", { class: "cols cols-main" },
          h("section", { class: "card" }, h("h2", null, "Pods (" + pods.length + ")"),
            h("table", { class: "grid", id: "pods" },
              h("thead", null, h("tr", null, h("th", null, "Pod"), h("th", null, "Component / instance"), h("th", null, "Node"), h("th", null, "Phase"), h("th", { class: "num" }, "GPUs"))),
              h("tbody", null, pods.slice(0, 1000).map(({ p, component, instance }) => h("tr", null,
                h("td", null, K.t(p.name, 120)),
                h("td", null, K.t(component, 80), instance ? [" / ", K.t(instance, 80)] : null),
                h("td", null, p.node ? K.t(p.node, 80) : h("span", { class: "muted" }, "unscheduled")),
                h("td", null, h("span", { class: "pill pill-" + podClass(p) }, (p.phase || "Unknown") + (p.ready ? ", ready" : "")), p.reason ? [" ", K.t(p.reason, 200)] : null),
                h("td", { class: "num" }, K.fmt(gpusOf(p.resources)))))))),
          h("section", { class: "card" }, h("h2", null, "Nodes (" + nodes.size + ")"),
            h("table", { class: "grid", id: "nodes" },
              h("thead", null, h("tr", null, h("th", null, "Node"), h("th", { class: "num" }, "Pods"), h("th", { class: "num" }, "GPUs"))),
              h("tbody", null, [...nodes.entries()].sort().slice(0, 1000).map(([n, e]) => h("tr", null,
                h("td", null, K.t(n, 120)), h("td", { class: "num" }, String(e.pods)), h("td", { class: "num" }, K.fmt(e.gpus)))))))),
        def ? h("section", { class: "card" }, h("h2", null, "Definition ", K.t(def.name)),
          h("p", { class: "muted" }, "Root ", K.t(def.root_kind), " · origin ", K.t(def.origin, 200), " · generation " + def.generation),
          def.quarantined ? h("p", { class: "bad" }, "Quarantined: ", K.t(def.quarantined, 2000)) : null,
          (def.warnings || []).slice(0, 20).map((x) => h("p", { class: "warn" }, K.t(x, 1000))),
          h("details", null, h("summary", null, "The definition as written"), h("pre", { class: "text" }, K.cut(def.text, 200000)))) : null);
      K.clear(root).appendChild(view);
    };
    return page;
  };
})();
