"""Every .nix file parses (the other tests/nix files evaluate them, with nixpkgs' real lib)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.daemon import REPO

NIX_FILES = sorted(p for p in REPO.rglob("*.nix") if ".venv" not in p.parts)


@pytest.mark.skipif(shutil.which("nix-instantiate") is None, reason="nix-instantiate missing")
@pytest.mark.parametrize("path", NIX_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_nix_file_parses(path) -> None:
    proc = subprocess.run(
        ["nix-instantiate", "--parse", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
