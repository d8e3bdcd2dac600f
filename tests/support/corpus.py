"""The plugin corpus: published Hermes plugins, pinned, installed for tests only.

tests/data/plugin_corpus/corpus.json names each plugin (distribution, version, entry-point key,
the config it needs, one representative call); tests/data/plugin_corpus/recordings/ holds what
each did in the reference (hermes-agent 0.19.0), made once with `corpus_record.py`. Plugins are
installed with their dependencies by ``pip install --target`` into a cache folder per plugin
(``$HERMESD_CORPUS_CACHE``, default ``~/.cache/hermesd-plugin-corpus``), never into the
project's environment, and reused on later runs. `Unreachable` says the package registry could
not be reached, so a test can skip with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "plugin_corpus"
CORPUS = DATA / "corpus.json"
RECORDINGS = DATA / "recordings"
#: files a host writes in HERMES_HOME by itself; what a plugin writes is everything else
HOST_FILES = ("state.db", "config.yaml", "logs/", ".skills_prompt_snapshot.json", ".env")


class Unreachable(Exception):
    """The package registry could not be reached to install a corpus plugin."""


_unreachable: str | None = None  # why the first install failed, in this process


def entries() -> list[dict[str, Any]]:
    """The corpus, in its order."""
    return list(json.loads(CORPUS.read_text())["plugins"])


def memory_providers() -> list[dict[str, Any]]:
    """The memory providers of the corpus, in their order."""
    return list(json.loads(CORPUS.read_text()).get("memory_providers", []))


def install_provider(entry: dict[str, Any], home: Path, python: str = sys.executable) -> Path:
    """Install memory provider ``entry`` (its package from the cache) into HERMES_HOME
    ``home`` the way its package says (its ``install`` command); the package's folder."""
    target = install(entry, python)
    run_install_command(entry, home, target, python)
    return target


def run_install_command(
    entry: dict[str, Any], home: Path, target: Path, python: str = sys.executable
) -> None:
    """Run ``entry``'s own ``install`` command (its package in ``target``) into HERMES_HOME
    ``home``, as its README tells a user to (a plugin without an entry point)."""
    argv = [a.replace("{home}", str(home)) for a in entry["install"]]
    env = {**os.environ, "PYTHONPATH": str(target), "HERMES_HOME": str(home)}
    done = subprocess.run(
        [python, *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{entry['name']} install failed: {done.stderr.strip()}")


def recording(name: str) -> dict[str, Any]:
    """What plugin ``name`` did in the reference."""
    return dict(json.loads((RECORDINGS / f"{name}.json").read_text()))


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "hermesd-plugin-corpus"
    return Path(os.environ.get("HERMESD_CORPUS_CACHE") or default)


def install(entry: dict[str, Any], python: str = sys.executable) -> Path:
    """The folder ``entry``'s distribution and its dependencies are installed in (installed now
    unless a previous run did); raises `Unreachable` when pip cannot reach the registry."""
    global _unreachable
    target = cache_dir() / f"{entry['dist']}-{entry['version']}"
    if (target / ".complete").exists():
        return target
    if _unreachable is not None:  # one failed install is enough to know: skip the rest at once
        raise Unreachable(_unreachable)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{entry['dist']}-", dir=target.parent))
    try:
        done = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--timeout",
                "30",
                "--retries",
                "1",
                "--target",
                str(scratch),
                f"{entry['dist']}=={entry['version']}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            _unreachable = (
                f"pip could not install {entry['dist']}=={entry['version']}: "
                + (done.stderr.strip().splitlines() or ["no output"])[-1]
            )
            raise Unreachable(_unreachable)
        (scratch / ".complete").write_text("")
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    except subprocess.TimeoutExpired as exc:
        raise Unreachable(f"pip did not finish installing {entry['dist']}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def plugin_files(files: list[str]) -> list[str]:
    """The files of ``files`` (paths relative to HERMES_HOME) a plugin wrote, not the host."""
    return sorted(f for f in files if not f.startswith(HOST_FILES))


def config_for(entry: dict[str, Any], model_url: str) -> str:
    """config.yaml for a home where ``entry`` is the only plugin (the reference's opt-in)."""
    lines = [
        "model:",
        f"  base_url: {model_url}",
        "  default: scripted-model",
        "  provider: custom",
        "plugins:",
        f"  enabled: [{entry['key']}]",
    ]
    return "\n".join(lines) + "\n" + entry.get("config", "")
