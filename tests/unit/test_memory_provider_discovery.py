"""Finding memory provider plugins without importing them, and registering them through ctx."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hermesd.plugins.listing import plugin_line
from hermesd.plugins.memory_providers import ProviderFactory, discover_providers
from tests.support.plugin_factory import make_host, write_plugin

PROVIDER_INIT = """
from agent.memory_provider import MemoryProvider

raise RuntimeError("imported")  # discovery must never import this
"""


def test_a_home_folder_naming_memoryprovider_is_a_provider_without_plugin_yaml(
    tmp_path: Path,
) -> None:
    write_plugin(tmp_path / "plugins", "mem", PROVIDER_INIT, no_manifest=True)
    write_plugin(tmp_path / "plugins", "plain", "def register(ctx): pass\n", no_manifest=True)
    found = discover_providers(tmp_path, {"HERMES_BUNDLED_PLUGINS": str(tmp_path / "none")})
    assert [(c.name, c.source) for c in found] == [("mem", "user")]


def test_only_the_first_8_kb_of_init_is_read_for_the_markers(tmp_path: Path) -> None:
    padding = "#" + "x" * 8200 + "\n"
    write_plugin(tmp_path / "plugins", "late", padding + "MemoryProvider = 1\n", no_manifest=True)
    assert discover_providers(tmp_path, {"HERMES_BUNDLED_PLUGINS": str(tmp_path / "none")}) == []


def test_a_bundled_provider_wins_over_a_home_one_of_the_same_name(tmp_path: Path) -> None:
    bundled = tmp_path / "bundled"
    write_plugin(bundled / "memory", "mem", "def register(ctx): pass\n", no_manifest=True)
    write_plugin(tmp_path / "plugins", "mem", PROVIDER_INIT, no_manifest=True)
    [found] = discover_providers(tmp_path, {"HERMES_BUNDLED_PLUGINS": str(bundled)})
    assert (found.name, found.source) == ("mem", "bundled")


def test_the_general_loader_leaves_a_provider_folder_alone_and_lists_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(home / "plugins", "mem", PROVIDER_INIT)  # with a plugin.yaml, no kind
    built = make_host(home)
    [record] = built.plugins.load_all()
    assert (record.key, record.state) == ("mem", "memory-provider")
    assert record.provider_status == {"active": False, "available": None, "reason": ""}


def test_the_fallback_instantiates_the_first_memoryprovider_subclass(tmp_path: Path) -> None:
    write_plugin(
        tmp_path / "plugins",
        "classy",
        """
        from agent.memory_provider import MemoryProvider

        class Classy(MemoryProvider):
            name = "classy"
            def is_available(self): return True
            def initialize(self, session_id, **kw): pass
            def get_tool_schemas(self): return []
        """,
        no_manifest=True,
    )
    [found] = discover_providers(tmp_path, {"HERMES_BUNDLED_PLUGINS": str(tmp_path / "none")})
    provider = ProviderFactory(found).create()
    assert type(provider).__name__ == "Classy"


def test_a_second_registered_provider_is_rejected_with_the_reference_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    path = tmp_path / "declared"
    for name in ("first", "second"):
        write_plugin(
            path,
            name,
            f"""
            class P:
                name = "{name}-mem"

            def register(ctx):
                ctx.register_memory_provider(P())
            """,
        )
    built = make_host(home, env={"HERMES_PLUGIN_PATH": str(path)})
    with caplog.at_level(logging.WARNING):
        records = {r.key: r for r in built.plugins.load_all()}
    assert records["first"].memory_providers == ["first-mem"]
    assert records["second"].memory_providers == []
    assert (
        "Rejected memory provider 'second-mem' — external provider 'first-mem' is already "
        "registered. Only one external memory provider is allowed at a time. Configure which "
        "one via memory.provider in config.yaml." in caplog.messages
    )
    assert plugin_line(records["first"]) == "  ✓ first v1.0.0 (1 memory provider)"
    built.plugins.unload_all()
    assert built.plugins.services.memory_providers.provider is None
