// The trainteam console's few live parts: the runs table refreshes, a run's curves stream (SSE),
// and a run page reloads when its run moves to another step. No library; text goes in as text.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const COLOURS = ["#1d4ed8", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
const LABELS = {loss: "loss", learning_rate: "learning rate", reward: "reward", grad_norm: "grad norm"};

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function cell(row, text, cls) {
  const td = el("td", cls ? {class: cls} : {});
  if (text instanceof Node) td.appendChild(text); else td.textContent = text;
  row.appendChild(td);
}

async function refreshRuns(table) {
  const response = await fetch(table.dataset.live, {credentials: "same-origin"});
  if (!response.ok) return;
  const runs = await response.json();
  const body = el("tbody");
  for (const r of runs) {
    const row = el("tr", {"data-run": r.run_id});
    cell(row, el("a", {href: "/runs/" + encodeURIComponent(r.run_id)}, r.run_id));
    cell(row, r.task_name + " (" + r.workflow + ")");
    cell(row, r.status, "status status-" + r.status);
    cell(row, r.current_step || "");
    cell(row, r.age);
    cell(row, r.live ? "●" : "");
    cell(row, r.pending_approvals ? el("a", {href: "/approvals"}, r.pending_approvals + " approval" + (r.pending_approvals > 1 ? "s" : "")) : "");
    body.appendChild(row);
  }
  if (runs.length) table.replaceChild(body, table.tBodies[0]);
}

function chart(metric, series) {
  const W = 420, H = 180, PAD = 34;
  const all = series.flatMap(s => s.points);
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;  // no spread: a long run has many points
  for (const [x, y] of all) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  const sx = (W - PAD - 8) / ((x1 - x0) || 1), sy = (H - 2 * 14) / ((y1 - y0) || 1);
  const box = el("div", {class: "chart", "data-metric": metric, "data-points": String(all.length)});
  box.appendChild(el("h3", {}, LABELS[metric] || metric));
  const svg = el("svg:svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img"});
  svg.appendChild(el("svg:line", {x1: PAD, y1: H - 14, x2: W - 4, y2: H - 14, stroke: "#94a3b8"}));
  svg.appendChild(el("svg:line", {x1: PAD, y1: 6, x2: PAD, y2: H - 14, stroke: "#94a3b8"}));
  svg.appendChild(el("svg:text", {x: 2, y: 14, "font-size": 10}, y1.toPrecision(3)));
  svg.appendChild(el("svg:text", {x: 2, y: H - 16, "font-size": 10}, y0.toPrecision(3)));
  svg.appendChild(el("svg:text", {x: PAD, y: H - 2, "font-size": 10}, "step " + x0));
  svg.appendChild(el("svg:text", {x: W - 60, y: H - 2, "font-size": 10}, "step " + x1));
  const legend = el("div", {class: "legend"});
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const pts = s.points.map(p => `${(PAD + (p[0] - x0) * sx).toFixed(1)},${(H - 14 - (p[1] - y0) * sy).toFixed(1)}`);
    svg.appendChild(el("svg:polyline", {fill: "none", stroke: colour, "stroke-width": 1.5, points: pts.join(" "),
                                        "data-folder": s.folder}));
    const last = s.points[s.points.length - 1];
    legend.appendChild(el("span", {class: "series"}, `■ ${s.folder}: step ${last[0]}, ${last[1].toPrecision(4)}  `));
    legend.lastChild.setAttribute("data-colour", colour);
  });
  box.appendChild(svg);
  box.appendChild(legend);
  return box;
}

function drawCurves(holder, data) {
  // each event's series continue what came before (offset: the points already here)
  const known = holder.series = holder.series || new Map();
  for (const s of data.series) {
    const key = s.folder + "\u0000" + s.metric;
    const have = known.get(key);
    if (!have || s.offset === 0) known.set(key, {folder: s.folder, metric: s.metric, points: s.points});
    else have.points = have.points.slice(0, s.offset).concat(s.points);
  }
  const byMetric = {};
  for (const s of known.values()) (byMetric[s.metric] = byMetric[s.metric] || []).push(s);
  const order = ["loss", "reward", "learning_rate", "grad_norm"].filter(m => byMetric[m]);
  if (!order.length) return;
  holder.replaceChildren(...order.map(m => chart(m, byMetric[m])));
  holder.dataset.points = String([...known.values()].reduce((n, s) => n + s.points.length, 0));
  holder.dataset.lossPoints = String((byMetric.loss || []).reduce((n, s) => n + s.points.length, 0));
}

function streamCurves(holder) {
  const source = new EventSource(holder.dataset.stream);
  source.addEventListener("curves", ev => drawCurves(holder, JSON.parse(ev.data)));
  source.addEventListener("end", () => { source.close(); holder.dataset.ended = "1"; });
}

async function followRun(state) {
  const response = await fetch("/api/runs/" + encodeURIComponent(state.dataset.run), {credentials: "same-origin"});
  if (!response.ok) return;
  const now = await response.json();
  document.getElementById("run-status").textContent = now.status;
  document.getElementById("run-step").textContent = now.current_step ? "at " + now.current_step : "";
  if (now.status !== state.dataset.status || (now.current_step || "") !== state.dataset.step) {
    window.location.reload();  // the steps timeline, the evals and the approvals moved on
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const runs = document.getElementById("runs");
  if (runs) setInterval(() => refreshRuns(runs).catch(() => {}), 2000);
  const curves = document.getElementById("curves");
  if (curves) streamCurves(curves);
  const state = document.getElementById("runstate");
  if (state) setInterval(() => followRun(state).catch(() => {}), 1500);
});
