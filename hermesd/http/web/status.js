// Status: the daemon, sandbox, plugins, MCP servers, cron jobs (run now), the recent log.

import { rpc } from "./api.js";
import { el, errorNote, when } from "./dom.js";

function table(id, caption, heads, rows) {
  return el("table", { id }, el("caption", { text: caption }),
    el("thead", {}, el("tr", {}, heads.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: heads.length, text: "none" }))));
}

async function section(view, title, build) {
  const box = el("section", { "aria-label": title }, el("h3", { text: title }));
  view.append(box);
  try {
    box.append(await build());
  } catch (err) {
    box.append(errorNote(err.status === 403 ? new Error("The daemon's owner only.") : err));
  }
}

function daemon(s) {
  const sandbox = s.sandbox || {};
  return el("dl", {},
    el("dt", { text: "Version" }), el("dd", { text: `${s.version} (pid ${s.pid}, up ${Math.round(s.uptime_s)} s)` }),
    el("dt", { text: "Model" }), el("dd", { text: s.model || "none configured" }),
    el("dt", { text: "Sandbox" }), el("dd", { id: "sandbox-mode", text: `${sandbox.mode || "?"} (${sandbox.mechanism || ""}${sandbox.reason ? `: ${sandbox.reason}` : ""})` }),
    el("dt", { text: "Sessions / turns running" }), el("dd", { text: `${s.sessions} / ${s.turns_running ?? 0}` }),
    el("dt", { text: "MCP servers ready" }), el("dd", { text: `${s.mcp_ready ?? 0} of ${s.mcp_servers ?? 0} (${s.mcp_failed ?? 0} failed)` }));
}

function plugins(list) {
  return table("plugins", "Plugins", ["Plugin", "State", "Registered", "Reason"], list.plugins.map((p) => el("tr", {},
    el("td", { text: `${p.name} ${p.version || ""}` }),
    el("td", { class: p.state === "loaded" ? "ok" : p.state === "error" ? "bad" : "", text: p.state }),
    el("td", { text: [["tools", p.tools], ["hooks", p.hooks], ["commands", p.commands]]
      .filter(([, v]) => (v || []).length).map(([k, v]) => `${k}: ${v.join(", ")}`).join("; ") || "—" }),
    el("td", { text: p.reason || "" }))));
}

function mcp(list) {
  const servers = list.servers || [];
  return table("mcp", "MCP servers", ["Server", "State", "Tools", "Error"], servers.map((m) => el("tr", {},
    el("td", { text: m.name }), el("td", { text: m.state || m.status || "" }),
    el("td", { text: String(Array.isArray(m.tools) ? m.tools.length : (m.tools ?? 0)) }), el("td", { text: m.error || "" }))));
}

function cron(list, reload) {
  return table("cron", "Cron jobs", ["Job", "Schedule", "Next run", "Last result", ""], list.jobs.map((j) => el("tr", {},
    el("td", { text: j.name }), el("td", { text: j.schedule_display || "" }), el("td", { text: when(j.next_run_at) || "—" }),
    el("td", { class: j.last_status === "ok" ? "ok" : j.last_status ? "bad" : "", text: j.last_status ? `${j.last_status} ${j.last_error || ""} (${when(j.last_run_at)})` : "never run" }),
    el("td", {}, el("button", { type: "button", text: `Run ${j.name} now`, onclick: async (e) => {
      e.target.disabled = true;
      await rpc("cron.run", { job_id: j.id }).catch(() => {});
      setTimeout(reload, 1000);
    } })))));
}

function gateway(g) {
  const state = (p) => (p.state === "connected" ? "ok" : p.state && p.state !== "not configured" ? "bad" : "");
  const waiting = (g.pairing_pending || []).map((r) => el("tr", {},
    el("td", { text: r.platform }), el("td", { text: r.user_name ? `${r.user_name} (${r.user_id})` : String(r.user_id) })));
  return el("div", {}, table("gateway", "Chat platforms (gateway)", ["Platform", "State", "Paired users"],
    (g.platforms || []).map((p) => el("tr", {}, el("td", { text: p.name }), el("td", { class: state(p), text: p.state || "" }),
      el("td", { text: String(((g.paired || {})[p.name] || []).length) })))),
  table("pairing", "Waiting to be paired (hermesctl gateway pair CODE)", ["Platform", "User"], waiting),
  el("p", { class: "meta", text: `${g.chats ?? 0} chat(s) with sessions` }));
}

async function gatewaySection(view) {
  // gateway.status comes with the chat gateway; a daemon without it says so
  await section(view, "Chat gateway", async () => {
    try {
      return gateway(await rpc("gateway.status"));
    } catch (err) {
      if (err.status === 403) throw err;
      return el("p", { class: "meta", text: `No chat gateway in this daemon (${err.message}).` });
    }
  });
}

export async function statusView(view) {
  view.replaceChildren(el("h2", { text: "Status" }));
  const reload = () => statusView(view);
  await section(view, "Daemon", async () => daemon(await rpc("status")));
  await section(view, "Plugins", async () => plugins(await rpc("plugins.list")));
  await section(view, "MCP servers", async () => mcp(await rpc("mcp.list")));
  await section(view, "Cron", async () => cron(await rpc("cron.list"), reload));
  await gatewaySection(view);
  await section(view, "Recent log (redacted)", async () => {
    const { records } = await rpc("logs.tail", { lines: 60 });
    return el("pre", { class: "log", id: "log", tabindex: "0" }, records.map((r) =>
      `${new Date(r.time * 1000).toLocaleTimeString()} ${r.level} ${r.logger}: ${r.message}\n`).join(""));
  });
}
