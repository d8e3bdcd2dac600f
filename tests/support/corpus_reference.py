"""Record what one published Hermes plugin does in the reference (hermes-agent 0.19.0).

Run with the Python of a scratch virtualenv that has ``hermes-agent==0.19.0`` (never this
project's); it imports nothing of hermesd. For one entry of tests/data/plugin_corpus/corpus.json
it makes a fresh ``HERMES_HOME``, enables the plugin alone, loads it with the reference's plugin
manager, records what it registered, runs the entry's probe the reference's way and prints one
JSON object: the recording tests/e2e/test_plugin_corpus.py compares hermesd with.

    PYTHONPATH=<plugin target dir> /tmp/ref-venv/bin/python tests/support/corpus_reference.py \\
        --entry NAME --model-url http://127.0.0.1:PORT/v1

``tests/support/corpus_record.py`` runs this for every entry and writes the recordings.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import CORPUS, config_for  # a sibling file, standard library only


def entry_by_name(name: str) -> dict[str, Any]:
    for entry in json.loads(CORPUS.read_text())["plugins"]:
        if entry["name"] == name:
            return dict(entry)
    raise SystemExit(f"no corpus entry {name}")


def files_of(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def run_probe(entry: dict[str, Any], home: Path, model_url: str) -> dict[str, Any]:
    probe = entry["probe"]
    kind = probe["kind"]
    try:
        if kind == "command":
            from hermes_cli.plugins import get_plugin_command_handler

            name, _, raw = probe["line"].lstrip("/").partition(" ")
            handler = get_plugin_command_handler(name)
            if handler is None:
                return {"error": f"no command {name}"}
            value = handler(raw)
            if inspect.isawaitable(value):
                value = asyncio.run(value)  # type: ignore[arg-type]
            return {"output": value}
        if kind == "tool":
            from model_tools import handle_function_call

            return {"output": handle_function_call(probe["name"], probe["args"], task_id="corpus")}
        if kind == "turn":
            from run_agent import AIAgent

            agent = AIAgent(
                base_url=model_url,
                api_key="corpus",
                model="scripted-model",
                provider="custom",
                quiet_mode=True,
                skip_context_files=True,
                skip_memory=True,
                max_iterations=4,
            )
            return {"output": agent.chat(probe["message"])}
    except Exception as exc:  # what the reference did is the recording, failures included
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"error": f"unknown probe kind {kind}"}


def record(entry: dict[str, Any], model_url: str) -> dict[str, Any]:
    # HOME is a scratch folder too, and HERMES_HOME its .hermes: plugins that fall back to
    # ~/.hermes write where they are counted, never into the real home
    root = Path(tempfile.mkdtemp(prefix="corpus-ref-"))
    home = root / ".hermes"
    home.mkdir()
    (home / "config.yaml").write_text(config_for(entry, model_url))
    os.environ["HOME"] = str(root)
    os.environ["HERMES_HOME"] = str(home)
    if "install" in entry:  # no entry point: its own command puts the plugin in place
        subprocess.run([sys.executable, *entry["install"]], check=True, capture_output=True)
    from hermes_cli import plugins as hp

    hp.discover_plugins()
    manager = hp.get_plugin_manager()
    loaded = manager._plugins.get(entry["key"])
    before = set(files_of(home))
    result = {
        "name": entry["name"],
        "dist": entry["dist"],
        "version": entry["version"],
        "key": entry["key"],
        "loaded": bool(loaded and loaded.enabled and not loaded.error),
        "error": loaded.error if loaded else "not discovered",
        "tools": sorted(loaded.tools_registered) if loaded else [],
        "hooks": sorted(set(loaded.hooks_registered)) if loaded else [],
        "middleware": sorted(loaded.middleware_registered) if loaded else [],
        "commands": sorted(loaded.commands_registered) if loaded else [],
        "cli_commands": sorted(
            n for n, c in manager._cli_commands.items() if c.get("plugin") == entry["key"]
        ),
        "skills": sorted(
            q for q, s in manager._plugin_skills.items() if s.get("plugin") == entry["key"]
        ),
    }
    result["probe"] = run_probe(entry, home, model_url)
    created = [f for f in files_of(home) if f not in before]
    result["files_after_probe"] = created
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--entry", required=True)
    parser.add_argument("--model-url", required=True)
    args = parser.parse_args()
    entry = entry_by_name(args.entry)
    out = record(entry, args.model_url)
    sys.stdout.write("CORPUS-RESULT " + json.dumps(out, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
