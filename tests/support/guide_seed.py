"""Extract the plugin guide's calculator from the guide seed, at test time only.

The guide seed is the upstream Hermes plugin guide as text. It is not part of the repository:
`HERMESD_GUIDE_SEED` names the file, else it is looked for as `seeds/000_*.txt` in a `shared`
folder beside the checkout, where CI puts it. Tests that need it skip, with `MISSING_REASON`,
when it is not there. The guide is prose with unfenced code: each file follows an intro line such
as `创建 tools.py —— …` and runs until the next prose line. This module finds those blocks and
writes them verbatim, so tests can check the bundled plugin against the guide's original. The
repository itself never contains the guide's code.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_ENV = "HERMESD_GUIDE_SEED"  # overrides the search, e.g. for a checkout elsewhere

# file name -> first words of the prose line that ends its code block in the guide
GUIDE_FILES: dict[str, str] = {
    "plugin.yaml": "这告诉 Hermes",
    "schemas.py": "为什么模式很重要",
    "tools.py": "处理函数的关键规则",
    "__init__.py": "register() 的作用",
}


_FULLWIDTH_COLON = "\uff1a"

#: Why a test that needs the guide seed was skipped.
MISSING_REASON = (
    "the Hermes plugin guide is not part of the repository and was not found: set "
    f"{SEED_ENV} to its text file (or put it in ../shared/seeds/ beside the checkout)"
)


def find_guide_seed() -> Path | None:
    """Return the guide seed file, or None when it is not available.

    ``HERMESD_GUIDE_SEED``, when set, is the only place looked at (a path that does not exist
    means no seed); otherwise ``seeds/000_*.txt`` in the ``shared`` folder beside the checkout.
    """
    override = os.environ.get(SEED_ENV)
    if override:
        candidates = [Path(override)]
    else:
        candidates = sorted((REPO_ROOT.parent / "shared" / "seeds").glob("000_*.txt"))
    for candidate in candidates:
        if candidate.is_file() and _intro_line("plugin.yaml") in candidate.read_text("utf-8"):
            return candidate
    return None


def extract_guide_calculator(seed_path: Path, dest: Path) -> Path:
    """Write the guide's four calculator files into `dest/calculator/`; return that folder."""
    lines = seed_path.read_text("utf-8").splitlines()
    folder = dest / "calculator"
    folder.mkdir(parents=True, exist_ok=True)
    for name, end_marker in GUIDE_FILES.items():
        (folder / name).write_text(_block(lines, name, end_marker), "utf-8")
    return folder


def _intro_line(name: str) -> str:
    return f"创建 {name}"


def _block(lines: list[str], name: str, end_marker: str) -> str:
    intro = _intro_line(name)
    # The intro is followed by a fullwidth colon or " —"; checking the next character keeps
    # `tools.py` from matching a longer name.
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if line.startswith(intro)
            and line[len(intro) : len(intro) + 1] in (_FULLWIDTH_COLON, " ", ":")
        ),
        None,
    )
    if start is None:
        raise ValueError(f"guide seed has no intro line for {name}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(end_marker)), None)
    if end is None:
        raise ValueError(f"guide seed has no end of the {name} block ({end_marker!r})")
    body = lines[start + 1 : end]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    if not body:
        raise ValueError(f"guide seed's {name} block is empty")
    return "\n".join(body) + "\n"
