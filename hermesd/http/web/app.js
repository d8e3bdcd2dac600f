// The page's views, chosen by the address's #fragment: #/ and #/s/ID (sessions), #/usage, #/status.

import { get, logout } from "./api.js";
import { Conversation } from "./conversation.js";
import { el, errorNote } from "./dom.js";
import { SessionList } from "./sessions.js";
import { statusView } from "./status.js";
import { usageView } from "./usage.js";

const view = document.getElementById("view");
let conversation = null;
let list = null;

function leave() {
  if (conversation) conversation.close();
  conversation = null;
  if (list) list.stop();
  list = null;
}

async function sessions(id) {
  const shown = new SessionList(id);
  list = shown;
  const right = el("div", { class: "pane" });
  view.replaceChildren(el("div", { class: "split" }, shown.root, right));
  shown.follow(); // reads the list once its stream is open
  await shown.refresh();
  if (!id) {
    right.append(el("p", { class: "meta", text: "Choose a session, or start a new one." }));
    return;
  }
  try {
    const session = await get(`/v1/sessions/${id}`);
    conversation = new Conversation(session, () => shown.refresh());
    right.append(conversation.root);
    conversation.open();
  } catch (err) {
    right.append(errorNote(err));
  }
}

async function route() {
  leave();
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("header nav a")) a.removeAttribute("aria-current");
  const mark = (id) => document.getElementById(id).setAttribute("aria-current", "page");
  if (hash.startsWith("#/usage")) {
    mark("nav-usage");
    await usageView(view);
  } else if (hash.startsWith("#/status")) {
    mark("nav-status");
    await statusView(view);
  } else {
    mark("nav-sessions");
    await sessions(hash.startsWith("#/s/") ? decodeURIComponent(hash.slice(4)) : null);
  }
}

document.getElementById("logout").addEventListener("click", logout);
window.addEventListener("hashchange", route);
get("/v1/web/me").then((me) => {
  document.getElementById("who").textContent = `${me.name} (${me.trust})`;
}).catch(() => {});
route();
