// loopbox dashboard: the one small script, no build step. Pages work without it;
// with it, their live parts follow the server and a run's log streams in.
// Nothing here writes HTML from data: text goes in through textContent only.
"use strict";

// The navigation's count of pending approvals, as `fresh` (another copy of it) has it.
function pending(fresh) {
  const mine = document.getElementById("pending-count");
  if (!mine || !fresh) return;
  mine.textContent = fresh.textContent;
  mine.hidden = fresh.hidden;
}

// A page that does not refresh (a form, a finished run) still follows the
// pending approvals: the count alone, from the API, as often as a live page.
function followPending() {
  if (!document.getElementById("pending-count")) return;
  const every = 2000;
  async function tick() {
    if (!document.hidden) {
      try {
        const r = await fetch("/api/v1/approvals?status=pending&limit=100", { credentials: "same-origin" });
        if (r.ok) {
          const n = ((await r.json()).approvals || []).length;
          const fresh = document.createElement("span");
          fresh.textContent = n >= 100 ? "99+" : String(n);
          fresh.hidden = n === 0;
          pending(fresh);
        }
      } catch (_) { /* the server restarts: try again */ }
    }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
}
if (!Number(document.body.dataset.refresh || 0)) followPending();

// Reload a page's live parts (`[data-live]` with an id) every `data-refresh` ms,
// leaving alone a part holding the focus or a field someone is typing in.
(function refresh() {
  const every = Number(document.body.dataset.refresh || 0);
  if (!every) return;
  const busy = (el) =>
    el.contains(document.activeElement) ||
    [...el.querySelectorAll("input, textarea, select")].some(
      (f) => (f.type === "checkbox" ? f.checked !== f.defaultChecked : f.value !== f.defaultValue));
  let timer = null;
  async function tick() {
    timer = null;
    if (document.hidden) { timer = setTimeout(tick, every); return; }
    try {
      const r = await fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "refresh" } });
      if (r.redirected || !r.ok) return; // signed out, or gone: the next click says why
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const el of document.querySelectorAll("[data-live][id]")) {
        const fresh = doc.getElementById(el.id);
        if (fresh && !busy(el)) el.replaceWith(document.adoptNode(fresh));
      }
      pending(doc.getElementById("pending-count"));
      if (!doc.body.dataset.refresh) { document.body.dataset.refresh = ""; followPending(); return; }
    } catch (_) { /* the server restarts: try again */ }
    timer = setTimeout(tick, every);
  }
  timer = setTimeout(tick, every);
  window.loopboxRefresh = () => { if (timer) clearTimeout(timer); tick(); };
})();

// What a policy, a command or an agent wrote, as the server's pages show it
// (ui::is_hidden): controls and the characters that reorder or hide text
// (bidi overrides and isolates, zero-width, tags) as escapes, so a line cannot
// pose as another; newlines too, so one cannot start a line of its own.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;
function inert(text) {
  return String(text).replace(HIDDEN, (c) => {
    const n = c.codePointAt(0);
    if (c === "\n") return "\\n";
    if (c === "\r") return "\\r";
    if (c === "\t") return "\t";
    return n < 0x80 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u{" + n.toString(16) + "}";
  });
}

// A run's live log: its log lines over Server-Sent Events, and each finished
// action's output (from the run's JSON view) as it finishes.
(function liveLog() {
  const log = document.getElementById("log");
  if (!log) return;
  const run = log.dataset.run;
  const state = document.getElementById("log-state");
  const MAX_LINES = 2000;
  const shown = new Set();
  const atBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  // A line at its place in time (`at`, RFC 3339): an action's output goes
  // after the log lines written before it ended, whenever it is fetched.
  function line(cls, time, text, at) {
    const follow = atBottom();
    const div = document.createElement("span");
    div.className = cls;
    const when = Date.parse(at || time || "") || Date.now();
    div.dataset.at = String(when);
    if (time) {
      const t = document.createElement("span");
      t.className = "t";
      t.textContent = time.slice(11, 19) + " ";
      div.appendChild(t);
    }
    div.appendChild(document.createTextNode(inert(text)));
    const later = [...log.children].find((c) => Number(c.dataset.at) > when);
    log.insertBefore(div, later || null);
    while (log.childElementCount > MAX_LINES) log.firstElementChild.remove();
    if (follow) log.scrollTop = log.scrollHeight;
  }
  let fetching = null;
  async function outputs() {
    try {
      const r = await fetch("/api/v1/runs/" + encodeURIComponent(run), { credentials: "same-origin" });
      if (!r.ok) return;
      const v = await r.json();
      for (const j of v.journal || []) {
        const key = j.event + "." + j.seq;
        if (j.outcome === "running" || shown.has(key)) continue;
        shown.add(key);
        for (const [stream, text] of [["out", j.stdout], ["err", j.stderr]]) {
          if (!text) continue;
          for (const l of text.replace(/\n$/, "").split("\n")) line("l-out", null, "  " + stream + " │ " + l, j.ended);
        }
        if (j.error) line("l-error", null, "  " + j.error.kind + " │ " + (j.error.message || ""), j.ended);
      }
    } catch (_) { /* shown on the next line */ }
  }
  function soon() {
    if (fetching) return;
    fetching = setTimeout(async () => { await outputs(); fetching = null; }, 150);
  }
  const es = new EventSource("/api/v1/runs/" + encodeURIComponent(run) + "/log");
  state.textContent = "following the log…";
  es.addEventListener("log", (e) => {
    const l = JSON.parse(e.data);
    line("l-" + l.level, l.at, "[" + l.source + "] " + l.message);
    soon();
  });
  es.addEventListener("end", (e) => {
    es.close();
    const s = JSON.parse(e.data).status;
    setTimeout(async () => {
      await outputs();
      line("l-end", null, "— the run ended: " + s + " —", new Date(8.64e15).toISOString());
      state.textContent = "the run ended (" + s + ")";
      if (window.loopboxRefresh) window.loopboxRefresh();
    }, 200);
  });
  es.onerror = () => { state.textContent = "reconnecting to the log…"; };
  es.onopen = () => { state.textContent = "following the log…"; };
})();
