// The sessions list: search, titles, sizes, sub-agents under their parent, live turns marked.
// It follows the daemon's list changes (sessions created, renamed, deleted, turns started and
// finished) over /v1/web/sessions/events, and reads the list again after each; a slow poll
// stays as a fallback for a stream that is down.

const CHANGES = ["session.created", "session.renamed", "session.deleted", "turn.started", "turn.finished", "resync"];
const FALLBACK_POLL_MS = 60000;

import { get, post, rpc } from "./api.js";
import { el, errorNote, number } from "./dom.js";

function row(session, children, current) {
  const label = session.title || session.id.slice(0, 12);
  const link = el("a", { href: `#/s/${session.id}`, "aria-current": session.id === current ? "true" : null, "data-session": session.id },
    el("span", { class: "title", text: label }),
    el("span", { class: "meta", text: `${number(session.message_count)} msgs · ${number(session.total_tokens)} tokens` }),
    session.running ? el("span", { class: "badge live", text: "live" }) : null);
  const kids = children.get(session.id) || [];
  return el("li", {}, link, kids.length ? el("ul", { "aria-label": `sub-agents of ${label}` }, kids.map((k) => row(k, children, current))) : null);
}

export class SessionList {
  constructor(current) {
    this.current = current;
    this.sessions = [];
    this.matches = null;
    this.search = el("input", { type: "search", id: "search", placeholder: "title, id or words in messages" });
    this.search.addEventListener("input", () => this.find());
    this.tree = el("div", { id: "session-tree" });
    this.root = el("section", { class: "list", "aria-labelledby": "sessions-title" },
      el("h2", { id: "sessions-title", text: "Sessions" }),
      el("label", { for: "search", text: "Search sessions" }), this.search,
      el("button", { type: "button", id: "new-session", text: "New session", onclick: () => this.create() }),
      this.tree);
  }

  follow() {
    this.stop();
    const stream = new EventSource("/v1/web/sessions/events");
    this.stream = stream;
    stream.addEventListener("ready", () => { this.tree.dataset.following = "yes"; this.refresh(); });
    for (const kind of CHANGES) stream.addEventListener(kind, () => this.soon());
    stream.onerror = () => {
      this.tree.dataset.following = "no";
      if (stream.readyState === EventSource.CLOSED && this.stream === stream) {
        setTimeout(() => { if (this.stream === stream) this.follow(); }, 3000);
      }
    };
    this.poll = setInterval(() => this.refresh(), FALLBACK_POLL_MS);
  }

  stop() {
    if (this.stream) this.stream.close();
    this.stream = null;
    clearInterval(this.poll);
  }

  soon() {
    // a burst of changes (a turn that starts and ends at once) is read once
    if (this.pending) return;
    this.pending = setTimeout(() => { this.pending = null; this.refresh(); }, 100);
  }

  async refresh() {
    try {
      this.sessions = (await get("/v1/sessions?limit=500")).sessions || [];
      this.draw();
    } catch (err) {
      this.tree.replaceChildren(errorNote(err));
    }
  }

  async find() {
    const query = this.search.value.trim();
    this.matches = null;
    if (query.length >= 3) {
      try {
        const hits = (await rpc("session.search", { query, limit: 100 })).hits || [];
        this.matches = new Set(hits.map((h) => h.session_id));
      } catch { this.matches = null; }
    }
    this.draw();
  }

  draw() {
    const query = this.search.value.trim().toLowerCase();
    const shown = this.sessions.filter((s) => !query || (s.title || "").toLowerCase().includes(query) ||
      s.id.startsWith(query) || (this.matches && this.matches.has(s.id)));
    const ids = new Set(shown.map((s) => s.id));
    const children = new Map();
    const tops = [];
    for (const s of shown) {
      if (s.parent_id && ids.has(s.parent_id)) {
        if (!children.has(s.parent_id)) children.set(s.parent_id, []);
        children.get(s.parent_id).push(s);
      } else tops.push(s);
    }
    this.tree.replaceChildren(tops.length ? el("ul", { "aria-label": "sessions" }, tops.map((s) => row(s, children, this.current)))
      : el("p", { class: "meta", text: "No sessions." }));
  }

  async create() {
    try {
      const made = await post("/v1/sessions", { platform: "web" });
      location.hash = `#/s/${made.id}`;
    } catch (err) {
      this.tree.prepend(errorNote(err));
    }
  }
}
