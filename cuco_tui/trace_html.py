"""A trace-event JSON (what `timeline.chrome_trace` makes) as one self-contained HTML page: a viewer that needs
no network, no web app and no browser feature beyond SVG, for machines that cannot reach Perfetto's UI.

The page holds the trace itself as JSON in a `<script type="application/json">` element and a small script
that draws it: a row group per rank (process), a row per lane (thread), each slice a rectangle coloured by
its category on one time axis, the configs' stretches labelled with their figures, a legend, a tooltip per
slice; the mouse wheel zooms, a drag pans. Names reach the page only through that JSON and the DOM's text
APIs, so a kernel named `</script>` or `"><img ...>` is shown, never run.
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any

CATEGORY_COLOURS = {"compute": "#4e79a7", "comm": "#f28e2b", "wait": "#edc948", "idle": "#e15759", "config": "#bab0ac"}


def embedded_json(value: Any) -> str:
    """JSON safe inside a <script> element: '<', '>' and '&' as \\u escapes (JSON.parse reads them back), so no
    string in the trace can close the element or open a comment; non-ASCII (U+2028 included) escaped too."""
    text = json.dumps(_finite(value), ensure_ascii=True, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    """NaN and infinities (a record's argument could hold one) as null: JSON.parse refuses them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render(trace: dict[str, Any]) -> str:
    """The page for one trace (a dict with `traceEvents` and `otherData`, as chrome_trace returns it)."""
    title = str((trace.get("otherData") or {}).get("title") or "cuco trace")
    fill = {"TITLE": html.escape(title), "COLOURS": embedded_json(CATEGORY_COLOURS), "TRACE": embedded_json(trace)}
    return re.sub(r"\{\{(TITLE|COLOURS|TRACE)\}\}", lambda m: fill[m.group(1)], PAGE)  # one pass: no value is re-read


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{TITLE}}</title>
<style>
  body { font: 13px system-ui, sans-serif; margin: 12px 16px; color: #222; background: #fff; }
  h1 { font-size: 16px; margin: 0 0 6px; }
  #bar { display: flex; gap: 14px; align-items: center; flex-wrap: wrap; margin-bottom: 6px; }
  #legend span.key { display: inline-block; width: 12px; height: 12px; margin: 0 4px -2px 10px; border-radius: 2px; }
  button { font: inherit; padding: 1px 8px; }
  #hint { color: #777; }
  svg { display: block; user-select: none; cursor: grab; }
  svg text { font: 11px system-ui, sans-serif; fill: #222; }
  svg .rank-label { font-weight: 600; font-size: 12px; }
  svg .tick { fill: #555; }
  svg .slice-label { fill: #fff; pointer-events: none; }
  svg .slice-label.dark { fill: #333; }
  svg .config-label { font-weight: 600; pointer-events: none; }
  svg .figures-label { fill: #333; pointer-events: none; }
  #empty { color: #a33; font-weight: 600; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div id="bar"><span id="legend"></span>
  <span><button id="zoom-in" title="zoom in">+</button> <button id="zoom-out" title="zoom out">&minus;</button>
  <button id="zoom-all" title="the whole trace">whole trace</button></span>
  <span id="hint">wheel: zoom, drag: pan, hover a slice for its name, start and duration</span></div>
<div id="view"></div>
<script type="application/json" id="trace-colours">{{COLOURS}}</script>
<script type="application/json" id="trace-data">{{TRACE}}</script>
<script>
"use strict";
(() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const trace = JSON.parse(document.getElementById("trace-data").textContent);
  const COLOURS = JSON.parse(document.getElementById("trace-colours").textContent);
  const other = trace.otherData || {};
  const LABEL_W = 190, ROW_H = 20, RANK_H = 22, AXIS_H = 26, CONFIG_H = 34, PAD = 8;

  document.getElementById("title").textContent = other.title || "trace";

  // ---- the trace's structure: ranks (processes), their lanes (threads), slices ----
  const ranks = new Map();   // pid -> {name, sort, lanes: Map(tid -> {name, sort, slices: []})}
  const rank = pid => {
    if (!ranks.has(pid)) ranks.set(pid, {pid, name: "process " + pid, sort: pid, lanes: new Map()});
    return ranks.get(pid);
  };
  const lane = (pid, tid) => {
    const r = rank(pid);
    if (!r.lanes.has(tid)) r.lanes.set(tid, {tid, name: "thread " + tid, sort: tid, slices: []});
    return r.lanes.get(tid);
  };
  const slices = [];
  for (const e of trace.traceEvents || []) {
    if (e.ph === "M") {
      if (e.name === "process_name") rank(e.pid).name = String(e.args.name);
      else if (e.name === "process_sort_index") rank(e.pid).sort = e.args.sort_index;
      else if (e.name === "thread_name") lane(e.pid, e.tid).name = String(e.args.name);
      else if (e.name === "thread_sort_index") lane(e.pid, e.tid).sort = e.args.sort_index;
    } else if (e.ph === "X" && isFinite(e.ts)) {
      const s = {e, ts: +e.ts, dur: Math.max(0, +e.dur || 0)};
      lane(e.pid, e.tid).slices.push(s);
      slices.push(s);
    }
  }
  const byRank = [...ranks.values()].sort((a, b) => a.sort - b.sort);
  let t0 = Infinity, t1 = -Infinity;
  for (const s of slices) { t0 = Math.min(t0, s.ts); t1 = Math.max(t1, s.ts + s.dur); }
  if (!slices.length) { t0 = 0; t1 = 1; }
  if (t1 - t0 < 1e-3) t1 = t0 + 1;    // one instant slice: still an axis to draw it on
  const full = [t0, t1];
  let view = [t0, t1];

  // each config's stretch over all ranks, with its figures (otherData.figures) for the label
  const configs = new Map();
  for (const s of slices) if (s.e.cat === "config") {
    const c = configs.get(s.e.name) || {name: s.e.name, ts: s.ts, end: s.ts + s.dur};
    c.ts = Math.min(c.ts, s.ts); c.end = Math.max(c.end, s.ts + s.dur);
    configs.set(s.e.name, c);
  }

  // ---- formatting ----
  const fmtUs = (us, step) => {
    const ms = Math.abs(step === undefined ? us : step) >= 1000;
    const v = ms ? us / 1000 : us, st = ms ? (step || us) / 1000 : (step || us);
    const d = Math.max(0, Math.min(6, -Math.floor(Math.log10(Math.abs(st) || 1)) + (step === undefined ? 2 : 0)));
    return v.toFixed(d) + (ms ? " ms" : " \\u00b5s");
  };
  const num = v => typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v);
  const argLines = args => Object.entries(args || {}).filter(([, v]) => v !== null && typeof v !== "object")
    .map(([k, v]) => k + ": " + num(v));
  const configText = c => {
    const f = (other.figures || {})[c.name] || {};
    const parts = [c.name];
    parts.push("overlap fraction " + (typeof f.overlap_fraction === "number" ? f.overlap_fraction.toFixed(2) : "-"));
    if (f.critical_rank !== undefined && f.critical_rank !== null) parts.push("critical rank " + f.critical_rank);
    if (typeof f.exposed_comm_ms === "number") parts.push("exposed " + f.exposed_comm_ms.toFixed(3) + " ms");
    if (f.source) parts.push(f.source);
    if (f.dropped) parts.push(f.dropped + " records dropped");
    return parts.join(" \\u00b7 ");
  };
  const rankFigures = a => [
    typeof a.span_ms === "number" ? "span " + a.span_ms.toFixed(3) + " ms" : null,
    typeof a.compute_ms === "number" ? "compute " + a.compute_ms.toFixed(3) : null,
    typeof a.comm_ms === "number" ? "comm " + a.comm_ms.toFixed(3) : null,
    typeof a.exposed_share === "number" ? "exposed " + Math.round(100 * a.exposed_share) + "%" : null,
    typeof a.idle_ms === "number" ? "idle " + a.idle_ms.toFixed(3) : null,
  ].filter(Boolean).join(" \\u00b7 ");

  // ---- legend ----
  const legend = document.getElementById("legend");
  const cats = new Set(slices.map(s => s.e.cat));
  for (const [cat, colour] of Object.entries(COLOURS)) {
    if (!cats.has(cat) && slices.length) continue;
    const key = document.createElement("span");
    key.className = "key"; key.style.background = colour;
    legend.append(key, document.createTextNode(cat));
  }

  // ---- drawing ----
  const el = (name, attrs, parent) => {
    const n = document.createElementNS(SVGNS, name);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    if (parent) parent.appendChild(n);
    return n;
  };
  const text = (parent, x, y, str, cls) => { const t = el("text", {x, y, class: cls || ""}, parent); t.textContent = str; return t; };
  const root = document.getElementById("view");
  if (!slices.length) {
    const p = document.createElement("p");
    p.id = "empty"; p.textContent = "This trace has no slices (no configs, or nothing was recorded).";
    root.appendChild(p);
  }
  const rows = byRank.reduce((n, r) => n + r.lanes.size, 0);
  const height = AXIS_H + CONFIG_H + byRank.length * (RANK_H + PAD) + rows * ROW_H + PAD;
  let width = 0;
  const svg = el("svg", {id: "timeline", height}, root);
  const defs = el("defs", {}, svg);
  const clip = el("clipPath", {id: "plot-clip"}, defs);
  const clipRect = el("rect", {x: LABEL_W, y: 0, height}, clip);
  const plot = el("rect", {id: "plot-area", x: LABEL_W, y: AXIS_H, height: height - AXIS_H, fill: "#fafafa",
                           stroke: "#ddd"}, svg);
  const ticks = el("g", {class: "ticks"}, svg);
  const body = el("g", {"clip-path": "url(#plot-clip)"}, svg);
  const labels = el("g", {}, svg);
  const placed = [];   // {node, ts, dur, shown, and for a labelled slice: parent, y, text, cls, node of the label}
  const measure = document.createElement("canvas").getContext("2d");
  const charWidth = (str, cls) => {      // the label's mean character width, from the canvas (no page layout)
    measure.font = (/config-label/.test(cls) ? "600 " : "") + "11px system-ui, sans-serif";
    return measure.measureText(str).width / Math.max(1, str.length) || 7;
  };

  const addSlice = (parent, s, y, h, fill, label, labelClass) => {
    const r = el("rect", {y, height: h, fill, class: "slice", "data-cat": s.e.cat || "", rx: 1}, parent);
    const title = el("title", {}, r);
    title.textContent = [String(s.e.name), (s.e.cat || "") + (s.laneName ? " \\u00b7 " + s.laneName : ""),
                         "start " + fmtUs(s.ts), "duration " + fmtUs(s.dur), ...argLines(s.e.args)].join("\\n");
    placed.push({node: r, ts: s.ts, dur: s.dur, shown: true,
                 label: label ? {parent, y: y + h / 2 + 4, text: label, cls: labelClass, node: null} : null});
  };

  // the configs band: each config's stretch with its figures
  const band = el("g", {class: "configs"}, body);
  text(labels, 4, AXIS_H + 20, "configs", "rank-label");
  for (const c of configs.values()) {
    const s = {e: {name: c.name, cat: "config", args: (other.figures || {})[c.name]}, ts: c.ts, dur: c.end - c.ts};
    addSlice(band, s, AXIS_H + 6, CONFIG_H - 10, "#e6e1de", configText(c), "config-label");
  }
  let y = AXIS_H + CONFIG_H;
  for (const r of byRank) {
    const g = el("g", {class: "rank", "data-rank": r.pid}, body);
    const lg = el("g", {class: "rank-labels", "data-rank": r.pid}, labels);
    const lanes = [...r.lanes.values()].sort((a, b) => a.sort - b.sort);
    el("rect", {x: 0, y, width: LABEL_W - 4, height: RANK_H + lanes.length * ROW_H, fill: "#eef2f7"}, lg);
    text(lg, 4, y + 15, r.name, "rank-label");
    y += RANK_H;
    for (const ln of lanes) {
      text(lg, 14, y + 14, ln.name);
      el("line", {x1: LABEL_W, x2: 1e5, y1: y + ROW_H, y2: y + ROW_H, stroke: "#eee"}, g);
      for (const s of ln.slices) {
        s.laneName = ln.name;
        const isConfig = s.e.cat === "config";
        addSlice(g, s, y + 2, ROW_H - 4, COLOURS[s.e.cat] || "#999",
                 isConfig ? rankFigures(s.e.args || {}) : String(s.e.name),
                 isConfig ? "figures-label" : s.e.cat === "wait" ? "slice-label dark" : "slice-label");
        if (isConfig) placed[placed.length - 1].node.setAttribute("fill-opacity", "0.45");
      }
      y += ROW_H;
    }
    y += PAD;
  }

  const layout = () => {
    width = Math.max(640, root.clientWidth || 1000);
    const plotW = width - LABEL_W - 4;
    svg.setAttribute("width", width);
    plot.setAttribute("width", plotW);
    clipRect.setAttribute("width", plotW);
    const scale = plotW / (view[1] - view[0]);
    const x = t => LABEL_W + (t - view[0]) * scale;
    for (const p of placed) {
      const x0 = Math.max(LABEL_W - 10, x(p.ts)), x1 = Math.min(width + 10, x(p.ts + p.dur));
      const visible = x1 >= LABEL_W - 10 && x0 <= width + 10;
      if (visible !== p.shown) { p.node.style.display = visible ? "" : "none"; p.shown = visible; }
      const l = p.label;
      if (!visible) { if (l && l.node) l.node.style.display = "none"; continue; }
      p.node.setAttribute("x", x0);
      p.node.setAttribute("width", Math.max(0.5, x1 - x0));
      if (!l) continue;
      const room = x1 - Math.max(x0, LABEL_W) - 6;
      if (room <= 30) { if (l.node) l.node.style.display = "none"; continue; }
      if (!l.node) { l.node = text(l.parent, 0, l.y, "", l.cls); l.char = charWidth(l.text, l.cls); }
      const fits = Math.floor(room / l.char);   // only what fits, cut with an ellipsis
      l.node.textContent = l.text.length > fits ? l.text.slice(0, Math.max(1, fits - 1)) + "\\u2026" : l.text;
      l.node.setAttribute("x", Math.max(x0, LABEL_W) + 3);
      l.node.style.display = "";
    }
    ticks.replaceChildren();
    const span = view[1] - view[0], raw = span / Math.max(2, Math.floor(plotW / 110));
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1] + 1e-9; t += step) {
      el("line", {x1: x(t), x2: x(t), y1: AXIS_H - 5, y2: height, stroke: "#e4e4e4"}, ticks);
      text(ticks, x(t) + 2, AXIS_H - 9, fmtUs(t, step), "tick");
    }
  };

  // ---- zoom and pan ----
  const zoom = (factor, at) => {
    const span = view[1] - view[0], c = at === undefined ? (view[0] + view[1]) / 2 : at;
    const next = Math.min(full[1] - full[0], Math.max(1e-3, span * factor));
    let a = c - (c - view[0]) * next / span;
    a = Math.max(full[0], Math.min(full[1] - next, a));
    view = [a, a + next];
    layout();
  };
  const timeAt = clientX => {
    const box = svg.getBoundingClientRect(), plotW = width - LABEL_W - 4;
    return view[0] + (clientX - box.left - LABEL_W) / plotW * (view[1] - view[0]);
  };
  svg.addEventListener("wheel", ev => { ev.preventDefault(); zoom(ev.deltaY < 0 ? 0.8 : 1.25, timeAt(ev.clientX)); },
                       {passive: false});
  let drag = null;
  svg.addEventListener("mousedown", ev => { drag = {x: ev.clientX, view: view.slice()}; svg.style.cursor = "grabbing"; });
  window.addEventListener("mouseup", () => { drag = null; svg.style.cursor = ""; });
  window.addEventListener("mousemove", ev => {
    if (!drag) return;
    const span = drag.view[1] - drag.view[0], plotW = width - LABEL_W - 4;
    let a = drag.view[0] - (ev.clientX - drag.x) / plotW * span;
    a = Math.max(full[0], Math.min(full[1] - span, a));
    view = [a, a + span];
    layout();
  });
  document.getElementById("zoom-in").onclick = () => zoom(0.5);
  document.getElementById("zoom-out").onclick = () => zoom(2);
  document.getElementById("zoom-all").onclick = () => { view = full.slice(); layout(); };
  window.addEventListener("resize", layout);
  layout();
  document.body.setAttribute("data-rendered", String(slices.length));
})();
</script>
</body>
</html>
"""
