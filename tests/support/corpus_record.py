"""Make the reference recordings of the plugin corpus (run by hand, once per corpus change).

    .venv/bin/python -m tests.support.corpus_record --reference-python /tmp/ref-venv/bin/python

The reference python is that of a scratch virtualenv holding ``hermes-agent==0.19.0`` (outside
the repository). Each plugin is installed into its cache folder (`tests.support.corpus`), then
`corpus_reference.py` runs it alone in the reference against the scripted model server, and
its recording is written to tests/data/plugin_corpus/recordings/<name>.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tests.support import corpus
from tests.support.modelserver import ScriptedModelServer, calculator_rules

HERE = Path(__file__).resolve().parent


def record_one(entry: dict[str, object], python: str, model_url: str) -> dict[str, object]:
    target = corpus.install(entry)
    done = subprocess.run(
        [
            python,
            str(HERE / "corpus_reference.py"),
            "--entry",
            str(entry["name"]),
            "--model-url",
            model_url,
        ],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
        capture_output=True,
        text=True,
        timeout=300,
    )
    for line in done.stdout.splitlines():
        if line.startswith("CORPUS-RESULT "):
            result: dict[str, object] = json.loads(line.split(" ", 1)[1])
            result["files_after_probe"] = corpus.plugin_files(
                list(result["files_after_probe"])  # type: ignore[call-overload]
            )
            return result
    raise RuntimeError(f"{entry['name']}: no recording\n{done.stdout}\n{done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description="record the plugin corpus in the reference")
    parser.add_argument("--reference-python", required=True)
    parser.add_argument("--only", action="append", help="record just these entries")
    args = parser.parse_args()
    corpus.RECORDINGS.mkdir(parents=True, exist_ok=True)
    with ScriptedModelServer(rules=calculator_rules) as model:
        for entry in corpus.entries():
            if args.only and entry["name"] not in args.only:
                continue
            result = record_one(entry, args.reference_python, model.url)
            path = corpus.RECORDINGS / f"{entry['name']}.json"
            path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
            print(f"{entry['name']}: loaded={result['loaded']} probe={result['probe']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
