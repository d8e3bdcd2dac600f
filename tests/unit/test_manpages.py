"""The manual pages in man/ are what scripts/gen-man makes from today's parsers."""

from __future__ import annotations

import subprocess
import sys

from tests.support.daemon import REPO


def test_the_manual_pages_match_the_parsers() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-man"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def test_hermesctls_page_documents_every_subcommand() -> None:
    from hermesctl.subcommands import INDEX

    page = (REPO / "man" / "hermesctl.1").read_text()
    assert [word for word in INDEX if f"hermesctl\\fR \\fI\\,{word}\\/" not in page] == []


def test_hermesds_page_documents_every_option() -> None:
    from hermesd.daemon.main import build_parser

    page = (REPO / "man" / "hermesd.8").read_text().replace("\\-", "-")
    options = [s for a in build_parser()._actions for s in a.option_strings if s.startswith("--")]
    options.remove("--help")  # argparse-manpage leaves -h out of every page
    assert [o for o in options if o not in page] == []
