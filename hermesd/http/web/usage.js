// Usage: tokens and cost per day and model (uPlot, served from this package), budgets.

import { get } from "./api.js";
import { el, errorNote, number } from "./dom.js";

const COLOURS = ["#0b5cad", "#0a6b2d", "#8a4b00", "#6a1b9a", "#a1161b", "#00695c", "#4a5260"];

function chart(target, title, xs, series, yLabel) {
  const opts = {
    title, width: Math.min(900, target.clientWidth || 900), height: 260,
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLOURS[i % COLOURS.length],
      fill: `${COLOURS[i % COLOURS.length]}33`, paths: window.uPlot.paths.bars({ size: [0.6, 40] }) }))],
    axes: [{}, { label: yLabel }],
    scales: { x: { time: true, range: (u, min, max) => [min - 43200, max + 43200] } },
  };
  const box = el("div", { class: "chart", role: "img", "aria-label": `${title}: see the table below` });
  target.append(box);
  new window.uPlot(opts, [xs, ...series.map((s) => s.values)], box);
}

function budgetRow(label, used, limit) {
  if (!limit) return el("p", {}, `${label}: no budget set (used ${used == null ? "—" : `$${used.toFixed(4)}`})`);
  const id = `budget-${label.replace(/\W+/g, "-")}`;
  return el("p", {}, el("label", { for: id, text: `${label}: $${(used || 0).toFixed(4)} of $${limit} ` }),
    el("meter", { id, min: 0, max: limit, low: limit * 0.7, high: limit * 0.9, value: Math.min(used || 0, limit) }),
    ` ${Math.round(((used || 0) / limit) * 100)}%`);
}

export async function usageView(view) {
  view.replaceChildren(el("h2", { text: "Usage" }));
  let data;
  try {
    data = await get("/v1/web/usage?days=30");
  } catch (err) {
    view.append(errorNote(err));
    return;
  }
  const xs = data.days.map((d) => new Date(`${d.day}T00:00:00`).getTime() / 1000);
  const models = [...new Set(data.days.flatMap((d) => d.by_model.map((m) => m.model)))];
  const per = (model, key) => data.days.map((d) => (d.by_model.find((m) => m.model === model) || {})[key] || 0);
  view.append(el("h3", { text: "Budgets" }),
    budgetRow("Today", data.today.cost_usd, data.budget.daily_usd),
    budgetRow("This month", data.month.cost_usd, data.budget.monthly_usd),
    el("p", { class: "meta", text: `Per-session token budget: ${data.budget.session_tokens || "none"}; over budget: ${data.budget.action || "warn"}` }));
  const area = el("div", { id: "usage-charts" });
  view.append(el("h3", { text: "Last 30 days" }), area);
  if (!models.length) area.append(el("p", { class: "meta", text: "No model requests in the last 30 days." }));
  chart(area, "Tokens per day", xs, models.map((m) => ({ label: m, values: per(m, "total_tokens") })), "tokens");
  chart(area, "Cost per day (USD)", xs, models.map((m) => ({ label: m, values: per(m, "cost_usd") })), "USD");
  const rows = data.days.flatMap((d) => d.by_model.map((m) => el("tr", {},
    el("td", { text: d.day }), el("td", { text: m.model }), el("td", { text: number(m.requests) }),
    el("td", { text: number(m.total_tokens) }), el("td", { text: m.cost_usd == null ? "unpriced" : `$${m.cost_usd.toFixed(4)}` }))));
  view.append(el("table", { id: "usage-table" }, el("caption", { text: "Per day and model (last 30 days)" }),
      el("thead", {}, el("tr", {}, ["Day", "Model", "Requests", "Tokens", "Cost"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows)));
}
