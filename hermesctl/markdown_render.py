"""Rendering the model's streamed markdown on a terminal, one finished block at a time.

`MarkdownStream` collects text deltas and cuts them into markdown blocks (a paragraph, a
heading, a list, a fenced code block, a pipe table). The block being written is shown as it
streams, as plain text; when it closes (a blank line, the closing fence, the first line after a
table) that preview is erased and the block is written again rendered with ``rich``. What is
left when the answer ends, even an unclosed fence, is rendered by `flush`. Only the current
block is held and redrawn, so the work stays bounded by one block; a block taller than the
screen (its top has scrolled away and cannot be erased) is left as it streamed.

``rich`` is imported on the first render, never at start-up (``hermesctl status`` stays light);
plain output (a pipe, ``NO_COLOR``, ``--plain``) never uses this module.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import unicodedata
from typing import Any, TextIO

FENCE_MARKS = ("```", "~~~")
# Trailing padding rich adds to fill the width (before any closing escape codes): dropped so a
# narrower terminal later does not wrap empty cells, and copied text has no trailing spaces.
ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
PADDING = re.compile(r"[ ]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class MarkdownStream:
    """Turns streamed markdown text into rendered blocks written to ``out``."""

    def __init__(self, out: TextIO, width: int | None = None) -> None:
        self.out = out
        self.width = width
        self._pending = ""  # text after the last complete line
        self._block: list[str] = []  # complete lines of the block being collected
        self._fence: str | None = None  # the opening mark while inside a fenced block
        self._blocks_written = 0
        self._console: Any = None
        self._shown = ""  # the preview of the current block on the screen
        self._preview_lost = False  # the preview grew taller than the screen

    @property
    def holding(self) -> bool:
        """Whether some text is collected but not rendered yet."""
        return bool(self._block or self._pending)

    @property
    def previewing(self) -> bool:
        """Whether the cursor stands after a preview (not at the start of a clean line)."""
        return bool(self._shown)

    def feed(self, text: str) -> None:
        """Take a delta; render every block it completes."""
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._take_line(line)
        self._preview()

    def flush(self) -> None:
        """Render whatever is collected (the answer ended, or a tool call interrupts it)."""
        if self._pending:
            self._block.append(self._pending)
            self._pending = ""
        if self._fence is not None and self._block:
            self._block.append(self._fence)  # an unclosed fence still renders as code
        self._fence = None
        self._emit()

    def reset(self) -> None:
        """Forget what was collected (a retried request discards its partial answer)."""
        self._pending, self._block, self._fence = "", [], None
        self._end_preview()

    def new_answer(self) -> None:
        """The next block starts a new answer: no blank line before it."""
        self._blocks_written = 0

    def _take_line(self, line: str) -> None:
        stripped = line.strip()
        if self._fence is not None:
            self._block.append(line)
            if stripped.startswith(self._fence) and not stripped[len(self._fence) :].strip():
                self._fence = None
                self._emit()
            return
        mark = next((m for m in FENCE_MARKS if stripped.startswith(m)), None)
        if mark is not None:
            self._emit()  # the text before a fence is a block of its own
            self._block.append(line)
            self._fence = mark
            return
        if not stripped:
            self._emit()
            return
        in_table = bool(self._block) and self._block[-1].lstrip().startswith("|")
        if in_table and not stripped.startswith("|"):
            self._emit()  # a table ends at its first line without a pipe
        elif stripped.startswith("|") and self._block and not in_table:
            self._emit()  # a table after a paragraph line
        self._block.append(line)
        if stripped.startswith("#"):
            self._emit()  # a heading is a block of one line

    def _preview(self) -> None:
        """Show the current block's new text as it is (rendered once the block closes)."""
        current = "\n".join([*self._block, self._pending]) if self._block else self._pending
        if not current.startswith(self._shown):  # cannot happen while collecting; be safe
            return
        if not self._shown and current and self._blocks_written:
            self.out.write("\n")
            self._shown = "\n"
            current = "\n" + current
        self.out.write(current[len(self._shown) :])
        self.out.flush()
        self._shown = current

    def _end_preview(self) -> bool:
        """Erase the preview; False when it cannot be (taller than the screen)."""
        shown, self._shown = self._shown, ""
        if not shown:
            return True
        size = shutil.get_terminal_size((100, 24))
        width = self.width or size.columns
        rows = sum(max(1, -(-_cells(line) // width)) for line in shown.split("\n"))
        if rows >= size.lines:
            self.out.write("\n")
            return False
        up = rows - 1
        self.out.write((f"\x1b[{up}A" if up else "") + "\r\x1b[J")
        return True

    def _emit(self) -> None:
        if not self._block:
            self._end_preview()
            return
        if not self._end_preview():
            self._block = []
            self._blocks_written += 1
            return
        lines, self._block = self._block, []
        fenced = lines[0].lstrip().startswith(FENCE_MARKS)
        table = lines[0].lstrip().startswith("|")
        # A model's single newline means a new line (as chat clients show it), not a space.
        source = "\n".join(lines) if fenced or table else "  \n".join(lines)
        if not source.strip():
            return
        from rich.markdown import Markdown

        console = self._console_for_out()
        console.file = io.StringIO()
        console.print(Markdown(source, code_theme="ansi_dark"))
        lines = PADDING.sub(r"\1", console.file.getvalue()).split("\n")
        # one blank line between blocks: drop the empty rows rich puts around tables and code
        while lines and not ESCAPES.sub("", lines[0]).strip():
            lines.pop(0)
        while lines and not ESCAPES.sub("", lines[-1]).strip():
            lines.pop()
        rendered = "\n".join(lines) + "\x1b[0m\n"  # a reset on a dropped row still applies
        self.out.write(("\n" if self._blocks_written else "") + rendered)
        self._blocks_written += 1
        self.out.flush()

    def _console_for_out(self) -> Any:
        if self._console is None:
            from rich.console import Console

            width = self.width or shutil.get_terminal_size((100, 24)).columns
            self._console = Console(
                file=io.StringIO(),
                force_terminal=True,
                width=width,
                no_color=bool(os.environ.get("NO_COLOR")),
                highlight=False,
            )
        return self._console


def _cells(line: str) -> int:
    """Terminal columns ``line`` takes (wide characters count two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
