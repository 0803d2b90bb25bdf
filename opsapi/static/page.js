// The pipeline page: polls v1/pipeline every poll_ms and draws it. Every
// value from the server is put into the page with textContent or as an
// SVG number, never as HTML, so table names and error messages cannot
// inject markup.
"use strict";

const HISTORY_MS = 10 * 60 * 1000;
const SVG = "http://www.w3.org/2000/svg";
let history = [];
let lastT = 0;
let polls = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function num(n) { return Math.round(n).toLocaleString("en-US"); }

function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? Math.round(n) : n.toFixed(1)) + " " + u[i];
}

function rate(v, unit) {
  if (unit.startsWith("WAL bytes")) return bytes(v) + "/s";
  return (v >= 100 ? num(v) : v.toFixed(v >= 10 ? 0 : 1)) + " " + unit;
}

function lagText(s) {
  if (s.lag === null || s.lag === undefined) return null;
  let t = s.lag_unit === "bytes" ? bytes(s.lag) : num(s.lag) + " " + s.lag_unit;
  if (s.lag_seconds) t += " (" + s.lag_seconds.toFixed(s.lag_seconds < 10 ? 2 : 0) + " s)";
  return t;
}

function ago(iso) {
  if (!iso) return "—";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 90) return Math.round(s) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return new Date(iso).toISOString().slice(0, 16).replace("T", " ");
}

// chart draws the stage's lag (filled area) and rate (line) over the
// samples, each scaled to its own maximum.
function chart(id) {
  const w = 200, h = 44;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  if (history.length < 2) return svg;
  const t1 = history[history.length - 1].t, t0 = Math.min(history[0].t, t1 - 60000);
  const x = t => ((t - t0) / (t1 - t0)) * w;
  const series = (key) => history.filter(s => s[key] && s[key][id] !== undefined).map(s => [s.t, s[key][id]]);
  const draw = (pts, filled, color) => {
    if (pts.length < 2) return;
    const top = Math.max(...pts.map(p => p[1]));
    if (top <= 0) return;
    const y = v => h - 2 - (v / top) * (h - 6);
    let d = pts.map((p, i) => (i ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    const path = document.createElementNS(SVG, "path");
    if (filled) {
      d += ` L${x(pts[pts.length - 1][0]).toFixed(1)},${h} L${x(pts[0][0]).toFixed(1)},${h} Z`;
      path.setAttribute("fill", color); path.setAttribute("fill-opacity", "0.45");
    } else {
      path.setAttribute("fill", "none"); path.setAttribute("stroke", color); path.setAttribute("stroke-width", "1.5");
      path.setAttribute("vector-effect", "non-scaling-stroke");
    }
    path.setAttribute("d", d);
    svg.append(path);
  };
  draw(series("lag"), true, "#f4a340");
  draw(series("rate"), false, "#2f6fd6");
  return svg;
}

function stageCard(s) {
  const lag = lagText(s);
  const cls = ["stage"];
  if (lag === null) cls.push("topic");
  else if (s.lag > 0) cls.push("behind");
  if (s.id === "slot" && s.detail.includes("INACTIVE")) cls.push("inactive");
  const dl = el("dl", {},
    el("dt", {}, "position"), el("dd", { class: "position" }, s.position || "—"),
    el("dt", {}, "rate"), el("dd", { class: "rate" }, rate(s.rate, s.rate_unit)));
  if (lag !== null) dl.append(el("dt", {}, "lag"), el("dd", { class: "lag" + (s.lag > 0 ? " lagging" : "") }, lag));
  const card = el("div", { class: cls.join(" "), "data-stage": s.id, "data-lag": lag === null ? "" : String(s.lag) },
    el("div", { class: "name" }, s.name), el("div", { class: "detail" }, s.detail), dl, chart(s.id));
  if (s.topics && s.topics.length) card.title = s.topics.map(t => t.topic + ": " + num(t.end) + " records").join("\n");
  return card;
}

function render(p) {
  const stages = document.getElementById("stages");
  stages.replaceChildren();
  p.stages.forEach((s, i) => {
    if (i) stages.append(el("div", { class: "arrow", "aria-hidden": "true" }, "→"));
    stages.append(stageCard(s));
  });

  const body = document.querySelector("#aggregates tbody");
  body.replaceChildren(...p.aggregates.map(a => el("tr", { "data-aggregate": a.name },
    el("td", {}, a.name), el("td", {}, a.documents === null ? "—" : num(a.documents)), el("td", {}, num(a.records)),
    el("td", {}, ago(a.last_build)), el("td", {}, num(a.build_lag)),
    el("td", { class: a.dead_letters ? "bad" : "" }, num(a.dead_letters)))));
  document.getElementById("dlq").textContent = "· dead-letter topic: " + num(p.dead_letters) + " records";

  const errs = document.getElementById("errors");
  errs.replaceChildren(...(p.errors.length ? p.errors.map(e => el("li", {},
    el("span", { class: "when" }, ago(e.at)), el("span", { class: "src" }, e.source + (e.subject ? " · " + e.subject : "")),
    e.message)) : [el("li", { class: "muted" }, "none")]));
  for (const [stage, why] of Object.entries(p.stopped || {})) {
    errs.prepend(el("li", {}, el("span", { class: "src" }, stage + " stopped in this process"), why));
  }

  const warn = document.getElementById("warnings");
  warn.hidden = !p.warnings.length;
  warn.replaceChildren(...p.warnings.map(w => el("div", {}, "⚠ " + w)));

  const st = document.getElementById("status");
  const here = Object.keys(p.process || {});
  st.className = "status";
  st.textContent = "WAL " + (p.wal_lsn || "?") + " · updated " + new Date(p.at).toLocaleTimeString() +
    " · this process runs " + (here.length ? here.sort().join(", ") : "no stage");
  document.body.dataset.polls = String(++polls);
}

async function poll() {
  let wait = 1000;
  try {
    const res = await fetch("v1/pipeline?since=" + lastT, { cache: "no-store" });
    const p = await res.json();
    if (!res.ok) throw new Error(p.error || res.statusText);
    wait = p.poll_ms || wait;
    history = lastT ? history.concat(p.history) : p.history;
    if (history.length) lastT = history[history.length - 1].t;
    history = history.filter(s => s.t >= lastT - HISTORY_MS);
    render(p);
  } catch (e) {
    const st = document.getElementById("status");
    st.className = "status bad";
    st.textContent = "cannot read the pipeline: " + e.message;
    wait = 2000;
  }
  setTimeout(poll, wait);
}

poll();
