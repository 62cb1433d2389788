// kartograf web view: routing, the live indicator and the token prompt.
"use strict";

(function () {
  const h = K.h;
  const main = document.getElementById("main");
  const notice = document.getElementById("notice");
  const liveEl = document.getElementById("live");
  let current = null; // {name, page}
  let refreshTimer = null;

  K.notice = function (text, kind) {
    K.clear(notice);
    if (!text) { notice.hidden = true; return; }
    notice.className = "notice notice-" + (kind || "info");
    notice.appendChild(h("span", null, text));
    const close = h("button", { type: "button", class: "link", "aria-label": "dismiss" }, "dismiss");
    close.addEventListener("click", () => K.notice(null));
    notice.appendChild(close);
    notice.hidden = false;
  };

  function route() {
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, query] = hash.split("?");
    return { path, params: new URLSearchParams(query || "") };
  }

  function pageFor(path) {
    if (path === "/workloads") return ["workloads", K.pages.workloads];
    if (path === "/workload") return ["workload", K.pages.workload];
    if (path === "/definitions") return ["definitions", K.pages.definitions];
    return ["overview", K.pages.overview];
  }

  function showTokenPrompt(message) {
    K.clear(main);
    const input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "bearer token", size: 40 });
    const form = h("form", { class: "card token" },
      h("h2", null, "A token is needed"),
      h("p", { class: "muted" }, message || "This server requires a bearer token with the resolver scope (and definitions for the definitions page)."),
      h("label", { for: "token" }, "Token "), input, " ",
      h("button", { type: "submit" }, "Use token"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      K.setToken(input.value.trim());
      live.drop();
      render();
    });
    main.appendChild(form);
    input.focus();
  }

  K.failed = function (err) {
    if (err && (err.status === 401 || err.status === 403)) {
      showTokenPrompt(err.status === 403 ? "The token may not read this: " + err.message : null);
      return;
    }
    if (err && err.name === "AbortError") return;
    K.clear(main);
    main.appendChild(h("div", { class: "card error" }, h("h2", null, "Could not load"), h("p", null, K.cut(err && err.message, 2000))));
  };

  async function render() {
    const { path, params } = route();
    const [name, factory] = pageFor(path);
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("active", a.dataset.page === name || (name === "workload" && a.dataset.page === "workloads"));
    }
    if (current && current.page.dispose) current.page.dispose();
    K.clear(main);
    const page = factory(main, params);
    current = { name, page };
    try {
      await page.load();
    } catch (err) {
      K.failed(err);
    }
  }

  // Reloads the current page's data soon: changes that come together make one reload, and
  // under a stream of changes a page reloads at most every 400 ms.
  let lastRefresh = 0;
  function refreshSoon() {
    if (refreshTimer) return;
    const wait = Math.max(50, 400 - (performance.now() - lastRefresh));
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      lastRefresh = performance.now();
      if (!current) return;
      try { await current.page.load(); } catch (err) { K.failed(err); }
    }, wait);
  }

  const live = new K.Live({
    onState(state, hello) {
      liveEl.className = "live live-" + (state === "live" ? "on" : state === "unauthorized" ? "off" : "wait");
      if (state === "live") {
        liveEl.textContent = "live";
        liveEl.title = "live updates, at revision " + hello.revision;
        document.body.dataset.revision = String(hello.revision);
      } else if (state === "unauthorized") {
        liveEl.textContent = "no token";
      } else {
        liveEl.textContent = state === "lost" ? "reconnecting…" : state + "…";
      }
    },
    onEvent(name, data) {
      if (name === "hello") {
        if (data.resumed) {
          document.body.dataset.resumed = String(data.revision);
          K.notice("Live updates resumed: caught up with every change since the connection was lost.", "info");
          refreshSoon();
        }
      } else if (name === "reset") {
        document.body.dataset.startedOver = String(data.revision);
        K.notice("Live updates started over: the server no longer had the changes since revision " + data.since +
          " (it restarted, or the connection was lost too long). The page was reloaded from the current state.", "warn");
        refreshSoon();
      } else if (name === "changes") {
        document.body.dataset.revision = String(data.revision);
        if (current && (!current.page.wants || current.page.wants(data))) refreshSoon();
      } else if (name === "definitions") {
        if (current && current.name !== "workloads") refreshSoon();
      }
    },
  });
  K.live = live;

  window.addEventListener("hashchange", render);
  // A page left for another keeps no feed open: the browser may keep it (back/forward cache)
  // with its connection, and a browser has six connections per server; one held by a page
  // nobody sees made the next page's requests wait ~10 s. Back on it, the feed resumes.
  window.addEventListener("pagehide", () => live.stop());
  window.addEventListener("pageshow", (e) => { if (e.persisted) live.start(); });
  render();
  live.start();
})();
