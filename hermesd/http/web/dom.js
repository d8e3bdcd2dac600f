// A small element builder and the sanitised markdown of the page.

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function markdown(text) {
  const box = el("div", { class: "md" });
  const html = window.marked.parse(String(text || ""), { gfm: true, breaks: false });
  box.append(window.DOMPurify.sanitize(html, { RETURN_DOM_FRAGMENT: true }));
  return box;
}

export function when(seconds) {
  if (!seconds) return "";
  const date = typeof seconds === "number" ? new Date(seconds * 1000) : new Date(seconds);
  return Number.isNaN(date.getTime()) ? String(seconds) : date.toLocaleString();
}

export function number(n) {
  return (n || 0).toLocaleString();
}

export function errorNote(err) {
  return el("p", { class: "error", role: "alert", text: err.message || String(err) });
}
