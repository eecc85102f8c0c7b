// macpool dashboard: polls the coordinator's status and metrics, renders the
// cluster, and streams chat completions in the playground. No dependencies.
"use strict";

(function () {
  const cfg = document.body.dataset;
  const pollMs = Math.max(100, parseInt(cfg.poll, 10) || 1000);
  const $ = (id) => document.getElementById(id);

  // el builds an element; children are nodes or strings (always text, never HTML).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else if (k === "style") e.style.cssText = v;
      else e[k] = v;
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function fmtRate(v) {
    if (v === undefined || v === null || !isFinite(v)) return "–";
    return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  }
  function fmtMem(mb) {
    if (!mb) return "";
    return mb >= 1024 ? (mb / 1024).toFixed(mb % 1024 ? 1 : 0) + " GB" : mb + " MB";
  }
  function fmtTime(d) {
    return d.toLocaleTimeString([], { hour12: false });
  }

  // ---- Prometheus text exposition (only counters we need) ----
  function parseMetrics(text) {
    const out = []; // {name, labels, value}
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
      if (!m) continue;
      const labels = {};
      if (m[3]) {
        const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
        let l;
        while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
      out.push({ name: m[1], labels, value: parseFloat(m[4]) });
    }
    return out;
  }

  // ---- latency quantiles from histogram buckets ----
  // buckets: {le -> cumulative count}, summed over models.
  function buckets(samples, name) {
    const b = {};
    for (const s of samples) {
      if (s.name !== name + "_bucket") continue;
      const le = s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le);
      b[le] = (b[le] || 0) + s.value;
    }
    return b;
  }
  // quantile interpolates linearly inside the bucket, as Prometheus'
  // histogram_quantile does, over the difference of two snapshots.
  function quantile(q, now, old) {
    const les = Object.keys(now).map(Number).sort((a, b) => a - b);
    const counts = les.map((le) => (now[le] || 0) - ((old && old[le]) || 0));
    const total = counts[counts.length - 1] || 0;
    if (!total) return null;
    const rank = q * total;
    let prevLe = 0, prevCount = 0;
    for (let i = 0; i < les.length; i++) {
      if (counts[i] >= rank) {
        if (les[i] === Infinity) return prevLe;
        return prevLe + ((les[i] - prevLe) * (rank - prevCount)) / Math.max(1e-9, counts[i] - prevCount);
      }
      prevLe = les[i];
      prevCount = counts[i];
    }
    return null;
  }
  function fmtSecs(v) {
    if (v === null || v === undefined) return "–";
    return v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s";
  }
  const histWindow = []; // {at, ttft, itl}, newest last, ~30 s

  // ---- recent errors ----
  const errors = []; // newest first: {time, kind, text}
  let lastErrorKey = "";
  function addError(kind, text) {
    const key = kind + "|" + text;
    if (key === lastErrorKey && errors.length && Date.now() - errors[0].time < 30000) {
      errors[0].count++;
      errors[0].time = Date.now();
    } else {
      errors.unshift({ time: Date.now(), kind, text, count: 1 });
      errors.length = Math.min(errors.length, 30);
    }
    lastErrorKey = key;
    renderErrors();
  }
  function renderErrors() {
    const ul = $("errors");
    if (!errors.length) { ul.replaceChildren(el("li", { class: "empty" }, "none")); return; }
    ul.replaceChildren(...errors.map((e) => el("li", {},
      el("time", {}, fmtTime(new Date(e.time))),
      el("span", { class: "kind" }, e.kind),
      e.text, e.count > 1 ? " ×" + e.count : "")));
  }

  // ---- polling ----
  const state = { status: null, tps: {}, lastTokens: null, lastErrCounts: null, failures: 0, lastOK: 0 };

  async function fetchStatus() {
    const r = await fetch(cfg.status, { cache: "no-store" });
    if (!r.ok) throw new Error(cfg.status + ": HTTP " + r.status);
    return r.json();
  }

  async function fetchMetrics() {
    if (!cfg.metrics) return;
    let r;
    try {
      r = await fetch(cfg.metrics, { cache: "no-store" });
    } catch (e) { return; }
    if (!r.ok) return;
    const samples = parseMetrics(await r.text());
    const now = performance.now();
    const tokens = {}; // worker -> total generated tokens
    const errs = {};   // kind -> count
    for (const s of samples) {
      if (s.name === "macpool_generated_tokens_total") tokens[s.labels.worker] = (tokens[s.labels.worker] || 0) + s.value;
      if (s.name === "macpool_errors_total") errs[s.labels.kind] = (errs[s.labels.kind] || 0) + s.value;
    }
    if (state.lastTokens) {
      const dt = (now - state.lastTokens.at) / 1000;
      const tps = {};
      for (const [w, v] of Object.entries(tokens)) {
        const prev = state.lastTokens.values[w];
        tps[w] = prev === undefined || v < prev ? 0 : (v - prev) / dt;
      }
      // Smooth a little so the numbers do not jump between polls.
      for (const w of Object.keys(tps)) {
        const old = state.tps[w];
        state.tps[w] = old === undefined ? tps[w] : 0.5 * old + 0.5 * tps[w];
      }
    }
    state.lastTokens = { at: now, values: tokens };
    histWindow.push({ at: now, ttft: buckets(samples, "macpool_time_to_first_token_seconds"), itl: buckets(samples, "macpool_inter_token_latency_seconds") });
    while (histWindow.length > 2 && now - histWindow[1].at > 30000) histWindow.shift();
    const oldest = histWindow.length > 1 ? histWindow[0] : null;
    $("sum-ttft").textContent = fmtSecs(quantile(0.5, histWindow[histWindow.length - 1].ttft, oldest && oldest.ttft));
    $("sum-itl").textContent = fmtSecs(quantile(0.5, histWindow[histWindow.length - 1].itl, oldest && oldest.itl));
    if (state.lastErrCounts) {
      for (const [k, v] of Object.entries(errs)) {
        const d = v - (state.lastErrCounts[k] || 0);
        if (d > 0) addError(k, d === 1 ? "1 error" : d + " errors");
      }
    }
    state.lastErrCounts = errs;
  }

  function setConn(s, text) {
    $("conn").dataset.state = s;
    $("conn-text").textContent = text;
  }

  async function poll() {
    try {
      const [st] = await Promise.all([fetchStatus(), fetchMetrics()]);
      state.status = st;
      state.failures = 0;
      state.lastOK = Date.now();
      setConn("live", "live · " + (st.coordinator || "coordinator"));
      render(st);
    } catch (e) {
      state.failures++;
      setConn("down", "status unavailable");
      if (state.failures === 1 || state.failures % 30 === 0) addError("dashboard", "cannot load cluster status: " + e.message);
    } finally {
      setTimeout(poll, pollMs);
    }
  }

  function render(st) {
    const nodes = (st.nodes || []).slice().sort((a, b) =>
      (a.role === b.role ? 0 : a.role === "coordinator" ? -1 : 1) || a.name.localeCompare(b.name));
    const workers = nodes.filter((n) => n.role === "worker");
    const queued = st.queued || {};
    const totalQueued = Object.values(queued).reduce((a, b) => a + b, 0);
    const slots = workers.reduce((a, n) => a + (n.slots || 0), 0);
    const running = workers.reduce((a, n) => a + (n.running || 0), 0);
    const tpsTotal = Object.values(state.tps).reduce((a, b) => a + b, 0);
    $("sum-nodes").textContent = nodes.length;
    $("sum-workers").textContent = workers.length;
    $("sum-busy").textContent = running + " / " + slots;
    $("sum-queued").textContent = totalQueued;
    $("sum-tps").textContent = state.lastTokens ? fmtRate(tpsTotal) : "–";
    $("leader").textContent = st.leader ? "Raft leader: " + st.leader : "no Raft leader";

    // Nodes.
    const tbody = $("nodes").tBodies[0];
    if (!nodes.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 6 }, "no nodes")));
    } else {
      tbody.replaceChildren(...nodes.map((n) => {
        const role = [el("span", { class: "badge " + (n.raft === "leader" ? "leader" : n.role) }, n.raft === "leader" ? "coordinator · leader" : n.role)];
        if (n.raft === "voter") role.push(el("span", { class: "badge" }, "voter"));
        const hw = [n.chip, n.cores ? n.cores + " cores" : "", fmtMem(n.memory_mb)].filter(Boolean).join(" · ");
        let load = "";
        if (n.role === "worker" && n.slots) {
          const pct = Math.min(100, Math.round((100 * (n.running || 0)) / n.slots));
          load = [el("span", { class: pct >= 100 ? "bar full" : "bar", title: pct + "%" }, el("span", { style: "width:" + pct + "%" })),
            el("span", { class: "bar-text" }, (n.running || 0) + " / " + n.slots)];
        }
        const tps = n.role === "worker" ? (state.lastTokens ? fmtRate(state.tps[n.name] || 0) : "–") : "";
        return el("tr", { "data-node": n.name },
          el("td", {}, el("div", { class: "name" }, n.name), el("div", { class: "sub" }, [n.gossip_addr, n.version].filter(Boolean).join(" · "))),
          el("td", {}, role),
          el("td", { class: "hw" }, hw || el("span", { class: "sub" }, "unknown")),
          el("td", {}, (n.models || []).map((m) => el("span", { class: "badge" }, m))),
          el("td", {}, load),
          el("td", { class: "num tps" }, tps));
      }));
    }

    // Models and placement: the registry plus what workers announce.
    const models = new Map();
    for (const m of st.models || []) models.set(m.name, { spec: m, nodes: [] });
    for (const n of workers) for (const m of n.models || []) {
      if (!models.has(m)) models.set(m, { spec: { name: m }, nodes: [] });
      models.get(m).nodes.push(n);
    }
    for (const m of Object.keys(queued)) if (!models.has(m)) models.set(m, { spec: { name: m }, nodes: [] });
    const mbody = $("models").tBodies[0];
    if (!models.size) {
      mbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 4 }, "no models yet")));
    } else {
      mbody.replaceChildren(...[...models.values()].sort((a, b) => a.spec.name.localeCompare(b.spec.name)).map(({ spec, nodes }) => {
        const detail = [spec.format, spec.quantization, spec.source].filter(Boolean).join(" · ");
        const free = nodes.reduce((a, n) => a + (n.free || 0), 0);
        const total = nodes.reduce((a, n) => a + (n.slots || 0), 0);
        return el("tr", { "data-model": spec.name },
          el("td", {}, el("div", { class: "name" }, spec.name), detail ? el("div", { class: "sub" }, detail) : null),
          el("td", {}, nodes.length ? nodes.map((n) => el("span", { class: "badge" }, n.name)) : el("span", { class: "sub" }, "no worker"),
            installs(st, spec.name, nodes)),
          el("td", { class: "num" }, nodes.length ? free + " / " + total : "–"),
          el("td", { class: "num queued" }, String(queued[spec.name] || 0)));
      }));
    }
    updateModelSelect([...models.keys()].filter((m) => models.get(m).nodes.length).sort());
  }

  // Placed models still being installed on a worker (distrib): state and
  // fetch progress from the status's installs.
  function installs(st, model, nodes) {
    const serving = new Set(nodes.map((n) => n.name));
    const rows = ((st.installs || {})[model] || []).filter((w) => !serving.has(w.worker) && w.state !== "ready");
    return rows.map((w) => {
      let text = w.worker + ": " + w.state;
      if (w.state === "fetching" && w.total > 0) text += " " + Math.floor((100 * (w.bytes || 0)) / w.total) + "%";
      if (w.from) text += " (" + w.from + ")";
      return el("div", { class: "sub install", title: w.error || "" }, text + (w.error ? " — " + w.error : ""));
    });
  }

  // ---- playground ----
  const history = []; // {role, content}
  let controller = null;

  function updateModelSelect(names) {
    const sel = $("chat-model");
    const have = [...sel.options].map((o) => o.value);
    if (names.length === have.length && names.every((n, i) => n === have[i])) return;
    const cur = sel.value || localStorage.getItem("macpool.model") || "";
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(cur)) sel.value = cur;
  }

  async function loadModels() {
    try {
      const r = await fetch(cfg.models, { headers: authHeaders() });
      if (!r.ok) return;
      const body = await r.json();
      const names = (body.data || []).map((m) => m.id).sort();
      if (names.length && !$("chat-model").options.length) updateModelSelect(names);
    } catch (e) { /* status polling fills the list too */ }
  }

  function authHeaders() {
    const k = $("chat-key").value.trim();
    return k ? { Authorization: "Bearer " + k } : {};
  }

  function scrollChat() {
    const log = $("chat-log");
    log.scrollTop = log.scrollHeight;
  }

  async function send(text) {
    const model = $("chat-model").value;
    if (!model) { $("chat-status").textContent = "no model is served yet"; return; }
    localStorage.setItem("macpool.model", model);
    history.push({ role: "user", content: text });
    $("chat-log").append(el("div", { class: "msg user" }, text));
    const content = el("div", { class: "content" });
    const reasoning = el("div", { class: "reasoning" });
    const meta = el("div", { class: "meta" });
    const bubble = el("div", { class: "msg assistant streaming", "data-chunks": "0" }, reasoning, content, meta);
    $("chat-log").append(bubble);
    scrollChat();

    controller = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    $("chat-status").textContent = "waiting for a worker…";
    const started = performance.now();
    let first = 0, chunks = 0, worker = "", usage = null, finish = "", answer = "";
    try {
      const r = await fetch(cfg.chat, {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json", Accept: "text/event-stream" }, authHeaders()),
        body: JSON.stringify({
          model, messages: history, stream: true, stream_options: { include_usage: true },
          max_tokens: parseInt($("chat-max").value, 10) || undefined,
        }),
        signal: controller.signal,
      });
      worker = r.headers.get("X-Macpool-Worker") || "";
      if (!r.ok) {
        let msg = "HTTP " + r.status;
        try { const b = await r.json(); if (b.error && b.error.message) msg += ": " + b.error.message; } catch (e) { /* not JSON */ }
        throw new Error(msg);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "", done = false;
      while (!done) {
        const { value, done: eof } = await reader.read();
        if (eof) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i).replace(/^\r?\n\r?\n/, "");
          const data = frame.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
          if (!data) continue;
          if (data === "[DONE]") { done = true; break; }
          const obj = JSON.parse(data);
          if (obj.error) throw new Error(obj.error.message || "stream error");
          if (obj.macpool_worker) worker = obj.macpool_worker;
          if (obj.usage) usage = obj.usage;
          for (const ch of obj.choices || []) {
            const d = ch.delta || {};
            if (d.reasoning_content) reasoning.textContent += d.reasoning_content;
            if (d.content) { content.textContent += d.content; answer += d.content; }
            if (d.content || d.reasoning_content) {
              if (!first) first = performance.now();
              chunks++;
              bubble.dataset.chunks = String(chunks);
              $("chat-status").textContent = "streaming from " + (worker || "a worker") + "…";
            }
            if (ch.finish_reason) finish = ch.finish_reason;
          }
          scrollChat();
        }
      }
      history.push({ role: "assistant", content: answer });
      const secs = (performance.now() - started) / 1000;
      const parts = [];
      if (worker) parts.push(worker);
      if (first) parts.push("first token " + ((first - started) / 1000).toFixed(2) + " s");
      if (usage && usage.completion_tokens) {
        parts.push(usage.completion_tokens + " tokens");
        const gen = first ? (performance.now() - first) / 1000 : secs;
        if (gen > 0 && usage.completion_tokens > 1) parts.push(fmtRate((usage.completion_tokens - 1) / gen) + " tokens/s");
      }
      if (finish && finish !== "stop") parts.push("finish: " + finish);
      meta.textContent = parts.join(" · ");
      $("chat-status").textContent = "done";
      bubble.dataset.done = "true";
    } catch (e) {
      history.pop(); // the question was not answered
      if (e.name === "AbortError") {
        $("chat-status").textContent = "stopped";
        meta.textContent = "stopped";
      } else {
        bubble.classList.add("error");
        if (!content.textContent) content.textContent = e.message;
        else meta.textContent = e.message;
        $("chat-status").textContent = "error";
        addError("playground", e.message);
      }
      bubble.dataset.done = "true";
    } finally {
      bubble.classList.remove("streaming");
      controller = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
      scrollChat();
    }
  }

  function init() {
    const key = sessionStorage.getItem("macpool.key");
    if (key) $("chat-key").value = key;
    $("chat-key").addEventListener("change", () => sessionStorage.setItem("macpool.key", $("chat-key").value));
    $("chat-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("chat-input").value.trim();
      if (!text || controller) return;
      $("chat-input").value = "";
      send(text);
    });
    $("chat-input").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
    });
    $("chat-stop").addEventListener("click", () => controller && controller.abort());
    $("chat-clear").addEventListener("click", () => {
      if (controller) controller.abort();
      history.length = 0;
      $("chat-log").replaceChildren();
      $("chat-status").textContent = "";
    });
    loadModels();
    poll();
  }

  init();
})();
