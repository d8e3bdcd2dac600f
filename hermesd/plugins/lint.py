"""``plugins lint``: check a plugin folder before it is published or installed.

`lint_folder` runs the checks a plugin author needs, as `Finding`s (severity, tool, parameter,
message): the manifest (present, parses, a usable name, version and description, rich
``requires_env`` entries with a description), ``__init__.py`` (present, valid Python, defines
``register``), ``tools.json`` (parses; every schema valid), and then — because most plugins build
their schemas in Python — loads the plugin in a **separate, throw-away process**
(``python -m hermesd.daemon.lint_child``, which builds the daemon's registries) with a
temporary HERMES_HOME, so the registration checks, rejected tools and the tools.json self-check
list apply to what the plugin really registers, while the daemon never imports it. That process
gets no variables of the daemon's but the ones Python needs; ``requires_env`` variables get a
placeholder value there.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from hermesd.plugins.manifest import ManifestError, find_manifest, parse_manifest
from hermesd.tools.schema import (
    Finding,
    ToolsJsonError,
    load_tools_json,
    validate_tool,
)

NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHILD_TIMEOUT = 60.0
_PASS_ENV = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT"}


def _error(message: str, tool: str = "", parameter: str = "") -> Finding:
    return Finding("error", tool, parameter, message)


def _warning(message: str, tool: str = "", parameter: str = "") -> Finding:
    return Finding("warning", tool, parameter, message)


def _static(folder: Path) -> tuple[list[Finding], list[str]]:
    """Checks that need no plugin code; also the requires_env names."""
    findings: list[Finding] = []
    env_names: list[str] = []
    manifest_file = find_manifest(folder)
    if manifest_file is None:
        findings.append(_error("no plugin.yaml (or plugin.yml)"))
    else:
        try:
            manifest = parse_manifest(manifest_file, default_name=folder.name)
        except (ManifestError, OSError, UnicodeDecodeError) as exc:
            findings.append(_error(f"{manifest_file.name} does not parse: {exc}"))
        else:
            if not NAME_OK.match(manifest.name):
                findings.append(
                    _error(
                        f"plugin name '{manifest.name}' must be letters, digits, "
                        "'.', '_' or '-' (it becomes a folder name)"
                    )
                )
            if not manifest.version:
                findings.append(_warning("manifest has no version"))
            if not manifest.description:
                findings.append(_warning("manifest has no description"))
            for req in manifest.requires_env:
                env_names.append(req.name)
                if not req.description:
                    findings.append(
                        _warning(
                            f"requires_env '{req.name}' has no description; "
                            "hermesctl plugins install shows it when prompting"
                        )
                    )
    init = folder / "__init__.py"
    if not init.is_file():
        findings.append(_error("no __init__.py"))
    else:
        try:
            tree = ast.parse(init.read_text(encoding="utf-8"), str(init))
        except (SyntaxError, UnicodeDecodeError) as exc:
            findings.append(_error(f"__init__.py is not valid Python: {exc}"))
        else:
            names = {
                n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            names |= {
                a.asname or a.name
                for n in tree.body
                if isinstance(n, ast.ImportFrom)
                for a in n.names
            }
            if "register" not in names:
                findings.append(_error("__init__.py defines no register(ctx) function"))
    tools_json = folder / "tools.json"
    if tools_json.is_file():
        try:
            declared = load_tools_json(tools_json)
        except ToolsJsonError as exc:
            findings.append(_error(str(exc)))
        else:
            for name, schema in declared.items():
                reason = validate_tool(name, schema)
                if reason:
                    findings.append(_error(reason, tool=name))
    return findings, env_names


def _child_env(home: Path, folder: Path, env_names: list[str]) -> dict[str, str]:
    # Only what Python needs: the code under lint never sees the daemon's secrets.
    env = {k: v for k, v in os.environ.items() if k in _PASS_ENV or k.startswith("LC_")}
    env.update(
        {
            "HERMES_HOME": str(home),
            "HERMES_PLUGIN_PATH": str(folder),
            "HERMES_BUNDLED_PLUGINS": str(home / "none"),
        }
    )
    for name in env_names:
        env.setdefault(name, "lint-placeholder")
    return env


def _load_in_child(folder: Path, env_names: list[str]) -> list[Finding]:
    with tempfile.TemporaryDirectory(prefix="hermes-lint-") as tmp:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "hermesd.daemon.lint_child", str(folder)],
                env=_child_env(Path(tmp), folder, env_names),
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT,
                stdin=subprocess.DEVNULL,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return [_error(f"loading the plugin did not finish within {CHILD_TIMEOUT:g}s")]
    try:
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [_error(f"loading the plugin failed: {tail}")]
    return [Finding(r["severity"], r["tool"], r["parameter"], r["message"]) for r in rows]


def lint_folder(path: Path) -> list[Finding]:
    """Every finding for the plugin folder ``path`` (errors first)."""
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        return [_error(f"{path} is not a folder")]
    findings, env_names = _static(folder)
    if not any(f.severity == "error" for f in findings):
        findings += _load_in_child(folder, env_names)
    unique = list(dict.fromkeys(findings))
    return sorted(unique, key=lambda f: f.severity != "error")


def format_findings(findings: list[Finding]) -> str:
    """One line per finding, then a summary line."""
    lines = []
    for f in findings:
        where = "/".join(p for p in (f.tool, f.parameter) if p)
        lines.append(f"{f.severity}: {where + ': ' if where else ''}{f.message}")
    errors = sum(f.severity == "error" for f in findings)
    lines.append(f"{errors} error(s), {len(findings) - errors} warning(s)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m hermesd.plugins.lint PATH``."""
    findings = lint_folder(Path(argv[0]))
    print(format_findings(findings))
    return 1 if any(f.severity == "error" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
