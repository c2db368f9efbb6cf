// flowrun status page: polls api/status every 2 s and updates the page in place; browses dead
// letters through api/pipelines/NAME/dead-letters; redrives and purges with the admin token.
// The dead-letter view (pipeline, order, filter, page, open letter) is kept in the URL's query,
// so a link opens the same view. Times are shown in UTC, ISO 8601, with the local time on hover.
// Everything that came from a message or a file is set as text, never as markup.
// No library, no external asset.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const admin = document.body.dataset.admin === "on";
  const every = 2000;
  const dlq = { pipeline: "", order: "newest", where: "", offset: 0, limit: 20, total: 0, shownCount: null, letter: "" };
  const selected = new Set();
  let graphSig = null;
  let pending = null; // the action waiting for confirmation

  function setText(el, v) {
    v = String(v);
    if (el.textContent !== v) el.textContent = v;
  }
  function setClass(el, name, on) {
    if (el.classList.contains(name) !== on) el.classList.toggle(name, on);
  }
  function num(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"); }
  function rate(v) { return v ? (v >= 10 ? v.toFixed(0) : v.toFixed(2)) : "0"; }
  function dur(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    let s = Math.floor(ms / 1000);
    if (s < 60) return (ms / 1000).toFixed(1) + " s";
    const parts = [];
    for (const [u, n] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
      if (s >= n) { parts.push(Math.floor(s / n) + u); s %= n; }
      if (parts.length === 2) break;
    }
    return parts.join(" ");
  }
  // UTC ISO 8601 to the second; the local time goes into the title (shown on hover).
  function setTime(el, iso) {
    const d = new Date(iso);
    if (!iso || isNaN(d)) { setText(el, iso || ""); el.removeAttribute("title"); return; }
    setText(el, d.toISOString().replace(/\.\d{3}Z$/, "Z"));
    el.title = "local time: " + d.toLocaleString();
  }
  function stateClass(s) { return s === "running" ? "running" : s === "stopped" ? "stopped" : "waiting"; }
  function cookie(name) {
    for (const c of document.cookie.split(";")) {
      const [k, v] = c.trim().split("=");
      if (k === name) return decodeURIComponent(v || "");
    }
    return "";
  }

  // ---- pipelines ----
  const cards = new Map();
  function card(p, outcomes) {
    let c = cards.get(p.name);
    if (c) return c;
    const el = $("card-template").content.firstElementChild.cloneNode(true);
    el.dataset.pipeline = p.name;
    const f = {};
    el.querySelectorAll("[data-f]").forEach((n) => { f[n.dataset.f] = n; });
    const rows = {};
    const tbody = el.querySelector("tbody");
    for (const o of outcomes) {
      const tr = document.createElement("tr");
      tr.dataset.outcome = o;
      tr.innerHTML = "<td></td><td></td><td></td>";
      tr.cells[0].textContent = o.replace("_", " ");
      tbody.appendChild(tr);
      rows[o] = tr;
    }
    f.dead.addEventListener("click", (ev) => {
      if (Array.from($("dlq-pipeline").options).some((o) => o.value === p.name)) showLetters(p.name);
      else ev.preventDefault();
    });
    c = { el, f, rows };
    cards.set(p.name, c);
    return c;
  }

  function render(st) {
    setText($("sample-every"), st.sample_every_s || 15);
    const list = $("pipelines");
    const seen = new Set();
    st.pipelines.forEach((p, i) => {
      seen.add(p.name);
      const c = card(p, st.outcomes);
      if (list.children[i] !== c.el) list.insertBefore(c.el, list.children[i] || null);
      const f = c.f;
      setText(f.name, p.name);
      setText(f.state, p.state);
      for (const k of ["running", "waiting", "stopped"]) setClass(f.state, k, stateClass(p.state) === k);
      setText(f.kind, p.source.kind);
      setText(f.key, p.source.key || "");
      f.tickrow.hidden = !p.next_tick; // a schedule source's next tick
      if (p.next_tick) setTime(f.tick, p.next_tick);
      setText(f.rate, rate(p.rate) + "/s");
      setText(f.lag, p.lag_unknown && p.lag === null ? "?" : num(p.lag));
      setText(f.pending, num(p.pending));
      setText(f.oldest, dur(p.oldest_pending_idle_ms));
      setText(f.delayed, num(p.delayed));
      setText(f.held, num(p.held));
      setText(f.inflight, num(p.inflight));
      setText(f.dead, p.dead_letter_key ? num(p.dead_letters) : "–");
      setClass(f.dead, "alert", (p.dead_letters || 0) > 0);
      f.dead.title = p.dead_letter_key ? "dead letters in " + p.dead_letter_key : "no dead_letter";
      for (const o of st.outcomes) {
        const tr = c.rows[o];
        setText(tr.cells[1], num((p.totals || {})[o] || 0));
        setText(tr.cells[2], rate((p.rates || {})[o] || 0));
      }
      const node = document.querySelector('#topology g.pipeline[data-pipeline="' + CSS.escape(p.name) + '"]');
      if (node) for (const k of ["running", "waiting", "stopped"]) setClass(node, k, stateClass(p.state) === k);
    });
    for (const [name, c] of cards) {
      if (!seen.has(name)) { c.el.remove(); cards.delete(name); }
    }
    $("no-pipelines").hidden = st.pipelines.length > 0;
    pipelineOptions(st.pipelines);
    if (graphSig === null) graphSig = st.graph_signature;
    else if (graphSig !== st.graph_signature) {
      graphSig = st.graph_signature;
      fetch("graph.svg").then((r) => r.text()).then((svg) => { $("topology").innerHTML = svg; });
    }
    // the shown pipeline's count changed (a handler dead-lettered, someone redrove): show it
    const shown = st.pipelines.find((p) => p.name === dlq.pipeline);
    if (shown && shown.dead_letters !== null && dlq.shownCount !== null && shown.dead_letters !== dlq.shownCount && selected.size === 0 && !pending) {
      dlq.shownCount = shown.dead_letters;
      loadLetters();
    } else if (shown && dlq.shownCount === null) {
      dlq.shownCount = shown.dead_letters;
    }
  }

  function pipelineOptions(ps) {
    const sel = $("dlq-pipeline");
    const names = ps.filter((p) => p.dead_letters_browsable).map((p) => p.name);
    const have = Array.from(sel.options).map((o) => o.value);
    if (names.join("\n") !== have.join("\n")) {
      const cur = sel.value;
      sel.textContent = "";
      for (const n of names) sel.appendChild(new Option(n, n));
      if (names.includes(cur)) sel.value = cur;
    }
    if (names.length > 0 && (!dlq.pipeline || !loaded)) {
      // the pipeline the URL names, once it is known; else the first
      if (!names.includes(dlq.pipeline)) dlq.pipeline = names[0];
      sel.value = dlq.pipeline;
      loaded = true;
      saveState(false);
      loadLetters();
    }
    if (names.length === 0) setText($("dlq-summary"), "No pipeline has dead letters that can be browsed here.");
  }

  async function refresh() {
    try {
      const r = await fetch("api/status", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const st = await r.json();
      render(st);
      setText($("conn"), "live");
      setClass($("conn"), "ok", true);
      setClass($("conn"), "bad", false);
      setTime($("updated-at"), st.time);
    } catch (e) {
      setText($("conn"), "cannot reach flowrun");
      setClass($("conn"), "ok", false);
      setClass($("conn"), "bad", true);
    }
  }

  // ---- dead letters ----
  let loaded = false; // the first view was chosen (from the URL, or the first pipeline)

  // The view in the URL: defaults are left out. push adds a history entry (a new view), else
  // the entry is replaced (a letter opened or closed, or a view normalised).
  function saveState(push) {
    // the runs section's parameters (runs.js) are kept as they are
    const q = new URLSearchParams(location.search);
    for (const k of ["pipeline", "order", "where", "offset", "letter"]) q.delete(k);
    if (dlq.pipeline) q.set("pipeline", dlq.pipeline);
    if (dlq.order !== "newest") q.set("order", dlq.order);
    if (dlq.where) q.set("where", dlq.where);
    if (dlq.offset > 0) q.set("offset", dlq.offset);
    if (dlq.letter) q.set("letter", dlq.letter);
    const url = location.pathname + (q.toString() ? "?" + q : "") + location.hash;
    if (url === location.pathname + location.search + location.hash) return;
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
  }

  function readState() {
    const q = new URLSearchParams(location.search);
    dlq.pipeline = q.get("pipeline") || "";
    dlq.order = q.get("order") === "oldest" ? "oldest" : "newest";
    dlq.where = (q.get("where") || "").trim();
    const off = parseInt(q.get("offset") || "0", 10);
    dlq.offset = off > 0 ? off : 0;
    dlq.letter = q.get("letter") || "";
    $("dlq-order").value = dlq.order;
    $("dlq-where").value = dlq.where;
    if (dlq.pipeline && Array.from($("dlq-pipeline").options).some((o) => o.value === dlq.pipeline)) $("dlq-pipeline").value = dlq.pipeline;
  }

  // A new view: it goes into the history, the page's selection and open letter are dropped.
  function view(changes) {
    Object.assign(dlq, { letter: "" }, changes);
    selected.clear();
    saveState(true);
    loadLetters();
  }

  function showLetters(name) {
    $("dlq-pipeline").value = name;
    view({ pipeline: name, offset: 0 });
  }

  function whereError(e) {
    // the expression with a caret under the place the error points at
    const lines = (e.where || "").split("\n");
    let text = "where: " + (e.line ? e.line + ":" + e.column + ": " : "") + e.error;
    if (e.line && lines[e.line - 1] !== undefined) {
      text += "\n" + lines[e.line - 1] + "\n" + " ".repeat(Math.max(e.column - 1, 0)) + "^";
    }
    return text;
  }

  let loadSeq = 0;
  async function loadLetters() {
    if (!dlq.pipeline) return;
    const seq = ++loadSeq;
    const q = new URLSearchParams({ order: dlq.order, offset: dlq.offset, limit: dlq.limit });
    if (dlq.where) q.set("where", dlq.where);
    let r, body;
    try {
      r = await fetch("api/pipelines/" + encodeURIComponent(dlq.pipeline) + "/dead-letters?" + q, { cache: "no-store" });
      body = await r.json();
    } catch (e) {
      if (seq === loadSeq) showError("cannot read dead letters: " + e.message);
      return;
    }
    if (seq !== loadSeq) return; // a newer request is under way
    if (!r.ok) {
      showError(body.where !== undefined ? whereError(body) : body.error);
      return;
    }
    $("dlq-error").hidden = true;
    dlq.total = body.total;
    if (!dlq.where) dlq.shownCount = body.total;
    renderLetters(body);
  }

  function showError(text) {
    const el = $("dlq-error");
    el.textContent = text;
    el.hidden = false;
    $("dlq-list").textContent = "";
    setText($("dlq-summary"), "");
    setText($("dlq-page"), "");
    $("dlq-prev").disabled = $("dlq-next").disabled = true;
  }

  function renderLetters(b) {
    const list = $("dlq-list");
    const open = new Set(Array.from(list.querySelectorAll("details[open]")).map((d) => d.dataset.ref));
    if (dlq.letter) open.add(dlq.letter);
    const frag = document.createDocumentFragment();
    const shown = new Set();
    for (const l of b.letters) {
      shown.add(l.ref);
      frag.appendChild(letterEl(l, open.has(l.ref)));
    }
    for (const r of Array.from(selected)) if (!shown.has(r)) selected.delete(r);
    list.replaceChildren(frag);
    const matching = b.where ? " matching" : "";
    let summary = b.total + " dead letter" + (b.total === 1 ? "" : "s") + matching + " in " + b.dead_letter_key;
    if (b.where_failed > 0) summary += " (the filter failed on " + b.where_failed + ", which count as not matching; the first: " + b.where_failed_first + ")";
    setText($("dlq-summary"), summary);
    const from = b.letters.length ? b.offset + 1 : 0;
    setText($("dlq-page"), from + "–" + (b.offset + b.letters.length) + " of " + b.total + ", " + b.order + " first");
    $("dlq-prev").disabled = b.offset === 0;
    $("dlq-next").disabled = b.offset + b.letters.length >= b.total;
    updateButtons();
  }

  function letterEl(l, open) {
    const d = document.createElement("details");
    d.className = "letter";
    d.dataset.ref = l.ref;
    d.open = open;
    let initial = open; // the toggle event of being created open is not the user's
    d.addEventListener("toggle", () => {
      if (initial) { initial = false; if (d.open) return; }
      if (d.open) dlq.letter = l.ref;
      else if (dlq.letter === l.ref) dlq.letter = "";
      saveState(false);
    });
    const s = document.createElement("summary");
    if (admin) {
      const cb = document.createElement("input");
      cb.type = "checkbox";
      cb.className = "pick";
      cb.title = "select for redrive or purge";
      cb.checked = selected.has(l.ref);
      cb.addEventListener("click", (ev) => { ev.stopPropagation(); });
      cb.addEventListener("change", () => {
        if (cb.checked) selected.add(l.ref); else selected.delete(l.ref);
        updateButtons();
      });
      s.appendChild(cb);
    }
    const span = (cls, text) => {
      const e = document.createElement("span");
      e.className = cls;
      e.textContent = text;
      s.appendChild(e);
    };
    span("mono", l.id || "(list entry)");
    const at = document.createElement("span");
    at.className = "muted failed-at";
    setTime(at, l.failed_at);
    s.appendChild(at);
    span("muted", "attempts " + (l.attempts || "?"));
    span("mono", l.key);
    span("reason", l.reason || "(no reason)");
    d.appendChild(s);
    const body = document.createElement("div");
    body.className = "body";
    const t = document.createElement("table");
    for (const k of Object.keys(l.headers).sort()) {
      const tr = t.insertRow();
      const th = document.createElement("th");
      th.textContent = k;
      tr.appendChild(th);
      tr.insertCell().textContent = l.headers[k];
    }
    body.appendChild(t);
    const pre = document.createElement("pre");
    pre.className = "payload";
    pre.textContent = l.payload_json || l.payload;
    body.appendChild(pre);
    d.appendChild(body);
    return d;
  }

  function updateButtons() {
    if (!admin) return;
    const none = selected.size === 0;
    $("redrive-selected").disabled = none;
    $("purge-selected").disabled = none;
    setText($("redrive-selected"), "Redrive selected" + (none ? "" : " (" + selected.size + ")"));
    setText($("purge-selected"), "Purge selected" + (none ? "" : " (" + selected.size + ")"));
  }

  function result(text, bad) {
    const el = $("action-result");
    el.textContent = text;
    el.hidden = false;
    setClass(el, "bad", !!bad);
  }

  async function act(action, all) {
    const token = $("admin-token").value;
    if (!token) { result("Enter the admin token first.", true); $("admin-token").focus(); return; }
    const body = all ? { all: true, where: dlq.where } : { refs: Array.from(selected) };
    let r, out;
    try {
      r = await fetch("api/pipelines/" + encodeURIComponent(dlq.pipeline) + "/dead-letters/" + action, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token, "X-CSRF-Token": cookie("flowrun_csrf") },
        body: JSON.stringify(body),
      });
      out = await r.json();
    } catch (e) {
      result(action + " failed: " + e.message, true);
      return;
    }
    if (out.message) result(out.message + (out.error ? " — then: " + out.error : ""), !!out.error);
    else result(action + " refused: " + (out.where !== undefined ? whereError(out) : out.error), true);
    if (r.ok) {
      selected.clear();
      dlq.offset = 0;
      dlq.letter = "";
      saveState(false);
    }
    loadLetters();
    refresh();
  }

  function ask(text, run) {
    pending = run;
    setText($("confirm-text"), text);
    $("confirm").hidden = false;
    $("confirm-yes").focus();
  }
  function endAsk() { pending = null; $("confirm").hidden = true; }

  // ---- wiring ----
  $("dlq-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    view({ pipeline: $("dlq-pipeline").value, order: $("dlq-order").value, where: $("dlq-where").value.trim(), offset: 0 });
  });
  $("dlq-pipeline").addEventListener("change", () => showLetters($("dlq-pipeline").value));
  $("dlq-order").addEventListener("change", () => view({ order: $("dlq-order").value, offset: 0 }));
  $("dlq-prev").addEventListener("click", () => view({ offset: Math.max(0, dlq.offset - dlq.limit) }));
  $("dlq-next").addEventListener("click", () => view({ offset: dlq.offset + dlq.limit }));
  window.addEventListener("popstate", () => {
    readState();
    selected.clear();
    if (dlq.pipeline) loadLetters();
  });
  readState();
  if (admin) {
    $("dlq-admin").hidden = false;
    $("dlq-admin").addEventListener("submit", (ev) => ev.preventDefault());
    const tok = $("admin-token");
    tok.value = sessionStorage.getItem("flowrun-admin-token") || "";
    tok.addEventListener("input", () => sessionStorage.setItem("flowrun-admin-token", tok.value));
    $("redrive-selected").addEventListener("click", () => act("redrive", false));
    $("redrive-all").addEventListener("click", () => ask("Redrive all " + dlq.total + (dlq.where ? " matching" : "") + " dead letters of " + dlq.pipeline + "?", () => act("redrive", true)));
    $("purge-selected").addEventListener("click", () => ask("Delete " + selected.size + " selected dead letters of " + dlq.pipeline + "?", () => act("purge", false)));
    $("purge-all").addEventListener("click", () => ask("Delete all " + dlq.total + (dlq.where ? " matching" : "") + " dead letters of " + dlq.pipeline + "?", () => act("purge", true)));
    $("confirm-yes").addEventListener("click", () => { const run = pending; endAsk(); if (run) run(); });
    $("confirm-no").addEventListener("click", endAsk);
  } else {
    $("dlq-readonly").hidden = false;
  }
  refresh();
  setInterval(refresh, every);
})();
