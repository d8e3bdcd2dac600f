"""How ``hermesctl chat`` shows a turn: streamed text, one line per tool call, retries, errors.

Owns presentation only: ``TurnPrinter`` turns ``session.event`` maps (docs/sessions.md,
"Events") into terminal output, and the banner and history renderers format daemon answers.
Colour and the spinner appear only when the output is a terminal. It never talks to the daemon
and imports nothing heavy (hermesctl's start-up stays light).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, TextIO

from hermesctl.subcommands.base import sandbox_text

if TYPE_CHECKING:
    from hermesctl.markdown_render import MarkdownStream

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ARGS_CHARS = 60


class Style:
    """ANSI styles, or nothing when colour is off."""

    def __init__(self, enabled: bool) -> None:
        # https://no-color.org: a non-empty NO_COLOR turns colour off everywhere
        self.enabled = enabled and not os.environ.get("NO_COLOR")

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)


def format_duration(ms: float) -> str:
    """``0.7 ms``, ``3 ms``, ``1.2 s``."""
    if ms >= 1000:
        return f"{ms / 1000:.1f} s"
    if ms < 1:
        return f"{ms:.1f} ms"
    return f"{ms:.0f} ms"


def format_call(name: str, arguments: str) -> str:
    """``calculate(expression='2**16')``: the model's JSON arguments, shortened."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        inner = arguments
    else:
        if isinstance(parsed, dict):
            inner = ", ".join(f"{k}={v!r}" for k, v in parsed.items())
        else:
            inner = json.dumps(parsed, ensure_ascii=False)
    if len(inner) > ARGS_CHARS:
        inner = inner[: ARGS_CHARS - 1] + "…"
    return f"{name}({inner})"


class TurnPrinter:
    """Prints the events of turns as they arrive.

    ``out`` receives the answer; ``info`` receives tool lines, retries and notices (the same
    stream in the REPL; stderr in one-shot mode, so ``chat -m … > file`` keeps only the answer).
    """

    def __init__(
        self, out: TextIO, info: TextIO, err: TextIO, *, tty: bool, markdown: bool = False
    ) -> None:
        self.out, self.info, self.err = out, info, err
        self.tty = tty
        self.style = Style(tty)
        self.markdown: MarkdownStream | None = None
        if markdown and self.style.enabled:
            from hermesctl.markdown_render import MarkdownStream

            self.markdown = MarkdownStream(out)
        self._at_line_start = True
        self._round_text = ""  # text streamed since the last tool call
        self._tools: dict[str, tuple[str, str]] = {}
        self._spin = 0
        self._spinning = False
        self._pending_tool: str | None = None  # a tool line written without its end (TTY)
        self._waiting_since = time.monotonic()  # the spinner's elapsed time counts from here

    # --- low level ---------------------------------------------------------------------------

    def _clear_status(self) -> None:
        if self._spinning:
            self.info.write("\r\x1b[K")
            self.info.flush()
            self._spinning = False

    def _end_text(self) -> None:
        """Render the markdown block still collected (something else is about to be shown)."""
        if self.markdown is not None and self.markdown.holding:
            self._clear_status()
            self.markdown.flush()
            self._at_line_start = True

    def _newline_if_needed(self) -> None:
        self._end_text()
        if not self._at_line_start:
            self.out.write("\n")
            self.out.flush()
            self._at_line_start = True

    def line(self, text: str, stream: TextIO | None = None) -> None:
        """A whole line of information, after any partial output."""
        self._clear_status()
        self._end_pending_tool()
        self._newline_if_needed()
        target = stream or self.info
        target.write(text + "\n")
        target.flush()

    def _end_pending_tool(self) -> None:
        if self._pending_tool is not None:
            self.info.write("\n")
            self._pending_tool = None

    def tick(self) -> None:
        """Advance the spinner and its elapsed seconds (TTY only): on a line of its own while
        the model is awaited, at the end of the tool line while a tool runs."""
        if not self.tty:
            return
        self._spin = (self._spin + 1) % len(SPINNER)
        waited = f"{SPINNER[self._spin]} {time.monotonic() - self._waiting_since:.0f}s"
        if self._pending_tool is not None:
            label, _ = self._tools.get(self._pending_tool, ("", ""))
            self.info.write(f"\r\x1b[K{self.style.cyan('⚙ ')}{label} {self.style.dim(waited)}")
            self.info.flush()
            return
        if not self._at_line_start:
            return
        self.info.write(f"\r\x1b[K{self.style.dim(waited.replace(' ', ' thinking… ', 1))}")
        self.info.flush()
        self._spinning = True

    def finish(self) -> None:
        """Leave the cursor at the start of a clean line."""
        self._clear_status()
        self._end_pending_tool()
        self._newline_if_needed()

    # --- events ------------------------------------------------------------------------------

    def event(self, ev: dict[str, Any]) -> None:
        """Show one ``session.event``."""
        kind = ev.get("type")
        handler = getattr(self, "_on_" + str(kind).replace(".", "_"), None)
        if handler is not None:
            handler(ev)

    def _on_turn_started(self, ev: dict[str, Any]) -> None:
        self._waiting_since = time.monotonic()
        self._round_text = ""
        self._at_line_start = True
        if self.markdown is not None:
            self.markdown.new_answer()

    def _on_text_delta(self, ev: dict[str, Any]) -> None:
        text = str(ev.get("text") or "")
        if not text:
            return
        self._clear_status()
        self._end_pending_tool()
        self._round_text += text
        self._waiting_since = time.monotonic()
        if self.markdown is not None:
            self.markdown.feed(text)  # previewed, then rendered when its block closes
            self._at_line_start = not self.markdown.previewing
            return
        self.out.write(text)
        self.out.flush()
        self._at_line_start = text.endswith("\n")

    def _on_model_retry(self, ev: dict[str, Any]) -> None:
        note = (
            f"↻ model request failed ({ev.get('error')}); retrying in "
            f"{float(ev.get('delay') or 0):.1f} s (attempt {ev.get('attempt')}/"
            f"{ev.get('max_attempts')})"
        )
        if ev.get("discard_partial") and self._round_text:
            note += "; the partial answer above is discarded"
            self._round_text = ""
            if self.markdown is not None:
                self.markdown.reset()
        self.line(self.style.yellow(note))

    def _on_model_fallback(self, ev: dict[str, Any]) -> None:
        self.line(
            self.style.yellow(
                f"↪ {ev.get('from_model')} failed ({ev.get('error')}); this turn goes on with "
                f"{ev.get('model')}"
            )
        )

    def _on_tool_started(self, ev: dict[str, Any]) -> None:
        label = format_call(str(ev.get("name")), str(ev.get("arguments") or ""))
        self._tools[str(ev.get("tool_call_id"))] = (label, str(ev.get("name")))
        self._round_text = ""
        self._waiting_since = time.monotonic()
        if self.tty:
            self._clear_status()
            self._end_pending_tool()
            self._newline_if_needed()
            self.info.write(self.style.cyan("⚙ ") + label + self.style.dim(" …"))
            self.info.flush()
            self._pending_tool = str(ev.get("tool_call_id"))

    def _on_tool_finished(self, ev: dict[str, Any]) -> None:
        call_id = str(ev.get("tool_call_id"))
        label, _ = self._tools.pop(call_id, (str(ev.get("name")), ""))
        self._waiting_since = time.monotonic()
        ok = ev.get("status") == "ok"
        mark = self.style.green("✓") if ok else self.style.red("✗")
        took = format_duration(float(ev.get("duration_ms") or 0))
        text = f"{self.style.cyan('⚙')} {label} {mark} {took}"
        if not ok:
            text += self.style.dim("  " + _error_of(str(ev.get("preview") or "")))
        if self.tty and self._pending_tool == call_id:
            self.info.write("\r\x1b[K" + text + "\n")
            self.info.flush()
            self._pending_tool = None
        else:
            self.line(text)

    def _on_subagent_progress(self, ev: dict[str, Any]) -> None:
        # a delegated child's progress (delegate_task); the goal is the model's: printable only
        goal = "".join(c for c in str(ev.get("goal") or "")[:60] if c.isprintable())
        who = f"↳ [{ev.get('task_index')}] {ev.get('child_session_id')}"
        state = ev.get("state")
        if state == "tool":
            text = f"{who} ⚙ {ev.get('tool')}"
        elif state == "started":
            text = f"{who} started: {goal}"
        elif state == "done":
            text = f"{who} {self.style.green('done')}"
        else:
            text = f"{who} {self.style.red(str(ev.get('status') or 'failed'))}"
        self.line(self.style.dim(text))

    def _on_todo_updated(self, ev: dict[str, Any]) -> None:
        # the model's plan (the todo tool); its text is the model's: no control characters
        marks = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[~]"}
        lines = [self.style.cyan("📋 plan")]
        for item in ev.get("todos") or []:
            text = "".join(c for c in str(item.get("content")) if c.isprintable())
            lines.append(f"  {marks.get(str(item.get('status')), '[?]')} {text}")
        self.line("\n".join(lines))

    def _on_skill_changed(self, ev: dict[str, Any]) -> None:
        # the agent changed one of its skills (skill_manage); names are the model's: printable
        text = "".join(c for c in str(ev.get("message") or "") if c.isprintable())
        self.line(self.style.cyan("📝 skill: ") + text)

    def _on_message(self, ev: dict[str, Any]) -> None:
        content = str(ev.get("content") or "")
        if ev.get("injected"):
            self.line(self.style.dim(f"[{ev.get('role')} message injected by a plugin] {content}"))
            return
        if content and content.strip() != self._round_text.strip():
            # Not streamed as is (a transform_llm_output hook changed it): show the final text.
            self._clear_status()
            self._newline_if_needed()
            if self.markdown is not None:
                self.markdown.feed(content)
            else:
                self.out.write(content)
                self._at_line_start = content.endswith("\n")
        self.finish()

    def _on_turn_finished(self, ev: dict[str, Any]) -> None:
        self.finish()
        if ev.get("status") == "failed":
            self.line(self.style.red(f"✗ turn failed: {ev.get('error')}"), self.err)
        elif ev.get("status") == "cancelled":
            self.line(self.style.yellow("⊘ turn cancelled"), self.err)

    def _on_memory_staged(self, ev: dict[str, Any]) -> None:
        self.line(
            self.style.yellow(
                f"🧠 memory write waits for approval: {ev.get('summary', '')} "
                f"(/memory approve {ev.get('pending_id', '')})"
            )
        )

    def _on_memory_written(self, ev: dict[str, Any]) -> None:
        name = "USER.md" if ev.get("target") == "user" else "MEMORY.md"
        self.line(self.style.dim(f"🧠 {name} updated ({ev.get('usage') or ''})"))

    def _on_budget_warning(self, ev: dict[str, Any]) -> None:
        self.line(self.style.yellow(f"⚠ {ev.get('message') or 'a budget was crossed'}"), self.err)

    def _on_context_warning(self, ev: dict[str, Any]) -> None:
        self.line(self.style.yellow(f"⚠ {ev.get('message') or 'context warning'}"), self.err)

    def _on_session_deleted(self, ev: dict[str, Any]) -> None:
        self.line(self.style.yellow(f"session {ev.get('session_id')} was deleted"), self.err)

    def approval_resolved(self, params: dict[str, Any]) -> None:
        """Show an ``approval.resolved`` notification: what was decided, and by whom."""
        from hermesctl.approval_prompt import decided_elsewhere

        self.line(self.style.dim(f"approval {params.get('id', '')}: {decided_elsewhere(params)}"))


def status_line(
    model: str | None,
    context: dict[str, Any] | None,
    cost: float | None,
    took_s: float | None,
    pending: int,
) -> str:
    """The REPL's footer: model · context used/window · session cost · last turn · approvals."""
    parts = [model or "no model"]
    if context and context.get("context_length"):
        used, window = int(context.get("last_prompt_tokens") or 0), int(context["context_length"])
        parts.append(f"context {_tokens(used)}/{_tokens(window)} ({used / window:.0%})")
    if cost is not None:
        parts.append(f"${cost:.4f} this session" if cost < 1 else f"${cost:,.2f} this session")
    if took_s is not None:
        parts.append(f"last turn {took_s:.1f} s")
    if pending:
        parts.append(
            f"{pending} approval{'s' if pending != 1 else ''} pending (hermesctl approvals)"
        )
    return " · ".join(parts)


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


def _error_of(preview: str) -> str:
    try:
        parsed = json.loads(preview)
    except ValueError:
        return preview[:120]
    if isinstance(parsed, dict) and "error" in parsed:
        return str(parsed["error"])[:120]
    return preview[:120]


def banner(
    info: dict[str, Any],
    model: str | None,
    session: dict[str, Any],
    tools: list[dict[str, Any]],
    style: Style,
    resumed: bool,
) -> str:
    """The chat banner: daemon version, model, session and the tools grouped by toolset."""
    lines = [
        style.bold(f"hermesd {info.get('daemon_version', '?')}")
        + f" · model {model or '(not configured: set model.base_url and model.default)'}"
    ]
    where = f"session {session['id']}"
    if session.get("title"):
        where += f" “{session['title']}”"
    if resumed:
        where += f" (resumed, {session.get('message_count', 0)} messages)"
    lines.append(where)
    shield = sandbox_text(info.get("sandbox"))
    if shield:
        lines.append(style.dim(shield) if not shield.startswith("sandbox: off") else shield)
    groups: dict[str, list[str]] = {}
    for tool in tools:
        if tool.get("available", True) and tool.get("enabled", True):
            groups.setdefault(str(tool.get("toolset") or "other"), []).append(str(tool["name"]))
    if groups:
        lines.append("Tools:")
        lines.extend(f"  {toolset}: {', '.join(names)}" for toolset, names in groups.items())
    else:
        lines.append("Tools: none")
    lines.append(style.dim("/help lists commands · Ctrl-C cancels a turn · Ctrl-D or /quit leaves"))
    return "\n".join(lines)


def render_history(messages: list[dict[str, Any]], ids: bool = False) -> list[str]:
    """A session's stored messages, readably: one block per message; with ``ids`` each starts
    with its message id (what ``sessions fork --upto`` takes)."""
    out: list[str] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content") or ""
        mark = f"#{m.get('id')} " if ids and m.get("id") is not None else ""
        if role == "tool":
            out.append(f"{mark}[tool {m.get('tool_name') or ''}] {content}")
            continue
        if content:
            out.append(f"{mark}[{role}] {content}")
            mark = " " * len(mark)
        for image in m.get("images") or []:  # attached with the message (session.send)
            out.append(f"{mark}[{role}] 📎 {image.get('mime')} image, {image.get('bytes')} bytes")
            mark = " " * len(mark)
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append(
                f"{mark}[{role}] ⚙ "
                f"{format_call(str(fn.get('name')), str(fn.get('arguments') or ''))}"
            )
    return out
