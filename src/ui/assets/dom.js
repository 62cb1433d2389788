// kartograf web view: DOM helpers. Every string from the server becomes a text node or an
// attribute value set through the DOM; nothing is ever parsed as markup.
"use strict";

const K = (window.K = {});
K.pages = {};

const SVG_NS = "http://www.w3.org/2000/svg";

// Most characters of one string shown as text (longer ones are cut, with their length).
K.MAX_TEXT = 300;

K.cut = function (value, max) {
  const s = value == null ? "" : String(value);
  const limit = max || K.MAX_TEXT;
  if (s.length <= limit) return s;
  return s.slice(0, limit) + "… (" + s.length.toLocaleString() + " characters)";
};

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

function build(el, attrs, children) {
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k.startsWith("on") || k === "style") throw new Error("no handlers or styles in attributes");
      if (k === "class") el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

// An HTML element: h("a", {href: "#/"}, "text", child, ...).
K.h = function (tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
};

// An SVG element.
K.s = function (tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
};

// Text from an object or definition: cut, and isolated so that direction marks in it
// cannot reorder what is around it.
K.t = function (value, max, cls) {
  return K.h("bdi", { class: ["t", cls] }, K.cut(value, max));
};

K.clear = function (el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
};

K.fmt = function (n, digits) {
  const v = Number(n || 0);
  if (Number.isInteger(v)) return v.toLocaleString();
  return v.toLocaleString(undefined, { maximumFractionDigits: digits == null ? 2 : digits });
};

// A held/desired bar.
K.bar = function (held, desired, label) {
  const h = Number(held || 0);
  const d = Number(desired || 0);
  const full = Math.max(h, d, 0);
  const pct = full > 0 ? Math.min(100, (h / full) * 100) : 0;
  const cls = d === 0 && h === 0 ? "bar-none" : h >= d ? "bar-ok" : h === 0 ? "bar-none-held" : "bar-part";
  const svg = K.s("svg", { class: "bar " + cls, viewBox: "0 0 100 8", preserveAspectRatio: "none", "aria-hidden": "true" },
    K.s("rect", { class: "bar-bg", x: 0, y: 0, width: 100, height: 8, rx: 2 }),
    K.s("rect", { class: "bar-fg", x: 0, y: 0, width: pct.toFixed(2), height: 8, rx: 2 }));
  return K.h("span", { class: "barcell" }, svg,
    K.h("span", { class: "barnum" }, K.fmt(h) + " / " + K.fmt(d) + (label ? " " + label : "")));
};

K.STATUS_CLASS = {
  Running: "ok", Completed: "done", Degraded: "warn", Initializing: "pending", Resuming: "pending",
  Suspending: "muted", Suspended: "muted", Failed: "bad", Undefined: "muted", Unknown: "muted",
};

K.pill = function (status) {
  return K.h("span", { class: "pill pill-" + (K.STATUS_CLASS[status] || "muted") }, status);
};

// "PHASE_RUNNING" -> "Running".
K.phase = function (p) {
  if (!p) return "Unknown";
  const s = String(p).replace(/^PHASE_/, "").toLowerCase();
  if (s === "unspecified") return "Unknown";
  return s.charAt(0).toUpperCase() + s.slice(1);
};

// The token for the API (kept for this tab only).
K.token = function () {
  try { return sessionStorage.getItem("kartograf.token") || ""; } catch (_) { return ""; }
};
K.setToken = function (t) {
  try { sessionStorage.setItem("kartograf.token", t); } catch (_) { /* private mode */ }
};
K.headers = function () {
  const t = K.token();
  return t ? { Authorization: "Bearer " + t } : {};
};

K.ApiError = class extends Error {
  constructor(status, message) { super(message); this.status = status; }
};

// GET /ui/api/<path>, as JSON.
K.api = async function (path, signal) {
  const r = await fetch("api/" + path, { headers: K.headers(), signal, cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (_) { body = null; }
  if (!r.ok) throw new K.ApiError(r.status, (body && body.error) || r.statusText);
  return body;
};

K.qs = function (params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v != null && v !== "") u.set(k, v);
  const s = u.toString();
  return s ? "?" + s : "";
};

K.workloadHref = function (uid, cluster) {
  return "#/workload" + K.qs({ uid, cluster });
};
