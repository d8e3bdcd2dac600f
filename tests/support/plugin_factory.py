"""Write real plugins for tests: plugin folders in temporary directories, and entry-point
distributions built as wheels and installed with pip into a target folder.

The wheel is assembled by hand (a zip with a ``*.dist-info`` folder: METADATA, WHEEL,
entry_points.txt, RECORD) because building one with setuptools needs the ``wheel`` package,
which the test environment may not have; pip then installs it for real, offline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from hermesd.daemon.services import build_plugin_host
from hermesd.plugins.host import PluginHost
from tests.support.waiting import wait_until

DEFAULT_INIT = "def register(ctx):\n    pass\n"


def write_plugin(
    root: Path,
    folder: str,
    init: str = DEFAULT_INIT,
    *,
    manifest: Mapping[str, Any] | str | None = None,
    files: Mapping[str, str] | None = None,
    tools_json: list[Any] | None = None,
    no_manifest: bool = False,
) -> Path:
    """Write ``root/folder`` with plugin.yaml, __init__.py (dedented) and extra files.

    ``manifest`` defaults to ``{name: <last folder part>, version: 1.0.0}``; a str is written
    as-is (for broken manifests).
    """
    path = root / folder
    path.mkdir(parents=True, exist_ok=True)
    if not no_manifest:
        if manifest is None:
            manifest = {"name": Path(folder).name, "version": "1.0.0"}
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(dict(manifest))
        (path / "plugin.yaml").write_text(text, encoding="utf-8")
    (path / "__init__.py").write_text(textwrap.dedent(init), encoding="utf-8")
    for name, content in (files or {}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(content), encoding="utf-8")
    if tools_json is not None:
        (path / "tools.json").write_text(json.dumps(tools_json), encoding="utf-8")
    return path


def alias_bomb(levels: int = 8) -> str:
    """A few hundred bytes that stand for 10**levels strings once the aliases are followed.

    Eight levels are 10**8 strings: about 700 MB once anything prints them (as ``str(name)``
    did), enough to fail a 200 MB bound yet not to take the test machine down if the
    protection were missing."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels):
        refs = ",".join([f"*l{n - 1}"] * 10)
        lines.append(f"l{n}: &l{n} [{refs}]")
    lines.append(f"name: *l{levels - 1}")
    return "\n".join(lines) + "\n"


def schema(name: str, **params: str) -> dict[str, Any]:
    """A small valid tool schema with string parameters (all required)."""
    return {
        "name": name,
        "description": f"Run {name} on the given input and return the result as JSON",
        "parameters": {
            "type": "object",
            "properties": {p: {"type": t, "description": f"the {p}"} for p, t in params.items()},
            "required": list(params),
        },
    }


def make_host(
    home: Path,
    env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> PluginHost:
    """A plugin host over ``home`` with no bundled plugins unless ``env`` says otherwise."""
    full_env = {"HERMES_BUNDLED_PLUGINS": str(home / "no-bundled")}
    full_env.update(env or {})
    return build_plugin_host(home, dict(config or {}), full_env, **kwargs)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(
    out_dir: Path,
    dist: str,
    version: str,
    files: Mapping[str, str],
    entry_points: Mapping[str, str],
    summary: str = "",
    author: str = "",
    group: str = "hermes_agent.plugins",
) -> Path:
    """A pure-Python wheel of ``files`` (path -> source) with entry points of ``group``
    (name -> ``module`` or ``module:attr``), written to ``out_dir``."""
    norm = re.sub(r"[-_.]+", "_", dist)
    info = f"{norm}-{version}.dist-info"
    contents: dict[str, bytes] = {p: textwrap.dedent(s).encode() for p, s in files.items()}
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: {summary}\n"
        f"Author: {author}\n\n"
    ).encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: hermesd-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents[f"{info}/entry_points.txt"] = (
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    ).encode()
    record = [_record_line(p, data) for p, data in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
    return wheel


def pip_install(wheels: list[Path], target: Path) -> None:
    """Install wheels into ``target`` with pip (no index, no dependencies)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        check=True,
        capture_output=True,
        text=True,
    )


@contextmanager
def on_sys_path(folder: Path, modules: list[str]) -> Iterator[None]:
    """Make ``folder`` importable (and its distributions visible) for the duration."""
    import importlib

    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in list(sys.modules):
            if any(name == m or name.startswith(m + ".") for m in modules):
                del sys.modules[name]
        importlib.invalidate_caches()


def written_lines(path: Path, what: str, timeout: float = 20) -> list[str]:
    """The lines a plugin appends to ``path``, once there is at least one whole line (a
    plugin opens the file before it writes, so its mere existence is not enough)."""
    wait_until(lambda: path.exists() and path.read_text().endswith("\n"), timeout, what)
    return path.read_text().splitlines()
