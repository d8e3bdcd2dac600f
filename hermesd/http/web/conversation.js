// One session: its stored conversation, then its live events over the SSE stream (resumed with
// Last-Event-ID after a dropped connection or a daemon restart), the composer, the cards.

import { get, post, rpc } from "./api.js";
import { approvalCard, clarifyCard, resolveApproval, resolveClarify } from "./cards.js";
import { diffOf } from "./diff.js";
import { el, errorNote, markdown, number } from "./dom.js";

function parseArgs(text) {
  if (text && typeof text === "object") return text;
  try { return JSON.parse(text || "{}"); } catch { return null; }
}

function toolFold(id, name, argsText) {
  const args = parseArgs(argsText);
  const pretty = args ? JSON.stringify(args, null, 2) : String(argsText || "");
  return el("details", { class: "tool", "data-call": id || "" },
    el("summary", {}, el("span", { text: `Tool: ${name}` }), " ", el("span", { class: "tool-status", text: "running" })),
    diffOf(name, args),
    el("p", { class: "meta", text: "Arguments" }), el("pre", {}, el("code", { text: pretty })),
    el("div", { class: "result" }));
}

function fillResult(fold, status, text) {
  if (!fold) return;
  const badge = fold.querySelector(".tool-status");
  badge.textContent = status;
  badge.className = `tool-status status-${status}`;
  const box = fold.querySelector(".result");
  box.replaceChildren(el("p", { class: "meta", text: "Result" }), el("pre", {}, el("code", { text: text || "" })));
}

// A photo up to DIRECT_BYTES goes as it is (the door takes http.max_upload_mb); a larger one
// is scaled down here first, since the daemon keeps at most 4 MiB of images per message.
const DIRECT_BYTES = 3 * 1024 * 1024;
const MAX_SIDE = 2048;

function dataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

async function fitted(file) {
  if (file.size <= DIRECT_BYTES) return { url: await dataUrl(file) };
  const bitmap = await createImageBitmap(file);
  const longest = Math.max(bitmap.width, bitmap.height);
  let side = Math.min(MAX_SIDE, longest);
  for (;;) {
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round((bitmap.width * side) / longest));
    canvas.height = Math.max(1, Math.round((bitmap.height * side) / longest));
    canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", 0.85));
    if (blob.size <= DIRECT_BYTES || side <= 256) {
      const note = `scaled down to ${canvas.width}×${canvas.height} (${Math.round(blob.size / 1024)} KiB)`;
      return { url: await dataUrl(blob), note };
    }
    side = Math.round(side * 0.7);
  }
}

function images(list) {
  return (list || []).filter((i) => i.url).map((i) => el("img", { src: i.url, alt: `attached image (${i.mime})` }));
}

export class Conversation {
  constructor(session, onChange) {
    this.session = session;
    this.id = session.id;
    this.onChange = onChange;
    this.lastSeq = null;
    this.chain = Promise.resolve(); // events are handled one after the other, history first
    this.stream = null;
    this.live = null; // the assistant bubble being streamed
    this.pendingImages = [];
    this.messages = el("div", { class: "messages", id: "messages", role: "log", "aria-live": "polite", "aria-label": "Conversation" });
    this.state = el("p", { class: "meta", id: "stream-state", role: "status", text: "connecting…" });
    this.root = el("section", { class: "conversation", "aria-labelledby": "conv-title" },
      el("h2", { id: "conv-title", text: session.title || session.id }),
      el("p", { class: "meta", text: [session.model, `${number(session.message_count)} messages`,
        `${number(session.total_tokens)} tokens`, session.platform, session.parent_id && `sub-agent of ${session.parent_id}`]
        .filter(Boolean).join(" · ") }),
      this.state, this.messages, this.composer());
  }

  async loadHistory() {
    const { messages } = await get(`/v1/sessions/${this.id}/messages`);
    this.messages.replaceChildren();
    const folds = new Map();
    for (const m of messages) {
      if (m.undone || m.role === "system") continue;
      if (m.role === "tool") {
        fillResult(folds.get(m.tool_call_id), "ok", m.content);
        continue;
      }
      const node = this.bubble(m.role, m.content, m.images);
      for (const call of m.tool_calls || []) {
        const fn = call.function || call;
        const fold = toolFold(call.id, fn.name, fn.arguments);
        folds.set(call.id, fold);
        node.append(fold);
      }
    }
    this.scroll();
  }

  bubble(role, content, pictures) {
    const body = role === "assistant" ? markdown(content) : el("p", { class: "text", text: content || "" });
    const node = el("article", { class: `msg ${role}` }, el("div", { class: "role", text: role }), body, images(pictures));
    this.messages.append(node);
    return node;
  }

  note(text) {
    this.messages.append(el("p", { class: "msg note", text }));
    this.scroll();
  }

  scroll() { this.messages.scrollTop = this.messages.scrollHeight; }

  open() {
    let after = this.lastSeq === null ? "" : `?after_seq=${this.lastSeq}`;
    if (this.lastSeq === null && this.session.running) {
      // a turn is running: replay what the daemon kept, and show that turn's part of it
      after = "?after_seq=0";
      this.replayTurn = this.session.turn_id;
    }
    const stream = new EventSource(`/v1/sessions/${this.id}/events${after}`);
    this.stream = stream;
    const on = (type, fn) => stream.addEventListener(type, (e) => {
      const seq = e.lastEventId ? Number(e.lastEventId) : null;
      if (seq !== null) this.lastSeq = Math.max(this.lastSeq ?? 0, seq);
      const data = JSON.parse(e.data || "{}");
      this.chain = this.chain.then(() => {
        if (this.skipped(type, seq, data)) return undefined;
        return fn(data);
      }).catch((err) => this.messages.append(errorNote(err)));
    });
    on("attached", (a) => this.attached(a));
    on("replay.incomplete", () => this.loadHistory());
    on("turn.started", (e) => this.turnStarted(e));
    on("text.delta", (e) => this.delta(e.text));
    on("model.retry", (e) => { if (e.discard_partial && this.live) this.live.text.textContent = ""; });
    on("tool.started", (e) => this.toolStarted(e));
    on("tool.finished", (e) => fillResult(this.messages.querySelector(`[data-call="${CSS.escape(e.tool_call_id || "")}"]`), e.status, e.preview));
    on("message", (e) => this.message(e));
    on("turn.finished", (e) => this.finished(e));
    on("approval.request", (e) => { this.messages.append(approvalCard(this.id, e)); this.scroll(); });
    on("approval.resolved", (e) => resolveApproval(this.messages, e));
    on("clarify.request", (e) => { this.messages.append(clarifyCard(this.id, e)); this.scroll(); });
    on("clarify.resolved", (e) => resolveClarify(this.messages, e));
    on("subagent.progress", (e) => {
      this.messages.append(el("p", { class: "msg note" }, "sub-agent ",
        el("a", { href: `#/s/${e.child_session_id}`, text: e.child_session_id }), `: ${e.state} ${e.goal || ""}`));
      this.scroll();
    });
    on("budget.warning", (e) => this.note(e.message));
    on("context.warning", (e) => this.note(e.message));
    on("session.deleted", () => this.note("This session was deleted."));
    stream.onerror = () => {
      this.state.textContent = "reconnecting…";
      if (stream.readyState === EventSource.CLOSED && this.stream === stream) {
        setTimeout(() => { if (this.stream === stream) this.open(); }, 1500);
      }
    };
  }

  skipped(type, seq, data) {
    // replayed on opening (seq up to the attach): only the running turn's events, and not its
    // start (its message is in the history already)
    if (this.replayTurn === undefined || seq === null || seq > this.attachSeq) return false;
    return data.turn_id !== this.replayTurn || type === "turn.started";
  }

  async attached(info) {
    if (this.attachSeq === undefined) this.attachSeq = info.event_seq ?? 0;
    const first = this.lastSeq === null || !this.loaded;
    this.state.textContent = "live";
    this.state.dataset.connected = "yes";
    if (this.lastSeq === null) this.lastSeq = info.event_seq ?? 0;
    else if (!first) this.state.dataset.resumedFrom = String(this.lastSeq);
    if (first) {
      this.loaded = true;
      try { await this.loadHistory(); } catch (err) { this.messages.append(errorNote(err)); }
    }
    this.busy(Boolean(info.session && info.session.running));
  }

  close() {
    const stream = this.stream;
    this.stream = null;
    if (stream) stream.close();
  }

  turnStarted(e) {
    const shown = this.pendingImages.length ? this.pendingImages : [];
    this.pendingImages = [];
    const node = this.bubble("user", e.user_message, shown);
    if (!shown.length && (e.images || []).length) node.append(el("p", { class: "meta", text: `${e.images.length} image(s)` }));
    this.live = null;
    this.busy(true);
    this.scroll();
  }

  delta(text) {
    if (!this.live) {
      const textNode = el("div", { class: "text streaming" });
      const node = el("article", { class: "msg assistant", id: "streaming" }, el("div", { class: "role", text: "assistant" }), textNode);
      this.messages.append(node);
      this.live = { node, text: textNode };
    }
    this.live.text.append(text || "");
    this.scroll();
  }

  toolStarted(e) {
    const host = this.live ? this.live.node : this.bubble("assistant", "");
    this.live = null;
    host.removeAttribute("id");
    host.append(toolFold(e.tool_call_id, e.name, e.arguments));
    this.scroll();
  }

  message(e) {
    if (e.role !== "assistant") return;
    if (this.live) {
      this.live.text.replaceWith(markdown(e.content));
      this.live.node.removeAttribute("id");
      this.live = null;
    } else {
      this.bubble("assistant", e.content);
    }
    this.scroll();
  }

  finished(e) {
    if (this.live) { this.live.node.removeAttribute("id"); this.live = null; }
    if (e.status !== "completed") this.note(`Turn ${e.status}${e.error ? `: ${e.error}` : ""}`);
    this.busy(false);
    this.onChange();
  }

  busy(running) {
    this.root.querySelector("#cancel").disabled = !running;
    this.root.querySelector("#send").disabled = running;
  }

  composer() {
    const text = el("textarea", { id: "message", name: "message", rows: 3, placeholder: "Message, or / for commands" });
    const suggest = el("ul", { class: "suggest", id: "suggest", "aria-label": "Commands", hidden: true });
    const file = el("input", { type: "file", id: "image", accept: "image/png,image/jpeg,image/gif,image/webp" });
    const preview = el("div", { id: "image-preview" });
    file.addEventListener("change", () => this.pickImage(file, preview));
    text.addEventListener("input", () => this.suggest(text, suggest));
    text.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(text, file, preview); }
    });
    const form = el("form", { class: "composer", "aria-label": "Send a message" },
      el("div", {}, el("label", { for: "message", text: "Message (Ctrl+Enter sends)" }), text, suggest,
        el("label", { for: "image", text: "Attach an image " }), file, preview),
      el("div", { class: "actions" },
        el("button", { type: "submit", class: "primary", id: "send", text: "Send" }),
        el("button", { type: "button", id: "cancel", text: "Cancel turn", disabled: true,
          onclick: () => post(`/v1/sessions/${this.id}/cancel`).catch((err) => this.messages.append(errorNote(err))) })));
    form.addEventListener("submit", (e) => { e.preventDefault(); this.send(text, file, preview); });
    return form;
  }

  pickImage(file, preview) {
    preview.replaceChildren();
    this.chosen = [];
    this.choosing = Promise.all([...file.files].map(async (f) => {
      try {
        const { url, note } = await fitted(f);
        this.chosen.push(url);
        preview.append(el("img", { src: url, alt: `to send: ${f.name}`, class: "thumb" }));
        if (note) preview.append(el("span", { class: "meta scaled", text: `${f.name}: ${note}` }));
      } catch (err) {
        preview.append(errorNote(err));
      }
    }));
  }

  async suggest(text, list) {
    const value = text.value;
    if (!value.startsWith("/") || value.includes(" ")) { list.hidden = true; return; }
    if (!this.commands) this.commands = (await rpc("commands.list")).commands || [];
    const found = this.commands.filter((c) => `/${c.name}`.startsWith(value)).slice(0, 8);
    list.replaceChildren(...found.map((c) => el("li", {}, el("button", {
      type: "button", text: `/${c.name} ${c.args_hint || ""} — ${c.description || ""}`,
      onclick: () => { text.value = `/${c.name} `; list.hidden = true; text.focus(); },
    }))));
    list.hidden = found.length === 0;
  }

  async send(text, file, preview) {
    const message = text.value;
    await this.choosing; // images still being read or scaled
    const pictures = this.chosen || [];
    if (!message.trim() && !pictures.length) return;
    try {
      if (message.startsWith("/") && !pictures.length && (await this.isCommand(message))) {
        const out = await rpc("command.run", { line: message, session_id: this.id });
        this.note(`${message.trim()}: ${out.output || (out.ok ? "done" : "failed")}`);
        if (out.action === "session" && out.session && out.session.id !== this.id) location.hash = `#/s/${out.session.id}`;
      } else {
        this.pendingImages = pictures.map((url) => ({ url, mime: url.slice(5, url.indexOf(";")) }));
        await post(`/v1/sessions/${this.id}/messages`, { message, images: pictures });
      }
      text.value = "";
      file.value = "";
      this.chosen = [];
      preview.replaceChildren();
    } catch (err) {
      this.pendingImages = [];
      this.messages.append(errorNote(err));
    }
  }

  async isCommand(line) {
    if (!this.commands) this.commands = (await rpc("commands.list")).commands || [];
    const name = line.slice(1).split(/\s/)[0];
    return this.commands.some((c) => c.name === name || (c.aliases || []).includes(name));
  }
}
