// patch / write_file calls shown as diffs.

import { el } from "./dom.js";

function lines(kind, text, prefix) {
  return String(text || "").split("\n").map((line) => el("span", { class: kind, text: prefix + line }));
}

function patchText(text) {
  return String(text || "").split("\n").map((line) => {
    let kind = "";
    if (line.startsWith("+") && !line.startsWith("+++")) kind = "add";
    else if (line.startsWith("-") && !line.startsWith("---")) kind = "del";
    else if (line.startsWith("@@") || line.startsWith("***")) kind = "hunk";
    return el("span", { class: kind, text: line });
  });
}

// A diff element for a tool call's arguments, or null when the call changes no file.
export function diffOf(name, args) {
  if (!args || typeof args !== "object") return null;
  let body = null;
  if (name === "write_file" && typeof args.content === "string") {
    body = lines("add", args.content, "+");
  } else if (name === "patch" && (args.mode || "replace") === "replace" && "old_string" in args) {
    body = [...lines("del", args.old_string, "-"), ...lines("add", args.new_string, "+")];
  } else if (name === "patch" && typeof args.patch === "string") {
    body = patchText(args.patch);
  }
  if (!body) return null;
  const head = args.path ? [el("span", { class: "hunk", text: `--- ${args.path}` })] : [];
  return el("div", { class: "diff", role: "figure", "aria-label": `changes to ${args.path || "files"}` }, head, body);
}
