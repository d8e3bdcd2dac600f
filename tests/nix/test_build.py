"""The build-time checks the NixOS module runs, driven directly on real directories.

nix/link_plugins.py builds the extraPlugins folder, nix/check_python_env.py refuses two versions
of one distribution in hermesd's Python environment. Both run here as the module's builders run
them (a JSON file in, messages on stderr, exit status 1 on refusal); tests/nix/test_module.py
runs the plugin builder through the module itself. Neither Nix nor nixpkgs' lib is needed here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.daemon import REPO

LINK = REPO / "nix" / "link_plugins.py"
CHECK_ENV = REPO / "nix" / "check_python_env.py"
SITE = "lib/python3.13/site-packages"


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )


# --- link_plugins.py -----------------------------------------------------------------------------


def plugin(root: Path, name: str, manifest: str = "", init: bool = True) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "plugin.yaml").write_text(manifest)
    if init:
        (path / "__init__.py").write_text("def register(ctx):\n    pass\n")
    return path


def link(tmp_path: Path, sources: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "sources.json"
    spec.write_text(json.dumps(sources))
    return run(LINK, str(spec), str(tmp_path / "out"))


def test_a_store_hash_is_not_part_of_the_folder_name(tmp_path: Path) -> None:
    src = plugin(tmp_path, "0123456789abcdfghijklmnpqrsvwxyz-weather")
    proc = link(tmp_path, [{"path": str(src), "label": None}])
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["weather"]


def test_plugin_yml_is_accepted_too(tmp_path: Path) -> None:
    src = tmp_path / "legacy"
    src.mkdir()
    (src / "plugin.yml").write_text("name: legacy\n")
    (src / "__init__.py").write_text("")
    assert link(tmp_path, [{"path": str(src), "label": None}]).returncode == 0


def test_a_folder_without_a_manifest_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "not-a-plugin"
    src.mkdir()
    proc = link(tmp_path, [{"path": str(src), "label": "https://example.org/x"}])
    assert proc.returncode == 1
    assert f"{src} (https://example.org/x) has no plugin.yaml" in proc.stderr


def test_a_manifest_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    src = plugin(tmp_path, "broken", "name: [unclosed\n")
    proc = link(tmp_path, [{"path": str(src), "label": None}])
    assert proc.returncode == 1
    assert "plugin.yaml does not parse" in proc.stderr


def test_a_name_that_cannot_be_a_folder_is_refused(tmp_path: Path) -> None:
    src = plugin(tmp_path, "cat", "name: tools/cat\n")
    proc = link(tmp_path, [{"path": str(src), "label": None}])
    assert proc.returncode == 1
    assert "the name 'tools/cat' cannot be a plugin folder name" in proc.stderr


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    a = plugin(tmp_path / "a", "x", "name: same\n")
    b = plugin(tmp_path / "b", "y", "name: same\n")
    c = plugin(tmp_path / "c", "z", "name: z\n", init=False)
    proc = link(tmp_path, [{"path": str(p), "label": None} for p in (a, b, c)])
    assert proc.returncode == 1
    assert "two plugins are named 'same'" in proc.stderr and "has no __init__.py" in proc.stderr


# --- check_python_env.py --------------------------------------------------------------------------


def dist(store: Path, name: str, version: str) -> str:
    """A store path holding one installed distribution."""
    path = store / f"0123456789abcdfghijklmnpqrsvwxyz-python3.13-{name}-{version}"
    info = path / SITE / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(path)


def check_env(tmp_path: Path, roots: dict[str, list[str]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "roots.json"
    spec.write_text(
        json.dumps(
            {
                "sitePackages": SITE,
                "roots": [{"name": name, "closure": closure} for name, closure in roots.items()],
            }
        )
    )
    return run(CHECK_ENV, str(spec))


def test_shared_dependencies_at_one_version_are_fine(tmp_path: Path) -> None:
    requests = dist(tmp_path / "a", "requests", "2.32.3")
    same_again = dist(tmp_path / "b", "requests", "2.32.3")  # another build of the same version
    proc = check_env(
        tmp_path,
        {
            "hermesd": [dist(tmp_path, "hermesd", "0.1.0"), requests],
            "hermes-weather": [dist(tmp_path, "hermes-weather", "1.0"), same_again],
        },
    )
    assert proc.returncode == 0, proc.stderr


def test_two_versions_of_one_distribution_fail_naming_both(tmp_path: Path) -> None:
    old = dist(tmp_path / "a", "Requests", "2.31.0")
    new = dist(tmp_path / "b", "requests", "2.32.3")
    proc = check_env(
        tmp_path,
        {
            "hermesd": [dist(tmp_path, "hermesd", "0.1.0"), new],
            "hermes-weather": [dist(tmp_path, "hermes-weather", "1.0"), old],
        },
    )
    assert proc.returncode == 1
    assert "'requests' would be in the environment in 2 versions:" in proc.stderr
    assert f"2.31.0  {old}  (needed by hermes-weather)" in proc.stderr
    assert f"2.32.3  {new}  (needed by hermesd)" in proc.stderr
    assert "extraPythonPackages = ps: [ ... ]" in proc.stderr


def test_names_are_compared_after_pep_503_normalisation(tmp_path: Path) -> None:
    proc = check_env(
        tmp_path,
        {
            "a": [dist(tmp_path / "a", "python_dotenv", "1.0.0")],
            "b": [dist(tmp_path / "b", "Python.Dotenv", "1.0.1")],
        },
    )
    assert proc.returncode == 1
    assert "'python-dotenv'" in proc.stderr
