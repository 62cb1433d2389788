// kartograf web view: the overview, workloads and definitions pages.
"use strict";



(function () {
  const h = K.h;

  function section(title, ...children) {
    return h("section", { class: "card" }, h("h2", null, title), ...children);
  }

  function stat(label, value, sub, cls) {
    return h("div", { class: ["stat", cls] }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label), sub ? h("div", { class: "stat-sub" }, sub) : null);
  }

  // ---------- overview ----------

  function keyCell(key, href, isKind) {
    let content = K.t(key);
    if (isKind && key.includes("/")) {
      const i = key.lastIndexOf("/");
      content = h("span", { class: "kindkey" }, K.t(key.slice(i + 1)), h("small", null, K.t(key.slice(0, i))));
    }
    return href ? h("a", { href }, content) : content;
  }

  function totalsTable(rows, keyLabel, link) {
    if (!rows.length) return h("p", { class: "muted" }, "No workloads.");
    const body = rows.map((r) => {
      const key = r.key === "" ? "(none)" : r.key;
      return h("tr", null,
        h("td", null, keyCell(key, link ? link(r) : null, keyLabel === "Kind")),
        h("td", { class: "num" }, K.fmt(r.workloads)),
        h("td", { class: "num" }, K.fmt(r.pods_ready) + " / " + K.fmt(r.pods_desired)),
        h("td", null, K.bar(Math.round(r.gpus_held * 100) / 100, Math.round(r.gpus_desired * 100) / 100)));
    });
    return h("table", { class: "grid" },
      h("thead", null, h("tr", null, h("th", null, keyLabel), h("th", { class: "num" }, "Workloads"), h("th", { class: "num" }, "Pods ready"), h("th", null, "GPUs held / desired"))),
      h("tbody", null, body));
  }

  K.pages.overview = function (root) {
    const page = { wants: () => true };
    page.load = async function () {
      const o = await K.api("overview");
      const g = o.gpus;
      const d = o.definitions;
      const statuses = Object.entries(o.by_status);
      const sourcesBad = o.sources.filter((s) => !s.synced || s.problems > 0).length;
      const view = h("div", { class: "overview" },
        h("h1", null, "Overview"),
        o.synced ? null : h("p", { class: "notice notice-warn" }, "Still loading the first full view of: " + o.pending.join(", ")),
        h("div", { class: "stats" },
          stat("workloads", K.fmt(o.workloads), o.by_cluster.length === 1 ? "cluster " + K.cut(o.by_cluster[0].key, 60) : o.by_cluster.length + " clusters"),
          stat("GPUs held / desired", K.bar(Math.round(g.held * 10) / 10, Math.round(g.desired * 10) / 10), null, "wide"),
          stat("GPUs held, workload not running", K.fmt(g.held_not_working), "completed, failed, suspended", g.held_not_working > 0 ? "warn" : null),
          stat("GPUs held by pods of no workload", K.fmt(g.unowned), o.unowned_total + " pods", g.unowned > 0 ? "warn" : null),
          stat("definitions", K.fmt(d.active), d.with_warnings + " with warnings · " + d.quarantined + " quarantined · " + d.failed_files + " failed files", d.quarantined + d.failed_files > 0 ? "bad" : null),
          stat("sources", K.fmt(o.sources.length), sourcesBad ? sourcesBad + " with problems" : "all synced", sourcesBad ? "warn" : null)),
        h("div", { class: "chips" }, statuses.map(([s, n]) =>
          h("a", { class: "chip", href: "#/workloads" + K.qs({ status: s }) }, K.pill(s), " ", K.fmt(n)))),
        o.by_cluster.length > 1 ?
          section("By cluster", totalsTable(o.by_cluster, "Cluster", (r) => "#/workloads" + K.qs({ cluster: r.key }))) : null,
        h("div", { class: "cols" },
          section("By namespace", totalsTable(o.by_namespace, "Namespace", (r) => "#/workloads" + K.qs({ namespace: r.key }))),
          section("By kind", totalsTable(o.by_kind, "Kind", (r) => "#/workloads" + K.qs({ kind: r.key.split("/").pop() })))),
        h("div", { class: "cols" },
          section("GPUs held by workloads not running",
            o.not_working.length ? h("table", { class: "grid" },
              h("thead", null, h("tr", null, h("th", null, "Workload"), h("th", null, "Status"), h("th", { class: "num" }, "GPUs held"))),
              h("tbody", null, o.not_working.map((w) => h("tr", null,
                h("td", null, h("a", { href: K.workloadHref(w.uid, w.cluster) }, K.t(w.kind), " ", K.t(w.namespace), "/", K.t(w.name))),
                h("td", null, K.pill(w.status)),
                h("td", { class: "num" }, K.fmt(w.gpus_held)))))) : h("p", { class: "muted" }, "None: every held GPU belongs to a running workload.")),
          section("GPUs held by pods of no workload",
            o.unowned.length ? h("table", { class: "grid" },
              h("thead", null, h("tr", null, h("th", null, "Pod"), h("th", null, "Controller"), h("th", { class: "num" }, "GPUs"))),
              h("tbody", null, o.unowned.map((p) => h("tr", null,
                h("td", null, K.t(p.namespace), "/", K.t(p.name)),
                h("td", null, p.owner_kind ? [K.t(p.owner_kind), " ", K.t(p.owner_name)] : h("span", { class: "muted" }, "none")),
                h("td", { class: "num" }, K.fmt(p.gpus)))))) : h("p", { class: "muted" }, "None."))),
        section("Sources", h("table", { class: "grid" },
          h("thead", null, h("tr", null, h("th", null, "Source"), h("th", null, "Synced"), h("th", null, "Problems"))),
          h("tbody", null, o.sources.map((s) => h("tr", null,
            h("td", null, K.t(s.name)),
            h("td", null, s.synced ? h("span", { class: "pill pill-ok" }, "synced") : h("span", { class: "pill pill-pending" }, "syncing")),
            h("td", null, s.problems ? [K.fmt(s.problems), " · ", K.t(s.first_problem, 200)] : h("span", { class: "muted" }, "none"))))))));
      K.clear(root).appendChild(view);
    };
    return page;
  };

  // ---------- workloads ----------

  const COLUMNS = [
    ["status", "Status"], ["name", "Name"], ["namespace", "Namespace"], ["kind", "Kind"],
    ["cluster", "Cluster"], ["pods", "Pods"], ["gpus", "GPUs held / desired"], ["created", "Created"], ["diagnostics", "Diagnostics"],
  ];
  const PAGE = 100;

  K.pages.workloads = function (root, params) {
    const state = {
      cluster: params.get("cluster") || "", namespace: params.get("namespace") || "",
      kind: params.get("kind") || "", status: params.get("status") || "",
      selector: params.get("selector") || "", q: params.get("q") || "",
      sort: params.get("sort") || "namespace", desc: params.get("desc") === "1",
      offset: Number(params.get("offset")) || 0,
    };
    let controller = null;
    let typing = null;
    const selects = {};
    const mkSelect = (key, label) => {
      const el = h("select", { id: "f-" + key, "aria-label": label }, h("option", { value: "" }, "all " + label));
      el.addEventListener("change", () => { state[key] = el.value; state.offset = 0; update(); });
      selects[key] = el;
      return h("label", { class: "field" }, h("span", null, label), el);
    };
    const mkInput = (key, label, placeholder) => {
      const el = h("input", { id: "f-" + key, type: "search", placeholder, value: state[key], spellcheck: "false", autocomplete: "off" });
      el.addEventListener("input", () => {
        clearTimeout(typing);
        typing = setTimeout(() => { state[key] = el.value.trim(); state.offset = 0; update(); }, 120);
      });
      return h("label", { class: "field grow" }, h("span", null, label), el);
    };
    const filters = h("div", { class: "filters" },
      mkInput("q", "Name", "part of a name"),
      mkSelect("cluster", "clusters"), mkSelect("namespace", "namespaces"), mkSelect("kind", "kinds"), mkSelect("status", "statuses"),
      mkInput("selector", "Label selector", "app=train,tier in (a,b)"));
    const summary = h("span", { class: "count", id: "count" });
    const error = h("p", { class: "filter-error", id: "filter-error", hidden: true });
    const prev = h("button", { type: "button", id: "prev" }, "‹ Previous");
    const next = h("button", { type: "button", id: "next" }, "Next ›");
    prev.addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); update(); });
    next.addEventListener("click", () => { state.offset += PAGE; update(); });
    const headRow = h("tr", null);
    for (const [key, label] of COLUMNS) {
      const th = h("th", { class: ["sortable", key === "pods" || key === "diagnostics" ? "num" : null], "data-sort": key }, label);
      th.addEventListener("click", () => {
        if (state.sort === key) state.desc = !state.desc;
        else { state.sort = key; state.desc = key === "gpus" || key === "pods" || key === "diagnostics" || key === "created"; }
        state.offset = 0;
        update();
      });
      headRow.appendChild(th);
    }
    const tbody = h("tbody", { id: "rows" });
    const table = h("table", { class: "grid workloads", id: "workloads" }, h("thead", null, headRow), tbody);
    root.appendChild(h("div", null, h("h1", null, "Workloads"), filters, error,
      h("div", { class: "pager" }, summary, h("span", { class: "spacer" }), prev, next),
      h("div", { class: "tablewrap" }, table)));

    function fillChoices(el, values, chosen) {
      const keep = el.value;
      while (el.options.length > 1) el.remove(1);
      const all = values.slice();
      if (chosen && !all.includes(chosen)) all.push(chosen);
      for (const v of all) el.appendChild(h("option", { value: v }, v === "" ? "(none)" : K.cut(v, 80)));
      el.value = chosen || keep || "";
    }

    function update() {
      const q = {};
      for (const k of ["cluster", "namespace", "kind", "status", "selector", "q", "sort"]) if (state[k] && !(k === "sort" && state[k] === "namespace")) q[k] = state[k];
      if (state.desc) q.desc = "1";
      if (state.offset) q.offset = state.offset;
      history.replaceState(null, "", "#/workloads" + K.qs(q));
      page.load().catch(K.failed);
    }

    function row(w) {
      const created = w.created ? w.created.replace("T", " ").replace(/\+00:00$|Z$/, "") : "";
      return h("tr", { "data-uid": w.uid },
        h("td", null, K.pill(w.status)),
        h("td", { class: "name" }, h("a", { href: K.workloadHref(w.uid, w.cluster) }, K.t(w.name, 120))),
        h("td", null, K.t(w.namespace, 80)),
        h("td", null, K.t(w.kind, 80)),
        h("td", null, K.t(w.cluster, 80)),
        h("td", { class: "num" }, K.fmt(w.pods_ready) + " / " + K.fmt(w.pods_desired)),
        h("td", null, w.gpus_desired || w.gpus_held ? K.bar(w.gpus_held, w.gpus_desired) : h("span", { class: "muted" }, "–")),
        h("td", { class: "muted nowrap" }, K.t(created, 40)),
        h("td", { class: "num" }, w.warnings ? h("span", { class: "pill pill-warn" }, String(w.warnings)) : w.diagnostics ? String(w.diagnostics) : ""));
    }

    const page = { wants: () => true };
    page.load = async function () {
      if (controller) controller.abort();
      controller = new AbortController();
      const query = K.qs({
        cluster: state.cluster, namespace: state.namespace, kind: state.kind, status: state.status,
        selector: state.selector, q: state.q, sort: state.sort, desc: state.desc ? "1" : "", offset: state.offset, limit: PAGE,
      });
      let p;
      try {
        p = await K.api("workloads" + query, controller.signal);
      } catch (err) {
        if (err.status === 400) { error.textContent = K.cut(err.message, 500); error.hidden = false; return; }
        throw err;
      }
      error.hidden = true;
      fillChoices(selects.cluster, p.choices.clusters, state.cluster);
      fillChoices(selects.namespace, p.choices.namespaces, state.namespace);
      fillChoices(selects.kind, p.choices.kinds, state.kind);
      fillChoices(selects.status, p.choices.statuses, state.status);
      const frag = document.createDocumentFragment();
      for (const w of p.rows) frag.appendChild(row(w));
      K.clear(tbody).appendChild(frag);
      if (!p.rows.length) tbody.appendChild(h("tr", null, h("td", { colspan: COLUMNS.length, class: "muted" }, "No workload matches.")));
      const end = p.offset + p.rows.length;
      summary.textContent = p.total ? (p.offset + 1).toLocaleString() + "–" + end.toLocaleString() + " of " + p.total.toLocaleString() + (p.total !== p.all ? " (" + p.all.toLocaleString() + " in all)" : "") : "0 of " + p.all.toLocaleString();
      prev.disabled = p.offset === 0;
      next.disabled = end >= p.total;
      for (const th of headRow.children) {
        th.classList.toggle("sorted", th.dataset.sort === state.sort);
        th.classList.toggle("desc", th.dataset.sort === state.sort && state.desc);
      }
      table.dataset.ready = "1";
      table.dataset.revision = String(p.revision);
      // For time-to-interactive measurements (benches/ui_browser.py).
      performance.mark("kartograf:workloads-rendered");
    };
    page.dispose = () => { if (controller) controller.abort(); };
    return page;
  };

  // ---------- definitions ----------

  K.pages.definitions = function (root) {
    const page = { wants: () => false };
    page.load = async function () {
      const p = await K.api("definitions");
      const defs = p.definitions.definitions || [];
      const sources = p.sources.sources || [];
      const failed = defs.filter((d) => !d.active);
      const active = defs.filter((d) => d.active);
      const gvk = (k) => (k ? (k.group ? k.group + "/" : "") + k.version + " " + k.kind : "");
      const view = h("div", null,
        h("h1", null, "Definitions"),
        h("p", { class: "muted" }, "Catalog generation " + (p.definitions.generation || 0) + " · " + active.length + " active · " + failed.length + " files that did not load"),
        failed.length ? section("Errors", failed.map((d) => h("div", { class: "deferr" }, h("strong", null, K.t(d.name)), h("pre", { class: "text" }, K.cut(d.lastError, 20000))))) : null,
        section("Active definitions", h("table", { class: "grid" },
          h("thead", null, h("tr", null, h("th", null, "Name"), h("th", null, "Root kind"), h("th", null, "Origin"), h("th", { class: "num" }, "Generation"), h("th", null, "Components"), h("th", null, "State"))),
          h("tbody", null, active.map((d) => {
            const warnings = d.warnings || [];
            const state = d.quarantined ? h("span", { class: "pill pill-bad" }, "quarantined") :
              d.lastError ? h("span", { class: "pill pill-bad" }, "errors") :
              warnings.length ? h("span", { class: "pill pill-warn" }, warnings.length + " warnings") : h("span", { class: "pill pill-ok" }, "ok");
            const rows = [h("tr", null,
              h("td", null, K.t(d.name)), h("td", null, K.t(gvk(d.rootKind))), h("td", null, K.t(d.origin, 80)),
              h("td", { class: "num" }, String(d.generation || 0)), h("td", null, K.t((d.components || []).join(", "), 200)), h("td", null, state))];
            const details = [];
            if (d.quarantined) details.push(h("div", { class: "bad" }, "Quarantined: ", K.t(d.quarantineReason, 2000)));
            if (d.lastError) details.push(h("div", { class: "bad" }, "Errors: ", K.t(d.lastError, 2000)));
            for (const w of warnings.slice(0, 20)) details.push(h("div", { class: "warn" }, K.t(w, 1000)));
            if (warnings.length > 20) details.push(h("div", { class: "muted" }, (warnings.length - 20) + " more warnings"));
            if (details.length) rows.push(h("tr", { class: "detail" }, h("td", { colspan: 6 }, details)));
            return rows;
          })))),
        section("Sources", h("table", { class: "grid" },
          h("thead", null, h("tr", null, h("th", null, "Source"), h("th", null, "Synced"), h("th", null, "Problems"))),
          h("tbody", null, sources.map((s) => h("tr", null,
            h("td", null, K.t(s.name)), h("td", null, s.synced ? "yes" : "not yet"),
            h("td", null, (s.problems || []).slice(0, 10).map((pr) => h("div", null, K.t(pr.path, 200), ": ", K.t(pr.message, 500))))))))));
      K.clear(root).appendChild(view);
    };
    return page;
  };
})();
