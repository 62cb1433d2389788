// kartograf web view: the live feed (/ui/api/events, server-sent events). Read with fetch so
// that it can carry the bearer token; after a lost connection it resumes from the last
// revision it saw (Last-Event-ID), and the server says when it had to start over.
"use strict";

K.Live = class {
  constructor(handlers) {
    this.handlers = handlers; // {onEvent(name, data), onState(state, detail)}
    this.lastId = null;
    this.delay = 500;
    this.stopped = false;
    this.controller = null;
    this.run = 0; // each start() begins a new run; an older loop ends at its next step
  }

  start() {
    this.stopped = false;
    this.run += 1;
    this.loop(this.run);
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  // Drops the connection (tests use it to prove resumption); it reconnects by itself.
  drop() { if (this.controller) this.controller.abort(); }

  async loop(run) {
    while (!this.stopped && run === this.run) {
      this.controller = new AbortController();
      const headers = K.headers();
      if (this.lastId != null) headers["Last-Event-ID"] = String(this.lastId);
      try {
        this.handlers.onState(this.lastId == null ? "connecting" : "reconnecting");
        const r = await fetch("api/events", { headers, signal: this.controller.signal, cache: "no-store" });
        if (r.status === 401 || r.status === 403) {
          this.handlers.onState("unauthorized");
          await this.sleep(3000);
          continue;
        }
        if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
        this.delay = 500;
        await this.read(r.body.getReader());
      } catch (_) {
        // Lost: reconnect below.
      }
      if (this.stopped || run !== this.run) return;
      this.handlers.onState("lost");
      await this.sleep(this.delay);
      this.delay = Math.min(this.delay * 2, 5000);
    }
  }

  sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

  async read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        this.dispatch(block);
      }
      if (buffer.length > 8 * 1024 * 1024) throw new Error("event too large");
    }
  }

  dispatch(block) {
    let name = "message";
    let id = null;
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "id") id = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return;
    let parsed;
    try { parsed = JSON.parse(data.join("\n")); } catch (_) { return; }
    if (id != null && /^\d+$/.test(id)) this.lastId = id;
    if (name === "hello") this.handlers.onState("live", parsed);
    this.handlers.onEvent(name, parsed);
  }
};
