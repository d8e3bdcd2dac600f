"""The wheel's package data (pyproject.toml) against the files it is meant to ship.

A pattern that matches nothing is stale; a file of a bundled plugin that no pattern matches
would be missing from an installed hermesd while every test run from the checkout passes.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where each package's files are in the checkout (setup.py maps the bundled plugins, and lists
# each of their folders as a package, so the "*" patterns apply in every one of them).
PACKAGE_DIRS = {"hermesd": REPO / "hermesd", "*": REPO / "plugins"}


def _package_data() -> dict[str, list[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    return data


def _shipped_files(folder: Path) -> list[Path]:
    return [
        p
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]


def test_every_package_data_pattern_matches_a_file() -> None:
    for package, patterns in _package_data().items():
        for pattern in patterns:
            found = PACKAGE_DIRS[package].glob(("**/" if package == "*" else "") + pattern)
            assert any(p.is_file() for p in found), (
                f"{package}: package-data pattern {pattern!r} matches no file"
            )


def test_every_file_of_the_bundled_plugins_is_shipped() -> None:
    folder = PACKAGE_DIRS["*"]
    matched = {p for pattern in _package_data()["*"] for p in folder.glob("**/" + pattern)}
    for path in _shipped_files(folder):
        is_module = path.suffix == ".py"  # every folder is a package (setup.py)
        assert path in matched or is_module, (
            f"{path.relative_to(REPO)} is in no package-data pattern for the bundled plugins"
        )


def test_every_console_script_names_a_callable() -> None:
    """`hermesd` once named the package `hermesd.daemon`, so the installed command raised
    TypeError while every test (which runs `python -m hermesd`) passed."""
    import importlib

    scripts: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))[
        "project"
    ]["scripts"]
    assert set(scripts) == {"hermesd", "hermesctl"}
    for name, target in scripts.items():
        module_name, _, attr = target.partition(":")
        target_obj = getattr(importlib.import_module(module_name), attr)
        assert callable(target_obj), f"{name} = {target!r} is not callable"
        assert not isinstance(target_obj, type(importlib)), f"{name} = {target!r} is a module"


def test_every_file_of_the_web_page_is_shipped() -> None:
    """The web page (hermesd/http/web/, docs/web.md) is served from package data."""
    folder = PACKAGE_DIRS["hermesd"]
    matched = {p for pattern in _package_data()["hermesd"] for p in folder.glob(pattern)}
    for path in _shipped_files(folder / "http" / "web"):
        assert path in matched, f"{path.relative_to(REPO)} is in no package-data pattern"
