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
  function fmtBytes(n) {
    if (!n || n < 0) return "0 B";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 || n >= 100 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
  }
  function fmtTokens(n) {
    if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(0) + "k";
    if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return String(n);
  }
  // fmtAge is a duration in milliseconds as an uptime: "42 s", "7 min", "3 h 5 min", "2 d 4 h".
  function fmtAge(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min";
    const h = Math.floor(m / 60);
    if (h < 24) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }
  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "–";
    if (ms < 1) return "<1 ms";
    return ms < 1000 ? ms.toFixed(0) + " ms" : (ms / 1000).toFixed(2) + " s";
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
  // The coordinator's list (status.recent_errors: every request it answered
  // 4xx/5xx or whose client went away, newest first) merged with the page's
  // own failures (status unreachable, playground, drain), newest first.
  const localErrors = []; // {time (ms), kind, text, count}
  let lastErrorKey = "";
  function addError(kind, text) {
    const key = kind + "|" + text;
    if (key === lastErrorKey && localErrors.length && Date.now() - localErrors[0].time < 30000) {
      localErrors[0].count++;
      localErrors[0].time = Date.now();
    } else {
      localErrors.unshift({ time: Date.now(), kind, text, count: 1 });
      localErrors.length = Math.min(localErrors.length, 30);
    }
    lastErrorKey = key;
    renderErrors();
  }
  function renderErrors() {
    const st = state.status;
    const remote = (st && st.recent_errors) || [];
    // The coordinator's clock orders its entries; shift the page's own
    // onto it so that a skewed browser clock does not reorder the list.
    const skew = st && st.time ? st.time - state.statusAt : 0;
    const rows = remote.map((e) => ({ time: e.time, remote: e }))
      .concat(localErrors.map((e) => ({ time: e.time + skew, local: e })))
      .sort((a, b) => b.time - a.time).slice(0, 60);
    $("errors-scope").textContent = st ? "as seen by " + (st.coordinator || "this coordinator") : "";
    const ul = $("errors");
    if (!rows.length) { ul.replaceChildren(el("li", { class: "empty" }, "none")); return; }
    ul.replaceChildren(...rows.map((r) => {
      if (r.local) {
        const e = r.local;
        return el("li", { class: "local" },
          el("time", {}, fmtTime(new Date(e.time))),
          el("span", { class: "kind" }, e.kind),
          e.text, e.count > 1 ? " ×" + e.count : "");
      }
      const e = r.remote;
      return el("li", { "data-status": String(e.status) },
        el("time", {}, fmtTime(new Date(e.time))),
        el("span", { class: "status s" + String(e.status).charAt(0) }, String(e.status)),
        el("span", { class: "kind" }, e.error || ""),
        e.model ? el("span", { class: "badge model" }, e.model) : null,
        el("span", { class: "message" }, e.message || ""));
    }));
  }

  // ---- polling ----
  const state = { status: null, statusAt: 0, tps: {}, lastTokens: null, failures: 0, lastOK: 0, drains: {}, refusedKey: null };

  // The status wants an API key once the cluster stores keys: the one typed
  // into the page.
  async function fetchStatus() {
    const r = await fetch(cfg.status, { cache: "no-store", headers: authHeaders() });
    if (!r.ok) {
      let msg = cfg.status + ": HTTP " + r.status;
      if (r.status === 401) msg += " (type an API key into the page)";
      const err = new Error(msg);
      err.status = r.status;
      throw err;
    }
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
    for (const s of samples) {
      if (s.name === "macpool_generated_tokens_total") tokens[s.labels.worker] = (tokens[s.labels.worker] || 0) + s.value;
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
  }

  function setConn(s, text) {
    $("conn").dataset.state = s;
    $("conn-text").textContent = text;
  }

  // poll refreshes the page once. After a 401 it stops asking for the
  // status until the API key field changes: every refused request is a
  // recent error of the coordinator, and a page left open without a key
  // would fill that list with its own.
  async function poll() {
    try {
      const key = $("chat-key").value.trim();
      if (state.refusedKey !== null && key === state.refusedKey) {
        await fetchMetrics();
        return;
      }
      const [st] = await Promise.all([fetchStatus(), fetchMetrics()]);
      state.refusedKey = null;
      state.status = st;
      state.statusAt = Date.now();
      state.failures = 0;
      state.lastOK = Date.now();
      setConn("live", "live · " + (st.coordinator || "coordinator") + (st.version ? " " + st.version : ""));
      render(st);
      renderErrors();
    } catch (e) {
      state.failures++;
      if (e.status === 401) {
        state.refusedKey = $("chat-key").value.trim();
        setConn("down", state.refusedKey ? "the API key was refused" : "an API key is needed: type it into the page");
      } else {
        setConn("down", "status unavailable");
      }
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
    renderTraffic(st.traffic);
    renderSecurity(st.security);

    // Nodes.
    const now = st.time || Date.now();
    const tbody = $("nodes").tBodies[0];
    if (!nodes.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 9 }, "no nodes")));
    } else {
      tbody.replaceChildren(...nodes.map((n) => {
        const role = [el("span", { class: "badge " + (n.raft === "leader" ? "leader" : n.role) }, n.raft === "leader" ? "coordinator · leader" : n.role)];
        if (n.raft === "voter") role.push(el("span", { class: "badge" }, "voter"));
        if (n.leaving) role.push(el("span", { class: "badge leaving" }, "draining"));
        const hw = [n.chip, n.cores ? n.cores + " cores" : "", fmtMem(n.memory_mb)].filter(Boolean).join(" · ");
        let load = "";
        if (n.role === "worker" && n.slots) {
          const pct = Math.min(100, Math.round((100 * (n.running || 0)) / n.slots));
          load = [el("span", { class: pct >= 100 ? "bar full" : "bar", title: pct + "%" }, el("span", { style: "width:" + pct + "%" })),
            el("span", { class: "bar-text slots" }, (n.running || 0) + " / " + n.slots)];
        }
        let kv = "";
        if (n.role === "worker") {
          kv = n.kv_tokens ? [el("div", { class: "kv-tokens" }, fmtTokens(n.kv_free_tokens || 0) + " / " + fmtTokens(n.kv_tokens) + " tokens"),
            n.kv_bytes ? el("div", { class: "sub kv-bytes" }, fmtBytes(n.kv_free_bytes || 0) + " / " + fmtBytes(n.kv_bytes)) : null]
            : el("span", { class: "sub" }, "not reported");
        }
        const tps = n.role === "worker" ? (state.lastTokens ? fmtRate(state.tps[n.name] || 0) : "–") : "";
        const ver = [el("div", { class: "version" }, n.version || "unknown version"),
          el("div", { class: "sub uptime" }, n.started ? "up " + fmtAge(now - n.started * 1000) : "uptime unknown")];
        let action = null;
        if (n.role === "worker" && cfg.drain) {
          action = el("button", { type: "button", class: "secondary drain", "data-drain-node": n.name, disabled: !!n.leaving || !!state.drains[n.name],
            title: "stop giving " + n.name + " work, let its jobs finish, and make it leave the cluster" }, n.leaving ? "draining…" : "Drain");
        }
        return el("tr", { "data-node": n.name },
          el("td", {}, el("div", { class: "name" }, n.name), el("div", { class: "sub" }, n.gossip_addr || "")),
          el("td", {}, role),
          el("td", { class: "ver" }, ver),
          el("td", { class: "hw" }, hw || el("span", { class: "sub" }, "unknown")),
          el("td", {}, (n.models || []).map((m) => el("span", { class: "badge" }, m))),
          el("td", { class: "load" }, load),
          el("td", { class: "num kv", "data-kv-tokens": n.kv_tokens ? String(n.kv_tokens) : null, "data-kv-bytes": n.kv_bytes ? String(n.kv_bytes) : null }, kv),
          el("td", { class: "num tps" }, tps),
          el("td", { class: "action" }, action));
      }));
    }
    settleDrains(nodes);

    // Models: the registry, what workers serve and report, placement.
    const models = new Map();
    const entry = (name) => {
      if (!models.has(name)) models.set(name, { spec: { name }, nodes: [], served: [] });
      return models.get(name);
    };
    for (const m of st.models || []) { entry(m.name).spec = m; }
    for (const n of workers) for (const m of n.models || []) entry(m).nodes.push(n);
    for (const s of st.served || []) entry(s.model).served.push(s);
    for (const m of Object.keys(queued)) entry(m);
    const mbody = $("models").tBodies[0];
    if (!models.size) {
      mbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 6 }, "no models yet")));
    } else {
      mbody.replaceChildren(...[...models.values()].sort((a, b) => a.spec.name.localeCompare(b.spec.name)).map(({ spec, nodes, served }) => {
        // What the workers report wins over the registry entry (which
        // says what was asked for, not what was loaded).
        const first = served[0] || {};
        const format = first.format || spec.format;
        const quant = first.quantization || spec.quantization;
        const detail = [format, quant, spec.source].filter(Boolean).join(" · ");
        const size = first.size || spec.size;
        const contexts = [...new Set(served.map((s) => s.context).filter(Boolean))].sort((a, b) => a - b);
        const free = nodes.reduce((a, n) => a + (n.free || 0), 0);
        const total = nodes.reduce((a, n) => a + (n.slots || 0), 0);
        return el("tr", { "data-model": spec.name },
          el("td", {}, el("div", { class: "name" }, spec.name), detail ? el("div", { class: "sub detail" }, detail) : null),
          el("td", { class: "num size", "data-size": size ? String(size) : null }, size ? fmtBytes(size) : "–"),
          el("td", { class: "num context", "data-context": contexts.length ? contexts.join(",") : null }, contexts.length ? contexts.map((c) => fmtTokens(c)).join(" – ") + " tokens" : "–"),
          el("td", { class: "placement" }, placement(st, spec, nodes), installs(st, spec.name, nodes)),
          el("td", { class: "num" }, nodes.length ? free + " / " + total : "–"),
          el("td", { class: "num queued" }, String(queued[spec.name] || 0)));
      }));
    }
    updateModelSelect([...models.keys()].filter((m) => models.get(m).nodes.length).sort());
  }

  function renderTraffic(t) {
    if (!t || !t.window_s) {
      for (const id of ["sum-rate", "sum-errrate", "sum-cancelrate", "sum-qwait"]) $(id).textContent = "–";
      return;
    }
    const perMin = (n) => fmtRate((n * 60) / t.window_s);
    $("sum-rate").textContent = perMin(t.requests || 0);
    $("sum-errrate").textContent = perMin(t.errors || 0);
    $("sum-cancelrate").textContent = perMin(t.cancelled || 0);
    $("stat-rate").title = "requests this coordinator finished in the last " + t.window_s + " s";
    $("sum-qwait").textContent = t.queue_waits ? fmtMs(t.queue_wait_p50_ms) + " / " + fmtMs(t.queue_wait_p95_ms) : "–";
    $("stat-queue-wait").title = "queue wait (admission to a worker taking the job) of the " + (t.queue_waits || 0) +
      " jobs this coordinator admitted in the last " + Math.round((t.queue_window_s || 0) / 60) + " min";
  }

  function renderSecurity(sec) {
    const box = $("security");
    if (!sec) { box.dataset.secured = "unknown"; return; }
    $("sec-cluster").textContent = sec.cluster_secret ? "cluster encrypted (secret: gossip, NATS and Raft over TLS)" : "cluster PLAINTEXT (--insecure)";
    const api = { keys: "API keys required (" + (sec.keys || 0) + " stored)", open: "API OPEN to the network, no key (--open-api)", loopback: "API without keys, loopback only" };
    $("sec-api").textContent = api[sec.api] || "API: " + sec.api;
    box.dataset.secured = sec.cluster_secret && sec.api === "keys" ? "yes" : sec.api === "open" || !sec.cluster_secret ? "no" : "partly";
  }

  // placement lists a model's pipeline stages when its status has them
  // ({worker, first, last}: decoder layers [first, last)), else the workers
  // it is placed on (managed models) and the workers serving it.
  function placement(st, spec, nodes) {
    const stages = spec.stages || (spec.plan && spec.plan.stages);
    if (Array.isArray(stages) && stages.length) {
      return el("ol", { class: "stages" }, stages.map((s) =>
        el("li", { "data-stage-worker": s.worker }, el("span", { class: "badge" }, s.worker), " layers " + s.first + "–" + (s.last - 1))));
    }
    const names = new Set(nodes.map((n) => n.name));
    for (const w of (st.placement || {})[spec.name] || []) names.add(w);
    if (!names.size) return el("span", { class: "sub" }, "no worker");
    const serving = new Set(nodes.map((n) => n.name));
    return [...names].sort().map((w) => el("span", { class: serving.has(w) ? "badge" : "badge pending", title: serving.has(w) ? "serving" : "placed, not serving yet" }, w));
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

  // ---- drain ----
  // A worker's Drain button posts to the admin drain endpoint with the page's
  // API key (an admin key), after a confirmation; the result is shown under
  // the table and followed through the status until the worker has left.
  function drainResult(stateName, text) {
    const d = $("drain-result");
    d.dataset.state = stateName;
    d.textContent = text;
  }
  async function drain(node) {
    if (!window.confirm("Drain " + node + "? It gets no new jobs, finishes the ones it runs and leaves the cluster.")) return;
    state.drains[node] = { at: Date.now(), left: false };
    drainResult("pending", "asking " + node + " to drain…");
    try {
      const r = await fetch(cfg.drain, {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()),
        body: JSON.stringify({ node }),
      });
      let body = null;
      try { body = await r.json(); } catch (e) { /* not JSON */ }
      if (!r.ok) {
        const msg = "HTTP " + r.status + (body && body.error && body.error.message ? ": " + body.error.message : "");
        throw new Error(msg);
      }
      drainResult("accepted", node + " is draining: " + ((body && body.running) || 0) + " jobs running; it leaves when they finish");
    } catch (e) {
      delete state.drains[node];
      drainResult("error", "drain " + node + " failed: " + e.message);
      addError("drain", node + ": " + e.message);
    }
  }
  // settleDrains reports a drained worker gone from the cluster.
  function settleDrains(nodes) {
    const present = new Set(nodes.map((n) => n.name));
    for (const [node, d] of Object.entries(state.drains)) {
      if (!present.has(node) && !d.left && $("drain-result").dataset.state === "accepted") {
        d.left = true;
        drainResult("done", node + " drained and left the cluster");
      }
    }
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
    $("nodes").addEventListener("click", (ev) => {
      const b = ev.target.closest("button[data-drain-node]");
      if (b && !b.disabled) drain(b.dataset.drainNode);
    });
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
