"""A corpus of hostile plugin manifests in one real hermesd: every one fails with a reason (or,
for a manifest that is not a regular file, is not a plugin at all), no plugin code runs, the
well-behaved plugin beside them loads, the daemon stays under 200 MB across reloads and
``plugins.list`` keeps answering. docs/reliability.md lists the corpus and the outcomes; with
``HERMES_RELIABILITY_FIGURES=path`` the measured figures are written there as JSON."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.plugin_factory import alias_bomb, write_plugin
from tests.support.reliability import rss_kb

RSS_BOUND_KB = 200 * 1024
MARKER_INIT = """
    from pathlib import Path

    def register(ctx):
        Path(__file__).with_name("registered").touch()
"""
# folder -> (manifest text, what the listing's reason must contain)
HOSTILE: dict[str, tuple[str, str]] = {
    "alias_bomb": (alias_bomb(), "YAML anchors (&l0) are not allowed"),
    "alias_only": ("name: *undefined\n", "YAML aliases (*undefined) are not allowed"),
    "merge_key": ("name: merge_key\n<<: {version: 1}\n", "YAML merge keys (<<) are not allowed"),
    "deep_nesting": ("name: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested deeper than 32"),
    "huge_integer": ("name: huge_integer\nversion: " + "7" * 6000 + "\n", "unreadable value"),
    "python_tag": ("name: !!python/object/apply:os.getpid []\n", "could not determine"),
    "list_name": ("name: [a, b]\n", "'name' must be a string, not a list"),
    "map_version": ("name: map_version\nversion: {major: 1}\n", "'version' must be a string"),
    "ansi_name": ('name: "ok\\e[2J"\n', "'name' contains control characters"),
    "long_description": (
        "name: long_description\ndescription: " + "d" * 5000 + "\n",
        "'description' is 5000 characters long; the limit is 1000",
    ),
    "ld_preload": ("name: ld_preload\nrequires_env: [LD_PRELOAD]\n", "LD_PRELOAD may not be set"),
    "pythonpath": (
        "name: pythonpath\nrequires_env:\n  - name: PYTHONPATH\n",
        "PYTHONPATH may not be set",
    ),
    "hermes_var": ("name: hermes_var\nrequires_env: [HERMES_HOME]\n", "HERMES_HOME may not be set"),
    "many_env": (
        "name: many_env\nrequires_env: [" + ",".join(f"V{i}" for i in range(5000)) + "]\n",
        "'requires_env' has 5000 entries; the limit is 256",
    ),
    "not_utf8": ("", "plugin.yaml is not UTF-8 text"),  # bytes written below
    "sparse_gigabyte": ("", "plugin.yaml is 1073741824 bytes; the limit is 65536"),
}


FIGURES: dict[str, float] = {}  # written out for docs/reliability.md


def start_timed(home: Path) -> tuple[DaemonProcess, float]:
    began = time.monotonic()
    daemon = start_daemon(home, env={"HERMES_BUNDLED_PLUGINS": str(short_tmpdir("nob-"))})
    return daemon, time.monotonic() - began


@pytest.fixture(scope="module")
def hostile() -> Iterator[DaemonProcess]:
    home = short_tmpdir()
    plugins = home / "plugins"
    for folder, (text, _) in HOSTILE.items():
        write_plugin(plugins, folder, MARKER_INIT, manifest=text)
    (plugins / "not_utf8" / "plugin.yaml").write_bytes(b"name: \xff\xfe\xfd\n")
    with (plugins / "sparse_gigabyte" / "plugin.yaml").open("wb") as f:
        f.truncate(1024**3)
    fifo = write_plugin(plugins, "fifo_manifest", MARKER_INIT, no_manifest=True)
    os.mkfifo(fifo / "plugin.yaml")  # a reader would wait for a writer forever
    zero = write_plugin(plugins, "dev_zero", MARKER_INIT, no_manifest=True)
    (zero / "plugin.yaml").symlink_to("/dev/zero")  # a reader would never reach the end
    write_plugin(plugins, "good")
    daemon, FIGURES["ready_s"] = start_timed(home)
    yield daemon
    daemon.stop()
    out = os.environ.get("HERMES_RELIABILITY_FIGURES")
    if out:
        with open(out, "w") as f:
            json.dump(FIGURES, f, indent=1, sort_keys=True)


def rows(daemon: DaemonProcess) -> dict[str, dict]:
    return {p["key"]: p for p in daemon.call("plugins.list")["plugins"]}


@pytest.mark.parametrize("folder", sorted(HOSTILE))
def test_each_hostile_manifest_fails_with_its_reason(hostile: DaemonProcess, folder: str) -> None:
    row = rows(hostile)[folder]
    needle = HOSTILE[folder][1]
    assert row["state"] == "error" and needle in row["reason"], row["reason"]
    assert row["reason"].startswith("Failed to parse plugin.yaml: ")
    assert "\n" not in row["line"]


def test_no_hostile_plugin_ran_and_the_good_one_loaded(hostile: DaemonProcess) -> None:
    listed = rows(hostile)
    assert listed["good"]["state"] == "loaded"
    plugins = hostile.home / "plugins"
    assert sorted(p.parent.name for p in plugins.glob("*/registered")) == []


def test_a_manifest_that_is_not_a_regular_file_makes_no_plugin(hostile: DaemonProcess) -> None:
    listed = rows(hostile)
    assert "fifo_manifest" not in listed and "dev_zero" not in listed


def test_the_daemon_stays_small_across_reloads(hostile: DaemonProcess) -> None:
    FIGURES["rss_mb_at_start"] = rss_kb(hostile.proc.pid) / 1024
    for _ in range(3):
        began = time.monotonic()
        result = hostile.call("plugins.reload")
        FIGURES["reload_s"] = time.monotonic() - began
        assert result["loaded"] == ["good"]
        assert len(result["failed"]) == len(HOSTILE)
        assert rss_kb(hostile.proc.pid) < RSS_BOUND_KB
    FIGURES["rss_mb_after_3_reloads"] = rss_kb(hostile.proc.pid) / 1024
    began = time.monotonic()
    hostile.call("plugins.list")
    FIGURES["list_ms"] = (time.monotonic() - began) * 1000
    assert hostile.call("ping")["pong"] is True


def test_a_daemon_with_the_good_plugin_alone_gives_the_baseline() -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "good")
    daemon, FIGURES["baseline_ready_s"] = start_timed(home)
    try:
        FIGURES["baseline_rss_mb"] = rss_kb(daemon.proc.pid) / 1024
        assert daemon.call("plugins.list")["plugins"][0]["state"] == "loaded"
    finally:
        daemon.stop()
    assert FIGURES["baseline_rss_mb"] < RSS_BOUND_KB / 1024


def test_the_text_listing_answers_with_one_line_per_plugin(hostile: DaemonProcess) -> None:
    text = hostile.call("plugins.list")["text"]
    lines = text.splitlines()
    assert lines[0] == f"Plugins ({len(HOSTILE) + 1}):"
    assert len(lines) == len(HOSTILE) + 2


def test_the_corpus_is_small_on_disk(hostile: DaemonProcess) -> None:
    # the attack is in the bytes a plugin ships, not in their number
    sizes = [
        (hostile.home / "plugins" / f / "plugin.yaml").stat().st_size
        for f in HOSTILE
        if f != "sparse_gigabyte"
    ]
    assert max(sizes) <= 64 * 1024
    assert Path(hostile.home / "plugins" / "alias_bomb" / "plugin.yaml").stat().st_size < 600
