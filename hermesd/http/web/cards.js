// Approval and clarify cards: the same choices as hermesctl's prompts, closed when answered
// here or anywhere else (approval.resolved / clarify.resolved on the session's stream).

import { post } from "./api.js";
import { el, errorNote } from "./dom.js";

const LABELS = { once: "Allow once", session: "Allow for this session", always: "Always allow", deny: "Deny" };

function close(card, text) {
  if (card.classList.contains("closed")) return;
  card.classList.add("closed");
  card.querySelectorAll("button, input").forEach((b) => { b.disabled = true; });
  card.append(el("p", { class: "outcome", role: "status", text }));
}

export function approvalCard(sessionId, request) {
  const title = `approval-title-${request.id}`;
  const choices = request.choices || ["once", "session", "always", "deny"];
  const card = el("section", { class: "card approval", id: `approval-${request.id}`, "aria-labelledby": title },
    el("h3", { id: title, text: `Approve ${request.tool || "a tool"}: ${request.description || request.pattern_key || ""}` }),
    el("pre", {}, el("code", { text: request.command || "" })),
    (request.warnings || []).map((w) => el("p", { class: "error", text: w.message || String(w) })));
  const buttons = choices.map((choice) => el("button", {
    type: "button", class: choice === "deny" ? "" : "primary", "data-choice": choice, text: LABELS[choice] || choice,
    onclick: async () => {
      card.dataset.answering = choice; // our own answer comes back as approval.resolved too
      try {
        await post(`/v1/sessions/${sessionId}/approvals/${request.id}`, { choice });
        close(card, `Answered here: ${choice}`);
      } catch (err) {
        delete card.dataset.answering;
        card.append(errorNote(err));
      }
    },
  }));
  card.append(el("div", { class: "choices" }, buttons));
  return card;
}

export function resolveApproval(root, resolved) {
  const card = root.querySelector(`#approval-${CSS.escape(resolved.id)}`);
  if (!card) return;
  const mine = card.dataset.answering === resolved.choice;
  close(card, mine ? `Answered here: ${resolved.choice}` : `Answered elsewhere: ${resolved.choice}`);
}

export function clarifyCard(sessionId, question) {
  const title = `clarify-title-${question.id}`;
  const card = el("section", { class: "card clarify", id: `clarify-${question.id}`, "aria-labelledby": title },
    el("h3", { id: title, text: `The model asks: ${question.question}` }));
  const send = async (body, shown) => {
    card.dataset.answering = shown;
    try {
      await post(`/v1/sessions/${sessionId}/clarify/${question.id}`, body);
      close(card, `Answered here: ${shown}`);
    } catch (err) {
      delete card.dataset.answering;
      card.append(errorNote(err));
    }
  };
  const choices = (question.choices || []).map((text, i) =>
    el("button", { type: "button", class: "primary", text, onclick: () => send({ choice: i + 1 }, text) }));
  const input = el("input", { type: "text", id: `clarify-input-${question.id}`, "aria-label": "Your own answer" });
  const own = el("button", { type: "button", text: "Answer", onclick: () => input.value.trim() && send({ response: input.value }, input.value) });
  card.append(el("div", { class: "choices" }, choices, input, own));
  return card;
}

export function resolveClarify(root, resolved) {
  const card = root.querySelector(`#clarify-${CSS.escape(resolved.id)}`);
  if (!card) return;
  const mine = card.dataset.answering !== undefined && resolved.how === "answered";
  const other = resolved.how === "answered" ? "Answered elsewhere" : `Closed: ${resolved.how}`;
  close(card, mine ? `Answered here: ${card.dataset.answering}` : other);
}
