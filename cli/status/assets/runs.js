// flowrun status page, the runs of workflows (SPEC §16): polls api/workflows every 2 s for the
// runs per status and per step; lists runs (newest first, by status) and shows one run's
// history as a timeline through api/workflows/NAME/runs and /run; cancels and retries with the
// admin token. The view (workflow, status, run) is kept in the URL's query beside the
// dead-letter view's. Everything that came from a run or a file is set as text, never as markup.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const admin = document.body.dataset.admin === "on";
  const every = 2000;
  const view = { workflow: "", status: "", limit: 20, run: "" };
  const cards = new Map();
  let known = []; // the workflows' names, as last polled
  let started = false; // the first view was chosen
  let shown = null; // the run on the page
  let pending = null; // the action waiting for confirmation
  let lastCounts = "";

  function setText(el, v) {
    v = String(v);
    if (el.textContent !== v) el.textContent = v;
  }
  function setClass(el, name, on) {
    if (el.classList.contains(name) !== on) el.classList.toggle(name, on);
  }
  function num(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"); }
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
  function iso(v) {
    const d = new Date(v);
    return !v || isNaN(d) ? String(v || "–") : d.toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  function timeEl(v) {
    const e = document.createElement("time");
    e.textContent = iso(v);
    if (v) { e.dateTime = v; e.title = "local time: " + new Date(v).toLocaleString(); }
    return e;
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function cookie(name) {
    for (const c of document.cookie.split(";")) {
      const [k, v] = c.trim().split("=");
      if (k === name) return decodeURIComponent(v || "");
    }
    return "";
  }
  // the kind of an outcome, for its colour
  function tone(o) {
    if (o === "ack" || o === "completed" || o === "started") return "ok";
    if (o === "dead_letter" || o === "failed" || o === "timeout" || o === "compensation_failed" || o === "error") return "bad";
    if (o === "cancelled" || o === "drop" || o === "duplicate") return "muted";
    return "warn";
  }

  // ---- the URL ----
  function saveState(push) {
    const q = new URLSearchParams(location.search);
    for (const k of ["workflow", "run_status", "run"]) q.delete(k);
    if (view.workflow) q.set("workflow", view.workflow);
    if (view.status) q.set("run_status", view.status);
    if (view.run) q.set("run", view.run);
    const url = location.pathname + (q.toString() ? "?" + q : "") + location.hash;
    if (url === location.pathname + location.search + location.hash) return;
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
  }
  function readState() {
    const q = new URLSearchParams(location.search);
    view.workflow = q.get("workflow") || "";
    view.status = q.get("run_status") || "";
    view.run = q.get("run") || "";
  }

  // ---- the workflows ----
  function card(w) {
    let c = cards.get(w.name);
    if (c) return c;
    const e = $("workflow-template").content.firstElementChild.cloneNode(true);
    e.dataset.workflow = w.name;
    const f = {};
    e.querySelectorAll("[data-f]").forEach((n) => { f[n.dataset.f] = n; });
    c = { el: e, f, status: e.querySelector(".by-status tbody"), step: e.querySelector(".by-step tbody"), rows: new Map() };
    cards.set(w.name, c);
    return c;
  }

  // row is a count's row of a card's table, made once; a status count is a link to its runs.
  function row(c, body, key, link) {
    const id = body.parentElement.className + "\n" + key;
    let tr = c.rows.get(id);
    if (tr) return tr;
    tr = document.createElement("tr");
    tr.dataset.key = key;
    tr.appendChild(el("td", "", key.replace(/_/g, " ")));
    const td = document.createElement("td");
    if (link) {
      const a = el("a", "");
      a.href = "#runs-title";
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        go({ workflow: c.el.dataset.workflow, status: key, run: "" });
        $("runs-title").scrollIntoView();
      });
      td.appendChild(a);
    }
    tr.appendChild(td);
    body.appendChild(tr);
    c.rows.set(id, tr);
    return tr;
  }
  function setCount(tr, n) {
    const target = tr.cells[1].firstElementChild || tr.cells[1];
    setText(target, num(n));
  }

  function render(st) {
    $("runs-section").hidden = st.workflows.length === 0;
    const list = $("workflows");
    const seen = new Set();
    st.workflows.forEach((w, i) => {
      seen.add(w.name);
      const c = card(w);
      if (list.children[i] !== c.el) list.insertBefore(c.el, list.children[i] || null);
      setText(c.f.name, w.name);
      setText(c.f.counted, w.counted_at ? "counted " + iso(w.counted_at) : "counting…");
      c.f.error.hidden = !w.error;
      setText(c.f.error, w.error || "");
      for (const s of st.statuses) setCount(row(c, c.status, s, true), w.runs[s]);
      const steps = w.steps.slice();
      for (const s of Object.keys(w.active).sort()) if (!steps.includes(s)) steps.push(s);
      for (const s of steps) setCount(row(c, c.step, s, false), w.active[s]);
    });
    for (const [name, c] of cards) if (!seen.has(name)) { c.el.remove(); cards.delete(name); }
    const first = options(st);
    // the list follows the runs per status of its workflow (counted at most every 15 s), not
    // the active counts, which move with nearly every step: each list walks the runs kept
    const w = st.workflows.find((x) => x.name === view.workflow);
    const counts = w ? JSON.stringify(w.runs) : "";
    if (started && counts !== lastCounts) { lastCounts = counts; if (!first) listRuns(); }
    if (shown && shown.workflow === view.workflow && (shown.cancellable || shown.status === "compensating")) loadRun(false);
  }

  function options(st) {
    const sel = $("runs-workflow");
    const names = st.workflows.map((w) => w.name);
    if (names.join("\n") !== known.join("\n")) {
      const cur = sel.value;
      sel.textContent = "";
      for (const n of names) sel.appendChild(new Option(n, n));
      if (names.includes(cur)) sel.value = cur;
      known = names;
    }
    const ss = $("runs-status");
    if (ss.options.length === 1) for (const s of st.statuses) ss.appendChild(new Option(s.replace(/_/g, " "), s));
    if (!started && names.length > 0) {
      if (!names.includes(view.workflow)) view.workflow = names[0];
      started = true;
      show();
      saveState(false);
      return true;
    }
    return false;
  }

  async function refresh() {
    try {
      const r = await fetch("api/workflows", { cache: "no-store" });
      if (!r.ok) return;
      render(await r.json());
    } catch (e) { /* status.js says the connection is down */ }
  }

  // ---- runs ----
  function go(changes) {
    Object.assign(view, changes);
    saveState(true);
    show();
  }
  function show() {
    $("runs-workflow").value = view.workflow;
    $("runs-status").value = view.status;
    $("run-id").value = view.run;
    listRuns();
    if (view.run) loadRun(true);
    else { shown = null; $("run").hidden = true; }
  }

  function showError(text) {
    const e = $("runs-error");
    e.textContent = text;
    e.hidden = !text;
  }

  let listSeq = 0;
  async function listRuns() {
    if (!view.workflow) return;
    const seq = ++listSeq;
    const q = new URLSearchParams({ limit: view.limit });
    if (view.status) q.set("status", view.status);
    let r, b;
    try {
      r = await fetch("api/workflows/" + encodeURIComponent(view.workflow) + "/runs?" + q, { cache: "no-store" });
      b = await r.json();
    } catch (e) {
      if (seq === listSeq) showError("cannot read runs: " + e.message);
      return;
    }
    if (seq !== listSeq) return;
    if (r.status === 429) {
      // the list before this one is still being read (one at a time per client): again soon
      setTimeout(() => { if (seq === listSeq) listRuns(); }, 300);
      return;
    }
    if (!r.ok) {
      showError(b.error);
      return;
    }
    const frag = document.createDocumentFragment();
    for (const run of b.runs) frag.appendChild(runItem(run));
    $("runs-list").replaceChildren(frag);
    const of = b.status ? " " + b.status.replace(/_/g, " ") : "";
    let summary = b.runs.length + of + " run" + (b.runs.length === 1 ? "" : "s") + " of " + b.workflow + ", newest first";
    if (b.more) summary = "the newest " + b.runs.length + of + " runs of " + b.workflow + " (there are more)";
    if (b.runs.length === 0) summary = "no" + of + " runs of " + b.workflow;
    setText($("runs-summary"), summary);
  }

  function runItem(run) {
    const li = el("li", "run-item");
    li.dataset.run = run.id;
    const a = el("a", "mono id", run.id);
    a.href = "#run";
    a.addEventListener("click", (ev) => { ev.preventDefault(); go({ run: run.id }); });
    li.appendChild(a);
    li.appendChild(el("span", "state " + tone(run.status), run.status.replace(/_/g, " ")));
    if (run.step) li.appendChild(el("span", "mono step", run.step));
    const t = el("span", "muted", "started ");
    t.appendChild(timeEl(run.started_at));
    li.appendChild(t);
    return li;
  }

  let runSeq = 0;
  async function loadRun(fresh) {
    if (!view.workflow || !view.run) return;
    const seq = ++runSeq;
    const q = new URLSearchParams({ id: view.run });
    let r, b;
    try {
      r = await fetch("api/workflows/" + encodeURIComponent(view.workflow) + "/run?" + q, { cache: "no-store" });
      b = await r.json();
    } catch (e) {
      if (seq === runSeq) showError("cannot read the run: " + e.message);
      return;
    }
    if (seq !== runSeq) return;
    if (!r.ok) {
      shown = null;
      $("run").hidden = true;
      showError(b.error);
      return;
    }
    showError("");
    if (fresh) { $("run-result").hidden = true; endAsk(); }
    shown = b;
    renderRun(b);
  }

  function fact(dl, name, value, cls) {
    const d = el("div", cls || "");
    d.appendChild(el("dt", "", name));
    const dd = el("dd", "");
    if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
    d.appendChild(dd);
    dl.appendChild(d);
  }

  function renderRun(b) {
    $("run").hidden = false;
    $("run").dataset.run = b.id;
    setText($("run-title"), b.id);
    const st = $("run-status");
    st.className = "state " + tone(b.status);
    setText(st, b.status.replace(/_/g, " "));
    const dl = document.createElement("dl");
    dl.id = "run-facts";
    dl.className = "facts";
    fact(dl, "Workflow", b.workflow);
    if (b.step) fact(dl, b.status === "waiting" ? "Waiting in" : "Current step", b.step, "mono");
    if (b.step) fact(dl, "In it for", dur(b.in_step_ms));
    if (b.times_out_at) fact(dl, "Times out at", timeEl(b.times_out_at), "times-out");
    fact(dl, "Visit", String(b.visit));
    fact(dl, "Started", timeEl(b.started_at));
    fact(dl, "Updated", timeEl(b.updated_at));
    fact(dl, b.status === "running" || b.status === "waiting" || b.status === "compensating" ? "Running for" : "Took", dur(b.took_ms));
    if (b.failed_step) fact(dl, "Failed at", b.failed_step, "mono");
    if (b.compensated) fact(dl, "Compensated", "yes");
    if (b.error) fact(dl, "Error", b.error, "error-fact");
    $("run-facts").replaceWith(dl);
    $("run-timeline").replaceChildren(timeline(b));
    const inp = $("run-input");
    setText(inp, b.input || "(none)");
    const outs = document.createDocumentFragment();
    for (const o of b.outputs) {
      outs.appendChild(el("h4", "mono", "Output of " + o.step));
      outs.appendChild(el("pre", "value", o.output));
    }
    $("run-outputs").replaceChildren(outs);
    if (admin) {
      $("run-cancel").disabled = !b.cancellable;
      $("run-retry").disabled = !b.retryable;
    }
  }

  function timeline(b) {
    const frag = document.createDocumentFragment();
    for (const e of b.history) {
      const li = el("li", "event " + tone(e.outcome));
      const head = el("div", "head");
      head.appendChild(timeEl(e.at));
      if (e.since_ms !== null && e.since_ms !== undefined) head.appendChild(el("span", "muted since", "+" + dur(e.since_ms)));
      head.appendChild(el("span", "outcome", e.outcome.replace(/_/g, " ")));
      li.appendChild(head);
      const what = el("div", "what");
      if (e.step) what.appendChild(el("span", "mono step", e.step));
      if (e.visit) what.appendChild(el("span", "muted", "visit " + e.visit));
      if (e.attempt) what.appendChild(el("span", "muted", "attempt " + e.attempt));
      li.appendChild(what);
      if (e.error) li.appendChild(el("div", "err", e.error));
      frag.appendChild(li);
    }
    if (b.step && (b.status === "running" || b.status === "waiting" || b.status === "compensating")) {
      const li = el("li", "event now");
      const head = el("div", "head");
      head.appendChild(el("span", "outcome", b.status === "waiting" ? "waiting" : "now"));
      head.appendChild(el("span", "muted since", "for " + dur(b.in_step_ms)));
      li.appendChild(head);
      const what = el("div", "what");
      what.appendChild(el("span", "mono step", b.step));
      what.appendChild(el("span", "muted", "visit " + b.visit));
      if (b.times_out_at) {
        const t = el("span", "muted", "times out at ");
        t.appendChild(timeEl(b.times_out_at));
        what.appendChild(t);
      }
      li.appendChild(what);
      frag.appendChild(li);
    }
    return frag;
  }

  // ---- actions ----
  function result(text, bad) {
    const e = $("run-result");
    e.textContent = text;
    e.hidden = false;
    setClass(e, "bad", !!bad);
  }
  async function act(action) {
    const token = $("run-token").value;
    if (!token) { result("Enter the admin token first.", true); $("run-token").focus(); return; }
    const id = shown.id;
    let r, out;
    try {
      r = await fetch("api/workflows/" + encodeURIComponent(shown.workflow) + "/runs/" + action, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token, "X-CSRF-Token": cookie("flowrun_csrf") },
        body: JSON.stringify({ id }),
      });
      out = await r.json();
    } catch (e) {
      result(action + " failed: " + e.message, true);
      return;
    }
    if (r.ok) result(out.message, false);
    else result(action + " refused: " + out.error, true);
    await loadRun(false);
    refresh();
    listRuns();
  }
  function ask(text, run) {
    pending = run;
    setText($("run-confirm-text"), text);
    $("run-confirm").hidden = false;
    $("run-confirm-yes").focus();
  }
  function endAsk() { pending = null; $("run-confirm").hidden = true; }

  // ---- wiring ----
  $("runs-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    view.limit = parseInt($("runs-limit").value, 10) || 20;
    go({ workflow: $("runs-workflow").value, status: $("runs-status").value });
  });
  $("runs-workflow").addEventListener("change", () => go({ workflow: $("runs-workflow").value, run: "" }));
  $("runs-status").addEventListener("change", () => go({ status: $("runs-status").value }));
  $("runs-limit").addEventListener("change", () => { view.limit = parseInt($("runs-limit").value, 10) || 20; listRuns(); });
  $("run-find").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go({ workflow: $("runs-workflow").value, run: $("run-id").value.trim() });
  });
  window.addEventListener("popstate", () => { readState(); if (started) show(); });
  readState();
  if (admin) {
    $("run-admin").hidden = false;
    $("run-admin").addEventListener("submit", (ev) => ev.preventDefault());
    const tok = $("run-token");
    tok.value = sessionStorage.getItem("flowrun-admin-token") || "";
    tok.addEventListener("input", () => {
      sessionStorage.setItem("flowrun-admin-token", tok.value);
      const other = $("admin-token");
      if (other) other.value = tok.value;
    });
    const other = $("admin-token");
    if (other) other.addEventListener("input", () => { tok.value = other.value; });
    $("run-cancel").addEventListener("click", () => ask("Cancel run " + shown.id + " of " + shown.workflow + "?", () => act("cancel")));
    $("run-retry").addEventListener("click", () => ask("Retry run " + shown.id + " at step " + shown.failed_step + "?", () => act("retry")));
    $("run-confirm-yes").addEventListener("click", () => { const run = pending; endAsk(); if (run) run(); });
    $("run-confirm-no").addEventListener("click", endAsk);
  } else {
    $("run-readonly").hidden = false;
  }
  refresh();
  setInterval(refresh, every);
})();
