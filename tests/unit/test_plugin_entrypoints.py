"""Plugins installed as Python distributions with a ``hermes_agent.plugins`` entry point.

Two real wheels are built and installed with pip into a temporary target folder: one whose
entry point names the module (the guide's form), one naming the function (``pkg:register``, the
form 7 of 30 real plugins use).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesd.plugins.host import PluginHost
from tests.support.plugin_factory import build_wheel, make_host, on_sys_path, pip_install

MODULE_FORM = {
    "hermesd_ep_modform/__init__.py": """
        import json
        from .schemas import SCHEMA

        def register(ctx):
            ctx.register_tool("shout_text", "shout", SCHEMA,
                              lambda args: json.dumps({"out": args["text"].upper()}))
    """,
    "hermesd_ep_modform/schemas.py": """
        SCHEMA = {"description": "Shout the text and return it in capitals",
                  "parameters": {"type": "object", "required": ["text"],
                                 "properties": {"text": {"type": "string",
                                                         "description": "text to shout"}}}}
    """,
}
WRONG_GROUP = {
    "hermesd_ep_wronggroup/__init__.py": """
        def register(ctx):
            ctx.register_hook("post_tool_call", lambda **kw: None)
    """,
}
CALLABLE_FORM = {
    "hermesd_ep_callform/__init__.py": """
        def register(ctx):
            ctx.register_hook("pre_llm_call", lambda **kw: {"context": "from callform"})
    """,
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("entrypoints")
    wheels = [
        build_wheel(
            root / "dist",
            "hermes-plugin-modform",
            "2.3.1",
            MODULE_FORM,
            {"modform": "hermesd_ep_modform"},
            summary="Shouts text",
            author="Ada",
        ),
        build_wheel(
            root / "dist",
            "hermes-plugin-callform",
            "0.4",
            CALLABLE_FORM,
            {"callform": "hermesd_ep_callform:register"},
            summary="Adds context",
        ),
        build_wheel(
            root / "dist",
            "hermes-plugin-wronggroup",
            "1.0",
            WRONG_GROUP,
            {"wronggroup": "hermesd_ep_wronggroup"},
            group="hermes.plugins",
        ),
    ]
    target = root / "site"
    pip_install(wheels, target)
    modules = ["hermesd_ep_modform", "hermesd_ep_callform", "hermesd_ep_wronggroup"]
    with on_sys_path(target, modules):
        yield target


@pytest.fixture
def host(site: Path, tmp_path: Path) -> Iterator[PluginHost]:
    built = make_host(tmp_path / "home")
    built.plugins.load_all()
    yield built
    built.plugins.unload_all()


def test_pip_installed_the_distributions_into_the_target(site: Path) -> None:
    assert (site / "hermesd_ep_modform" / "__init__.py").is_file()
    assert list(site.glob("hermes_plugin_modform-2.3.1.dist-info/entry_points.txt"))


def test_entry_point_naming_a_module_loads(host: PluginHost) -> None:
    record = host.plugins.get("modform")
    assert record is not None and record.state == "loaded" and record.source == "entrypoint"
    result = asyncio.run(host.tools.call("shout_text", {"text": "hi"}))
    assert json.loads(result) == {"out": "HI"}


def test_entry_point_naming_the_register_function_loads(host: PluginHost) -> None:
    record = host.plugins.get("callform")
    assert record is not None and record.state == "loaded"
    assert asyncio.run(host.hooks.pre_llm_context(session_id="s")) == "from callform"


def test_entry_point_version_and_description_come_from_the_distribution(host: PluginHost) -> None:
    record = host.plugins.get("modform")
    assert record is not None
    assert (record.version, record.description, record.author) == ("2.3.1", "Shouts text", "Ada")
    assert record.path == "hermesd_ep_modform"


def test_entry_points_load_after_folder_plugins_alphabetically(host: PluginHost) -> None:
    keys = [r.key for r in host.plugins.records() if r.source == "entrypoint"]
    assert keys == ["callform", "modform", "wronggroup"]


def test_entry_point_plugins_obey_plugins_disabled(site: Path, tmp_path: Path) -> None:
    built = make_host(tmp_path / "home", config={"plugins": {"disabled": ["modform"]}})
    try:
        built.plugins.load_all()
        assert built.plugins.get("modform").state == "disabled"  # type: ignore[union-attr]
        assert built.tools.get("shout_text") is None
    finally:
        built.plugins.unload_all()


def test_the_mistaken_entry_point_group_is_read_with_a_warning(
    site: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    built = make_host(tmp_path / "home")
    with caplog.at_level("WARNING"):
        built.plugins.load_all()
    try:
        record = built.plugins.get("wronggroup")
        assert record is not None and record.loaded and record.hooks == ["post_tool_call"]
        assert (
            "Plugin 'wronggroup' (hermes-plugin-wronggroup) declares its entry point in group "
            "'hermes.plugins'; the group is 'hermes_agent.plugins'. Loaded all the same"
        ) in caplog.messages
    finally:
        built.plugins.unload_all()
